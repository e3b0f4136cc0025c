"""On-policy distillation with TRL's DistillationTrainer, its loss computed by distil.

    python examples/trl_distill.py                      # tiny random Llama pair on the CPU
    python examples/trl_distill.py --student Qwen/Qwen3-0.6B --teacher Qwen/Qwen3-4B \\
        --steps 100 --lr 1e-6 --optim adamw_torch --bf16   # real models (a GPU)

Without --student / --teacher it builds a tiny student and teacher from configs (random weights,
no download) and an in-memory word-level tokenizer, and trains a few steps on the CPU: the
whole trainer runs (generation of completions by the student, the teacher's forward, the loss
through distil, the optimizer). --trainer gkd / gold runs TRL's GKD or GOLD trainer instead,
--trl-loss TRL's own loss (to compare), --gemma2 a softcapped Gemma 2 pair. Needs TRL 1.16
(pip install trl==1.16.0); docs/TRL.md has the rest.

The functions here (tiny_tokenizer, tiny_pair, prompts, build, train) are also what the TRL
tests of distil use.
"""

import argparse
import os
import sys

import torch

VOCAB = 96  # word-level tokens "w0" ... plus the specials


def tiny_tokenizer():
    """A word-level tokenizer held in memory: "w0" ... "w{VOCAB-1}", <pad>, <eos>, <unk>;
    padding on the left (the trainers generate from the prompts)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {f"w{i}": i for i in range(VOCAB)}
    vocab.update({"<pad>": VOCAB, "<eos>": VOCAB + 1, "<unk>": VOCAB + 2})
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token="<pad>",
        eos_token="<eos>",
        unk_token="<unk>",
        padding_side="left",
    )
    tok.chat_template = (
        "{% for m in messages %}{{ m['content'] }} {% endfor %}"
        "{% if add_generation_prompt %}{% endif %}"
    )
    return tok


def tiny_pair(tok, gemma2=False, seed=0):
    """(student, teacher): random-weight causal LMs from configs, fp32, the teacher twice as
    wide; Gemma 2 with its final_logit_softcapping (30) when gemma2, else Llama."""
    from transformers import AutoModelForCausalLM, Gemma2Config, LlamaConfig

    vocab = len(tok)
    common = {
        "vocab_size": vocab,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 128,
        "pad_token_id": tok.pad_token_id,
        "eos_token_id": tok.eos_token_id,
        "bos_token_id": None,
        "tie_word_embeddings": False,
    }
    models = []
    for i, (hidden, inter) in enumerate(((32, 64), (64, 128))):
        torch.manual_seed(seed + i)
        if gemma2:
            config = Gemma2Config(
                hidden_size=hidden,
                intermediate_size=inter,
                head_dim=16,
                final_logit_softcapping=30.0,
                attn_logit_softcapping=50.0,
                sliding_window=64,
                **common,
            )
        else:
            config = LlamaConfig(hidden_size=hidden, intermediate_size=inter, **common)
        model = AutoModelForCausalLM.from_config(config, attn_implementation="eager")
        with torch.no_grad():  # spread logits: a peaky, informative teacher
            model.get_output_embeddings().weight.mul_(20.0 if gemma2 else 8.0)
        models.append(model)
    return models[0], models[1]


def prompts(n=16, seed=0):
    """A dataset of n plain-text prompts of 3 to 6 words."""
    from datasets import Dataset

    g = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(n):
        length = int(torch.randint(3, 7, (1,), generator=g))
        words = torch.randint(0, VOCAB, (length,), generator=g).tolist()
        rows.append({"prompt": " ".join(f"w{w}" for w in words)})
    return Dataset.from_list(rows)


def _config_args(a, out):
    return {
        "output_dir": out,
        "max_steps": a.steps,
        "per_device_train_batch_size": a.batch,
        "gradient_accumulation_steps": a.accumulation,
        "learning_rate": a.lr,
        "optim": a.optim,
        "lr_scheduler_type": "constant",
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": [],
        "seed": a.seed,
        "bf16": a.bf16,
        "use_cpu": not torch.cuda.is_available(),
        "beta": a.beta,
        "temperature": a.temperature,
        "disable_tqdm": True,
    }


def build(a, out):
    """The trainer that a's options describe (argparse namespace; see main)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from distil.torch import trl as distil_trl

    if a.student:
        tok = AutoTokenizer.from_pretrained(a.student, padding_side="left")
        student = AutoModelForCausalLM.from_pretrained(a.student, dtype="auto")
        teacher = AutoModelForCausalLM.from_pretrained(a.teacher, dtype="auto")
    else:
        tok = tiny_tokenizer()
        student, teacher = tiny_pair(tok, a.gemma2, a.seed)
    data = prompts(a.prompts, a.seed)
    if a.trainer == "distillation":
        from trl.trainer import DistillationConfig, DistillationTrainer

        config = DistillationConfig(**_config_args(a, out), max_completion_length=a.completion)
        cls = DistillationTrainer if a.trl_loss else distil_trl.DistilDistillationTrainer
        return cls(
            model=student,
            teacher_model=teacher,
            args=config,
            train_dataset=data,
            processing_class=tok,
        )
    data = data.map(
        lambda r: {
            "messages": [
                {"role": "user", "content": r["prompt"]},
                {"role": "assistant", "content": r["prompt"]},
            ]
        },
        remove_columns=["prompt"],
    )
    if a.trainer == "gkd":
        from trl.experimental.gkd import GKDConfig, GKDTrainer

        config = GKDConfig(
            **_config_args(a, out), lmbda=a.lmbda, max_new_tokens=a.completion, max_length=64
        )
        cls = GKDTrainer if a.trl_loss else distil_trl.DistilGKDTrainer
    else:
        from trl.experimental.gold import GOLDConfig, GOLDTrainer

        config = GOLDConfig(
            **_config_args(a, out),
            lmbda=a.lmbda,
            max_completion_length=a.completion,
            max_length=64,
            use_uld_loss=False,
            use_extended_uld=False,
        )
        cls = GOLDTrainer if a.trl_loss else distil_trl.DistilGOLDTrainer
    return cls(
        model=student, teacher_model=teacher, args=config, train_dataset=data, processing_class=tok
    )


