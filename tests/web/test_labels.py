"""Your labels (runs/NAME/labels.jsonl) and the grader's agreement with them, computed by the same code as
`kitae grader validate`. At step s, group 0 has grader rewards [0, s/30, 1, 0.5] (tests/web/runs.py)."""

from __future__ import annotations

import json
import sqlite3

import pytest

from kitae.errors import DataError
from kitae.store import RunStore
from kitae.web.labels import LABELS_FILE, Label, append_labels, label_agreement, read_labels


def group_id(http, step: int, index: int = 0) -> int:
    groups = http.get(f"/api/runs/finished-run/groups?step={step}&order=step").json()["groups"]
    return next(g["id"] for g in groups if g["group_index"] == index)


def post(http, labels, status=200):
    r = http.post("/api/runs/finished-run/labels", json={"labels": labels})
    assert r.status_code == status, r.text
    return r.json()


def label_group(http, step: int, scores: list[int]) -> None:
    gid = group_id(http, step)
    post(http, [{"group_id": gid, "sample_index": i, "score": v} for i, v in enumerate(scores)])


def test_one_group_with_one_swapped_pair(serve, fresh_runs):
    http = serve(fresh_runs).http
    # grader [0, 1/30, 1, 0.5] ranks [1, 2, 4, 3]; you score [2, 1, 5, 3], ranks [2, 1, 4, 3]
    label_group(http, 1, [2, 1, 5, 3])
    r = http.get("/api/runs/finished-run/agreement").json()
    a = r["agreement"]
    assert r["labels"] == 4 and a["n_samples"] == 4 and a["pairs"] == 6
    assert a["pairwise"] == pytest.approx(5 / 6)  # every pair but (0, 1) in the grader's order
    assert a["spearman"] == pytest.approx(0.8)  # 1 - 6 * (1 + 1) / (4 * 15)
    assert a["kendall"] == pytest.approx(4 / 6)  # (5 concordant - 1 discordant) / 6
    [worst] = r["worst"]
    assert (worst["step"], worst["better"]["sample_index"], worst["worse"]["sample_index"]) == (1, 0, 1)
    assert worst["severity"] == pytest.approx((2 - 1) / 4 + (1 / 30 - 0) / 1)  # rescaled human gap + grader gap
    assert worst["better"]["text"] == "step 1: 2+2 is 3"
    assert r["verdict"].startswith("INCONCLUSIVE: too few labels to trust: 4, need 30 (pairwise agreement 0.83, "
                                   "95% interval 0.36 to 0.98 from 4 labels")  # Wilson's interval of 5/6 on 4


def test_two_agreeing_groups_are_too_few_to_trust(serve, fresh_runs):
    """8 labels in perfect agreement were called GOOD, "fine for a long run", while `kitae grader lint` called them
    too few to trust: one verdict now, with its interval."""
    http = serve(fresh_runs).http
    label_group(http, 1, [1, 2, 5, 3])
    label_group(http, 2, [1, 2, 5, 3])
    r = http.get("/api/runs/finished-run/agreement").json()
    # across groups the ranks are human [1.5, 3.5, 7.5, 5.5] * 2 and grader [1.5, 3, 7.5, 5.5, 1.5, 4, 7.5, 5.5]:
    # Spearman 40 / sqrt(40 * 40.5)
    assert r["agreement"]["pairwise"] == 1.0
    assert r["agreement"]["spearman"] == pytest.approx(40 / (40 * 40.5) ** 0.5)
    # Wilson's interval of 1.0 on 8 labels: 8 / (8 + z²) = 0.68 to 1
    assert r["verdict"] == ("INCONCLUSIVE: too few labels to trust: 8, need 30 (pairwise agreement 1.00, 95% interval "
                            "0.68 to 1.00 from 8 labels; Spearman 0.99); label more before a long run")
    assert r["min_labels"] == 30


def test_eight_agreeing_groups_are_good(serve, fresh_runs):
    http = serve(fresh_runs).http
    for step in range(1, 9):
        label_group(http, step, [1, 2, 5, 3])
    r = http.get("/api/runs/finished-run/agreement").json()
    assert r["labels"] == 32 and r["agreement"]["pairwise"] == 1.0
    # Wilson's interval of 1.0 on 32 labels: 32 / (32 + z²) = 0.89 to 1
    assert r["verdict"].startswith("GOOD: the grader ranks answers like you (pairwise agreement 1.00, 95% interval "
                                   "0.89 to 1.00 from 32 labels"), r["verdict"]


