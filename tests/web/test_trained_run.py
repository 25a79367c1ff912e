"""End to end: the real trainer trains a tiny model while the run page is open in a real browser."""

from __future__ import annotations

import threading
import time

import pytest

from kitae.errors import KitaeError
from kitae.store import RunStore
from kitae.trainer.config import load_train_config
from kitae.trainer.loop import Trainer
from tests.plugins.run_page import screenshot
from tests.plugins.tiny_run import write_config

pytestmark = pytest.mark.slow
STEPS = 8


def wait_for_step(run_dir, step: int, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with RunStore.open(run_dir, read_only=True) as store:  # a reader: the trainer holds the run's lock
                if (store.last_step() or 0) >= step:
                    return
        except KitaeError:  # no run.db yet, or the trainer is still creating its tables
            pass
        time.sleep(0.1)
    raise TimeoutError(f"the trainer did not reach step {step}")


@pytest.mark.slow
def test_the_page_follows_a_training_run(tiny_assets, tmp_path, rewards_on_path, serve, page):
    cfg = load_train_config(write_config(tiny_assets, tmp_path, **{
        "rewards": [{"name": "short", "function": "tests.reward_functions:short"},
                    {"name": "flaky", "function": "tests.reward_functions:flaky", "weight": 0.5},
                    {"name": "paced", "function": "tests.reward_functions:paced", "weight": 0.0}],
        "optim.steps": STEPS, "eval.every": 4, "logging.save_every": 100,
    }))
    result: dict = {}
    trainer = threading.Thread(target=lambda: result.update(Trainer(cfg).train()), daemon=True)
    trainer.start()
    try:
        wait_for_step(tmp_path / "t", 1)
        s = serve(tmp_path, poll_s=0.2)
        page.goto(s.url + "#/run/t")
        page.wait_for_function("() => document.querySelector('#live').textContent.startsWith('live')")
        page.wait_for_selector('.panel[data-panel="reward"] path.series[data-key="reward/flaky"]', state="attached")
        page.wait_for_function("() => document.querySelector('#live').textContent.startsWith('finished')",
                               timeout=180_000)
    finally:
        trainer.join(timeout=180)
    assert result["status"] == "finished"
    reward = page.locator('.panel[data-panel="reward"] path.series[data-key="reward"]')
    assert int(reward.get_attribute("data-points")) == STEPS  # every step, none twice
    for panel, key in [("eval/pass@1", "eval/pass@1"), ("entropy", "entropy"), ("length", "trunc_rate"),
                       ("graders", "grader/flaky/abstain_rate"), ("speed", "secs_per_step")]:
        assert page.locator(f'.panel[data-panel="{panel}"] path.series[data-key="{key}"]').count() == 1, key
    screenshot(page, "trained-run")
    # a group of the last step: both components beside every sample; the flaky grader's error where it failed
    page.goto(s.url + f"#/run/t/groups?step={STEPS}&order=step")
    page.locator("tr[data-group] a").first.click()
    page.wait_for_selector("article.sample")
    cards = page.locator("article.sample")
    assert cards.count() == 4
    assert cards.first.locator('.component[data-component="short"] .score').inner_text() != "–"
    assert cards.first.locator('.component[data-component="flaky"]').count() == 1
    screenshot(page, "trained-run-group")
