#!/usr/bin/env python3
"""fp8_teacher.py - what the fp8 teacher head (docs/SPEC.md §6) costs in accuracy and gains in
speed, through distil.torch, on a realistic peaky, Zipf-like teacher.

The teacher (hidden states xt [T, Ht], head Wt [V, Ht], bias bt [V], all in --dtype) is built so
that its logits look like a language model's:
  - a frequency direction u (unit, [Ht]): Wt[j] = a_j u + r_j with a_j = -zipf * log(rank_j)
    (token j's rank in a random permutation) and r_j ~ N(0, 1/Ht): every row's logits carry
    log p_unigram = -zipf log(rank), a Zipf law;
  - context: xt[i] = c u + g_i + kappa r_{k_i} / |r_{k_i}|^2, g_i ~ N(0, 1), k_i drawn from the
    Zipf law: row i is peaky on its own token k_i (logit boost kappa) over the Zipf background;
  - optionally (--outliers N) N hidden channels 20x larger in every xt row and Wt column, the
    "massive activations" of real LLMs, which set the per-row e4m3 scale (amax / 448) and so
    make e4m3 coarser for every other channel.
--peak (kappa) and --zipf set how peaky; the script prints the teacher's mean top-1 probability
and entropy so that the regime can be read off. The student (Hs = Ht / 2) is a random head of
the same vocabulary with its own hidden states, fp32 loss as distil computes it.

Reported, for each T:
  kl_mean, kl_max   KL(p_fp8 || p_exact) over the rows of the teacher distribution at the
                    temperature: p_fp8 from the fp8 head, p_exact from the exact head on the same
                    (--dtype) inputs. The mean is distil's own: the fused loss with divergence
                    forward_kl, weight_hard 0, the student head set to the teacher's exact head
                    and the teacher's the fp8 one (loss = mean_i KL(p_fp8,i || p_exact,i)); the
                    max is from a float64 torch emulation of the SPEC formula (chunked), whose
                    mean is printed beside distil's as a check
  loss_exact, loss_fp8, loss_rel   the distillation loss (weights 0.5 / 0.5, JSD beta 0.5)
                    with the exact and the fp8 teacher head, and |fp8 - exact| / exact
  ms_exact, ms_fp8, speedup   median ms of loss + gradients (forward + backward) of
                    FusedLinearJSDLoss, CUDA events around --queue calls (CPU: wall time)
  ms_fp8_once, speedup_once   the same with the teacher's head rounded once
                    (cache_teacher_head=True: distil.torch.e4m3_head), as for a frozen teacher
Runs on CPU tensors too (a smoke test: --device cpu, small shapes by default there).
On a GPU run it with DISTIL_TEST_HOOKS=fp8=lt (the library's test hook, passed on by the script): a
shape cuBLASLt's fp8 cannot take then fails instead of timing the emulation kernel.
  usage: python bench/python/fp8_teacher.py [--device cuda] [--T 1024,8192] [--V 128256] [--Ht 4096]
         [--dtype bf16] [--reps 10] [--queue 4] [--json FILE]
"""

import argparse
import json
import math
import statistics
import time

import torch

_DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def teacher(t, v, ht, dtype, device, zipf, peak, outliers, seed):
    """(xt, wt, bt) of the docstring's Zipf-like teacher, in dtype on device."""
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(ht, generator=g, dtype=torch.float64)
    u /= u.norm()
    rank = torch.randperm(v, generator=g).double() + 1.0
    a = -zipf * rank.log()
    r = torch.randn(v, ht, generator=g, dtype=torch.float64) / math.sqrt(ht)
    wt = a[:, None] * u[None, :] + r
    unigram = torch.softmax(a, 0)
    k = torch.multinomial(unigram.float(), t, replacement=True, generator=g)
    rk = r[k]
    xt = 1.0 * u[None, :] + torch.randn(t, ht, generator=g, dtype=torch.float64) * 0.5
    xt += peak * rk / (rk * rk).sum(-1, keepdim=True)
    if outliers > 0:
        ch = torch.randperm(ht, generator=g)[:outliers]
        xt[:, ch] *= 20.0
        wt[:, ch] /= 20.0  # the logits keep their scale; the rows' amax does not
    bt = torch.randn(v, generator=g, dtype=torch.float64) * 0.1
    return (xt.to(dtype).to(device), wt.to(dtype).to(device), bt.to(dtype).to(device))


