"""The group judge's cost and throughput, against the scripted judge server (kitae/judge/testing.py), same run.

    python benchmarks/judge.py [--groups 32] [--samples 8] [--latency 0.2] [--concurrency 8]

1. Calls and prompt tokens of the group judge (one call per group: the conversation, the reference and the
   rubric are sent once for N samples, the hosted RFT grader guide's reason to judge the group at once) against the baseline of
   one judge call per sample (the same judge on groups of one).
2. Throughput of grading the groups with ``--concurrency`` groups in flight against one at a time (the
   baseline), with every reply delayed by ``--latency`` seconds to stand in for a remote model.

Token counts are the scripted server's approximation (words and punctuation marks), the same for both
sides. Response caching is off, so every call is made. Not part of the test suite's pass/fail.
"""

from __future__ import annotations

import argparse
import random
import time

from kitae.graders.base import run_sync
from kitae.graders.rows import Row, agrade_rows
from kitae.graders.spec import build_grader
from kitae.judge.testing import ScriptedServer, judge_brain

WORDS = ("the report share click client select open admin revenue growth margin cost equity debt value rate "
         "year quarter team answer model data result method because first then finally so").split()
CONVERSATION = [
    {"role": "system", "content": "You are a support assistant for a reporting tool. Answer briefly and politely."},
    {"role": "user", "content": "How do I send last quarter's revenue report to a client? I tried exporting it "
                                "but the client says the file is empty. What should I do differently?"},
]


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


def make_rows(groups: int, samples: int, seed: int = 0) -> list[Row]:
    rng = random.Random(seed)
    rows = []
    for g in range(groups):
        item = {"messages": CONVERSATION, "reference_answer": sentence(rng, 40)}
        group = [{"output_text": sentence(rng, rng.randint(30, 90))} for _ in range(samples)]
        rows.append(Row(data={}, item=item, samples=group, is_group=True, number=g + 1))
    return rows


def singles(rows: list[Row]) -> list[Row]:
    """The baseline: every sample judged alone (one call each)."""
    return [Row(data={}, item=r.item, samples=[s], is_group=False, number=r.number) for r in rows for s in r.samples]


def grade(server: ScriptedServer, rows: list[Row], concurrency: int) -> tuple[dict, float]:
    spec = {"type": "judge", "model": server.model, "base_url": server.base_url, "cache": False,
            "max_concurrency": max(1, concurrency), "retries": 0}
    grader = build_grader(spec)
    start = time.perf_counter()
    grades = run_sync(agrade_rows(grader, rows, concurrency))
    seconds = time.perf_counter() - start
    assert all(g.score is not None for gs in grades for g in gs), grader.stats()["last_error"]
    return grader.stats(), seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=32)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--latency", type=float, default=0.2, help="seconds the scripted judge takes per reply")
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    rows = make_rows(args.groups, args.samples)

    with ScriptedServer(default=judge_brain(lambda text: 1 + len(text) % 5, delay=args.latency)) as server:
        group, _ = grade(server, rows, args.concurrency)
        single, _ = grade(server, singles(rows), args.concurrency)
        _, sequential_s = grade(server, rows, 1)
        concurrent, concurrent_s = grade(server, rows, args.concurrency)

    n = args.groups * args.samples
    print(f"{args.groups} groups x {args.samples} samples (baseline: one judge call per sample)")
    print(f"{'':22}{'group judge':>14}{'per sample':>14}{'ratio':>9}")
    print(f"{'calls':22}{group['calls']:>14,}{single['calls']:>14,}{single['calls'] / group['calls']:>8.1f}x")
    print(f"{'prompt tokens':22}{group['prompt_tokens']:>14,}{single['prompt_tokens']:>14,}"
          f"{single['prompt_tokens'] / group['prompt_tokens']:>8.1f}x")
    print(f"{'prompt tokens/sample':22}{group['prompt_tokens'] / n:>14,.0f}{single['prompt_tokens'] / n:>14,.0f}")
    print(f"\nthroughput with {args.latency * 1000:.0f} ms per reply (baseline: one group at a time)")
    print(f"{'':22}{'concurrency ' + str(args.concurrency):>14}{'sequential':>14}{'speedup':>9}")
    print(f"{'groups/s':22}{args.groups / concurrent_s:>14.1f}{args.groups / sequential_s:>14.1f}"
          f"{sequential_s / concurrent_s:>8.1f}x")
    print(f"{'samples/s':22}{n / concurrent_s:>14.1f}{n / sequential_s:>14.1f}")
    assert concurrent["calls"] == args.groups


if __name__ == "__main__":
    main()
