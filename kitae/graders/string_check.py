"""All-or-nothing checks: OpenAI's ``string_check`` and kitae's ``format`` (the hosted RFT grader guide's string/format checks).

``string_check`` (OpenAI schema, exact semantics)::

    {type: string_check, operation: eq | ne | like | ilike, input: "{{sample.output_text}}",
     reference: "{{item.reference_answer}}"}

eq/ne compare exactly; like = input contains reference; ilike = the same, ignoring case. ``neq``, a common
spelling of "not equal" that OpenAI's schema does not have, is read as ``ne``.

``format``, one ``check`` per grader::

    {type: format, check: json}                              output parses as JSON (a ```json fence is allowed)
    {type: format, check: json_schema, schema: {...}}       ... and validates against the JSON Schema
    {type: format, check: regex, pattern: "^\\d+$"}          re.search (full_match: true for the whole text)
    {type: format, check: labels, labels: [yes, no]}        output is one of the labels
    {type: format, check: contains}                          output contains item.reference_answer
    {type: format, check: equals}                            output equals item.reference_answer

``equals``, ``contains`` and ``labels`` compare NFKC-normalized, stripped text; ``ignore_case: true`` also
casefolds (and makes ``regex`` case-insensitive). Scores are 1.0 or 0.0; the reason says why a check failed.

A contains check (``string_check`` ``like``/``ilike``, ``format`` ``contains``) is earned by echoing a prompt
that holds the expected text ("Which is larger, 7 or 12?" repeated back contains ``12``). ``ignore_prompt_echo:
true`` does not count an occurrence copied from the row's prompt with the word before or after it (``7 or
12``), see :mod:`kitae.graders.echo`; the default (false) counts every occurrence, as OpenAI's grader does.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Any, Literal

from kitae.errors import ConfigError
from kitae.graders.base import Grade, Item
from kitae.chat import prompt_of
from kitae.graders.echo import found_outside_echo
from kitae.graders.pair import DEFAULT_INPUT, PairGrader, PairSpec
from kitae.graders.spec import read_spec, register_grader
from kitae.graders.template import Template, as_text, output_json

OPERATIONS = {
    "eq": lambda a, b: a == b,
    "ne": lambda a, b: a != b,
    "like": lambda a, b: b in a,
    "ilike": lambda a, b: b.lower() in a.lower(),
}
OPERATION_ALIASES = {"neq": "ne"}


CONTAINS = ("like", "ilike")
ECHO_FIX = "remove ignore_prompt_echo or make it a contains check"


@dataclass
class StringCheckSpec(PairSpec):
    operation: Literal["eq", "ne", "like", "ilike", "neq"]  # neq: read as ne
    ignore_prompt_echo: bool = False  # like/ilike: an occurrence copied from the prompt does not count

    def validate(self, path: str) -> None:
        if self.ignore_prompt_echo and self.operation not in CONTAINS:
            raise ConfigError(f"{path}.ignore_prompt_echo", f"applies only to operation like or ilike (contains), "
                              f"not {self.operation}; {ECHO_FIX}")


@register_grader("string_check")
class StringCheckGrader(PairGrader):
    """OpenAI string_check: eq, ne, like (contains), ilike (contains, any case) -> 1 or 0."""

    def __init__(self, operation: str, ignore_prompt_echo: bool = False, **templates: Any):
        super().__init__(**templates)
        self.operation, self.ignore_prompt_echo = operation, ignore_prompt_echo

    @classmethod
    def from_spec(cls, spec: dict, path: str) -> "StringCheckGrader":
        s = read_spec(StringCheckSpec, spec, path)
        return cls(operation=OPERATION_ALIASES.get(s.operation, s.operation),
                   ignore_prompt_echo=s.ignore_prompt_echo, **s.templates())

    def score_item(self, item: Item, text: str, reference: Any) -> Grade:
        if not self.ignore_prompt_echo:
            return self.score(text, reference)
        expected, prompt = as_text(reference), prompt_of(item)
        if self.operation == "ilike":
            text, expected, prompt = text.lower(), expected.lower(), prompt.lower()
        passed = found_outside_echo(text, expected, prompt)
        why = "found only copied from the prompt" if expected in text else "failed"
        return Grade(score=float(passed), reason=None if passed else f"{self.operation} {why}")

    def score(self, text: str, reference: Any) -> Grade:
        passed = OPERATIONS[self.operation](text, as_text(reference))
        return Grade(score=float(passed), reason=None if passed else f"{self.operation} failed")


# ---- format -------------------------------------------------------------------------------------
Check = Literal["json", "json_schema", "regex", "labels", "contains", "equals"]
FIELD_OWNERS = {"schema": ("json_schema",), "pattern": ("regex",), "full_match": ("regex",), "labels": ("labels",),
                "reference": ("contains", "equals")}
NEEDED = {"json_schema": "schema", "regex": "pattern", "labels": "labels"}


@dataclass
class FormatSpec:
    check: Check
    schema: dict[str, Any] | None = None  # check: json_schema
    pattern: str | None = None  # check: regex
    full_match: bool | None = None  # check: regex (default false)
    labels: list[str] | None = None  # check: labels
    ignore_case: bool = False
    input: Template = Template(DEFAULT_INPUT)
    reference: Template | None = None  # check: contains or equals (default {{item.reference_answer}})
    ignore_prompt_echo: bool = False  # check: contains: an occurrence copied from the prompt does not count

    def validate(self, path: str) -> None:
        if self.ignore_prompt_echo and self.check != "contains":
            raise ConfigError(f"{path}.ignore_prompt_echo", f"applies only to check: contains, "
                              f"not check: {self.check}; {ECHO_FIX}")
        for key, owner in FIELD_OWNERS.items():
            if getattr(self, key) is not None and self.check not in owner:
                raise ConfigError(f"{path}.{key}", f"belongs to check: {' or '.join(owner)}, not check: {self.check}")
        needed = NEEDED.get(self.check)
        if needed and getattr(self, needed) is None:
            raise ConfigError(f"{path}.{needed}", "missing (required)")
        if self.schema is not None:
            _check_schema(self.schema, f"{path}.schema")
        if self.pattern is not None:
            _check_pattern(self.pattern, f"{path}.pattern")
        if self.labels is not None and not self.labels:
            raise ConfigError(f"{path}.labels", "needs at least one label")


@register_grader("format")
class FormatGrader(PairGrader):
    """Format check: json, json_schema, regex, labels, contains, equals -> 1 or 0."""

    def __init__(self, check: str, schema: dict | None = None, pattern: str | None = None,
                 labels: list[str] | None = None, ignore_case: bool = False, full_match: bool = False,
                 ignore_prompt_echo: bool = False, **templates: Any):
        templates.setdefault("reference", "{{item.reference_answer}}" if check in ("contains", "equals") else None)
        super().__init__(**templates)
        self.check, self.schema, self.ignore_case = check, schema, ignore_case
        self.regex = re.compile(pattern, re.I if ignore_case else 0) if pattern is not None else None
        self.full_match, self.ignore_prompt_echo = full_match, ignore_prompt_echo
        self.labels = {self._norm(label) for label in labels or []}
        self.validator = _schema_validator(schema) if schema is not None else None

    @classmethod
    def from_spec(cls, spec: dict, path: str) -> "FormatGrader":
        s = read_spec(FormatSpec, spec, path)
        templates = {"input": s.input} if s.reference is None else {"input": s.input, "reference": s.reference}
        return cls(s.check, schema=s.schema, pattern=s.pattern, labels=s.labels, ignore_case=s.ignore_case,
                   full_match=bool(s.full_match), ignore_prompt_echo=s.ignore_prompt_echo, **templates)

    def _norm(self, text: str) -> str:
        text = unicodedata.normalize("NFKC", str(text)).strip()
        return text.casefold() if self.ignore_case else text

    def score_item(self, item: Item, text: str, reference: Any) -> Grade:
        if not self.ignore_prompt_echo:
            return self.score(text, reference)
        expected, text = self._norm(as_text(reference)), self._norm(text)
        ok = found_outside_echo(text, expected, self._norm(prompt_of(item)))
        why = "reference found only copied from the prompt" if expected in text else "reference not found in output"
        return Grade(score=float(ok), reason=None if ok else why)

    def score(self, text: str, reference: Any) -> Grade:
        ok, why = getattr(self, f"_check_{self.check}")(text, reference)
        return Grade(score=float(ok), reason=None if ok else why)

    def _check_json(self, text: str, _ref: Any) -> tuple[bool, str]:
        try:
            output_json({"output_text": text})
        except Exception as exc:  # TemplateError with the parser's message
            return False, str(exc)
        return True, ""

    def _check_json_schema(self, text: str, _ref: Any) -> tuple[bool, str]:
        try:
            value = output_json({"output_text": text})
        except Exception as exc:
            return False, str(exc)
        error = next(iter(self.validator.iter_errors(value)), None)
        return error is None, f"schema: {error.message}" if error is not None else ""

    def _check_regex(self, text: str, _ref: Any) -> tuple[bool, str]:
        hit = self.regex.fullmatch(text.strip()) if self.full_match else self.regex.search(text)
        return hit is not None, f"no match for /{self.regex.pattern}/"

    def _check_labels(self, text: str, _ref: Any) -> tuple[bool, str]:
        return self._norm(text) in self.labels, f"{text.strip()[:40]!r} is not one of the labels"

    def _check_contains(self, text: str, ref: Any) -> tuple[bool, str]:
        return self._norm(as_text(ref)) in self._norm(text), "reference not found in output"

    def _check_equals(self, text: str, ref: Any) -> tuple[bool, str]:
        return self._norm(text) == self._norm(as_text(ref)), "output differs from reference"


def _check_schema(schema: dict, path: str) -> None:
    import jsonschema

    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ConfigError(path, f"not a valid JSON Schema: {exc.message}") from None


def _schema_validator(schema: dict):
    import jsonschema

    return jsonschema.validators.validator_for(schema)(schema)


def _check_pattern(pattern: str, path: str) -> None:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ConfigError(path, f"not a valid regular expression: {exc}") from None
