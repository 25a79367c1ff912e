"""The run page in a real browser: headless Chromium (Debian's package) driven by Playwright.

Screenshots land in test-artifacts/web/. Skipped, with the reason, where playwright or chromium is missing.
Numbers follow tests/web/runs.py (30 steps, evals at 0, 10, 20, 30; step 30's group 0 holds UNTRUSTED).
"""

from __future__ import annotations

import json

import pytest

from tests.plugins.run_page import screenshot
from tests.web.runs import CRITERIA, JUDGE_REASON, UNTRUSTED, LiveRun


def points(page, panel: str, key: str) -> int:
    path = page.locator(f'.panel[data-panel="{panel}"] path.series[data-key="{key}"]')
    return int(path.get_attribute("data-points"))


def then_rendered(page, action) -> None:
    """Do `action` (a click that changes the page) and wait until the new page is drawn."""
    before = int(page.evaluate("() => document.body.dataset.rendered || 0"))
    action()
    page.wait_for_function("n => Number(document.body.dataset.rendered || 0) > n", arg=before)


def open_group(page, url: str, step: int, index: int) -> None:
    page.goto(url + f"#/run/finished-run/groups?step={step}&order=step")
    page.locator(f"tr[data-group]:nth-child({index + 1}) a").click()
    page.wait_for_selector(".sample")


def test_runs_list(serve, runs_dir, page):
    s = serve(runs_dir)
    page.goto(s.url)
    page.wait_for_selector("tr[data-run]")
    rows = {r.get_attribute("data-run"): r.inner_text() for r in page.locator("tr[data-run]").all()}
    assert set(rows) == {"finished-run", "crashed-run"}
    assert "finished" in rows["finished-run"] and "0.3" in rows["finished-run"] and "0.6" in rows["finished-run"]
    assert "crashed" in rows["crashed-run"] and "12" in rows["crashed-run"]
    screenshot(page, "runs-list")


def test_a_finished_run_plots_every_panel(serve, runs_dir, page):
    s = serve(runs_dir)
    page.goto(s.url + "#/run/finished-run")
    page.wait_for_selector('.panel[data-panel="reward"] path.series')
    assert points(page, "reward", "reward") == 30
    assert points(page, "reward", "reward/judge") == 30
    assert points(page, "eval/pass@1", "eval/pass@1") == 4
    assert points(page, "kl", "kl_coef") == 30  # the coefficient on the right axis of the KL plot
    panels = page.locator(".panel").evaluate_all("els => els.map(e => e.dataset.panel)")
    assert panels[:11] == ["reward", "eval/pass@1", "eval/compliance", "eval/len_mean", "kl", "entropy", "length",
                           "graders", "judge_tokens", "clip", "speed"]
    # every panel drew a non-empty line
    empty = page.locator("path.series").evaluate_all("els => els.filter(e => !e.getAttribute('d')).length")
    assert empty == 0
    assert "pass@1" in page.locator("text=Evaluations (4").locator("..").inner_text()
    page.hover('.panel[data-panel="reward"] svg', position={"x": 300, "y": 80})
    assert "step" in page.locator('.panel[data-panel="reward"] .kchart-tip').inner_text()
    screenshot(page, "run-finished")


def test_a_live_run_grows_while_the_page_is_open(serve, tmp_path, page):
    runs = tmp_path / "runs"
    live = LiveRun(runs, every=0.1)
    try:
        s = serve(runs, poll_s=0.3)
        page.goto(s.url + "#/run/live-run")  # opened before the first step
        page.wait_for_selector("text=No metrics yet")
        page.wait_for_function("() => document.querySelector('#live').textContent.startsWith('live')")
        live.log_until(5)
        # a poll may land while the five steps are being written (a busy machine): the page draws what it
        # found, then catches up with the rest at the next polls
        reward_points = "n => Number(document.querySelector('.panel[data-panel=reward] path.series')?.dataset.points) >= n"
        page.wait_for_function(reward_points, arg=5)
        first = points(page, "reward", "reward")
        live.start()
        page.wait_for_function(reward_points, arg=first + 15)
        # the first eval (step 10) adds the eval panel while the page is open
        page.wait_for_selector('.panel[data-panel="eval/pass@1"] path.series[data-key="eval/pass@1"]')
        screenshot(page, "run-live")
    finally:
        live.stop()
    page.wait_for_function("() => document.querySelector('#live').textContent.startsWith('finished')")
    final = points(page, "reward", "reward")
    assert final == live.step  # after the run ends the plot holds every step, none twice


