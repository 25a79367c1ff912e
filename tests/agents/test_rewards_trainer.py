"""A training step on agent episodes with the shaping rewards: each component graded over the trajectory, one
reward per episode, the agent metrics logged, the groups stored (the episodes are built by hand and replayed)."""

from __future__ import annotations

import json

import pytest
import torch

from kitae.rollout.base import ENGINES
from kitae.trainer.config import load_train_config
from kitae.trainer.loop import Trainer
from tests.agents._core_fixtures import an_episode, call

# per prompt, four episodes: (tool calls per turn, malformed per turn, the environment's reward)
PLANS = [([], [], 0.0), ([[call()]], [0], 1.0), ([[call(), call()]], [1], 1.0), ([[call()], [call()]], [0, 0], 0.5)]


class EpisodeReplay:
    """An engine that returns the same hand-built episodes for every prompt."""

    def __init__(self, policy, tokenizer):
        pass

    def generate(self, prompts, n, sampling):
        return [[an_episode(calls, malformed=bad, environment_reward=r) for calls, bad, r in PLANS][:n]
                for _ in prompts]


ENGINES.register("episode_replay", EpisodeReplay, replace=True)


def test_a_step_on_episodes_grades_each_trajectory_once_and_logs_what_the_agent_did(tmp_path):
    torch.set_num_threads(1)
    rows = tmp_path / "prompts.jsonl"
    rows.write_text("".join(json.dumps({"messages": [{"role": "user", "content": q}], "reference_answer": "42"}) + "\n"
                            for q in ("6*7?", "21*2?")))
    trainer = Trainer(load_train_config(data={
        "name": "agents", "output_dir": str(tmp_path), "seed": 0, "threads": 1, "model": {"path": "bundled"},
        "data": {"train": str(rows), "eval": None},
        "rewards": [{"name": "tool_cost", "grader": {"type": "tool_cost", "per_call": -0.1}},
                    {"name": "tool_format", "weight": 0.5, "grader": {"type": "tool_format", "no_calls": 1.0}},
                    {"name": "Calculator", "grader": {"type": "environment_reward"}}],
        "sampling": {"engine": "episode_replay", "group_size": 4, "max_new_tokens": 64},
        "optim": {"steps": 1, "prompts_per_step": 2},
    }))
    metrics = trainer.train_step(1)
    # per episode: tool_cost -0.1 x calls (malformed included); tool_format 0.5 x share well-formed; the env's
    want = [0.0 + 0.5 + 0.0, -0.1 + 0.5 + 1.0, -0.3 + 0.5 * 2 / 3 + 1.0, -0.2 + 0.5 + 0.5]
    assert metrics["reward"] == pytest.approx(sum(want) / 4)
    assert metrics["reward/tool_cost"] == pytest.approx((0 - 0.1 - 0.3 - 0.2) / 4)
    assert metrics["reward/Calculator"] == pytest.approx(2.5 / 4)
    assert metrics["agent/turns"] == pytest.approx((1 + 2 + 2 + 3) / 4)
    assert metrics["agent/malformed_calls"] == pytest.approx(1 / 4)
    assert metrics["len_mean"] == pytest.approx(3 * (1 + 2 + 2 + 3) / 4)  # sampled tokens: 3 a turn
    stored = trainer.store.groups(step=1, limit=None, with_samples=True)
    assert len(stored) == 2 and [s.reward for s in stored[0].samples] == pytest.approx(want)
