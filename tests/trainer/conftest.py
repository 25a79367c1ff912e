"""A tiny real model, a prompt set and reward functions for trainer tests (no downloads)."""

from __future__ import annotations

import json
import shutil
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from tests.tiny import tiny_llama, tiny_tokenizer

REWARDS = textwrap.dedent(
    '''
    def short(prompts, completions, completion_ids=None, **kw):
        return [-len(c[0]["content"]) / 10 for c in completions]

    def paced(prompts, completions, completion_ids=None, **kw):  # a slow grader: the run lasts long enough to watch
        import time
        time.sleep(1.0)
        return [0.0 for _ in completions]

    def picky(prompts, completions, completion_ids=None, **kw):  # zero variance in every group of process 1
        import os
        if os.environ.get("RANK", "0") == "1":
            return [1.0 for _ in completions]
        return [-len(c[0]["content"]) / 10 for c in completions]

    def down(prompts, completions, completion_ids=None, **kw):  # a reward service, down until TINY_REWARDS_UP is set
        import os
        if not os.environ.get("TINY_REWARDS_UP"):
            raise ConnectionError("reward service down: \\udcff")  # with a lone surrogate, as decoded bytes can be
        return [-len(c[0]["content"]) / 10 for c in completions]

    def silent(prompts, completions, completion_ids=None, **kw):  # abstains on every sample, says nothing
        return [None for _ in completions]

    # written as TRL's docs write them: each reads one more part of TRL's contract
    def by_tokens(completion_ids, **kwargs):  # token counts (kitae passed completion_ids=None: failed every sample)
        return [-len(ids) / 10 for ids in completion_ids]

    def ramp(completions, trainer_state, **kwargs):  # a schedule over the run (trainer_state was never passed)
        return [trainer_state.global_step / trainer_state.max_steps - len(c[0]["content"]) / 10 for c in completions]

    def repetition(completion_ids, **kwargs):  # trl.rewards' own, made by its factory
        from trl.rewards import get_repetition_penalty_reward
        return get_repetition_penalty_reward(ngram_size=2)(completion_ids=completion_ids, **kwargs)

    def as_strings(completions, **kwargs):  # written for string completions: a chat completion is a 1-message list
        return [-abs(20 - len(c)) for c in completions]

    def huge(prompts, completions, completion_ids=None, **kw):  # 1e308 on every other sample: finite, but its mean is not
        return [1e308 if i % 2 else -len(c[0]["content"]) / 10 for i, c in enumerate(completions)]

    def flaky(prompts, completions, completion_ids=None, **kw):
        if "1" in prompts[0][-1]["content"]:
            raise RuntimeError("grader service down")
        return [None if i % 2 else 1.0 for i in range(len(completions))]
    '''
)


@pytest.fixture(scope="session")
def tiny_assets(tmp_path_factory) -> Path:
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
    (root / "tiny_rewards.py").write_text(REWARDS)
    return root


def write_config(tiny_assets: Path, run_root: Path, **over) -> Path:
    cfg = {
        "name": "t",
        "output_dir": str(run_root),
        "model": {"path": str(tiny_assets / "model")},
        "data": {"train": str(tiny_assets / "train.jsonl"), "eval": str(tiny_assets / "train.jsonl")},
        "rewards": [{"name": "short", "function": "tiny_rewards:short"}],
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
def rewards_on_path(tiny_assets, monkeypatch):
    monkeypatch.syspath_prepend(str(tiny_assets))
    monkeypatch.setenv("PYTHONPATH", str(tiny_assets) + ":" + str(Path(__file__).resolve().parents[2]))
    yield
    sys.modules.pop("tiny_rewards", None)


@pytest.fixture
def corrupt_model(tiny_assets, tmp_path) -> Path:
    """The tiny model's folder with a weights file that is not safetensors: loading it fails, so an error about
    anything else proves it came before the model loaded."""
    folder = tmp_path / "corrupt-model"
    shutil.copytree(tiny_assets / "model", folder)
    (folder / "model.safetensors").write_bytes(b"\x00" * 64 + b"not a safetensors file")
    return folder
