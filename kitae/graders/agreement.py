"""Does the grader rank answers the way you do? (the hosted RFT grader guide: "score 5–10 answers yourself and
compare"; kitae asks for 30 before it gives a grade, see MIN_LABELS).

:func:`agreement` is the pure computation (the web page's labeling page reuses it); :func:`validate` grades
labeled rows and adds warnings and a one-line verdict (``kitae grader validate``).

Measures, over samples that have both a human score and a grader score:
- Spearman's rho (Pearson correlation of average ranks) and Kendall's tau-b, across all samples;
- within-group pairwise agreement, what GRPO uses: over pairs of samples of one group that the human
  scored differently, the fraction the grader orders the same way (a grader tie counts one half);
- the worst disagreements: within-group pairs the grader orders against the human, by how far apart both
  put them (scores rescaled to [0, 1] over the data so human scales such as 1–5 compare).

One verdict (:func:`verdict`), with its 95% interval (:func:`agreement_interval`): GOOD, WEAK or BAD from the
headline measure (pairwise agreement, or Spearman without groups), or "too few labels to trust" under
:data:`MIN_LABELS` labelled samples, where the interval is wider than the gap between two grades. `kitae grader
lint` and the run page's labeling view say the same from the same constants.

Warnings come from the checks in :data:`CHECKS`, a registry of ``check(ctx) -> list[str]`` functions, so
more (about judges, say) can be registered without touching this module.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from kitae.errors import DataError
from kitae.graders.base import Grade, Grader, run_sync
from kitae.graders.rows import Row, agrade_rows
from kitae.registry import Registry

CHECKS = Registry("validation check")
GOOD, WEAK = 0.8, 0.65  # pairwise agreement (or Spearman) thresholds of the verdict
# labelled samples below which the verdict is "too few labels to trust": at 30 the 95% interval of an agreement
# near GOOD is about ±0.14, the gap between GOOD and WEAK; with fewer the verdict can be off by a whole grade
MIN_LABELS = 30
Z95 = 1.959964  # the standard normal's 97.5% quantile: a two-sided 95% interval


# ---- statistics ---------------------------------------------------------------------------------
def ranks(values: list[float]) -> list[float]:
    """1-based ranks, ties get their average rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def pearson(x: list[float], y: list[float]) -> float | None:
    n = len(x)
    if n < 2:
        return None
    mx, my = sum(x) / n, sum(y) / n
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y))
    sxx, syy = sum((a - mx) ** 2 for a in x), sum((b - my) ** 2 for b in y)
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else None


def spearman(x: list[float], y: list[float]) -> float | None:
    return pearson(ranks(x), ranks(y))


def kendall_tau_b(x: list[float], y: list[float]) -> float | None:
    concordant = discordant = ties_x = ties_y = 0
    for i in range(len(x)):
        for j in range(i + 1, len(x)):
            dx, dy = _sign(x[i] - x[j]), _sign(y[i] - y[j])
            if dx == 0 and dy == 0:
                continue
            if dx == 0:
                ties_x += 1
            elif dy == 0:
                ties_y += 1
            elif dx == dy:
                concordant += 1
            else:
                discordant += 1
    denom = math.sqrt((concordant + discordant + ties_x) * (concordant + discordant + ties_y))
    return (concordant - discordant) / denom if denom > 0 else None


def _sign(v: float) -> int:
    return (v > 0) - (v < 0)


# ---- agreement ----------------------------------------------------------------------------------
@dataclass
class Disagreement:
    group: int  # index of the group (row)
    better: int  # sample the human scored higher
    worse: int
    human: tuple[float, float]  # (better, worse)
    grader: tuple[float, float]
    severity: float  # rescaled human gap + rescaled grader gap, in [0, 2]


