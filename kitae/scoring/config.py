"""The sections of a training config that say how samples are scored: the reward components (``rewards:``) and the
held-out evaluations (``eval:``), with the eval grader a config leaves out."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Literal

from kitae.config import setting
from kitae.errors import ConfigError


@dataclass
class RewardConfig:
    """One reward component: a grader spec, or a Python callable "module:function" with TRL's signature.

    weight 0 logs the component without training on it. ``think`` (reasoning models): "strip" grades the answer
    after a ``<think>...</think>`` block (kitae.scoring.components.answer_after_think: "" for a completion cut off
    while thinking), "keep" the whole completion. Left out: "keep" for the grader types that read the whole turn
    or only its token counts (WHOLE_TURN_GRADERS), "strip" for every other grader and reward function; reading the
    config fills it in (``resolve``), so the saved config.yaml shows what ran.
    """

    name: str = ""
    weight: float = 1.0  # any finite number: a negative weight makes the component a penalty
    grader: dict[str, Any] | None = None
    function: str | None = None
    think: Literal["strip", "keep"] | None = None

    def resolve(self, path: str) -> None:
        """Fill in the name (the spec's name or type, or the function's name) and ``think`` left out."""
        spec = self.grader or {}
        if not self.name:
            self.name = spec.get("name") or spec.get("type") or (self.function or "").split(":")[-1]
        if self.think is None:
            self.think = self.default_think()

    def validate(self, path: str) -> None:
        if (self.grader is None) == (self.function is None):
            raise ConfigError(path, "give exactly one of 'grader' (a grader spec) or 'function' (module:function)")

    def default_think(self) -> Literal["strip", "keep"]:
        return "keep" if (self.grader or {}).get("type") in WHOLE_TURN_GRADERS else "strip"


# Grader types that see the whole completion by default. template checks how the turn ends (the same with or
# without the leading block) but also counts characters (min_chars, full_chars) and would read a turn that ended
# inside an unclosed think block as "no end marker"; so it sees all of it. overlong and soft_overlong read token
# counts only (the same either way). Kimi's length reward strips: its nested correctness grader must see the
# answer, and its lengths (unit: tokens) are the completion's tokens either way.
WHOLE_TURN_GRADERS = ("template", "overlong", "soft_overlong")


@dataclass
class EvalConfig:
    every: int = setting(25, minimum=0)  # 0 = never during training (a final eval still runs when data.eval is set)
    k: int = setting(4, minimum=1)  # samples per prompt for pass@1
    limit: int | None = 100  # eval prompts
    temperature: float = setting(1.0, minimum=0)  # 0: greedy
    max_new_tokens: int | None = None  # default: sampling.max_new_tokens
    grader: dict[str, Any] | None = None  # the spec that decides pass@1; default: the grader of the reward
    # named `correct`, else {type: answer}
    pass_threshold: float = 1.0  # a sample passes when its score >= this
    think: Literal["strip", "keep"] = "strip"  # strip: the grader sees the answer after a <think> block (see
    # RewardConfig); compliance and lengths are always of the whole completion


def default_eval_grader(rewards: list[RewardConfig]) -> dict[str, Any]:
    """The eval grader a config leaves out: a copy of the spec of the reward component named ``correct`` (so a
    run rewarded by the ``code`` grader is evaluated by it), else answer matching.

        >>> default_eval_grader([RewardConfig("correct", grader={"type": "code"})])
        {'type': 'code'}
        >>> default_eval_grader([RewardConfig("format", grader={"type": "template"})])
        {'type': 'answer'}
    """
    spec = next((r.grader for r in rewards if r.name == "correct" and r.grader is not None), None)
    return copy.deepcopy(spec) if spec is not None else {"type": "answer"}
