"""kitae vs TRL's GRPOTrainer at three model sizes: seconds per step, where they go, memory, update GFLOP/s.

    python benchmarks/vs_trl.py [--params 2M,20M,100M] [--pairs N] [--steps N] [--also-all-rows] [--eval]

Models: the bundled 2M base model, and Llamas built from a config with the bundled tokenizer at about 20M
(hidden 512, 6 layers) and 100M parameters (hidden 1024, 8 layers), random weights, saved once under
--models (default /tmp/kitae-vs-trl-models) and loaded by both sides from that folder. Settings, the same for
both: the bundled train split, the graders of examples/zero.yaml as reward functions (template compliance,
answer correctness), 16 prompts x 4 samples per step, at most 48 new tokens, temperature 1.0, lr 2e-4, the
GRPO loss with no KL term (TRL's beta = 0), CPU fp32, --threads torch threads each (default 1).

Each side runs in its own child process, and the two take turns: pair 1 runs kitae then TRL, pair 2 TRL then
kitae, ..., so load from other programs on a shared machine hits both alike. In each child the first step is
a warm-up and not counted. Reported per size: median seconds per step with the range over pairs, the phases
(generation and scoring, then the update), rows kitae skipped (advantage 0: no gradient) and the padding share
of the update's positions, the update's achieved GFLOP/s (6 x parameters x positions its forwards computed,
over its seconds) against a torch.mm peak (fp32 2048 x 2048, same threads) measured in the same child, and
peak RSS, and the mean completion length (tokens): from the second step on each side learns from its own
samples, so the two trajectories part and a step's time also says how long its samples were. The ratio TRL /
kitae is given per pair (median and range). The load average before and after each
size says whether the machine was busy. --also-all-rows adds kitae with optim.skip_zero_advantage off (the
same rows in the update as TRL), to show what skipping contributes. --eval measures held-out pass@1 after each
side's training (100 test prompts, 4 samples). Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TEMPLATE = {"type": "template", "min_chars": 1, "full_chars": 0, "penalty": -1.0}  # as examples/zero.yaml
CORRECT = {"type": "answer"}
G, PROMPTS, MAX_NEW, LR, TEMP = 4, 16, 48, 2e-4, 1.0
SHAPES = {"20M": (512, 6, 1376, 8), "100M": (1024, 8, 2816, 16)}  # hidden, layers, intermediate, heads
DEFAULT_STEPS = {"2M": 8, "20M": 4, "100M": 3}  # per child, the warm-up included
DEFAULT_PAIRS = {"2M": 3, "20M": 2, "100M": 2}


# ---- models -------------------------------------------------------------------------------------------------
def model_path(size: str, models: Path) -> str:
    """The bundled model for 2M; otherwise a Llama built from a config (built and saved on first use)."""
    if size == "2M":
        from kitae.models import BUNDLED_MODEL

        return str(BUNDLED_MODEL)
    out = models / size
    if not (out / "model.safetensors").exists():
        from transformers import LlamaConfig, LlamaForCausalLM

        from kitae.models import load_tokenizer

        tok = load_tokenizer(None)
        hidden, layers, inter, heads = SHAPES[size]
        cfg = LlamaConfig(vocab_size=len(tok), hidden_size=hidden, num_hidden_layers=layers, intermediate_size=inter,
                          num_attention_heads=heads, num_key_value_heads=heads, max_position_embeddings=256,
                          tie_word_embeddings=True, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
        torch.manual_seed(0)
        LlamaForCausalLM(cfg).save_pretrained(out)
        tok.save_pretrained(out)
    return str(out)


def mm_peak_gflops(repeats: int = 5, n: int = 2048) -> float:
    """Best fp32 torch.mm rate on this process's threads (GFLOP/s)."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best = min(_timed(lambda: a @ b) for _ in range(repeats))
    return 2 * n**3 / best / 1e9


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


