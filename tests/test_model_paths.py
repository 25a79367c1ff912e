"""A model path that is not there is one clean error line from every command that loads a model, before anything
is loaded (no retries, no traceback): a missing folder, a folder without config.json, or a Hub id (ORG/NAME or a
bare name) that is not in the Hub cache while HF_HUB_OFFLINE=1. Hub ids that are cached: tests/test_hub.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kitae.errors import ConfigError
from kitae.models import BUNDLED_MODEL, load_causal_lm, load_tokenizer, resolve_model_path
from tests.hub_cache import offline_hub

ROOT = Path(__file__).resolve().parents[1]
NOT_CACHED = "is not a local folder and not in the Hub cache"


@pytest.fixture(autouse=True)
def _empty_offline_hub(monkeypatch, tmp_path):
    offline_hub(monkeypatch, tmp_path / "hf")


@pytest.mark.parametrize("path, message", [
    ("Qwen/Qwen3-0.6B", f"--model: model 'Qwen/Qwen3-0.6B' {NOT_CACHED}"),  # a Hub id, not cached
    ("my-model", f"--model: model 'my-model' {NOT_CACHED}"),                # a bare name is a Hub id too
    ("gpt2", f"--model: model 'gpt2' {NOT_CACHED}"),
    ("/no/such/folder", "--model: no model folder at '/no/such/folder' (give a local folder"),
    ("./models/x", "--model: no model folder at './models/x'"),                 # a relative path: never the Hub
])
def test_a_model_that_is_not_there_is_refused(path, message):
    with pytest.raises(ConfigError) as err:
        resolve_model_path(path, "--model")
    assert str(err.value).startswith(message), err.value


def test_an_uncached_hub_id_offline_says_how_to_fetch_it(tmp_path):
    with pytest.raises(ConfigError) as err:
        resolve_model_path("Qwen/Qwen3-0.6B")
    text = str(err.value)
    assert "HF_HUB_OFFLINE=1" in text and "`hf download Qwen/Qwen3-0.6B`" in text
    assert str(tmp_path / "hf" / "hub") in text  # the cache folder it looked in


def test_a_folder_or_file_without_config_json_is_refused(tmp_path):
    (tmp_path / "weights.safetensors").write_bytes(b"x")
    with pytest.raises(ConfigError, match="no config.json"):
        resolve_model_path(tmp_path)
    with pytest.raises(ConfigError, match="no model folder"):
        resolve_model_path(tmp_path / "weights.safetensors")


def test_bundled_and_local_folders_resolve(tmp_path):
    assert resolve_model_path(None) == resolve_model_path("bundled") == str(BUNDLED_MODEL)
    (tmp_path / "config.json").write_text("{}")
    assert resolve_model_path(tmp_path) == str(tmp_path)
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    with pytest.raises(ConfigError):
        resolve_model_path(adapter)
    assert resolve_model_path(adapter, adapter=True) == str(adapter)


def test_loaders_check_before_asking_transformers():
    for load in (load_causal_lm, load_tokenizer):
        with pytest.raises(ConfigError, match=NOT_CACHED):
            load("Qwen/Qwen3-0.6B")


def _kitae(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(PYTHONPATH=str(ROOT), HF_HOME=str(cwd / "hf"), HF_HUB_OFFLINE="1")  # an empty cache, offline
    return subprocess.run([sys.executable, "-m", "kitae.cli.main", *args], capture_output=True, text=True,
                          timeout=300, env=env, cwd=cwd)


# one bad path kind per command, rotating: Hub id, bare name, missing folder, an existing folder with no config.json
COMMANDS = [
    ("chat", ["chat", "hi", "--model", "Qwen/Qwen3-0.6B"], "Qwen/Qwen3-0.6B"),
    ("generate", ["generate", "--data", "DATA", "--out", "out.jsonl", "--model", "my-model"], "my-model"),
    ("eval", ["eval", "--model", "a=/no/such/folder", "--data", "DATA"], "/no/such/folder"),
    ("merge", ["merge", "bundled", "EMPTY", "--out", "merged"], "EMPTY"),
    ("long2short shortest",
     ["long2short", "shortest", "--model", "Qwen/Qwen3-0.6B", "--data", "DATA", "--out", "o.jsonl"], "Qwen/Qwen3-0.6B"),
    ("long2short sft", ["long2short", "sft", "--model", "my-model", "--data", "DATA", "--out", "sft"], "my-model"),
    ("curate difficulty", ["curate", "difficulty", "--data", "DATA", "--out", "o.jsonl", "--model", "my-model"],
     "my-model"),
    ("curate hackable", ["curate", "hackable", "--data", "DATA", "--out", "o.jsonl", "--model", "Qwen/Qwen3-0.6B"],
     "Qwen/Qwen3-0.6B"),
    ("serve model", ["serve", "model", "--model", "Qwen/Qwen3-0.6B", "--port", "0"], "Qwen/Qwen3-0.6B"),
    ("serve rm", ["serve", "rm", "--model", "my-rm", "--port", "0"], "my-rm"),
    ("train", ["train", "CFG"], "Qwen/Qwen3-0.6B"),
    ("train rm grader", ["train", "RMCFG"], "my-rm"),
]


@pytest.mark.parametrize("args, bad", [c[1:] for c in COMMANDS], ids=[c[0] for c in COMMANDS])
def test_every_model_command_refuses_a_non_local_model_cleanly(tmp_path, args, bad):
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "12+35は？", "reference_answer": "47"}\n')
    (tmp_path / "EMPTY").mkdir()
    (tmp_path / "cfg.yaml").write_text(f"model: {{path: {bad}}}\ndata: {{train: {data}, eval: null}}\n"
                                       "rewards: [{grader: {type: answer}}]\n")
    (tmp_path / "rmcfg.yaml").write_text(f"data: {{train: {data}, eval: null}}\n"
                                         f"rewards: [{{grader: {{type: reward_model, model: {bad}}}}}]\n")
    subst = {"DATA": str(data), "CFG": "cfg.yaml", "RMCFG": "rmcfg.yaml", "EMPTY": str(tmp_path / "EMPTY")}
    bad = subst.get(bad, bad)
    proc = _kitae(*[subst.get(a, a) for a in args], cwd=tmp_path)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert f"no model folder at '{bad}'" in lines[0] or f"'{bad}' {NOT_CACHED}" in lines[0], lines
    assert not (tmp_path / "runs").exists() and not (tmp_path / "merged").exists()
