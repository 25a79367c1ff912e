"""Values the store must take without breaking: NaN and infinities (JSON has neither) and text that is not
valid Unicode (a lone surrogate, which SQLite cannot encode as UTF-8). Checked in a real run.db with SQLite's
own json_extract / json_valid, as docs/run_store.md tells people to query it."""

from __future__ import annotations

import json
import math
import sqlite3

import pytest

from kitae.store import GroupRecord, RunStore, SampleRecord
from kitae.store.records import prompt_key, to_json

NAN, INF = float("nan"), float("inf")
LONE = "\ud800"  # a lone surrogate: str can hold it, UTF-8 cannot encode it
JSON_COLUMNS = {"run": ["config", "summary"], "groups": ["messages", "item"],
                "samples": ["scores", "reasons", "sub_scores", "errors"], "evals": ["metrics"],
                "eval_samples": ["data"]}


def raw(store: RunStore) -> sqlite3.Connection:
    return sqlite3.connect(store.run_dir / "run.db")


@pytest.mark.parametrize(
    "value, text",
    [
        ({"a": NAN, "b": [INF, -INF, 1.5], "c": {"d": NAN}}, '{"a": null, "b": [null, null, 1.5], "c": {"d": null}}'),
        ((1, NAN), "[1, null]"),
        ({"ok": 0.25, "n": 3, "s": "x"}, '{"ok": 0.25, "n": 3, "s": "x"}'),
    ],
)
def test_to_json_writes_non_finite_numbers_as_null(value, text):
    assert to_json(value) == text
    json.loads(text)  # valid JSON for every reader, not only Python's


def test_nan_and_infinity_become_null_and_json_extract_works(store):
    sample = SampleRecord(
        text="a", completion_tokens=1, finish_reason="stop", reward=None, advantage=0.0,
        scores={"quality": NAN, "judge": INF}, reasons={"quality": None},
        sub_scores={"quality": {"rm_score": NAN, "length_factor": 1.0}, "judge": {"tone": -INF}},
        errors={"quality": "reward model returned nan, not a finite number"},
    )
    group = GroupRecord("q", [{"role": "user", "content": "q"}], "1", {"weight": NAN}, [sample], 0)
    store.log_groups(1, [group])
    store.log_eval(1, {"score": INF, "accuracy": 0.5}, [{"score": NAN, "sub": [INF]}])
    store.finish("crashed", {"status": "crashed", "reward": NAN})
    con = raw(store)
    for table, columns in JSON_COLUMNS.items():
        for column in columns:
            bad = con.execute(f"SELECT count(*) FROM {table} WHERE NOT json_valid({column})").fetchone()[0]
            assert bad == 0, f"{table}.{column}"
    row = con.execute("SELECT json_extract(sub_scores, '$.quality.rm_score'), json_extract(sub_scores, "
                      "'$.quality.length_factor'), json_extract(scores, '$.judge') FROM samples").fetchone()
    assert row == (None, 1.0, None)
    assert con.execute("SELECT json_extract(metrics, '$.accuracy') FROM evals").fetchone()[0] == 0.5
    assert store.samples(store.groups()[0].id)[0].sub_scores == {"quality": {"rm_score": None, "length_factor": 1.0},
                                                                  "judge": {"tone": None}}
    con.close()


def test_text_with_lone_surrogates_is_stored_with_replacement_characters(tmp_path):
    """A grader's error text (or a completion, a reason, a prompt) with a lone surrogate once made SQLite raise
    UnicodeEncodeError and the run died; now each surrogate is stored as U+FFFD and the rest is kept."""
    store = RunStore.create(tmp_path / "runs" / "r", name="r" + LONE, config={"note": LONE}, model="m" + LONE)
    sample = SampleRecord(
        text="47" + LONE, completion_tokens=2, finish_reason="stop", reward=1.0, advantage=0.0,
        scores={"judge" + LONE: 1.0}, reasons={"judge": "ok" + LONE},
        sub_scores={"judge": {"t" + LONE: 1.0}}, errors={"python": "ValueError: bad \udc80 byte"},
    )
    group = GroupRecord("what" + LONE, [{"role": "user", "content": "what" + LONE}], "47" + LONE,
                        {"tag": LONE}, [sample], 0)
    store.log_groups(1, [group])
    store.log_metrics(1, {"grader/judge" + LONE + "/error_rate": 0.5})
    store.log_eval(1, {"score": 1.0}, [{"output_text": LONE}])
    store.finish("crashed", {"error": "grader failed: " + LONE})

    g = store.groups(with_samples=True)[0]
    s = g.samples[0]
    assert (g.prompt, g.reference, g.messages[0]["content"], g.item) == ("what\ufffd", "47\ufffd", "what\ufffd",
                                                                         {"tag": "\ufffd"})
    assert (s.text, s.reasons["judge"], s.errors["python"]) == ("47\ufffd", "ok\ufffd", "ValueError: bad \ufffd byte")
    assert s.scores == {"judge\ufffd": 1.0} and s.sub_scores == {"judge": {"t\ufffd": 1.0}}
    assert store.metric_keys() == ["grader/judge\ufffd/error_rate"]
    assert store.eval_samples(1) == [{"output_text": "\ufffd"}]
    summary = store.summary()
    assert (summary["name"], summary["model"], summary["config"]) == ("r\ufffd", "m\ufffd", {"note": "\ufffd"})
    assert summary["final"] == {"error": "grader failed: \ufffd"}
    assert g.prompt and prompt_key("what" + LONE) == prompt_key("what\ufffd")  # the same prompt across steps
    con = raw(store)
    key = prompt_key("what\ufffd")
    assert con.execute("SELECT count(*) FROM groups WHERE prompt_key = ?", (key,)).fetchone()[0] == 1
    con.close()
    store.close()


def test_valid_text_is_stored_unchanged(store):
    text = "東京です。😀 \u00e9 \U0001f600 <|im_end|>"  # non-ASCII, astral-plane emoji: nothing to replace
    sample = SampleRecord(text, 5, "stop", 1.0, 0.0, {"a": 1.0}, {"a": text}, {}, {"a": None})
    store.log_groups(1, [GroupRecord(text, [{"role": "user", "content": text}], text, {"t": text}, [sample], 0)])
    g = store.groups(with_samples=True)[0]
    assert (g.prompt, g.reference, g.item["t"], g.samples[0].text, g.samples[0].reasons["a"]) == (text,) * 5
    assert not math.isnan(g.reward_mean)
