"""Shortest-rejection sampling and DPO pairs (Kimi k1.5 §2.4), from n samples per prompt of a long model.

For each prompt, sample n responses (the paper: n = 8) and grade them (or read the per-sample results of a
``kitae eval`` run, so one sampling pass feeds both SFT and DPO data). A response is *correct* when it passes the
grader (score >= threshold) and follows the chat template (ended its turn with the model's end marker, ``<|im_end|>``
or Llama 3's ``<|eot_id|>``, ..., not cut off), so
the SFT and DPO data never teach a run-on. Then:

- shortest rejection: the shortest correct response (fewest completion tokens; the first sampled on a tie) is
  the SFT target; a prompt with no correct response gives no row.
- DPO pairs: chosen = that shortest correct response; rejected = every wrong response longer than it, and every
  correct response at least ``ratio`` (1.5) times its length; longest first, at most ``max_pairs`` per prompt.

Rows use TRL's conversational formats: SFT ``{"prompt": [messages], "completion": [assistant]}`` (prompt-completion,
so the loss is on the completion only), DPO ``{"prompt", "chosen", "rejected"}``. The assistant content is the
response up to its end marker (or up to the first template token, for a run-on).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from kitae.chat import TEMPLATE_TOKENS, sample_end
from kitae.graders.base import Grader
from kitae.rollout.base import SamplingParams


def assistant_content(text: str, end: str | None = None) -> str:
    """The response without its end marker (`end`, the model's: the sample's ``end_marker``; ``<|im_end|>`` by
    default) or anything after a template token.

    >>> assistant_content("12+35=47<|im_end|>"), assistant_content("47 47<|im_start|>user")
    ('12+35=47', '47 47')
    """
    marks = (sample_end({"end_marker": end}), *TEMPLATE_TOKENS)
    cut = min((text.find(t) for t in marks if t in text), default=len(text))
    return text[:cut]


def group_results(results: list[dict]) -> list[list[dict]]:
    """evaluate()'s flat per-sample results -> one list per prompt, in prompt order."""
    groups: dict[int, list[dict]] = {}
    for r in results:
        groups.setdefault(r["prompt_index"], []).append(r)
    return [groups[i] for i in sorted(groups)]


def is_correct(sample: dict) -> bool:
    return bool(sample["passed"]) and bool(sample["compliant"])


def shortest_correct(group: list[dict]) -> dict | None:
    """The correct sample with the fewest completion tokens (first on ties), or None.

    >>> g = [{"passed": True, "compliant": True, "completion_tokens": n} for n in (9, 4, 4)]
    >>> g[1] is shortest_correct(g)
    True
    """
    correct = [s for s in group if is_correct(s)]
    return min(correct, key=lambda s: s["completion_tokens"]) if correct else None


def rejected_for(group: list[dict], chosen: dict, ratio: float = 1.5) -> list[tuple[dict, str]]:
    """(sample, kind) pairs: wrong and longer ("wrong"), or correct and >= ratio x longer ("long"); longest first.

    >>> g = [{"passed": p, "compliant": True, "completion_tokens": n} for p, n in
    ...      [(True, 10), (False, 12), (False, 8), (True, 14), (True, 15), (False, 30)]]
    >>> [(s["completion_tokens"], k) for s, k in rejected_for(g, g[0])]
    [(30, 'wrong'), (15, 'long'), (12, 'wrong')]
    """
    n = chosen["completion_tokens"]
    out = []
    for s in group:
        if s is chosen:
            continue
        if not is_correct(s) and s["completion_tokens"] > n:
            out.append((s, "wrong"))
        elif is_correct(s) and s["completion_tokens"] >= ratio * n:
            out.append((s, "long"))
    return sorted(out, key=lambda x: -x[0]["completion_tokens"])


def _assistant(sample: dict) -> list[dict]:
    return [{"role": "assistant", "content": assistant_content(sample["output_text"], sample.get("end_marker"))}]


def sft_rows(groups: list[list[dict]]) -> list[dict]:
    rows = []
    for g in groups:
        best = shortest_correct(g)
        if best is not None:
            rows.append({"prompt": best["messages"], "completion": _assistant(best),
                         "reference_answer": best.get("reference_answer"),
                         "completion_tokens": best["completion_tokens"],
                         "correct_of_n": f"{sum(is_correct(s) for s in g)}/{len(g)}"})
    return rows


def dpo_rows(groups: list[list[dict]], ratio: float = 1.5, max_pairs: int | None = None) -> list[dict]:
    rows = []
    for g in groups:
        best = shortest_correct(g)
        if best is None:
            continue
        for s, kind in rejected_for(g, best, ratio)[:max_pairs]:
            rows.append({"prompt": best["messages"], "chosen": _assistant(best), "rejected": _assistant(s),
                         "chosen_tokens": best["completion_tokens"], "rejected_tokens": s["completion_tokens"],
                         "rejected_kind": kind})
    return rows


def sample_groups(
    model: str, rows: list[dict], grader: Grader, n: int, sampling: SamplingParams, pass_threshold: float = 1.0,
    progress: Callable[[int], None] | None = None,
) -> list[list[dict]]:
    """n graded samples per prompt from `model` (kitae.scoring.evaluate's per-sample results), grouped."""
    from kitae.long2short.compare import evaluate_model

    _, results = evaluate_model(model, rows, grader, n, sampling, pass_threshold, progress=progress)
    return group_results(results)


def read_samples(path: str | Path) -> list[list[dict]]:
    """Per-sample results written by `kitae eval` (one JSON row per sample), grouped by prompt."""
    from kitae.data.loader import read_jsonl
    from kitae.errors import DataError

    path = Path(path)
    if not path.exists():
        raise DataError(str(path), None, None, "file not found; write it with `kitae eval ... --out DIR`")
    rows = []
    for i, row in read_jsonl(path):
        if not isinstance(row, dict):
            raise DataError(str(path), i, None, "expected a JSON object: is this a per-sample file of `kitae eval`?")
        for key in ("prompt_index", "messages", "output_text", "completion_tokens", "passed", "compliant"):
            if key not in row:
                raise DataError(str(path), i, key, "missing: is this a per-sample file of `kitae eval`?")
        rows.append(row)
    return group_results(rows)


def selection_stats(groups: list[list[dict]], made: list[dict]) -> dict[str, Any]:
    return {"prompts": len(groups), "with_a_correct_sample": sum(shortest_correct(g) is not None for g in groups),
            "rows": len(made)}
