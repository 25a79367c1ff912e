"""A run.db edited by hand (tests/store/damaged.py) answers the run page with a 409 whose JSON error names the file,
table, row, column and the repair, and the page shows that message; never a 500. The rest of the run (routes that
do not read the damaged cell) still answers. Real HTTP on loopback, real SQLite, real Chromium."""

from __future__ import annotations


import pytest

from tests.store.damaged import DAMAGES, damage

RUN = "finished-run"


def routes(http) -> list[str]:
    return ["/api/runs", f"/api/runs/{RUN}", f"/api/runs/{RUN}/metrics", f"/api/runs/{RUN}/steps",
            f"/api/runs/{RUN}/groups?step=3&order=step", f"/api/runs/{RUN}/evals", f"/api/runs/{RUN}/evals/10",
            f"/api/runs/{RUN}/label_queue", f"/api/runs/{RUN}/agreement", f"/api/runs/{RUN}/labeled.jsonl"]


@pytest.fixture
def group_3(serve, runs_dir) -> int:
    """The id of step 3's group 0 (the one the damaged sample and messages belong to), read before the damage."""
    http = serve(runs_dir).http
    return next(g["id"] for g in http.get(f"/api/runs/{RUN}/groups?step=3&order=step").json()["groups"]
                if g["group_index"] == 0)


@pytest.mark.parametrize("case", DAMAGES, ids=lambda c: c.id)
def test_every_route_answers_with_the_damaged_cell_never_500(serve, fresh_runs, group_3, case):
    where = damage(fresh_runs / RUN, case)
    http = serve(fresh_runs).http
    answers = {path: http.get(path) for path in [*routes(http), f"/api/runs/{RUN}/groups/{group_3}",
                                                  f"/api/runs/{RUN}/prompt/{group_3}"]}
    refused = {path: r.json()["error"] for path, r in answers.items() if r.status_code != 200}
    assert {answers[p].status_code for p in refused} <= {409}, {p: answers[p].status_code for p in refused}
    assert refused, "no route met the damage: the test would prove nothing"
    for path, error in refused.items():
        assert error.startswith(f"{fresh_runs / RUN / 'run.db'}: {where}") and "restore run.db" in error, (path, error)
    assert answers["/api/runs"].status_code == 200  # the runs list shows the run, marked when it is unreadable
    [listed] = [r for r in answers["/api/runs"].json()["runs"] if r["name"] == RUN]
    assert (listed["status"] == "unreadable") == ("list" in case.shown_by)


def test_the_page_shows_the_damaged_cell(serve, fresh_runs, browser):
    case = next(c for c in DAMAGES if c.id == "config-not-json")
    where = damage(fresh_runs / RUN, case)
    s = serve(fresh_runs)
    ctx = browser.new_context()
    page = ctx.new_page()
    failures: list[str] = []  # uncaught script errors; the 409 itself is logged by Chromium and expected
    page.on("pageerror", lambda exc: failures.append(str(exc)))
    try:
        page.goto(s.url + f"#/run/{RUN}")
        box = page.wait_for_selector("div.error", timeout=15_000)
        assert box.text_content().startswith(f"{fresh_runs / RUN / 'run.db'}: {where}")
        page.goto(s.url + "#/")  # the runs list still lists it
        page.wait_for_selector(f'tr[data-run="{RUN}"]', timeout=15_000)
    finally:
        ctx.close()
    assert not failures
