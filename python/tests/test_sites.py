"""Call sites (python/distil/torch/_site.py): a module's later calls reuse what its first call
checked and planned, and give what the checked path gives, bit for bit (the same library call),
while every change that the checked path would treat differently leaves the site."""

import threading

import pytest
import torch

import distil
import distil.torch as dt
from conftest import DEVICES, gen, labels_for, leaf, log_probs
from test_fused import make


def fused_args(inputs, device, bias=True):
    xs, ws = leaf(inputs["xs"], device), leaf(inputs["ws"], device)
    bs = leaf(inputs["bs"], device) if bias else None
    return [xs, ws, inputs["xt"].to(device), inputs["wt"].to(device),
            inputs["labels"].to(device), bs, inputs["bt"].to(device) if bias else None]


def fused_result(mod, args):
    """(loss, parts..., grads) of one call and its backward."""
    out = mod(*args)
    loss = out[0] if isinstance(out, tuple) else out
    (loss * 0.75).backward()
    grads = [t.grad for t in args if isinstance(t, torch.Tensor) and t.requires_grad]
    return list(out if isinstance(out, tuple) else (out,)) + grads


def same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.shape == y.shape and x.dtype == y.dtype
        assert torch.equal(x, y), "the site's result differs from the checked path's"


def sites(mod):
    return len(mod._sites)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("parts,bias,lead", [(False, True, None), (True, False, None),
                                             (False, False, (2, 12))])
def test_fused_site_equals_checked_path(device, dtype, parts, bias, lead):
    inputs = make(21, dtype, bias=bias, lead=lead)
    mod = dt.FusedLinearJSDLoss(return_soft_hard_loss=parts, beta=0.3, temperature=1.5)
    first = fused_result(mod, fused_args(inputs, device, bias))
    assert sites(mod) == 1
    for _ in range(2):
        same(fused_result(mod, fused_args(inputs, device, bias)), first)
    assert sites(mod) == 1
    fresh = dt.FusedLinearJSDLoss(return_soft_hard_loss=parts, beta=0.3, temperature=1.5)
    same(fused_result(fresh, fused_args(inputs, device, bias)), first)


@pytest.mark.parametrize("device", DEVICES)
def test_setting_an_option_drops_the_sites(device):
    inputs = make(22, torch.float32)
    mod = dt.FusedLinearJSDLoss()
    fused_result(mod, fused_args(inputs, device))
    assert sites(mod) == 1
    mod.beta = 0.9
    assert sites(mod) == 0
    got = fused_result(mod, fused_args(inputs, device))
    same(got, fused_result(dt.FusedLinearJSDLoss(beta=0.9), fused_args(inputs, device)))
    mod.temperature = 0.0  # refused by the library at the next call, not by a stale site
    with pytest.raises(ValueError, match="temperature"):
        mod(*fused_args(inputs, device))


@pytest.mark.parametrize("device", DEVICES)
def test_fused_changes_leave_the_site(device):
    """Each change the checked path treats differently gets its own site or none."""
    inputs = make(23, torch.float32)
    mod = dt.FusedLinearJSDLoss()
    ref = fused_result(mod, fused_args(inputs, device))
    # fewer rows: a site of its own, both kept
    short = {k: (v[:10] if k in ("xs", "xt", "labels") else v) for k, v in inputs.items()}
    same(fused_result(mod, fused_args(short, device)),
         fused_result(dt.FusedLinearJSDLoss(), fused_args(short, device)))
    assert sites(mod) == 2
    same(fused_result(mod, fused_args(inputs, device)), ref)
    # a frozen head: no weight gradient
    args = fused_args(inputs, device)
    args[1] = args[1].detach()
    out = mod(*args)
    out.backward()
    assert args[1].grad is None and args[0].grad is not None
    # a site of its own that computes no weight gradient (grad_xs and grad_bs still wanted)
    assert sites(mod) == 3
    assert [s.want for s in mod._sites.values()].count((True, False, True)) == 1
    torch.testing.assert_close(out.detach(), ref[0].detach(), rtol=0, atol=0)
    # evaluation: no gradients at all
    with torch.no_grad():
        same([mod(*fused_args(inputs, device))], [ref[0].detach()])
    # int32 labels and a non-contiguous student input: the checked path converts them
    args = fused_args(inputs, device)
    args[4] = args[4].to(torch.int32)
    args[0] = leaf(inputs["xs"].T.contiguous().T, device)
    n = sites(mod)
    same(fused_result(mod, args)[:1], ref[:1])
    assert sites(mod) == n


@pytest.mark.parametrize("device", DEVICES)
def test_fused_site_bad_input_still_raises(device):
    inputs = make(24, torch.float32)
    mod = dt.FusedLinearJSDLoss()
    fused_result(mod, fused_args(inputs, device))
    args = fused_args(inputs, device)
    args[3] = args[3].to(torch.bfloat16)  # the teacher head in another dtype: a new key
    with pytest.raises(ValueError, match="teacher_weight"):
        mod(*args)
    if device == "cpu":  # cuda finds labels on the device and reports them at check()
        args = fused_args(inputs, device)
        args[4] = args[4].clone()
        args[4][2] = 10 ** 6
        with pytest.raises(distil.InvalidLabel, match="2"):
            mod(*args)


