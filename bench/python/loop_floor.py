#!/usr/bin/env python3
"""loop_floor.py - the fused loss's GEMMs alone, in the chunk loop's order and shapes, back to back
for --seconds each (the card settled at its power limit, as in a long distil-bench point): what a
chunked design would take if everything that is not a GEMM cost nothing, measured in the same run
as floor_probe.py's 8192^3 GEMM (the "sustained floor" that docs/PERFORMANCE.md divides by).

Per chunk of C rows (V, Hs, Ht as distil-bench's seed shape; cuBLAS through PyTorch, one stream):
  logits   zs = xs_c Ws^T, zt = xt_c Wt^T                  (C, V) fp32 out, bf16 operands
  grads    grad_xs_c = G Ws                                  (C, Hs) bf16 out
           gw += G^T xs_c                                    (V, Hs) fp32 accumulator
  after    grad_Ws = bf16(gw)                                (several chunks only)
Variants (--variants, each name a comma-separated choice):
  loss         the logits GEMMs alone
  loss+rows    and a stand-in row pass with the real one's bytes and few instructions (a Triton
               kernel reading zs and zt, 8 B an element, and summing a row's difference)
  full         logits and gradient GEMMs (G a fixed random bf16 block: the row pass costs nothing)
  full+rows    and a stand-in row pass reading zs, zt and writing G (8 + 2 B an element)
  fp8          the teacher's GEMM in e4m3 (torch._scaled_mm, per-row scales where this torch
               takes them with an fp32 output, else one scale a tensor), otherwise `full`
  fp8-loss     the same, loss only
--gw-every K: the weight-gradient GEMM every K chunks with K C rows (G kept for K chunks), the
"fewer, larger weight-gradient GEMMs" lever; --chunk C sets the chunk.
Prints ms per call and x floor (FLOPs of the call over the sustained 8192^3 rate).
usage: python3 bench/python/loop_floor.py [--T 1024,8192] [--chunk 1024] [--seconds 3]
                                          [--json out.json]
"""

import argparse
import json
import sys
import time

import floor_probe

V, HS, HT = 128256, 2048, 4096


def flops(t, mode):
    """FLOPs of one call: two logits GEMMs, and with gradients two more of the student's size."""
    logits = 2.0 * t * V * (HS + HT)
    return logits if mode == "loss" else logits + 4.0 * t * V * HS


def standin_kernels():
    """Triton stand-ins for the row pass: its bytes, a handful of instructions an element."""
    import triton
    import triton.language as tl

    @triton.jit
    def rows(zs, zt, g, out, n, BLOCK: tl.constexpr, GRAD: tl.constexpr):
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        d = tl.load(zs + offs, mask=m, other=0.0) - tl.load(zt + offs, mask=m, other=0.0)
        if GRAD:  # G = zs - zt: 8 B read, 2 B written an element
            tl.store(g + offs, d.to(tl.bfloat16), mask=m)
        else:  # the loss alone: 8 B read an element, one sum a block
            tl.atomic_add(out + tl.program_id(0) % 1024, tl.sum(d, axis=0))

    block = 4096

    def grad(zs, zt, g):
        n = zs.numel()
        rows[(triton.cdiv(n, block),)](zs, zt, g, g, n, BLOCK=block, GRAD=True)

    def loss(zs, zt, out):
        n = zs.numel()
        rows[(triton.cdiv(n, block),)](zs, zt, out, out, n, BLOCK=block, GRAD=False)

    return grad, loss


class Fp8Head:
    """The teacher's head in e4m3 with per-row scales (or one per tensor where torch's fp32-output
    fp8 GEMM takes no row scales): wq (V, Ht) made once, each chunk's xt rounded per call."""

    def __init__(self, torch, wt):
        self.torch = torch
        e4 = torch.float8_e4m3fn
        self.e4, self.max = e4, torch.finfo(e4).max
        self.wq, self.sw = self.quant(wt)
        self.rowwise = True
        try:
            self.gemm(torch.randn(16, wt.shape[1], device=wt.device, dtype=wt.dtype))
        except (RuntimeError, ValueError):
            self.rowwise = False
            self.sw = self.sw.max().reshape(())

    def quant(self, x):
        s = x.abs().amax(dim=1, keepdim=True).float().clamp(min=1e-12) / self.max
        return (x.float() / s).to(self.e4), s

    def gemm(self, xt, out=None):
        xq, sx = self.quant(xt)
        sw = self.sw.t() if self.rowwise else self.sw
        if not self.rowwise:
            sx = sx.max().reshape(())
        return self.torch._scaled_mm(
            xq, self.wq.t(), scale_a=sx, scale_b=sw, out_dtype=self.torch.float32, out=out
        )