def test_a_component_can_stand_for_the_grader(serve, fresh_runs):
    http = serve(fresh_runs).http
    label_group(http, 1, [1, 2, 5, 3])
    # accuracy is 1 when the reward is at least 0.5: [0, 0, 1, 1]; pairs (0,1) and (2,3) tie for the grader
    a = http.get("/api/runs/finished-run/agreement?grader=accuracy").json()["agreement"]
    assert (a["pairs"], a["grader_ties"], a["pairwise"]) == (6, 2, pytest.approx(5 / 6))


def test_labels_go_to_the_sidecar_file_never_to_run_db(serve, fresh_runs):
    http = serve(fresh_runs).http
    db = fresh_runs / "finished-run" / "run.db"
    tables = sqlite3.connect(db).execute("SELECT name FROM sqlite_master ORDER BY name").fetchall()
    gid = group_id(http, 3)
    assert post(http, [{"group_id": gid, "sample_index": 2, "score": 4}])["saved"] == 1
    lines = (fresh_runs / "finished-run" / LABELS_FILE).read_text().splitlines()
    [row] = [json.loads(line) for line in lines]
    assert (row["step"], row["group_index"], row["sample_index"], row["score"]) == (3, 0, 2, 4)
    assert sqlite3.connect(db).execute("SELECT name FROM sqlite_master ORDER BY name").fetchall() == tables
    # a later label replaces it, null removes it
    post(http, [{"group_id": gid, "sample_index": 2, "score": 1}])
    assert [l["score"] for l in http.get("/api/runs/finished-run/labels").json()["labels"]] == [1]
    post(http, [{"group_id": gid, "sample_index": 2, "score": None}])
    assert http.get("/api/runs/finished-run/labels").json()["labels"] == []


@pytest.mark.parametrize("item, message", [
    ({"group_id": "7", "sample_index": 0, "score": 3}, "field 'labels[0].group_id'"),
    ({"group_id": 999999, "sample_index": 0, "score": 3}, "run has no group 999999"),
    ({"group_id": 1, "sample_index": 4, "score": 3}, "field 'labels[0].sample_index': expected 0..3, got 4"),
    ({"group_id": 1, "sample_index": 0, "score": "good"}, "field 'score': expected a number"),
    ({"group_id": 1, "sample_index": 0, "score": True}, "field 'score': expected a number"),
])
def test_bad_labels_are_refused_with_the_field(serve, fresh_runs, item, message):
    http = serve(fresh_runs).http
    assert message in post(http, [item], 400)["error"]
    assert not (fresh_runs / "finished-run" / LABELS_FILE).exists()


def test_a_label_for_a_prompt_no_longer_there_is_ignored(fresh_runs):
    run = fresh_runs / "finished-run"
    append_labels(run, [Label(1, 0, 0, 5.0, prompt_key="0000000000000000"), Label(1, 0, 1, 1.0)])
    with RunStore.open(run) as store:
        r = label_agreement(store)
    assert r["labels"] == 1  # the label without prompt_key counts; the one for another prompt does not


def test_a_broken_line_names_file_and_row(fresh_runs):
    path = fresh_runs / "finished-run" / LABELS_FILE
    path.write_text('{"step": 1, "group_index": 0, "sample_index": 0, "score": 2}\n{"step": -1}\n')
    with pytest.raises(DataError) as err:
        read_labels(path.parent)
    assert str(err.value) == f"{path}, row 2, field 'step': expected a whole number >= 0, got -1"


def test_labeled_groups_download_as_grader_validate_data(serve, fresh_runs, tmp_path):
    from kitae.graders import build_grader
    from kitae.graders.agreement import validate
    from kitae.graders.rows import load_rows

    http = serve(fresh_runs).http
    label_group(http, 1, [2, 1, 5, 3])
    r = http.get("/api/runs/finished-run/labeled.jsonl")
    assert r.headers["content-disposition"] == 'attachment; filename="finished-run-labeled.jsonl"'
    path = tmp_path / "labeled.jsonl"
    path.write_bytes(r.content)
    [row] = load_rows(path)  # the parser of `kitae grader validate`
    assert row.item["reference_answer"] == "4" and row.item["messages"][0]["content"] == "what is 2+2?"
    assert [s["human_score"] for s in row.samples] == [2, 1, 5, 3]
    # a numeric grader on the same labels: "step 1: 2+2 is 3/4/5/6" against reference 4 scores [0, 1, 0, 0];
    # you scored [2, 1, 5, 3]: it reverses the 3 pairs with sample 1 and ties the other 3 -> 1.5 / 6
    report = validate(build_grader({"type": "numeric"}), [row])
    assert report.agreement.n_samples == 4
    assert report.agreement.pairwise == pytest.approx(0.25)
