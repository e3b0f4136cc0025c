"""distil in an older TRL (1.12 or 1.13, from PyPI): use_distil on trainers built as TRL's own,
without liger-kernel, trained a few SGD steps on the CPU against TRL's own loss (within 1e-5
relative at every step). Runs only where such a TRL is installed, e.g.
    python3 -m venv --system-site-packages /tmp/trl112 && /tmp/trl112/bin/pip install trl==1.12.0
    /tmp/trl112/bin/python -m pytest python/tests/test_trl_older.py
(the CI's venv has TRL 1.16: test_trl.py)."""

import importlib
import os
import sys

import pytest

from distil.torch import trl as distil_trl

trl = pytest.importorskip("trl", reason="trl is not installed")
if not trl.__version__.startswith(("1.12.", "1.13.")):
    pytest.skip(
        f"these tests are for TRL 1.12 / 1.13, found {trl.__version__}", allow_module_level=True
    )
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
ex = importlib.import_module("trl_distill")


def same_steps(got, want, keys=("loss", "grad_norm"), tol=1e-5):
    assert len(got) == len(want) > 0
    for step, (g, w) in enumerate(zip(got, want, strict=True)):
        for key in keys:
            err = abs(g[key] - w[key]) / max(abs(w[key]), 1e-12)
            assert err <= tol, f"step {step + 1}: {key} {g[key]} vs TRL's {w[key]}"


def run(tmp_path, distil, *argv):
    from transformers import TrainerCallback

    a = ex.parser().parse_args(["--steps", "3", "--trl-loss", *argv])
    trainer = ex.build(a, str(tmp_path / "out"))
    if distil:
        distil_trl.use_distil(trainer)
        assert trainer.args.use_liger_kernel is False
    steps = []

    class Keep(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "loss" in logs:
                steps.append(dict(logs))

    trainer.add_callback(Keep())
    trainer.train()
    return steps


@pytest.mark.parametrize(
    "argv",
    [
        ("--trainer", "gkd", "--beta", "0.5"),
        ("--trainer", "gkd", "--beta", "0", "--accumulation", "2", "--batch", "2"),
        ("--trainer", "distillation", "--beta", "1", "--temperature", "2"),
    ],
    ids=["gkd-jsd", "gkd-forward-kl-accumulation", "distillation-reverse-kl-tau2"],
)
def test_use_distil_matches_trl(tmp_path, argv):
    same_steps(run(tmp_path, True, *argv), run(tmp_path, False, *argv))
    assert "liger_kernel" not in sys.modules
