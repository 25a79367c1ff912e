"""Tool-call formats: how each model family writes a call in its turn, and the messages its chat template takes.

Three formats cover the families kitae tests against their real chat templates:

- ``hermes`` (Qwen2.5, Qwen3, Hermes): one or more ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``
  blocks after the turn's text; the results go back as ``tool`` messages, which the template renders inside a
  user turn as ``<tool_response>`` blocks.
- ``llama3_json`` (Llama 3.1 Instruct): the turn is one JSON object ``{"name": ..., "parameters": {...}}``,
  optionally after ``<|python_tag|>``; the template takes one call per assistant message and renders the result
  under the ``ipython`` role (a ``tool`` message renders there too).
- ``mistral`` (Mistral Nemo and the v3 tokenizers): ``[TOOL_CALLS][{"name": ..., "arguments": {...}, "id": ...}]``
  with 9-character alphanumeric ids, which the template requires on every call and on every result
  (``[TOOL_RESULTS]{"content": ..., "call_id": ...}[/TOOL_RESULTS]``).

A call that cannot be read (not JSON, no name, arguments that are not an object, more calls than the format
takes) is never an exception: it becomes one message in :attr:`ParsedTurn.malformed`, which the episode gives
back to the model as a tool error and counts.

A new format is one :class:`ToolCallFormat` subclass registered in :data:`PARSERS` (``@PARSERS.register("name")``):
how a template shows it renders the format (:meth:`~ToolCallFormat.detects`) and how a turn is read
(:meth:`~ToolCallFormat.parse`); its messages are the OpenAI shape unless its template needs another.
"""

from __future__ import annotations

import hashlib
import json
import string
from dataclasses import dataclass, field
from typing import Any

from kitae.errors import KitaeError
from kitae.registry import Registry
from kitae.rollout.trajectory import ToolCall

PARSERS = Registry("tool call format")


@dataclass
class ParsedTurn:
    """A sampled turn read in its family's format."""

    content: str  # the turn's text without the tool-call markup and without the end marker (all of the text
    # when every call in it was malformed)
    calls: list[ToolCall] = field(default_factory=list)  # well-formed calls, in order (turn unset)
    malformed: list[str] = field(default_factory=list)  # one message per call that could not be read


def strip_end(text: str, ends: tuple[str, ...]) -> str:
    """`text` up to the first of the end marker texts `ends` (the whole text when none is in it)."""
    cut = min((text.find(e) for e in ends if e and e in text), default=-1)
    return text if cut < 0 else text[:cut]


def read_call(obj: Any, args_key: str, where: str) -> tuple[str, dict] | str:
    """(name, arguments) of one decoded call object, or the message saying why it is not a call. Arguments
    written as a JSON string holding an object are taken (some models quote them); a missing one is ``{}``."""
    if not isinstance(obj, dict):
        return f"{where} is not a JSON object but {type(obj).__name__}"
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return f"{where} has no \"name\" (a string naming the tool)"
    args = obj.get(args_key, obj.get("arguments", {}))
    if isinstance(args, str):
        try:
            args = decode_json(args.strip())[0]
        except NotJson:
            pass
    if not isinstance(args, dict):
        return f"{where} to '{name}': \"{args_key}\" must be a JSON object of argument names and values"
    return name, args


class NotJson(ValueError):
    """Text that does not decode as JSON: its reason and where."""


def decode_json(text: str, pos: int = 0) -> tuple[Any, int]:
    """The JSON value at `pos` in `text` and where it ends; NotJson when there is none, also for nesting too deep
    for Python's decoder (sampled text is untrusted: ``[[[[...`` raises RecursionError in json)."""
    try:
        return json.JSONDecoder().raw_decode(text, pos)
    except json.JSONDecodeError as exc:
        raise NotJson(f"{exc.msg} at character {exc.pos}") from None
    except RecursionError:
        raise NotJson("nested too deeply") from None


