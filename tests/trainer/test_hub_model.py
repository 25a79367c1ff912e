"""A run whose model.path is a Hub id (from a Hub cache laid out by hand, HF_HUB_OFFLINE=1): it trains on the
revision it names, saves the id and revision as written, and a resume cannot switch the revision."""

from __future__ import annotations

import json
import sqlite3

import pytest
import yaml

from kitae.errors import ConfigError
from kitae.store import RunStore
from kitae.trainer.config import load_train_config
from kitae.trainer.loop import Trainer
from tests.hub_cache import commit_of, lay_out, offline_hub
from tests.plugins.tiny_run import write_config

REPO = "kitae-test/tiny-policy"


@pytest.fixture
def hub_model(tiny_assets, monkeypatch, tmp_path):
    home = tmp_path / "hf"
    offline_hub(monkeypatch, home)
    lay_out(home, REPO, tiny_assets / "model", refs=("main",), commit=commit_of("main"))
    return lay_out(home, REPO, tiny_assets / "model", refs=("v1",), commit=commit_of("v1"))


def test_a_run_trains_the_revision_its_config_names(tiny_assets, tmp_path, rewards_on_path, hub_model):
    path = write_config(tiny_assets, tmp_path, **{"model.path": REPO, "model.revision": "v1", "optim.steps": 2,
                                                  "eval.every": 0, "logging.save_every": 2})
    trainer = Trainer(load_train_config(path))
    assert trainer.policy.name_or_path == str(hub_model)  # the v1 snapshot, not main's
    assert trainer.train()["status"] == "finished"
    saved = yaml.safe_load((tmp_path / "t" / "config.yaml").read_text())
    assert saved["model"]["path"] == REPO and saved["model"]["revision"] == "v1"  # as written, not the cache path
    assert RunStore.open(tmp_path / "t").summary()["steps"] == 2
    ckpt = tmp_path / "t" / "checkpoints" / "step-000002" / "model"
    assert json.loads((ckpt / "config.json").read_text())["vocab_size"] > 0  # a plain transformers folder

    resumed = write_config(tiny_assets, tmp_path, **{"model.path": REPO, "model.revision": "main",
                                                     "optim.steps": 3, "eval.every": 0})
    with pytest.raises(ConfigError, match="model.revision"):
        Trainer(load_train_config(resumed), resume=True, allow_config_change=True)


def test_a_run_on_a_hub_dataset_with_a_field_map(tiny_assets, tmp_path, rewards_on_path, hub_model):
    """Your model and your data: both Hub ids, the dataset's columns mapped (GSM8K's shape), a system prompt."""
    from tests.data.test_sources import _gsm8k_like

    lay_out(tmp_path / "hf", "kitae-test/gsm8k-like", _gsm8k_like(tmp_path / "src"), repo_type="dataset")
    data = {"train": {"hub": "kitae-test/gsm8k-like", "name": "main", "split": "train"},
            "eval": {"hub": "kitae-test/gsm8k-like", "name": "main", "split": "test"},
            "fields": {"prompt": "question", "reference_answer": "answer"}, "answer_pattern": r"####\s*(.+)$",
            "system": "Answer with a number."}
    path = write_config(tiny_assets, tmp_path, **{"model.path": REPO, "data": data, "optim.steps": 2,
                                                  "eval.every": 2, "eval.grader": {"type": "answer"}})
    trainer = Trainer(load_train_config(path))
    assert [r["reference_answer"] for r in trainer.eval_rows] == ["5"]  # cut out of "7-2 = 5\n#### 5"
    assert trainer.train()["status"] == "finished"
    assert RunStore.open(tmp_path / "t").summary()["latest_eval"]["step"] == 2
    con = sqlite3.connect(tmp_path / "t" / "run.db")
    rows = con.execute("SELECT messages, reference FROM groups").fetchall()
    assert rows and all(json.loads(m)[0] == {"role": "system", "content": "Answer with a number."} for m, _ in rows)
    assert {ref for _, ref in rows} <= {"5", "40"}
