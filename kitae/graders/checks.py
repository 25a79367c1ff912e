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
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from kitae.errors import ConfigError
from kitae.graders.base import Grade
from kitae.graders.pair import PairGrader
from kitae.graders.spec import SpecReader, register_grader
from kitae.graders.template import as_text, output_json

OPERATIONS = {
    "eq": lambda a, b: a == b,
    "ne": lambda a, b: a != b,
    "like": lambda a, b: b in a,
    "ilike": lambda a, b: b.lower() in a.lower(),
}
OPERATION_ALIASES = {"neq": "ne"}


@register_grader("string_check")
class StringCheckGrader(PairGrader):
    """OpenAI string_check: eq, ne, like (contains), ilike (contains, any case) -> 1 or 0."""

    def __init__(self, operation: str, **templates: Any):
        super().__init__(**templates)
        self.operation = operation

    @classmethod
    def from_spec(cls, spec: dict, path: str) -> "StringCheckGrader":
        r = SpecReader(spec, path)
        operation = r.choice("operation", [*OPERATIONS, *OPERATION_ALIASES])
        grader = cls(operation=OPERATION_ALIASES.get(operation, operation), **cls.read_templates(r))
        r.finish()
        return grader

    def score(self, text: str, reference: Any) -> Grade:
        passed = OPERATIONS[self.operation](text, as_text(reference))
        return Grade(score=float(passed), reason=None if passed else f"{self.operation} failed")


# ---- format -------------------------------------------------------------------------------------
CHECKS = ["json", "json_schema", "regex", "labels", "contains", "equals"]
FIELD_OWNERS = {"schema": ("json_schema",), "pattern": ("regex",), "full_match": ("regex",), "labels": ("labels",),
                "reference": ("contains", "equals")}


@register_grader("format")
class FormatGrader(PairGrader):
    """Format check: json, json_schema, regex, labels, contains, equals -> 1 or 0."""

    def __init__(self, check: str, schema: dict | None = None, pattern: str | None = None,
                 labels: list[str] | None = None, ignore_case: bool = False, full_match: bool = False,
                 **templates: Any):
        templates.setdefault("reference", "{{item.reference_answer}}" if check in ("contains", "equals") else None)
        super().__init__(**templates)
        self.check, self.schema, self.ignore_case = check, schema, ignore_case
        self.regex = re.compile(pattern, re.I if ignore_case else 0) if pattern is not None else None
        self.full_match = full_match
        self.labels = {self._norm(label) for label in labels or []}
        self.validator = _schema_validator(schema) if schema is not None else None

    @classmethod
    def from_spec(cls, spec: dict, path: str) -> "FormatGrader":
        r = SpecReader(spec, path)
        check = r.choice("check", CHECKS)
        kwargs: dict[str, Any] = {"ignore_case": r.flag("ignore_case", False)}
        if check == "json_schema":
            kwargs["schema"] = _checked_schema(r.mapping("schema"), r.at("schema"))
        if check == "regex":
            kwargs["pattern"] = _checked_pattern(r.text("pattern"), r.at("pattern"))
            kwargs["full_match"] = r.flag("full_match", False)
        if check == "labels":
            kwargs["labels"] = _checked_labels(r.items("labels"), r.at("labels"))
        grader = cls(check=check, **kwargs, **cls.read_templates(r, reference=check in ("contains", "equals")))
        for key, owner in FIELD_OWNERS.items():
            if r.has(key) and check not in owner:
                raise ConfigError(r.at(key), f"belongs to check: {' or '.join(owner)}, not check: {check}")
        r.finish()
        return grader

    def _norm(self, text: str) -> str:
        text = unicodedata.normalize("NFKC", str(text)).strip()
        return text.casefold() if self.ignore_case else text

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


def _checked_schema(schema: dict, path: str) -> dict:
    import jsonschema

    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ConfigError(path, f"not a valid JSON Schema: {exc.message}") from None
    return schema


def _schema_validator(schema: dict):
    import jsonschema

    return jsonschema.validators.validator_for(schema)(schema)


def _checked_pattern(pattern: str, path: str) -> str:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ConfigError(path, f"not a valid regular expression: {exc}") from None
    return pattern


def _checked_labels(labels: list, path: str) -> list[str]:
    if not labels:
        raise ConfigError(path, "needs at least one label")
    for i, label in enumerate(labels):
        if not isinstance(label, (str, int, float)) or isinstance(label, bool):
            raise ConfigError(f"{path}[{i}]", f"expected a string, got {label!r}")
    return [str(label) for label in labels]