def json_error(where: str, exc: NotJson, example: str) -> str:
    return f"{where} is not valid JSON ({exc}); write it as {example}"


def tool_call_dicts(calls: list[ToolCall]) -> list[dict]:
    """Calls as chat-template tool calls: ``{"type": "function", "id"?, "function": {"name", "arguments"}}``."""
    out = []
    for c in calls:
        entry: dict[str, Any] = {"type": "function", "function": {"name": c.name, "arguments": c.arguments}}
        if c.id is not None:
            entry["id"] = c.id
        out.append(entry)
    return out


def result_text(call: ToolCall) -> str:
    """What the model reads back for a call: its result, or its error as ``error: ...``."""
    if call.error is not None:
        return f"error: {call.error}"
    return "" if call.result is None else str(call.result)


class ToolCallFormat:
    """One family's way of writing tool calls. Subclasses set ``name`` and implement :meth:`detects` and
    :meth:`parse`; the messages are the common OpenAI shape unless the template needs another."""

    name = ""
    ends: tuple[str, ...] = ()  # the family's own end-of-turn texts, cut besides the model's end marker

    def read(self, text: str, ends: tuple[str, ...]) -> ParsedTurn:
        """:meth:`parse` cutting at the model's end marker texts and the family's own. A turn whose calls were all
        malformed keeps its whole text as the content: the conversation shows what the model wrote, and the
        template renders it back as sampled."""
        ends = tuple(dict.fromkeys((*ends, *self.ends)))
        parsed = self.parse(text, ends)
        if parsed.malformed and not parsed.calls:
            parsed.content = strip_end(text, ends)
        return parsed

    def detects(self, template: str) -> bool:
        """Whether a chat template's text renders this format."""
        raise NotImplementedError

    def parse(self, text: str, ends: tuple[str, ...]) -> ParsedTurn:
        """A sampled turn's text (its end marker, one of `ends`, kept) read: content, calls, malformed calls."""
        raise NotImplementedError

    def assistant_message(self, parsed: ParsedTurn) -> dict:
        """The turn as the template takes it; ``tool_calls`` only when there are calls (Llama 3.1's and Mistral's
        templates take an empty list for a call)."""
        message: dict[str, Any] = {"role": "assistant", "content": parsed.content}
        if parsed.calls:
            message["tool_calls"] = tool_call_dicts(parsed.calls)
        return message

    def tool_message(self, call: ToolCall) -> dict:
        message = {"role": "tool", "name": call.name, "content": result_text(call)}
        if call.id is not None:
            message["tool_call_id"] = call.id
        return message


# ---- hermes: Qwen2.5, Qwen3, Hermes --------------------------------------------------------------------------
HERMES_OPEN, HERMES_CLOSE = "<tool_call>", "</tool_call>"
HERMES_EXAMPLE = '<tool_call>\n{"name": "tool_name", "arguments": {"arg": "value"}}\n</tool_call>'


@PARSERS.register("hermes")
class HermesFormat(ToolCallFormat):
    """``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``, several per turn (Qwen2.5, Qwen3,
    Hermes). The content is the text before the first call (the template writes a newline between the two)."""

    name = "hermes"
    ends = ("<|im_end|>", "<|endoftext|>")

    def detects(self, template: str) -> bool:
        return HERMES_OPEN in template

    def parse(self, text: str, ends: tuple[str, ...]) -> ParsedTurn:
        body = strip_end(text, ends)
        head, opened, rest = body.partition(HERMES_OPEN)
        if not opened:
            return ParsedTurn(body)
        parsed = ParsedTurn(head.rstrip())
        for i, block in enumerate(rest.split(HERMES_OPEN), start=1):
            inner, closed, _after = block.partition(HERMES_CLOSE)
            where = f"tool call {i}"
            if not closed:
                parsed.malformed.append(f"{where} is not closed with {HERMES_CLOSE}; write it as {HERMES_EXAMPLE}")
                continue
            self._read(inner, where, parsed)
        return parsed

    @staticmethod
    def _read(inner: str, where: str, parsed: ParsedTurn) -> None:
        try:
            obj, end = decode_json(inner.strip())
            if inner.strip()[end:].strip():
                raise NotJson(f"extra text after the call at character {end}")
        except NotJson as exc:
            parsed.malformed.append(json_error(where, exc, HERMES_EXAMPLE))
            return
        call = read_call(obj, "arguments", where)
        if isinstance(call, str):
            parsed.malformed.append(call)
        else:
            parsed.calls.append(ToolCall(name=call[0], arguments=call[1]))


