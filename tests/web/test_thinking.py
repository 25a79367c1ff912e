"""A reasoning model's samples on the run page, in headless Chromium: the <think> block folds, closed at first,
and opens on a click; its text, markup included, stays text. A model whose chat template opened the block in the
prompt (Qwen3-4B-Thinking-2507: samples with thinking_open) has its thinking folded the same way."""

from __future__ import annotations

import pytest

from kitae.store import GroupRecord, RunStore, SampleRecord
from tests.plugins.run_page import screenshot

THINKING = '2+2: <script>window.__kitae_pwned = 1</script><img src=x onerror="window.__kitae_pwned = 2"> is 4'
SAMPLES = [
    f"<think>{THINKING}</think>\n\nThe answer is 4<|im_end|>",  # thinking, then the answer
    "<think>2+2 is... let me count again, 1, 2, 3",  # cut off while thinking: no answer
    "4<|im_end|>",  # no think block: shown as before
    "\n<think>東京</think>東京です<|im_end|>",  # leading whitespace; characters are code points
]
OPENED = [  # the prompt ended "<|im_start|>assistant\n<think>\n": the thinking has no opening tag in the text
    (f"{THINKING}</think>\n\nThe answer is 4<|im_end|>", True),  # thinking, then the answer
    ("2+2 is... let me count again, 4", True),  # cut off while thinking: no answer, though it holds a 4
    ("4<|im_end|>", False),  # a model whose prompt opened nothing: shown as before
]


@pytest.fixture(scope="module")
def think_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    with RunStore.create(root / "think-run", name="think-run", config={}, model="tiny") as store:
        samples = [SampleRecord(text=t, completion_tokens=len(t), finish_reason="length" if i == 1 else "stop",
                                reward=1.0, advantage=0.0, scores={"correct": 1.0}) for i, t in enumerate(SAMPLES)]
        store.log_groups(1, [GroupRecord("2+2?", [{"role": "user", "content": "2+2?"}], "4", {}, samples, 0)])
        store.log_metrics(1, {"reward": 1.0})
        store.finish("finished")
    with RunStore.create(root / "opened-run", name="opened-run", config={}, model="tiny") as store:
        samples = [SampleRecord(text=t, completion_tokens=len(t), finish_reason="length" if i == 1 else "stop",
                                reward=0.0, advantage=0.0, scores={"correct": 0.0}, thinking_open=opened)
                   for i, (t, opened) in enumerate(OPENED)]
        store.log_groups(1, [GroupRecord("2+2?", [{"role": "user", "content": "2+2?"}], "4", {}, samples, 0)])
        store.log_metrics(1, {"reward": 0.0})
        store.finish("finished")
    return root


def open_the_group(page, url: str, run: str = "think-run") -> None:
    page.goto(url + f"#/run/{run}/groups")
    page.locator("tr[data-group] a").first.click()
    page.wait_for_selector("article.sample")


def test_the_thinking_folds_closed_and_opens(serve, think_runs, page):
    s = serve(think_runs)
    open_the_group(page, s.url)
    card = page.locator("article.sample").nth(0)
    fold = card.locator("details.thinking")
    assert fold.count() == 1 and fold.get_attribute("open") is None  # closed by default
    assert fold.locator("summary").inner_text() == f"thinking ({len(THINKING)} chars)"
    assert not fold.locator("pre.thinking-text").is_visible()
    assert card.locator("pre.answer-text").inner_text() == "The answer is 4<|im_end|>"  # shown as usual
    fold.locator("summary").click()
    page.wait_for_function("() => document.querySelector('article.sample details.thinking').open")
    assert fold.locator("pre.thinking-text").is_visible()
    assert fold.locator("pre.thinking-text").inner_text() == THINKING  # every character, tags included
    assert card.locator("script, img").count() == 0  # no element made from the model's text
    page.wait_for_timeout(300)  # the img's onerror would have fired by now
    assert page.evaluate("() => window.__kitae_pwned") is None
    screenshot(page, "group-thinking")


def test_a_cut_off_thinking_has_no_answer_and_plain_text_is_unchanged(serve, think_runs, page):
    s = serve(think_runs)
    open_the_group(page, s.url)
    cards = page.locator("article.sample")
    cut = cards.nth(1)
    assert "never closed" in cut.locator("details.thinking summary").inner_text()
    assert cut.locator(".answer-text").inner_text() == "no answer: cut off while thinking"
    plain = cards.nth(2)
    assert plain.locator("details").count() == 0
    assert plain.locator("pre.sample-text").inner_text() == "4<|im_end|>"
    tokyo = cards.nth(3)
    assert tokyo.locator("details.thinking summary").inner_text() == "thinking (2 chars)"
    assert tokyo.locator("pre.answer-text").inner_text() == "東京です<|im_end|>"


def test_the_prompt_history_folds_the_thinking_too(serve, think_runs, page):
    s = serve(think_runs)
    open_the_group(page, s.url)
    page.locator("text=this prompt across steps").click()
    page.wait_for_selector(".history")
    folds = page.locator(".history details.thinking")
    assert folds.count() == 3 and folds.evaluate_all("els => els.every(e => !e.open)")
    assert page.locator(".history script, .history img").count() == 0


def test_the_thinking_a_prompt_opened_folds_like_a_think_block(serve, think_runs, page):
    s = serve(think_runs)
    open_the_group(page, s.url, "opened-run")
    cards = page.locator("article.sample")
    answered = cards.nth(0)
    fold = answered.locator("details.thinking")
    assert fold.count() == 1 and fold.get_attribute("open") is None  # closed by default
    assert fold.locator("summary").inner_text() == f"thinking ({len(THINKING)} chars)"
    assert answered.locator("pre.answer-text").inner_text() == "The answer is 4<|im_end|>"
    fold.locator("summary").click()
    page.wait_for_function("() => document.querySelector('article.sample details.thinking').open")
    assert fold.locator("pre.thinking-text").inner_text() == THINKING
    assert answered.locator("script, img").count() == 0
    cut = cards.nth(1)
    assert cut.locator("details.thinking summary").inner_text() == "thinking (31 chars, never closed)"
    assert cut.locator(".answer-text").inner_text() == "no answer: cut off while thinking"
    plain = cards.nth(2)
    assert plain.locator("details").count() == 0 and plain.locator("pre.sample-text").inner_text() == "4<|im_end|>"
    page.locator("text=this prompt across steps").click()
    page.wait_for_selector(".history")
    assert page.locator(".history details.thinking").count() == 2
    screenshot(page, "group-thinking-opened")
