"""OpenAI grader templates: ``{{item.FIELD}}``, ``{{sample.output_text}}``, ``{{sample.output_json.FIELD}}``.

Paths may be nested, with list elements by index in OpenAI's brackets or as a dotted number:
``{{sample.output_tools[0].function.name}}``, ``{{item.meta.answers[-1]}}``, ``{{item.meta.answers.0}}``.
Departures from OpenAI, stated:

- ``{{sample.output_text}}`` is the completion *up to* the model's end-of-turn marker (``<|im_end|>``, or the
  sample's ``end_marker``: ``<|eot_id|>`` for Llama 3; rollouts keep the marker so the template reward can see it); ``{{sample.raw_text}}`` is the completion as generated.
- ``{{sample.output_json}}`` parses the output text (inside a ```json fence if there is one).
- ``{{sample.output_tools}}`` is the sample's ``output_tools`` field when it has one; otherwise the tool calls
  written in the text as ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (the Qwen/Hermes chat
  format), each as OpenAI gives them: ``{type: function, function: {name, arguments}}`` with ``arguments``
  a JSON string. A sample without tool calls has an empty list (so ``[0]`` makes it abstain).
- Any other sample field (``finish_reason``, ``completion_tokens``, ...) is readable too.

The template is checked when the spec is read (roots must be ``item`` or ``sample``; a spec field of type
:class:`Template` is built by :meth:`Template.from_config`); a path missing from a
particular row raises :class:`TemplateError` when rendering, which graders turn into an abstention.
A template that is a single placeholder renders to the value itself (a list stays a list); otherwise the
values are formatted into the text (non-strings as JSON).
"""

from __future__ import annotations

import json
import re
from typing import Any

from kitae.chat import sample_end, split_at_end
from kitae.config import short_repr
from kitae.errors import ConfigError, KitaeError
from kitae.registry import unknown_name_message

_PLACEHOLDER = re.compile(r"\{\{\s*([^{}]*?)\s*\}\}")
_NAME = re.compile(r"[^.\[\]\s]+")
_STEP = re.compile(r"\.([^.\[\]\s]+)|\[\s*(-?\d+)\s*\]")  # .field or [index]
_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)
ROOTS = ("item", "sample")
_FENCE = re.compile(r"```(?:json)?\s*\n(.*?)\n?```", re.S)


class TemplateError(KitaeError):
    """A template path that a row does not have (or output that is not JSON): the sample is not graded."""


class Template:
    """A checked template; ``render(item, sample)`` gives text, ``value(item, sample)`` the raw value."""

    def __init__(self, text: str, path: str = ""):
        self.text, self.path = text, path
        self.parts: list[str | FieldPath] = []  # literal text or a placeholder's path segments
        pos = 0
        for m in _PLACEHOLDER.finditer(text):
            self.parts.append(text[pos : m.start()])
            self.parts.append(_parse_path(m.group(1), path))
            pos = m.end()
        self.parts.append(text[pos:])
        self.parts = [p for p in self.parts if p != ""]
        if "{{" in _PLACEHOLDER.sub("", text):
            raise ConfigError(path, f"unclosed '{{{{' in template {text!r}")

    @classmethod
    def from_config(cls, value: Any, path: str) -> "Template":
        """A spec field that is a template (:func:`kitae.config.from_dict` calls this): a string, checked now."""
        if not isinstance(value, str):
            raise ConfigError(path, f"expected a string, got {short_repr(value)}")
        return cls(value, path)

    def __repr__(self) -> str:
        return f"Template({self.text!r})"

    @property
    def is_single(self) -> bool:
        return len(self.parts) == 1 and isinstance(self.parts[0], tuple)

    def value(self, item: dict, sample: dict) -> Any:
        if self.is_single:
            return lookup(self.parts[0], item, sample)
        return self.render(item, sample)

    def render(self, item: dict, sample: dict) -> str:
        return "".join(p if isinstance(p, str) else as_text(lookup(p, item, sample)) for p in self.parts)


FieldPath = tuple[str | int, ...]  # field names (str) and list indexes written [N] (int)


