"""The alarms' history kept in memory is the history the run store holds: at every step of a run, what the checks
read from memory equals what they read back from the store (as the checker did before it kept a history), and a
run resumed from its store raises the alarms, at the same steps with the same messages, that an unbroken run does."""

from __future__ import annotations

import random

from kitae.store import GroupRecord, RunStore, SampleRecord
from kitae.trainer import alarms as A
from kitae.trainer.alarms import AlarmsConfig, History, StepHistory, best_evals

WEIGHTS = {"numeric": 1.0, "format": 0.5}
SETTINGS = AlarmsConfig(baseline_steps=2, window=3, clear_steps=2)
STEPS = 24
EVAL_EVERY = 5


def texts(step: int, rng: random.Random) -> list[str]:
    """Plain answers first, number lists and equations taking over, a lone surrogate now and then."""
    kinds = ["7", "the answer is 6", "2 3 4 5 6", "3+4=7", "it is 7. it is 7. it is 7.", "bad \ud800 text"]
    spread = min(len(kinds), 2 + step // 4)
    return [kinds[rng.randrange(spread)] for _ in range(4)]


def step_records(step: int, rng: random.Random) -> list[GroupRecord]:
    groups = []
    for gi in range(3):
        samples = []
        for text in texts(step, rng):
            reward = None if rng.random() < 0.1 else rng.choice([0.0, 0.5, 1.0])
            numeric = float("nan") if reward is None else reward
            samples.append(SampleRecord(text, len(text.split()), "stop", reward, 0.0,
                                        {"numeric": numeric, "format": rng.choice([0.0, 1.0, None])}))
        groups.append(GroupRecord(f"prompt {gi}", [], "7", {}, samples, gi))
    return groups


def step_metrics(step: int, rng: random.Random) -> dict:
    rising = step / STEPS
    return {"reward": 0.2 + rising * 0.5 + rng.random() * 0.01, "reward/numeric": 0.1 + rising * 0.6,
            "reward/format": 0.3 + rng.random() * 0.01, "len_mean": 10.0 + step * 2.0, "entropy": 0.5 / step,
            "kl": 0.01 if step < 20 else 2.0, "zero_var_frac": 0.95 if step % 7 else 0.5,
            "invalid_rate": float("nan") if step == 4 else 0.1, "groups": 3, "secs_per_step": rng.random()}


def eval_metrics(step: int) -> dict:
    return {"pass@1": [0.3, 0.35, 0.5, 0.2, 0.1][step // EVAL_EVERY], "compliance": 0.9, "len_mean": 9.0}


def read_back(store, step: int, s: AlarmsConfig, weights: dict) -> History:
    """The history as the checker read it from the store at each step before it kept one in memory."""
    metrics: dict = {}
    evals = store.evals()
    eval_steps = {evals[-1].step if evals else step, *(e.step for e in best_evals(evals).values())}
    known = set(store.metric_keys())
    keys = [k for k in (*A.METRIC_KEYS, *(f"reward/{n}" for n in weights)) if k in known]
    ranges = ((1, s.baseline_steps), (step - 2 * s.window + 1, step), *((e - s.window + 1, e) for e in eval_steps))
    for lo, hi in ranges:
        for key, points in store.metrics(keys, since_step=max(lo, 0), until_step=hi).items():
            metrics.setdefault(key, {}).update(points)
    groups = store.groups(step=step, limit=None, with_samples=True)
    baseline = [g for st in store.group_steps() if st <= s.baseline_steps
                for g in store.groups(step=st, limit=None, with_samples=True)]
    return History(step, metrics, evals, baseline, groups, weights, s.baseline_steps, s.window)


def shape(h: History) -> dict:
    """What the checks read of a history (group ids aside: the store numbers its rows)."""

    def group(g):
        return (g.step, g.group_index, g.reward_mean, g.reward_std,
                [(x.text, x.completion_tokens, sorted(x.scores.items())) for x in g.samples])

    return {"step": h.step, "metrics": {k: v for k, v in h.metrics.items() if v},
            "evals": [(e.step, e.metrics) for e in h.evals], "baseline": [group(g) for g in h.baseline_groups],
            "groups": [group(g) for g in h.groups], "weights": h.weights, "frame": (h.baseline_steps, h.window)}


def alarms_seen(h: History) -> list[tuple]:
    return [(a.kind, a.subject, a.message, a.evidence, [(g["step"], g["group_index"]) for g in a.groups])
            for a in A.detect(h, SETTINGS)]


def run(store, resume_at: int | None = None) -> None:
    """A run's steps and evaluations logged and checked as the trainer does; at `resume_at` the checker is built
    again from the store (a resumed run)."""
    rng = random.Random(0)
    checker = A.RunAlarms(store, SETTINGS, WEIGHTS)
    for step in range(0, STEPS + 1):
        if step == resume_at:
            checker = A.RunAlarms(store, SETTINGS, WEIGHTS)
        if step:
            metrics, records = step_metrics(step, rng), step_records(step, rng)
            store.log_metrics(step, metrics)
            store.log_groups(step, records)
            checker.add_step(step, metrics, records)
            checker.check(step)
        if step % EVAL_EVERY == 0:
            store.log_eval(step, eval_metrics(step))
            checker.add_eval(step, eval_metrics(step))


def test_the_history_in_memory_is_the_one_the_store_holds_at_every_step(tmp_path):
    store = RunStore.create(tmp_path / "r", config={})
    try:
        rng = random.Random(0)
        memory = StepHistory(SETTINGS, WEIGHTS)
        seen = []
        for step in range(0, STEPS + 1):
            if step:
                metrics, records = step_metrics(step, rng), step_records(step, rng)
                store.log_metrics(step, metrics)
                store.log_groups(step, records)
                memory.add_step(step, metrics, records)
                stored = read_back(store, step, SETTINGS, WEIGHTS)
                assert shape(memory.history(step)) == shape(stored), step
                assert alarms_seen(memory.history(step)) == alarms_seen(stored), step
                assert shape(StepHistory.read(store, SETTINGS, WEIGHTS).history(step)) == shape(stored), step
                seen += alarms_seen(stored)
            if step % EVAL_EVERY == 0:
                store.log_eval(step, eval_metrics(step))
                memory.add_eval(step, eval_metrics(step))
        kinds = {a[0] for a in seen}  # the run shows signs, so the comparison covered the checks that fire
        assert {"answer_shape", "length_jump", "kl_blowup", "zero_spread", "eval_collapse"} <= kinds, kinds
    finally:
        store.close()


def test_the_history_in_memory_keeps_only_what_later_checks_read(tmp_path):
    memory = StepHistory(SETTINGS, WEIGHTS)
    rng = random.Random(0)
    for step in range(1, 200):
        memory.add_step(step, step_metrics(step, rng), step_records(step, rng))
        if step % 50 == 0:
            memory.add_eval(step, {"pass@1": 0.5 if step == 50 else 0.1})
    kept = set(memory.metrics["reward"])
    # the baseline, the latest two windows, the windows of the latest evaluation (150) and of the best one (50)
    assert kept == {1, 2, *range(194, 200), *range(148, 151), *range(48, 51)}
    assert len(memory.baseline) == 2 * 3 and {g.step for g in memory.groups} == {199}


def test_a_resumed_run_raises_the_alarms_an_unbroken_run_raises(tmp_path):
    events = []
    for name, resume_at in (("unbroken", None), ("resumed", 13)):
        store = RunStore.create(tmp_path / name, config={})
        try:
            run(store, resume_at)
            events.append([(e["step"], e["kind"], e["message"], e["data"]) for e in store.events()
                           if e["kind"] in ("alarm", "alarm_cleared")])
        finally:
            store.close()
    unbroken, resumed = events
    assert [e for e in unbroken if e[1] == "alarm"] and [e for e in unbroken if e[1] == "alarm_cleared"]
    assert any(e[0] > 13 for e in unbroken if e[1] == "alarm")
    assert resumed == unbroken
    assert all(link["id"] is not None for e in unbroken if e[1] == "alarm" for link in e[3]["groups"])
