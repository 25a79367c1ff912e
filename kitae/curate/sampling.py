"""Sample n completions per prompt with a model, grade them, and keep per-prompt results in a resumable file.

Shared by ``difficulty`` and ``hackable``. Prompts go to the rollout engine in fixed batches of
``batch_prompts`` (batch b holds input rows [b·B, (b+1)·B) and samples with seed ``seed + b·B``:
:func:`kitae.scoring.sample_and_grade.graded_batches`, which :func:`kitae.scoring.evaluate.evaluate` samples with too), so
a batch gives the same samples whether it runs in the first run or in a resumed one: a resumed run ends with
exactly the results of an uninterrupted one.

The progress file (``<out>.progress.jsonl``) has a header line with the settings, then one line per prompt,
appended and flushed as each batch finishes. On a rerun, prompts already there are skipped; a torn last line
(a run killed mid-write) is ignored. A file written with other settings or for other rows is an error that
says how to start over (``restart``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from kitae.curate.step import Context
from kitae.curate.text import prompt_key
from kitae.errors import ConfigError, DataError

if TYPE_CHECKING:
    from kitae.rollout.base import RolloutEngine

HEADER_KEY = "kitae_curate_progress"


@dataclass
class PromptResult:
    """One prompt's graded samples. ``rate`` is passes / graded samples (None when every grade abstained)."""

    index: int
    key: str
    passes: int
    graded: int
    scores: list[float | None]
    texts: list[str]
    errors: list[str]

    @property
    def rate(self) -> float | None:
        return self.passes / self.graded if self.graded else None

    def to_dict(self) -> dict:
        return {"i": self.index, "key": self.key, "passes": self.passes, "graded": self.graded,
                "scores": self.scores, "texts": self.texts, "errors": self.errors}

    @classmethod
    def from_dict(cls, d: dict) -> "PromptResult":
        return cls(d["i"], d["key"], d["passes"], d["graded"], d["scores"], d["texts"], d.get("errors", []))


class ProgressFile:
    """Per-prompt results appended as they come; read back on a rerun with the same settings."""

    def __init__(self, path: Path | None, settings: dict, restart: bool = False):
        self.path, self.settings = path, settings
        if path is not None and restart and path.exists():
            path.unlink()

    def load(self, keys: list[str]) -> dict[int, PromptResult]:
        if self.path is None or not self.path.exists():
            return {}
        lines = self.path.read_text(encoding="utf-8").splitlines()
        self._check_header(lines[0] if lines else "")
        done: dict[int, PromptResult] = {}
        for n, line in enumerate(lines[1:], 2):
            try:
                result = PromptResult.from_dict(json.loads(line))
            except (json.JSONDecodeError, KeyError, TypeError):
                if n == len(lines):
                    break  # a torn last line: that prompt is simply redone
                raise DataError(str(self.path), n, None, "not a progress record; delete the file or pass --restart")
            if result.index >= len(keys) or keys[result.index] != result.key:
                raise DataError(str(self.path), n, "key", f"row {result.index + 1} of the input is not the prompt "
                                "this file recorded; the input changed: delete the file or pass --restart")
            done[result.index] = result
        self._rewrite(done)
        return done

    def _check_header(self, line: str) -> None:
        try:
            header = json.loads(line)[HEADER_KEY]
        except (json.JSONDecodeError, KeyError, TypeError):
            raise DataError(str(self.path), 1, None, "not a kitae curate progress file; delete it or pass --restart")
        changed = {k: (header.get(k), v) for k, v in self.settings.items() if header.get(k) != v}
        if changed:
            diff = ", ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in changed.items())
            raise ConfigError(str(self.path), f"progress file was written with other settings ({diff}); "
                              "delete it or pass --restart to start over")

    def _rewrite(self, done: dict[int, PromptResult]) -> None:
        """Drop a torn last line so that appends start on a fresh line."""
        self._write([self._header()] + [done[i].to_dict() for i in sorted(done)], "w")

    def _header(self) -> dict:
        return {HEADER_KEY: self.settings}

    def append(self, results: list[PromptResult]) -> None:
        if self.path is None:
            return
        if not self.path.exists():
            self._write([self._header()], "w")
        self._write([r.to_dict() for r in results], "a")

    def _write(self, records: list[dict], mode: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open(mode, encoding="utf-8") as f:
            f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
            f.flush()


def prompts_done(path: Path | None) -> int:
    """How many prompts a progress file holds (0 when there is none); a torn last line does not count."""
    if path is None or not path.exists():
        return 0
    lines = path.read_text(encoding="utf-8").splitlines()[1:]
    done = 0
    for line in lines:
        try:
            done += "key" in json.loads(line)
        except json.JSONDecodeError:
            pass
    return done


def get_engine(ctx: Context, model: str | None, dtype: str, device: str) -> Any:
    """The rollout engine for `model`, loaded once per context, with torch's thread count set for it."""
    from kitae.threads import set_threads

    set_threads(ctx.threads, model)
    key = f"{model}|{dtype}|{device}"
    if key not in ctx.engines:
        from kitae.rollout.hf import HFEngine

        ctx.engines[key] = HFEngine.from_pretrained(model, dtype=dtype, device=device)
    return ctx.engines[key]


def prompt_results(
    rows: list[dict], prompts: list[list[dict]], engine: RolloutEngine, grader: Any, n: int, sampling: Any,
    batch_prompts: int, pass_threshold: float, progress: ProgressFile,
    on_progress: Callable[[int], None] = lambda k: None,
) -> list[PromptResult]:
    """Per-row results: `n` samples of `prompts[i]` (the messages sent), graded against `rows[i]`
    (:func:`kitae.scoring.sample_and_grade.graded_batches`); a batch whose prompts are all in the progress file is not
    sampled again, one partly there is, and only its new prompts are recorded."""
    from kitae.scoring.components import RewardComponent
    from kitae.scoring.sample_and_grade import graded_batches

    keys = [prompt_key(r) for r in rows]
    done = progress.load(keys)
    on_progress(len(done))
    comp = [RewardComponent("score", 1.0, grader)]
    for batch in graded_batches(engine, prompts, rows, n, sampling, comp, batch_prompts,
                                skip=lambda indices: all(i in done for i in indices)):
        fresh = [_result(i, keys[i], s, gs.grades["score"], pass_threshold)
                 for i, s, gs in zip(batch.indices, batch.samples, batch.scores) if i not in done]
        progress.append(fresh)
        done.update({r.index: r for r in fresh})
        on_progress(len(fresh))
    return [done[i] for i in range(len(rows))]


def _result(i: int, key: str, samples: list[dict], grades: list, threshold: float) -> PromptResult:
    scores = [g.score for g in grades]
    graded = [s for s in scores if s is not None]
    return PromptResult(
        index=i, key=key, passes=sum(s >= threshold for s in graded), graded=len(graded), scores=scores,
        texts=[s["output_text"] for s in samples], errors=sorted({g.error for g in grades if g.error}),
    )
