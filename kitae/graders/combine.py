"""Graders made of graders: OpenAI's ``multi``, the hosted RFT grader guide's renormalizing ``weighted`` mix, and ``gate``.

All three grade the whole group with every part (concurrently) and combine per sample; they need the group
when any part does. Each part's score is kept in ``sub_scores`` under its name (nested parts as
``name.sub``), so every component is logged.

``weighted`` (the hosted RFT grader guide: "judge 50% + numeric 50%; when the reference has no numbers, the judge alone")::

    type: weighted
    graders:
      judge: {type: ..., weight: 0.5}
      num:   {type: numeric, weight: 0.5}

score = Σ wᵢ·sᵢ / Σ wᵢ over the parts that scored (an abstaining part drops out and the other weights
renormalize); None when no weighted part scored. ``weight`` defaults to 1; weight 0 logs a part without
counting it.

``gate`` (a part counts only if another passes)::

    {type: gate, gate: {type: format, check: json}, grader: {type: numeric}, threshold: 1.0, fail_score: 0.0}

the grader's score when the gate scores >= threshold, else ``fail_score`` (null: abstain); None when the
gate abstains.

``multi`` (OpenAI)::

    {type: multi, graders: {sim: {...}, num: {...}}, calculate_output: "0.3 * sim + 0.7 * num"}

The formula is parsed safely (:mod:`kitae.graders.formula`); a part that the formula uses abstaining makes
the sample abstain, and a math error (division by zero) becomes its error.
"""

from __future__ import annotations

import asyncio
from kitae.errors import ConfigError
from kitae.graders.base import Grade, Grader, Item, Sample, run_sync
from kitae.graders.formula import FormulaError, parse_formula
from kitae.graders.spec import SpecReader, build_grader, register_grader


class CompositeGrader(Grader):
    """Runs named parts over the group; subclasses combine one sample's part grades."""

    def __init__(self, parts: dict[str, Grader]):
        self.parts = parts
        self.needs_group = any(p.needs_group for p in parts.values())

    def grade_samples(self, item: Item, samples: list[Sample]) -> list[Grade]:
        return run_sync(self.agrade_samples(item, samples))

    async def agrade_samples(self, item: Item, samples: list[Sample]) -> list[Grade]:
        results = await asyncio.gather(*(p.agrade_group(item, samples) for p in self.parts.values()))
        per_part = dict(zip(self.parts, results))
        return [self.combine({name: grades[i] for name, grades in per_part.items()}) for i in range(len(samples))]

    def combine(self, grades: dict[str, Grade]) -> Grade:
        raise NotImplementedError

    def close(self) -> None:
        for part in self.parts.values():
            part.close()

    def counters(self) -> dict[str, float]:
        """Every part's counters, as ``part/counter``."""
        return {f"{name}/{key}": value for name, part in self.parts.items() for key, value in part.counters().items()}


def read_parts(r: SpecReader, key: str = "graders",
               extra: tuple[str, ...] = ()) -> tuple[dict[str, Grader], dict[str, dict]]:
    """Build the map name -> sub-spec; ``extra`` keys (e.g. weight) are taken out of each sub-spec first."""
    specs = r.mapping(key)
    if not specs:
        raise ConfigError(r.at(key), "needs at least one grader")
    parts, taken = {}, {}
    for name, spec in specs.items():
        path = f"{r.at(key)}.{name}"
        if not isinstance(spec, dict):
            raise ConfigError(path, f"expected a grader spec (a mapping with a 'type'), got {spec!r}")
        taken[name] = {k: spec[k] for k in extra if k in spec}
        inner = {k: v for k, v in spec.items() if k not in extra}
        inner.setdefault("name", str(name))
        parts[str(name)] = build_grader(inner, path)
    return parts, taken


def part_sub_scores(grades: dict[str, Grade]) -> dict[str, float | None]:
    sub: dict[str, float | None] = {}
    for name, grade in grades.items():
        sub[name] = grade.score
        sub.update({f"{name}.{k}": v for k, v in grade.sub_scores.items()})
    return sub


