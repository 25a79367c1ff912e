"""``dedupe``: drop duplicate and near-duplicate prompts, and prompts that leak an eval set (decontamination).

Layers, cheapest first; each runs on what the previous ones kept, and the first row of a group is kept:

    exact        the same prompt text (user turns; system prompts are ignored)
    normalized   the same text after NFKC, casefold, no whitespace or punctuation ("What is 2+2?" = "what is 2 + 2")
    ngram        cosine of character n-gram sets >= ngram_threshold, 0.92 (near-verbatim copies, any language;
                 one changed word in a short prompt scores less: "colour of the sky/sea" is 0.90)
    embedding    cosine of sentence embeddings >= threshold (paraphrases; all-MiniLM-L6-v2 by default)

Decontamination (``eval: [test.jsonl]``) runs the same layers between each row and every eval item, before
the dedupe, and drops the rows that match (``eval_threshold`` defaults to ``threshold``).

Guards (``guards: [numbers, answer, lang]``, the default) apply to the ngram and embedding layers: two
prompts that state different numbers or different operators (when both state one), whose reference answers
differ, or that are in different languages (``lang`` field, else detected) are never near-duplicates.
Without them "What is 12+35?" and "What is 12+36?" (cosine 0.86) would be one prompt, and so would
"太陽系で一番大きい惑星は？" and "...一番小さい惑星は？" (0.97). Drop ``lang`` from the guards to catch
translations (e.g. to decontaminate against a test set in another language). Pairs that state the same
numbers with the same operators (``+``, ``plus``, ``たす`` are one) *and* have the same reference answer match
at the lower ``same_numbers_threshold`` (0.6): "12+35は？" and "12たす35はいくつですか？" are one problem at
cosine 0.62. The operators keep "2+0" and "2-0" (both 2) apart.
Exact and normalized copies are dropped whatever their answers; copies whose answers disagree are counted
as ``conflicting_answers``.

Thresholds, measured on tests/curate/data/dedupe_set.jsonl (14 planted paraphrase pairs per language; see
``python benchmarks/curate.py --sweep``): with the default guards at 0.9, all-MiniLM-L6-v2 finds 14/14 English
pairs and merges no distinct pair; in Japanese it finds 11/14 and merges 1 distinct pair (two questions whose
answer is 木星, 0.91). Unguarded, distinct Japanese prompts reach 0.97 ("太陽系で一番大きい惑星" vs "...一番小さい
惑星"): it is an English model. For Japanese-heavy sets pass a multilingual sentence-transformers folder as
``model``; the n-gram layer catches near-verbatim Japanese copies without any model.

Scaling: the search is blockwise (:func:`kitae.curate.embed.first_duplicates`); no N×N matrix is held.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kitae.config import setting
from kitae.curate import embed
from kitae.curate.report import StepReport, Table
from kitae.curate.step import Context, Dropped, Step, StepResult
from kitae.curate.text import answer_form, normalize, numbers, operators, prompt_text, row_lang
from kitae.errors import ConfigError

GUARDS = ("numbers", "answer", "lang")
LAYERS = ("exact", "normalized", "ngram", "embedding")


@dataclass
class DedupeConfig:
    exact: bool = True
    normalized: bool = True
    ngram: bool = True
    ngram_n: int = setting(3, minimum=1)  # characters per n-gram
    ngram_threshold: float = 0.92
    embedding: bool = True
    model: str = embed.DEFAULT_MODEL
    threshold: float = 0.9
    eval: list[str] = field(default_factory=list)
    eval_threshold: float | None = None
    guards: list[str] = field(default_factory=lambda: list(GUARDS))
    same_numbers_threshold: float | None = 0.6
    device: str = "cpu"
    batch_size: int = 64
    block: int = 1024

    def validate(self, path: str) -> None:
        for name in ("threshold", "ngram_threshold", "eval_threshold", "same_numbers_threshold"):
            value = getattr(self, name)
            if value is not None and not -1.0 <= value <= 1.0:
                raise ConfigError(f"{path}.{name}" if path else name, f"a cosine threshold is in [-1, 1], got {value}")
        for i, g in enumerate(self.guards):
            if g not in GUARDS:
                raise ConfigError(f"{path}.guards[{i}]" if path else f"guards[{i}]",
                                  f"unknown guard {g!r} (valid: {', '.join(GUARDS)})")


# ---- one layer ----------------------------------------------------------------------------------
@dataclass
class Layer:
    """One way of comparing prompts: `vectors` for cosine layers, `forms` for equality layers."""

    name: str
    threshold: float = 1.0
    forms: list[str] | None = None
    vectors: np.ndarray | None = None


def guard_keys(row_sets: list[list[dict]], guards: list[str]) -> list[tuple[np.ndarray | None, np.ndarray | None]]:
    """Per row set: guard values [N, G] (-1 = no value, matches anything) and strong ids [N].

    The numbers guard is two columns: the numbers (always a value) and the operators (a wildcard when none is
    stated, so "Add 12 and 35" may still match "12+35"). A row's strong id names its (numbers, operators,
    answer) when it states numbers and has a reference answer and the numbers and answer guards are on.
    """
    if not guards:
        return [(None, None) for _ in row_sets]
    ids: dict[Any, int] = {}
    columns = [c for g in guards for c in ((g, "operators") if g == "numbers" else (g,))]
    use_strong = {"numbers", "answer"} <= set(guards)
    out = []
    for rows in row_sets:
        keys = np.empty((len(rows), len(columns)), dtype=np.int64)  # [N, G]
        strong = np.full(len(rows), -1, dtype=np.int64)  # [N]
        for i, row in enumerate(rows):
            text = prompt_text(row)
            values = {"numbers": numbers(text), "operators": operators(text) or None, "answer": answer_form(row),
                      "lang": row_lang(row)}
            for g, column in enumerate(columns):
                value = values[column]
                keys[i, g] = -1 if value is None else ids.setdefault((column, value), len(ids))
            if use_strong and values["numbers"] and values["answer"] is not None:
                signature = ("strong", values["numbers"], values["operators"], values["answer"])
                strong[i] = ids.setdefault(signature, len(ids))
        out.append((keys, strong))
    return out


def layer_guard(keys_strong: tuple, threshold: float, cfg: "DedupeConfig") -> embed.Guard:
    keys, strong = keys_strong
    bonus = max(0.0, threshold - cfg.same_numbers_threshold) if cfg.same_numbers_threshold is not None else 0.0
    return embed.Guard(keys, strong, bonus)


def layer_vectors(name: str, texts: list[str], cfg: DedupeConfig, encoder: Any, ctx: Context, what: str):
    if name == "exact":
        return [t.strip() for t in texts]
    if name == "normalized":
        return [normalize(t) for t in texts]
    if name == "ngram":
        return embed.ngram_vectors(texts, cfg.ngram_n)
    return embed.encode(encoder, texts, cfg.batch_size, on_progress=ctx.progress(f"embed {what}", len(texts)))


def equal_duplicates(forms: list[str], alive: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Keep-first on equal forms among alive rows: (partner [N], score [N]) as first_duplicates returns."""
    partner = np.full(len(forms), -1, dtype=np.int64)
    first: dict[str, int] = {}
    for i in np.flatnonzero(alive):
        j = first.setdefault(forms[i], int(i))
        if j != i:
            partner[i] = j
    return partner, (partner >= 0).astype(np.float32)


