"""An agent's episode on the run page, in headless Chromium: each turn's text, each tool call with its arguments
and its result or error, the spans the policy did not sample (tool results, template tokens) shaded; markup in a
tool argument and a tool result stays text and never runs; a single-turn sample of the same group renders as
before."""

from __future__ import annotations

import json

import pytest

from tests.agents._store_fixtures import (
    ANSWER,
    CALL_0,
    CALL_1,
    CALL_2,
    SINGLE,
    UNSENT,
    XSS_ARG,
    XSS_RESULT,
    write_agent_run,
    write_odd_run,
)
from tests.plugins.run_page import screenshot


@pytest.fixture(scope="module")
def agent_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    write_agent_run(root)
    return root


def open_step_1(page, url: str) -> None:
    page.goto(url + "#/run/agent-run/groups?step=1")
    page.locator("tr[data-group] a").first.click()
    page.wait_for_selector("article.sample .episode")


def spans(locator) -> list[list[int]]:
    return locator.evaluate_all("els => els.map(e => [Number(e.dataset.start), Number(e.dataset.end)])")


def test_an_episode_shows_its_turns_tool_calls_and_the_untrained_spans_shaded(serve, agent_runs, page):
    s = serve(agent_runs)
    open_step_1(page, s.url)
    card = page.locator("article.sample").nth(0)
    turns = card.locator("section.turn")
    assert turns.count() == 2 and spans(turns) == [[0, 12], [30, 36]]  # the trained spans, as stored
    assert [t.inner_text() for t in turns.locator("pre.sample-text").all()] == [CALL_0, ANSWER]
    assert card.locator(".tool-call .tool-name").inner_text() == "call calculator"
    assert card.locator("pre.tool-args").inner_text() == '{\n  "expression": "37 * 41"\n}'
    shaded = card.locator("section.untrained")
    assert spans(shaded) == [[12, 30]]  # between the turns: the tool result and the next assistant header
    assert shaded.locator("pre.tool-output").inner_text() == "1517"  # the result sits in the untrained span
    assert "not trained" in shaded.locator(".span-label").inner_text()
    # shaded: a background the trained turns do not have
    style = "e => getComputedStyle(e).backgroundImage"
    assert shaded.evaluate(style) != "none" and turns.first.evaluate(style) == "none"
    meta = card.locator(".sample-meta").inner_text()
    assert "episode end answer" in meta and "18 of 36 tokens trained" in meta
    assert "environment reward 1" in card.locator(".episode-head").inner_text()
    screenshot(page, "group-episode")


def test_markup_in_a_tool_argument_and_a_tool_result_is_text_and_errors_are_highlighted(serve, agent_runs, page):
    s = serve(agent_runs)
    open_step_1(page, s.url)
    card = page.locator("article.sample").nth(1)
    assert [t.inner_text() for t in card.locator("section.turn pre.sample-text").all()] == [CALL_1, CALL_2]
    assert card.locator("pre.tool-args").first.inner_text() == json.dumps({"expression": XSS_ARG}, indent=2)
    assert card.locator("pre.tool-output").inner_text() == XSS_RESULT  # every character, tags included
    assert page.locator("article.sample script, article.sample img").count() == 0  # no element from that text
    page.wait_for_timeout(300)  # an img's onerror would have fired by now
    assert page.evaluate("() => window.__kitae_pwned") is None
    # the unknown tool's error: highlighted in the untrained span after the turn that called it
    error = card.locator(".tool-result.failed pre.tool-error")
    assert error.inner_text() == "error: unknown tool 'search'"
    assert error.evaluate("e => getComputedStyle(e).color") == "rgb(153, 27, 27)"
    assert card.locator(".tool-call.failed .tool-name").inner_text() == "call search"
    assert spans(card.locator("section.untrained")) == [[14, 34], [44, 53]]  # the last: after max_turns cut it
    head = card.locator(".episode-head")
    assert "1 tool error" in head.inner_text() and "2 tool calls" in head.inner_text()
    assert card.locator(".episode-end.warn").inner_text() == "episode end max_turns"
    assert card.locator(".component-error").inner_text() == "error: no answer to grade"


def test_a_single_turn_sample_renders_as_before(serve, agent_runs, page):
    s = serve(agent_runs)
    open_step_1(page, s.url)
    card = page.locator("article.sample").nth(2)
    assert card.locator(".episode, .turn, .untrained, .tool-call").count() == 0
    assert "is-episode" not in card.get_attribute("class")
    meta = card.locator(".sample-meta > span").all_inner_texts()
    assert meta == ["#2", "reward 1", "advantage +0.5", "finish stop", "7 tokens"]
    body = card.locator(".sample-body > *").evaluate_all("els => els.map(e => e.tagName + '.' + e.className)")
    assert body == ["PRE.text sample-text", "DIV.scores"]
    assert card.locator("pre.sample-text").inner_text() == SINGLE


@pytest.mark.slow  # two more pages in Chromium: the full suite runs it
def test_the_prompt_history_and_the_labeling_page_show_episodes_too(serve, agent_runs, page):
    s = serve(agent_runs)
    open_step_1(page, s.url)
    page.locator("text=this prompt across steps").click()
    page.wait_for_selector(".history")
    assert page.locator(".history .episode-turns").all_inner_texts() == ["episode of 2 turns, end answer",
                                                                         "episode of 2 turns, end max_turns"]
    assert page.locator(".history script, .history img").count() == 0
    page.goto(s.url + "#/run/agent-run/label?group=1")
    page.wait_for_selector("article.sample .episode")
    first = page.locator("article.sample").nth(0)
    assert first.locator("section.untrained pre.tool-output").inner_text() == "1517"
    assert "environment reward" not in first.inner_text()  # blind labeling: no grader's or environment's view
    assert page.evaluate("() => window.__kitae_pwned") is None


def test_results_the_model_never_read_and_a_hand_edited_episode(serve, tmp_path, page):
    write_odd_run(tmp_path)
    s = serve(tmp_path)
    page.goto(s.url + "#/run/odd-run/groups")
    page.locator("tr[data-group] a").first.click()
    page.wait_for_selector("article.sample .episode")
    cut = page.locator("article.sample").nth(0)
    assert spans(cut.locator("section.untrained")) == [[12, 17]]
    assert cut.locator("section.unsent pre.tool-output").inner_text() == UNSENT
    assert "never read" in cut.locator("section.unsent .span-label").inner_text()
    odd = page.locator("article.sample").nth(1)  # no turn to show, and no JavaScript error (the page fixture)
    assert odd.locator(".episode-head").inner_text().startswith("0 turns · 0 tool calls")
