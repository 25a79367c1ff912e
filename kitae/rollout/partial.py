"""Partial rollouts (Kimi k1.5 §2.6.2): a per-iteration output-token budget and a replay buffer.

Each iteration every trajectory gets at most ``segment_tokens`` new tokens. A trajectory that has neither
stopped nor reached ``max_new_tokens`` in total is kept in the replay buffer and continued in the next
iteration, with the then-current policy, from exactly its prompt and tokens so far (the engine's
``generate_tokens``), so a few very long samples no longer make every iteration wait for them.

Groups: GRPO-style advantages compare the G samples of one prompt, so a group is handed back (graded and trained
on) only once all of its G trajectories have finished; until then the finished ones wait with it.

Each finished :class:`Completion` keeps the log-prob of every token under the policy that sampled it, and
``earlier_tokens``: how many of its leading tokens were sampled in iterations before its last segment. The
trainer either masks those out of the loss (``old_segments: exclude``, the paper's option) or keeps them, their
log-probs making the ratio an importance weight (``importance``).

Departures from the paper: no asynchronous rollout workers (one process generates, then trains); a stop string
or a repeat that straddles a segment boundary is caught only by its tokens within one segment (the bundled
tokenizer's ``<|im_end|>`` is one token, so stopping is exact there). The buffer lives in checkpoints
(``state_dict``), so a resumed run continues the same trajectories.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from kitae.chat import prompt_opens_thinking
from kitae.config import setting
from kitae.rollout.base import Completion, ContinuesTokens, SamplingParams


@dataclass
class PartialRolloutConfig:
    """Kimi k1.5 partial rollouts (§2.6.2): each iteration a trajectory gets at most `segment_tokens` new tokens;
    one that has not finished waits in a replay buffer and continues next iteration with the then-current policy."""

    segment_tokens: int = setting(32, minimum=1)  # output-token budget per trajectory per iteration
    old_segments: Literal["exclude", "importance"] = "exclude"  # tokens of earlier iterations: masked out of the
    # loss, or kept with the log-probs of the policy that sampled them (ratio = importance weight)


@dataclass
class Trajectory:
    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str | None = None  # None while it waits in the buffer
    last_segment_start: int = 0  # index of the first token of its latest segment
    segments: int = 0

    @property
    def done(self) -> bool:
        return self.finish_reason is not None


@dataclass
class PendingGroup:
    prompt_index: int
    trajectories: list[Trajectory]
    started_step: int = 0

    @property
    def done(self) -> bool:
        return all(t.done for t in self.trajectories)


class PartialRollouts:
    """The replay buffer of unfinished groups and one iteration of rollouts (:meth:`step`)."""

    def __init__(self, engine: ContinuesTokens, tokenizer: Any, segment_tokens: int, max_new_tokens: int):
        self.engine, self.tokenizer = engine, tokenizer
        self.segment_tokens, self.max_new_tokens = segment_tokens, max_new_tokens
        self.pending: list[PendingGroup] = []

    # ---- one iteration ------------------------------------------------------------------------
    def step(
        self, new_prompts: list[tuple[int, list[int]]], n: int, sampling: SamplingParams, step: int = 0
    ) -> list[tuple[int, list[Completion]]]:
        """Continue every buffered trajectory by one segment, start `n` trajectories for each new
        (prompt index, prompt token ids), and return the groups that finished: (prompt index, completions),
        groups started earlier first."""
        self._continue(sampling)
        self._start(new_prompts, n, sampling, step)
        finished = [g for g in self.pending if g.done]
        self.pending = [g for g in self.pending if not g.done]
        stop = self.engine.ending(sampling).stop  # the model's end texts too, as the engine stopped at them
        return [(g.prompt_index, [self._completion(t, stop) for t in g.trajectories]) for g in finished]

    def _start(self, prompts: list[tuple[int, list[int]]], n: int, sp: SamplingParams, step: int) -> None:
        if not prompts:
            return
        budget = min(self.segment_tokens, self.max_new_tokens)
        groups = self.engine.generate_tokens([ids for _, ids in prompts], n, _with(sp, budget, 0))
        for (index, ids), comps in zip(prompts, groups):
            trajs = [Trajectory(list(ids)) for _ in comps]
            for t, c in zip(trajs, comps):
                self._append(t, c)
            self.pending.append(PendingGroup(index, trajs, step))

    def _continue(self, sp: SamplingParams) -> None:
        """One more segment for every unfinished trajectory, batched by remaining budget."""
        by_budget: dict[int, list[Trajectory]] = {}
        for g in self.pending:
            for t in g.trajectories:
                if not t.done:
                    budget = min(self.segment_tokens, self.max_new_tokens - len(t.completion_ids))
                    by_budget.setdefault(budget, []).append(t)
        for k, (budget, trajs) in enumerate(sorted(by_budget.items())):
            ids = [t.prompt_ids + t.completion_ids for t in trajs]
            out = self.engine.generate_tokens(ids, 1, _with(sp, budget, 1 + k))
            for t, [c] in zip(trajs, out):
                self._append(t, c)

    def _append(self, t: Trajectory, c: Completion) -> None:
        t.last_segment_start = len(t.completion_ids)
        t.completion_ids += c.completion_ids
        t.logprobs += c.logprobs
        t.segments += 1
        if c.finish_reason != "length" or len(t.completion_ids) >= self.max_new_tokens:
            t.finish_reason = c.finish_reason

    def _completion(self, t: Trajectory, stop: list[str]) -> Completion:
        return Completion(
            text=decode_completion(self.tokenizer, t.completion_ids, stop),
            prompt_ids=list(t.prompt_ids),
            completion_ids=list(t.completion_ids),
            logprobs=list(t.logprobs),
            finish_reason=t.finish_reason or "length",
            earlier_tokens=t.last_segment_start,
            end_marker=self.engine.end_marker.text,
            control_tokens=self.engine.end_marker.controls,
            thinking_open=prompt_opens_thinking(self.tokenizer, t.prompt_ids),
        )

    # ---- buffer -------------------------------------------------------------------------------
    def stats(self) -> dict[str, float]:
        trajs = [t for g in self.pending for t in g.trajectories if not t.done]
        return {"partial/pending_groups": len(self.pending), "partial/pending_trajectories": len(trajs)}

    def state_dict(self) -> dict:
        return {"pending": [dataclasses.asdict(g) for g in self.pending]}

    def load_state_dict(self, state: dict) -> None:
        self.pending = [
            PendingGroup(g["prompt_index"], [Trajectory(**t) for t in g["trajectories"]], g.get("started_step", 0))
            for g in state["pending"]
        ]


def decode_completion(tokenizer: Any, ids: list[int], stop: list[str]) -> str:
    """The text of all of a trajectory's tokens, decoded at once (a segment boundary may split a character),
    cut after the first stop string, as the engine does."""
    text = tokenizer.decode(ids, skip_special_tokens=False)
    cut = min((text.find(s) + len(s) for s in stop if s in text), default=len(text))
    return text[:cut]


def _with(sp: SamplingParams, budget: int, call: int) -> SamplingParams:
    seed = None if sp.seed is None else (sp.seed + 7_919 * call) % (2**31)
    return dataclasses.replace(sp, max_new_tokens=budget, seed=seed)