def cosine_duplicates(vectors, threshold, guard, alive, cfg, ctx, name) -> tuple[np.ndarray, np.ndarray]:
    idx = np.flatnonzero(alive)
    partner_sub, score_sub = embed.first_duplicates(
        vectors[idx], threshold, guard.take(idx), cfg.block, on_progress=ctx.progress(f"search {name}", len(idx))
    )
    partner = np.full(len(alive), -1, dtype=np.int64)
    score = np.zeros(len(alive), dtype=np.float32)
    dup = partner_sub >= 0
    partner[idx[dup]] = idx[partner_sub[dup]]
    score[idx[dup]] = score_sub[dup]
    return partner, score


def eval_matches(a, b, threshold, guard_a, guard_b, alive, cfg) -> tuple[np.ndarray, np.ndarray]:
    """Rows of `a` (alive only) that match an item of `b`: (eval index [N] or -1, score [N])."""
    hit = np.full(len(alive), -1, dtype=np.int64)
    score = np.zeros(len(alive), dtype=np.float32)
    if isinstance(a, list):  # equality layer
        where = {}
        for j, form in enumerate(b):
            where.setdefault(form, j)
        for i in np.flatnonzero(alive):
            if a[i] in where:
                hit[i], score[i] = where[a[i]], 1.0
        return hit, score
    for start in range(0, len(a), cfg.block):
        rows = slice(start, start + cfg.block)
        s, j = embed.best_matches(a[rows], b, guard_a.take(rows), guard_b)
        ok = (s >= threshold) & alive[rows]
        cos = embed.plain_cosine(a[rows], b, j)
        hit[rows][ok], score[rows][ok] = j[ok], cos[ok]
    return hit, score


# ---- the step -----------------------------------------------------------------------------------
@dataclass
class EvalSet:
    """Every eval item, with where it came from."""

    rows: list[dict] = field(default_factory=list)
    origin: list[tuple[str, int]] = field(default_factory=list)  # (file, 1-based row)

    @classmethod
    def load(cls, paths: list[str]) -> "EvalSet":
        from kitae.data.loader import load_prompts

        out = cls()
        for path in paths:
            rows = load_prompts(path)
            out.rows += rows
            out.origin += [(str(path), i + 1) for i in range(len(rows))]
        return out


