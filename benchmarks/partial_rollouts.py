"""Partial rollouts (Kimi k1.5 §2.6.2): wall time per training iteration with and without, when a few samples are
much longer than the rest.

    python benchmarks/partial_rollouts.py [--measure 6] [--max-new-tokens 256] [--segment 32] [--group-size 4]

The setup makes the long tail explicit and stable: a tiny model is taught to answer arithmetic prompts in a few
tokens and one "story" prompt with a run-on that never ends its turn, and the learning rate is 0, so the length
mix is the same at every iteration. Each step draws 8 prompts (an epoch of the 8-prompt set: 7 short, 1 long), so
every iteration has one group of very long samples. Both runs are the real trainer (generation, grading,
loss and backward), stepped in turn (one iteration of each, alternately, so other load on the machine hits both
alike); only ``sampling.partial`` differs (old segments excluded from the loss, the paper's option).
The first ceil(max_new_tokens / segment) iterations fill the replay buffer (a long trajectory needs that many
iterations), so they are left out; from then on one long group finishes per iteration, as in steady state.
Reported over the next ``--measure`` iterations, per run: median seconds per iteration, seconds generating,
groups trained per second and mean completion tokens of the trained samples, with the ratio baseline / partial.
Not part of the test suite's pass/fail.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kitae.chat import IM_END, chatml  # noqa: E402
from kitae.trainer.config import load_train_config  # noqa: E402
from kitae.trainer.loop import Trainer  # noqa: E402
from tests.tiny import overfit, tiny_llama, tiny_tokenizer  # noqa: E402  (the test suite's tiny model)

SHORT = [(a, b) for a, b in [(1, 2), (3, 4), (2, 5), (4, 4), (6, 1), (3, 3), (5, 2)]]
STORY = [{"role": "user", "content": "tell me a story"}]


def build_assets(root: Path, long_tokens: int) -> None:
    tok = tiny_tokenizer()
    model = tiny_llama(len(tok), hidden=64)
    texts = [chatml([{"role": "user", "content": f"what is {a}+{b}?"}]) + f"{a + b}{IM_END}" for a, b in SHORT]
    story = " ".join(["hello world, the answer is 47."] * (long_tokens // 8 + 2))
    overfit(model, tok, texts + [chatml(STORY) + story], steps=80, lr=1e-2)
    model.save_pretrained(root / "model")
    tok.save_pretrained(root / "model")
    rows = [{"messages": [{"role": "user", "content": f"what is {a}+{b}?"}], "reference_answer": str(a + b)}
            for a, b in SHORT] + [{"messages": STORY, "reference_answer": "47"}]
    (root / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def make_trainer(root: Path, name: str, args, partial: dict | None) -> Trainer:
    cfg = load_train_config(data={
        "name": name, "output_dir": str(root / "runs"),
        "model": {"path": str(root / "model")},
        "data": {"train": str(root / "train.jsonl"), "eval": None},
        "rewards": [{"name": "correct", "grader": {"type": "answer"}}],
        "algorithm": {"loss": "kimi", "reset_optimizer": True},
        "sampling": {"group_size": args.group_size, "max_new_tokens": args.max_new_tokens, "partial": partial},
        "optim": {"steps": args.skip + args.measure, "prompts_per_step": 8, "micro_batch_size": 64, "lr": 0.0},
        "logging": {"save_every": 10_000},
    })
    return Trainer(cfg)


def run_interleaved(trainers: list[Trainer], steps: int) -> list[list[dict]]:
    """One iteration of each trainer in turn, so load from other processes on the machine hits both alike."""
    out: list[list[dict]] = [[] for _ in trainers]
    for step in range(1, steps + 1):
        for t, log in zip(trainers, out):
            log.append(t.train_step(step))
    for t in trainers:
        t.run_log.loggers.close()
        t.store.finish("finished")
        t.store.close()
    return out


def summarize(log: list[dict], skip: int) -> dict:
    kept = log[skip:]
    secs, groups = [m["secs_per_step"] for m in kept], [m["groups"] for m in kept]
    return {"secs_median": statistics.median(secs), "groups": sum(groups), "groups_per_sec": sum(groups) / sum(secs),
            "secs_generate": statistics.median(m["secs_generate"] for m in kept),
            "len_mean": statistics.fmean(m["len_mean"] for m in kept if m["groups"])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--measure", type=int, default=6, help="iterations measured after the buffer has filled")
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--segment", type=int, default=32, help="partial rollouts: tokens per trajectory per iteration")
    ap.add_argument("--group-size", type=int, default=4)
    args = ap.parse_args()
    args.skip = -(-args.max_new_tokens // args.segment)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        build_assets(root, args.max_new_tokens)
        trainers = [make_trainer(root, "whole", args, None),
                    make_trainer(root, "partial", args, {"segment_tokens": args.segment})]
        base, part = (summarize(log, args.skip) for log in run_interleaved(trainers, args.skip + args.measure))
    print(f"{args.measure} iterations measured after {args.skip} to fill the buffer; "
          f"8 prompts x {args.group_size} samples, "
          f"1 prompt in 8 runs on to {args.max_new_tokens} tokens; partial segment {args.segment} tokens")
    print(f"{'':28}{'whole trajectories':>20}{'partial rollouts':>20}{'ratio':>10}")
    for key, label, better_low in (("secs_median", "s / iteration (median)", True),
                                   ("secs_generate", "s generating / iteration", True),
                                   ("groups_per_sec", "groups trained / s", False)):
        ratio = base[key] / part[key] if better_low else part[key] / base[key]
        print(f"{label:<28}{base[key]:>20.3f}{part[key]:>20.3f}{ratio:>9.2f}x")
    print(f"{'mean tokens / trained sample':<28}{base['len_mean']:>20.1f}{part['len_mean']:>20.1f}")
    print(f"groups trained: {base['groups']:.0f} (whole) vs {part['groups']:.0f} (partial) in the measured iterations")


if __name__ == "__main__":
    main()