@dataclass
class Agreement:
    n_samples: int  # samples with both scores
    spearman: float | None
    kendall: float | None
    pairwise: float | None  # within-group; None without groups of 2+
    pairs: int  # within-group pairs the human ordered
    grader_ties: int  # ... of which the grader tied
    worst: list[Disagreement] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def agreement(human: list[list[float | None]], graded: list[list[float | None]], worst: int = 5) -> Agreement:
    """Agreement of grader scores with human scores; both are given per group, sample by sample.

    A sample missing either score (None) is left out.
    """
    pairs = [[(h, g) for h, g in zip(hs, gs)] for hs, gs in zip(human, graded, strict=True)]
    flat = [(h, g) for group in pairs for h, g in group if h is not None and g is not None]
    xs, ys = [h for h, _ in flat], [g for _, g in flat]
    h_scale, g_scale = _span(xs), _span(ys)
    agree = total = ties = 0.0
    found: list[Disagreement] = []
    for gi, group in enumerate(pairs):
        for i in range(len(group)):
            for j in range(i + 1, len(group)):
                (hi, gi_), (hj, gj) = group[i], group[j]
                if None in (hi, hj, gi_, gj) or hi == hj:
                    continue
                a, b = (i, j) if hi > hj else (j, i)
                (ha, ga), (hb, gb) = group[a], group[b]
                total += 1
                if ga == gb:
                    ties += 1
                    agree += 0.5
                elif ga > gb:
                    agree += 1
                else:
                    severity = (ha - hb) / h_scale + (gb - ga) / g_scale
                    found.append(Disagreement(gi, a, b, (ha, hb), (ga, gb), severity))
    found.sort(key=lambda d: -d.severity)
    return Agreement(
        n_samples=len(flat), spearman=spearman(xs, ys), kendall=kendall_tau_b(xs, ys),
        pairwise=agree / total if total else None, pairs=int(total), grader_ties=int(ties), worst=found[:worst],
    )


def _span(values: list[float]) -> float:
    return (max(values) - min(values)) or 1.0 if values else 1.0


# ---- validation of a grader on labeled rows -----------------------------------------------------
@dataclass
class CheckContext:
    """What a check sees: the spec (None for a grader built in code), rows, grades, agreement."""

    spec: dict[str, Any] | None
    grader: Grader
    rows: list[Row]
    grades: list[list[Grade]]
    agreement: Agreement

    def leaves(self) -> list[dict[str, Any]]:
        return leaf_specs(self.spec) if self.spec else []


@dataclass
class ValidationReport:
    agreement: Agreement
    scored: int
    abstained: int
    errors: int
    warnings: list[str]
    verdict: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def validate(grader: Grader, rows: list[Row], spec: dict[str, Any] | None = None,
             concurrency: int = 8, worst: int = 5) -> ValidationReport:
    """Grade labeled rows (each sample carries ``human_score``) and compare with the human scores."""
    human = [[human_score(row, j, s) for j, s in enumerate(row.samples)] for row in rows]
    grades = run_sync(agrade_rows(grader, rows, concurrency))
    graded = [[g.score for g in gs] for gs in grades]
    result = agreement(human, graded, worst)
    ctx = CheckContext(spec, grader, rows, grades, result)
    warnings = [w for name in CHECKS.names() for w in CHECKS.get(name)(ctx)]
    flat = [g for gs in grades for g in gs]
    return ValidationReport(
        agreement=result, scored=sum(g.score is not None for g in flat),
        abstained=sum(g.score is None for g in flat), errors=sum(g.error is not None for g in flat),
        warnings=warnings, verdict=verdict(result),
    )


def human_score(row: Row, index: int, sample: dict[str, Any]) -> float | None:
    value = sample.get("human_score")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        field_name = f"samples[{index}].human_score" if row.is_group else "sample.human_score"
        raise DataError("data", row.number, field_name, f"expected a number, got {value!r}")
    return float(value)


def verdict(result: Agreement) -> str:
    """One line: the grade and the numbers it rests on, with the 95% interval of the headline measure."""
    n = result.n_samples
    measure, value = ("pairwise agreement", result.pairwise) if result.pairwise is not None else \
        ("Spearman", result.spearman)
    if value is None:
        why = f"too few labels to trust: {n}, need {MIN_LABELS}" if n < MIN_LABELS else "the scores do not vary"
        return f"INCONCLUSIVE: {why}; no ranking can be compared yet"
    lo, hi = agreement_interval(value, n, measure)
    stats = f"{measure} {value:.2f}, 95% interval {lo:.2f} to {hi:.2f} from {n} labels"
    if measure != "Spearman" and result.spearman is not None:
        stats += f"; Spearman {result.spearman:.2f}"
    if n < MIN_LABELS:
        return f"INCONCLUSIVE: too few labels to trust: {n}, need {MIN_LABELS} ({stats}); label more before a long run"
    if value >= GOOD:
        return f"GOOD: the grader ranks answers like you ({stats}); fine for a long run"
    if value >= WEAK:
        return f"WEAK: the grader often ranks answers differently ({stats}); fix the worst disagreements first"
    return f"BAD: the grader does not rank like you ({stats}); the model would learn the grader's opinion, not yours"


