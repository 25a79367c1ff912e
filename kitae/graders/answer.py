"""Final-answer graders: ``answer`` (the bundled short-answer task) and ``math`` (math-verify).

``answer``: 1.0 when :func:`kitae.graders.answer_match.answers_match` accepts the completion's final answer for the
reference (numbers exactly, text normalized), else 0.0. The bundled arithmetic task's correctness reward.
A numeric reference is matched by the completion's last number. A text reference is matched by the whole
normalized completion or by any one word of it (markdown emphasis and punctuation stripped: ``**Paris**,``) (``text_match: any_word``, the default: "Paris is the
capital" passes), so a list of candidates ("London Paris Berlin", "Lyon or Paris") passes too;
``text_match: whole`` accepts only the whole completion, normalized (NFKC, casefold, surrounding
punctuation, "the answer is"-style prefixes and polite endings stripped: "The capital is Paris." still
passes). Numeric references are unaffected.

``math``: ``math_verify.verify(gold, answer)``, gold first (the comparison is asymmetric on purpose).
math-verify's own timeouts use signals and fail off the main thread, so they are disabled and the
comparison runs in a worker process (see :mod:`kitae.sandbox.worker`) with a wall-clock ``timeout``
(default 5 s); a timeout or parse failure abstains with an error instead of hanging or crashing the caller.
A bare reference with a decimal comma (``1,22``, ``-0,5``: one comma, one or two digits after it) is read
as math-verify reads that text, 1.22, not as the set {1, 22} that ``$1,22$`` would be; ``1,234`` stays 1234
and ``1,2,3`` a set. A bare reference grouped by spaces (``1 000``, ``12 500``, ``1 234 567.5``: groups of three
digits) is read as math-verify reads that text too, 12500, not as ``$12 500$`` (512).

    {type: math}                             # sample vs item.reference_answer
    {type: math, reference: "{{item.solution}}", timeout: 10}

Several boxed answers earn nothing: math-verify reads ``\boxed{3} \boxed{15}`` as the set {3, 15}, which is
not 15, and ``$3$ or $15$`` gives no match either; a plain-text answer is read by its last number, so a
final answer written after the working (``6+9=15``) is the answer.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from typing import Any, Literal

from kitae.config import setting
from kitae.graders.answer_match import as_number, answers_match, normalize_answer
from kitae.graders.base import Grade, Item, Sample
from kitae.graders.pair import PairGrader, PairSpec
from kitae.graders.spec import read_spec, register_grader
from kitae.graders.template import as_text
from kitae.sandbox.worker import SandboxError, Worker


_DECIMAL_COMMA = re.compile(r"\s*[-−]?\d+,\d{1,2}\s*")  # 1,22 and 12,5; not 1,234 nor 1,2,3
_GROUP_SPACE = "[ \u00a0\u2009\u202f]"  # a space, no-break, thin or narrow no-break space between digit groups
_SPACE_GROUPS = re.compile(rf"\s*[-−]?\d{{1,3}}(?:{_GROUP_SPACE}\d{{3}})+(?:\.\d+)?\s*")  # 1 000, 12 500


def _math_reference(text: str) -> str:
    """A bare number as math-verify reads the bare text, not as it reads it wrapped in $...$ (how the worker
    parses a bare reference): ``1,22`` -> ``1.22`` (a set once wrapped), ``12 500`` -> ``12500`` (a product or
    a sum once wrapped: ``$12 500$`` is 512)."""
    if _DECIMAL_COMMA.fullmatch(text):
        return text.replace(",", ".")
    if _SPACE_GROUPS.fullmatch(text):
        return re.sub(_GROUP_SPACE, "", text)
    return text


@dataclass
class AnswerSpec(PairSpec):
    text_match: Literal["any_word", "whole"] = "any_word"  # whole: a text reference must be the whole answer


@register_grader("answer")
class AnswerGrader(PairGrader):
    """Final-answer match of the short-answer task (kitae.graders.answer_match.answers_match) -> 1 or 0."""

    def __init__(self, text_match: str = "any_word", **templates: Any):
        super().__init__(**templates)
        self.text_match = text_match

    @classmethod
    def from_spec(cls, spec: dict, path: str) -> "AnswerGrader":
        s = read_spec(AnswerSpec, spec, path)
        return cls(s.text_match, **s.templates())

    def score(self, text: str, reference: Any) -> Grade:
        reference = as_text(reference)
        ok = answers_match(text, reference)
        if ok and self.text_match == "whole" and as_number(reference) is None:
            ok = normalize_answer(text) == normalize_answer(reference)
            if not ok:
                return Grade(score=0.0, reason=f"{reference!r} is one word of the answer, not all of it "
                                               "(text_match: whole)")
        return Grade(score=float(ok), reason=None if ok else f"final answer is not {reference!r}")


@dataclass
class MathSpec(PairSpec):
    timeout: float = setting(5.0, minimum=0.1)  # seconds per comparison


@register_grader("math")
class MathGrader(PairGrader):
    """math-verify equivalence, gold first, with a process-based timeout -> 1 or 0."""

    def __init__(self, timeout: float = 5.0, **templates: Any):
        super().__init__(**templates)
        self.worker = Worker("math", timeout_s=timeout, memory_mb=None, block_network=False)

    @classmethod
    def from_spec(cls, spec: dict, path: str) -> "MathGrader":
        s = read_spec(MathSpec, spec, path)
        return cls(timeout=s.timeout, **s.templates())

    def score(self, text: str, reference: Any) -> Grade:
        try:
            result = self.worker.call({"gold": _math_reference(as_text(reference)), "answer": text})
        except SandboxError as exc:
            return Grade.abstain(error=f"math-verify: {exc}")
        if result["gold"] is None:
            return Grade.abstain(error=f"math-verify could not parse the reference {as_text(reference)[:60]!r}")
        if result["match"]:
            return Grade(score=1.0)
        reason = "no answer found" if result["answer"] is None else f"answer {result['answer']} != {result['gold']}"
        return Grade(score=0.0, reason=reason)

    async def agrade_sample(self, item: Item, sample: Sample) -> Grade:
        return await asyncio.to_thread(self.grade_sample, item, sample)

    def close(self) -> None:
        self.worker.close()
