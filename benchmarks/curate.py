"""Embedding dedupe on 10,000 prompts: throughput and memory, kitae's blockwise search vs the full N×N matrix.

    python benchmarks/curate.py                  # 10,000 synthetic prompts (English and Japanese)
    python benchmarks/curate.py --n 20000
    python benchmarks/curate.py --sweep          # thresholds on tests/curate/data/dedupe_set.jsonl

What is measured, in one run:
1. encoding: all-MiniLM-L6-v2 (the packaged weights) on the prompts, prompts per second;
2. the near-duplicate search on those embeddings, each method in its own subprocess (so peak RSS is its own):
   - baseline: the textbook way, the full N×N similarity matrix, then keep-first row by row;
   - kitae: :func:`kitae.curate.embed.first_duplicates`, blocks of 1024 rows against column chunks;
   - kitae with the default guards (numbers, answer, lang), which the baseline does not have.
   Each reports wall time, peak RSS above the process's RSS before the search, the tracemalloc peak (numpy
   reports its buffers to tracemalloc), and the rows it finds to be duplicates. The first two must agree.

The prompts: templated questions (arithmetic, capitals, unit conversions, word problems) in both languages,
with about 10% planted paraphrases (the same question through another template).

Not part of the test suite's pass/fail.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TEMPLATES = {
    "add": {"en": ["What is {a}+{b}?", "Compute {a} + {b}.", "What is {a} plus {b}?", "Add {a} and {b}."],
            "ja": ["{a}+{b}は？", "{a}たす{b}はいくつですか？", "{a}+{b}を計算してください。", "{a}と{b}を足すといくつ？"]},
    "capital": {"en": ["What is the capital of {c}?", "Which city is the capital of {c}?", "Name the capital of {c}."],
                "ja": ["{c}の首都は？", "{c}の首都はどこですか？", "{c}の首都を教えてください。"]},
    "convert": {"en": ["How many metres are in {a} kilometres?", "Convert {a} km to metres.",
                       "{a} kilometres is how many metres?"],
                "ja": ["{a}キロメートルは何メートルですか？", "{a}kmをメートルに直してください。", "{a}kmは何m？"]},
    "apples": {"en": ["{n} has {a} apples and buys {b} more. How many apples does {n} have?",
                      "{n} had {a} apples and bought {b} more. How many apples now?"],
               "ja": ["{n}はりんごを{a}個持っていて、{b}個買いました。全部で何個？",
                      "{n}はりんごを{a}個持っています。さらに{b}個買うと何個になりますか？"]},
}
COUNTRIES = [("France", "フランス"), ("Japan", "日本"), ("Italy", "イタリア"), ("Spain", "スペイン"), ("Peru", "ペルー"),
             ("Kenya", "ケニア"), ("Norway", "ノルウェー"), ("Egypt", "エジプト"), ("Cuba", "キューバ"), ("Chile", "チリ")]
NAMES = [("Tom", "太郎"), ("Ann", "花子"), ("Ken", "健"), ("Mia", "美咲"), ("Sam", "翔")]


def synthetic_prompts(n: int, seed: int = 0, paraphrase_share: float = 0.1) -> list[dict]:
    rng = random.Random(seed)
    rows, seen = [], set()
    while len(rows) < n:
        kind, lang = rng.choice(list(TEMPLATES)), rng.choice(["en", "ja"])
        fields = {"a": rng.randint(1, 999), "b": rng.randint(1, 999)}
        country, name = rng.choice(COUNTRIES), rng.choice(NAMES)
        fields["c"], fields["n"] = country[lang == "ja"], name[lang == "ja"]
        used = {"add": "ab", "capital": "c", "convert": "a", "apples": "abn"}[kind]  # the fields its text shows
        key = (kind, lang) + tuple(fields[f] for f in used)
        if key in seen:
            continue
        seen.add(key)
        answer = {"add": fields["a"] + fields["b"], "capital": country[0], "convert": 1000 * fields["a"],
                  "apples": fields["a"] + fields["b"]}[kind]
        templates = rng.sample(TEMPLATES[kind][lang], 2)
        copies = 2 if rng.random() < paraphrase_share else 1
        for t in templates[:copies]:
            rows.append({"messages": [{"role": "user", "content": t.format(**fields)}],
                         "reference_answer": str(answer), "lang": lang, "planted": copies == 2})
    rng.shuffle(rows)
    return rows[:n]


# ---- one search, in its own process ----------------------------------------------------------------
def status_mib(field: str) -> float:
    """VmRSS (resident now) or VmHWM (the peak) of this process, in MiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def reset_peak_rss() -> None:
    """Linux: writing 5 to clear_refs resets VmHWM, so the peak that follows is the search's own."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def naive_first_duplicates(vectors: np.ndarray, threshold: float) -> np.ndarray:
    """Baseline: the whole similarity matrix at once, then keep-first row by row."""
    sims = vectors @ vectors.T  # [N, N]
    kept = np.zeros(len(vectors), dtype=bool)
    partner = np.full(len(vectors), -1, dtype=np.int64)
    for i in range(len(vectors)):
        prev = np.flatnonzero(kept[:i])
        if len(prev):
            j = int(sims[i, prev].argmax())
            if sims[i, prev[j]] >= threshold:
                partner[i] = prev[j]
                continue
        kept[i] = True
    return partner


def child(method: str, emb_path: str, rows_path: str, out_path: str, threshold: float) -> None:
    from kitae.curate.dedupe import DedupeConfig, guard_keys, layer_guard
    from kitae.curate.embed import first_duplicates

    vectors = np.load(emb_path)
    rows = [json.loads(line) for line in Path(rows_path).read_text(encoding="utf-8").splitlines()]
    guard = layer_guard(guard_keys([rows], ["numbers", "answer", "lang"])[0], threshold, DedupeConfig()) \
        if method == "kitae+guards" else None
    base = status_mib("VmRSS")
    reset_peak_rss()
    tracemalloc.start()
    t0 = time.perf_counter()
    if method == "naive":
        partner = naive_first_duplicates(vectors, threshold)
    else:
        partner, _ = first_duplicates(vectors, threshold, guard)
    seconds = time.perf_counter() - t0
    _, traced = tracemalloc.get_traced_memory()
    peak_rss = status_mib("VmHWM")
    np.save(out_path, partner)
    print(json.dumps({"seconds": seconds, "rss_mib": peak_rss - base, "traced_mib": traced / 2**20,
                      "duplicates": int((partner >= 0).sum())}))


def run_child(method: str, emb: Path, rows: Path, out: Path, threshold: float) -> dict:
    cmd = [sys.executable, __file__, "--child", method, str(emb), str(rows), str(out), str(threshold)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ---- the benchmark ---------------------------------------------------------------------------------
def benchmark(n: int, threshold: float, block_note: str) -> None:
    from kitae.curate.embed import encode, load_encoder
    from kitae.curate.text import prompt_text

    rows = synthetic_prompts(n)
    texts = [prompt_text(r) for r in rows]
    encoder = load_encoder()
    t0 = time.perf_counter()
    vectors = encode(encoder, texts)
    enc_s = time.perf_counter() - t0
    print(f"embedding dedupe: {n} prompts, all-MiniLM-L6-v2 (dim {vectors.shape[1]}), threshold {threshold}, "
          f"{os.cpu_count()} CPUs")
    planted = sum(r["planted"] for r in rows) // 2
    print(f"encode: {enc_s:.1f} s ({n / enc_s:.0f} prompts/s); planted paraphrase pairs: about {planted}\n")
    with tempfile.TemporaryDirectory() as tmp:
        emb, rows_file = Path(tmp) / "emb.npy", Path(tmp) / "rows.jsonl"
        np.save(emb, vectors)
        rows_file.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        results = {}
        for method in ("naive", "kitae", "kitae+guards"):
            results[method] = run_child(method, emb, rows_file, Path(tmp) / f"{method}.npy", threshold)
        same = np.array_equal(np.load(Path(tmp) / "naive.npy"), np.load(Path(tmp) / "kitae.npy"))
    labels = {"naive": "baseline: full N×N matrix", "kitae": f"kitae blockwise ({block_note})",
              "kitae+guards": "kitae blockwise + guards"}
    print(f"{'method':<34} {'search s':>9} {'prompts/s':>10} {'peak RSS +MiB':>14} {'tracemalloc MiB':>16} "
          f"{'duplicates':>11}")
    for method, r in results.items():
        print(f"{labels[method]:<34} {r['seconds']:9.2f} {n / r['seconds']:10.0f} {r['rss_mib']:14.1f} "
              f"{r['traced_mib']:16.1f} {r['duplicates']:11d}")
    b, k = results["naive"], results["kitae"]
    print(f"\nkitae vs baseline: {k['traced_mib'] / b['traced_mib']:.3f}x the traced memory, "
          f"{k['rss_mib'] / max(b['rss_mib'], 1e-9):.3f}x the peak RSS growth, {k['seconds'] / b['seconds']:.2f}x "
          f"the search time; same rows kept: {'yes' if same else 'NO'}")
    print(f"a full matrix for {n} prompts is {n * n * 4 / 2**20:.0f} MiB of float32; "
          f"for 100,000 it would be {100_000**2 * 4 / 2**30:.0f} GiB")


def sweep() -> None:
    """Recall of the planted paraphrases and false merges of distinct prompts, per language and guard set."""
    from itertools import combinations

    from kitae.curate.dedupe import DedupeConfig, guard_keys, layer_guard
    from kitae.curate.embed import adjusted, encode, load_encoder
    from kitae.curate.text import prompt_text

    path = ROOT / "tests" / "curate" / "data" / "dedupe_set.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    vectors = encode(load_encoder(), [prompt_text(r) for r in rows])
    print(f"{path.relative_to(ROOT)}: pairs of rows in the same language; a pair 'matches' at threshold t when")
    print("its (guarded) similarity >= t. recall: planted paraphrase pairs that match; "
          "false: distinct pairs that do.\n")
    print(f"{'guards':<22} {'lang':<4} {'t':>5} {'recall':>7} {'false':>6}")
    for guards in ([], ["lang", "numbers"], ["lang", "numbers", "answer"]):
        for t in (0.8, 0.85, 0.9, 0.95):
            guard = layer_guard(guard_keys([rows], guards)[0], t, DedupeConfig())
            sims = adjusted(vectors @ vectors.T, guard, guard) if guards else vectors @ vectors.T
            for lang in ("en", "ja"):
                idx = [i for i, r in enumerate(rows) if r["lang"] == lang]
                pairs = list(combinations(idx, 2))
                pos = [sims[i, j] >= t for i, j in pairs if rows[i]["group"] == rows[j]["group"]]
                neg = [sims[i, j] >= t for i, j in pairs if rows[i]["group"] != rows[j]["group"]]
                print(f"{'+'.join(guards) or 'none':<22} {lang:<4} {t:5.2f} {sum(pos):3d}/{len(pos):<3d} {sum(neg):6d}")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        method, emb, rows, out, threshold = sys.argv[2:7]
        child(method, emb, rows, out, float(threshold))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000, help="Number of prompts.")
    parser.add_argument("--threshold", type=float, default=0.9)
    parser.add_argument("--sweep", action="store_true", help="Threshold table on the test set instead.")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.sweep:
        sweep()
    else:
        benchmark(args.n, args.threshold, "1024-row blocks")


if __name__ == "__main__":
    main()
