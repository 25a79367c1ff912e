"""Prompt datasets: JSONL, Parquet or a saved `datasets` dataset, validated row by row.

A row is a prompt for RL:
    {"messages": [{"role": "user", "content": "12+35は？"}],   # chat format; the last turn is the user's
     "reference_answer": "47",                                 # optional unless a grader needs it
     "difficulty": "easy", "lang": "ja", ...}                  # optional; extra fields go to graders as item.FIELD
A plain `"prompt": "..."` string is accepted in place of `messages` (TRL's standard format).

Bad rows raise DataError naming the file, the row (1-based) and the field, and what to do about it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

from kitae.errors import DataError

ROLES = ("system", "user", "assistant")


def load_prompts(source: str | Path | Any, require_reference: bool = False, split: str | None = None) -> list[dict]:
    """Load and validate a prompt set. `source` is a .jsonl/.json/.parquet file, a `datasets` folder
    (saved with `save_to_disk`), or an in-memory `datasets.Dataset`."""
    name, rows = _read(source, split)
    out = [validate_row(row, name, i + 1, require_reference) for i, row in enumerate(rows)]
    if not out:
        raise DataError(name, None, None, "the dataset has no rows")
    return out


def _read(source: Any, split: str | None) -> tuple[str, Iterable[dict]]:
    if hasattr(source, "column_names") and hasattr(source, "__iter__"):  # a datasets.Dataset
        return "<datasets.Dataset>", list(source)
    path = Path(source)
    if not path.exists():
        raise DataError(str(path), None, None, "file not found; pass a .jsonl, .parquet or a datasets folder")
    if path.is_dir():
        import datasets

        ds = datasets.load_from_disk(str(path))
        if isinstance(ds, datasets.DatasetDict):
            ds = ds[split or next(iter(ds))]
        return str(path), list(ds)
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return str(path), pq.read_table(path).to_pylist()
    if path.suffix == ".json":
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, list):
            raise DataError(str(path), None, None, "a .json file must hold a list of rows; use .jsonl for one per line")
        return str(path), data
    return str(path), list(_read_jsonl(path))


def _read_jsonl(path: Path) -> Iterable[dict]:
    with path.open(encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(str(path), i, None, f"not valid JSON ({exc.msg} at column {exc.colno})") from None


def validate_row(row: Any, file: str, n: int, require_reference: bool = False) -> dict:
    """A checked copy of one row, with `messages` always present and `reference_answer` a string."""
    if not isinstance(row, dict):
        raise DataError(file, n, None, f"expected a JSON object, got {type(row).__name__}")
    row = dict(row)
    if "messages" not in row:
        if isinstance(row.get("prompt"), str):
            row["messages"] = [{"role": "user", "content": row["prompt"]}]
        elif isinstance(row.get("prompt"), list):
            row["messages"] = row["prompt"]
        else:
            raise DataError(file, n, "messages", "missing; give a list of {role, content} turns or a 'prompt' string")
    _check_messages(row["messages"], file, n)
    ref = row.get("reference_answer")
    if ref is None and require_reference:
        raise DataError(file, n, "reference_answer", "missing; this run's graders compare against a reference answer")
    if ref is not None:
        if isinstance(ref, (dict, list)) or isinstance(ref, bool):
            raise DataError(file, n, "reference_answer", f"expected a string or number, got {type(ref).__name__}")
        row["reference_answer"] = str(ref)
    for key in ("difficulty", "lang"):
        if key in row and row[key] is not None and not isinstance(row[key], (str, int, float)):
            raise DataError(file, n, key, f"expected a string label, got {type(row[key]).__name__}")
    return row


def _check_messages(messages: Any, file: str, n: int) -> None:
    if not isinstance(messages, list) or not messages:
        raise DataError(file, n, "messages", "expected a non-empty list of {role, content} turns")
    for j, m in enumerate(messages):
        field = f"messages[{j}]"
        if not isinstance(m, dict):
            raise DataError(file, n, field, "expected an object with 'role' and 'content'")
        if m.get("role") not in ROLES:
            raise DataError(file, n, f"{field}.role", f"got {m.get('role')!r}; use one of {', '.join(ROLES)}")
        if not isinstance(m.get("content"), str):
            raise DataError(file, n, f"{field}.content", "expected a string")
    if messages[-1]["role"] != "user":
        raise DataError(
            file, n, f"messages[{len(messages) - 1}].role",
            "the last turn must be the user's: the model answers it (drop the assistant answer, "
            "or move it to 'reference_answer')",
        )


def write_jsonl(path: str | Path, rows: Iterable[dict]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
