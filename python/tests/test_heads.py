"""The fused loss's head options (docs/SPEC.md §6) through distil.torch: heads of different
vocabulary sizes, per-head logit scale and softcap, a teacher temperature, the per-row LSEs;
against a float64 torch reference, eager and under torch.compile(fullgraph=True), and opcheck."""

import pytest
import torch
from conftest import (  # noqa: F401
    DEVICES,
    DTYPES,
    bounds,
    check,
    fused_op_call,
    gen,
    jsd_op_call,
    labels_for,
    leaf,
    normal,
    ref_fused,
)

import distil.torch as dt

HEAD_OPTIONS = (
    "student_logit_scale",
    "student_softcap",
    "teacher_logit_scale",
    "teacher_softcap",
    "teacher_temperature",
)


def ref_heads(
    xs,
    ws,
    xt,
    wt,
    labels,
    bs=None,
    bt=None,
    weight_hard=0.5,
    weight_soft=0.5,
    beta=0.5,
    temperature=1.0,
    ignore_index=-100,
    chunk_rows=0,
    **heads,
):
    """(loss, hard, soft, student_lse, teacher_lse) in float64 (conftest.ref_fused with the head
    options of docs/SPEC.md §6; chunk_rows: the module's, which the result does not depend on)."""
    del chunk_rows
    unknown = set(heads) - set(HEAD_OPTIONS)
    assert not unknown, f"ref_heads does not model {unknown}"
    return ref_fused(
        xs,
        ws,
        xt,
        wt,
        labels,
        bs,
        bt,
        weight_hard,
        weight_soft,
        beta,
        temperature,
        ignore_index,
        heads=heads,
    )


def make(seed, dtype, t=24, vs=517, vt=517, hs=32, ht=48, std=1.0):
    g = gen(seed)
    return dict(
        xs=normal(g, (t, hs), dtype),
        ws=normal(g, (vs, hs), dtype, 0.3 * std),
        xt=normal(g, (t, ht), dtype),
        wt=normal(g, (vt, ht), dtype, 0.3 * std),
        bs=normal(g, (vs,), dtype, 0.5),
        bt=normal(g, (vt,), dtype, 0.5),
        labels=labels_for(g, t, min(vs, vt)),
    )


def run(device, dtype, inputs, parts=False, **kw):
    """The module's results and gradients against ref_heads on the same (rounded) inputs."""
    xs, ws, bs = (leaf(inputs[k], device) for k in ("xs", "ws", "bs"))
    xt, wt, bt, lab = (inputs[k].to(device) for k in ("xt", "wt", "bt", "labels"))
    out = dt.FusedLinearJSDLoss(return_soft_hard_loss=parts, return_lse=True, **kw)(
        xs, ws, xt, wt, lab, bs, bt
    )
    loss, ls, lt = (out[0], out[3], out[4]) if parts else out
    assert not ls.requires_grad and not lt.requires_grad
    loss.backward()
    r = {k: v.double() if v.is_floating_point() else v for k, v in inputs.items()}
    rxs, rws, rbs = (r[k].requires_grad_(True) for k in ("xs", "ws", "bs"))
    want = ref_heads(rxs, rws, r["xt"], r["wt"], r["labels"], rbs, r["bt"], **kw)
    want[0].backward()
    lb, gb = bounds(dtype, fused=True)
    check("loss", loss, want[0], lb)
    if parts:
        check("soft", out[1], want[2], lb)
        check("hard", out[2], want[1], lb)
    check("student_lse", ls, want[3], lb)
    check("teacher_lse", lt, want[4], lb)
    check("grad_student_input", xs.grad, rxs.grad, gb)
    check("grad_student_weight", ws.grad, rws.grad, gb)
    check("grad_student_bias", bs.grad, rbs.grad, gb)
    return xs, ws, bs


HEADS = {
    "softcap": dict(student_softcap=3.0, teacher_softcap=5.0),
    "scale": dict(student_logit_scale=0.6, teacher_logit_scale=1.7),
    "gemma2": dict(student_softcap=30.0, teacher_softcap=30.0, temperature=2.0),
    "scale+cap": dict(student_logit_scale=2.0, student_softcap=4.0, teacher_logit_scale=0.5),
    "teacher_temperature": dict(temperature=0.7, teacher_temperature=2.5, beta=0.2),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(HEADS))
