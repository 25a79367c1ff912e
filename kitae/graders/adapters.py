"""Two adapters between kitae graders and TRL's reward-function contract.

TRL's contract (``GRPOTrainer(reward_funcs=...)``)::

    fn(prompts, completions, completion_ids=None, **columns) -> list[float | None]    # None = abstain

where ``columns`` are the dataset's other columns, one value per completion, plus TRL's ``trainer_state``,
``log_extra`` and ``log_metric``; a function may be ``async``.

- :func:`grader_from_callable` wraps such a function as a :class:`Grader` (kitae's trainer uses it so any
  TRL reward function is a reward component); completions are the text up to ``<|im_end|>``, as TRL, which
  decodes without special tokens, would pass them;
- :func:`as_reward_function` turns any kitae grader or mix into such a function (so TRL users can adopt
  kitae's graders alone). TRL lays a batch out as consecutive copies of each prompt; consecutive rows with
  the same prompt and columns are graded as one group, so group graders see their group.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import numbers
from typing import Any, Callable

from kitae.graders.base import Grade, Grader, Item, Sample, run_sync
from kitae.graders.template import output_text

# Keyword arguments TRL adds that are not dataset columns.
TRL_EXTRA_KWARGS = ("trainer_state", "log_extra", "log_metric", "environments")


# ---- TRL reward function -> Grader ----------------------------------------------------------------
class CallableGrader(Grader):
    """A TRL-style reward function as a grader: the group becomes one call with TRL's arguments."""

    type_name = "callable"

    def __init__(self, fn: Callable[..., Any], name: str | None = None):
        self.fn = fn
        self.name = name or getattr(fn, "__name__", "reward")

    def _kwargs(self, item: Item, samples: list[Sample]) -> dict[str, Any]:
        n = len(samples)
        prompt = item.get("prompt", item.get("messages", ""))
        conversational = isinstance(prompt, list)
        texts = [output_text(s) for s in samples]
        completions = [[{"role": "assistant", "content": t}] for t in texts] if conversational else texts
        columns = {k: [v] * n for k, v in item.items() if k != "prompt"}
        ids = [s.get("completion_ids") for s in samples]
        return {"prompts": [prompt] * n, "completions": completions,
                "completion_ids": ids if all(i is not None for i in ids) else None, **columns}

    def grade_samples(self, item: Item, samples: list[Sample]) -> list[Grade]:
        return run_sync(self.agrade_samples(item, samples))

    async def agrade_samples(self, item: Item, samples: list[Sample]) -> list[Grade]:
        out = self.fn(**self._kwargs(item, samples))
        if inspect.isawaitable(out):
            out = await out
        return [_to_grade(value, self.name) for value in list(out)]


def _to_grade(value: Any, name: str) -> Grade:
    if value is None:
        return Grade(score=None)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return Grade.abstain(error=f"reward function {name} returned {value!r}, not a number")
    if not math.isfinite(value):  # TRL writes None as NaN inside its trainer; a function should return None
        return Grade.abstain(error=f"reward function {name} returned {float(value)!r}, not a finite number")
    return Grade(score=float(value))


def grader_from_callable(fn: Callable[..., Any], name: str | None = None) -> Grader:
    """Wrap ``fn(prompts, completions, completion_ids=None, **columns) -> list[float|None]`` (sync or async).

    The item's ``prompt`` (or ``messages``) is the prompt; its other fields are passed as columns.
    A conversational prompt (a message list) gets conversational completions, as TRL does. None abstains;
    a value that is not a number, or is NaN or ±infinity, abstains with an error saying so (counted).
    """
    return CallableGrader(fn, name)


# ---- Grader -> TRL reward function ----------------------------------------------------------------
def as_reward_function(grader: Grader, name: str | None = None, asynchronous: bool = False) -> Callable[..., Any]:
    """A TRL reward function that grades with ``grader``; abstentions are None (TRL masks them).

    When TRL passes ``log_metric``, each sub-score's batch mean is logged as ``{name}/{sub}``; with
    ``log_extra``, the per-sample reason (or error) becomes a column ``{name}_reason`` of the completions table.
    """
    label = name or grader.name or grader.type_name

    async def reward(prompts: list, completions: list, completion_ids: list | None = None, **kwargs: Any):
        columns = {k: v for k, v in kwargs.items() if k not in TRL_EXTRA_KWARGS}
        groups = _groups(prompts, completions, completion_ids, columns)
        results = await asyncio.gather(*(grader.agrade_group(item, samples) for item, samples in groups))
        grades = [g for group in results for g in group]
        _log(label, grades, kwargs)
        return [g.score for g in grades]

    if asynchronous:
        reward.__name__ = reward.__qualname__ = label
        return reward

    def reward_sync(prompts: list, completions: list, completion_ids: list | None = None, **kwargs: Any):
        return run_sync(reward(prompts, completions, completion_ids, **kwargs))

    reward_sync.__name__ = reward_sync.__qualname__ = label
    return reward_sync


def _groups(prompts: list, completions: list, completion_ids: list | None,
            columns: dict[str, list]) -> list[tuple[Item, list[Sample]]]:
    groups: list[tuple[Item, list[Sample]]] = []
    for i, (prompt, completion) in enumerate(zip(prompts, completions, strict=True)):
        item: Item = {k: v[i] for k, v in columns.items()}
        item["prompt"] = prompt
        if isinstance(prompt, list):
            item.setdefault("messages", prompt)
        sample: Sample = {"output_text": _completion_text(completion)}
        if completion_ids is not None:
            sample["completion_ids"] = completion_ids[i]
        if groups and groups[-1][0] == item:
            groups[-1][1].append(sample)
        else:
            groups.append((item, [sample]))
    return groups


def _completion_text(completion: Any) -> str:
    if isinstance(completion, list):  # conversational: [{"role": "assistant", "content": ...}, ...]
        return "".join(str(m.get("content") or "") for m in completion if isinstance(m, dict))
    return str(completion)


def _log(label: str, grades: list[Grade], kwargs: dict[str, Any]) -> None:
    log_metric, log_extra = kwargs.get("log_metric"), kwargs.get("log_extra")
    if callable(log_metric):
        names = {k for g in grades for k in g.sub_scores}
        for sub in sorted(names):
            values = [g.sub_scores[sub] for g in grades if g.sub_scores.get(sub) is not None]
            if values:
                log_metric(f"{label}/{sub}", sum(values) / len(values))
    if callable(log_extra):
        log_extra(f"{label}_reason", [g.error or g.reason or "" for g in grades])
