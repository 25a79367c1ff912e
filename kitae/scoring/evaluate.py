"""Evaluation: pass@1 averaged over k samples, template compliance and lengths on a prompt set.

pass@1 is estimated as in DeepSeek-R1 / Kimi k1.5: sample k completions per prompt at the eval temperature and
average the per-sample pass (score >= threshold) over samples, then over prompts. A sample the grader abstained
on counts as a fail (``abstain_rate`` says how many); when it abstained on every sample, pass@1 is None. The grader is the same kind of
object the trainer rewards with, so "the reward of a task is its evaluation".
"""

from __future__ import annotations

import statistics
from typing import Any, Callable

from kitae.chat import is_template_compliant, sample_controls, sample_end
from kitae.graders.base import Grader
from kitae.rollout.base import RolloutEngine, SamplingParams
from kitae.scoring.components import RewardComponent, Think
from kitae.scoring.sample_and_grade import graded_batches


def evaluate(
    engine: RolloutEngine,
    rows: list[dict],
    grader: Grader,
    k: int = 4,
    sampling: SamplingParams | None = None,
    pass_threshold: float = 1.0,
    batch_prompts: int = 32,
    progress: Callable[[int], None] | None = None,
    think: Think = "keep",
) -> tuple[dict[str, float], list[dict]]:
    """(metrics, per-sample results). Metrics: pass@1, compliance, len_mean, len_p90, trunc_rate, and
    pass@1/<difficulty> and pass@1/<lang> when rows carry those labels; for agent episodes also tool_use,
    turns_mean, tool_error_rate, pass@1/with_tool and pass@1/without_tool. Prompts go in batches of
    `batch_prompts`, each sampled with ``sampling.offset_seed(first row)``
    (:func:`kitae.scoring.sample_and_grade.graded_batches`); ``progress(n)`` is called after each with the number of prompts
    done. ``think="strip"``: the grader sees the answer after a ``<think>`` block
    (:func:`kitae.scoring.components.answer_after_think`; a completion cut off while thinking fails); compliance,
    lengths and the kept text are of the whole completion."""
    comp = [RewardComponent("score", 1.0, grader, think)]
    results: list[dict] = []
    for batch in graded_batches(engine, [r["messages"] for r in rows], rows, k, sampling or SamplingParams(), comp,
                                batch_prompts):
        for i, row, group, gs in zip(batch.indices, batch.items, batch.samples, batch.scores):
            results += [_result(i, j, row, s, grade, pass_threshold) for j, (s, grade) in
                        enumerate(zip(group, gs.grades["score"]))]
        if progress:
            progress(batch.indices.stop)
    return summarize(results), results


def _result(i: int, j: int, row: dict, s: dict, grade: Any, pass_threshold: float) -> dict:
    """The per-sample result of sample ``j`` of prompt ``i``: the row's labels, the sample without its token ids
    (the text is kept), its grade and template compliance."""
    return {
        "prompt_index": i,
        "sample_index": j,
        "messages": row["messages"],
        "reference_answer": row.get("reference_answer"),
        "difficulty": row.get("difficulty"),
        "lang": row.get("lang"),
        **{k: v for k, v in s.items() if k not in ("completion_ids", "control_tokens")},
        "score": grade.score,
        "passed": grade.score is not None and grade.score >= pass_threshold,
        "compliant": is_template_compliant(s["output_text"], s["finish_reason"], sample_end(s), sample_controls(s)),
        "error": grade.error,
    }


def summarize(results: list[dict]) -> dict[str, float | None]:
    """The metrics of :func:`evaluate`. pass@1 counts an abstention as a fail, but when the grader abstained on
    every sample nothing was scored: pass@1 is None (stored as null, printed as n/a), not 0.

    >>> summarize([{"prompt_index": 0, "score": None, "passed": False, "compliant": True, "completion_tokens": 3,
    ...             "finish_reason": "stop"}])["pass@1"] is None
    True
    """
    if not results:
        return {}
    lens = sorted(r["completion_tokens"] for r in results)
    metrics = {
        "pass@1": _pass_at_1(results),
        "compliance": statistics.fmean(r["compliant"] for r in results),
        "len_mean": statistics.fmean(lens),
        "len_p90": float(lens[min(len(lens) - 1, int(0.9 * len(lens)))]),
        "trunc_rate": statistics.fmean(r["finish_reason"] == "length" for r in results),
        "abstain_rate": statistics.fmean(r["score"] is None for r in results),
    }
    for key in ("difficulty", "lang"):
        for label in sorted({str(r[key]) for r in results if r.get(key) is not None}):
            subset = [r for r in results if str(r.get(key)) == label]
            metrics[f"pass@1/{label}"] = _pass_at_1(subset)
    return {**metrics, **_episode_metrics(results)}


def _episode_metrics(results: list[dict]) -> dict[str, float | None]:
    """Of an evaluation whose samples are agent episodes (kitae.agents): ``tool_use``, the share of episodes that
    called a tool; ``turns_mean``; ``tool_error_rate``, the share of the calls made that failed (None without a
    call); and pass@1 of the episodes that called a tool and of those that did not. Nothing for single-turn samples."""
    episodes = [r for r in results if "turns" in r]
    if not episodes:
        return {}
    calls = [c for r in episodes for c in r.get("tool_calls") or []]
    used = [r for r in episodes if r.get("tool_calls")]
    unused = [r for r in episodes if not r.get("tool_calls")]
    return {
        "tool_use": len(used) / len(episodes),
        "turns_mean": statistics.fmean(r["turns"] for r in episodes),
        "tool_error_rate": statistics.fmean(c.get("error") is not None for c in calls) if calls else None,
        **({"pass@1/with_tool": _pass_at_1(used)} if used else {}),
        **({"pass@1/without_tool": _pass_at_1(unused)} if unused else {}),
    }


def _pass_at_1(results: list[dict]) -> float | None:
    """Pass per sample averaged over samples, then prompts; None when no sample was scored."""
    if all(r["score"] is None for r in results):
        return None
    per_prompt: dict[int, list[bool]] = {}
    for r in results:
        per_prompt.setdefault(r["prompt_index"], []).append(r["passed"])
    return statistics.fmean(statistics.fmean(v) for v in per_prompt.values())
