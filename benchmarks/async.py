"""Synchronous vs async GRPO (``sampling.async: true``) on the GRPO-zero recipe (examples/zero.yaml), on this
machine: steps per minute and held-out pass@1 at the same step.

    python benchmarks/async.py                      # 2 interleaved pairs of 30 steps each
    python benchmarks/async.py --steps 10 --pairs 1 # shorter
    python benchmarks/async.py --tiny               # the code path in well under a minute (the test runs it)

Each pair trains the recipe once synchronously and once with async rollouts (max_staleness 1), the order
alternating between pairs so a change in the machine's load falls on both sides alike. The two arms run the same
config, seed, steps and evaluation; only ``sampling.async`` differs. Measured per arm:

- steps per minute over steps 2..N, from the trainer's own step callbacks: the first step is skipped on both sides
  (async's includes starting the rollout worker process: spawn, torch and transformers imports, the model copy),
  and so is the evaluation after the last step;
- held-out pass@1 at step N (the trainer's final evaluation, ``eval.limit`` prompts, k samples each);
- the rows the update left out (``skipped_rows``: zero-advantage rows) and the mean policy lag, printed beside.

The ratio printed is async's steps per minute over sync's, the median over the pairs (target >= 1.6x); the
pass@1 gap is async minus sync at step N (target within 0.03). The machine's 1-minute load average is printed
before and after: other programs sharing the cores change both numbers. The bundled model is below
kitae.threads' one-thread size, so a synchronous trainer runs one torch thread and async runs two processes of
one thread each. Not part of the test suite's pass/fail (tests/trainer/test_async_benchmark.py runs ``--tiny``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kitae.store import RunStore  # noqa: E402
from kitae.trainer.config import load_train_config  # noqa: E402
from kitae.trainer.loop import Trainer  # noqa: E402

RECIPE = ROOT / "examples" / "zero.yaml"


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30, help="training steps per arm (the first is warm-up)")
    ap.add_argument("--pairs", type=int, default=2, help="sync/async pairs, interleaved")
    ap.add_argument("--eval-limit", type=int, default=200, help="held-out prompts of the pass@1 at step N")
    ap.add_argument("--max-staleness", type=int, default=1)
    ap.add_argument("--tiny", action="store_true", help="2 prompts x 2 samples x 4 tokens, 3 steps, 4 eval prompts")
    ap.add_argument("--out", type=Path, default=None, help="where the runs go (default: a temporary folder)")
    args = ap.parse_args(argv)
    if args.tiny:
        args.steps, args.eval_limit = min(args.steps, 3), min(args.eval_limit, 4)
    if args.steps < 2:
        ap.error("--steps must be at least 2: the first step is warm-up")
    return args


def overrides(args: argparse.Namespace, arm: str, out: Path, name: str) -> list[str]:
    over = [f"output_dir={out}", f"name={name}", f"optim.steps={args.steps}", "eval.every=0",
            "logging.save_every=0", f"eval.limit={args.eval_limit}", f"sampling.async={arm == 'async'}"]
    if arm == "async":
        over.append(f"sampling.max_staleness={args.max_staleness}")
    if args.tiny:
        over += ["optim.prompts_per_step=2", "sampling.group_size=2", "sampling.max_new_tokens=4", "eval.k=1",
                 "eval.max_new_tokens=4"]
    return over


def run_arm(args: argparse.Namespace, arm: str, out: Path, name: str) -> dict[str, float]:
    """One training run; its steps per minute over steps 2..N, pass@1 at N, skipped rows and policy lag."""
    cfg = load_train_config(RECIPE, overrides(args, arm, out, name))
    trainer = Trainer(cfg)
    marks: dict[int, float] = {}
    trainer.on_step = lambda step, metrics: marks.__setitem__(step, time.perf_counter())
    trainer.train()
    with RunStore.open(cfg.run_dir, read_only=True) as store:
        metrics, summary = store.metrics(), store.summary()
    n = args.steps
    later = lambda key: [v for s, v in metrics.get(key, []) if s > 1]  # noqa: E731
    return {
        "steps_per_min": (n - 1) / (marks[n] - marks[1]) * 60,
        "pass@1": float((summary.get("latest_eval") or {}).get("metrics", {}).get("pass@1", float("nan"))),
        "skipped_rows": statistics.fmean(later("skipped_rows") or [0.0]),
        "policy_lag": statistics.fmean(later("policy_lag") or [0.0]),
    }


def main(argv: list[str] | None = None) -> dict[str, object]:
    args = parse(argv)
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="kitae-async-bench-") as tmp:
        out = args.out or Path(tmp)
        pairs = []
        for i in range(args.pairs):
            order = ("sync", "async") if i % 2 == 0 else ("async", "sync")
            pair = {arm: run_arm(args, arm, out, f"pair{i}-{arm}") for arm in order}
            pairs.append(pair)
            s, a = pair["sync"], pair["async"]
            print(f"pair {i + 1} ({' then '.join(order)}): sync {s['steps_per_min']:.2f} steps/min, async "
                  f"{a['steps_per_min']:.2f} -> {a['steps_per_min'] / s['steps_per_min']:.2f}x; pass@1 at step "
                  f"{args.steps}: sync {s['pass@1']:.3f}, async {a['pass@1']:.3f}; skipped rows per step sync "
                  f"{s['skipped_rows']:.1f}, async {a['skipped_rows']:.1f}; async mean policy lag "
                  f"{a['policy_lag']:.2f}", flush=True)
    ratio = statistics.median(p["async"]["steps_per_min"] / p["sync"]["steps_per_min"] for p in pairs)
    gap = statistics.fmean(p["async"]["pass@1"] - p["sync"]["pass@1"] for p in pairs)
    load1 = os.getloadavg()[0]
    print(f"\nasync / sync steps per minute: {ratio:.2f}x (median of {len(pairs)} pair(s); target >= 1.6x)")
    print(f"pass@1 at step {args.steps}, async - sync: {gap:+.3f} (mean over pairs; target within 0.03)")
    print(f"skipped in the rate: step 1 of each arm (async's starts the rollout worker) and the final evaluation; "
          f"1-minute load average {load0:.1f} before, {load1:.1f} after, on {os.cpu_count()} cores")
    return {"pairs": pairs, "ratio": ratio, "pass_gap": gap, "load": (load0, load1)}


if __name__ == "__main__":  # the rollout worker is spawned: this module is imported again in it
    main()