class UpdateCounter:
    """Positions (batch x sequence) that the model's forwards compute with gradients on: the update's work."""

    def __init__(self, model):
        self.positions = 0
        self.params = sum(p.numel() for p in model.parameters())
        model.register_forward_pre_hook(self.hook, with_kwargs=True)

    def hook(self, module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if torch.is_grad_enabled() and ids is not None:
            self.positions += ids.numel()

    def take(self) -> int:
        n, self.positions = self.positions, 0
        return n


# ---- the two sides ------------------------------------------------------------------------------------------
def held_out(model, tok) -> dict:
    from kitae.data.loader import load_prompts
    from kitae.graders import build_grader
    from kitae.models import BUNDLED_DATA
    from kitae.rollout.base import SamplingParams
    from kitae.rollout.hf import HFEngine
    from kitae.scoring.evaluate import evaluate

    rows = load_prompts(BUNDLED_DATA / "test.jsonl")[:100]
    sp = SamplingParams(temperature=1.0, max_new_tokens=MAX_NEW, seed=1234)
    metrics, _ = evaluate(HFEngine(model, tok), rows, build_grader(CORRECT), k=4, sampling=sp)
    return {k: metrics[k] for k in ("pass@1", "compliance", "len_mean")}


def run_kitae(args) -> dict:
    from kitae.trainer.config import load_train_config
    from kitae.trainer.loop import Trainer

    cfg = load_train_config(data={
        "name": "bench", "output_dir": tempfile.mkdtemp(prefix="kitae-vs-trl-"), "model": {"path": args.model},
        "threads": args.threads, "data": {"train": "bundled:arith/train", "eval": None},
        "rewards": [{"name": "template", "grader": TEMPLATE}, {"name": "correct", "grader": CORRECT}],
        "sampling": {"group_size": G, "temperature": TEMP, "max_new_tokens": MAX_NEW},
        "optim": {"steps": args.steps, "prompts_per_step": PROMPTS, "lr": LR, "micro_batch_size": G * PROMPTS,
                  "skip_zero_advantage": not args.all_rows},
        "logging": {"save_every": 0}, "eval": {"every": 0},
    })
    trainer = Trainer(cfg)
    counter = UpdateCounter(trainer.policy)
    steps = []

    def on_step(step, m):
        steps.append({"secs": m["secs_per_step"], "generate": m["secs_generate"], "update": m["secs_train"],
                      "positions": counter.take(), "skipped_rows": m["skipped_rows"], "pad_frac": m["pad_frac"],
                      "rows": G * PROMPTS, "len_mean": m["len_mean"]})

    trainer.on_step = on_step
    trainer.train()
    return {"steps": steps, "params": counter.params,
            "eval": held_out(trainer.policy, trainer.tokenizer) if args.eval else None}


def run_trl(args) -> dict:
    import datasets
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from kitae.data.loader import load_prompts
    from kitae.graders import build_grader
    from kitae.models import BUNDLED_DATA, load_causal_lm, load_tokenizer

    tok = load_tokenizer(args.model)
    model = load_causal_lm(args.model)
    rows = load_prompts(BUNDLED_DATA / "train.jsonl")
    ds = datasets.Dataset.from_list([{"prompt": r["messages"], "reference_answer": r["reference_answer"]} for r in rows])

    def as_reward(spec, name):
        grader = build_grader(spec)

        def reward(prompts, completions, completion_ids, reference_answer, **kw):
            out = []
            for ids, ref in zip(completion_ids, reference_answer):
                text = tok.decode(ids, skip_special_tokens=False)
                finish = "stop" if text.rstrip().endswith("<|im_end|>") else "length"
                s = {"output_text": text, "finish_reason": finish, "completion_tokens": len(ids),
                     "max_completion_length": MAX_NEW}
                out.append(grader.grade_group({"reference_answer": ref}, [s])[0].score)
            return out

        reward.__name__ = name
        return reward

    counter = UpdateCounter(model)
    steps, gen = [], [0.0]

    class Timer(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            self.t, gen[0] = time.perf_counter(), 0.0
            counter.take()

        def on_step_end(self, a, state, control, **kw):
            secs = time.perf_counter() - self.t
            lengths = trainer._metrics["train"]["completions/mean_length"]
            steps.append({"secs": secs, "generate": gen[0], "update": secs - gen[0], "positions": counter.take(),
                          "skipped_rows": 0.0, "pad_frac": None, "rows": G * PROMPTS,
                          "len_mean": lengths[-1] if lengths else float("nan")})

    config = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="trl-vs-kitae-"), per_device_train_batch_size=G * PROMPTS,
        num_generations=G, max_completion_length=MAX_NEW, learning_rate=LR, temperature=TEMP, top_p=1.0,
        beta=0.0, loss_type="grpo", max_steps=args.steps, logging_steps=1, save_strategy="no", report_to=[],
        bf16=False, use_cpu=True, seed=0, lr_scheduler_type="constant", warmup_steps=0, max_grad_norm=1.0,
        weight_decay=0.0, adam_beta2=0.99, disable_tqdm=True,
    )
    trainer = GRPOTrainer(model=model, reward_funcs=[as_reward(TEMPLATE, "template"), as_reward(CORRECT, "correct")],
                          args=config, train_dataset=ds, processing_class=tok, callbacks=[Timer()])
    generate = trainer._generate_and_score_completions

    def timed_generate(*a, **kw):  # generation, scoring and advantages: TRL's rollout phase
        t0 = time.perf_counter()
        try:
            return generate(*a, **kw)
        finally:
            gen[0] += time.perf_counter() - t0

    trainer._generate_and_score_completions = timed_generate
    trainer.train()
    return {"steps": steps, "params": counter.params, "eval": held_out(trainer.model, tok) if args.eval else None}