@pytest.mark.parametrize("device", DEVICES)
def test_fused_linear_jsd_site(device):
    inputs = make(25, torch.bfloat16, bias=False)
    mod = dt.FusedLinearJSD(jsd_beta=0.7, temperature=2.0)
    first = fused_result(mod, fused_args(inputs, device, bias=False)[:5])
    assert sites(mod) == 1
    same(fused_result(mod, fused_args(inputs, device, bias=False)[:5]), first)


@pytest.mark.parametrize("device", DEVICES)
def test_other_threads_get_their_own_sites(device):
    inputs = make(26, torch.float32)
    mod = dt.FusedLinearJSDLoss()
    first = fused_result(mod, fused_args(inputs, device))
    got = []
    worker = threading.Thread(target=lambda: got.append(fused_result(mod, fused_args(inputs,
                                                                                     device))))
    worker.start()
    worker.join()
    same(got[0], first)
    assert sites(mod) == 2  # a context (and so a site) per thread


@pytest.mark.parametrize("device", DEVICES)
def test_compile_after_eager_calls(device):
    """A module with sites compiles without a graph break: tracing never takes a site."""
    inputs = make(27, torch.float32)
    mod = dt.FusedLinearJSDLoss(beta=0.25)
    first = fused_result(mod, fused_args(inputs, device))
    compiled = torch.compile(mod, fullgraph=True)
    got = fused_result(compiled, fused_args(inputs, device))
    for a, b in zip(got, first):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)


def jsd_result(mod, x, y, lab, grad_out=1.0):
    loss = mod(x, y, lab)
    (loss * grad_out).backward()
    return [loss, x.grad]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_jsd_site_equals_checked_path(device, dtype):
    g = gen(28)
    x0, y0 = log_probs(g, (3, 5, 300), dtype), log_probs(g, (3, 5, 300), dtype)
    lab = labels_for(g, 15, 300).reshape(3, 5).to(device)
    mod = dt.JSD(beta=0.2)
    first = jsd_result(mod, leaf(x0, device), y0.to(device), lab, -1.5)
    assert sites(mod) == 1
    same(jsd_result(mod, leaf(x0, device), y0.to(device), lab, -1.5), first)
    same(jsd_result(dt.JSD(beta=0.2), leaf(x0, device), y0.to(device), lab, -1.5), first)
    mod.beta = 0.6
    same(jsd_result(mod, leaf(x0, device), y0.to(device), lab),
         jsd_result(dt.JSD(beta=0.6), leaf(x0, device), y0.to(device), lab))
    # a per-call normaliser never takes a site
    n = sites(mod)
    mod(leaf(x0, device), y0.to(device), lab, normaliser=7.0)
    assert sites(mod) == n


@pytest.mark.parametrize("device", DEVICES)
def test_jsd_site_without_grad(device):
    g = gen(29)
    x0, y0 = log_probs(g, (9, 257), torch.float32), log_probs(g, (9, 257), torch.float32)
    mod = dt.JSD()
    want = mod(x0.to(device), y0.to(device))
    again = mod(x0.to(device), y0.to(device))
    assert sites(mod) == 1 and not again.requires_grad
    assert torch.equal(want, again)
    x = leaf(x0, device)
    got = jsd_result(mod, x, y0.to(device), None)
    assert sites(mod) == 2 and torch.equal(got[0].detach(), want)
    assert torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0


@pytest.mark.parametrize("device", DEVICES)
def test_a_device_normaliser_call_leaves_the_sites_alone(device):
    """A call with N on the device (the checked path, which sets it on the plan's descriptor for
    that call) between two site calls: the site's own descriptor never sees that N."""
    inputs = make(30, torch.float32, bias=False)
    mod = dt.FusedLinearJSDLoss(beta=0.4)
    first = fused_result(mod, fused_args(inputs, device, False))
    n = torch.tensor(3.0, device=device)
    scaled = mod(*fused_args(inputs, device, False), normaliser=n)
    assert not torch.equal(scaled.detach(), first[0].detach())
    del n, scaled
    same(fused_result(mod, fused_args(inputs, device, False)), first)

    g = gen(31)
    x0, y0 = log_probs(g, (7, 300), torch.float32), log_probs(g, (7, 300), torch.float32)
    jsd = dt.JSD(beta=0.3)
    want = jsd_result(jsd, leaf(x0, device), y0.to(device), None)
    scaled = jsd(leaf(x0, device), y0.to(device), normaliser=torch.tensor(5.0, device=device))
    assert not torch.equal(scaled.detach(), want[0].detach())
    del scaled
    same(jsd_result(jsd, leaf(x0, device), y0.to(device), None), want)
