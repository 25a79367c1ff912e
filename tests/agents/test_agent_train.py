"""GRPO with an environment, end to end on CPU: the trainer samples episodes (a tool call, its result, an answer),
grades them (the environment's get_reward() is a component of its own), trains and stores them; a run that dies in
the middle of a step resumes and gives the uninterrupted run's samples and weights.

The bundled model never writes a tool call by itself, so turn 0 of every episode is made to say one (the output
layer puts all the probability on the call's tokens while turn 0 samples: tests.families.say.Say); the tool
runs, its result goes in as template tokens, and turn 1 is the model's own sampling, which differs per sample and
seed. The tokenizer carries a small chat template in Qwen2.5's tool format (<tool_call>{json}</tool_call>) that
lists only the tools' names: the bundled model's context is 192 tokens.
"""

from __future__ import annotations

import json
import sqlite3
import textwrap
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from kitae.errors import ConfigError
from kitae.store.store import DB_NAME
from kitae.trainer.config import load_train_config
from kitae.trainer.loop import Trainer
from tests.agents.episode_helpers import call_text, tools_model
from tests.families.say import Say

pytestmark = pytest.mark.slow

CALL = call_text("calc", e="3+4") + "<|im_end|>"

ENVS = textwrap.dedent(
    '''
    import os


    class Calc:
        """A TRL-style environment: its public method is the tool; get_reward() reads its own state."""

        def reset(self, **row):
            self.answer, self.seen = row["reference_answer"], []
            return None

        def calc(self, e: str) -> str:
            """Add two numbers.

            Args:
                e: a sum such as 3+4
            """
            a, b = e.split("+")
            self.seen.append(e)
            return str(int(a) + int(b))

        def get_reward(self) -> float:
            return float(len(self.seen))


    class Died(BaseException):
        """The process dies (no handler catches a BaseException that is not an Exception)."""


    def short(completions, trainer_state=None, **kw):
        if os.environ.get("KITAE_TEST_DIE_AT") == str(trainer_state.global_step):
            raise Died  # in the middle of the step: its episodes sampled, not yet trained on or stored
        return [-len(c[-1]["content"]) / 10 for c in completions]  # an episode: its messages, the answer last
    '''
)


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("agent")
    tools_model(root / "model")
    rows = [{"messages": [{"role": "user", "content": f"{a}+{b}?"}], "reference_answer": str(a + b)}
            for a in range(3) for b in range(3)]
    (root / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "agent_envs.py").write_text(ENVS)
    return root


@pytest.fixture
def on_path(assets, monkeypatch):
    import sys

    monkeypatch.syspath_prepend(str(assets))
    yield
    sys.modules.pop("agent_envs", None)


def _config(assets: Path, out: Path, **over) -> Path:
    cfg = {
        "name": "agent", "output_dir": str(out), "seed": 1,
        "model": {"path": str(assets / "model")},
        "data": {"train": str(assets / "train.jsonl"), "eval": None},
        "rewards": [{"name": "short", "function": "agent_envs:short"}],
        "environment": {"factory": "agent_envs:Calc", "max_turns": 3, "turn_max_new_tokens": 64,
                        "episode_max_tokens": 150},  # the call is 60 tokens, a prompt 26
        "sampling": {"group_size": 3},
        "optim": {"steps": 4, "prompts_per_step": 2, "micro_batch_size": 8, "lr": 1e-3},
        "logging": {"save_every": 2, "keep_checkpoints": 5},
        "eval": {"every": 0},
    }
    for key, value in over.items():
        cfg[key] = {**cfg.get(key, {}), **value} if isinstance(value, dict) else value
    path = out / "cfg.yaml"
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(cfg))
    return path


def _force_first_turn(trainer: Trainer, seen: list) -> None:
    """Turn 0 of every episode says :data:`CALL`; every later turn is sampled by the model. ``seen`` gets every
    episode the agent engine returns."""
    agent = trainer.rollouts.engine
    inner = agent.engine
    tokens = trainer.tokenizer(CALL, add_special_tokens=False)["input_ids"]
    sample = inner.generate_tokens

    def generate_tokens(prompt_ids, n, sampling):
        first = all(trainer.tokenizer.decode(p).count("<|im_start|>assistant") == 1 for p in prompt_ids)
        say = Say(inner.model, tokens) if first else None
        try:
            return sample(prompt_ids, n, sampling)
        finally:
            if say:
                say.remove()

    inner.generate_tokens = generate_tokens
    rows = agent.generate_rows

    def generate_rows(*args, **kw):
        groups = rows(*args, **kw)
        seen.extend(c for g in groups for c in g)
        return groups

    agent.generate_rows = generate_rows