# ---- llama3_json: Llama 3.1 ----------------------------------------------------------------------------------
PYTHON_TAG = "<|python_tag|>"
LLAMA_EXAMPLE = '{"name": "tool_name", "parameters": {"arg": "value"}}'


@PARSERS.register("llama3_json")
class Llama3JsonFormat(ToolCallFormat):
    """Llama 3.1's custom-tool call: the turn is ``{"name": ..., "parameters": {...}}``, optionally after
    ``<|python_tag|>``. Its template takes one call per assistant message, so a second call in a turn is
    malformed (told to the model, not run). A turn that starts with neither the tag nor a JSON object holding
    ``"name"`` is an answer. Results render under the ``ipython`` role (the template's ``tool`` role)."""

    name = "llama3_json"
    ends = ("<|eot_id|>", "<|eom_id|>", "<|end_of_text|>")

    def detects(self, template: str) -> bool:
        return '"parameters"' in template and (PYTHON_TAG in template or "ipython" in template)

    def parse(self, text: str, ends: tuple[str, ...]) -> ParsedTurn:
        body = strip_end(text, ends)
        head, tagged, after = body.partition(PYTHON_TAG)
        if tagged:
            return self._calls(head.strip(), after)
        if body.lstrip().startswith("{") and '"name"' in body:
            return self._calls("", body)
        return ParsedTurn(body)

    def _calls(self, content: str, text: str) -> ParsedTurn:
        parsed, pos, i = ParsedTurn(content), 0, 0
        text = text.strip()
        while pos < len(text):
            i += 1
            where = f"tool call {i}"
            try:
                obj, pos = decode_json(text, pos)
            except NotJson as exc:
                parsed.malformed.append(json_error(where, exc, LLAMA_EXAMPLE))
                break
            call = read_call(obj, "parameters", where)
            if isinstance(call, str):
                parsed.malformed.append(call)
            elif parsed.calls:
                parsed.malformed.append(f"{where} to '{call[0]}' was not run: Llama 3.1 makes one tool call per "
                                        "turn; make the next call after reading this result")
            else:
                parsed.calls.append(ToolCall(name=call[0], arguments=call[1]))
            pos = _skip_separators(text, pos)
        return parsed


def _skip_separators(text: str, pos: int) -> int:
    """The position after whitespace and the ``;`` Llama writes between calls."""
    while pos < len(text) and (text[pos].isspace() or text[pos] == ";"):
        pos += 1
    return pos


# ---- mistral: Mistral Nemo (v3 tokenizers) --------------------------------------------------------------------
MISTRAL_CALLS = "[TOOL_CALLS]"
MISTRAL_EXAMPLE = '[TOOL_CALLS][{"name": "tool_name", "arguments": {"arg": "value"}}]'
ID_CHARS = string.ascii_letters + string.digits
ID_LENGTH = 9


def call_id(seed: str) -> str:
    """A 9-character alphanumeric call id derived from `seed` (the same turn gets the same ids: resume repeats
    an episode exactly)."""
    n = int.from_bytes(hashlib.sha256(seed.encode()).digest()[:8], "big")
    out = []
    for _ in range(ID_LENGTH):
        n, r = divmod(n, len(ID_CHARS))
        out.append(ID_CHARS[r])
    return "".join(out)


def valid_id(value: Any) -> bool:
    return isinstance(value, str) and len(value) == ID_LENGTH and value.isascii() and value.isalnum()


