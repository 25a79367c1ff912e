"""Every JSON-lines file a user hands kitae is read the same way: a file that is not UTF-8 or a line that is not
JSON is a DataError naming the file and the line, never a traceback (graded rows, `kitae eval` samples,
long2short rows)."""

from __future__ import annotations

import pytest

from kitae.errors import DataError
from kitae.graders.rows import load_rows
from kitae.long2short.selection import read_samples
from kitae.long2short.train import load_rows as load_l2s_rows

GOOD_GRADE = b'{"item": {"reference_answer": "8"}, "sample": {"output_text": "8"}}\n'
GOOD_SAMPLE = (b'{"prompt_index": 0, "messages": [], "output_text": "8", "completion_tokens": 1, "passed": true,'
               b' "compliant": true}\n')
GOOD_SFT = b'{"prompt": [{"role": "user", "content": "1+1"}], "completion": [{"role": "assistant", "content": "2"}]}\n'


def _readers():
    return [
        ("graded rows", GOOD_GRADE, load_rows),
        ("eval samples", GOOD_SAMPLE, read_samples),
        ("l2s rows", GOOD_SFT, lambda p: load_l2s_rows(p, ("prompt", "completion"))),
    ]


def _latin1(good: bytes) -> bytes:
    return good.replace(b'"8"', "\"caf\u00e9\"".encode("latin-1")).replace(b'"2"', b'"\xe9"')


@pytest.mark.parametrize("name,good,read", _readers(), ids=[r[0] for r in _readers()])
@pytest.mark.parametrize("bad,said", [(_latin1, "UTF-8"), (lambda good: b"{not json\n", "not valid JSON")],
                         ids=["latin-1", "not json"])
def test_a_bad_line_is_named(tmp_path, name, good, read, bad, said):
    path = tmp_path / "rows.jsonl"
    path.write_bytes(good + bad(good) + good)
    with pytest.raises(DataError) as err:
        read(path)
    message = str(err.value)
    assert str(path) in message and "row 2" in message and said in message


@pytest.mark.parametrize("name,good,read", _readers(), ids=[r[0] for r in _readers()])
def test_good_rows_still_read(tmp_path, name, good, read):
    path = tmp_path / "rows.jsonl"
    path.write_bytes(good + b"\n" + good)
    assert read(path)


def test_a_lone_surrogate_in_a_graded_row_is_named(tmp_path):
    """JSON may escape half a character ("\\ud800"); it cannot be sent to a judge or stored, so the row is
    refused on load, as training data is, instead of failing later inside a grader."""
    path = tmp_path / "rows.jsonl"
    path.write_bytes(GOOD_GRADE + b'{"item": {"reference_answer": "8"}, "sample": {"output_text": "\\ud800"}}\n')
    with pytest.raises(DataError) as err:
        load_rows(path)
    assert "row 2" in str(err.value) and err.value.field == "sample.output_text"
