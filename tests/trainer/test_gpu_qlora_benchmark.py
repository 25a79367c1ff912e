"""benchmarks/gpu_qlora.py's CPU mode: the device check of the memory plan (QLoRA GRPO steps, peak memory
against `kitae plan`'s) runs its whole code path with a tiny model, so the script cannot rot between the times a
GPU runs it. bitsandbytes 0.50 runs 4-bit layers on CPU, so where it is installed the 4-bit path runs here."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_qlora.py"


@pytest.mark.slow
def test_the_qlora_device_check_runs_on_cpu_with_a_tiny_model(capsys):
    spec = importlib.util.spec_from_file_location("gpu_qlora", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = bench.main(["--device", "cpu", "--tiny", "--steps", "2", "--prompts", "2", "--group-size", "2",
                      "--max-new-tokens", "4", "--prompt-tokens", "4", "--micro-batch", "2"])
    printed = capsys.readouterr().out
    assert out["four_bit"] == (importlib.util.find_spec("bitsandbytes") is not None)
    assert ("4-bit NF4 base" in printed) == out["four_bit"] and (bench.SKIPPED_4BIT in printed) != out["four_bit"]
    assert out["gen_tokens_per_s"] > 0 and out["train_tokens_per_s"] > 0
    assert out["planned_gib"] > 0 and "peak = static + max(sampling, update)" in printed  # the plan's table
    assert math.isnan(out["peak_gib"])  # no CUDA memory to report on CPU
