"""Grader throughput: kitae's ROUGE-L against the rouge-score package (same run), and the numeric grader.

    python benchmarks/graders.py [--pairs 300] [--repeats 5]

ROUGE-L is timed end to end (tokenize both texts, LCS, F1) on generated English pairs of short, medium and
long answers, with rouge-score's default tokenizer and no stemming on both sides; each figure is the median
of several repeats. The target is kitae >= 3x rouge-score. Not part of the test suite's pass/fail.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from kitae.graders import build_grader
from kitae.graders import text as T

WORDS = ("the report share click client select open admin revenue growth margin cost equity debt value "
         "rate year quarter team answer model data result method a of to in and is for on with").split()


def pairs(n: int, length: int, seed: int = 0) -> list[tuple[str, str]]:
    rng = random.Random(seed)

    def sentence() -> str:
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(length // 2, length)))

    return [(sentence(), sentence()) for _ in range(n)]


def median_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bench_rouge(n: int, length: int, repeats: int) -> tuple[float, float]:
    from rouge_score import rouge_scorer

    data = pairs(n, length)
    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False)

    def ours():
        for s, r in data:
            T.rouge_l(T.words(s), T.words(r))

    def theirs():
        for s, r in data:
            scorer.score(r, s)

    return median_seconds(ours, repeats), median_seconds(theirs, repeats)


def bench_numeric(n: int, repeats: int) -> float:
    grader = build_grader({"type": "numeric"})
    item = {"reference_answer": "WACC ≈ 9.91%、株主資本コスト 10.34%、税引後負債コスト 4.15%、EV ≈ $1,705M。"}
    samples = [{"output_text": f"WACC {9.9 + i / 1000:.3f}%, equity 10.3%, debt 4.2%, EV 1,700M, growth {i % 7}%"}
               for i in range(n)]
    return median_seconds(lambda: [grader.grade_sample(item, s) for s in samples], repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    print(f"ROUGE-L F1, {args.pairs} pairs per run, median of {args.repeats} runs (baseline: rouge-score)")
    print(f"{'words/text':>10}  {'kitae pairs/s':>14}  {'rouge-score pairs/s':>20}  {'speedup':>8}")
    for length in (20, 100, 400):
        ours, theirs = bench_rouge(args.pairs, length, args.repeats)
        print(f"{length:>10}  {args.pairs / ours:>14,.0f}  {args.pairs / theirs:>20,.0f}  {theirs / ours:>7.1f}x")

    ja = [("レポートを開き、共有をクリックしてクライアントを選択します。" * 3, "レポートのShareをクリックし、管理者を選択します。" * 3)] * args.pairs
    seconds = median_seconds(lambda: [T.rouge_l(T.japanese(s), T.japanese(r)) for s, r in ja], args.repeats)
    print(f"\nROUGE-L on Japanese (fugashi morphemes, ~45 tokens/text): {args.pairs / seconds:,.0f} pairs/s"
          " (rouge-score scores Japanese 0 without a tokenizer)")

    seconds = bench_numeric(args.pairs, args.repeats)
    print(f"numeric grader (4 reference numbers, 5 sample numbers): {args.pairs / seconds:,.0f} samples/s")


if __name__ == "__main__":
    main()
