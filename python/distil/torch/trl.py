"""distil's fused loss in Hugging Face TRL's distillation trainers (docs/TRL.md).

TRL 1.16 (the tested current release):
  - DistillationTrainer (trl.trainer): its loss, `_chunked_divergence_loss`, runs TRL's own
    chunked kernel. `DistilDistillationTrainer` (a subclass) or `use_distil(trainer)` computes it
    with distil's fused loss instead: the same hidden states, heads, completion mask, beta,
    temperature and head options (TRL reads the logit scale and softcap from the model configs),
    the same reduction (sum / num_items_in_batch when given, else the mean over valid positions)
    and the same logged `entropy` (distil's student entropy output, docs/SPEC.md §6).
  - GKDTrainer and GOLDTrainer (trl.experimental): TRL computes both models' full logits.
    `DistilGKDTrainer` / `DistilGOLDTrainer` or `use_distil(trainer)` take the loss from the
    models' last hidden states and heads through distil instead (the logits never exist in
    full), with TRL's own loss settings (GKD's loss at temperature 1, GOLD's at its temperature;
    the head options from the model configs). GOLD's cross-tokenizer ULD loss stays TRL's.
TRL 1.12 and 1.13: `use_distil(trainer)` hands distil's FusedLinearJSDLoss to the GKD and GOLD
  trainers' fused path (their `liger_loss`), built with or without `use_liger_kernel=True`, and
  switches off the model-layer patching that `use_liger_kernel` asks transformers for. Their
  DistillationTrainer already has the chunked loss of 1.16 and is handled as there.
Any other version: ValueError naming the supported ones.

The beta convention is TRL's and distil's alike (docs/SPEC.md §1): the mixture
(1 - beta) p_student + beta p_teacher; beta = 0 is the forward KL(teacher || student), beta = 1
the reverse KL. No tau^2 factor (TRL has none). Nothing here imports or needs liger-kernel.
"""

import contextlib
import functools
import inspect

import torch

from . import functional as F
from .modules import FusedLinearJSDLoss

SUPPORTED = ("1.12", "1.13", "1.16")
_SETTINGS = ("weight_hard_loss", "weight_soft_loss", "beta", "ignore_index", "temperature")


# ------------------------------------------------------------------------------- versions


def trl_version() -> str:
    """The installed TRL's "major.minor"."""
    import trl

    return ".".join(trl.__version__.split(".")[:2])


def _check_version() -> str:
    version = trl_version()
    if version not in SUPPORTED:
        raise ValueError(
            f"distil: TRL {version} is not supported by distil.torch.trl: supported "
            f"TRL versions are {', '.join(SUPPORTED)} (see docs/TRL.md)"
        )
    return version


# ----------------------------------------------------------------------------- head options


def head_options_of(student_config, teacher_config) -> dict:
    """The head options (docs/SPEC.md §6) of two Hugging Face model configs, as TRL 1.16 reads
    them: final_logit_softcapping (Gemma 2) as the softcap; logit_scale (Cohere),
    output_multiplier, lm_head_multiplier (Falcon-H1) or 1 / logits_scaling (Granite; times it
    for hyperclovax) as the logit scale. Absent or None: the default (no entry)."""
    options = {}
    for who, config in (("student", student_config), ("teacher", teacher_config)):
        config = config.get_text_config() if hasattr(config, "get_text_config") else config
        cap = getattr(config, "final_logit_softcapping", None)
        scale = _logit_scale_of(config)
        if cap:
            options[f"{who}_softcap"] = float(cap)
        if scale is not None and float(scale) != 1.0:
            options[f"{who}_logit_scale"] = float(scale)
    return options


def _logit_scale_of(config) -> float | None:
    for name in ("logit_scale", "output_multiplier", "lm_head_multiplier"):
        value = getattr(config, name, None)
        if value is not None:
            return value
    scaling = getattr(config, "logits_scaling", None)
    if scaling is not None:
        return scaling if getattr(config, "model_type", "") == "hyperclovax" else 1.0 / scaling
    return None


# ------------------------------------------------------- TRL 1.16: the chunked divergence loss


def _compute_dtype(hidden: torch.Tensor) -> torch.dtype:
    """TRL's: the autocast dtype where autocast is on, else the hidden states' own."""
    kind = hidden.device.type
    return torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else hidden.dtype


def _full(weight, bias, hidden):
    """FSDP2 DTensor heads made whole once (full_tensor()) and cast to the hidden states' dtype,
    as TRL does (an fp32 master copy under mixed precision); plain tensors as they are."""
    dtensor = getattr(getattr(torch.distributed, "tensor", None), "DTensor", None)
    if dtensor is not None and isinstance(weight, dtensor):
        weight = weight.full_tensor().to(hidden.dtype)
        if bias is not None:
            bias = bias.full_tensor()
    return weight, bias


