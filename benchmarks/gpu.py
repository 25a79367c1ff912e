"""GRPO steps on one GPU: a Qwen2-shaped ~0.5B model with random weights, trained a few steps with kitae's
Trainer in process and then against ``kitae serve model --device cuda`` (the server engine); prints tokens/s, step
time and peak GPU memory of each.

    python benchmarks/gpu.py                          # CUDA: Qwen2.5-0.5B's shape, bf16, 5 steps each
    python benchmarks/gpu.py --device cpu --tiny      # the same code path on CPU, a tiny model, under a minute

Needs only torch, transformers, accelerate (and kitae): no download, no vLLM. The model is Qwen2.5-0.5B's shape
(hidden 896, 24 layers, 14 heads, 2 KV heads, MLP 4864, vocabulary 151,936, tied embeddings) with random weights;
the tokenizer is a small byte-level BPE trained here on a few lines with the ChatML specials. A random model
samples ids over the whole vocabulary, most of which the small tokenizer decodes to nothing: every sample runs to
``--max-new-tokens``, which is what makes the work of each step fixed. Rewards come from the bundled arithmetic
task's answer grader (0 for a random model), so ``optim.skip_zero_advantage`` is off: the update runs the forward
and backward of every row as a step with reward variance would.

On CUDA ``model.dtype: bfloat16`` means float32 master weights with bf16 autocast (kitae.trainer.setup.precision);
``--master-weights dtype`` runs pure bf16 instead. Reported per engine over the steps after the first (warm-up),
medians: completion tokens per second of generation, the step's seconds (generation, update, weight sync), the
completion tokens the update trains per second, and the peak memory ``torch.cuda.max_memory_allocated`` of this
process (the trainer; the server's memory is its own process's and is not in it). ``--max-seconds`` stops
stepping a phase once the run has used that much time, printing what it measured, so the default fits in 8 minutes
on one GPU. Not part of the test suite's pass/fail (tests/trainer/test_gpu_benchmark.py runs the CPU mode).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from kitae.rollout.replicas import Replicas  # noqa: E402
from kitae.trainer.config import load_train_config  # noqa: E402
from kitae.trainer.loop import Trainer  # noqa: E402

QWEN2_0_5B = dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                  intermediate_size=4864, vocab_size=151936, max_position_embeddings=32768, rope_theta=1e6,
                  tie_word_embeddings=True)
TINY = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128,
            vocab_size=1024, max_position_embeddings=1024, tie_word_embeddings=True)
CORPUS = ["what is 12+35? the answer is 47.", "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nhello<|im_end|>"]


def build_model(folder: Path, tiny: bool, seed: int = 0) -> int:
    """A random-weight Qwen2 model and a local tokenizer saved in `folder`; returns the parameter count."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    from kitae.chat import CHATML_TEMPLATE

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(CORPUS * 20, trainers.BpeTrainer(
        vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=specials))
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, pad_token="<|endoftext|>", eos_token="<|im_end|>",
                                  additional_special_tokens=specials[1:])
    tok.chat_template = CHATML_TEMPLATE
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(Qwen2Config(**(TINY if tiny else QWEN2_0_5B), bos_token_id=None,
                                         eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id))
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return sum(p.numel() for p in model.parameters())


def make_trainer(root: Path, name: str, folder: Path, args, servers: list[str] | None) -> Trainer:
    sampling = {"group_size": args.group_size, "temperature": 1.0, "max_new_tokens": args.max_new_tokens}
    if servers:
        sampling |= {"engine": "server", "servers": servers}
    cfg = {"name": name, "output_dir": str(root), "seed": 0,
           "model": {"path": str(folder), "dtype": args.dtype, "master_weights": args.master_weights},
           "data": {"train": "bundled:arith/train", "eval": None},
           "rewards": [{"name": "correct", "grader": {"type": "answer"}}],
           "sampling": sampling,
           "optim": {"steps": args.steps, "prompts_per_step": args.prompts, "micro_batch_size": args.micro_batch,
                     "lr": 1e-5, "skip_zero_advantage": False},
           "algorithm": {"max_steps_without_reward": 0}, "logging": {"save_every": 0}}
    return Trainer(load_train_config(data=cfg))


def run_phase(trainer: Trainer, args, deadline: float) -> list[dict]:
    """Train steps until ``--steps`` or the deadline; each step's metrics with the process's peak memory."""
    cuda = args.device == "cuda"
    trainer.engine_sync.sync_weights(trainer.policy, 0, force=True)  # as train() does before its first step
    seen = []
    for step in range(1, args.steps + 1):
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        m = trainer.train_step(step)
        if cuda:
            torch.cuda.synchronize()
        m["peak_gib"] = torch.cuda.max_memory_allocated() / 2**30 if cuda else float("nan")
        seen.append(m)
        peak = f", peak {m['peak_gib']:.1f} GiB" if cuda else ""
        print(f"  step {step}: {m['secs_per_step']:.2f}s (generate {m['secs_generate']:.2f}s, update "
              f"{m['secs_train']:.2f}s){peak}", flush=True)
        if time.monotonic() > deadline and step < args.steps:
            print(f"  stopped after {step} steps: --max-seconds {args.max_seconds:g} reached", flush=True)
            break
    trainer.store.close()
    return seen


