"""Reading judge replies: tolerant about the wrapping, strict about entries, criteria and ranges."""

from __future__ import annotations

import json

import pytest

from kitae.judge.parse import JudgeOutputError, canonical_id, extract_json, parse_judgement

IDS = ["S1", "S2"]
CRIT = ["correctness", "tone"]


def entry(c, t, reason="ok"):
    return {"reason": reason, "correctness": c, "tone": t}


GOOD = json.dumps({"S1": entry(5, 4), "S2": entry(1, 2)})


@pytest.mark.parametrize(
    "text",
    [
        GOOD,  # the schema's shape
        f"```json\n{GOOD}\n```",  # fenced
        f"Thought process: S1 is right.\n{GOOD}\nDone.",  # prose around it
        json.dumps({"scores": {"S1": entry(5, 4), "S2": entry(1, 2)}}),  # one wrapper key
        json.dumps([{"id": "S2", **entry(1, 2)}, {"id": "s1", **entry(5, 4)}]),  # a list with ids, any order
        json.dumps({"Sample 1": entry(5, 4), "2": entry(1, 2)}),  # ids written differently
        json.dumps({"S1": {"reason": "ok", "Correctness": "5", "TONE": 4.0}, "S2": entry(1, 2)}),  # case, strings
        json.dumps({"S1": {"reason": "ok", "scores": {"correctness": 5, "tone": 4}}, "S2": entry(1, 2)}),  # nested
    ],
)
def test_tolerant_reading(text):
    got = parse_judgement(text, IDS, CRIT, (1, 5))
    assert {k: v.values for k, v in got.items()} == {"S1": {"correctness": 5.0, "tone": 4.0},
                                                     "S2": {"correctness": 1.0, "tone": 2.0}}


@pytest.mark.parametrize(
    "text, kind",
    [
        ("I think S1 is better.", "not_json"),
        ('{"S1": {"correctness": 5', "not_json"),  # cut off
        (json.dumps({"S1": entry(5, 4)}), "wrong_entries"),  # one entry for two samples
        (json.dumps({"S1": entry(5, 4), "S2": entry(1, 2), "S3": entry(3, 3)}), "wrong_entries"),  # one too many
        (json.dumps([{"id": "S1", **entry(5, 4)}, {"id": "S1", **entry(1, 2)}]), "wrong_entries"),  # repeated id
        (json.dumps({"S1": {"reason": "x", "correctness": 5}, "S2": entry(1, 2)}), "missing_criterion"),
        (json.dumps({"S1": "great", "S2": entry(1, 2)}), "missing_criterion"),  # not an object
        (json.dumps({"S1": entry("high", 4), "S2": entry(1, 2)}), "not_a_number"),
        (json.dumps({"S1": entry(True, 4), "S2": entry(1, 2)}), "not_a_number"),  # a boolean is no score
        (json.dumps({"S1": entry(9, 4), "S2": entry(1, 2)}), "out_of_range"),
        (json.dumps({"S1": entry(5, 0), "S2": entry(1, 2)}), "out_of_range"),
    ],
)
def test_strict_checks(text, kind):
    with pytest.raises(JudgeOutputError) as err:
        parse_judgement(text, IDS, CRIT, (1, 5))
    assert err.value.kind == kind


@pytest.mark.parametrize("key, expected", [("S3", "S3"), ("s12", "S12"), ("Sample 2", "S2"), ("sample_4", "S4"),
                                           ("7", "S7"), ("reason", None), ("S", None)])
def test_canonical_ids(key, expected):
    assert canonical_id(key) == expected


def test_reason_is_kept_and_cut():
    text = json.dumps({"S1": entry(5, 4, "x" * 500), "S2": {"explanation": " short ", "correctness": 1, "tone": 1}})
    got = parse_judgement(text, IDS, CRIT, (1, 5), max_reason_chars=10)
    assert (got["S1"].reason, got["S2"].reason) == ("x" * 10, "short")


def test_extract_json_skips_braces_that_are_not_json():
    assert extract_json('Scores {not json} then {"a": 1}') == {"a": 1}
