"""The TRL hook: a stand-in for TRL's GKD-style trainers that builds and calls Liger's fused
loss exactly as they do (keyword arguments, compiled=False, weight_hard_loss=0, 3-D shifted
hidden states and labels), switched to distil with distil.torch.trl.use_distil."""

import pytest
import torch

import distil.torch as dt
from distil.torch import trl as distil_trl
from conftest import check, gen, normal, ref_fused


class LigerLikeLoss(torch.nn.Module):
    """What TRL holds when Liger is installed: only its settings matter to use_distil."""

    def __init__(self, weight_hard_loss=0.5, weight_soft_loss=0.5, beta=0.5, ignore_index=-100,
                 temperature=1.0, compiled=True, chunk_size=1024, return_soft_hard_loss=False):
        super().__init__()
        self.weight_hard_loss, self.weight_soft_loss = weight_hard_loss, weight_soft_loss
        self.beta, self.ignore_index, self.temperature = beta, ignore_index, temperature
        self.compiled, self.chunk_size = compiled, chunk_size
        self.return_soft_hard_loss = return_soft_hard_loss

    def forward(self, *args, **kwargs):
        raise AssertionError("the Liger loss must have been replaced")


class StandInGKDTrainer:
    """The parts of TRL's GKDTrainer that touch the fused loss."""

    def __init__(self, student_head, teacher_head, beta, temperature):
        self.student_head, self.teacher_head = student_head, teacher_head
        self.liger_jsd_loss = LigerLikeLoss(beta=beta, ignore_index=-100,
                                            temperature=temperature, compiled=False,
                                            weight_hard_loss=0.0, weight_soft_loss=1.0)

    def compute_loss(self, student_last_hidden, teacher_last_hidden, input_ids, labels):
        student_hidden = student_last_hidden[:, :-1]
        teacher_hidden = teacher_last_hidden[:, :-1]
        labels_mask = labels != -100
        masked = torch.where(labels_mask, input_ids, torch.full_like(input_ids, -100))
        true_labels = masked[:, 1:].contiguous()
        return self.liger_jsd_loss(
            student_input=student_hidden,
            student_weight=self.student_head.weight,
            teacher_input=teacher_hidden,
            teacher_weight=self.teacher_head.weight,
            true_labels=true_labels,
            student_bias=getattr(self.student_head, "bias", None),
            teacher_bias=getattr(self.teacher_head, "bias", None),
        )


@pytest.mark.parametrize("bias", [False, True])
def test_use_distil_in_gkd_trainer(bias):
    g = gen(40)
    b, t, hs, ht, v = 3, 11, 16, 24, 97
    torch.manual_seed(0)
    s_head = torch.nn.Linear(hs, v, bias=bias)
    t_head = torch.nn.Linear(ht, v, bias=bias)
    trainer = StandInGKDTrainer(s_head, t_head, beta=0.3, temperature=0.9)
    assert distil_trl.use_distil(trainer) == ["liger_jsd_loss"]
    assert isinstance(trainer.liger_jsd_loss, dt.FusedLinearJSDLoss)
    assert trainer.liger_jsd_loss.weight_hard_loss == 0.0

    sh = normal(g, (b, t, hs), torch.float32).requires_grad_(True)
    th = normal(g, (b, t, ht), torch.float32)
    ids = torch.randint(0, v, (b, t), generator=g)
    labels = ids.clone()
    labels[:, :4] = -100  # the prompt
    loss = trainer.compute_loss(sh, th, ids, labels)
    loss.backward()

    rs = sh.detach().double().requires_grad_(True)
    rw = s_head.weight.detach().double().requires_grad_(True)
    lab = torch.where(labels != -100, ids, -100)[:, 1:].reshape(-1)
    ref, _, _ = ref_fused(rs[:, :-1].reshape(-1, hs), rw, th[:, :-1].reshape(-1, ht).double(),
                          t_head.weight.double(), lab,
                          s_head.bias.double() if bias else None,
                          t_head.bias.double() if bias else None,
                          weight_hard=0.0, weight_soft=1.0, beta=0.3, temperature=0.9)
    ref.backward()
    check("loss", loss, ref, 1e-5)
    check("grad hidden", sh.grad, rs.grad, 1e-4)
    check("grad head", s_head.weight.grad, rw.grad, 1e-4)


def test_use_distil_without_a_liger_loss():
    with pytest.raises(ValueError, match="use_liger_kernel"):
        distil_trl.use_distil(object())


def test_use_distil_with_softcapped_heads_of_different_sizes():
    """A Gemma-2-like pair (docs/SPEC.md §6): final_logit_softcapping from the configs, the
    teacher's head padded to more rows; the loss matches the float64 reference of §6."""
    from transformers import Gemma2Config, LlamaConfig
    from test_heads import ref_heads
    options = distil_trl.head_options_of(Gemma2Config(), LlamaConfig())
    assert options == {"student_softcap": 30.0}
    options = distil_trl.head_options_of(Gemma2Config(final_logit_softcapping=4.0),
                                         Gemma2Config(final_logit_softcapping=6.0))
    g = gen(41)
    b, t, hs, ht, v = 2, 9, 16, 24, 97
    torch.manual_seed(1)
    s_head = torch.nn.Linear(hs, v, bias=False)
    t_head = torch.nn.Linear(ht, v + 31, bias=False)  # a padded teacher head
    trainer = StandInGKDTrainer(s_head, t_head, beta=0.4, temperature=1.2)
    distil_trl.use_distil(trainer, **options)
    assert trainer.liger_jsd_loss.student_softcap == 4.0
    sh = normal(g, (b, t, hs), torch.float32).requires_grad_(True)
    th = normal(g, (b, t, ht), torch.float32)
    ids = torch.randint(0, v, (b, t), generator=g)
    loss = trainer.compute_loss(sh, th, ids, ids.clone())
    loss.backward()
    rs = sh.detach().double().requires_grad_(True)
    lab = ids[:, 1:].reshape(-1)
    ref = ref_heads(rs[:, :-1].reshape(-1, hs), s_head.weight.detach().double(),
                    th[:, :-1].reshape(-1, ht).double(), t_head.weight.detach().double(), lab,
                    weight_hard=0.0, weight_soft=1.0, beta=0.4, temperature=1.2,
                    student_softcap=4.0, teacher_softcap=6.0)[0]
    ref.backward()
    check("loss", loss, ref, 1e-5)
    check("grad hidden", sh.grad, rs.grad, 1e-4)