def student(t, v, hs, dtype, device, seed):
    g = torch.Generator().manual_seed(seed + 1)
    xs = torch.randn(t, hs, generator=g, dtype=torch.float64)
    ws = torch.randn(v, hs, generator=g, dtype=torch.float64) * (2.0 / math.sqrt(hs))
    bs = torch.randn(v, generator=g, dtype=torch.float64) * 0.1
    labels = torch.randint(0, v, (t,), generator=g)
    return (
        xs.to(dtype).to(device),
        ws.to(dtype).to(device),
        bs.to(dtype).to(device),
        labels.to(device),
    )


def e4m3_rows(x):
    """docs/SPEC.md §6 in torch: (codes' values float64, scales float64) of each row of x."""
    x = x.float()
    s = x.abs().amax(-1) / 448.0
    s = torch.where(s > 0, s, torch.ones_like(s))
    s = torch.where(torch.isfinite(s), s, torch.full_like(s, float("nan")))
    q = (x / s[:, None]).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    return q.double(), s.double()


def emulated_kl(xt, wt, bt, tau, chunk=256):
    """Per-row KL(p_fp8 || p_exact) at temperature tau, float64, chunked over rows; also the
    teacher's per-row top-1 probability and entropy (exact head)."""
    qw, sw = e4m3_rows(wt)
    w, b = wt.double(), bt.double()
    kl, top1, ent = [], [], []
    for i in range(0, xt.shape[0], chunk):
        x = xt[i : i + chunk]
        qx, sx = e4m3_rows(x)
        z8 = sx[:, None] * sw[None, :] * (qx @ qw.T) + b
        ze = x.double() @ w.T + b
        l8, le = torch.log_softmax(z8 / tau, -1), torch.log_softmax(ze / tau, -1)
        kl.append((l8.exp() * (l8 - le)).sum(-1))
        top1.append(le.exp().amax(-1))
        ent.append(-(le.exp() * le).sum(-1))
    return torch.cat(kl), torch.cat(top1), torch.cat(ent)


def timed(fn, device, queue, reps):
    """Median ms per call of fn (CUDA events around `queue` calls; wall time on CPU)."""
    for _ in range(2):
        fn()
    samples = []
    for _ in range(reps):
        if device == "cuda":
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(queue):
                fn()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / queue)
        else:
            t0 = time.perf_counter()
            for _ in range(queue):
                fn()
            samples.append((time.perf_counter() - t0) * 1e3 / queue)
    return statistics.median(samples)