def make_call(torch, t, c, variant, every, kernels):
    """One call of the variant at T = t, chunks of c rows: a closure."""
    dev, bf = "cuda", torch.bfloat16
    xs = torch.randn(t, HS, device=dev, dtype=bf)
    xt = torch.randn(t, HT, device=dev, dtype=bf)
    ws = torch.randn(V, HS, device=dev, dtype=bf) * HS**-0.5
    wt = torch.randn(V, HT, device=dev, dtype=bf) * HT**-0.5
    zs = torch.empty(c, V, device=dev, dtype=torch.float32)
    zt = torch.empty_like(zs)
    grads = variant.startswith("full") or variant == "fp8"
    rows = variant.endswith("+rows")
    head = Fp8Head(torch, wt) if variant.startswith("fp8") else None
    g = torch.randn(every * c, V, device=dev, dtype=bf) if grads else None
    gx = torch.empty(t, HS, device=dev, dtype=bf)
    gw = torch.empty(V, HS, device=dev, dtype=torch.float32) if t > c else None
    gw_out = torch.empty(V, HS, device=dev, dtype=bf)
    sink = torch.zeros(1024, device=dev, dtype=torch.float32)
    grad_rows, loss_rows = kernels if rows else (None, None)

    def call():
        for r0 in range(0, t, c):
            r1 = min(t, r0 + c)
            n = r1 - r0
            torch.mm(xs[r0:r1], ws.t(), out_dtype=torch.float32, out=zs[:n])
            if head is not None:
                head.gemm(xt[r0:r1], out=zt[:n])
            else:
                torch.mm(xt[r0:r1], wt.t(), out_dtype=torch.float32, out=zt[:n])
            if not grads:
                if rows:
                    loss_rows(zs[:n], zt[:n], sink)
                continue
            slot = (r0 // c) % every
            gc = g[slot * c : slot * c + n]
            if rows:
                grad_rows(zs[:n], zt[:n], gc)
            torch.mm(gc, ws, out=gx[r0:r1])
            if slot == every - 1 or r1 == t:
                g0 = r0 - slot * c
                if gw is None:
                    torch.mm(g[: r1 - g0].t(), xs[g0:r1], out=gw_out)
                elif g0 == 0:
                    torch.mm(g[: r1 - g0].t(), xs[g0:r1], out_dtype=torch.float32, out=gw)
                else:
                    torch.addmm(gw, g[: r1 - g0].t(), xs[g0:r1], out_dtype=torch.float32, out=gw)
        if grads and gw is not None:
            gw_out.copy_(gw)

    working = (
        2 * c * V * 4
        + (every * c * V * 2 if grads else 0)
        + (V * HS * 4 if grads and gw is not None else 0)
    )
    note = (
        ""
        if head is None
        else (" (fp8 scales per row)" if head.rowwise else " (fp8 scales per tensor)")
    )
    return call, working, note


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--T", default="1024,8192")
    p.add_argument("--chunk", type=int, default=1024)
    p.add_argument("--gw-every", default="1", help="comma-separated K values")
    p.add_argument("--variants", default="loss,loss+rows,full,full+rows")
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--rounds", type=int, default=1, help="variants alternated this many times")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("loop_floor: no CUDA device")
        return 2
    burst, rate = floor_probe.gemm_tflops(torch, 4.0)
    print(
        f"device {torch.cuda.get_device_name()}; torch {torch.__version__}; "
        f"8192^3 bf16 GEMM sustained {rate:.1f} TFLOP/s (burst {burst:.1f})"
    )
    kernels = standin_kernels()
    rows = []
    for rnd in range(args.rounds):
        for t in [int(x) for x in args.T.split(",")]:
            for variant in args.variants.split(","):
                for every in [int(x) for x in args.gw_every.split(",")]:
                    if every > 1 and not (variant.startswith("full") or variant == "fp8"):
                        continue
                    try:
                        call, working, note = make_call(
                            torch, t, args.chunk, variant, every, kernels
                        )
                        _, ms = floor_probe.burst_and_sustained(torch, call, args.seconds)
                    except (RuntimeError, TypeError, ValueError) as e:  # an API this torch lacks
                        print(f"T {t} {variant} gw every {every}: failed: {e}", flush=True)
                        continue
                    mode = "full" if variant.startswith("full") or variant == "fp8" else "loss"
                    floor = flops(t, mode) / (rate * 1e9)
                    row = {
                        "round": rnd,
                        "T": t,
                        "chunk": args.chunk,
                        "variant": variant,
                        "gw_every": every,
                        "ms": ms,
                        "floor_ms": floor,
                        "x_floor": ms / floor,
                        "working_gb": working / 1e9,
                        "note": note.strip(" ()"),
                    }
                    rows.append(row)
                    print(
                        f"T {t:5d} C {args.chunk:4d} {variant:10s} gw every {every}: "
                        f"{ms:8.3f} ms  {ms / floor:.3f}x floor  working {working / 1e9:.2f} GB"
                        + note,
                        flush=True,
                    )
                    del call
                    torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "rate_tflops": rate,
                    "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "device": torch.cuda.get_device_name(),
                    "rows": rows,
                },
                f,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
