"""What a training step logs besides the update's own numbers: reward statistics (each component separately,
with its graders' abstain and error rates), what the agent episodes did (``agent/...``, only for a step with
episodes), the pass rate and the partial-rollout buffer, and the groups of samples the run page shows
(:class:`kitae.store.GroupRecord`). :class:`StepMetrics` puts a step's metrics together.

Only finite numbers count in a statistic: graders abstain on others, and should one slip through,
``statistics.pstdev`` would raise on it at every step, resumed or not.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict

import torch

from kitae.chat import content_text
from kitae.graders.base import is_finite_number
from kitae.rollout.base import Completion, ReportsStats
from kitae.rollout.partial import PartialRollouts
from kitae.rollout.trajectory import EPISODE_ENDS, trained_spans
from kitae.scoring.components import GroupScores, RewardComponent, counter_deltas
from kitae.store import GroupRecord, SampleRecord
from kitae.store.images import RunImages
from kitae.trainer.processes import reduce_metrics
from kitae.trainer.step_scores import pass_rates


def reward_metrics(components: list[RewardComponent], scores: list[GroupScores],
                   completions: list[Completion]) -> dict[str, float]:
    """Reward mean and spread, lengths, finish reasons and groups without variance; per component its mean
    score and its graders' abstain and error rates."""
    totals = [t for gs in scores for t in gs.totals]
    valid = [t for t in totals if is_finite_number(t)]
    m: dict[str, float] = {
        "reward": statistics.fmean(valid) if valid else math.nan,
        "reward_std": statistics.pstdev(valid) if len(valid) > 1 else 0.0,
        "len_mean": statistics.fmean(c.sampled_tokens for c in completions),  # an episode: its sampled tokens
        "trunc_rate": statistics.fmean(c.finish_reason == "length" for c in completions),
        "repeat_rate": statistics.fmean(c.finish_reason == "repeat" for c in completions),
        "invalid_rate": 1 - len(valid) / len(totals),
        "zero_var_frac": statistics.fmean(len({t for t in gs.totals if t is not None}) <= 1 for gs in scores),
    }
    for comp in components:
        grades = [g for gs in scores for g in gs.grades[comp.name]]
        got = [g.score for g in grades if is_finite_number(g.score)]
        m[f"reward/{comp.name}"] = statistics.fmean(got) if got else math.nan
        m[f"grader/{comp.name}/abstain_rate"] = 1 - len(got) / len(grades)
        m[f"grader/{comp.name}/error_rate"] = statistics.fmean(g.error is not None for g in grades)
    return {**m, **agent_metrics(completions)}


def agent_metrics(completions: list[Completion]) -> dict[str, float]:
    """What the step's agent episodes did (kitae.rollout.trajectory), over its episodes; {} when it has none, so
    a one-turn run logs exactly what it logged before. Per episode (means): ``agent/turns``,
    ``agent/tool_calls`` (well-formed calls made, run or not), ``agent/malformed_calls``; over the step's calls
    that were run (shares; calls refused past ``max_tool_calls`` are not): ``agent/tool_errors`` (calls that came
    back with an error: the tool failed, timed out, was unknown or got arguments that do not fit) and
    ``agent/tool_timeouts`` (error kind "timeout", kitae.rollout.trajectory.TOOL_ERROR_KINDS);
    ``agent/ended/<reason>``: the share of episodes that ended for each reason (``answer``, or the limit that cut
    it: ``max_turns``, ``max_tool_calls``, ...); ``agent/trained_token_share``:
    the share of the episodes' tokens after the prompt that the policy sampled (the rest, tool results and
    template tokens, is never trained); ``agent/template_rewrites``: the share of episodes whose chat template
    renders earlier turns otherwise than sampled (the sampled tokens were kept).

    >>> from kitae.rollout.trajectory import Episode, ToolCall, Turn
    >>> calls = [ToolCall("calc", {}, result="4"), ToolCall("calc", {}).fail("timeout", "timeout after 10 s")]
    >>> e = Episode([Turn(0, 2, "", "stop", calls), Turn(4, 5, "4", "stop")], [], end="answer")
    >>> m = agent_metrics([Completion("4", [1], [5, 6, 0, 0, 7], [0.0] * 5, "stop", loss_mask=[1, 1, 0, 0, 1],
    ...                               episode=e)])
    >>> m["agent/turns"], m["agent/tool_errors"], m["agent/tool_timeouts"], m["agent/trained_token_share"]
    (2.0, 0.5, 0.5, 0.6)
    """
    episodes = [c for c in completions if c.episode is not None]
    if not episodes:
        return {}
    calls = [t for c in episodes for t in c.episode.tool_calls if t.error_kind != "refused"]  # run, or tried to
    errors = [t for t in calls if t.error is not None]
    tokens = sum(c.num_tokens for c in episodes)
    m = {
        "agent/turns": statistics.fmean(len(c.episode.turns) for c in episodes),
        "agent/tool_calls": statistics.fmean(len(c.episode.tool_calls) for c in episodes),
        "agent/tool_errors": len(errors) / len(calls) if calls else 0.0,
        "agent/tool_timeouts": sum(t.error_kind == "timeout" for t in errors) / len(calls) if calls else 0.0,
        "agent/malformed_calls": statistics.fmean(sum(t.malformed for t in c.episode.turns) for c in episodes),
        "agent/trained_token_share": sum(c.sampled_tokens for c in episodes) / tokens if tokens else 1.0,
        "agent/template_rewrites": statistics.fmean(c.episode.template_rewrites for c in episodes),
    }
    for reason in EPISODE_ENDS:
        m[f"agent/ended/{reason}"] = statistics.fmean(c.episode.end == reason for c in episodes)
    return m


