"""Sample and grade: the one loop from prompts to graded samples, shared by training (kitae.trainer.collect),
``kitae eval`` and the trainer's evaluations (kitae.scoring.evaluate, which long2short samples through) and
curation (kitae.curate.sampling).

    engine.generate(prompts, n, sampling)      n completions per prompt
    sample_dict(completion, ...)               what graders see of each
    score_groups(components, items, samples)   every component's grade of every group, the weighted totals

:func:`sample_and_grade` does this for one batch of prompts, :func:`grade_completions` the last two lines for
completions sampled elsewhere (the trainer's partial rollouts and rollouts sampled ahead), :func:`graded_batches`
for a whole prompt set in fixed batches: batch b holds prompts [b·B, (b+1)·B) and samples with
``sampling.offset_seed(b·B)``, so a batch gives the same samples however the set is split, skipped or resumed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator

from kitae.chat import IM_END, TEMPLATE_TOKENS
from kitae.rollout.base import Completion, ReadsRows, RolloutEngine, SamplingParams
from kitae.rollout.trajectory import Episode
from kitae.scoring.components import GroupScores, RewardComponent, score_groups


def sample_dict(c: Completion, max_new_tokens: int, **extra: Any) -> dict:
    """What graders see of one completion; ``completion_ids`` are its sampled token ids (a reward function's
    ``completion_ids``), ``end_marker`` the model's end of turn when it is not ChatML's ``<|im_end|>``, the
    graders' default, ``control_tokens`` its control tokens when they are not ChatML's three, and
    ``thinking_open`` True when the prompt opened a ``<think>`` block the completion starts inside
    (kitae.chat.opens_thinking). The trainer adds the step's ``step``, ``max_steps`` and ``epoch``.

    An agent's episode (``c.episode``) adds what it did (:func:`episode_fields`); its ``output_text`` is the last
    assistant turn's text (the final answer, what every grader scores by default), ``completion_tokens`` counts the
    tokens the policy sampled (not the tool results and template tokens between turns: those are not its length),
    and ``completion_ids`` are every token after the prompt, tool results included (as TRL passes them)."""
    return {
        "output_text": c.text,
        "finish_reason": c.finish_reason,
        "completion_tokens": c.sampled_tokens,
        "max_completion_length": max_new_tokens,
        "completion_ids": list(c.completion_ids),
        **({"end_marker": c.end_marker} if c.end_marker != IM_END else {}),
        **({"control_tokens": c.control_tokens} if c.control_tokens != TEMPLATE_TOKENS else {}),
        **({"thinking_open": True} if c.thinking_open else {}),
        **(episode_fields(c.episode) if c.episode is not None else {}),
        **extra,
    }


def episode_fields(episode: Episode) -> dict:
    """What graders see of an episode beyond its final answer: ``messages`` (the conversation after the prompt:
    assistant turns with their ``tool_calls``, tool results), ``tool_calls`` (each well-formed call: ``name``,
    ``arguments``, ``result``, ``error``, ``error_kind`` (kitae.rollout.trajectory.TOOL_ERROR_KINDS), ``seconds``,
    ``turn``), ``malformed_calls`` (calls that could not be
    read; each went back to the model as a tool error), ``turns``, ``episode_end`` (why it ended: "answer" or the
    limit that cut it, kitae.rollout.trajectory.EPISODE_ENDS) and ``environment_reward`` (the environment's
    ``get_reward()``, None without one). Tool results are untrusted text: a judge sees them fenced."""
    return {
        "messages": [dict(m) for m in episode.messages],
        "tool_calls": [{"name": t.name, "arguments": t.arguments, "result": t.result, "error": t.error,
                        "error_kind": t.error_kind, "seconds": t.seconds, "turn": t.turn} for t in episode.tool_calls],
        "malformed_calls": sum(t.malformed for t in episode.turns),
        "turns": len(episode.turns),
        "episode_end": episode.end,
        "environment_reward": episode.environment_reward,
    }


@dataclass
class Graded:
    """A batch of prompts sampled and graded: ``groups[i]`` holds the completions of prompt ``start + i`` of the
    set, ``samples[i]`` what the graders saw of them and ``scores[i]`` their grades."""

    start: int
    items: list[dict]
    groups: list[list[Completion]]
    samples: list[list[dict]]
    scores: list[GroupScores]

    @property
    def indices(self) -> range:
        """The batch's prompts as indices into the set."""
        return range(self.start, self.start + len(self.items))


def grade_completions(components: list[RewardComponent], items: list[dict], groups: list[list[Completion]],
                      max_new_tokens: int, extra: dict[str, Any] | None = None,
                      ) -> tuple[list[list[dict]], list[GroupScores]]:
    """(samples, scores): what the graders see of each completion (:func:`sample_dict`, with ``extra`` in every
    sample) and every component's grade of each group, graded against ``items[i]``."""
    samples = [[sample_dict(c, max_new_tokens, **(extra or {})) for c in g] for g in groups]
    return samples, score_groups(components, items, samples)


def sample_and_grade(engine: RolloutEngine, prompts: list[Any], items: list[dict], n: int, sampling: SamplingParams,
                     components: list[RewardComponent], extra: dict[str, Any] | None = None, start: int = 0,
                     ) -> Graded:
    """``n`` completions of each of ``prompts`` (the messages sent) with ``sampling``, graded against ``items``
    (the rows); ``start`` is the first prompt's index in its set."""
    if isinstance(engine, ReadsRows):  # an agent's environment resets from the row
        groups = engine.generate_rows(prompts, items, n, sampling)
    else:
        groups = engine.generate(prompts, n, sampling)
    samples, scores = grade_completions(components, items, groups, sampling.max_new_tokens, extra)
    return Graded(start, items, groups, samples, scores)


def graded_batches(engine: RolloutEngine, prompts: list[Any], items: list[dict], n: int, sampling: SamplingParams,
                   components: list[RewardComponent], batch_prompts: int,
                   skip: Callable[[range], bool] = lambda indices: False) -> Iterator[Graded]:
    """The prompt set in batches of ``batch_prompts``, each sampled with ``sampling.offset_seed(its first
    index)`` and graded, in order; a batch whose indices ``skip`` says are done already is not sampled (it is
    asked when the batch's turn comes, so it sees what the caller did with the batches before)."""
    for start in range(0, len(items), batch_prompts):
        end = min(len(items), start + batch_prompts)
        if skip(range(start, end)):
            continue
        yield sample_and_grade(engine, prompts[start:end], items[start:end], n, sampling.offset_seed(start),
                               components, start=start)
