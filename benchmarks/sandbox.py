"""What the sandbox costs: runs per second of a trivial program, sandboxed vs a bare subprocess (same run).

    python benchmarks/sandbox.py [--runs 40] [--repeats 5]

Three ways to run ``/bin/true`` and a trivial Python program (``python -I -S -c "print(1)"``) to completion:
a bare ``subprocess.run`` (the baseline), :func:`kitae.sandbox.process.run` with ``sandbox: none`` (rlimits and
a clean environment, no namespaces), and with bubblewrap (namespaces, read-only binds, private /tmp; as root
also the switch to nobody in a user namespace of its own). Each figure is the median over ``--repeats``
batches of ``--runs`` runs, one after another. Then the per-case cost inside the harness (a forked child per
case, what the ``code`` grader and ``kitae curate testcases`` pay per test case once a sandbox is up). Not part
of the test suite's pass/fail.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kitae.sandbox import Limits, Sandbox
from kitae.sandbox.process import run
from kitae.sandbox.programs import CaseLimits, run_program

PROGRAMS = {"/bin/true": ["/bin/true"], "python print(1)": [sys.executable, "-I", "-S", "-c", "print(1)"]}


def per_second(fn, runs: int, repeats: int) -> float:
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(runs):
            fn()
        rates.append(runs / (time.perf_counter() - start))
    return statistics.median(rates)


def bench(argv: list[str], runs: int, repeats: int, workdir: Path) -> dict[str, float]:
    limits = Limits(wall_seconds=30)
    bare = per_second(lambda: subprocess.run(argv, capture_output=True, check=True), runs, repeats)
    out = {"bare subprocess": bare}
    for kind in ("none", "bwrap"):
        sandbox = Sandbox(kind)
        try:
            out[f"sandbox: {kind}"] = per_second(lambda: run(sandbox, argv, workdir, limits), runs, repeats)
        finally:
            sandbox.close()
    return out


def bench_cases(cases: int, repeats: int) -> float:
    """Cases per second for one Python program run on many cases in one sandbox (startup included)."""
    sandbox = Sandbox()
    try:
        tests = [{"input": f"{i} {i}\n"} for i in range(cases)]
        program = "a, b = map(int, input().split())\nprint(a + b)"
        return per_second(lambda: run_program(sandbox, "python", program, tests, limits=CaseLimits()), 1,
                          repeats) * cases
    finally:
        sandbox.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--cases", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kitae-bench-") as tmp:
        for name, argv in PROGRAMS.items():
            rates = bench(argv, args.runs, args.repeats, Path(tmp))
            base = rates["bare subprocess"]
            print(f"\n{name}: {args.runs} runs x {args.repeats} repeats (median)")
            print(f"  {'':18} {'runs/s':>8} {'ms/run':>8} {'vs bare':>8}")
            for label, rate in rates.items():
                print(f"  {label:18} {rate:8.1f} {1000 / rate:8.1f} {rate / base:7.2f}x")
            print(f"  bubblewrap vs bare subprocess: {rates['sandbox: bwrap'] / base:.2f}x the runs per second "
                  f"({1000 / rates['sandbox: bwrap'] - 1000 / base:+.1f} ms per run)")
    rate = bench_cases(args.cases, args.repeats)
    print(f"\none sandbox, {args.cases} cases of a Python program, each a forked child: {rate:.0f} cases/s "
          f"({1000 / rate:.1f} ms per case, sandbox start included)")


if __name__ == "__main__":
    main()