@PARSERS.register("mistral")
class MistralFormat(ToolCallFormat):
    """``[TOOL_CALLS][{"name": ..., "arguments": {...}, "id": "a1b2c3d4e"}]`` (Mistral Nemo). The template
    requires a 9-character alphanumeric id on each call and result: the model's own when it wrote a valid one,
    else one derived from the turn. Text before ``[TOOL_CALLS]`` is the content (the template drops it from a
    calling turn, which :meth:`kitae.agents.chat.ToolChat.rewrites` then reports)."""

    name = "mistral"
    ends = ("</s>",)

    def detects(self, template: str) -> bool:
        return MISTRAL_CALLS in template

    def parse(self, text: str, ends: tuple[str, ...]) -> ParsedTurn:
        body = strip_end(text, ends)
        head, *segments = body.split(MISTRAL_CALLS)
        parsed = ParsedTurn(head if not segments else head.strip())
        n = 0
        for segment in segments:
            for obj in self._objects(segment, parsed):
                n += 1
                call = read_call(obj, "arguments", f"tool call {n}")
                if isinstance(call, str):
                    parsed.malformed.append(call)
                    continue
                given = obj.get("id") if isinstance(obj, dict) else None
                cid = given if valid_id(given) else call_id(f"{n}\x00{body}")
                parsed.calls.append(ToolCall(name=call[0], arguments=call[1], id=cid))
        return parsed

    @staticmethod
    def _objects(segment: str, parsed: ParsedTurn) -> list[Any]:
        """The call objects of one ``[TOOL_CALLS]`` segment: a JSON list of them, or one object."""
        where = f"tool call {len(parsed.calls) + len(parsed.malformed) + 1}"
        try:
            value, _ = decode_json(segment.strip())
        except NotJson as exc:
            parsed.malformed.append(json_error(where, exc, MISTRAL_EXAMPLE))
            return []
        return value if isinstance(value, list) else [value]

    def tool_message(self, call: ToolCall) -> dict:
        """The result as a JSON string: the template writes ``{"content": `` + content verbatim, so text must
        come quoted to be the JSON the model was trained on (``{"content": "42", "call_id": ...}``)."""
        message = super().tool_message(call)
        message["content"] = json.dumps(message["content"], ensure_ascii=False)
        message["tool_call_id"] = call.id if valid_id(call.id) else call_id(f"result\x00{call.name}")
        return message


def template_text(tokenizer_or_template: Any) -> str:
    """The chat template's text of a tokenizer (its default one, or its ``tool_use`` one when it has named
    templates), or the string given."""
    if isinstance(tokenizer_or_template, str):
        return tokenizer_or_template
    template = getattr(tokenizer_or_template, "chat_template", None)
    if isinstance(template, dict):
        template = template.get("tool_use") or template.get("default")
    return template if isinstance(template, str) else ""


def parser_for(tokenizer_or_template: Any) -> str:
    """The tool-call format a chat template renders (a tokenizer's template, or the template text).
    KitaeError when it renders none of them: a template without tools cannot run an agent."""
    name = detect_format(template_text(tokenizer_or_template))
    if name is None:
        raise KitaeError("the chat template renders no tool calls kitae knows (Qwen/Hermes <tool_call>, Llama 3.1 "
                         "JSON with <|python_tag|>, Mistral [TOOL_CALLS]); use the model's own template with tools, "
                         f"or set environment.parser to one of {', '.join(PARSERS.names())}")
    return name


def detect_format(template: str) -> str | None:
    """The name of the format a template renders, or None; Mistral's and Llama's markers are checked before
    hermes's ``<tool_call>`` (a template may mention it in prose), then the formats registered by users."""
    builtin = ("mistral", "llama3_json", "hermes")
    for name in (*builtin, *(n for n in PARSERS.names() if n not in builtin)):
        if PARSERS.get(name)().detects(template):
            return name
    return None