def test_a_group_shows_each_sample_with_criteria_reasons_and_advantage(serve, runs_dir, page):
    s = serve(runs_dir)
    open_group(page, s.url, 30, 0)  # newest step first: step 30 group 0
    assert page.locator("h1").inner_text() == "Step 30, group 0"
    assert page.locator("pre.reference").inner_text() == "4"
    cards = page.locator("article.sample")
    assert cards.count() == 4
    judge = cards.nth(2).locator('.component[data-component="judge"]')
    rows = judge.locator(".criteria tr").all_inner_texts()
    assert [r.split("\t")[0] for r in rows] == list(CRITERIA)
    assert judge.locator(".reason").inner_text() == JUDGE_REASON
    assert cards.nth(0).locator(".advantage").inner_text() == "-0.5"
    assert cards.nth(2).locator(".advantage").inner_text() == "+0.5"
    assert "finish stop" in cards.nth(0).inner_text()
    screenshot(page, "group")


def test_model_output_with_markup_is_shown_as_text_and_never_runs(serve, runs_dir, page):
    s = serve(runs_dir)
    open_group(page, s.url, 30, 0)
    text = page.locator("article.sample").nth(1).locator(".sample-text")
    assert text.inner_text() == UNTRUSTED  # every character shown, tags included
    assert text.locator("script, img, b").count() == 0  # and no element made from it
    page.wait_for_timeout(300)  # the img's onerror would have fired by now
    assert page.evaluate("() => window.__kitae_pwned") is None
    # the same on the pages that show samples in other ways
    page.locator("text=this prompt across steps").click()
    page.wait_for_selector(".history")
    page.locator("text=last »").click()
    page.wait_for_selector('.history[data-step="30"]')
    assert UNTRUSTED in page.locator('.history[data-step="30"]').inner_text()
    assert page.locator(".history img, .history script").count() == 0
    assert page.evaluate("() => window.__kitae_pwned") is None


def test_sort_and_filter_the_groups(serve, runs_dir, page):
    s = serve(runs_dir)
    page.goto(s.url + "#/run/finished-run/groups")
    page.wait_for_selector("tr[data-group]")
    then_rendered(page, lambda: page.locator("button", has_text="zero-variance groups").click())
    assert page.locator("text=30 groups over all steps").count() == 1
    stds = page.locator("tr[data-group] td:nth-child(5)").all_inner_texts()
    assert len(stds) == 20 and set(stds) == {"0"}
    then_rendered(page, lambda: page.locator("button", has_text="truncated samples").click())
    assert set(page.locator("tr[data-group] td:nth-child(7)").all_inner_texts()) == {"1"}
    then_rendered(page, lambda: page.locator("button", has_text="latest step").click())
    assert page.locator("text=1 groups at step 30").count() == 1
    then_rendered(page, lambda: page.select_option("select[name=filter]", "all"))
    assert page.locator("text=3 groups at step 30").count() == 1
    # worst first: group 2 (0.4167), group 0 (0.625), group 1 (1)
    assert page.locator("tr[data-group] td:nth-child(4)").all_inner_texts() == ["0.4167", "0.625", "1"]
    screenshot(page, "groups")


def test_the_same_prompt_across_steps(serve, runs_dir, page):
    s = serve(runs_dir)
    open_group(page, s.url, 30, 0)
    page.locator("text=this prompt across steps").click()
    page.wait_for_selector("#history-chart path.series")
    assert page.locator("text=30 times in this run").count() == 1
    assert int(page.locator("#history-chart path.series").get_attribute("data-points")) == 30
    steps = page.locator(".history").evaluate_all("els => els.map(e => Number(e.dataset.step))")
    assert steps == list(range(1, 11))  # oldest first, 10 a page
    screenshot(page, "prompt-history")


def test_two_runs_on_one_plot(serve, runs_dir, page):
    s = serve(runs_dir)
    page.goto(s.url)
    page.wait_for_selector("tr[data-run]")
    page.locator("input[aria-label='select finished-run']").check()
    page.locator("input[aria-label='select crashed-run']").check()
    page.locator("button", has_text="Compare the two selected runs").click()
    page.wait_for_selector("#compare-chart path.series")
    got = page.locator("#compare-chart path.series").evaluate_all("els => els.map(e => Number(e.dataset.points))")
    assert sorted(got) == [12, 30]
    then_rendered(page, lambda: page.select_option("select[name=key]", "eval/pass@1"))
    assert page.locator("text=eval/pass@1: finished-run vs crashed-run").count() == 1
    got = page.locator("#compare-chart path.series").evaluate_all("els => els.map(e => Number(e.dataset.points))")
    assert sorted(got) == [2, 4]  # evals at 0 and 10 for the 12-step run; 0, 10, 20, 30 for the other
    screenshot(page, "compare")


