"""A LoRA checkpoint works on another machine: it names its base by Hub id and commit (adapter_config.json,
the model card, kitae_adapter.json), so plain peft and `kitae chat/eval -m ADAPTER` load it from a different
Hub cache; a local base stays a path; an adapter saved with an absolute snapshot path still loads."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import torch

from kitae.trainer.config import load_train_config
from kitae.trainer.loop import Trainer
from tests.hub_cache import lay_out, offline_hub
from tests.plugins.tiny_run import write_config

pytestmark = pytest.mark.slow

REPO = "kitae-test/tiny-llama"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
LORA = {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}


@pytest.fixture
def adapter_from_the_hub(tiny_assets, tmp_path, monkeypatch, rewards_on_path):
    """A one-step LoRA run over REPO from this machine's Hub cache; returns (adapter folder copied out, the
    cache it came from)."""
    first = tmp_path / "machine-a"
    offline_hub(monkeypatch, first)
    lay_out(first, REPO, tiny_assets / "model", commit=COMMIT)
    cfg = load_train_config(write_config(tiny_assets, tmp_path, **{
        "model.path": REPO, "model.lora": LORA, "optim.steps": 1, "data.eval": None, "logging.save_every": 1}))
    Trainer(cfg).train()
    adapter = tmp_path / "adapter"
    shutil.copytree(tmp_path / "t" / "checkpoints" / "step-000001" / "model", adapter)
    return adapter, first


def _another_machine(monkeypatch, tmp_path, tiny_assets, first):
    """The same repository at the same commit in a different Hub cache; the first cache gone."""
    shutil.rmtree(first)
    second = tmp_path / "machine-b"
    offline_hub(monkeypatch, second)
    lay_out(second, REPO, tiny_assets / "model", commit=COMMIT)


def test_an_adapter_names_its_base_by_hub_id_and_commit(adapter_from_the_hub):
    adapter, _ = adapter_from_the_hub
    config = json.loads((adapter / "adapter_config.json").read_text())
    assert (config["base_model_name_or_path"], config["revision"]) == (REPO, COMMIT)
    meta = json.loads((adapter / "kitae_adapter.json").read_text())
    assert meta == {"base": REPO, "revision": COMMIT, "quantization": None}
    assert f"base_model: {REPO}" in (adapter / "README.md").read_text()
    assert (adapter / "generation_config.json").is_file()


def test_plain_peft_and_kitae_load_the_adapter_on_another_machine(adapter_from_the_hub, tmp_path, monkeypatch,
                                                                  tiny_assets):
    from peft import AutoPeftModelForCausalLM

    from kitae.models import load_causal_lm

    adapter, first = adapter_from_the_hub
    _another_machine(monkeypatch, tmp_path, tiny_assets, first)
    plain = AutoPeftModelForCausalLM.from_pretrained(str(adapter)).eval()
    ours = load_causal_lm(str(adapter)).eval()
    ids = torch.tensor([[3, 4, 5, 6]])
    with torch.no_grad():
        torch.testing.assert_close(ours(ids).logits, plain(ids).logits, rtol=0, atol=0)


def test_kitae_chat_and_eval_take_an_adapter_folder(adapter_from_the_hub, tmp_path, monkeypatch, tiny_assets):
    adapter, first = adapter_from_the_hub
    _another_machine(monkeypatch, tmp_path, tiny_assets, first)
    chat = subprocess.run([sys.executable, "-m", "kitae.cli.main", "chat", "what is 1+1?", "-m", str(adapter),
                           "--max-new-tokens", "4", "--temperature", "0"], capture_output=True, text=True)
    assert chat.returncode == 0, chat.stderr[-2000:]
    evaluated = subprocess.run([sys.executable, "-m", "kitae.cli.main", "eval", "-m", str(adapter), "--data",
                                str(tiny_assets / "train.jsonl"), "--limit", "2", "-k", "1", "--max-new-tokens", "4",
                                "--out", str(tmp_path / "eval"), "--json"], capture_output=True, text=True)
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]
    assert json.loads(evaluated.stdout)[0]["path"] == str(adapter)


def test_an_adapter_saved_with_an_absolute_snapshot_path_still_loads(adapter_from_the_hub, tmp_path, monkeypatch,
                                                                     tiny_assets):
    """What kitae wrote before it named bases: the first machine's snapshot folder; read as the Hub id at its
    commit when that folder is not here."""
    from kitae.models import load_causal_lm

    adapter, first = adapter_from_the_hub
    config = json.loads((adapter / "adapter_config.json").read_text())
    old = first / "hub" / f"models--{REPO.replace('/', '--')}" / "snapshots" / COMMIT
    config.update(base_model_name_or_path=str(old), revision=None)
    (adapter / "adapter_config.json").write_text(json.dumps(config))
    (adapter / "kitae_adapter.json").unlink()
    _another_machine(monkeypatch, tmp_path, tiny_assets, first)
    assert load_causal_lm(str(adapter)).peft_config["default"].r == LORA["r"]


def test_a_local_base_stays_a_path(tiny_assets, tmp_path, rewards_on_path):
    cfg = load_train_config(write_config(tiny_assets, tmp_path, **{
        "model.lora": LORA, "optim.steps": 1, "data.eval": None, "logging.save_every": 1}))
    Trainer(cfg).train()
    config = json.loads((tmp_path / "t" / "checkpoints" / "step-000001" / "model" / "adapter_config.json").read_text())
    assert (config["base_model_name_or_path"], config["revision"]) == (str((tiny_assets / "model").resolve()), None)


@pytest.mark.parametrize("folder, name", [
    ("/x/hub/models--Qwen--Qwen3-0.6B/snapshots/" + COMMIT, ("Qwen/Qwen3-0.6B", COMMIT)),  # Hub cache: id, commit
    ("/x/models/my-model", ("/x/models/my-model", None)),  # a local folder: its path
])
def test_base_name(folder, name):
    from kitae.models import base_name

    got = base_name(folder)
    assert (got.name, got.revision) == name


def test_the_bundled_base_is_named_by_its_bundled_name():
    from kitae.models import BUNDLED_MODEL, base_name, resolve_model_path

    assert base_name(BUNDLED_MODEL).name == "kitae-tiny-base"
    assert resolve_model_path("kitae-tiny-base") == str(BUNDLED_MODEL)  # what loads it on any machine


@pytest.mark.parametrize("meta, message", [
    ({"base": None}, "names no base model"),
    ({"base": "kitae-tiny-base", "quantization": "nf4"}, "expected a mapping"),
    ({"base": "kitae-tiny-base", "quantization": {"bits": 2}}, "bits"),
])
def test_a_bad_kitae_adapter_json_is_named(tmp_path, meta, message):
    from kitae.errors import ConfigError
    from kitae.models import adapter_base

    (tmp_path / "adapter_config.json").write_text("{}")
    (tmp_path / "kitae_adapter.json").write_text(json.dumps(meta))
    with pytest.raises(ConfigError, match=message) as err:
        adapter_base(tmp_path)
    assert "kitae_adapter.json" in str(err.value)
