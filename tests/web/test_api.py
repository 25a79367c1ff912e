"""The JSON endpoints, over real HTTP on a loopback port, against runs written by the real run store.

Expected numbers follow tests/web/runs.py: reward at step s is s/100, kl s/1000, eval pass@1 0.3 + s/100;
at step s, group 0 has rewards [0, s/30, 1, 0.5], group 1 [1, 1, 1, 1], group 2 [0.25, 0.75, None, 0.25].
"""

from __future__ import annotations

import pytest

from tests.plugins.run_page import Served
from tests.web.runs import JUDGE_REASON, SAME_PROMPT, UNTRUSTED


@pytest.fixture(scope="module")
def http(runs_dir):
    served = Served(runs_dir)  # read-only tests share one server
    yield served.http
    served.close()


def get(http, path, status=200):
    r = http.get(path)
    assert r.status_code == status, r.text
    return r.json()


def test_runs_list(http):
    runs = {r["name"]: r for r in get(http, "/api/runs")["runs"]}
    assert set(runs) == {"finished-run", "crashed-run"}
    f, c = runs["finished-run"], runs["crashed-run"]
    assert (f["status"], f["model"], f["steps"]) == ("finished", "tiny-llama", 30)
    assert (f["reward"], f["eval_score"]) == (0.30, 0.6)
    assert (c["status"], c["steps"], c["reward"], c["eval_score"]) == ("crashed", 12, 0.12, pytest.approx(0.4))


def test_summary_has_panels_for_the_run_keys(http):
    s = get(http, "/api/runs/finished-run")
    assert s["status"] == "finished" and s["steps"] == 30
    assert {"reward", "kl", "eval/pass@1", "eval/compliance", "eval/len_mean"} <= set(s["keys"])
    panels = {p["name"]: p for p in s["panels"]}
    assert panels["reward"]["left"] == ["reward", "reward/accuracy", "reward/judge"]
    assert (panels["kl"]["left"], panels["kl"]["right"]) == (["kl"], ["kl_coef"])
    assert panels["eval/len_mean"]["left"] == ["eval/len_mean"] and panels["eval/len_mean"]["group"] == "eval"
    assert panels["judge_tokens"]["left"] == ["grader/judge/judge_tokens"]
    assert s["orders"] == ["worst", "step", "variance"]


@pytest.mark.parametrize("query, expected", [
    # the last three steps of two series (a poll with since = 28)
    ("since=28&keys=reward,kl",
     {"reward": [[28, 0.28], [29, 0.29], [30, 0.30]], "kl": [[28, 0.028], [29, 0.029], [30, 0.03]]}),
    # len_mean = 100 + s, a straight line (exact in floats): downsampled to 3 points it keeps both ends and,
    # every triangle being flat, the first point of the one bucket
    ("points=3&keys=len_mean", {"len_mean": [[1, 101.0], [2, 102.0], [30, 130.0]]}),
])
def test_metrics(http, query, expected):
    res = get(http, f"/api/runs/finished-run/metrics?{query}")
    assert res["series"] == expected
    assert res["last_step"] == 30 and res["status"] == "finished"
    assert res["downsampled"] == (["len_mean"] if "points=3" in query else [])


def test_metrics_come_with_every_eval_whatever_since_says(http):
    res = get(http, "/api/runs/finished-run/metrics?since=25&keys=eval/pass@1")
    assert res["series"] == {}
    assert res["evals"] == {"eval/pass@1": [[0, 0.3], [10, 0.4], [20, 0.5], [30, pytest.approx(0.6)]]}


@pytest.mark.parametrize("query, total, expected", [
    # step 30 worst first: group 2 (mean 0.4167), group 0 (0.625), group 1 (1.0)
    ("step=30&order=worst", 3, [(30, 2, 0.41667), (30, 0, 0.625), (30, 1, 1.0)]),
    # zero variance: group 1 of every step, newest first; page 2 of 20 holds steps 10..1
    ("filter=zero_variance&order=step&limit=20&offset=20", 30, [(s, 1, 1.0) for s in range(10, 0, -1)]),
    # truncated: group 2 of every step, first page of 2
    ("filter=truncated&order=step&limit=2", 30, [(30, 2, 0.41667), (29, 2, 0.41667)]),
])
def test_groups_pages(http, query, total, expected):
    res = get(http, f"/api/runs/finished-run/groups?{query}")
    assert res["total"] == total
    got = [(g["step"], g["group_index"], round(g["reward_mean"], 5)) for g in res["groups"]]
    assert got == expected
    assert all(g["samples"] == [] for g in res["groups"])  # a page of groups stays small


