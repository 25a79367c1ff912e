"""benchmarks/gpu.py's CPU mode: the same code path as the GPU run (a random-weight Qwen2 model built in place,
kitae's Trainer in process, then against a real ``kitae serve model`` on loopback), with a tiny model, so the
script cannot rot between the times a GPU runs it. bf16 with float32 master weights: the autocast path."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu.py"


@pytest.mark.slow
def test_the_gpu_benchmark_runs_on_cpu_with_a_tiny_model(capsys):
    spec = importlib.util.spec_from_file_location("gpu_benchmark", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)  # mixed precision bf16 in this process
    try:
        rows = bench.main(["--device", "cpu", "--tiny", "--steps", "2", "--prompts", "2", "--group-size", "2",
                           "--max-new-tokens", "4", "--dtype", "bfloat16", "--master-weights", "float32"])
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)
    out = capsys.readouterr().out
    assert list(rows) == ["in-process", "server, 1 replica"]
    for r in rows.values():
        assert r["steps"] == 1  # the steps after the warm-up one
        assert r["gen_tokens_per_s"] > 0 and r["train_tokens_per_s"] > 0 and r["secs_per_step"] > 0
        assert math.isnan(r["peak_gib"])  # no CUDA memory to report on CPU
    assert rows["server, 1 replica"]["sync_secs"] > 0  # the server engine pushed the weights
    assert "weights torch.float32, autocast bf16" in out  # fp32 master weights, bf16 compute
    assert "kitae serve model --device cpu --dtype bfloat16" in out