def point(a, t):
    import distil.torch as dt

    dtype = _DTYPES[a.dtype]
    xt, wt, bt = teacher(t, a.V, a.Ht, dtype, a.device, a.zipf, a.peak, a.outliers, a.seed)
    xs, ws, bs, labels = student(t, a.V, a.Ht // 2, dtype, a.device, a.seed)
    tau = a.tau
    # KL(p_fp8 || p_exact), mean, by distil: the student is the exact teacher head, the teacher
    # the fp8 one, forward KL (p the teacher's): loss = mean_i KL(p_fp8 || p_exact)
    kl_lib = dt.FusedLinearJSDLoss(
        weight_hard_loss=0.0,
        weight_soft_loss=1.0,
        temperature=tau,
        divergence="forward_kl",
        teacher_head_precision="fp8",
    )(xt, wt, xt, wt, None, bt, bt)
    kl, top1, ent = emulated_kl(xt, wt, bt, tau)  # on the device, float64

    def loss_of(precision, once=False):
        return dt.FusedLinearJSDLoss(
            temperature=tau, teacher_head_precision=precision, cache_teacher_head=once
        )

    # fp8_once: the frozen teacher's head rounded once (cache_teacher_head, made by the first
    # call below, outside the timed ones)
    mods = {"exact": loss_of(None), "fp8": loss_of("fp8"), "fp8_once": loss_of("fp8", True)}
    wsl = ws.detach().clone().requires_grad_(True)
    xsl = xs.detach().clone().requires_grad_(True)
    bsl = bs.detach().clone().requires_grad_(True)
    losses, ms = {}, {}
    for name, mod in mods.items():
        losses[name] = float(mod(xsl, wsl, xt, wt, labels, bsl, bt).detach())

        def step(mod=mod):
            xsl.grad = wsl.grad = bsl.grad = None
            mod(xsl, wsl, xt, wt, labels, bsl, bt).backward()

        ms[name] = timed(step, a.device, a.queue, a.reps)
    return {
        "T": t,
        "V": a.V,
        "Ht": a.Ht,
        "Hs": a.Ht // 2,
        "dtype": a.dtype,
        "tau": tau,
        "teacher_top1_mean": float(top1.mean()),
        "teacher_entropy_mean": float(ent.mean()),
        "kl_mean": float(kl_lib),
        "kl_mean_emulated": float(kl.mean()),
        "kl_max": float(kl.max()),
        "loss_exact": losses["exact"],
        "loss_fp8": losses["fp8"],
        "loss_rel": abs(losses["fp8"] - losses["exact"]) / abs(losses["exact"]),
        "ms_exact": ms["exact"],
        "ms_fp8": ms["fp8"],
        "speedup": ms["exact"] / ms["fp8"],
        "loss_fp8_once": losses["fp8_once"],
        "ms_fp8_once": ms["fp8_once"],
        "speedup_once": ms["exact"] / ms["fp8_once"],
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--T", default=None, help="comma list (default cuda 1024,8192; cpu 64)")
    p.add_argument("--V", type=int, default=None, help="default cuda 128256, cpu 2048")
    p.add_argument("--Ht", type=int, default=None, help="default cuda 4096, cpu 256")
    p.add_argument("--dtype", default="bf16", choices=sorted(_DTYPES))
    p.add_argument("--tau", type=float, default=1.0)
    p.add_argument("--zipf", type=float, default=1.1, help="Zipf exponent of the background")
    p.add_argument("--peak", type=float, default=8.0, help="logit boost of each row's token")
    p.add_argument("--outliers", type=int, default=0, help="hidden channels 20x larger")
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--queue", type=int, default=4)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", default=None)
    a = p.parse_args()
    from distil import _testing

    _testing.hooks_from_env()  # DISTIL_TEST_HOOKS=fp8=lt: never time the fp8 emulation unknowingly
    gpu = a.device == "cuda"
    a.T = a.T or ("1024,8192" if gpu else "64")
    a.V = a.V or (128256 if gpu else 2048)
    a.Ht = a.Ht or (4096 if gpu else 256)
    rows = [point(a, int(t)) for t in a.T.split(",")]
    print(
        f"fp8 teacher head, {a.device} {a.dtype}, V {a.V}, Ht {a.Ht}, Hs {a.Ht // 2}, "
        f"tau {a.tau}, zipf {a.zipf}, peak {a.peak}, outliers {a.outliers}"
    )
    print(
        "| T | top-1 p | H(p) | KL mean (distil / emulated) | KL max | loss exact | loss fp8 "
        "| rel diff | ms exact | ms fp8 | speedup | ms fp8, head made once | speedup |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['T']} | {r['teacher_top1_mean']:.3f} | {r['teacher_entropy_mean']:.3f} "
            f"| {r['kl_mean']:.3e} / {r['kl_mean_emulated']:.3e} | {r['kl_max']:.3e} "
            f"| {r['loss_exact']:.6f} | {r['loss_fp8']:.6f} | {r['loss_rel']:.2e} "
            f"| {r['ms_exact']:.2f} | {r['ms_fp8']:.2f} | {r['speedup']:.3f} "
            f"| {r['ms_fp8_once']:.2f} | {r['speedup_once']:.3f} |"
        )
        if r["loss_fp8_once"] != r["loss_fp8"]:
            print(
                f"  note: the head made once gave loss {r['loss_fp8_once']!r}, not "
                f"{r['loss_fp8']!r}"
            )
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "results": rows}, f, indent=1)


if __name__ == "__main__":
    main()
