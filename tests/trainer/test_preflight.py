"""Pre-flight: config, graders, reward-function imports, data and prompt lengths are checked before the model loads.

Ordering is shown with a model folder whose weights file is corrupt: loading it fails with a weights error, so a
run that reports the grader or data mistake instead never got as far as loading the model.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kitae.errors import ConfigError, DataError, KitaeError
from kitae.models import load_causal_lm
from kitae.trainer.config import load_train_config
from kitae.trainer.loop import Trainer
from kitae.trainer.preflight import SHOWN_ROWS, preflight
from tests.plugins.tiny_run import write_config

ROOT = Path(__file__).resolve().parents[2]
SYNTAX_ERROR = {"name": "py", "grader": {"type": "python", "source": "def grade(sample, item):\n    return (\n"}}


@pytest.fixture
def clean_imports(monkeypatch):
    """Pre-flight adds folders to sys.path and imports modules: undo both after the test."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        if name == "my_rewards":
            del sys.modules[name]


def test_a_corrupt_weights_file_fails_at_load(corrupt_model):
    """The control: with nothing else wrong, this model folder fails when its weights load (not a ConfigError)."""
    with pytest.raises(Exception) as err:
        load_causal_lm(corrupt_model)
    assert not isinstance(err.value, KitaeError)


@pytest.mark.parametrize(
    "reward, message",
    [
        (SYNTAX_ERROR, "rewards[0].grader.source: syntax error on line 2"),
        ({"name": "b", "function": "my_rewards:nope"},
         "rewards[0].function: cannot import 'my_rewards:nope': module 'my_rewards' has no attribute 'nope'"),
        ({"name": "b", "function": "no_such_module:brevity"},
         "rewards[0].function: cannot import 'no_such_module:brevity': No module named 'no_such_module'"),
    ],
    ids=["python-grader-syntax", "missing-function", "missing-module"],
)
def test_grader_and_import_errors_come_before_the_model_loads(tiny_assets, tmp_path, corrupt_model, clean_imports,
                                                             monkeypatch, reward, message):
    cfg_path = write_config(tiny_assets, tmp_path / "runs", **{"model.path": str(corrupt_model), "rewards": [reward]})
    (tmp_path / "my_rewards.py").write_text("def brevity(completions, **kw):\n    return [0.0] * len(completions)\n")
    monkeypatch.chdir(tmp_path)  # the current folder is on the import path
    cfg = load_train_config(cfg_path)
    with pytest.raises(ConfigError, match=re.escape(message)):
        Trainer(cfg)
    assert not (tmp_path / "runs" / "t").exists()  # no run folder, no store