def _gather_ctx(*params):
    """TRL's ZeRO-3 gathering of the heads for a direct access (a null context elsewhere)."""
    try:
        from trl.trainer.utils import maybe_gather_lm_head_ctx
    except ImportError:
        return contextlib.nullcontext()
    return maybe_gather_lm_head_ctx(*[p for p in params if p is not None])


def chunked_divergence_loss(
    student_hidden_states,
    teacher_hidden_states,
    student_lm_head_weight,
    teacher_lm_head_weight,
    completion_mask,
    beta,
    *,
    num_items_in_batch=None,
    student_lm_head_bias=None,
    teacher_lm_head_bias=None,
    student_logit_scale=1.0,
    teacher_logit_scale=1.0,
    student_final_logit_softcapping=None,
    teacher_final_logit_softcapping=None,
    temperature=1.0,
    entropy=True,
):
    """TRL 1.16's `_chunked_divergence_loss` (same arguments, same results) on distil's fused
    loss: (loss, sum of the valid positions' student entropy in nats, number of valid positions).

    Hidden states [B, K, H] (each model its own H), heads [V, H], completion_mask [B, K]. Only
    the valid positions are projected. The loss is sum / num_items_in_batch when given, else the
    mean over the valid positions (0 with none). Both models' inputs are taken in the student's
    compute dtype (autocast's where it is on: TRL's rule), since distil takes one dtype.
    entropy=False: no entropy (its sum is NaN; TRL logs no value): on cuda the loss then runs
    distil's fastest row kernel (docs/SPEC.md §6 "Student entropy")."""
    sw, sb = _full(student_lm_head_weight, student_lm_head_bias, student_hidden_states)
    tw, tb = _full(teacher_lm_head_weight, teacher_lm_head_bias, teacher_hidden_states)
    dtype = _compute_dtype(student_hidden_states)
    valid = completion_mask.reshape(-1) != 0
    n_valid = valid.sum()
    hs = student_hidden_states.reshape(-1, student_hidden_states.size(-1))[valid]
    ht = teacher_hidden_states.reshape(-1, teacher_hidden_states.size(-1))[valid]
    normaliser = None
    if num_items_in_batch is not None:
        normaliser = (
            num_items_in_batch.to(hs.device, torch.float32)
            if isinstance(num_items_in_batch, torch.Tensor)
            else float(num_items_in_batch)
        )
    with _gather_ctx(
        student_lm_head_weight, student_lm_head_bias, teacher_lm_head_weight, teacher_lm_head_bias
    ):
        cast = [None if t is None else t.to(dtype) for t in (hs, sw, sb, ht, tw, tb)]
        with torch.autocast(hs.device.type, enabled=False):
            out = F.fused_linear_jsd_loss(
                cast[0],
                cast[1],
                cast[3],
                cast[4],
                None,
                cast[2],
                cast[5],
                weight_hard_loss=0.0,
                weight_soft_loss=1.0,
                beta=float(beta),
                temperature=float(temperature),
                normaliser=normaliser,
                student_logit_scale=float(student_logit_scale),
                teacher_logit_scale=float(teacher_logit_scale),
                student_softcap=float(student_final_logit_softcapping or 0.0),
                teacher_softcap=float(teacher_final_logit_softcapping or 0.0),
                return_entropy=entropy,
            )
    if not entropy:  # out: the loss
        return out, torch.full((), float("nan"), device=out.device), n_valid
    return out[0], out[1].sum(), n_valid


