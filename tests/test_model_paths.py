"""kitae never downloads models: a Hub id, a bare name or a missing folder as a model path is one clean error line
from every command that loads a model, before anything is loaded (no Hub lookup, no retries, no traceback)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kitae.errors import ConfigError
from kitae.models import BUNDLED_MODEL, load_causal_lm, load_tokenizer, resolve_model_path

ROOT = Path(__file__).resolve().parents[1]
NEVER = "kitae never downloads models"


@pytest.mark.parametrize("path", ["Qwen/Qwen3-0.6B", "my-model", "/no/such/folder", "gpt2"])
def test_anything_but_a_local_model_folder_is_refused(path):
    with pytest.raises(ConfigError) as err:
        resolve_model_path(path, "--model")
    assert str(err.value).startswith(f"--model: no model folder at '{path}'; {NEVER}")


def test_a_hub_id_gets_a_hint_to_download_it_yourself():
    with pytest.raises(ConfigError, match="looks like a Hub model id"):
        resolve_model_path("Qwen/Qwen3-0.6B")


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
        with pytest.raises(ConfigError, match=NEVER):
            load("Qwen/Qwen3-0.6B")


def _kitae(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}  # HF_HUB_OFFLINE unset: no hub either
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-m", "kitae.cli.main", *args], capture_output=True, text=True,
                          timeout=300, env=env, cwd=cwd)


# one bad path kind per command, rotating: Hub id, bare name, missing folder, an existing folder with no config.json
COMMANDS = [
    ("chat", ["chat", "hi", "--model", "Qwen/Qwen3-0.6B"], "Qwen/Qwen3-0.6B"),
    ("generate", ["generate", "--data", "DATA", "--out", "out.jsonl", "--model", "my-model"], "my-model"),
    ("eval", ["eval", "--model", "a=/no/such/folder", "--data", "DATA"], "/no/such/folder"),
    ("merge", ["merge", "bundled", "EMPTY", "--out", "merged"], "EMPTY"),
    ("l2s shortest", ["l2s", "shortest", "--model", "Qwen/Qwen3-0.6B", "--data", "DATA", "--out", "o.jsonl"],
     "Qwen/Qwen3-0.6B"),
    ("l2s sft", ["l2s", "sft", "--model", "my-model", "--data", "DATA", "--out", "sft"], "my-model"),
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
    assert len(lines) == 1 and lines[0].startswith("error: ") and f"no model folder at '{bad}'" in lines[0], lines
    assert NEVER in lines[0]
    assert not (tmp_path / "runs").exists() and not (tmp_path / "merged").exists()
