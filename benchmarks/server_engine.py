"""Rollout throughput of the server engine: completion tokens per second of generation, per training step, for the
in-process engine (the baseline), one ``kitae serve model`` replica, and two replicas.

    python benchmarks/server_engine.py [--steps 5] [--prompts 16] [--group-size 8] [--max-new-tokens 48]
                                       [--server-args "--max-batch 128"]

Three real runs of ``examples/zero.yaml`` (the bundled model, the GRPO-zero recipe's rewards), stepped in turn (one
step of each, alternately, so other load on the machine hits all three alike). The trainer process and each
replica run one torch thread (each replica is its own process), so "two replicas" uses one more core than "one
replica". Every server step also pushes the new weights to the replicas (disk sync; ``sync_secs``, not counted in
the generation time). Reported per run, over the steps after the first (warm-up): median completion tokens per
second of generation (``secs_generate``), median seconds generating and syncing, and the ratio to the in-process
engine. Not part of the test suite's pass/fail.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kitae.models import resolve_model_path  # noqa: E402
from kitae.rollout.replicas import Replicas  # noqa: E402
from kitae.trainer.config import load_train_config  # noqa: E402
from kitae.trainer.loop import Trainer  # noqa: E402


def make_trainer(root: Path, name: str, args, servers: list[str] | None) -> Trainer:
    over = [f"name={name}", f"output_dir={root}", "data.eval=null", f"optim.steps={args.steps}",
            f"optim.prompts_per_step={args.prompts}", f"sampling.group_size={args.group_size}",
            f"sampling.max_new_tokens={args.max_new_tokens}", "logging.save_every=0", "threads=1"]
    if servers:
        over += ["sampling.engine=server", f"sampling.servers=[{','.join(servers)}]"]
    return Trainer(load_train_config(ROOT / "examples" / "zero.yaml", over))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--server-args", default="", help="more kitae serve model flags, e.g. '--max-batch 128'")
    args = ap.parse_args()
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # the weight writes of every push
    model = resolve_model_path("bundled")
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; {args.prompts} prompts x "
          f"{args.group_size} samples per step, up to {args.max_new_tokens} tokens, {args.steps} steps; "
          f"kitae serve model {args.server_args or '(default flags)'}")
    extra = args.server_args.split()
    with tempfile.TemporaryDirectory() as tmp, Replicas(model, 1, log_dir=tmp, extra=extra) as one, \
            Replicas(model, 2, log_dir=tmp, extra=extra) as two:
        root = Path(tmp)
        runs = {"in-process": make_trainer(root, "hf", args, None),
                "1 replica": make_trainer(root, "one", args, one.urls),
                "2 replicas": make_trainer(root, "two", args, two.urls)}
        for t in runs.values():
            t.engine_sync.sync_weights(t.policy, 0, force=True)  # as train() does before its first step
        seen: dict[str, list[dict]] = {k: [] for k in runs}
        for step in range(1, args.steps + 1):
            for name, t in runs.items():
                seen[name].append(t.train_step(step))
        for t in runs.values():
            t.store.close()
    report(seen, args.group_size)


def report(seen: dict[str, list[dict]], group_size: int) -> None:
    rows = {}
    for name, steps in seen.items():
        steps = steps[1:] or steps  # the first step warms up
        rates = [m["len_mean"] * m["groups"] * group_size / m["secs_generate"] for m in steps]
        rows[name] = (statistics.median(rates), statistics.median(m["secs_generate"] for m in steps),
                      statistics.median(m.get("sync_secs", 0.0) for m in steps))
    base = rows["in-process"][0]
    print(f"{'engine':<12}{'tokens/s':>10}{'gen s':>8}{'sync s':>8}{'vs in-process':>15}")
    for name, (rate, gen, sync) in rows.items():
        print(f"{name:<12}{rate:>10.0f}{gen:>8.2f}{sync:>8.2f}{rate / base:>14.2f}x")


if __name__ == "__main__":
    main()