def _bind_chunked(original, entropy):
    """chunked_divergence_loss called with the arguments of TRL's own `original` (its
    signature: 1.12 / 1.13 have a chunk_size that distil plans itself)."""
    signature = inspect.signature(original)

    @functools.wraps(original)
    def call(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        named = dict(bound.arguments)
        named.pop("chunk_size", None)
        return chunked_divergence_loss(**named, entropy=entropy)

    return call


@contextlib.contextmanager
def _chunked_loss_swapped(entropy=True):
    """TRL's module-level `_chunked_divergence_loss` replaced by distil's while the trainer's
    `_compute_loss` runs (it looks the function up when it calls it)."""
    from trl.trainer import distillation_trainer as module

    original = module._chunked_divergence_loss
    module._chunked_divergence_loss = _bind_chunked(original, entropy)
    try:
        yield
    finally:
        module._chunked_divergence_loss = original


def _distil_compute_loss(original):
    """A DistillationTrainer `_compute_loss` that runs `original` with distil's loss; the
    trainer's `distil_entropy` (default True) says whether the entropy TRL logs is computed."""

    def _compute_loss(self, *args, **kwargs):
        with _chunked_loss_swapped(getattr(self, "distil_entropy", True)):
            return original(self, *args, **kwargs)

    return _compute_loss


# -------------------------------------------------------------- TRL 1.16: GKD and GOLD


def _decoder(model):
    """The model's stack without its head (TRL 1.12's rule for its fused path)."""
    if hasattr(model, "get_decoder") and model.get_decoder() is not None:
        return model.get_decoder()
    return getattr(model, getattr(model, "base_model_prefix", "model"), model)


def _last_hidden(model, inputs):
    return _decoder(model)(
        input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"], use_cache=False
    ).last_hidden_state


def hidden_state_jsd_loss(trainer, model, inputs, num_items_in_batch=None, temperature=1.0):
    """The GKD / GOLD loss of TRL 1.16 (generalized_jsd_loss over the shifted full logits,
    positions with label -100 ignored, sum / num_items_in_batch when given, else the mean) from
    the last hidden states and heads through distil: the logits never exist in full. The student
    runs through its DDP / FSDP wrapper (TRL's forward redirection)."""
    from trl.models.utils import _ForwardRedirection

    unwrapped = trainer.accelerator.unwrap_model(model)
    redirect = getattr(trainer, "_distil_redirection", None) or _ForwardRedirection()
    trainer._distil_redirection = redirect
    student_hidden = redirect(model, unwrapped, _last_hidden, unwrapped, inputs)
    trainer.teacher_model.eval()
    teacher = trainer.accelerator.unwrap_model(trainer.teacher_model)
    with torch.no_grad():
        teacher_hidden = _last_hidden(teacher, inputs)
    labels = inputs["labels"][:, 1:]
    sh, th = student_hidden[:, :-1], teacher_hidden[:, :-1]
    student_head, teacher_head = unwrapped.get_output_embeddings(), teacher.get_output_embeddings()
    options = head_options_of(unwrapped.config, teacher.config)
    normaliser = None
    if num_items_in_batch is not None:
        normaliser = (
            num_items_in_batch.to(sh.device, torch.float32)
            if isinstance(num_items_in_batch, torch.Tensor)
            else float(num_items_in_batch)
        )
    sw, sb = _full(student_head.weight, student_head.bias, sh)
    tw, tb = _full(teacher_head.weight, teacher_head.bias, th)
    dtype = _compute_dtype(sh)
    with _gather_ctx(
        student_head.weight, student_head.bias, teacher_head.weight, teacher_head.bias
    ):
        cast = [None if t is None else t.to(dtype) for t in (sh, sw, sb, th, tw, tb)]
        with torch.autocast(sh.device.type, enabled=False):
            return F.fused_linear_jsd_loss(
                cast[0],
                cast[1],
                cast[3],
                cast[4],
                labels,
                cast[2],
                cast[5],
                weight_hard_loss=0.0,
                weight_soft_loss=1.0,
                beta=float(trainer.beta),
                temperature=float(temperature),
                normaliser=normaliser,
                **options,
            )


def _gkd_compute_loss(original):
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if return_outputs:  # the model's outputs are asked for: TRL's own path computes them
            return original(self, model, inputs, return_outputs, num_items_in_batch)
        # TRL 1.16's GKD calls generalized_jsd_loss without its temperature: 1
        return hidden_state_jsd_loss(self, model, inputs, num_items_in_batch, 1.0)

    return compute_loss


def _gold_compute_loss(original):
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        uld = getattr(self, "use_uld_loss", False) and getattr(self, "teacher_tokenizer", None)
        multimodal = bool(self._get_model_forward_kwargs(inputs))
        if return_outputs or uld or multimodal:  # TRL's own loss (cross-tokenizer ULD, VLMs)
            return original(self, model, inputs, return_outputs, num_items_in_batch)
        return hidden_state_jsd_loss(self, model, inputs, num_items_in_batch, self.temperature)

    return compute_loss


# ------------------------------------------------------------------- TRL 1.12 and 1.13


def distil_loss_like(liger_loss, **head_options) -> FusedLinearJSDLoss:
    """distil's FusedLinearJSDLoss with the settings of a Liger (or TRL 1.13) loss module, plus
    head options (student_softcap=..., keywords of FusedLinearJSDLoss)."""
    kwargs = {k: getattr(liger_loss, k) for k in _SETTINGS if hasattr(liger_loss, k)}
    kwargs["return_soft_hard_loss"] = getattr(liger_loss, "return_soft_hard_loss", False)
    return FusedLinearJSDLoss(**kwargs, **head_options)


def _fused_path_on(trainer, head_options):
    """TRL 1.12 / 1.13 GKD, GOLD: the trainer's fused path (liger_loss) taken with distil's
    loss, built like TRL builds Liger's (pure JSD at the trainer's beta; GKD at temperature 1,
    GOLD at its own), and the model-layer patching of use_liger_kernel switched off."""
    old = getattr(trainer, "liger_loss", None)
    if old is not None:
        loss = distil_loss_like(old, **head_options)
    else:
        temperature = 1.0 if type(trainer).__name__.endswith("GKDTrainer") else trainer.temperature
        loss = FusedLinearJSDLoss(
            weight_hard_loss=0.0,
            weight_soft_loss=1.0,
            beta=trainer.beta,
            temperature=temperature,
            **head_options,
        )
    trainer.liger_loss = loss
    trainer.use_liger_gkd_loss = True
    if getattr(trainer, "_forward_redirection", None) is None:
        from trl.models.utils import _ForwardRedirection

        trainer._forward_redirection = _ForwardRedirection()
    # transformers swaps the model's layers for Liger's Triton kernels at train() when asked
    trainer.args.use_liger_kernel = False
    return ["liger_loss"]


# --------------------------------------------------------------------------------- entry


def _patch(trainer, name, make):
    original = getattr(type(trainer), name)
    setattr(trainer, name, make(original).__get__(trainer))


def use_distil(trainer, **head_options):
    """Make a constructed TRL trainer compute its distillation loss with distil; returns what
    was replaced. DistillationTrainer (1.12, 1.13, 1.16) and TRL 1.16's GKDTrainer and
    GOLDTrainer: their loss (head options from the model configs, as TRL reads them;
    head_options are not taken there). TRL 1.12 / 1.13 GKD and GOLD: their fused path with
    distil's FusedLinearJSDLoss, head_options
    (keywords of FusedLinearJSDLoss, e.g. head_options_of(student.config, teacher.config))
    passed on; Liger's model patching switched off. ValueError for another TRL version or a
    trainer that has no distillation loss."""
    version = _check_version()
    names = [k.__name__ for k in type(trainer).__mro__]
    from trl.trainer import distillation_trainer as module

    if "DistillationTrainer" in names and hasattr(module, "_chunked_divergence_loss"):
        if head_options:
            raise ValueError(
                "distil: invalid argument: head_options: DistillationTrainer reads "
                "the head options from the model configs"
            )
        _patch(trainer, "_compute_loss", _distil_compute_loss)
        if getattr(trainer, "use_liger_kernel", False):  # 1.12 / 1.13: Liger's path, not ours
            trainer.use_liger_kernel = False
        trainer.args.use_liger_kernel = False  # no model-layer patching by transformers
        return ["_compute_loss"]
    if version == "1.16" and ("GKDTrainer" in names or "GOLDTrainer" in names):
        if head_options:
            raise ValueError(
                "distil: invalid argument: head_options: the GKD and GOLD trainers' "
                "head options come from the model configs"
            )
        make = _gkd_compute_loss if "GKDTrainer" in names else _gold_compute_loss
        _patch(trainer, "compute_loss", make)
        return ["compute_loss"]
    if version in ("1.12", "1.13") and hasattr(trainer, "use_liger_gkd_loss"):
        return _fused_path_on(trainer, head_options)
    raise ValueError(
        f"distil: invalid argument: trainer: a {type(trainer).__name__} of TRL "
        f"{version} has no distillation loss distil replaces (DistillationTrainer, "
        "GKDTrainer, GOLDTrainer)"
    )


def _subclass(base_path: str, name: str, method: str, make):
    module, _, attr = base_path.rpartition(".")
    base = getattr(__import__(module, fromlist=[attr]), attr)
    return type(
        name,
        (base,),
        {
            method: make(getattr(base, method)),
            "__module__": __name__,
            "__doc__": f"TRL's {attr} with its loss computed by distil (distil.torch.trl).",
        },
    )


_CLASSES = {
    "DistilDistillationTrainer": (
        "trl.trainer.DistillationTrainer",
        "_compute_loss",
        _distil_compute_loss,
    ),
    "DistilGKDTrainer": ("trl.experimental.gkd.GKDTrainer", "compute_loss", _gkd_compute_loss),
    "DistilGOLDTrainer": ("trl.experimental.gold.GOLDTrainer", "compute_loss", _gold_compute_loss),
}


@functools.cache
def _make_class(name):
    _check_version()
    if trl_version() != "1.16":
        raise ValueError(
            f"distil: {name} needs TRL 1.16 (use_distil(trainer) serves {', '.join(SUPPORTED)})"
        )
    return _subclass(*_CLASSES[name][:1], name, *_CLASSES[name][1:])


def __getattr__(name):
    """DistilDistillationTrainer, DistilGKDTrainer, DistilGOLDTrainer: TRL 1.16's trainers
    with distil's loss, made on first use (TRL is imported only then)."""
    if name in _CLASSES:
        return _make_class(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
