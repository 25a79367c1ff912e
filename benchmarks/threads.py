"""Torch CPU threads against model size: where one thread beats two (and where two win).

    python benchmarks/threads.py [--sizes 2M,20M,100M] [--threads 1,2] [--repeats 3] [--work chat,sample,train]

Every model-running kitae command picks its thread count with kitae.threads (the rule and these numbers are in
docs/threads.md); this is the measurement behind that rule. Models: the bundled kitae-tiny-base (1,967,808
parameters) and Llamas built from a config with the bundled tokenizer at about 20M and 100M parameters
(random weights: speed does not depend on what a model learned). Three kinds of work, each the same for every
thread count:

- chat: one prompt, one sample, 48 new tokens (kitae chat, a judge server's single request);
- sample: batched sampling with the rollout engine, a batch of prompts x samples, 48 new tokens, no early stop
  (kitae generate, eval, curate difficulty/hackable, long2short sampling, training's rollouts);
- train: forward, backward and an AdamW step on a batch of 64-token rows (kitae train, long2short sft/dpo, the
  build scripts).

The baseline is one thread, measured in the same run: thread counts take turns (1, 2, 1, 2, ...) so that other
load on the machine hits each alike, and the median over --repeats is reported with the ratio
"one thread's time / this thread count's time" (above 1: more threads win). The load average before and after
is printed: on a shared machine it decides as much as the model size does. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from kitae.models import load_causal_lm, load_tokenizer  # noqa: E402
from kitae.rollout.base import SamplingParams  # noqa: E402
from kitae.rollout.hf import HFEngine  # noqa: E402

# name -> Llama shape (hidden, layers, intermediate, heads); None = the bundled model as shipped
SIZES = {
    "2M": None,
    "20M": (512, 6, 1376, 8),
    "100M": (1024, 8, 2816, 16),
}
# per size: (prompts, samples per prompt) for `sample` and rows for `train`, so each measurement takes seconds
BATCH = {"2M": ((16, 8), 64), "20M": ((8, 4), 16), "100M": ((4, 4), 4)}
PROMPT = [{"role": "user", "content": "12+35は？"}]


def build(size: str, tok):
    if SIZES[size] is None:
        return load_causal_lm(None)
    from transformers import LlamaConfig, LlamaForCausalLM

    hidden, layers, inter, heads = SIZES[size]
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=hidden, num_hidden_layers=layers, intermediate_size=inter,
                      num_attention_heads=heads, num_key_value_heads=heads, max_position_embeddings=256,
                      tie_word_embeddings=True, pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg)


def chat_work(engine: HFEngine, size: str) -> tuple[int, callable]:
    sp = SamplingParams(temperature=1.0, max_new_tokens=48, stop=[], seed=0)
    return 48, lambda: engine.generate([PROMPT], 1, sp)


def sample_work(engine: HFEngine, size: str) -> tuple[int, callable]:
    (prompts, n), _ = BATCH[size]
    sp = SamplingParams(temperature=1.0, max_new_tokens=48, stop=[], seed=0)
    return prompts * n * 48, lambda: engine.generate([PROMPT] * prompts, n, sp)


def train_work(engine: HFEngine, size: str) -> tuple[int, callable]:
    _, rows = BATCH[size]
    model = engine.model
    opt = torch.optim.AdamW(model.parameters(), lr=0.0)  # lr 0: the weights (and the next round's work) stay put
    ids = torch.randint(3, model.config.vocab_size, (rows, 64), generator=torch.Generator().manual_seed(0))

    def step() -> None:
        model.train()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        model.eval()

    return rows * 64, step


WORK = {"chat": chat_work, "sample": sample_work, "train": train_work}


def measure(fn, threads: list[int], repeats: int) -> dict[int, float]:
    """Median seconds per thread count; counts take turns, after one warm-up call each."""
    secs: dict[int, list[float]] = {t: [] for t in threads}
    for t in threads:
        torch.set_num_threads(t)
        fn()
    for _ in range(repeats):
        for t in threads:
            torch.set_num_threads(t)
            t0 = time.perf_counter()
            fn()
            secs[t].append(time.perf_counter() - t0)
    return {t: statistics.median(v) for t, v in secs.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="2M,20M,100M", help=f"comma-separated, from {', '.join(SIZES)}")
    ap.add_argument("--threads", default=",".join(str(t) for t in range(1, (os.cpu_count() or 1) + 1)),
                    help="thread counts to compare (default: 1 up to the CPU count); the first is the baseline")
    ap.add_argument("--work", default="chat,sample,train", help=f"comma-separated, from {', '.join(WORK)}")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    tok = load_tokenizer(None)
    print(f"cpus: {os.cpu_count()}  torch {torch.__version__}  load average before: {os.getloadavg()[0]:.2f}")
    head = f"{'model':>6} {'params':>12} {'work':>7} " + " ".join(f"{f'{t} thr tok/s':>13}" for t in threads)
    print(head + "  " + "  ".join(f"{f'{t} vs {threads[0]}':>8}" for t in threads[1:]))
    for size in args.sizes.split(","):
        model = build(size, tok).eval()
        params = sum(p.numel() for p in model.parameters())
        engine = HFEngine(model, tok)
        for work in args.work.split(","):
            tokens, fn = WORK[work](engine, size)
            with torch.inference_mode(work != "train"):
                secs = measure(fn, threads, args.repeats)
            rates = " ".join(f"{tokens / secs[t]:>13.1f}" for t in threads)
            ratios = "  ".join(f"{secs[threads[0]] / secs[t]:>7.2f}x" for t in threads[1:])
            print(f"{size:>6} {params:>12,} {work:>7} {rates}  {ratios}", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
