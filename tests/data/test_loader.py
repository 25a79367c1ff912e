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


# ---- hostile files: each a DataError naming file, row or line, and field --------------------------
@pytest.mark.parametrize(
    "line, field",
    [
        ('{"prompt": "bad \\ud800 here"}', "prompt"),  # a lone JSON surrogate escape
        ('{"messages": [{"role": "user", "content": "\\udfff"}]}', "messages[0].content"),
        ('{"prompt": "q", "reference_answer": "4\\ud83d"}', "reference_answer"),  # half of a surrogate pair
        ('{"prompt": "q", "meta": {"tags": ["ok", "\\ud800"]}}', "meta.tags[1]"),  # extra fields reach graders
        ('{"prompt": "q", "\\ud800": 1}', "\\ud800"),  # in a key
    ],
)
def test_lone_surrogate_names_file_row_and_field(tmp_path, line, field):
    path = _jsonl(tmp_path, [GOOD, line])
    with pytest.raises(DataError) as err:
        load_prompts(path)
    msg = str(err.value)
    assert str(path) in msg and "row 2" in msg and f"field '{field}'" in msg and "surrogate" in msg
    msg.encode("utf-8")  # the message itself is printable


def test_surrogate_pair_escapes_are_fine(tmp_path):
    rows = load_prompts(_jsonl(tmp_path, ['{"prompt": "\\ud83d\\ude00"}']))
    assert rows[0]["messages"][0]["content"] == "😀"


def test_lone_surrogate_in_an_in_memory_dataset():
    rows = _Rows(["prompt"], [{"prompt": "a"}, {"prompt": "b\ud800"}])  # Arrow cannot hold one; Python objects can
    with pytest.raises(DataError, match="row 2, field 'prompt': a lone surrogate"):
        load_prompts(rows)


class _Rows(list):
    """An in-memory dataset as load_prompts sees one (column_names and iteration)."""

    def __init__(self, columns, rows):
        super().__init__(rows)
        self.column_names = columns


def test_non_utf8_jsonl_names_the_line(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_bytes(b'{"prompt": "ok"}\n\n{"prompt": "caf\xe9"}\n')
    with pytest.raises(DataError) as err:
        load_prompts(path)
    msg = str(err.value)
    assert str(path) in msg and "row 3" in msg and "UTF-8" in msg and "0xe9" in msg


def test_non_utf8_and_broken_json_file(tmp_path):
    path = tmp_path / "d.json"
    path.write_bytes(b'[{"prompt": "ok"},\n {"prompt": "caf\xe9"}]')
    with pytest.raises(DataError, match="line 2: not UTF-8"):
        load_prompts(path)
    path.write_text('[{"prompt": "ok"},\n {"prompt": ]')
    with pytest.raises(DataError, match="not valid JSON .* line 2"):
        load_prompts(path)


def test_utf8_bom_is_accepted(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"prompt": "ok"}\n')
    assert load_prompts(path)[0]["messages"][0]["content"] == "ok"


def test_deeply_nested_json_row(tmp_path):
    path = _jsonl(tmp_path, [GOOD, '{"prompt": "q", "x": ' + "[" * 100_000 + "]" * 100_000 + "}"])
    with pytest.raises(DataError, match="row 2: .*nested too deeply"):
        load_prompts(path)


def test_garbage_parquet_and_datasets_folder(tmp_path):
    path = tmp_path / "d.parquet"
    path.write_bytes(b"this is not a parquet file at all")
    with pytest.raises(DataError) as err:
        load_prompts(path)
    assert str(path) in str(err.value) and "not a readable Parquet file" in str(err.value)
    folder = tmp_path / "ds"
    folder.mkdir()
    (folder / "state.json").write_text("{broken")
    with pytest.raises(DataError) as err:
        load_prompts(folder)
    assert str(folder) in str(err.value) and "save_to_disk" in str(err.value)
