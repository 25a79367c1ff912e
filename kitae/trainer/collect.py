"""Sampling and grading one step's groups: prompts from the prompt sampler, G completions each from the rollout
engine, every reward component's grade.

- Whole trajectories: one sampling round; with DAPO dynamic sampling (``algorithm.dynamic_sampling``), rounds
  until enough groups have reward variance (``max_rounds`` at most), groups without it dropped.
- Partial rollouts (Kimi k1.5, ``sampling.partial``): new prompts start and unfinished trajectories continue
  from the replay buffer (kitae.rollout.partial); only the groups that finished this step come back.
- After grading, the prompt sampler is told each prompt's pass rate (prioritized and curriculum sampling).
- ``sampling.async``: the groups of the next steps are sampled while this step updates (kitae.trainer.async_pipeline).

Keeping the engine in step with the policy (weight pushes, the evaluation engine, the engine's state in
checkpoints) is kitae.trainer.engine_sync's.

In a multi-process run each process samples its share of the prompts (kitae.trainer.processes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kitae.algorithms.advantages import dynamic_sampling_keep
from kitae.rollout.base import Completion, SamplingParams
from kitae.rollout.partial import PartialRollouts
from kitae.scoring.components import GroupScores, RewardComponent
from kitae.scoring.sample_and_grade import grade_completions, sample_and_grade
from kitae.trainer.async_pipeline import RolloutPipeline
from kitae.trainer.config import TrainConfig
from kitae.trainer.processes import fewest, gather, local_count, local_share
from kitae.trainer.step_scores import pass_rates, reward_tensor


@dataclass
class Collected:
    """One step's graded groups: ``groups[i]`` holds the G completions of prompt ``rows[i]``."""

    rows: list[dict] = field(default_factory=list)
    groups: list[list[Completion]] = field(default_factory=list)
    scores: list[GroupScores] = field(default_factory=list)
    rounds: int = 1  # sampling rounds it took (dynamic sampling)

    @property
    def completions(self) -> list[Completion]:
        """Every completion, group by group: the rows of the step's training batch."""
        return [c for g in self.groups for c in g]

    def __add__(self, other: "Collected") -> "Collected":
        return Collected(self.rows + other.rows, self.groups + other.groups, self.scores + other.scores,
                         other.rounds)

    def first(self, n: int) -> "Collected":
        return Collected(self.rows[:n], self.groups[:n], self.scores[:n], self.rounds)

    def where(self, keep: list[bool]) -> "Collected":
        pick = lambda xs: [x for x, k in zip(xs, keep) if k]  # noqa: E731
        return Collected(pick(self.rows), pick(self.groups), pick(self.scores), self.rounds)