def test_compare_a_key_only_one_run_has(serve, fresh_runs, page):
    """The other run has no series for the key (the metric API answers its unknown key with an error): one line,
    no error on the page."""
    from kitae.store import RunStore

    with RunStore.open(fresh_runs / "finished-run") as store:
        store.log_metrics(30, {"only_here": 1.0})
    s = serve(fresh_runs)
    then_rendered(page, lambda: page.goto(s.url + "#/compare?a=finished-run&b=crashed-run&key=only_here"))
    page.wait_for_selector("#compare-chart path.series", state="attached")  # one point: a line of no width
    got = page.locator("#compare-chart path.series").evaluate_all("els => els.map(e => Number(e.dataset.points))")
    assert got == [1, 0]
    assert page.locator(".error").count() == 0


def test_label_samples_and_see_the_agreement(serve, fresh_runs, page):
    s = serve(fresh_runs)
    page.goto(s.url + "#/run/finished-run/label")
    page.wait_for_selector("article.sample")
    assert page.locator("h2").inner_text() == "Step 30, group 0"  # widest reward spread first
    assert page.locator("article.sample .reward").count() == 0  # grader scores hidden while you label
    # the grader gives [0, 1, 1, 0.5]; score [1, 4, 5, 3]: one pair (1, 2) the grader ties
    for i, score in enumerate([1, 4, 5, 3]):
        page.locator(f'article.sample[data-index="{i}"] button[data-score="{score}"]').click()
    page.locator("button", has_text="Save my scores").click()
    page.wait_for_selector("text=saved 4 labels")
    assert page.locator("article.sample .reward").count() == 4  # revealed after saving
    page.wait_for_selector(".agreement .stat >> text=0.9167")  # pairwise (5 + 0.5) / 6
    stats = page.locator(".agreement .stat b").all_inner_texts()
    assert stats[0] == "4" and stats[1] == "0.9167" and stats[4] == "6"  # labels, pairwise, pairs
    assert page.locator(".verdict").inner_text().startswith("INCONCLUSIVE: too few labels to trust: 4, need 30 (")
    saved = [json.loads(line) for line in (fresh_runs / "finished-run" / "labels.jsonl").read_text().splitlines()]
    assert [(r["step"], r["group_index"], r["sample_index"], r["score"]) for r in saved] == [
        (30, 0, i, v) for i, v in enumerate([1, 4, 5, 3])]
    screenshot(page, "label")
    page.locator("button", has_text="next group").click()
    page.wait_for_function("() => document.querySelector('h2').textContent !== 'Step 30, group 0'")


@pytest.mark.parametrize("path, message", [
    ("#/run/no-such-run", "no run 'no-such-run'"),
    ("#/nowhere", "no page /nowhere"),
])
def test_errors_are_shown_on_the_page(serve, runs_dir, browser, path, message):
    s = serve(runs_dir)
    pg = browser.new_page()  # this page expects a failed request, so it is not the error-checking fixture
    try:
        pg.goto(s.url + path)
        pg.wait_for_selector(".error")
        assert message in pg.locator(".error").inner_text()
    finally:
        pg.close()


@pytest.mark.parametrize("ticks, labels", [
    ([0, 0.5, 1], ["0.0", "0.5", "1.0"]),
    ([5.8445, 5.845, 5.8455], ["5.8445", "5.8450", "5.8455"]),  # close ticks never read the same
    ([0, 1000, 2000], ["0", "1000", "2000"]),
    ([1.2e6, 1.4e6], ["1.2e+6", "1.4e+6"]),
    ([1 - 2e-7, 1, 1 + 2e-7], ["0.9999998", "1.0000000", "1.0000002"]),  # a ratio that barely moves
    ([2e-7, 4e-7, 6e-7], ["2.0e-7", "4.0e-7", "6.0e-7"]),  # tiny values: exponents
])
def test_tick_labels(serve, runs_dir, page, ticks, labels):
    page.goto(serve(runs_dir).url)
    page.wait_for_function("() => window.KPlot !== undefined")
    assert page.evaluate("ticks => ticks.map(KPlot.tickFormat(ticks))", ticks) == labels