def _parse_path(expr: str, where: str) -> FieldPath:
    """``sample.output_tools[0].function.name`` -> ("sample", "output_tools", 0, "function", "name")."""
    head = _NAME.match(expr)
    segments: list[str | int] = [head.group()] if head else []
    pos = head.end() if head else 0
    while head and pos < len(expr) and (step := _STEP.match(expr, pos)):
        segments.append(step.group(1) if step.group(1) is not None else int(step.group(2)))
        pos = step.end()
    if not head or pos != len(expr):
        raise ConfigError(where, f"bad template path {{{{{expr}}}}}: write {{{{item.FIELD}}}}, {{{{sample.FIELD}}}} "
                          "or a nested path such as {{sample.output_tools[0].function.name}}")
    if segments[0] not in ROOTS:
        unknown = unknown_name_message("template root", str(segments[0]), list(ROOTS))
        raise ConfigError(where, f"template {{{{{expr}}}}}: {unknown}")
    if len(segments) == 1 or not isinstance(segments[1], str):
        raise ConfigError(where, f"template {{{{{expr}}}}} names no field (e.g. {{{{{segments[0]}.reference_answer}}}})")
    return tuple(segments)


def lookup(segments: FieldPath, item: dict, sample: dict) -> Any:
    """The value at ``item.a.b`` / ``sample.output_json.x`` / ``item.a[0]``; TemplateError names what is missing."""
    root, first = segments[0], str(segments[1])
    if root == "item":
        value, rest, shown = item, segments[1:], "item"
    else:
        value, rest, shown = sample_field(sample, first), segments[2:], f"sample.{first}"
    for seg in rest:
        value = _step(value, seg, shown)
        shown += f"[{seg}]" if isinstance(seg, int) else f".{seg}"
    return value


def sample_field(sample: dict, name: str) -> Any:
    if name == "output_text":
        return output_text(sample)
    if name == "raw_text":
        return sample.get("output_text", "")
    if name == "output_json":
        return output_json(sample)
    if name == "output_tools" and "output_tools" not in sample:
        return output_tools(sample)
    return _step(sample, name, "sample")


def output_text(sample: dict) -> str:
    """The completion's content, up to the end-of-turn marker (the model's, :func:`kitae.chat.sample_end`)."""
    return split_at_end(str(sample.get("output_text", "")), sample_end(sample))[0]


def output_json(sample: dict) -> Any:
    if "output_json" in sample:
        return sample["output_json"]
    text = output_text(sample).strip()
    fenced = _FENCE.search(text)
    try:
        return json.loads(fenced.group(1) if fenced else text)
    except ValueError as exc:
        raise TemplateError(f"sample output is not JSON ({exc})") from None


def sample_with_answer(sample: dict, leave_out: tuple[str, ...] = ()) -> dict[str, Any]:
    """The sample as code outside kitae gets it (a python grader's sandbox, an endpoint grader): without the fields
    in ``leave_out``, ``output_text`` up to the end marker, ``output_json`` the one the sample kept (unless left
    out) or parsed from the text, null when it is not JSON."""
    out = {k: v for k, v in sample.items() if k not in leave_out}
    out["output_text"] = output_text(sample)
    try:
        out["output_json"] = output_json(out)
    except TemplateError:
        out["output_json"] = None
    return out


def output_tools(sample: dict) -> list[dict[str, Any]]:
    """The ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks of the output, as OpenAI's tool calls."""
    calls = []
    for i, block in enumerate(_TOOL_CALL.findall(output_text(sample))):
        try:
            call = json.loads(block)
        except ValueError as exc:
            raise TemplateError(f"sample.output_tools[{i}]: <tool_call> is not JSON ({exc})") from None
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            raise TemplateError(f"sample.output_tools[{i}]: <tool_call> has no \"name\": {block[:80]!r}")
        arguments = call.get("arguments", {})
        arguments = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
        calls.append({"type": "function", "function": {"name": call["name"], "arguments": arguments}})
    return calls


def _step(value: Any, seg: str | int, shown: str) -> Any:
    if isinstance(seg, int):
        if not isinstance(value, list):
            raise TemplateError(f"{{{{{shown}[{seg}]}}}}: {shown} is a {type(value).__name__}, not a list")
        if -len(value) <= seg < len(value):
            return value[seg]
        raise TemplateError(f"{{{{{shown}[{seg}]}}}}: index {seg} out of range (length {len(value)})")
    if isinstance(value, dict):
        if seg in value:
            return value[seg]
        keys = ", ".join(map(str, list(value)[:12])) or "none"
        raise TemplateError(f"{{{{{shown}.{seg}}}}}: no field '{seg}' (fields: {keys})")
    if isinstance(value, list) and seg.lstrip("-").isdigit():
        index = int(seg)
        if -len(value) <= index < len(value):
            return value[index]
        raise TemplateError(f"{{{{{shown}.{seg}}}}}: index {index} out of range (length {len(value)})")
    raise TemplateError(f"{{{{{shown}.{seg}}}}}: {shown} is a {type(value).__name__}, not a mapping or list")


def as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return json.dumps(value, ensure_ascii=False)
