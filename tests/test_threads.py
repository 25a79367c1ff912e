"""kitae.threads: one thread rule for every command that runs a model, from the model's size."""

from __future__ import annotations

import json
import struct

import pytest
import torch
from typer.testing import CliRunner

from kitae.cli.main import app
from kitae.errors import ConfigError
from kitae.models import BUNDLED_MODEL, BUNDLED_RM
from kitae.threads import ONE_THREAD_BELOW, count_parameters, set_threads, threads_for


@pytest.mark.parametrize("params, cpus, load, processes, expected", [
    (1_967_808, 16, 0.0, 1, 1),                  # the bundled model: one thread, however idle the machine
    (ONE_THREAD_BELOW - 1, 16, 0.0, 1, 1),       # just below the line
    (ONE_THREAD_BELOW, 2, 0.1, 1, 2),            # at the line, an idle 2-core machine: both cores
    (ONE_THREAD_BELOW, 2, 8.0, 1, 1),            # the same machine with 8 runnable processes: one
    (100_000_000, 16, 4.2, 1, 12),               # 16 cores, 4 busy: the 12 free ones
    (100_000_000, 16, 0.0, 4, 4),                # four processes of one run share the cores
    (100_000_000, 2, 0.0, 4, 1),                 # never below one
    (None, 16, 0.0, 1, None),                    # size unknown: torch's default stays
])
def test_rule(params, cpus, load, processes, expected):
    assert threads_for(params, cpus=cpus, load=load, processes=processes) == expected


def test_sizes_come_from_the_weight_headers():
    assert count_parameters(None) == count_parameters("bundled") == count_parameters(BUNDLED_MODEL) == 1_967_808
    assert count_parameters(BUNDLED_RM) == sum(p.numel() for p in _load_rm().parameters())


def _load_rm():
    from transformers import AutoModelForSequenceClassification

    return AutoModelForSequenceClassification.from_pretrained(BUNDLED_RM)


def test_sharded_and_adapter_folders(tmp_path):
    shards = tmp_path / "sharded"
    shards.mkdir()
    _safetensors(shards / "a.safetensors", {"w": [3, 4]})
    _safetensors(shards / "b.safetensors", {"v": [5], "__metadata__": None})
    (shards / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"w": "a.safetensors", "v": "b.safetensors"}}))
    assert count_parameters(shards) == 12 + 5
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    _safetensors(adapter / "adapter_model.safetensors", {"lora_A": [2, 8], "lora_B": [8, 2]})
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(shards)}))
    assert count_parameters(adapter) == 32 + 17  # the adapter runs on its base model
    assert count_parameters(tmp_path / "missing") is None and count_parameters(tmp_path) is None


def _safetensors(path, shapes):
    header = {k: {"dtype": "F32", "shape": v, "data_offsets": [0, 0]} if v is not None else {}
              for k, v in shapes.items()}
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw)


def test_set_threads_takes_the_users_number_or_the_rule():
    assert set_threads(None) == 1 == torch.get_num_threads()  # the bundled model
    assert set_threads(2) == 2 == torch.get_num_threads()  # --threads 2 wins over the rule
    assert set_threads(None, params=1000) == 1


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_bad_thread_counts_name_the_option(bad):
    with pytest.raises(ConfigError, match="threads: expected a whole number of threads >= 1"):
        set_threads(bad, option="threads")


def test_a_train_config_checks_threads():
    from kitae.trainer.config import load_train_config

    with pytest.raises(ConfigError, match="threads: must be at least 1"):
        load_train_config(data={"threads": 0, "rewards": [{"name": "c", "grader": {"type": "answer"}}]})


@pytest.mark.parametrize("command", [
    ["chat", "hi"], ["generate", "-d", "x.jsonl", "-o", "y.jsonl"], ["eval", "-m", "bundled"],
    ["merge", "a", "b", "-o", "c"], ["long2short", "shortest", "-o", "x"], ["long2short", "dpo-pairs", "-o", "x"],
    ["long2short", "sft", "-m", "a", "-d", "b", "-o", "c"], ["long2short", "dpo", "-m", "a", "-d", "b", "-o", "c"],
    ["serve", "rm"], ["serve", "model"], ["curate", "dedupe", "-d", "a", "-o", "b"],
    ["curate", "difficulty", "-d", "a", "-o", "b"], ["curate", "hackable", "-d", "a", "-o", "b"],
    ["curate", "run"],
])
def test_every_model_command_takes_threads(command):
    """--threads 0 is refused by the option itself, before anything loads: every one of them has the option."""
    result = CliRunner().invoke(app, [*command, "--threads", "0"])
    assert result.exit_code == 2
    assert "Invalid value for '--threads'" in result.output
