"""Checking what a client sends to kitae's servers, before any model work (stdlib only, cheap to import).

Every check raises :class:`RequestError` with the HTTP status, a message that says what is wrong and how to
fix it, and ``param``: the field path (``messages[2].content``), as OpenAI's errors carry it. The services
(``kitae serve rm``, ``kitae serve model``) map it to their reply shape.

    body = parse_json(raw)                   # 400: not UTF-8, not JSON, NaN, nested too deep, lone surrogates
    body = require_object(body)
    check_fields(body, KNOWN, NEUTRAL, IGNORED, "kitae serve model")   # 400 naming fields that change results
    msgs = messages(body.get("messages"), "messages", max_chars=...)   # {role, content} with string content
    seed = integer(body, "seed", None, SEED_MIN, SEED_MAX)
    stop = stop_strings(body.get("stop"))                             # a string or a short list of strings
"""

from __future__ import annotations

import json
from typing import Any

MAX_DEPTH = 64  # a judge's JSON schema nests about 10 deep; deeper bodies are refused, not recursed into
SEED_MIN, SEED_MAX = -(2**63), 2**63 - 1  # OpenAI's seed is a 64-bit integer; torch takes no more


class RequestError(Exception):
    """A request the server will not serve: ``status`` (400, 401, 404, 408, 411, 413), ``param`` (a field
    path or None)."""

    def __init__(self, status: int, message: str, param: str | None = None):
        super().__init__(message)
        self.status, self.param = status, param


def bad(message: str, param: str | None = None) -> RequestError:
    return RequestError(400, message, param)


# ---- the body ------------------------------------------------------------------------------------------
def parse_json(raw: bytes, max_depth: int = MAX_DEPTH) -> Any:
    """The JSON value of a request body, checked: strict UTF-8, no NaN or Infinity (not JSON), at most
    ``max_depth`` levels of arrays and objects, no lone surrogate escapes (``"\\ud800"``: not text)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise bad(f"the body is not UTF-8 JSON: byte {exc.start} is {raw[exc.start:exc.start + 1]!r}") from None
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise bad(f"the body is not JSON: {exc}; send a JSON object with Content-Type: application/json") from None
    except _NotJsonNumber as exc:
        raise bad(f"the body is not JSON: {exc} is not a JSON number (write null or a string)") from None
    except RecursionError:  # deeper than the interpreter's recursion limit
        raise bad(f"the body is JSON nested more than {max_depth} deep; flatten it") from None
    _check_strings(value, max_depth)
    return value


class _NotJsonNumber(ValueError):
    """NaN, Infinity or -Infinity: Python's json reads them, JSON has no such numbers."""


def _no_constant(name: str) -> Any:
    raise _NotJsonNumber(name)


def _check_strings(value: Any, max_depth: int) -> None:
    """Refuse nesting past ``max_depth`` and strings with lone surrogates (valid JSON escapes, but no
    tokenizer takes them), in one walk without recursion."""
    stack: list[tuple[Any, tuple[Any, ...]]] = [(value, ())]  # (item, its path as keys and indices)
    while stack:
        item, at = stack.pop()
        if isinstance(item, str):
            _utf8(item, at)
        elif isinstance(item, (list, dict)):
            if len(at) >= max_depth:
                raise bad(f"the body is JSON nested more than {max_depth} deep; flatten it")
            if isinstance(item, list):
                stack.extend((v, (*at, i)) for i, v in enumerate(item))
            else:
                for key, v in item.items():
                    _utf8(key, (*at, key))
                    stack.append((v, (*at, key)))


def _utf8(text: str, at: tuple[Any, ...]) -> None:
    if text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        where = field_path(at) or "the body"
        raise bad(f"{where} has a lone surrogate {text[exc.start]!a} at character {exc.start}; send text as "
                  "UTF-8 (surrogate escapes come in pairs)", field_path(at) or None) from None


def field_path(at: tuple[Any, ...]) -> str:
    """``("messages", 0, "content")`` -> ``messages[0].content``."""
    return "".join(f"[{k}]" if isinstance(k, int) else f".{_printable(k)}" for k in at).lstrip(".")


def _printable(key: str) -> str:
    return key.encode("utf-8", "backslashreplace").decode("utf-8")  # a lone surrogate as \\ud800


def require_object(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise bad(f"the request body must be a JSON object, got {type(body).__name__}")
    return body


# ---- fields ----------------------------------------------------------------------------------------------
def check_fields(body: dict[str, Any], known: set[str], neutral: dict[str, tuple[Any, ...]], ignored: set[str],
                 server: str) -> None:
    """Refuse every field the server would not honour: fields in ``neutral`` are accepted only with one of
    their no-op values (``presence_penalty: 0``, ``stream: false``), ``ignored`` ones (``user``) always, a null
    always (OpenAI's "not given"), and any other field is refused, so a client never gets results it did not
    ask for."""
    refused = [key for key, value in body.items() if key not in known | ignored and value is not None
               and not (key in neutral and any(_same(value, v) for v in neutral[key]))]
    if refused:
        names = ", ".join(refused)
        raise bad(f"{server} does not support {names}; remove {'it' if len(refused) == 1 else 'them'} "
                  f"(it supports {', '.join(sorted(known))})", refused[0])


def _same(value: Any, neutral: Any) -> bool:
    """JSON equality: ``0`` is ``0.0``, but ``false`` is not ``0``."""
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (value, neutral))
    return (numbers or type(value) is type(neutral)) and value == neutral


def integer(body: dict[str, Any], key: str, default: int | None, lo: int, hi: int) -> int | None:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise bad(f"{key} must be an integer from {lo} to {hi}, got {_short(value)}", key)
    return value


