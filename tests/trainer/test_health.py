"""RunHealth after each step, on a real run store and accelerator: an alarm of alarms.stop_on asks the run to stop
(once, the console told), an evaluation reaches the alarms, and steps without a reward save a checkpoint and stop
the run with the error that says why."""

from __future__ import annotations

import pytest
from accelerate import Accelerator

from kitae.errors import KitaeError
from kitae.graders import build_grader
from kitae.graders.base import Grade
from kitae.rollout.base import Completion
from kitae.scoring.components import GroupScores, RewardComponent
from kitae.store import GroupRecord, RunStore, SampleRecord
from kitae.trainer.collect import Collected
from kitae.trainer.config import load_train_config
from kitae.trainer.health import RunHealth

G = 4


def step_of(reward: float | None) -> tuple[dict, list[GroupRecord], Collected]:
    """One group of G samples that all got `reward` (None: every component abstained): the metrics, the group as
    logged, and what the step collected."""
    grades = [Grade(score=reward, error=None if reward is not None else "the reward server is down")] * G
    got = Collected([{"prompt": "what is 3+4?"}], [[Completion("7", [1], [2], [0.0], "stop")] * G],
                    [GroupScores({"numeric": grades}, [reward] * G)])
    metrics = {"reward": reward or 0.0, "invalid_rate": 1.0 if reward is None else 0.0, "zero_var_frac": 1.0,
               "grader/numeric/abstain_rate": 1.0 if reward is None else 0.0}
    records = [GroupRecord("what is 3+4?", [], "7", {}, [SampleRecord("7", 1, "stop", reward, 0.0,
                                                                       {"numeric": reward})] * G, 0)]
    return metrics, records, got


@pytest.fixture
def health(tmp_path):
    cfg = load_train_config(data={
        "output_dir": str(tmp_path), "rewards": [{"name": "numeric", "grader": {"type": "answer"}}],
        "alarms": {"stop_on": ["zero_spread", "reward_vs_eval"], "baseline_steps": 1, "window": 2},
        "algorithm": {"max_steps_without_reward": 3}})
    store = RunStore.create(tmp_path / "run", config={})
    grader = build_grader({"type": "answer"})
    told, stops, saves = [], [], []
    made = RunHealth(cfg, Accelerator(cpu=True), store, [RewardComponent("numeric", 1.0, grader)], 0,
                     save=saves.append, request_stop=stops.append, skipped_total=lambda: 0, on_alarm=told.append)
    made.told, made.stops, made.saves = told, stops, saves
    yield made
    grader.close()
    store.close()


def log(health: RunHealth, step: int, reward: float | None) -> None:
    metrics, records, got = step_of(reward)
    health.store.log_metrics(step, metrics)
    health.store.log_groups(step, records)
    health.after_step(step, metrics, records, got, {"skipped_steps": 0.0})


def test_an_alarm_of_stop_on_asks_the_run_to_stop_once(health):
    log(health, 1, 1.0)
    assert health.stops == []
    log(health, 2, 1.0)  # a window of groups without spread
    assert [a.kind for a in health.stops] == ["zero_spread"] == [a.kind for a in health.told]
    log(health, 3, 1.0)  # raised already: not again
    assert len(health.stops) == 1
    (event,) = [e for e in health.store.events() if e["kind"] == "alarm"]
    assert event["step"] == 2 and event["data"]["groups"][0]["id"] == health.store.groups(step=2)[0].id


def test_an_evaluation_reaches_the_alarms(health):
    health.after_eval(0, {"pass@1": 0.5})
    for step, reward in ((1, 0.0), (2, 1.0), (3, 1.0)):
        log(health, step, reward)
    health.after_eval(3, {"pass@1": 0.4})
    log(health, 4, 1.0)  # the reward rose 0 -> 1 while pass@1 fell
    assert "reward_vs_eval" in [a.kind for a in health.stops]


def test_steps_without_a_reward_save_and_stop_the_run(health):
    with pytest.warns(UserWarning, match="'numeric' gave no sample a finite score in step 1; the run stops if"):
        log(health, 1, None)
    log(health, 2, None)
    assert health.saves == []
    with pytest.raises(KitaeError, match=r"(?s)no sample got a reward in steps 1-3.*numeric: the reward server is down"):
        log(health, 3, None)
    assert health.saves == [3]