def child(args) -> None:
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    peak = mm_peak_gflops()
    result = (run_trl if args.side == "trl" else run_kitae)(args)
    result["mm_peak_gflops"] = peak
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    Path(args.out).write_text(json.dumps(result))


# ---- the parent: pairs, medians, the table --------------------------------------------------------------------
def run_child(side: str, size: str, steps: int, args) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    cmd = [sys.executable, __file__, "--side", side, "--out", out, "--steps", str(steps), "--threads",
           str(args.threads), "--model", model_path(size, Path(args.models))]
    if side == "kitae-all-rows":
        cmd += ["--all-rows"]
    if args.eval:
        cmd += ["--eval"]
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    subprocess.run(cmd, check=True, env=env, stdout=None if args.verbose else subprocess.DEVNULL,
                   stderr=None if args.verbose else subprocess.DEVNULL)
    return json.loads(Path(out).read_text())


def summarize(runs: list[dict]) -> dict:
    """Steps after each child's warm-up, pooled over the pairs."""
    steps = [s for r in runs for s in r["steps"][1:]]
    med = lambda key: statistics.median(s[key] for s in steps)  # noqa: E731
    update_flop = 6 * runs[0]["params"] * sum(s["positions"] for s in steps)
    pads = [s["pad_frac"] for s in steps if s["pad_frac"] is not None]
    return {
        "steps": len(steps), "secs": med("secs"), "len_mean": med("len_mean"), "secs_min": min(s["secs"] for s in steps),
        "secs_max": max(s["secs"] for s in steps), "generate": med("generate"), "update": med("update"),
        "skipped": sum(s["skipped_rows"] for s in steps) / sum(s["rows"] for s in steps),
        "pad_frac": statistics.fmean(pads) if pads else None,
        "gflops": update_flop / max(1e-9, sum(s["update"] for s in steps)) / 1e9,
        "mm_peak": statistics.median(r["mm_peak_gflops"] for r in runs),
        "rss": max(r["peak_rss_mb"] for r in runs), "per_pair": [statistics.median(s["secs"] for s in r["steps"][1:])
                                                                  for r in runs],
        "eval": [r["eval"] for r in runs if r.get("eval")],
    }


