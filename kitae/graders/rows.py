"""Rows for ``kitae grade`` and ``kitae grader validate``: read, check, grade concurrently.

A row is ``{"item": {...}, "sample": {"output_text": ...}}`` (one sample) or
``{"item": {...}, "samples": [{"output_text": ...}, ...]}`` (a group). Files are JSON Lines (``.jsonl``)
or one JSON array (``.json``). A malformed row raises :class:`kitae.errors.DataError` naming file, row
(1-based) and field.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kitae.data.loader import check_text, decode_utf8, read_jsonl
from kitae.errors import DataError
from kitae.graders.base import Grade, Grader


@dataclass
class Row:
    data: dict[str, Any]  # the row as read; output rows are this plus "grade"/"grades"
    item: dict[str, Any]
    samples: list[dict[str, Any]]
    is_group: bool
    number: int  # 1-based, for messages


def load_rows(path: str | Path) -> list[Row]:
    file = Path(path)
    if not file.is_file():
        raise DataError(str(file), None, None, "no such file")
    if file.suffix == ".json":
        try:
            records = json.loads(decode_utf8(file.read_bytes(), str(file)))
        except json.JSONDecodeError as exc:
            raise DataError(str(file), None, None, f"not valid JSON: {exc}") from None
        if not isinstance(records, list):
            raise DataError(str(file), None, None, "a .json file must hold a list of rows")
        return [parse_row(r, str(file), i) for i, r in enumerate(records, 1)]
    rows = [parse_row(record, str(file), i) for i, record in read_jsonl(file)]
    if not rows:
        raise DataError(str(file), None, None, "no rows")
    return rows


def parse_row(record: Any, file: str, number: int) -> Row:
    if not isinstance(record, dict):
        raise DataError(file, number, None, "a row must be a JSON object with 'item' and 'sample' or 'samples'")
    check_text(record, file, number)
    item = record.get("item")
    if not isinstance(item, dict):
        raise DataError(file, number, "item", "missing or not an object (the dataset row: reference_answer, ...)")
    if ("sample" in record) == ("samples" in record):
        raise DataError(file, number, None, "give exactly one of 'sample' (one) or 'samples' (a group)")
    is_group = "samples" in record
    samples = record["samples"] if is_group else [record["sample"]]
    field = "samples" if is_group else "sample"
    if not isinstance(samples, list) or not samples:
        raise DataError(file, number, field, "expected a non-empty list of samples")
    for j, sample in enumerate(samples):
        where = f"{field}[{j}]" if is_group else field
        if not isinstance(sample, dict) or not isinstance(sample.get("output_text"), str):
            raise DataError(file, number, where, "expected an object with a string 'output_text'")
    return Row(data=record, item=item, samples=samples, is_group=is_group, number=number)


async def agrade_rows(grader: Grader, rows: list[Row], concurrency: int = 8) -> list[list[Grade]]:
    """Grades for every row's samples, at most ``concurrency`` groups at a time, in row order."""
    gate = asyncio.Semaphore(max(1, concurrency))

    async def one(row: Row) -> list[Grade]:
        async with gate:
            return await grader.agrade_group(row.item, row.samples)

    return list(await asyncio.gather(*(one(r) for r in rows)))


def graded_row(row: Row, grades: list[Grade]) -> dict[str, Any]:
    """The input row plus ``grade`` (one sample) or ``grades`` (a group)."""
    out = dict(row.data)
    if row.is_group:
        out["grades"] = [g.to_dict() for g in grades]
    else:
        out["grade"] = grades[0].to_dict()
    return out
