"""Reading a judge's reply tolerantly, then checking it strictly.

Tolerant: the JSON may be wrapped in prose or a ```json fence, nested under one key (``{"scores": ...}``),
or given as a list of entries with an ``id``; ids may be written ``S2``, ``s2``, ``Sample 2`` or ``2``;
criterion names match case-insensitively; numbers may be strings (``"4"``).

Strict: exactly one entry per sample id (no missing, extra or repeated ids), every criterion present and a
number, every value inside the scale. Each violation raises :class:`JudgeOutputError` with a ``kind`` the
grader counts:

    not_json           no JSON object or list in the reply
    wrong_entries      missing, extra or repeated sample ids (the wrong number of entries)
    missing_criterion  an entry without one of the criteria
    not_a_number       a criterion value that is not a number
    out_of_range       a value outside the scale
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

KINDS = ("not_json", "wrong_entries", "missing_criterion", "not_a_number", "out_of_range")
_WRAPPERS = ("scores", "grades", "samples", "results", "evaluations", "ratings", "entries")
_ID_KEYS = ("id", "sample", "sample_id", "name")
_REASON_KEYS = ("reason", "explanation", "rationale", "justification")
_FENCE = re.compile(r"```(?:json)?\s*\n(.*?)\n?```", re.S)


class JudgeOutputError(ValueError):
    def __init__(self, kind: str, message: str):
        assert kind in KINDS, kind
        super().__init__(f"{kind}: {message}")
        self.kind = kind


@dataclass
class Entry:
    """One sample's judgement: raw values on the scale, per criterion, and the reason."""

    values: dict[str, float]
    reason: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def parse_judgement(text: str, ids: list[str], criteria: list[str], scale: tuple[float, float],
                    max_reason_chars: int = 300) -> dict[str, Entry]:
    """id -> Entry for every id, or JudgeOutputError."""
    data = extract_json(text)
    raw = find_entries(data, ids)
    return {sid: read_entry(raw[sid], sid, criteria, scale, max_reason_chars) for sid in ids}


def extract_json(text: str) -> Any:
    """The first JSON object or list in ``text`` (whole text, a fenced block, or embedded in prose)."""
    candidates = [text.strip()] + [m.group(1) for m in _FENCE.finditer(text)]
    for candidate in candidates:
        try:
            return json.loads(candidate)
        except ValueError:
            pass
    decoder = json.JSONDecoder()
    for m in re.finditer(r"[{\[]", text):
        try:
            value, _ = decoder.raw_decode(text, m.start())
        except ValueError:
            continue
        if isinstance(value, (dict, list)) and value:
            return value
    raise JudgeOutputError("not_json", f"no JSON object in the reply: {_excerpt(text)}")


def canonical_id(key: Any) -> str | None:
    """'S2', 's2', 'Sample 2', 'sample_2', '2' -> 'S2'; None when it is not an id."""
    m = re.fullmatch(r"\s*(?:s(?:ample)?[\s_#-]*)?(\d+)\s*", str(key), re.I)
    return f"S{int(m.group(1))}" if m else None


def find_entries(data: Any, ids: list[str]) -> dict[str, Any]:
    if isinstance(data, dict) and len(data) == 1:
        (key, inner), = data.items()
        if str(key).lower() in _WRAPPERS and isinstance(inner, (dict, list)):
            data = inner
    pairs: list[tuple[str | None, Any]]
    if isinstance(data, dict):
        pairs = [(canonical_id(k), v) for k, v in data.items()]
    elif isinstance(data, list) and all(isinstance(e, dict) for e in data):
        pairs = [(_entry_id(e), e) for e in data]
    else:
        raise JudgeOutputError("wrong_entries", f"expected an object keyed by sample id, got {_excerpt(data)}")
    got = [sid for sid, _ in pairs]
    if sorted(got, key=str) != sorted(ids) or len(set(got)) != len(got):
        shown = ", ".join(str(g) for g in got) or "none"
        raise JudgeOutputError("wrong_entries", f"expected one entry for each of {', '.join(ids)}; got {shown}")
    return dict(pairs)  # type: ignore[arg-type]


def _entry_id(entry: dict[str, Any]) -> str | None:
    for key in _ID_KEYS:
        if key in entry:
            return canonical_id(entry[key])
    return None


def read_entry(entry: Any, sid: str, criteria: list[str], scale: tuple[float, float],
               max_reason_chars: int) -> Entry:
    if not isinstance(entry, dict):
        raise JudgeOutputError("missing_criterion", f"{sid}: expected an object of scores, got {_excerpt(entry)}")
    flat = {str(k).lower(): v for k, v in entry.items()}
    if isinstance(flat.get("scores"), dict):  # {"reason": ..., "scores": {"tone": 4, ...}}
        flat.update({str(k).lower(): v for k, v in flat["scores"].items()})
    lo, hi = scale
    values = {}
    for name in criteria:
        if name.lower() not in flat:
            raise JudgeOutputError("missing_criterion", f"{sid}: no '{name}' (keys: {', '.join(map(str, entry))})")
        value = _number(flat[name.lower()])
        if value is None:
            raise JudgeOutputError("not_a_number", f"{sid}.{name}: {_excerpt(flat[name.lower()])} is not a number")
        if not lo <= value <= hi:
            raise JudgeOutputError("out_of_range", f"{sid}.{name}: {value:g} is outside {lo:g}..{hi:g}")
        values[name] = value
    reason = next((flat[k] for k in _REASON_KEYS if isinstance(flat.get(k), str)), "")
    return Entry(values=values, reason=reason.strip()[:max_reason_chars])


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def _excerpt(value: Any, n: int = 120) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return repr(text if len(text) <= n else text[: n - 3] + "...")