def agreement_interval(value: float, n: int, measure: str = "pairwise agreement") -> tuple[float, float]:
    """The 95% interval of an agreement measured on `n` labelled samples.

    Pairwise agreement is a proportion: the Wilson score interval, which stays inside [0, 1] and is not empty at
    0 or 1 (0.958 on 12 labels: 0.70 to 1.00; 0.8 on 30: 0.63 to 0.90). `n` is the number of labelled samples,
    not of pairs: the pairs of one group share samples, so they are not independent draws. Spearman: Fisher's z
    with the Bonett-Wright standard error ``sqrt((1 + r²/2) / (n - 3))``; below 4 samples it is (-1, 1)."""
    if measure == "Spearman":
        if n < 4:
            return -1.0, 1.0
        r = max(-0.9999, min(0.9999, value))
        z, se = math.atanh(r), math.sqrt((1 + r * r / 2) / (n - 3))
        return math.tanh(z - Z95 * se), math.tanh(z + Z95 * se)
    if n < 1:
        return 0.0, 1.0
    z2 = Z95 * Z95
    centre = (value + z2 / (2 * n)) / (1 + z2 / n)
    half = Z95 * math.sqrt(value * (1 - value) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def leaf_specs(spec: dict[str, Any], weight: float = 1.0) -> list[dict[str, Any]]:
    """The non-composite graders of a spec, each with its effective ``weight`` (0 = logged only)."""
    kind = spec.get("type")
    if kind in ("weighted", "multi") and isinstance(spec.get("graders"), dict):
        out = []
        for sub in spec["graders"].values():
            if isinstance(sub, dict):
                w = sub.get("weight", 1.0) if kind == "weighted" else 1.0
                out += leaf_specs(sub, weight * (w if isinstance(w, (int, float)) else 1.0))
        return out
    if kind == "gate":
        parts = [spec[key] for key in ("gate", "grader") if isinstance(spec.get(key), dict)]
        return [leaf for part in parts for leaf in leaf_specs(part, weight)]
    return [{**spec, "weight": weight}]


# ---- checks: the guide's common mistakes ---------------------------------------------------------
def register_check(name: str) -> Callable:
    return CHECKS.register(name)


@register_check("similarity_alone")
def _similarity_alone(ctx: CheckContext) -> list[str]:
    counted = [s for s in ctx.leaves() if s["weight"] > 0]
    if counted and all(s.get("type") in ("text_similarity", "string_check") for s in counted):
        return ["similarity alone: correct paraphrases score low and wrong answers in the reference's words score "
                "high; where meaning matters, add a judge (judge 70% + similarity 30%)"]
    return []


@register_check("numeric_without_numbers")
def _numeric_without_numbers(ctx: CheckContext) -> list[str]:
    if not any(s.get("type") == "numeric" for s in ctx.leaves()):
        return []
    from kitae.graders.numbers import key_numbers

    refs = [row.item.get("reference_answer") for row in ctx.rows]
    without = sum(1 for r in refs if r is None or not key_numbers(str(r)))
    if without * 2 > len(refs):
        return [f"numeric grading where {without} of {len(refs)} references have no number: those rows are skipped, "
                "so the model learns from part of the data only"]
    return []


@register_check("abstentions")
def _abstentions(ctx: CheckContext) -> list[str]:
    flat = [g for gs in ctx.grades for g in gs]
    errors = [g.error for g in flat if g.error]
    out = []
    if errors:
        out.append(f"{len(errors)} of {len(flat)} samples failed to grade, e.g.: {errors[0][:160]}")
    abstained = sum(g.score is None and not g.error for g in flat)
    if abstained * 5 > len(flat):
        out.append(f"the grader abstained on {abstained} of {len(flat)} samples; those give GRPO no signal")
    return out


@register_check("flat_groups")
def _flat_groups(ctx: CheckContext) -> list[str]:
    groups = [[g.score for g in gs] for gs in ctx.grades if len(gs) > 1]
    flat = sum(1 for s in groups if len(set(s)) == 1 and None not in s)
    if groups and flat * 4 > len(groups):
        return [f"{flat} of {len(groups)} groups got one score for every sample: GRPO learns nothing from them "
                "(advantages are zero); a finer-grained grader helps"]
    return []


@register_check("unchecked_length")
def _unchecked_length(ctx: CheckContext) -> list[str]:
    if not ctx.spec:
        return []
    kinds = {s.get("type") for s in ctx.leaves()}
    if not kinds & {"length", "overlong", "soft_overlong", "repetition"}:
        return ["nothing checks length or repetition: what no grader checks is free for the model to change; "
                "add overlong/repetition penalties or watch length on the run page"]
    return []