def number(body: dict[str, Any], key: str, default: float, lo: float, hi: float) -> float:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
        raise bad(f"{key} must be a number from {lo:g} to {hi:g}, got {_short(value)}", key)
    return float(value)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def stream_fields(body: dict[str, Any]) -> tuple[bool, bool]:
    """OpenAI's ``stream`` (true or false) and ``stream_options.include_usage``: (stream, include_usage)."""
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise bad(f"stream must be true or false, got {_short(stream)}", "stream")
    options = body.get("stream_options")
    if options is None:
        return bool(stream), False
    if not isinstance(options, dict) or not set(options) <= {"include_usage", "continuous_usage_stats"}:
        raise bad("stream_options must be an object with include_usage (true or false)", "stream_options")
    usage = options.get("include_usage")
    if usage is not None and not isinstance(usage, bool):
        raise bad(f"stream_options.include_usage must be true or false, got {_short(usage)}",
                  "stream_options.include_usage")
    if options.get("continuous_usage_stats"):
        raise bad("stream_options.continuous_usage_stats is not supported; the usage comes in the last chunk "
                  "(include_usage)", "stream_options.continuous_usage_stats")
    return bool(stream), bool(usage) and bool(stream)


# ---- texts and conversations ---------------------------------------------------------------------------
def text(value: Any, param: str, max_chars: int, flag: str = "--max-chars") -> str:
    if not isinstance(value, str):
        raise bad(f"{param} must be a string, got {type(value).__name__}", param)
    if len(value) > max_chars:
        raise bad(f"{param} has {len(value):,} characters; this server takes at most {max_chars:,} ({flag})",
                  param)
    return value


def texts(value: Any, param: str, max_items: int, max_chars: int) -> list[str]:
    """A string or a non-empty list of at most ``max_items`` strings of at most ``max_chars`` characters."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items:
        raise bad(f"{param} must be a string or a non-empty list of strings", param)
    _count(items, param, max_items)
    return [text(t, f"{param}[{i}]", max_chars) for i, t in enumerate(items)]


def messages(value: Any, param: str, max_chars: int, flag: str = "--max-chars") -> list[dict[str, str]]:
    """A non-empty list of ``{role, content}``: role a non-empty string, content a string or a list of parts
    (the ``text`` ones are joined); at most ``max_chars`` characters of content in all."""
    if not isinstance(value, list) or not value:
        raise bad(f"{param} must be a non-empty list of {{role, content}} messages", param)
    out, total = [], 0
    for i, m in enumerate(value):
        where = f"{param}[{i}]"
        if not isinstance(m, dict):
            raise bad(f"{where} must be an object with role and content, got {type(m).__name__}", where)
        role = m.get("role")
        if not isinstance(role, str) or not role:
            raise bad(f"{where}.role must be a non-empty string (system, user, assistant), got {_short(role)}",
                      f"{where}.role")
        content = _content(m.get("content"), f"{where}.content")
        total += len(content)
        if total > max_chars:
            raise bad(f"{param} has over {max_chars:,} characters of content (at {where}); this server takes at "
                      f"most {max_chars:,} ({flag})", param)
        out.append({"role": role, "content": content})
    return out


def _content(value: Any, where: str) -> str:
    if isinstance(value, list):  # OpenAI content parts: keep the text ones
        parts = []
        for j, part in enumerate(value):
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                raise bad(f"{where}[{j}] must be a content part {{type, text}}", f"{where}[{j}]")
            if part["type"] in ("text", "input_text"):
                if not isinstance(part.get("text"), str):
                    raise bad(f"{where}[{j}].text must be a string", f"{where}[{j}].text")
                parts.append(part["text"])
        return "".join(parts)
    if not isinstance(value, str):
        raise bad(f"{where} must be a string or a list of text parts, got {type(value).__name__}", where)
    return value


def stop_strings(value: Any, param: str = "stop", max_items: int = 16, max_chars: int = 256) -> list[str]:
    """OpenAI's ``stop``: a string or a list of at most ``max_items`` non-empty strings of at most ``max_chars``."""
    stop = [value] if isinstance(value, str) else value or []
    if not isinstance(stop, list) or not all(isinstance(s, str) and 0 < len(s) <= max_chars for s in stop) \
            or len(stop) > max_items:
        raise bad(f"{param} must be a string or a list of at most {max_items} non-empty strings of at most "
                  f"{max_chars} characters", param)
    return stop


def conversations(value: Any, param: str, max_items: int, max_chars: int) -> list[list[dict[str, str]]]:
    """A non-empty list of at most ``max_items`` conversations (see :func:`messages`)."""
    if not isinstance(value, list) or not value:
        raise bad(f"{param} must be a non-empty list of conversations (lists of {{role, content}})", param)
    _count(value, param, max_items)
    return [messages(c, f"{param}[{i}]", max_chars) for i, c in enumerate(value)]


def _count(items: list[Any], param: str, max_items: int) -> None:
    if len(items) > max_items:
        raise bad(f"{param} has {len(items):,} items; this server takes at most {max_items:,} per request "
                  "(--max-items); send them in several requests", param)


# ---- replies ---------------------------------------------------------------------------------------------
def cut_at_markers(text: str, markers: tuple[str, ...] | list[str]) -> tuple[str, bool]:
    """``text`` up to the first control marker (``<|im_start|>``, ``<|im_end|>``, ...), and whether one was
    there: the text of a control token never reaches a client, even in a reply cut at the length limit."""
    cut = min((i for i in (text.find(m) for m in markers if m) if i >= 0), default=-1)
    return (text, False) if cut < 0 else (text[:cut], True)
