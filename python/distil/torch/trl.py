"""Hand distil's FusedLinearJSDLoss to Hugging Face TRL's distillation trainers.

TRL's GKD-style trainers (GKDTrainer, GOLDTrainer and their kin) use Liger's fused loss when
`use_liger_kernel=True`: they build `LigerFusedLinearJSDLoss(beta=..., ignore_index=-100,
temperature=..., compiled=False, weight_hard_loss=0.0, weight_soft_loss=1.0)` at construction
and call it with keyword arguments (student_input, student_weight, teacher_input,
teacher_weight, true_labels, student_bias, teacher_bias) on 3-D hidden states. use_distil
replaces that module on a constructed trainer by distil's, with the same settings:

    trainer = GKDTrainer(..., args=GKDConfig(..., use_liger_kernel=True))
    distil.torch.trl.use_distil(trainer)
    trainer.train()

Liger's fused loss has no softcap or logit scale, so TRL cannot take it for models whose head
applies one (Gemma 2's final_logit_softcapping, Cohere's logit_scale); distil's can
(docs/SPEC.md §6): head_options_of(student.config, teacher.config) reads them from the model
configs, and use_distil(trainer, **options) passes them on.
"""

from .modules import FusedLinearJSDLoss

# The attributes TRL versions keep the Liger loss in.
_ATTRIBUTES = ("liger_jsd_loss", "liger_loss")
_SETTINGS = ("weight_hard_loss", "weight_soft_loss", "beta", "ignore_index", "temperature")


def distil_loss_like(liger_loss, **head_options) -> FusedLinearJSDLoss:
    """distil's FusedLinearJSDLoss with the settings of a Liger (or distil) loss module, plus
    head options (student_softcap=..., keywords of FusedLinearJSDLoss)."""
    kwargs = {k: getattr(liger_loss, k) for k in _SETTINGS if hasattr(liger_loss, k)}
    kwargs["return_soft_hard_loss"] = getattr(liger_loss, "return_soft_hard_loss", False)
    return FusedLinearJSDLoss(**kwargs, **head_options)


def head_options_of(student_config, teacher_config) -> dict:
    """The head options of two Hugging Face model configs: final_logit_softcapping (Gemma 2)
    as the softcap, logit_scale (Cohere) as the logit scale; absent or None: the default."""
    options = {}
    for who, config in (("student", student_config), ("teacher", teacher_config)):
        cap = getattr(config, "final_logit_softcapping", None)
        scale = getattr(config, "logit_scale", None)
        if cap:
            options[f"{who}_softcap"] = float(cap)
        if scale:
            options[f"{who}_logit_scale"] = float(scale)
    return options


def use_distil(trainer, **head_options):
    """Replace the trainer's Liger fused JSD loss by distil's; returns the names replaced.

    head_options (docs/SPEC.md §6): keywords of FusedLinearJSDLoss, e.g. from head_options_of.
    Raises ValueError when the trainer holds no such loss (construct it with
    use_liger_kernel=True, which TRL needs to take the fused path at all).
    """
    replaced = []
    for name in _ATTRIBUTES:
        loss = getattr(trainer, name, None)
        if loss is not None:
            setattr(trainer, name, distil_loss_like(loss, **head_options))
            replaced.append(name)
    if not replaced:
        raise ValueError("distil: invalid argument: trainer has none of "
                         f"{', '.join(_ATTRIBUTES)}: construct it with use_liger_kernel=True "
                         "(TRL takes its fused-loss path only then)")
    return replaced