def _train(cfg_path: Path, resume: bool = False, **kw) -> tuple[Trainer, list]:
    cfg = load_train_config(cfg_path)
    trainer = Trainer(cfg, resume=resume, **kw)
    seen: list = []
    _force_first_turn(trainer, seen)
    return trainer, seen


def _samples(run: Path) -> list[tuple]:
    with sqlite3.connect(run / DB_NAME) as db:
        return db.execute("SELECT g.step, g.group_index, s.sample_index, s.text, s.reward FROM samples s JOIN "
                          "groups g ON s.group_id = g.id ORDER BY g.step, g.group_index, s.sample_index").fetchall()


def test_grpo_with_an_environment_trains_on_episodes_and_stores_them(assets, tmp_path, on_path):
    trainer, seen = _train(_config(assets, tmp_path, optim={"steps": 2}))
    before = {k: v.clone() for k, v in trainer.policy.state_dict().items()}
    assert trainer.train()["status"] == "finished"
    assert trainer.rollouts.engine._loop is None  # the tools (MCP sessions) and their event loop closed with the run
    after = trainer.policy.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)  # it trained
    assert len(seen) == 2 * 2 * 3
    for c in seen:
        t0, t1 = c.episode.turns[:2]
        [call] = t0.tool_calls
        assert (call.name, call.arguments, call.result) == ("calc", {"e": "3+4"}, "7")
        context = trainer.tokenizer.decode(c.completion_ids[t0.end:t1.start])
        assert "<tool_response>\n7\n</tool_response>" in context
        assert c.loss_mask[t0.end:t1.start] == [0] * (t1.start - t0.end) and c.loss_mask[t1.start] == 1
        assert c.episode.environment_reward == 1.0 and len(c.prompt_ids) + len(c.completion_ids) <= 192
    assert len({tuple(c.completion_ids) for c in seen}) > 1  # turn 1 is the model's own sampling
    rows = _samples(trainer.run_dir)
    assert len(rows) == 12 and {r[0] for r in rows} == {1, 2}
    with sqlite3.connect(trainer.run_dir / DB_NAME) as db:
        calc = db.execute("SELECT value FROM metrics WHERE key = 'reward/Calc'").fetchall()
        agent = dict(db.execute("SELECT key, value FROM metrics WHERE step = 2 AND key LIKE 'agent/%'").fetchall())
    assert calc == [(1.0,), (1.0,)]  # the environment's get_reward() is a component named after its class
    assert agent["agent/turns"] == 2.0 and agent["agent/tool_calls"] == 1.0 and agent["agent/tool_errors"] == 0.0
    assert 0 < agent["agent/trained_token_share"] < 1  # the tool result and template tokens are not trained


def test_a_multi_turn_run_that_dies_mid_step_resumes_to_the_same_samples(assets, tmp_path, on_path, monkeypatch):
    whole, _ = _train(_config(assets, tmp_path / "whole"))
    whole.train()
    cut, _ = _train(_config(assets, tmp_path / "cut"))
    monkeypatch.setenv("KITAE_TEST_DIE_AT", "3")  # trainer_state.global_step 3: step 4's episodes are sampled,
    # then the process "dies" while grading them (the checkpoint is step 2's)
    with pytest.raises(BaseException) as died:
        cut.train()
    assert type(died.value).__name__ == "Died"
    cut.store.close()
    assert [r[0] for r in _samples(cut.run_dir)][-1] == 3  # step 4 was never stored
    monkeypatch.delenv("KITAE_TEST_DIE_AT")
    resumed, seen = _train(_config(assets, tmp_path / "cut"), resume=True)
    assert resumed.start_step == 2 and resumed.train()["status"] == "finished"
    assert all(len(c.episode.turns) >= 2 for c in seen)
    a, b = _samples(whole.run_dir), _samples(cut.run_dir)
    assert [r[:3] for r in a] == [r[:3] for r in b] and len(a) == 4 * 2 * 3
    assert [r[3] for r in a] == [r[3] for r in b]  # the same episodes, also the ones sampled after the resume
    assert [r[4] for r in a] == pytest.approx([r[4] for r in b], rel=1e-6)
    wa = load_file(str(whole.run_dir / "checkpoints" / "step-000004" / "model" / "model.safetensors"))
    wb = load_file(str(cut.run_dir / "checkpoints" / "step-000004" / "model" / "model.safetensors"))
    assert all(torch.allclose(wa[k], wb[k], atol=1e-6) for k in wa)


def test_async_and_partial_are_refused_with_an_environment(assets, tmp_path):
    with pytest.raises(ConfigError, match="sampling.async: does not run with an environment"):
        load_train_config(_config(assets, tmp_path, sampling={"group_size": 3, "async": True}))
    with pytest.raises(ConfigError, match="sampling.partial: does not run with an environment"):
        load_train_config(_config(assets, tmp_path, sampling={"group_size": 3, "partial": {"segment_tokens": 8}}))
