"""benchmarks/memory.py compares kitae's and TRL's peak memory on equal work: both sides' settings do the same work
(rows, lengths, group, micro-batch, one optimizer step, every row trained), the shared reward varies within a
group, and the script runs in --tiny mode and prints its ratio line (no assert on the ratio's value)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "memory.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("memory_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_both_sides_do_the_same_work(bench, tmp_path):
    from kitae.models import BUNDLED_MODEL
    from kitae.trainer.config import load_train_config

    work = {"prompts": 4, "group": 4, "new": 128, "micro": 8, "chunk": None, "device": "cpu", "threads": 1}
    k = bench.side_settings("kitae", str(BUNDLED_MODEL), work, str(tmp_path))
    trl = bench.side_settings("trl", str(BUNDLED_MODEL), work, str(tmp_path))
    rows = work["prompts"] * work["group"]
    assert k["optim"]["prompts_per_step"] * k["sampling"]["group_size"] == rows
    # TRL: one optimizer step of micro-batches of `micro` rows over all the rows, generated at once
    assert trl["per_device_train_batch_size"] * trl["gradient_accumulation_steps"] == rows
    assert k["optim"]["micro_batch_size"] == trl["per_device_train_batch_size"] == work["micro"]
    assert k["sampling"]["group_size"] == trl["num_generations"] and trl["num_iterations"] == k["algorithm"]["mu"] == 1
    assert k["sampling"]["max_new_tokens"] == trl["max_completion_length"] == work["new"]
    assert k["optim"]["steps"] == trl["max_steps"] == 1
    assert k["optim"]["skip_zero_advantage"] is False  # every row trained, as TRL trains them
    assert k["model"]["gradient_checkpointing"] is trl["gradient_checkpointing"] is False
    assert k["algorithm"]["loss"] == trl["loss_type"] == "grpo" and k["algorithm"]["kl"]["coef"] == trl["beta"] == 0
    assert k["data"]["shuffle"] is trl["shuffle_dataset"] is False
    cfg = load_train_config(data=k)  # kitae takes it as it is
    assert cfg.optim.logprob_chunk_size > 0  # the default: chunked


def test_the_shared_reward_varies_within_a_group(bench):
    ids = [[1, 3, 5], [2, 4], [1, 2, 3, 4], []]
    assert bench.odd_share(["", "", "", ""], completion_ids=ids) == [1.0, 0.0, 0.5, 0.0]


@pytest.mark.slow
def test_the_benchmark_prints_a_ratio_in_tiny_mode(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    out = subprocess.run([sys.executable, str(SCRIPT), "--tiny", "--models", "qwen-vocab", "--model-dir",
                          str(tmp_path)], env=env, capture_output=True, text=True, timeout=1200)
    assert out.returncode == 0, out.stderr[-2000:]
    assert re.search(r"^kitae / TRL peak memory \(qwen-vocab\): \d+\.\d\dx \(\d+ vs \d+ completion tokens in 4 rows\)$",
                     out.stdout, re.M), out.stdout
    peaks = dict(re.findall(r"^(kitae|trl) +(\d+) ", out.stdout, re.M))
    assert set(peaks) == {"kitae", "trl"}  # each side's peak, beside what it did
    assert "vocabulary 151,936" in out.stdout and "measured as:" in out.stdout
    assert (tmp_path / "qwen-vocab" / "config.json").exists()  # the model was built where asked