def pass_rate_and_partial_metrics(scores: list[GroupScores], completions: list[Completion],
                                  pass_component: str | None, threshold: float,
                                  partial: PartialRollouts | None) -> dict[str, float]:
    """``pass_rate`` of the prompt sampler's component (when it has one); with partial rollouts, the replay
    buffer's size and the share of samples continued from an earlier step."""
    m: dict[str, float] = {}
    if pass_component is not None:
        rates = [r for r in pass_rates(scores, pass_component, threshold) if r is not None]
        m["pass_rate"] = statistics.fmean(rates) if rates else math.nan
    if partial is not None:
        m.update(partial.stats())
        m["partial/continued_frac"] = statistics.fmean(c.earlier_tokens > 0 for c in completions)
    return m


def group_records(rows: list[dict], groups: list[list[Completion]], scores: list[GroupScores],
                  advantages: torch.Tensor, images: RunImages) -> list[GroupRecord]:
    """The step's groups as the run store keeps them: prompt, reference, each sample with its reward,
    advantage and every component's score, reason, sub-scores and error, and an agent's trajectory
    (:func:`trajectory_fields`). ``advantages`` [num_groups, G]."""
    out = []
    for gi, (row, group, gs) in enumerate(zip(rows, groups, scores)):
        samples = []
        for si, c in enumerate(group):
            grades = {name: g[si] for name, g in gs.grades.items()}
            samples.append(
                SampleRecord(
                    text=c.text, completion_tokens=c.num_tokens, finish_reason=c.finish_reason,
                    reward=gs.totals[si], advantage=float(advantages[gi, si]),
                    scores={n: g.score for n, g in grades.items()},
                    reasons={n: g.reason for n, g in grades.items()},
                    sub_scores={n: g.sub_scores for n, g in grades.items() if g.sub_scores},
                    errors={n: g.error for n, g in grades.items()},
                    policy_version=c.policy_version,
                    thinking_open=c.thinking_open,
                    **trajectory_fields(c),
                )
            )
        messages, extra = row["messages"], {k: v for k, v in row.items() if k not in ("messages", "reference_answer")}
        if row.get("images"):  # the page shows them from the run's folder (kitae.store.images)
            messages, extra["images"] = images.stored_row(messages, row["images"])
        user = [content_text(m["content"], image_mark) for m in messages if m["role"] == "user"]
        out.append(GroupRecord(user[-1] if user else "", messages, row.get("reference_answer"), extra, samples, gi))
    return out


def trajectory_fields(c: Completion) -> dict:
    """What the run store keeps of an agent's trajectory: the episode (turns, tool calls, messages, end,
    environment reward), the trained token spans and the sampled-token count. {} for a single-turn completion
    (loss_mask and episode None), whose stored sample stays as it was."""
    out: dict = {}
    if c.loss_mask is not None:
        out["trained_spans"] = [list(span) for span in trained_spans(c.loss_mask, c.num_tokens)]
        out["sampled_tokens"] = c.sampled_tokens
    if c.episode is not None:
        out["episode"] = asdict(c.episode)
    return out


def image_mark(part: dict) -> str:
    """How a stored prompt's text shows an image: by its stored file name, so prompts that differ only in
    their picture stay apart ("the same prompt across steps" matches on this text)."""
    return f"[image {str(part.get('image', ''))[:12]}]"


def policy_lag(completions: list[Completion], step: int) -> dict[str, float]:
    """``policy_lag`` (mean) and ``policy_lag_max`` of a step's samples: the policy version the step trains
    (step - 1 optimizer steps taken) less the version that sampled each one (``sampling.async``); {} when the
    samples carry no version.

    >>> policy_lag([Completion("", [], [], [], "stop", policy_version=v) for v in (3, 4, 4, 4)], step=5)
    {'policy_lag': 0.25, 'policy_lag_max': 1.0}
    """
    lags = [step - 1 - c.policy_version for c in completions if c.policy_version is not None]
    if not lags:
        return {}
    return {"policy_lag": sum(lags) / len(lags), "policy_lag_max": float(max(lags))}


class StepMetrics:
    """A step's metrics over all processes, for ``rollouts`` (kitae.trainer.collect.Rollouts: its engine, reward
    components, pass component and partial-rollout buffer): the rewards, the update's own (and the mismatch and
    weight sync's), the engine's, the KL coefficient and lr, timings, pass rate and partial rollouts, and the
    change of the graders' own counters (judge tokens, ...) since the last step, whose values it keeps."""

    def __init__(self, cfg, acc, rollouts):
        self.cfg, self.acc, self.rollouts = cfg, acc, rollouts
        self._counters: dict[str, float] = {}  # the graders' counters at the last step

    def of(self, got, trained: dict[str, float], times: dict[str, float], kl_coef: float,
           lr: float) -> dict[str, float]:
        """The metrics of the step that collected ``got`` (kitae.trainer.collect.Collected), means over processes
        (the counters' changes: sums)."""
        r, completions = self.rollouts, got.completions
        metrics = {
            **reward_metrics(r.components, got.scores, completions),
            **trained,
            **(r.engine.take_stats() if isinstance(r.engine, ReportsStats) else {}),
            "kl_coef": kl_coef,
            "lr": lr,
            **times,
            "groups": len(got.groups),
            **({"sampling_rounds": got.rounds} if self.cfg.algorithm.dynamic_sampling.enabled else {}),
            **pass_rate_and_partial_metrics(got.scores, completions, r.pass_component,
                                            self.cfg.data.sampler.pass_threshold, r.partial),
        }
        counters, self._counters = counter_deltas(r.components, self._counters)  # this step's change
        return {**reduce_metrics(self.acc, metrics), **reduce_metrics(self.acc, counters, "sum")}
