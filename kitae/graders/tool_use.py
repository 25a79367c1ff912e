"""Shaping rewards for agents: graders over an episode's tool use (kitae.scoring.sample_and_grade.episode_fields).

    rewards:
      - {name: correct, grader: {type: answer}}                   # the final answer, as for any run
      - {name: tool_format, weight: 0.2, grader: {type: tool_format}}
      - {name: tool_cost, grader: {type: tool_cost, per_call: -0.05, per_turn: 0}}
      - {name: Calculator, weight: 1.0, grader: {type: environment_reward}}   # the runner adds this one itself

- ``tool_format``: the share of the episode's tool calls that were well-formed: read by the model's tool-call
  parser and naming a tool the episode offered (a malformed call, or one to an unknown tool, counts against it).
  An episode without a call abstains (``no_calls: null``, the default) or scores ``no_calls``.
- ``tool_cost``: ``per_call`` x the calls the episode made (malformed ones included: each took a tool round)
  plus ``per_turn`` x its assistant turns. Negative numbers are costs; the component's weight scales them.
- ``environment_reward``: the environment's own ``get_reward()`` (TRL's environment contract), computed from
  its state when the episode ended; None (abstain) when it has none or gave none. The agent runner adds it as a
  component named after the environment class, weighted by ``environment.reward_weight``.

Each grader scores the whole trajectory with one number: that number, weighted and summed with the other
components, is the episode's one reward, and the group advantage broadcasts it over every token the policy
sampled (docs/agents.md, "What is trained", says why kitae trains on no per-turn score). A sample that is not an episode
(a one-turn run) abstains: these graders have nothing to read there.
"""

from __future__ import annotations

from dataclasses import dataclass

from kitae.graders.base import Grade, Grader, Item, Sample, is_finite_number
from kitae.graders.spec import read_spec, register_grader

NOT_AN_EPISODE = "not an agent episode (no tool_calls in the sample)"


def _is_episode(sample: Sample) -> bool:
    return isinstance(sample.get("tool_calls"), list)


def _unknown_tool(call: dict) -> bool:
    """A call that named no offered tool (error kind "unknown_tool", kitae.rollout.trajectory.TOOL_ERROR_KINDS)."""
    return call.get("error_kind") == "unknown_tool"


@dataclass
class ToolFormatSpec:
    no_calls: float | None = None  # the score of an episode without a tool call; None abstains


@register_grader("tool_format")
class ToolFormatGrader(Grader):
    """Share of an episode's tool calls that were well-formed (read by the parser, naming an offered tool)."""

    def __init__(self, no_calls: float | None = None):
        self.no_calls = no_calls

    @classmethod
    def from_spec(cls, spec: dict, path: str) -> "ToolFormatGrader":
        return cls(read_spec(ToolFormatSpec, spec, path).no_calls)

    def grade_sample(self, item: Item, sample: Sample) -> Grade:
        if not _is_episode(sample):
            return Grade.abstain(reason=NOT_AN_EPISODE)
        calls = sample["tool_calls"]
        malformed = int(sample.get("malformed_calls") or 0)
        unknown = sum(_unknown_tool(c) for c in calls)
        total = len(calls) + malformed
        if total == 0:
            return Grade(score=self.no_calls, reason="no tool call")
        good = len(calls) - unknown
        return Grade(score=good / total, sub_scores={"calls": float(total), "malformed": float(malformed),
                                                      "unknown_tool": float(unknown)},
                     reason=f"{good} of {total} tool calls well-formed")


@dataclass
class ToolCostSpec:
    per_call: float = -0.05  # added per tool call (malformed ones included)
    per_turn: float = 0.0  # added per assistant turn


@register_grader("tool_cost")
class ToolCostGrader(Grader):
    """``per_call`` x tool calls + ``per_turn`` x turns of an episode."""

    def __init__(self, per_call: float = -0.05, per_turn: float = 0.0):
        self.per_call, self.per_turn = per_call, per_turn

    @classmethod
    def from_spec(cls, spec: dict, path: str) -> "ToolCostGrader":
        s = read_spec(ToolCostSpec, spec, path)
        return cls(s.per_call, s.per_turn)

    def grade_sample(self, item: Item, sample: Sample) -> Grade:
        if not _is_episode(sample):
            return Grade.abstain(reason=NOT_AN_EPISODE)
        calls = len(sample["tool_calls"]) + int(sample.get("malformed_calls") or 0)
        turns = int(sample.get("turns") or 0)
        return Grade(score=self.per_call * calls + self.per_turn * turns,
                     sub_scores={"calls": float(calls), "turns": float(turns)},
                     reason=f"{calls} tool calls, {turns} turns")


@register_grader("environment_reward")
class EnvironmentRewardGrader(Grader):
    """The environment's ``get_reward()`` of the episode (``sample["environment_reward"]``); None abstains."""

    def grade_sample(self, item: Item, sample: Sample) -> Grade:
        if not _is_episode(sample):
            return Grade.abstain(reason=NOT_AN_EPISODE)
        value = sample.get("environment_reward")
        if value is None:
            return Grade.abstain(reason="the environment gave no reward")
        if not is_finite_number(value):
            return Grade.abstain(error=f"the environment's get_reward() returned {value!r}, not a finite number")
        return Grade(score=float(value))
