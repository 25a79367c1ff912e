"""Graders: score every sample of a group against the item (the hosted RFT grader guide, OpenAI's grader schema).

Build one by name or from a spec, grade a group::

    from kitae.graders import build_grader
    grader = build_grader({"type": "numeric"})          # or a .yaml/.json path, or inline YAML
    grades = grader.grade_group(item, samples)          # one Grade(score, sub_scores, reason, error) each

Types (``kitae grade --help`` and examples/graders/README.md show specs for each):

    string_check, text_similarity, python, multi     OpenAI's schema, loaded unchanged
    numeric, format, math, answer                     the hosted RFT grader guide's rule-based graders and the task's answer check
    code                                              the completion's program on test cases, sandboxed (Kimi k1.5)
    endpoint                                          your HTTP endpoint over the whole trajectory (the hosted RFT service's agents)
    weighted, gate                                    renormalizing mixes and "counts only if ... passes"
    template, repetition, overlong, ...               reward graders (kitae.rewards), registered lazily

Adding a grader type
--------------------
Subclass :class:`Grader`, register it with :func:`register_grader`, write its spec fields as a dataclass,
and read them in the classmethod ``from_spec(spec, path)`` with :func:`read_spec`, which is
:func:`kitae.config.from_dict`, the reader of every kitae config: it types each field, fills defaults, checks
bounds (``setting``) and choices (``Literal``), and rejects unknown keys with a did-you-mean (every error names
the key path, e.g. ``grader.graders.num.tolerance: expected a number, got 'one'``)::

    from dataclasses import dataclass
    from kitae.config import setting
    from kitae.graders import Grade, Grader, read_spec, register_grader

    @dataclass
    class MaxCharsSpec:
        max_chars: int = setting(2000, minimum=1)

    @register_grader("max_chars")
    class MaxCharsGrader(Grader):
        def __init__(self, max_chars: int = 2000):
            self.max_chars = max_chars

        @classmethod
        def from_spec(cls, spec: dict, path: str) -> "MaxCharsGrader":
            return cls(read_spec(MaxCharsSpec, spec, path).max_chars)

        def grade_sample(self, item, sample) -> Grade:
            return Grade(score=float(len(sample["output_text"]) <= self.max_chars))

A field of type :class:`Template` is a checked ``{{item.X}}`` template and one of type :class:`SubGrader` a
nested spec, built into a grader; a ``validate(path)`` method on the dataclass checks what involves several
fields. ``type`` and ``name`` are handled by :func:`build_grader`. A class without fields needs no
``from_spec`` (the default accepts only ``type``/``name``). Graders that compare the completion with the
reference subclass :class:`PairGrader`, whose spec fields :class:`PairSpec` (``input``, ``reference``) a
grader's own spec extends.

The grader types of kitae's packages above this one (kitae.judge, kitae.rewards) are registered lazily, by
``"module:Class"`` in kitae/graders/spec.py, and imported when a spec first names one: this package never
imports the packages that build on it (docs/architecture.md).

Other entry points: :func:`grader_from_callable` (a TRL reward function as a Grader),
:func:`as_reward_function` (a Grader as a TRL reward function), :func:`validate` (agreement with human
scores, used by ``kitae grader validate``).
"""

from __future__ import annotations

from kitae.graders.adapters import as_reward_function, grader_from_callable
from kitae.graders.base import Grade, Grader, Item, Sample
from kitae.graders.pair import PairGrader, PairSpec
from kitae.graders.spec import (
    GRADERS,
    SubGrader,
    build_grader,
    load_spec,
    read_spec,
    register_grader,
)
from kitae.graders.template import Template, TemplateError

__all__ = [
    "GRADERS",
    "Grade",
    "Grader",
    "Item",
    "PairGrader",
    "PairSpec",
    "Sample",
    "SubGrader",
    "Template",
    "TemplateError",
    "as_reward_function",
    "build_grader",
    "grader_from_callable",
    "load_spec",
    "read_spec",
    "register_grader",
    "validate",
]


def validate(*args, **kwargs):
    """Agreement of a grader with human scores; see :func:`kitae.graders.agreement.validate`."""
    from kitae.graders.agreement import validate as _validate

    return _validate(*args, **kwargs)