def run_dedupe(rows: list[dict], cfg: DedupeConfig, ctx: Context) -> StepResult:
    texts = [prompt_text(r) for r in rows]
    evals = EvalSet.load(cfg.eval)
    eval_texts = [prompt_text(r) for r in evals.rows]
    keys, eval_keys = guard_keys([rows, evals.rows], cfg.guards)
    layers = [name for name in LAYERS if getattr(cfg, name) and rows]
    encoder = _encoder(cfg, ctx) if "embedding" in layers else None
    alive = np.ones(len(rows), dtype=bool)
    found: dict[int, dict] = {}  # row index -> why it goes
    counts: dict[str, Counter] = {name: Counter() for name in layers}
    seconds: dict[str, float] = {}
    for name in layers:
        t0 = time.perf_counter()
        vecs = layer_vectors(name, texts, cfg, encoder, ctx, "rows")
        if evals.rows:
            thr = cfg.eval_threshold if cfg.eval_threshold is not None else _threshold(cfg, name)
            ev = layer_vectors(name, eval_texts, cfg, encoder, ctx, "eval set")
            guards = layer_guard(keys, thr, cfg), layer_guard(eval_keys, thr, cfg)
            hit, score = eval_matches(vecs, ev, thr, *guards, alive, cfg)
            for i in np.flatnonzero(hit >= 0):
                found[int(i)] = _eval_detail(name, int(hit[i]), float(score[i]), evals, texts[i], eval_texts)
                counts[name]["eval overlap"] += 1
            alive &= hit < 0
        if isinstance(vecs, list):
            partner, score = equal_duplicates(vecs, alive)
        else:
            thr = _threshold(cfg, name)
            partner, score = cosine_duplicates(vecs, thr, layer_guard(keys, thr, cfg), alive, cfg, ctx, name)
        for i in np.flatnonzero(partner >= 0):
            j = int(partner[i])
            found[int(i)] = _dup_detail(name, j, float(score[i]), texts[j], rows[i], rows[j])
            counts[name]["duplicate"] += 1
        alive &= partner < 0
        seconds[name] = time.perf_counter() - t0
    return _result(rows, texts, alive, found, counts, seconds, cfg)


def _encoder(cfg: DedupeConfig, ctx: Context) -> Any:
    """The sentence encoder, loaded once per context (ctx.engines also caches rollout engines)."""
    from kitae.threads import set_threads

    set_threads(ctx.threads, embed.resolve_model(cfg.model, "dedupe.model"))
    key = f"embed|{cfg.model}|{cfg.device}"
    if key not in ctx.engines:
        ctx.engines[key] = embed.load_encoder(cfg.model, cfg.device, "dedupe.model")
    return ctx.engines[key]


def _threshold(cfg: DedupeConfig, layer: str) -> float:
    return {"ngram": cfg.ngram_threshold, "embedding": cfg.threshold}.get(layer, 1.0)


def _dup_detail(layer: str, j: int, score: float, text_j: str, row: dict, row_j: dict) -> dict:
    conflict = layer in ("exact", "normalized") and answer_form(row) != answer_form(row_j)
    return {"reason": f"duplicate ({layer})", "layer": layer, "cosine": round(score, 4),
            "duplicate_of_row": j + 1, "match": text_j, "conflicting_answers": conflict}


def _eval_detail(layer: str, k: int, score: float, evals: EvalSet, text: str, eval_texts: list[str]) -> dict:
    file, row = evals.origin[k]
    return {"reason": f"eval overlap ({layer})", "layer": layer, "cosine": round(score, 4),
            "eval_file": file, "eval_row": row, "match": eval_texts[k]}


def _result(rows, texts, alive, found, counts, seconds, cfg) -> StepResult:
    report = StepReport("dedupe", rows_in=len(rows), rows_out=int(alive.sum()))
    dropped = []
    for i in sorted(found):
        d = dict(found[i])
        reason = d.pop("reason")
        report.drop(reason)
        dropped.append(Dropped(rows[i], reason, {"row": i + 1, "text": texts[i], **d}))
    table_rows = [[name, _threshold(cfg, name) if name in ("ngram", "embedding") else "equal",
                   counts[name]["eval overlap"], counts[name]["duplicate"], round(seconds[name], 2)]
                  for name in counts]
    report.tables.append(Table("layers", ["layer", "threshold", "eval overlap", "duplicates", "seconds"], table_rows))
    report.stats = {
        "model": cfg.model if cfg.embedding else None, "threshold": cfg.threshold,
        "ngram_threshold": cfg.ngram_threshold, "eval_threshold": cfg.eval_threshold, "eval": cfg.eval,
        "guards": cfg.guards, "conflicting_answers": sum(1 for d in found.values() if d.get("conflicting_answers")),
    }
    report.examples = [
        {"layer": d.detail["layer"], "cosine": d.detail["cosine"], "dropped": d.detail["text"],
         "matches": d.detail["match"]}
        for d in _spread(dropped)
    ]
    return StepResult([r for r, a in zip(rows, alive) if a], dropped, report)


def _spread(dropped: list[Dropped], per_reason: int = 3) -> list[Dropped]:
    """A few examples of each reason, so every layer shows what it caught."""
    seen: Counter = Counter()
    out = []
    for d in dropped:
        if seen[d.reason] < per_reason:
            seen[d.reason] += 1
            out.append(d)
    return out


STEP = Step("dedupe", DedupeConfig, run_dedupe)
