"""Prompt datasets: JSONL, Parquet, a saved `datasets` dataset or any `load_dataset` source (a Hub dataset:
kitae.data.sources), validated row by row.

A row is a prompt for RL:
    {"messages": [{"role": "user", "content": "12+35は？"}],   # chat format; the last turn is the user's
     "reference_answer": "47",                                 # optional unless a grader needs it
     "difficulty": "easy", "lang": "ja", ...}                  # optional; extra fields go to graders as item.FIELD
A plain `"prompt": "..."` string is accepted in place of `messages` (TRL's standard format).

Images: a turn's content may be a list of parts, OpenAI's (``{"type": "text", "text": ...}``,
``{"type": "image_url", "image_url": {"url": PATH | file://... | data:image/...}}``) or HF's
(``{"type": "image", "image": PATH}``; a bare ``{"type": "image"}`` takes the next entry of the row's
``images`` list, TRL's vision format). Relative paths are relative to the data file's folder. Each image is
checked on load (kitae.data.images: the file exists, is a readable image, not too large). A checked row's
image parts are ``{"type": "image", "image": REF}`` (REF an absolute path or the data URL) and ``row["images"]``
lists the REFs in order (graders read it as ``{{item.images}}``). Content that is a list of text parts only
becomes one string.

Bad rows raise DataError naming the file, the row (1-based) and the field, and what to do about it. So do bad
files (bytes that are not UTF-8, a file that is not Parquet, JSON nested too deeply; a JSONL error names the
line) and text that cannot be encoded (a lone surrogate such as the JSON escape ``"\\ud800"`` without its pair),
which would otherwise crash the tokenizer or the run store later.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

from kitae.data.images import ImageError, check_image, resolve_ref
from kitae.data.sources import DatasetSource, RowMap
from kitae.errors import DataError

ROLES = ("system", "user", "assistant")


def load_prompts(source: str | Path | Any, require_reference: bool = False, split: str | None = None,
                 rowmap: RowMap | None = None, key: str = "--data") -> list[dict]:
    """Load and validate a prompt set. `source` is a .jsonl/.json/.parquet file, a `datasets` folder
    (saved with `save_to_disk`), an in-memory `datasets.Dataset`, or a :class:`~kitae.data.sources.DatasetSource`
    (a Hub dataset, any ``datasets.load_dataset`` source). `rowmap` maps each row's columns to kitae's fields
    first (kitae.data.sources.RowMap). `key`: the option or config key that named the source (in errors)."""
    name, rows = _read(source, split, key)
    local = not name.startswith("<") and not isinstance(source, DatasetSource)
    base = (Path(name) if Path(name).is_dir() else Path(name).parent) if local else None
    if rowmap is not None and not rowmap.empty:
        rows = (rowmap.apply(row, name, i + 1) for i, row in enumerate(rows))
    out = [validate_row(row, name, i + 1, require_reference, base) for i, row in enumerate(rows)]
    if not out:
        raise DataError(name, None, None, f"no rows ({key}): the dataset is empty; give a prompt set with at least "
                        "one row (JSON Lines: one JSON object per line)")
    return out


def _read(source: Any, split: str | None, key: str) -> tuple[str, Iterable[Any]]:
    """(the name errors use, the rows)."""
    if hasattr(source, "column_names") and hasattr(source, "__iter__"):  # a datasets.Dataset
        return "<datasets.Dataset>", list(source)
    if isinstance(source, DatasetSource):
        return source.describe(), source.load(key)
    path = Path(source)
    if not path.exists():
        raise DataError(str(path), None, None, "file not found; pass a .jsonl, .parquet or a datasets folder")
    if path.is_dir():
        return str(path), _read_datasets_folder(path, split)
    if path.suffix == ".parquet":
        return str(path), _read_parquet(path)
    if path.suffix == ".json":
        return str(path), _read_json(path)
    return str(path), [row for _, row in read_jsonl(path)]


def _read_datasets_folder(path: Path, split: str | None) -> list[dict]:
    import datasets

    try:
        ds = datasets.load_from_disk(str(path))
    except Exception as exc:  # datasets raises FileNotFoundError, JSONDecodeError, ArrowInvalid, ... for a bad folder
        raise DataError(str(path), None, None, f"not a dataset folder saved with save_to_disk ({_first_line(exc)}); "
                        "pass a .jsonl or .parquet file or such a folder") from None
    if isinstance(ds, datasets.DatasetDict):
        ds = ds[split or next(iter(ds))]
    return list(ds)


def _read_parquet(path: Path) -> list[dict]:
    import pyarrow
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path).to_pylist()
    except (pyarrow.ArrowException, OSError) as exc:
        raise DataError(str(path), None, None, f"not a readable Parquet file ({_first_line(exc)})") from None


def _read_json(path: Path) -> list:
    text = decode_utf8(path.read_bytes(), str(path))
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(str(path), None, None, f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except RecursionError:
        raise DataError(str(path), None, None, "not valid JSON here: nested too deeply") from None
    if not isinstance(data, list):
        raise DataError(str(path), None, None, "a .json file must hold a list of rows; use .jsonl for one per line")
    return data


def read_jsonl(path: str | Path) -> Iterable[tuple[int, Any]]:
    """``(line number, row)`` for each non-blank line of a JSON-lines file. A line that is not UTF-8 or not JSON
    is a :class:`DataError` naming the file and the line (every JSON-lines file a user gives kitae reads so)."""
    path = Path(path)
    with path.open("rb") as f:
        for i, raw in enumerate(f, 1):
            line = decode_utf8(raw, str(path), i)
            if not line.strip():
                continue
            try:
                yield i, json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(str(path), i, None, f"not valid JSON ({exc.msg} at column {exc.colno})") from None
            except RecursionError:
                raise DataError(str(path), i, None, "not valid JSON here: nested too deeply") from None


def decode_utf8(raw: bytes, file: str, row: int | None = None) -> str:
    """UTF-8 text (a byte order mark at the start of the file is dropped); other bytes are a DataError."""
    try:
        return raw.decode("utf-8-sig" if row in (None, 1) else "utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        where = f"line {line}: " if row is None else ""
        raise DataError(file, row, None, f"{where}not UTF-8 text (byte 0x{raw[exc.start]:02x} at byte "
                        f"{exc.start + 1}); save the file as UTF-8") from None


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__


def validate_row(row: Any, file: str, n: int, require_reference: bool = False,
                 base_dir: str | Path | None = None) -> dict:
    """A checked copy of one row, with `messages` always present and `reference_answer` a string. Image paths
    resolve against `base_dir` (the data file's folder; the current folder when None)."""
    if not isinstance(row, dict):
        raise DataError(file, n, None, f"expected a JSON object, got {type(row).__name__}")
    check_text(row, file, n)
    row = dict(row)
    if "messages" not in row:
        if isinstance(row.get("prompt"), str):
            row["messages"] = [{"role": "user", "content": row["prompt"]}]
        elif isinstance(row.get("prompt"), list):
            row["messages"] = row["prompt"]
        elif row.get("prompt") is not None:
            raise DataError(file, n, "prompt", f"is not text (got {type(row['prompt']).__name__}); give the prompt "
                            "as a string or a list of {role, content} turns")
        else:
            columns = ", ".join(_printable(str(k)) for k in row) or "none"
            raise DataError(file, n, "messages", f"missing, and no 'prompt' either (the row's columns: {columns}); "
                            "name the prompt column with data.fields: {prompt: COLUMN} (kitae eval: --field "
                            "prompt=COLUMN), or give each row 'messages' (a list of {role, content} turns) or a "
                            "'prompt' string")
    _check_messages(row["messages"], file, n)
    row["messages"], images = _with_images(row, file, n, base_dir)
    if images:
        row["images"] = images
    elif "images" in row and not row["images"]:
        del row["images"]
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


def check_text(row: dict, file: str, n: int) -> None:
    """Every string in the row (keys too, at any depth) must be encodable text: a lone surrogate is not."""
    todo: list[tuple[str, Any]] = [("", row)]
    while todo:  # a loop, not recursion: rows may nest as deep as JSON allows
        field, value = todo.pop()
        if isinstance(value, str):
            _check_string(value, file, n, field)
        elif isinstance(value, dict):
            for key, item in value.items():
                name = _printable(str(key))
                if isinstance(key, str):
                    _check_string(key, file, n, f"{field}.{name}" if field else name)
                todo.append((f"{field}.{name}" if field else name, item))
        elif isinstance(value, (list, tuple)):
            todo += [(f"{field}[{j}]", item) for j, item in enumerate(value)]


def _check_string(text: str, file: str, n: int, field: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        code = ord(text[exc.start])
        raise DataError(file, n, field, f"a lone surrogate (U+{code:04X}) at character {exc.start + 1} is not text "
                        "(a JSON \\ud800-style escape without its pair); fix or drop the row") from None


def _printable(text: str) -> str:
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _check_messages(messages: Any, file: str, n: int) -> None:
    if not isinstance(messages, list) or not messages:
        raise DataError(file, n, "messages", "expected a non-empty list of {role, content} turns")
    for j, m in enumerate(messages):
        field = f"messages[{j}]"
        if not isinstance(m, dict):
            raise DataError(file, n, field, "expected an object with 'role' and 'content'")
        if m.get("role") not in ROLES:
            raise DataError(file, n, f"{field}.role", f"got {m.get('role')!r}; use one of {', '.join(ROLES)}")
        if not isinstance(m.get("content"), (str, list)):
            raise DataError(file, n, f"{field}.content", "expected a string or a list of text and image parts")
    if messages[-1]["role"] != "user":
        raise DataError(
            file, n, f"messages[{len(messages) - 1}].role",
            "the last turn must be the user's: the model answers it (drop the assistant answer, "
            "or move it to 'reference_answer')",
        )


TEXT_PARTS = ("text", "input_text")
IMAGE_PARTS = ("image_url", "input_image", "image")


def _with_images(row: dict, file: str, n: int, base_dir: str | Path | None) -> tuple[list[dict], list[str]]:
    """(messages with each content normalized, the image references in order); see the module docstring."""
    given = row.get("images")
    if given is not None and not isinstance(given, list):
        raise DataError(file, n, "images", f"expected a list of image paths, got {type(given).__name__}")
    pending = list(given or [])  # TRL's format: {"type": "image"} placeholders take these in order
    images: list[str] = []
    messages = []
    for j, m in enumerate(row["messages"]):
        content = m["content"]
        if isinstance(content, list):
            content = _content_parts(content, file, n, f"messages[{j}].content", base_dir, pending, images)
        messages.append({**m, "content": content})
    placed = len(given or []) - len(pending)  # taken by bare {"type": "image"} parts
    if pending and (placed or not images):  # (a checked row's list repeats its parts' images: nothing left over)
        raise DataError(file, n, "images", f"{len(pending)} image(s) not placed: the messages have fewer "
                        "{\"type\": \"image\"} parts than the 'images' list has entries")
    return messages, images


def _content_parts(parts: list, file: str, n: int, field: str, base_dir, pending: list, images: list[str]):
    """One turn's content parts: a string when they are all text, else text and {type: image, image: REF}."""
    if not parts:
        raise DataError(file, n, field, "an empty list of parts; give at least one text or image part")
    out: list[dict] = []
    for k, part in enumerate(parts):
        at = f"{field}[{k}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in TEXT_PARTS:
            if not isinstance(part.get("text"), str):
                raise DataError(file, n, f"{at}.text", "expected a string")
            out.append({"type": "text", "text": part["text"]})
        elif kind in IMAGE_PARTS:
            raw, where = _image_source(part, at, pending, file, n)
            try:
                ref = resolve_ref(raw, base_dir)
                check_image(ref)
            except ImageError as exc:
                raise DataError(file, n, where, str(exc)) from None
            images.append(ref)
            out.append({"type": "image", "image": ref})
        else:
            raise DataError(file, n, f"{at}.type", f"got {kind!r}; use 'text', 'image_url' (OpenAI) or 'image' (HF)")
    if not images or all(p["type"] == "text" for p in out):
        return "".join(p["text"] for p in out)
    return out


def _image_source(part: dict, at: str, pending: list, file: str, n: int) -> tuple[Any, str]:
    """(what names the image, the field an error names) for one image part."""
    if part["type"] in ("image_url", "input_image"):
        url = part.get("image_url")
        if isinstance(url, dict):
            return url.get("url"), f"{at}.image_url.url"
        return url, f"{at}.image_url"
    for key in ("image", "url", "path"):
        if part.get(key) is not None:
            return part[key], f"{at}.{key}"
    if not pending:
        raise DataError(file, n, at, "an {\"type\": \"image\"} part without \"image\": PATH, and the row's "
                        "'images' list has no entry left for it")
    return pending.pop(0), "images"


def write_jsonl(path: str | Path, rows: Iterable[dict]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
