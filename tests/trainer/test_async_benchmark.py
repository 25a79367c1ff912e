"""benchmarks/async.py's --tiny mode: the same code path as the measured run (examples/zero.yaml trained sync and
async, interleaved, evaluated at the same step), a few tokens, so the script cannot rot."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "async.py"


@pytest.mark.slow
def test_the_async_benchmark_runs_in_tiny_mode(capsys, tmp_path):
    spec = importlib.util.spec_from_file_location("async_benchmark", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    result = bench.main(["--tiny", "--pairs", "1", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    (pair,) = result["pairs"]
    assert set(pair) == {"sync", "async"}
    for arm in pair.values():
        assert arm["steps_per_min"] > 0 and 0 <= arm["pass@1"] <= 1
    assert pair["sync"]["policy_lag"] == 0 and 0 < pair["async"]["policy_lag"] <= 1  # async sampled ahead
    assert math.isfinite(result["ratio"]) and math.isfinite(result["pass_gap"])
    assert "async / sync steps per minute" in out and "skipped in the rate" in out
    assert (tmp_path / "pair0-async" / "run.db").exists() and (tmp_path / "pair0-sync" / "run.db").exists()
