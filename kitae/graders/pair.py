"""The shape most rule-based graders share: compare a rendered ``input`` with a rendered ``reference``.

Defaults follow the issue: ``input: "{{sample.output_text}}"`` and ``reference: "{{item.reference_answer}}"``,
so ``{type: numeric}`` alone grades the completion against the row's reference answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kitae.graders.base import Grade, Grader, Item, Sample
from kitae.graders.template import Template, TemplateError

DEFAULT_INPUT = "{{sample.output_text}}"
DEFAULT_REFERENCE = "{{item.reference_answer}}"


@dataclass(kw_only=True)
class PairSpec:
    """The spec fields every pair grader has; a grader's own spec extends it (``NumericSpec(PairSpec)``)."""

    input: Template = Template(DEFAULT_INPUT)  # the text graded
    reference: Template = Template(DEFAULT_REFERENCE)  # what it is compared with

    def templates(self) -> dict[str, Template]:
        return {"input": self.input, "reference": self.reference}


class PairGrader(Grader):
    """Subclasses implement ``score(text, reference) -> Grade | float | None`` and read their own fields."""

    def __init__(self, input: Template | str = DEFAULT_INPUT, reference: Template | str | None = DEFAULT_REFERENCE):
        self.input = input if isinstance(input, Template) else Template(input)
        self.reference = reference if isinstance(reference, Template) or reference is None else Template(reference)

    def score(self, text: str, reference: Any) -> Grade | float | None:
        raise NotImplementedError

    def score_item(self, item: Item, text: str, reference: Any) -> Grade | float | None:
        """:meth:`score`, for a grader that also reads the row (the prompt, to see what an answer copied)."""
        return self.score(text, reference)

    def grade_sample(self, item: Item, sample: Sample) -> Grade:
        try:
            text = self.input.render(item, sample)
            reference = self.reference.value(item, sample) if self.reference is not None else None
        except TemplateError as exc:
            return Grade.abstain(error=str(exc))
        result = self.score_item(item, text, reference)
        return result if isinstance(result, Grade) else Grade(score=None if result is None else float(result))