def summarize(steps: list[dict], args) -> dict[str, float]:
    """Medians over the steps after the first (the first warms up; all of them when there is one)."""
    steps = steps[1:] or steps
    samples = args.prompts * args.group_size

    def med(f):
        return statistics.median(f(m) for m in steps)

    return {"gen_tokens_per_s": med(lambda m: m["len_mean"] * m["groups"] * args.group_size / m["secs_generate"]),
            "train_tokens_per_s": med(lambda m: samples * m["len_mean"] / m["secs_train"]),
            "secs_per_step": med(lambda m: m["secs_per_step"]), "secs_generate": med(lambda m: m["secs_generate"]),
            "secs_train": med(lambda m: m["secs_train"]), "sync_secs": med(lambda m: m.get("sync_secs", 0.0)),
            "peak_gib": max(m["peak_gib"] for m in steps), "steps": len(steps)}


def report(rows: dict[str, dict[str, float]]) -> None:
    print(f"{'engine':<22}{'gen tok/s':>10}{'update tok/s':>14}{'s/step':>8}{'gen s':>7}{'update s':>9}"
          f"{'sync s':>8}{'peak GiB':>10}")
    for name, r in rows.items():
        print(f"{name:<22}{r['gen_tokens_per_s']:>10.0f}{r['train_tokens_per_s']:>14.0f}{r['secs_per_step']:>8.2f}"
              f"{r['secs_generate']:>7.2f}{r['secs_train']:>9.2f}{r['sync_secs']:>8.2f}{r['peak_gib']:>10.2f}")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--tiny", action="store_true", help="a 2-layer model instead of Qwen2.5-0.5B's shape")
    ap.add_argument("--steps", type=int, default=5, help="steps per engine (the first is warm-up)")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--micro-batch", type=int, default=16)
    ap.add_argument("--dtype", default=None, help="model.dtype (default: bfloat16 on cuda, float32 on cpu)")
    ap.add_argument("--master-weights", default="auto", choices=["auto", "float32", "dtype"])
    ap.add_argument("--max-seconds", type=float, default=420, help="stop stepping once the run has used this long")
    ap.add_argument("--skip-server", action="store_true", help="only the in-process engine")
    args = ap.parse_args(argv)
    args.dtype = args.dtype or ("bfloat16" if args.device == "cuda" else "float32")
    return args


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    args = parse(argv)
    start = time.monotonic()
    deadline = start + args.max_seconds
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device here: run with --device cpu --tiny for the CPU check")
    if args.device == "cpu" and torch.cuda.is_available():
        raise SystemExit("--device cpu on a machine with CUDA: hide it with CUDA_VISIBLE_DEVICES=''")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    rows: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root, folder = Path(tmp), Path(tmp) / "model"
        params = build_model(folder, args.tiny)
        gpu = torch.cuda.get_device_name() if args.device == "cuda" else "none"
        print(f"torch {torch.__version__}, device {args.device} ({gpu}); {params / 1e6:.1f}M parameters, "
              f"model.dtype {args.dtype}, master_weights {args.master_weights}; {args.prompts} prompts x "
              f"{args.group_size} samples x {args.max_new_tokens} new tokens per step, {args.steps} steps",
              flush=True)
        print("in-process engine:", flush=True)
        trainer = make_trainer(root, "inproc", folder, args, None)
        print(f"  precision: weights {next(trainer.policy.parameters()).dtype}, autocast "
              f"{trainer.acc.mixed_precision}, attention {trainer.policy.config._attn_implementation}", flush=True)
        rows["in-process"] = summarize(run_phase(trainer, args, deadline), args)
        trainer.acc.free_memory()  # the accelerator keeps the prepared model and optimizer
        del trainer
        gc.collect()
        if args.device == "cuda":
            torch.cuda.empty_cache()
        if not args.skip_server and time.monotonic() < deadline:
            extra = ["--device", args.device, "--dtype", args.dtype, "--max-batch", str(args.prompts * args.group_size)]
            print(f"server engine (kitae serve model {' '.join(extra)}):", flush=True)
            with Replicas(str(folder), 1, threads=None if args.device == "cuda" else 1, log_dir=tmp,
                          extra=extra) as servers:
                trainer = make_trainer(root, "server", folder, args, servers.urls)
                rows["server, 1 replica"] = summarize(run_phase(trainer, args, deadline), args)
                del trainer
    report(rows)
    print(f"total {time.monotonic() - start:.0f}s")
    return rows


if __name__ == "__main__":
    main()