def bench_size(size: str, args) -> dict:
    sides = ["kitae", "trl"] + (["kitae-all-rows"] if args.also_all_rows else [])
    steps = args.steps or DEFAULT_STEPS[size]
    pairs = args.pairs or DEFAULT_PAIRS[size]
    model_path(size, Path(args.models))  # built before the clock starts
    load_before = os.getloadavg()
    runs: dict[str, list[dict]] = {s: [] for s in sides}
    for p in range(pairs):
        for side in sides if p % 2 == 0 else sides[::-1]:
            runs[side].append(run_child(side, size, steps, args))
            print(f"  {size} pair {p + 1}/{pairs}: {side} done ({os.getloadavg()[0]:.1f} load)", flush=True)
    return {"size": size, "load": (load_before[0], os.getloadavg()[0]), "sides": {s: summarize(r) for s, r in runs.items()}}


def report(result: dict, threads: int) -> None:
    size, sides = result["size"], result["sides"]
    lo, hi = result["load"]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    busy = "busy" if max(lo, hi) > cores * 0.75 else "quiet"
    print(f"\n{size}: {PROMPTS} prompts x {G} samples/step, <= {MAX_NEW} new tokens, GRPO, beta 0, CPU fp32, "
          f"{threads} thread(s); load average {lo:.1f} -> {hi:.1f} on {cores} cores ({busy})")
    print(f"{'':16}{'steps':>6}{'s/step':>8}{'range':>14}{'generate':>10}{'update':>8}{'tokens':>8}{'skipped':>9}"
          f"{'pad':>6}{'GFLOP/s':>9}{'mm peak':>9}{'RSS MB':>8}")
    for name, s in sides.items():
        pad = f"{s['pad_frac']:.0%}" if s["pad_frac"] is not None else "-"
        print(f"{name:16}{s['steps']:>6}{s['secs']:>8.2f}{s['secs_min']:>7.2f}-{s['secs_max']:<6.2f}{s['generate']:>10.2f}"
              f"{s['update']:>8.2f}{s['len_mean']:>8.1f}{s['skipped']:>9.0%}{pad:>6}{s['gflops']:>9.1f}{s['mm_peak']:>9.1f}"
              f"{s['rss']:>8.0f}")
        for e in s["eval"]:
            print(f"{'':16}held-out pass@1 {e['pass@1']:.3f}, compliance {e['compliance']:.3f}")
    ratios = [t / k for t, k in zip(sides["trl"]["per_pair"], sides["kitae"]["per_pair"])]
    print(f"kitae is {sides['trl']['secs'] / sides['kitae']['secs']:.2f}x faster per step than TRL (median of the steps; "
          f"per pair {min(ratios):.2f}x-{max(ratios):.2f}x; target >= 2x at 20M and 100M)")
    if "kitae-all-rows" in sides:
        print(f"with every row in the update (no skipping): "
              f"{sides['trl']['secs'] / sides['kitae-all-rows']['secs']:.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", default="2M,20M,100M", help="model sizes, from 2M, 20M, 100M")
    ap.add_argument("--pairs", type=int, default=0, help="kitae/TRL pairs per size (default: 3, 2, 2)")
    ap.add_argument("--steps", type=int, default=0, help="steps per child, the warm-up included (default: 8, 4, 3)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads for each side")
    ap.add_argument("--models", default=str(Path(tempfile.gettempdir()) / "kitae-vs-trl-models"),
                    help="where the 20M and 100M models are built and kept")
    ap.add_argument("--also-all-rows", action="store_true", help="also kitae with optim.skip_zero_advantage off")
    ap.add_argument("--eval", action="store_true", help="held-out pass@1 after each child's training")
    ap.add_argument("--json", help="write the results here too")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--side", choices=["kitae", "trl", "kitae-all-rows"], help=argparse.SUPPRESS)
    ap.add_argument("--all-rows", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.side:
        return child(args)
    results = []
    for size in args.params.split(","):
        results.append(bench_size(size, args))
        report(results[-1], args.threads)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