def test_a_run_that_ran_code_without_a_sandbox_says_so(serve, tmp_path, page):
    from kitae.store import RunStore

    runs = tmp_path / "runs"
    for name, sandbox in (("boxed", "bwrap"), ("unboxed", "none")):
        config = {"rewards": [{"name": "tests", "grader": {"type": "code", "sandbox": sandbox}}]}
        with RunStore.create(runs / name, name=name, config=config, model="tiny-llama") as store:
            store.log_metrics(1, {"reward": 0.5})
            store.finish()
    s = serve(runs)
    page.goto(s.url + "#/run/unboxed")
    banner = page.wait_for_selector(".unsandboxed")
    assert banner.inner_text() == ("sandbox: none at rewards[0].grader: this run ran untrusted code "
                                   "without isolation")
    screenshot(page, "run-unsandboxed")
    page.goto(s.url + "#/run/boxed")
    page.wait_for_selector(".run-head h1")
    assert page.locator(".unsandboxed").count() == 0


def test_the_run_history_shows_resumes_and_skipped_checkpoints_as_text(serve, tmp_path, page):
    """Resumes, restarts and skipped checkpoints (the store's events) are on the run page, oldest first; their
    messages hold paths and config values the user wrote, so they are shown as text, never as markup."""
    from kitae.store import RunStore

    runs = tmp_path / "runs"
    with RunStore.create(runs / "resumed", name="resumed", config={"lr": 1e-6}, model="tiny-llama") as store:
        store.log_metrics(1, {"reward": 0.5})
        store.log_event(20, "checkpoint_skipped", "checkpoints/step-000020: <img src=x onerror=window.pwned=1> "
                        "unreadable; an older checkpoint is used")
        store.log_event(10, "resumed", "resumed from checkpoints/step-000010 (kitae train --resume resumed)")
        store.finish()
    with RunStore.create(runs / "plain", name="plain", config={"lr": 1e-6}, model="tiny-llama") as store:
        store.log_metrics(1, {"reward": 0.5})
        store.finish()
    s = serve(runs)
    page.goto(s.url + "#/run/resumed")
    history = page.wait_for_selector(".events")
    assert history.query_selector("summary").inner_text() == "history: 2 events"
    history.query_selector("summary").click()
    rows = [r.inner_text().split("\t") for r in page.locator(".events tr[data-kind]").all()]
    assert [(r[1], r[2]) for r in rows] == [("20", "checkpoint_skipped"), ("10", "resumed")]
    assert "<img src=x onerror=window.pwned=1>" in rows[0][3]
    assert page.evaluate("() => window.pwned") is None and page.locator(".events img").count() == 0
    screenshot(page, "run-history")
    page.goto(s.url + "#/run/plain")
    page.wait_for_selector(".run-head h1")
    assert page.locator(".events").count() == 0


def test_the_evaluation_is_one_small_chart_per_metric(serve, tmp_path, page):
    """Twelve eval series (pass@1 overall and for five slices, compliance, rates, lengths): each metric in its
    own small chart under the one Evaluation heading, a metric's slices with it, no chart with another's."""
    from kitae.store import RunStore

    slices = ("easy", "medium", "hard", "en", "ja")
    runs = tmp_path / "runs"
    with RunStore.create(runs / "evals", name="evals", config={}, model="tiny-llama") as store:
        for step in (0, 10, 20):
            store.log_metrics(step or 1, {"reward": 0.5})
            store.log_eval(step, {"pass@1": 0.3, **{f"pass@1/{s}": 0.1 * i for i, s in enumerate(slices)},
                                  "compliance": 0.9, "trunc_rate": 0.0, "len_mean": 9.0, "len_p90": 12.0,
                                  "score": 0.4})
        store.finish()
    s = serve(runs)
    page.goto(s.url + "#/run/evals")
    page.wait_for_selector('.panel[data-panel="eval/len_p90"] path.series', state="attached")  # flat: no height
    group = page.locator('.panel-group[data-group="eval"]')
    assert group.locator("h3").inner_text() == "Evaluation"
    series = group.locator(".panel").evaluate_all(
        "els => els.map(e => [e.dataset.panel, [...e.querySelectorAll('path.series')].map(p => p.dataset.key)])")
    assert [name for name, _ in series] == ["eval/pass@1", "eval/score", "eval/compliance", "eval/trunc_rate",
                                            "eval/len_mean", "eval/len_p90"]
    assert dict(series)["eval/pass@1"] == ["eval/pass@1", *[f"eval/pass@1/{s}" for s in slices]]
    assert all(keys == [name] for name, keys in series if name != "eval/pass@1")
    assert points(page, "eval/len_p90", "eval/len_p90") == 3
    screenshot(page, "run-eval-charts")