def train(a, out):
    """Train; returns the logs of every optimizer step (loss, grad_norm, entropy, ...)."""
    from transformers import TrainerCallback

    steps = []

    class Keep(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "loss" in logs:
                steps.append(dict(logs))

    trainer = build(a, out)
    trainer.add_callback(Keep())
    trainer.train()
    return steps


def parser():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--student", help="a Hugging Face model name (default: a tiny random Llama)")
    p.add_argument("--teacher", help="the teacher's model name (with --student)")
    p.add_argument("--trainer", choices=("distillation", "gkd", "gold"), default="distillation")
    p.add_argument("--trl-loss", action="store_true", help="TRL's own loss instead of distil's")
    p.add_argument("--gemma2", action="store_true", help="a tiny softcapped Gemma 2 pair")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--accumulation", type=int, default=1)
    p.add_argument("--beta", type=float, default=0.5)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--lmbda", type=float, default=0.0, help="GKD / GOLD on-policy fraction")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--optim", default="sgd")
    p.add_argument("--completion", type=int, default=8, help="completion tokens")
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--output-dir", default=os.path.join("build-py", "trl_distill"))
    return p


def main(argv=None):
    a = parser().parse_args(argv)
    if bool(a.student) != bool(a.teacher):
        sys.exit("trl_distill: give both --student and --teacher, or neither")
    for i, logs in enumerate(train(a, a.output_dir)):
        extra = f" entropy {logs['entropy']:.4f}" if "entropy" in logs else ""
        print(f"step {i + 1}: loss {logs['loss']:.6f} grad_norm {logs['grad_norm']:.6f}{extra}")


if __name__ == "__main__":
    main()
