"""Run page load times on a long run (10,000 steps, 100,000 samples) against a 100-step run and raw SQLite.

    python benchmarks/ui_load.py [--steps 10000] [--groups 2] [--samples 5] [--repeats 5] [--keep DIR] [--no-browser]

Writes two runs with the real run store (the long one takes a minute; --keep DIR reuses them on the next
call), serves them with `kitae ui`'s server on a free loopback port and times, as the median of --repeats:

- every JSON endpoint the page calls (HTTP round trip, server work and JSON included), on both runs;
- the baseline of the same run: the raw SQLite query for one metric series (what any plot needs at least);
- with Playwright and Chromium (/usr/bin/chromium), the time until a page is drawn: the overview's first
  plot and all its plots (they load panel by panel), the group browser.

Ratios: "x100-step" is long run / 100-step run (1.0 = the page does not slow down with run length);
"x sqlite" is the endpoint / the raw query on the long run.
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from kitae.store import GroupRecord, RunStore, SampleRecord
from kitae.web import make_server, serve_in_thread

METRIC_KEYS = [
    "reward", "reward_std", "reward/accuracy", "reward/format", "reward/judge", "kl", "kl_coef", "entropy",
    "clip_frac", "len_mean", "trunc_rate", "invalid_rate", "zero_var_frac", "loss", "grad_norm", "lr",
    "secs_per_step", "secs_generate", "secs_train", "groups", "grader/accuracy/abstain_rate",
    "grader/accuracy/error_rate", "grader/format/abstain_rate", "grader/format/error_rate",
    "grader/judge/abstain_rate", "grader/judge/error_rate", "grader/judge/judge_tokens", "low_clip_frac",
]
PROMPTS = 500  # distinct prompts, so each recurs every few hundred steps


# ---- writing the runs ----------------------------------------------------------------------------
def sample(rng: random.Random, step: int) -> SampleRecord:
    r = rng.random()
    judge = round(rng.random(), 2)
    return SampleRecord(
        text=f"step {step}: " + " ".join(rng.choice(["so", "the", "answer", "is", "42", "because", "we", "add"])
                                         for _ in range(40)),
        completion_tokens=rng.randint(20, 400), finish_reason="length" if r < 0.05 else "stop",
        reward=round(r, 3), advantage=round(r - 0.5, 3),
        scores={"accuracy": float(r > 0.5), "format": 1.0, "judge": judge},
        reasons={"accuracy": None, "format": None, "judge": "the reasoning is sound but verbose"},
        sub_scores={"judge": {"correctness": judge, "clarity": 0.5, "concision": 0.4}},
        errors={"accuracy": None, "format": None, "judge": None},
    )


def write_run(path: Path, steps: int, groups: int, samples: int) -> None:
    rng = random.Random(0)
    with RunStore.create(path, name=path.name, config={"steps": steps}, model="bench") as store:
        for step in range(1, steps + 1):
            recs = []
            for gi in range(groups):
                prompt = f"question {(step * groups + gi) % PROMPTS}: what is {gi} + {step % 97}?"
                recs.append(GroupRecord(prompt, [{"role": "user", "content": prompt}], "42", {"id": gi},
                                        [sample(rng, step) for _ in range(samples)], gi))
            store.log_groups(step, recs)
            store.log_metrics(step, {k: rng.random() for k in METRIC_KEYS})
            if step % 25 == 0:
                store.log_eval(step, {"pass@1": rng.random(), "compliance": 0.9, "len_mean": 200.0})
        store.finish("finished")


def ensure_runs(root: Path, steps: int, groups: int, samples: int) -> tuple[str, str]:
    small, large = "bench-100", f"bench-{steps}"
    for name, n in ((small, 100), (large, steps)):
        if not (root / name / "run.db").exists():
            t0 = time.perf_counter()
            write_run(root / name, n, groups, samples)
            print(f"wrote {name}: {n} steps, {n * groups * samples:,} samples in {time.perf_counter() - t0:.1f} s")
    return small, large


# ---- timing ---------------------------------------------------------------------------------------
def median_ms(fn, repeats: int) -> float:
    fn()  # warm: the first call opens files, fills caches
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def endpoints(http: httpx.Client, run: str) -> dict[str, str]:
    """The calls the page makes, with a group id and a deep offset taken from this run."""
    first = http.get(f"/api/runs/{run}/groups?order=step&limit=1").json()["groups"][0]["id"]
    total = http.get(f"/api/runs/{run}/groups?limit=1").json()["total"]
    last = http.get(f"/api/runs/{run}").json()["steps"]
    deep = min(12_000, total - 20)  # offset 12,000 on the long run, the last page on the short one
    return {
        "runs list": "/api/runs",
        "summary + panels": f"/api/runs/{run}",
        "all metrics (plots)": f"/api/runs/{run}/metrics?points=1000",
        "live poll (since last)": f"/api/runs/{run}/metrics?since={last}",
        "worst groups, page 1": f"/api/runs/{run}/groups?order=worst&limit=20",
        "worst groups, deep page": f"/api/runs/{run}/groups?order=worst&limit=20&offset={deep}",
        "zero-variance groups": f"/api/runs/{run}/groups?filter=zero_variance&limit=20",
        "truncated groups": f"/api/runs/{run}/groups?filter=truncated&limit=20",
        "one group": f"/api/runs/{run}/groups/{first}",
        "prompt across steps": f"/api/runs/{run}/prompt/{first}?limit=10",
        "evals": f"/api/runs/{run}/evals",
        "label queue": f"/api/runs/{run}/label_queue",
    }


def raw_sqlite_ms(db: Path, repeats: int) -> float:
    conn = sqlite3.connect(db)
    sql = "SELECT step, value FROM metrics WHERE key = 'reward' ORDER BY step"
    ms = median_ms(lambda: conn.execute(sql).fetchall(), repeats)
    conn.close()
    return ms


def time_api(http: httpx.Client, small: str, large: str, repeats: int, raw: float) -> None:
    paths_small, paths_large = endpoints(http, small), endpoints(http, large)
    print(f"\nbaseline: raw SQLite, one metric series of {large}: {raw:.2f} ms\n")
    print(f"{'endpoint':<28} {'100-step ms':>11} {'long ms':>9} {'KB':>7} {'x100-step':>10} {'x sqlite':>9}")
    for (name, ps), pl in zip(paths_small.items(), paths_large.values()):
        ts = median_ms(lambda: http.get(ps).raise_for_status(), repeats)
        tl = median_ms(lambda: http.get(pl).raise_for_status(), repeats)
        kb = len(http.get(pl).content) / 1024
        print(f"{name:<28} {ts:>11.1f} {tl:>9.1f} {kb:>7.0f} {tl / ts:>10.1f} {tl / raw:>9.0f}")


def time_browser(url: str, small: str, large: str, repeats: int) -> None:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        print("\nbrowser: skipped (pip install playwright)")
        return
    if not Path("/usr/bin/chromium").exists():
        print("\nbrowser: skipped (apt-get install chromium)")
        return
    args = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync"]
    drawn = ("() => { const p = document.querySelectorAll('.panel'); "
             "return p.length > 0 && [...p].every(e => e.querySelector('path.series')); }")
    first = "() => document.querySelector('.panel path.series') !== null"
    pages = {
        "overview, first plot drawn": ("#/run/{run}", first),
        "overview, every plot drawn": ("#/run/{run}", drawn),
        "group browser": ("#/run/{run}/groups", "() => document.querySelectorAll('tr[data-group]').length > 0"),
    }
    print(f"\n{'page (browser)':<28} {'100-step ms':>11} {'long ms':>9} {'x100-step':>10}")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=args)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        for name, (hash_, ready) in pages.items():
            def load(run):
                page.goto("about:blank")
                page.goto(url + hash_.format(run=run))
                page.wait_for_function(ready, timeout=60_000)
            ts, tl = median_ms(lambda: load(small), repeats), median_ms(lambda: load(large), repeats)
            print(f"{name:<28} {ts:>11.0f} {tl:>9.0f} {tl / ts:>10.1f}")
        browser.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--groups", type=int, default=2, help="groups per step")
    ap.add_argument("--samples", type=int, default=5, help="samples per group")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--keep", type=Path, help="runs folder to create once and reuse")
    ap.add_argument("--no-browser", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp)
        small, large = ensure_runs(root, args.steps, args.groups, args.samples)
        db = root / large / "run.db"
        print(f"{large}: run.db {db.stat().st_size / 2**20:.0f} MB")
        server = make_server(root, port=0)
        serve_in_thread(server)
        try:
            with httpx.Client(base_url=server.url, timeout=60) as http:
                time_api(http, small, large, args.repeats, raw_sqlite_ms(db, args.repeats))
            if not args.no_browser:
                time_browser(server.url, small, large, args.repeats)
        finally:
            server.shutdown()
            server.server_close()


if __name__ == "__main__":
    main()