def test_an_alarm_is_shown_beside_the_plots_with_links_to_its_groups(serve, tmp_path, page):
    """An alarm (an `alarm` event, kitae.trainer.alarms) is a card above the plots: kind, step, message, its
    evidence with the example samples as text (model output: markup never runs), and links that open its groups."""
    from kitae.store import GroupRecord, RunStore, SampleRecord

    runs = tmp_path / "runs"
    hack = '2 3 4 5 6 7 8 <img src=x onerror="window.pwned=1">'
    with RunStore.create(runs / "gamed", name="gamed", config={}, model="tiny-llama") as store:
        for step in (1, 2):
            store.log_metrics(step, {"reward": 0.1 * step})
            texts = ["7", "5"] if step == 1 else [hack, "2 3 4 5 6 7 8"]
            store.log_groups(step, [GroupRecord("what is 3+4?", [], "7", {}, [
                SampleRecord(t, 3, "stop", 1.0, 0.0) for t in texts], 0)])
        gid = store.groups(step=2)[0].id
        store.log_event(2, "alarm", "100% of step 2's samples carry a list of four or more numbers (number_list)",
                        {"kind": "answer_shape", "subject": "number_list",
                         "evidence": {"pattern": "number_list", "share": 1.0, "baseline_share": 0.0,
                                      "examples": [hack]},
                         "groups": [{"id": gid, "step": 2, "group_index": 0}]})
        store.finish()
    s = serve(runs)
    page.goto(s.url + "#/run/gamed")
    card = page.wait_for_selector(".alarms .alarm[data-kind=answer_shape]")
    assert "answer_shape at step 2" in card.inner_text() and "number_list" in card.inner_text()
    assert page.locator(".alarms pre.example").inner_text() == hack  # shown as text
    assert page.evaluate("() => window.pwned") is None and page.locator(".alarms img").count() == 0
    assert page.locator(".events").count() == 0  # an alarm is not repeated in the run history
    screenshot(page, "run-alarm")
    then_rendered(page, lambda: page.locator(f'.alarm-groups a[data-group="{gid}"]').click())
    assert page.locator("h1").inner_text() == "Step 2, group 0"
    assert page.locator(".sample").count() == 2 and hack in page.locator(".sample-text").first.inner_text()


def test_an_async_runs_samples_say_which_policy_sampled_them(serve, tmp_path, page):
    """sampling.async: each sample card names the policy version that sampled it; a synchronous run's say nothing."""
    from kitae.store import GroupRecord, RunStore, SampleRecord

    runs = tmp_path / "runs"
    with RunStore.create(runs / "async", name="async", config={}, model="tiny-llama") as store:
        samples = [SampleRecord("12", 1, "stop", 1.0, 0.5, policy_version=3),
                   SampleRecord("13", 1, "stop", 0.0, -0.5, policy_version=3),
                   SampleRecord("14", 1, "stop", 0.0, -0.5)]  # sampled by the policy being trained
        store.log_groups(5, [GroupRecord("7+5?", [{"role": "user", "content": "7+5?"}], "12", {}, samples, 0)])
        store.finish()
    s = serve(runs)
    page.goto(s.url + "#/run/async/groups?step=5&order=step")
    page.locator("tr[data-group]:nth-child(1) a").click()
    page.wait_for_selector(".sample")
    cards = page.locator("article.sample")
    assert [cards.nth(i).locator(".policy").count() for i in range(3)] == [1, 1, 0]
    assert cards.nth(0).locator(".policy").inner_text() == "sampled by policy 3"


def test_an_evaluation_that_scored_nothing_is_shown_as_no_value(serve, tmp_path, page):
    """pass@1 is null when the eval grader abstained on every sample (kitae.scoring.evaluate): the run page shows
    a dash in its table and a gap in its chart, with no JavaScript error, and the runs list a dash for the score."""
    from kitae.store import RunStore

    runs = tmp_path / "runs"
    with RunStore.create(runs / "unscored", name="unscored", config={}, model="tiny-llama") as store:
        for step in (0, 10):
            store.log_metrics(step or 1, {"reward": 0.5})
            store.log_eval(step, {"pass@1": None, "compliance": 0.9, "abstain_rate": 1.0})
        store.finish()
    s = serve(runs)
    page.goto(s.url + "#/run/unscored")
    page.wait_for_selector("text=Evaluations (2, latest first)")
    table = page.locator("section.card", has_text="Evaluations (2")
    heads = table.locator("th").all_inner_texts()
    cells = table.locator("tbody tr").first.locator("td").all_inner_texts()
    assert dict(zip(heads, cells))["pass@1"] == "–" and dict(zip(heads, cells))["compliance"] == "0.9"
    assert points(page, "eval/compliance", "eval/compliance") == 2
    page.goto(s.url + "#/")
    page.wait_for_selector("text=unscored")