def part_notes(grades: dict[str, Grade], field: str) -> str | None:
    notes = [f"{name}: {getattr(g, field)}" for name, g in grades.items() if getattr(g, field)]
    return "; ".join(notes) or None


@register_grader("weighted")
class WeightedGrader(CompositeGrader):
    """Weighted mean of parts; abstaining parts drop out and the weights renormalize."""

    def __init__(self, parts: dict[str, Grader], weights: dict[str, float]):
        super().__init__(parts)
        self.weights = weights

    @classmethod
    def from_spec(cls, spec: dict, path: str) -> "WeightedGrader":
        r = SpecReader(spec, path)
        parts, taken = read_parts(r, extra=("weight",))
        weights = {}
        for name, extra in taken.items():
            sub = SpecReader(extra, f"{r.at('graders')}.{name}")
            weights[name] = sub.number("weight", 1.0, minimum=0)
        if not any(weights.values()):
            raise ConfigError(r.at("graders"), "every weight is 0; give at least one part a positive weight")
        r.finish()
        return cls(parts, weights)

    def combine(self, grades: dict[str, Grade]) -> Grade:
        counted = {n: g.score for n, g in grades.items() if g.score is not None and self.weights[n] > 0}
        total = sum(self.weights[n] for n in counted)
        score = sum(self.weights[n] * s for n, s in counted.items()) / total if counted else None
        error = part_notes(grades, "error") if score is None else None
        return Grade(score=score, sub_scores=part_sub_scores(grades), reason=part_notes(grades, "reason"), error=error)


@register_grader("gate")
class GateGrader(CompositeGrader):
    """A grader that counts only when a gate grader passes (else fail_score)."""

    def __init__(self, gate: Grader, grader: Grader, threshold: float = 1.0, fail_score: float | None = 0.0):
        super().__init__({"gate": gate, "grader": grader})
        self.threshold, self.fail_score = threshold, fail_score

    @classmethod
    def from_spec(cls, spec: dict, path: str) -> "GateGrader":
        r = SpecReader(spec, path)
        grader = cls(r.grader("gate"), r.grader("grader"), threshold=r.number("threshold", 1.0),
                     fail_score=r.number("fail_score", 0.0, nullable=True))
        r.finish()
        return grader

    def combine(self, grades: dict[str, Grade]) -> Grade:
        gate, inner = grades["gate"], grades["grader"]
        sub, reason = part_sub_scores(grades), part_notes(grades, "reason")
        if gate.score is None:
            return Grade(score=None, sub_scores=sub, reason=reason, error=gate.error or "gate abstained")
        if gate.score < self.threshold:
            why = f"gate failed ({gate.score:g} < {self.threshold:g})" + (f": {gate.reason}" if gate.reason else "")
            return Grade(score=self.fail_score, sub_scores=sub, reason=why)
        return Grade(score=inner.score, sub_scores=sub, reason=reason, error=inner.error)


@register_grader("multi")
class MultiGrader(CompositeGrader):
    """OpenAI multi: parts combined by a calculate_output formula (parsed safely)."""

    def __init__(self, parts: dict[str, Grader], formula: str, path: str = "calculate_output"):
        super().__init__(parts)
        self.formula = parse_formula(formula, set(parts), path)

    @classmethod
    def from_spec(cls, spec: dict, path: str) -> "MultiGrader":
        r = SpecReader(spec, path)
        parts, _ = read_parts(r)
        grader = cls(parts, r.text("calculate_output"), r.at("calculate_output"))
        r.finish()
        return grader

    def combine(self, grades: dict[str, Grade]) -> Grade:
        sub, reason = part_sub_scores(grades), part_notes(grades, "reason")
        missing = sorted(n for n in self.formula.names if grades[n].score is None)
        if missing:
            errors = part_notes({n: grades[n] for n in missing}, "error")
            return Grade(score=None, sub_scores=sub, reason=reason,
                         error=errors or f"abstained: {', '.join(missing)}")
        try:
            score = self.formula.evaluate({n: g.score for n, g in grades.items() if g.score is not None})
        except FormulaError as exc:
            return Grade(score=None, sub_scores=sub, reason=reason, error=str(exc))
        return Grade(score=score, sub_scores=sub, reason=reason)


