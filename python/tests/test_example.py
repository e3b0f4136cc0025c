"""End to end, as a user would: examples/distill_tiny.py for a few steps on the CPU. At every
step distil's loss and the student's gradients (every parameter, through the whole decoder)
equal those of the same loss in plain PyTorch on float64 logits within docs/SPEC.md §3, and
the loss falls."""

import os
import sys

import pytest
import torch

pytest.importorskip(
    "transformers", reason="transformers is not installed: the tiny distillation example is skipped"
)
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
import distill_tiny as ex  # noqa: E402

STEPS = 40


def _rel(a, b):
    return ((a - b).norm() / b.norm()).item() if b.norm() > 0 else a.norm().item()


def test_tiny_distillation_matches_pytorch_and_learns():
    student, teacher = ex.make_models(vocab=256)
    data = ex.MarkovData(256)
    opt = torch.optim.AdamW(student.parameters(), lr=3e-3)
    loss_fn = ex.distil_loss_fn()
    params = [p for p in student.parameters() if p.requires_grad]
    losses = []
    for step in range(STEPS):
        ids = data.batch(4, 32)
        sh, th, labels = ex.head_inputs(student, teacher, ids)
        ws, wt = student.lm_head.weight, teacher.lm_head.weight
        loss = loss_fn(sh, ws, th, wt, labels)
        grads = torch.autograd.grad(loss, params, retain_graph=True)
        ref = ex.torch_loss(sh.double(), ws.double(), th.double(), wt.double(), labels)
        ref_grads = torch.autograd.grad(ref, params)
        err = abs(loss.item() - ref.item()) / abs(ref.item())
        assert err <= 1e-5, f"step {step}: loss {loss.item()} vs {ref.item()} ({err:.2e})"
        for p, g, r in zip(params, grads, ref_grads, strict=False):
            e = _rel(g.double(), r)
            assert e <= 1e-4, f"step {step}: a {tuple(p.shape)} gradient is off by {e:.2e}"
        for p, g in zip(params, grads, strict=False):
            p.grad = g
        opt.step()
        losses.append(loss.item())
    print("losses:", " ".join(f"{v:.3f}" for v in losses[::8]))
    assert sum(losses[-5:]) / 5 < 0.9 * sum(losses[:5]) / 5, "the loss did not fall"
