"""torch's own host cost of a loss written as an autograd.Function, by how the Function is made.

    python bench/python/autograd_floor.py [--device cpu|cuda] [--calls 2000] [--rounds 5] [--T 1]
                                   [--V 8] [--clock wall|thread]

Each variant's forward allocates the [T, V] gradient and a 0-dim loss (as a loss that computes
its gradient in the forward call does, distil's eager path) and backward hands the gradient
back; nothing is computed. Rows (median µs of forward + loss.backward(), the least median over
interleaved rounds; x a leaf, its .grad dropped untimed):
  save_for_backward   ctx.save_for_backward(g), backward reads ctx.saved_tensors
  ctx attribute       g kept as ctx.g and taken off in backward (distil's eager Functions)
  + no materialize    the same with ctx.set_materialize_grads(False)
  once_differentiable the ctx-attribute backward under torch.autograd.function's decorator
  setup_context       forward without ctx, a separate setup_context (the torch.library style)
  no autograd         the forward's two allocations alone (what any loss call pays anyway)
  forward only        the ctx-attribute Function's forward, its graph dropped (what a loss's
                      forward costs before the caller's backward: the floor of distil.torch's
                      "public forward" row in bench/python/host_overhead.py)
On cuda the queue is drained every 64 calls.
"""

import argparse
import statistics
import time

import torch
from torch.autograd.function import once_differentiable

clock = time.perf_counter


def _alloc(x):
    return torch.empty_like(x), torch.empty(size=(), dtype=torch.float32, device=x.device)


class Saved(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        g, loss = _alloc(x)
        ctx.save_for_backward(g)
        return loss

    @staticmethod
    def backward(ctx, grad):
        return ctx.saved_tensors[0]


class Attr(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        g, loss = _alloc(x)
        ctx.g = g
        return loss

    @staticmethod
    def backward(ctx, grad):
        g, ctx.g = ctx.g, None
        return g


class AttrNoMaterialize(Attr):
    @staticmethod
    def forward(ctx, x):
        ctx.set_materialize_grads(False)
        g, loss = _alloc(x)
        ctx.g = g
        return loss


class Once(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        g, loss = _alloc(x)
        ctx.g = g
        return loss

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        g, ctx.g = ctx.g, None
        return g


class Setup(torch.autograd.Function):
    @staticmethod
    def forward(x):
        return _alloc(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.g = output[0]
        ctx.mark_non_differentiable(output[0])

    @staticmethod
    def backward(ctx, grad_g, grad_loss):
        g, ctx.g = ctx.g, None
        return g


def _median_us(fn, x, calls, drain):
    samples = []
    for i in range(calls):
        x.grad = None
        t0 = clock()
        fn()
        samples.append((clock() - t0) * 1e6)
        if drain and i % 64 == 63:
            torch.cuda.synchronize()
    return statistics.median(samples)


def main():
    global clock
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--T", type=int, default=1)
    ap.add_argument("--V", type=int, default=8)
    ap.add_argument("--clock", choices=("wall", "thread"), default="wall")
    args = ap.parse_args()
    clock = time.thread_time if args.clock == "thread" else time.perf_counter
    x = torch.randn(args.T, args.V, device=args.device).requires_grad_()
    rows = {
        "save_for_backward": lambda: Saved.apply(x).backward(),
        "ctx attribute": lambda: Attr.apply(x).backward(),
        "+ no materialize": lambda: AttrNoMaterialize.apply(x).backward(),
        "once_differentiable": lambda: Once.apply(x).backward(),
        "setup_context": lambda: Setup.apply(x)[1].backward(),
        "no autograd": lambda: _alloc(x.detach()),
        "forward only": lambda: Attr.apply(x),
    }
    drain = args.device == "cuda"
    for fn in rows.values():
        for _ in range(50):
            x.grad = None
            fn()
    best = {}
    for _ in range(args.rounds):
        for name, fn in rows.items():
            best[name] = min(best.get(name, float("inf")), _median_us(fn, x, args.calls, drain))
    print(
        f"# autograd.Function floor, forward + backward (last row: forward only), on "
        f"{args.device} (torch {torch.__version__}), T {args.T}, V {args.V}, {args.clock} clock\n"
    )
    print("| variant | µs |\n|---|---|")
    for name, us in best.items():
        print(f"| {name} | {us:.1f} |")


if __name__ == "__main__":
    main()