def test_the_cli_reports_a_python_grader_syntax_error_before_loading(tiny_assets, tmp_path, corrupt_model):
    cfg_path = write_config(tiny_assets, tmp_path / "runs", **{"model.path": str(corrupt_model),
                                                                "rewards": [SYNTAX_ERROR]})
    proc = _kitae("train", str(cfg_path), "-q", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "safetensors" not in proc.stderr.lower()
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("error: rewards[0].grader.source: syntax error on line ")


@pytest.mark.slow
def test_readme_reward_function_is_found_beside_the_config(tiny_assets, tmp_path, clean_imports, monkeypatch):
    """`function: "my_rewards:brevity"` with my_rewards.py beside the config, run from another folder."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "my_rewards.py").write_text(textwrap.dedent("""
        def brevity(prompts, completions, **kw):
            return [-len(c[0]["content"]) / 100 for c in completions]
    """))
    cfg_path = write_config(tiny_assets, project, **{"rewards": [{"name": "mine", "function": "my_rewards:brevity"}],
                                                     "optim.steps": 1, "data.eval": None})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = _kitae("train", str(cfg_path), "-q", cwd=elsewhere)
    assert proc.returncode == 0, proc.stderr
    assert "run t finished after 1 steps" in proc.stdout
    # and from the folder holding my_rewards.py with the config elsewhere (in-process: cwd on the path)
    other_cfg = tmp_path / "cfg-elsewhere" / "cfg.yaml"
    other_cfg.parent.mkdir()
    other_cfg.write_text(cfg_path.read_text())
    monkeypatch.chdir(project)
    checked = preflight(load_train_config(other_cfg), other_cfg.parent)
    assert [c.name for c in checked.components] == ["mine"]
    checked.close()


def _long_rows(path: Path, lengths: list[int]) -> Path:
    rows = [{"messages": [{"role": "user", "content": "what is 1+2? " * n}], "reference_answer": "3"} for n in lengths]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_prompts_longer_than_the_context_are_named_before_the_model_loads(tiny_assets, tmp_path, corrupt_model, rewards_on_path):
    # the tiny model's context is 512 tokens; "what is 1+2? " is several tokens, so 200 repeats never fit
    lengths = [1, 200, 1, 200, 200, 200, 200, 200, 200, 200]
    data = _long_rows(tmp_path / "long.jsonl", lengths)
    cfg = load_train_config(write_config(tiny_assets, tmp_path / "runs", **{
        "model.path": str(corrupt_model), "data.train": str(data), "data.eval": None}))
    with pytest.raises(DataError) as err:
        Trainer(cfg)
    msg = str(err.value)
    long_rows = [i + 1 for i, n in enumerate(lengths) if n == 200]
    assert msg.startswith(f"{data}: {len(long_rows)} prompts do not fit: row 2 (")
    assert all(f"row {r} (" in msg for r in long_rows[:SHOWN_ROWS])
    assert f"row {long_rows[SHOWN_ROWS]} (" not in msg and f"and {len(long_rows) - SHOWN_ROWS} more" in msg
    assert "the model's context is 512 tokens" in msg and "sampling.max_new_tokens" in msg


def test_one_long_prompt_and_max_new_tokens_count_against_the_context(tiny_assets, tmp_path, rewards_on_path):
    data = _long_rows(tmp_path / "d.jsonl", [1, 1, 30])
    cfg = load_train_config(write_config(tiny_assets, tmp_path / "runs", **{
        "data.train": str(data), "data.eval": str(data), "sampling.max_new_tokens": 16}))
    preflight(cfg).close()  # fits: 30 repeats are well under 512 - 16 tokens
    cfg.eval.max_new_tokens = 400  # the eval rows get more new tokens: now row 3 does not fit
    with pytest.raises(DataError, match=r"d.jsonl, row 3: the prompt takes \d+ tokens .* \+ eval.max_new_tokens 400"):
        preflight(cfg)
    cfg.eval.max_new_tokens, cfg.sampling.max_new_tokens = None, 512
    with pytest.raises(ConfigError, match="sampling.max_new_tokens: 512 new tokens leave no room"):
        preflight(cfg)


def test_data_and_sampler_errors_come_before_the_model_loads(tiny_assets, tmp_path, corrupt_model, rewards_on_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"prompt": "ok"}\n{"prompt": "\\ud800"}\n')
    cfg = load_train_config(write_config(tiny_assets, tmp_path / "runs", **{
        "model.path": str(corrupt_model), "data.train": str(bad)}))
    with pytest.raises(DataError, match="row 2, field 'prompt': a lone surrogate"):
        Trainer(cfg)
    cfg = load_train_config(write_config(tiny_assets, tmp_path / "runs", **{
        "model.path": str(corrupt_model), "data.sampler.name": "prioritized", "data.sampler.correct": "shrot"}))
    with pytest.raises(ConfigError, match="data.sampler.correct"):
        Trainer(cfg)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda cfg: setattr(cfg.optim, "lr", float("inf")), "optim.lr: expected a finite number"),
        (lambda cfg: setattr(cfg.sampling, "temperature", float("nan")), "sampling.temperature: expected a finite"),
        (lambda cfg: setattr(cfg.sampling, "top_p", 0.0), "sampling.top_p: must be > 0, got 0.0"),
        (lambda cfg: setattr(cfg.rewards[0], "weight", float("nan")), "rewards[0].weight: expected a finite number"),
        (lambda cfg: cfg.optim.betas.__setitem__(0, float("nan")), "optim.betas[0]: expected a finite number"),
    ],
    ids=["lr-inf", "temperature-nan", "top_p-0", "weight-nan", "beta-nan"],
)
def test_bad_numbers_set_in_python_are_refused_before_the_model_loads(tiny_assets, tmp_path, corrupt_model,
                                                                     rewards_on_path, change, message):
    """A config read from YAML is checked as it is read; one changed in Python after, by pre-flight."""
    cfg = load_train_config(write_config(tiny_assets, tmp_path / "runs", **{"model.path": str(corrupt_model)}))
    change(cfg)
    with pytest.raises(ConfigError, match=re.escape(message)):
        Trainer(cfg)
    assert not (tmp_path / "runs" / "t").exists()


def test_a_nan_reward_model_scale_is_refused_before_the_model_loads(tiny_assets, tmp_path, corrupt_model):
    """``scale: .nan`` made every reward model score the top reward (min(clip, nan) is clip)."""
    path = tmp_path / "cfg.yaml"
    path.write_text(write_config(tiny_assets, tmp_path / "runs", **{"model.path": str(corrupt_model)}).read_text()
                    .replace("- function: tests.reward_functions:short\n  name: short",
                             "- grader: {type: reward_model, model: bundled, scale: .nan}\n  name: rm"))
    assert "scale: .nan" in path.read_text()
    with pytest.raises(ConfigError, match=re.escape("rewards[0].grader.scale: expected a finite number, got nan")):
        Trainer(load_train_config(path))


def _kitae(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "kitae.cli.main", *args], capture_output=True, text=True,
                          timeout=600, env=env, cwd=cwd)
