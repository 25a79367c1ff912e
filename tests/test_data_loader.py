"""Dataset loading and the errors people see for bad rows."""

from __future__ import annotations

import json

import pytest

from kitae.data.loader import load_prompts, write_jsonl
from kitae.errors import DataError

GOOD = {"messages": [{"role": "user", "content": "12+35は？"}], "reference_answer": 47, "lang": "ja"}


def _jsonl(tmp_path, rows, name="d.jsonl"):
    p = tmp_path / name
    p.write_text("\n".join(r if isinstance(r, str) else json.dumps(r, ensure_ascii=False) for r in rows) + "\n")
    return p


def test_loads_jsonl_and_normalizes_reference_to_string(tmp_path):
    rows = load_prompts(_jsonl(tmp_path, [GOOD, {"prompt": "What is 2+2?", "reference_answer": "4"}]))
    assert rows[0]["reference_answer"] == "47"
    assert rows[1]["messages"] == [{"role": "user", "content": "What is 2+2?"}]


def test_loads_parquet_and_datasets_folder(tmp_path):
    import datasets

    ds = datasets.Dataset.from_list([{"prompt": "a?", "reference_answer": "1"}, {"prompt": "b?", "reference_answer": "2"}])
    ds.to_parquet(str(tmp_path / "d.parquet"))
    ds.save_to_disk(str(tmp_path / "ds"))
    for src in (tmp_path / "d.parquet", tmp_path / "ds", ds):
        assert [r["reference_answer"] for r in load_prompts(src)] == ["1", "2"]


@pytest.mark.parametrize(
    "row, expected",
    [
        ('{"messages": [', "row 2: not valid JSON"),  # broken line
        ("[1, 2]", "row 2: expected a JSON object"),
        ({"reference_answer": "1"}, "row 2, field 'messages': missing"),
        ({"messages": []}, "row 2, field 'messages': expected a non-empty list"),
        ({"messages": [{"role": "bot", "content": "x"}]}, "field 'messages[0].role': got 'bot'; use one of"),
        ({"messages": [{"role": "user", "content": 3}]}, "field 'messages[0].content': expected a string"),
        (
            {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]},
            "field 'messages[1].role': the last turn must be the user's",
        ),
        ({"prompt": "q", "reference_answer": {"a": 1}}, "field 'reference_answer': expected a string or number"),
        ({"prompt": "q", "lang": ["ja"]}, "field 'lang': expected a string label"),
    ],
)
def test_bad_rows_name_file_row_and_field(tmp_path, row, expected):
    path = _jsonl(tmp_path, [GOOD, row])
    with pytest.raises(DataError) as err:
        load_prompts(path)
    assert str(path) in str(err.value)
    assert expected in str(err.value)


def test_missing_reference_is_an_error_only_when_required(tmp_path):
    path = _jsonl(tmp_path, [{"prompt": "q"}])
    assert load_prompts(path)[0].get("reference_answer") is None
    with pytest.raises(DataError, match="row 1, field 'reference_answer': missing"):
        load_prompts(path, require_reference=True)


def test_missing_file_and_empty_file(tmp_path):
    with pytest.raises(DataError, match="file not found"):
        load_prompts(tmp_path / "nope.jsonl")
    (tmp_path / "e.jsonl").write_text("\n")
    with pytest.raises(DataError, match="no rows"):
        load_prompts(tmp_path / "e.jsonl")


def test_write_jsonl_round_trip(tmp_path):
    write_jsonl(tmp_path / "out" / "x.jsonl", [GOOD])
    assert load_prompts(tmp_path / "out" / "x.jsonl")[0]["messages"] == GOOD["messages"]