def test_head_options_against_reference(device, dtype, name):
    run(
        device, dtype, make(30, dtype, std=6.0 if "cap" in name else 1.0), parts=True, **HEADS[name]
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("vs,vt", [(517, 600), (600, 517)])
def test_vocabularies_of_different_sizes(device, vs, vt):
    """The student's rows beyond the common prefix get gradient 0; the teacher's extra rows are
    never read (NaN there changes nothing)."""
    inputs = make(31, torch.float32, vs=vs, vt=vt)
    inputs["wt"][min(vs, vt) :] = float("nan")
    inputs["bt"][min(vs, vt) :] = float("nan")
    _, ws, bs = run(device, torch.float32, inputs, student_softcap=8.0, chunk_rows=5)
    assert torch.all(ws.grad[min(vs, vt) :] == 0) and torch.all(bs.grad[min(vs, vt) :] == 0)


@pytest.mark.parametrize("device", DEVICES)
def test_lse_of_ignored_rows_and_3d(device):
    """LSEs of every row (ignored ones too), shaped like the leading dimensions."""
    inputs = make(32, torch.float32, t=12)
    inputs["labels"][::2] = -100
    xs = inputs["xs"].reshape(3, 4, -1).to(device)
    xt = inputs["xt"].reshape(3, 4, -1).to(device)
    loss, ls, lt = dt.fused_linear_jsd_loss(
        xs,
        inputs["ws"].to(device),
        xt,
        inputs["wt"].to(device),
        inputs["labels"].reshape(3, 4).to(device),
        teacher_softcap=2.0,
        return_lse=True,
    )
    r = {k: v.double() if v.is_floating_point() else v for k, v in inputs.items()}
    want = ref_heads(r["xs"], r["ws"], r["xt"], r["wt"], r["labels"], teacher_softcap=2.0)
    assert ls.shape == (3, 4) and lt.shape == (3, 4)
    check("loss", loss, want[0], 1e-5)
    check("student_lse", ls.reshape(-1), want[3], 1e-5)
    check("teacher_lse", lt.reshape(-1), want[4], 1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_fused_linear_jsd_module_options(device):
    inputs = make(33, torch.float32, vs=300, vt=280)
    xs, ws = leaf(inputs["xs"], device), leaf(inputs["ws"], device)
    mod = dt.FusedLinearJSD(0.3, -100, 1.5, student_softcap=4.0, teacher_temperature=3.0)
    loss = mod(xs, ws, inputs["xt"].to(device), inputs["wt"].to(device))
    loss.backward()
    r = {k: v.double() if v.is_floating_point() else v for k, v in inputs.items()}
    rxs, rws = r["xs"].requires_grad_(True), r["ws"].requires_grad_(True)
    every = torch.zeros_like(r["labels"])
    want = ref_heads(
        rxs,
        rws,
        r["xt"],
        r["wt"],
        every,
        weight_hard=0.0,
        weight_soft=1.0,
        beta=0.3,
        temperature=1.5,
        student_softcap=4.0,
        teacher_temperature=3.0,
    )
    want[0].backward()
    check("loss", loss, want[0], 1e-5)
    check("grad_student_input", xs.grad, rxs.grad, 1e-4)
    check("grad_student_weight", ws.grad, rws.grad, 1e-4)


@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph_with_options(device):
    inputs = make(34, torch.float32, vs=517, vt=530)
    kw = dict(student_softcap=5.0, teacher_logit_scale=1.3, teacher_temperature=2.0)

    class Head(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.loss = dt.FusedLinearJSDLoss(return_lse=True, **kw)

        def forward(self, xs, ws, xt, wt, lab, bs, bt):
            return self.loss(xs, ws, xt, wt, lab, bs, bt)

    compiled = torch.compile(Head(), fullgraph=True)
    xs, ws, bs = (leaf(inputs[k], device) for k in ("xs", "ws", "bs"))
    loss, ls, lt = compiled(
        xs,
        ws,
        inputs["xt"].to(device),
        inputs["wt"].to(device),
        inputs["labels"].to(device),
        bs,
        inputs["bt"].to(device),
    )
    (loss * 1.5).backward()
    r = {k: v.double() if v.is_floating_point() else v for k, v in inputs.items()}
    rxs, rws, rbs = (r[k].requires_grad_(True) for k in ("xs", "ws", "bs"))
    want = ref_heads(rxs, rws, r["xt"], r["wt"], r["labels"], rbs, r["bt"], **kw)
    (want[0] * 1.5).backward()
    check("compiled loss", loss, want[0], 1e-5)
    check("compiled student_lse", ls, want[3], 1e-5)
    check("compiled teacher_lse", lt, want[4], 1e-5)
    check("compiled grad_student_input", xs.grad, rxs.grad, 1e-4)
    check("compiled grad_student_weight", ws.grad, rws.grad, 1e-4)
    check("compiled grad_student_bias", bs.grad, rbs.grad, 1e-4)


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_with_options(device):
    from distil.torch import _ops

    i = {k: v.to(device) for k, v in make(35, torch.float32, vs=200, vt=190).items()}
    req = [i[k].detach().requires_grad_(True) for k in ("xs", "ws", "bs")]
    args, kwargs = fused_op_call(
        req[0],
        req[1],
        req[2],
        i["xt"],
        i["wt"],
        i["bt"],
        i["labels"],
        chunk_rows=7,
        student_logit_scale=1.5,
        student_softcap=6.0,
        teacher_logit_scale=0.8,
        teacher_temperature=2.0,
        outputs=dict(grad_hidden=True, grad_weight=True, grad_bias=True, lse=True),
    )
    torch.library.opcheck(_ops.fused_op, args, kwargs)


@pytest.mark.parametrize("device", DEVICES)
def test_bad_head_options_raise_with_message(device):
    i = {k: v.to(device) for k, v in make(36, torch.float32).items()}
    args = [i["xs"], i["ws"], i["xt"], i["wt"], i["labels"]]
    for name, value in [
        ("student_softcap", -1.0),
        ("teacher_softcap", float("inf")),
        ("student_logit_scale", 0.0),
        ("teacher_logit_scale", float("nan")),
        ("teacher_temperature", -2.0),
    ]:
        with pytest.raises(ValueError, match=name):
            dt.FusedLinearJSDLoss(**{name: value})(*args)
    lab = i["labels"].clone()
    lab[0] = 516  # beyond a teacher of 500 rows: outside the common prefix
    with pytest.raises(ValueError, match="label"):
        dt.FusedLinearJSDLoss()(i["xs"], i["ws"], i["xt"], i["wt"][:500], lab)
        dt.check()
