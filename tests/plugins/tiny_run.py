"""A tiny real model, a prompt set and a config for trainer runs (no downloads), shared by the trainer, rollout,
family and run page tests; the configs name the reward functions of tests/reward_functions.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def tiny_assets(tmp_path_factory) -> Path:
    """A folder with the tiny model (model/) and 16 addition prompts (train.jsonl)."""
    from tests.tiny import tiny_llama, tiny_tokenizer

    root = tmp_path_factory.mktemp("tiny")
    tok = tiny_tokenizer()
    model = tiny_llama(len(tok))
    model.save_pretrained(root / "model")
    tok.save_pretrained(root / "model")
    rows = [
        {"messages": [{"role": "user", "content": f"what is {a}+{b}?"}], "reference_answer": str(a + b), "lang": "en"}
        for a in range(4)
        for b in range(4)
    ]
    (root / "train.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return root


def write_config(tiny_assets: Path, run_root: Path, **over) -> Path:
    """A training config for the tiny model in run_root/cfg.yaml; each keyword ("optim.steps": 2) sets one key."""
    cfg = {
        "name": "t",
        "output_dir": str(run_root),
        "model": {"path": str(tiny_assets / "model")},
        "data": {"train": str(tiny_assets / "train.jsonl"), "eval": str(tiny_assets / "train.jsonl")},
        "rewards": [{"name": "short", "function": "tests.reward_functions:short"}],
        "sampling": {"group_size": 4, "max_new_tokens": 6},
        "optim": {"steps": 4, "prompts_per_step": 2, "micro_batch_size": 8, "lr": 1e-3},
        "logging": {"save_every": 2},
        "eval": {"every": 2, "k": 2, "limit": 4, "grader": {"type": "text_similarity", "evaluation_metric": "fuzzy_match"},
                 "pass_threshold": 0.5},
    }
    for key, value in over.items():
        node = cfg
        *parents, last = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    path = run_root / "cfg.yaml"
    run_root.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.fixture
def rewards_on_path(monkeypatch):
    """tests.reward_functions importable in the processes a test starts (`kitae train`, accelerate launch): the
    repository root on their PYTHONPATH (this process has it on sys.path already)."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))


@pytest.fixture
def corrupt_model(tiny_assets, tmp_path) -> Path:
    """The tiny model's folder with a weights file that is not safetensors: loading it fails, so an error about
    anything else proves it came before the model loaded."""
    folder = tmp_path / "corrupt-model"
    shutil.copytree(tiny_assets / "model", folder)
    (folder / "model.safetensors").write_bytes(b"\x00" * 64 + b"not a safetensors file")
    return folder
