"""Distil a small Llama-architecture student from a larger teacher with distil's fused loss.

Both models are built from `transformers` configs with random weights (nothing is downloaded);
the data are synthetic token sequences from a fixed random Markov chain. Each step runs both
models' decoders, then distil.torch.FusedLinearJSDLoss on the last hidden states and the two LM
heads (hard cross-entropy on the next tokens + soft JSD to the teacher), never materialising
the [tokens, vocab] logits in the training graph. Runs on the CPU in a minute or so:

    python examples/distill_tiny.py --steps 300
    python examples/distill_tiny.py --loss torch      # the same loss in plain PyTorch
"""

import argparse
import math
import time

import torch
import torch.nn.functional as F

import distil.torch as dt


def make_models(vocab=512, seed=0, dtype=torch.float32):
    """(student, teacher): Llama decoders of 2 layers, hidden 64 and 128."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)

    def llama(hidden, heads, inter):
        cfg = LlamaConfig(
            vocab_size=vocab,
            hidden_size=hidden,
            intermediate_size=inter,
            num_hidden_layers=2,
            num_attention_heads=heads,
            num_key_value_heads=heads,
            max_position_embeddings=256,
        )
        return LlamaForCausalLM(cfg)

    student, teacher = llama(64, 4, 128), llama(128, 4, 256).eval().requires_grad_(False)
    return student.to(dtype), teacher.to(dtype)


class MarkovData:
    """Token sequences from a sparse random transition table (each token has 8 successors)."""

    def __init__(self, vocab, seed=1):
        g = torch.Generator().manual_seed(seed)
        self.vocab = vocab
        self.next = torch.randint(0, vocab, (vocab, 8), generator=g)
        self.g = g

    def batch(self, batch, seq):
        ids = torch.empty(batch, seq, dtype=torch.long)
        ids[:, 0] = torch.randint(0, self.vocab, (batch,), generator=self.g)
        for t in range(1, seq):
            pick = torch.randint(0, 8, (batch,), generator=self.g)
            ids[:, t] = self.next[ids[:, t - 1], pick]
        return ids


def hidden_states(model, ids):
    return model.model(input_ids=ids).last_hidden_state


def head_inputs(student, teacher, ids, prompt=4):
    """Shifted hidden states [B, T-1, H] of both models and the next tokens as labels; the first
    `prompt` positions are masked with -100, as a prompt is in SFT-style distillation."""
    with torch.no_grad():
        th = hidden_states(teacher, ids)[:, :-1]
    sh = hidden_states(student, ids)[:, :-1]
    labels = ids[:, 1:].clone()
    labels[:, :prompt] = -100
    return sh, th, labels


def torch_loss(sh, ws, th, wt, labels, weight_hard=0.5, weight_soft=0.5, beta=0.5, temperature=1.0):
    """The same loss in plain PyTorch (docs/SPEC.md §2), with the [tokens, vocab] logits."""
    sh, th, labels = sh.reshape(-1, sh.shape[-1]), th.reshape(-1, th.shape[-1]), labels.reshape(-1)
    # Logits in fp32 at least (float64 stays float64), as docs/SPEC.md §2 and distil keep them.
    wide = torch.promote_types(sh.dtype, torch.float32)
    zs, zt = (sh @ ws.T).to(wide), (th @ wt.T).to(wide)
    valid = labels != -100
    n = valid.sum().clamp_min(1)
    ce = F.cross_entropy(zs, labels, ignore_index=-100, reduction="sum")
    x, y = F.log_softmax(zs / temperature, -1), F.log_softmax(zt / temperature, -1)
    m = torch.logaddexp(x + math.log1p(-beta), y + math.log(beta))
    rows = (beta * y.exp() * (y - m) + (1 - beta) * x.exp() * (x - m)).sum(-1)
    soft = torch.where(valid, rows, torch.zeros_like(rows)).sum()
    return weight_hard * ce / n + weight_soft * soft / n


def distil_loss_fn():
    return dt.FusedLinearJSDLoss(
        weight_hard_loss=0.5, weight_soft_loss=0.5, beta=0.5, temperature=1.0
    )


def step_loss(kind, loss_fn, student, teacher, ids):
    sh, th, labels = head_inputs(student, teacher, ids)
    ws, wt = student.lm_head.weight, teacher.lm_head.weight
    if kind == "distil":
        return loss_fn(sh, ws, th, wt, labels)
    return torch_loss(sh, ws, th, wt, labels)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--loss", choices=["distil", "torch"], default="distil")
    args = ap.parse_args()
    student, teacher = make_models(args.vocab)
    data = MarkovData(args.vocab)
    opt = torch.optim.AdamW(student.parameters(), lr=args.lr)
    loss_fn = distil_loss_fn()
    t0 = time.perf_counter()
    for step in range(1, args.steps + 1):
        loss = step_loss(args.loss, loss_fn, student, teacher, data.batch(args.batch, args.seq))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step == 1 or step % 20 == 0:
            print(
                f"step {step:4d}  loss {loss.item():.4f}  ({time.perf_counter() - t0:.1f} s)",
                flush=True,
            )


if __name__ == "__main__":
    main()