def test_one_group_with_samples_scores_criteria_and_reasons(http):
    [row] = get(http, "/api/runs/finished-run/groups?step=30&order=step&limit=1")["groups"]
    g = get(http, f"/api/runs/finished-run/groups/{row['id']}")
    assert (g["prompt"], g["reference"], g["n_samples"]) == (SAME_PROMPT, "4", 4)
    s = g["samples"][1]
    assert s["text"] == UNTRUSTED  # stored and served as plain data; the page shows it as text
    assert s["scores"] == {"accuracy": 1.0, "judge": 1.0}
    assert s["sub_scores"] == {"judge": {"correctness": 1.0, "clarity": 1.0}}
    assert s["reasons"]["judge"] == JUDGE_REASON
    assert [x["advantage"] for x in g["samples"]] == [-0.5, 0.5, 0.5, 0.0]


def test_prompt_history_pages_oldest_first_and_plots_every_step(http):
    [row] = get(http, "/api/runs/finished-run/groups?step=30&order=step&limit=1")["groups"]
    res = get(http, f"/api/runs/finished-run/prompt/{row['id']}?limit=5")
    assert res["prompt"] == SAME_PROMPT and res["total"] == 30
    assert [g["step"] for g in res["groups"]] == [1, 2, 3, 4, 5]
    assert all(len(g["samples"]) == 4 for g in res["groups"])
    assert res["rewards"][:2] == [[1, pytest.approx((0 + 1 / 30 + 1 + 0.5) / 4)],
                                  [2, pytest.approx((0 + 2 / 30 + 1 + 0.5) / 4)]]
    assert len(res["rewards"]) == 30


def test_evals(http):
    evals = get(http, "/api/runs/finished-run/evals")["evals"]
    assert [(e["step"], e["score"]) for e in evals] == [(0, 0.3), (10, 0.4), (20, 0.5), (30, pytest.approx(0.6))]


def test_label_queue_starts_with_the_widest_spread(http):
    # group 0 of step 30, rewards [0, 1, 1, 0.5]: std 0.4146, wider than step 1's [0, 1/30, 1, 0.5] (0.4072)
    res = get(http, "/api/runs/finished-run/label_queue")
    assert (res["group"]["step"], res["group"]["group_index"], res["position"]) == (30, 0, 0)
    nxt = get(http, "/api/runs/finished-run/label_queue?after=0")
    assert nxt["position"] == 1 and (nxt["group"]["step"], nxt["group"]["group_index"]) != (30, 0)


@pytest.mark.parametrize("path, status, message", [
    ("/api/runs/finshed-run", 404, "did you mean 'finished-run'"),
    ("/api/runs/finished-run/groups?order=wrost", 400, "did you mean 'worst'"),
    ("/api/runs/finished-run/groups?filter=zero", 400, "unknown group filter 'zero'"),
    ("/api/runs/finished-run/groups?limit=lots", 400, "query parameter 'limit': expected a whole number"),
    ("/api/runs/finished-run/groups?limit=100000", 400, "out of range"),
    ("/api/runs/finished-run/groups/999999", 404, "has no group 999999"),
    ("/api/runs/finished-run/nothing", 404, "no API endpoint"),
    # a metric key the run never logged is named, with the run's keys closest to it (not an empty series)
    ("/api/runs/finished-run/metrics?keys=pass@1", 404, "unknown metric key 'pass@1'; close: eval/pass@1"),
    ("/api/runs/finished-run/metrics?keys=reward,rewrad", 404, "unknown metric key 'rewrad'; close: reward"),
    ("/api/runs/finished-run/metrics?keys=zzzz", 404, "unknown metric key 'zzzz'; this run has"),
])
def test_errors_say_what_is_wrong(http, path, status, message):
    assert message in get(http, path, status)["error"]