class Rollouts:
    """Sampling and grading a run's steps: the rollout engine it samples with, the prompt sampler, the
    partial-rollout buffer, the async pipeline's rollouts sampled ahead, and the reward components."""

    def __init__(self, cfg: TrainConfig, acc, engine, sampler, partial: PartialRollouts | None,
                 rows: list[dict], components: list[RewardComponent], pass_component: str | None):
        self.cfg, self.acc, self.engine, self.sampler, self.partial = cfg, acc, engine, sampler, partial
        self.rows, self.components, self.pass_component = rows, components, pass_component
        self.pipeline: RolloutPipeline | None = None  # sampling.async: rollouts sampled ahead (Trainer sets it)

    def sample_grade_and_tell_sampler(self, step: int) -> Collected:
        """This step's groups, graded; the prompt sampler told their pass rates (after each round: a further
        round of dynamic sampling draws with what it learned)."""
        return self._partial_groups(step) if self.partial is not None else self._whole_groups(step)

    def _whole_groups(self, step: int) -> Collected:
        """``optim.prompts_per_step`` groups (this process's share); with dynamic sampling, rounds until as many
        groups have reward variance, the rest dropped."""
        o, ds = self.cfg.optim, self.cfg.algorithm.dynamic_sampling
        want = local_count(self.acc, o.prompts_per_step)
        got = Collected()
        for r in range(ds.max_rounds if ds.enabled else 1):
            idx, last = self._round(step, r)
            self._tell_sampler(idx, last.scores)
            kept = last.where(dynamic_sampling_keep(*reward_tensor(last.scores)).tolist()) if ds.enabled else last
            got = got + kept
            if fewest(self.acc, len(got.groups)) >= want:  # every process decides alike: same rounds, same draws
                break
        if not got.groups:  # every round had zero variance: keep the last round (its advantages are all 0)
            got = last
        return got.first(fewest(self.acc, min(len(got.groups), want)))  # equally many groups in every process

    def _round(self, step: int, round_: int) -> tuple[list[int], Collected]:
        """One sampling round's prompts (this process's share) and their groups, graded: sampled now
        (kitae.scoring.sample_and_grade.sample_and_grade), or with ``sampling.async`` taken from the rollouts sampled ahead
        (kitae.trainer.async_pipeline) and graded here."""
        if self.pipeline is not None:
            idx, groups = self.pipeline.take(step, round_)
            rows = [self.rows[i] for i in idx]
            return idx, Collected(rows, groups, self.grade(rows, groups, step), rounds=round_ + 1)
        idx = local_share(self.acc, self.sampler.sample(self.cfg.optim.prompts_per_step, step))
        rows = [self.rows[i] for i in idx]
        got = sample_and_grade(self.engine, [r["messages"] for r in rows], rows, self.cfg.sampling.group_size,
                               self.sampling_params(step, round_), self.components, self.trainer_state(step))
        return idx, Collected(rows, got.groups, got.scores, rounds=round_ + 1)

    def _partial_groups(self, step: int) -> Collected:
        """Kimi partial rollouts: new prompts start, buffered trajectories continue; finished groups come back."""
        idx = self.sampler.sample(self.cfg.optim.prompts_per_step, step)
        prompts = [(i, self.engine.encode_prompt(self.rows[i]["messages"])) for i in idx]
        done = self.partial.step(prompts, self.cfg.sampling.group_size, self.sampling_params(step), step)
        rows = [self.rows[i] for i, _ in done]
        groups = [g for _, g in done]
        scores = self.grade(rows, groups, step)
        self._tell_sampler([i for i, _ in done], scores)
        return Collected(rows, groups, scores)

    def grade(self, rows: list[dict], groups: list[list[Completion]], step: int) -> list[GroupScores]:
        """Every reward component's grade of completions sampled elsewhere (partial rollouts, rollouts sampled
        ahead), and the weighted totals."""
        return grade_completions(self.components, rows, groups, self.cfg.max_completion_tokens,
                                 self.trainer_state(step))[1]

    def trainer_state(self, step: int) -> dict[str, Any]:
        """What each sample of the step carries: the step, the run's steps and the passes over the prompts so far
        (a reward function's ``trainer_state``)."""
        o = self.cfg.optim
        return {"step": step, "max_steps": o.steps, "epoch": (step - 1) * o.prompts_per_step / max(1, len(self.rows))}

    def _tell_sampler(self, indices: list[int], scores: list[GroupScores]) -> None:
        """The prompt sampler learns each prompt's pass rate (every process keeps the same sampler state)."""
        if self.pass_component is None:
            return
        rates = pass_rates(scores, self.pass_component, self.cfg.data.sampler.pass_threshold)
        pairs = gather(self.acc, list(zip(indices, rates)))
        self.sampler.update([i for i, _ in pairs], [r for _, r in pairs])

    def sampling_params(self, step: int, round_: int = 0) -> SamplingParams:
        """The sampling settings of ``sampling``, with a seed of its own per step, round and process."""
        s = self.cfg.sampling
        seed = (self.cfg.seed * 1_000_003 + step * 7919 + round_ * 104_729 + self.acc.process_index) % (2**31)
        rep = {} if s.repeat is None else {
            "repeat_min_count": s.repeat.min_count, "repeat_max_period": s.repeat.max_period,
            "repeat_min_span": s.repeat.min_span,
        }
        return SamplingParams(s.temperature, s.top_p, s.top_k, s.repetition_penalty, self.cfg.max_completion_tokens,
                              seed=seed, **rep)  # an environment samples each turn within its own budgets

    def close(self) -> None:
        """The rollout worker of ``sampling.async``."""
        if self.pipeline is not None:
            self.pipeline.close()

    # ---- checkpoints -------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The prompt sampler's, the partial-rollout buffer's and the steps sampled ahead (the engine's own state
        is kitae.trainer.engine_sync's)."""
        return {"sampler": self.sampler.state_dict(),
                "partial": self.partial.state_dict() if self.partial is not None else None,
                "ahead": self.pipeline.state_dict() if self.pipeline is not None else None}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.sampler.load_state_dict(state["sampler"])
        if self.pipeline is not None:
            self.pipeline.load_state_dict(state.get("ahead"))
        if self.partial is not None and state.get("partial") is not None:
            self.partial.load_state_dict(state["partial"])
