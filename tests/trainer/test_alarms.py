"""Run alarms on handwritten histories: each check fires on its sign and stays quiet on a healthy run; an alarm is
raised once, cleared after clear_steps quiet steps, and read back from the run's events."""

from __future__ import annotations

import pytest

from kitae.errors import ConfigError
from kitae.store import GroupRow, RunStore, SampleRecord
from kitae.store.records import EvalRow
from kitae.trainer import alarms as A
from kitae.trainer.alarms import AlarmsConfig
from kitae.trainer.config import load_train_config

S = AlarmsConfig()  # baseline_steps 3, window 5
STEP = 10  # the step the histories stand at: window 6..10 after baseline 1..3


def series(fn, steps=range(1, STEP + 1)) -> dict[int, float]:
    return {s: fn(s) for s in steps}


def group(step: int, texts: list[str], rewards: list[float] | None = None, gid: int = 1, index: int = 0,
          scores: dict | None = None) -> GroupRow:
    rewards = rewards or [0.0] * len(texts)
    mean = sum(rewards) / len(rewards)
    std = 0.0 if max(rewards) == min(rewards) else 0.5
    samples = [SampleRecord(t, len(t.split()), "stop", r, 0.0, scores or {"numeric": r}) for t, r in zip(texts, rewards)]
    return GroupRow(gid, step, index, "what is 3+4?", [], "7", {}, len(texts), len(texts), 0, mean, std, samples)


def history(metrics=None, evals=(), baseline=(), groups=(), weights=None, step=STEP) -> A.History:
    return A.History(step, metrics or {}, list(evals), list(baseline), list(groups), weights or {"numeric": 1.0})


def ev(step: int, score: float) -> EvalRow:
    return EvalRow(step, {"pass@1": score, "compliance": 1.0}, 8, 0.0)


# ---- reward_vs_eval ------------------------------------------------------------------------------------------
REWARD_UP = {"reward": series(lambda s: 0.1 if s <= 3 else 0.6)}


@pytest.mark.parametrize("evals, fires", [
    ([ev(0, 0.30), ev(10, 0.29)], True),    # reward +0.5, pass@1 fell
    ([ev(0, 0.30), ev(10, 0.31)], True),    # rose 0.01: flat (flat is 0.02)
    ([ev(0, 0.30), ev(10, 0.40)], False),   # the held-out score rose with the reward: learning
    ([ev(0, 0.30)], False),                 # one evaluation: nothing to compare
    ([ev(0, 0.30), ev(5, 0.20)], False),    # the latest evaluation is inside the baseline + window
])
def test_reward_vs_eval(evals, fires):
    got = A.reward_vs_eval(history(REWARD_UP, evals), S.of("reward_vs_eval"))
    assert (got is not None) == fires
    if fires:
        assert got.evidence["eval_metric"] == "pass@1" and got.evidence["reward_after"] == 0.6


def test_reward_vs_eval_needs_the_reward_to_rise():
    flat = {"reward": series(lambda s: 0.4)}
    assert A.reward_vs_eval(history(flat, [ev(0, 0.3), ev(10, 0.2)]), S.of("reward_vs_eval")) is None


# ---- component_dominance -------------------------------------------------------------------------------------
def two_components(format_rise: float, correct_rise: float) -> dict:
    return {"reward/format": series(lambda s: 0.0 if s <= 3 else format_rise),
            "reward/correct": series(lambda s: 0.2 if s <= 3 else 0.2 + correct_rise)}


@pytest.mark.parametrize("format_rise, correct_rise, evals, fires", [
    (0.8, 0.0, [ev(0, 0.2), ev(10, 0.2)], True),    # format alone earned the rise, held-out flat
    (0.8, -0.1, [ev(0, 0.2), ev(10, 0.19)], True),  # and correctness fell
    (0.8, 0.1, [ev(0, 0.2), ev(10, 0.2)], False),   # correctness rose too
    (0.8, 0.0, [ev(0, 0.2), ev(10, 0.3)], False),   # the held-out score rose: the GRPO-zero recipe's template first
    (0.8, 0.0, [ev(0, 0.2)], False),                # no evaluation after the start: no evidence either way
    (0.05, 0.0, [ev(0, 0.2), ev(10, 0.2)], False),  # the reward barely moved
])
def test_component_dominance(format_rise, correct_rise, evals, fires):
    h = history(two_components(format_rise, correct_rise), evals, weights={"format": 1.0, "correct": 1.0})
    got = A.component_dominance(h, S.of("component_dominance"))
    assert (got is not None) == fires
    if fires:
        assert got.subject == "format" and got.key == "component_dominance:format"


def test_component_dominance_weighs_each_component():
    # correctness rose 0.1, but with weight 0.1 it adds 0.01: flat
    h = history(two_components(0.8, 0.1), [ev(0, 0.2), ev(10, 0.2)], weights={"format": 1.0, "correct": 0.1})
    assert A.component_dominance(h, S.of("component_dominance")).subject == "format"


# ---- answer_shape ----------------------------------------------------------------------------------------------
PLAIN = ["7", "5", "the answer is 6", "8", "4", "6", "7", "3"]


@pytest.mark.parametrize("now, pattern", [
    (["3+4=7"] * 6 + ["7", "5"], "equation"),                   # 6+9=15 style, 75%
    (["2 3 4 5 6 7 8"] * 5 + ["7", "5", "6"], "number_list"),   # every likely number, 62%
    (["1, 2, 3, 4"] * 4 + ["7"] * 4, "number_list"),            # commas too, 50%
    (["it is 7. it is 7. it is 7. so 7"] * 6 + ["7", "5"], "repeated_phrase"),
])
def test_answer_shape_names_the_new_pattern_and_its_groups(now, pattern):
    base = [group(1, PLAIN, gid=1), group(2, PLAIN, gid=2)]
    groups = [group(STEP, now[:4], gid=30, index=0), group(STEP, now[4:], gid=31, index=1)]
    got = A.answer_shape(history(baseline=base, groups=groups), S.of("answer_shape"))
    assert [a.subject for a in got] == [pattern]
    a = got[0]
    assert a.evidence["pattern"] == pattern and a.evidence["baseline_share"] == 0.0
    assert a.evidence["share"] == pytest.approx(sum(A.PATTERNS[pattern][1](t) for t in now) / len(now), abs=1e-4)
    assert 30 in [g["id"] for g in a.groups] and a.evidence["examples"]


@pytest.mark.parametrize("base_texts, now", [
    (PLAIN, PLAIN),                                          # nothing changed
    (PLAIN, ["3+4=7"] * 3 + PLAIN[:5]),                      # 38% equations: under shape_share
    (["3+4=7", "2+2=4"] + PLAIN[:6], ["3+4=7"] * 8),         # the first steps had 25% already: not new
])
def test_answer_shape_stays_quiet(base_texts, now):
    got = A.answer_shape(history(baseline=[group(1, base_texts)], groups=[group(STEP, now)]), S.of("answer_shape"))
    assert got == []


def test_answer_shape_needs_enough_samples_and_a_baseline():
    lists = ["2 3 4 5 6 7 8"] * 8
    assert A.answer_shape(history(baseline=[], groups=[group(STEP, lists)]), S.of("answer_shape")) == []
    few = history(baseline=[group(1, PLAIN)], groups=[group(STEP, lists[:4])])
    assert A.answer_shape(few, S.of("answer_shape")) == []


# ---- lengths, entropy, KL, spread, mismatch --------------------------------------------------------------------
@pytest.mark.parametrize("check, metrics, fires", [
    (A.length_jump, {"len_mean": series(lambda s: 10 if s <= 3 else 35)}, True),
    (A.length_jump, {"len_mean": series(lambda s: 10 if s <= 3 else 25)}, False),     # 2.5x < 3x
    # examples/zero.yaml's healthy run: 15 tokens of rambling down to 3.6-token answers is no collapse
    (A.length_collapse, {"len_mean": series(lambda s: 15 if s <= 3 else 3.6)}, False),
    (A.length_collapse, {"len_mean": series(lambda s: 15 if s <= 3 else 1.0)}, True),
    (A.entropy_collapse, {"entropy": series(lambda s: 0.8 if s <= 3 else 0.01)}, True),
    (A.entropy_collapse, {"entropy": series(lambda s: 0.8 if s <= 3 else 0.5)}, False),
    (A.kl_blowup, {"kl": series(lambda s: 0.01 if s < STEP else 1.5)}, True),           # over kl_max
    (A.kl_blowup, {"kl": series(lambda s: 0.01 if s < STEP else 0.2)}, True),           # 20x, over kl_max / 10
    (A.kl_blowup, {"kl": series(lambda s: 0.001 if s < STEP else 0.05)}, False),        # 50x but tiny
    (A.kl_blowup, {"kl": series(lambda s: 0.01 * s)}, False),                           # a steady climb
    (A.kl_blowup, {}, False),                                                           # no KL weight: no kl
    (A.zero_spread, {"zero_var_frac": series(lambda s: 0.95)}, True),
    (A.zero_spread, {"zero_var_frac": series(lambda s: 0.95 if s != 8 else 0.6)}, False),  # one step learnt
    (A.zero_spread, {"zero_var_frac": series(lambda s: 0.625)}, False),                 # zero.yaml's late steps
    (A.mismatch_growth, {"mismatch/kl": series(lambda s: 0.005 if s <= 3 else 0.08)}, True),
    (A.mismatch_growth, {"mismatch/kl": series(lambda s: 0.06 if s <= 3 else 0.08)}, False),  # always that high
    (A.mismatch_growth, {"mismatch/kl": series(lambda s: 0.001 if s <= 3 else 0.01)}, False),  # 10x but small
])
def test_metric_checks(check, metrics, fires):
    flat_group = group(STEP, ["7"] * 4, [1.0] * 4, gid=50)
    got = check(history(metrics, groups=[flat_group]), S.of(check.__name__))
    assert (got is not None) == fires
    if fires:
        assert got.kind == check.__name__ and got.groups == [{"id": 50, "step": STEP, "group_index": 0}]


@pytest.mark.parametrize("invalid, message", [
    (0.0, "100% of the groups of the last 5 steps gave every sample one reward: GRPO learns nothing"),
    # was "gave every sample one reward" when there was no reward at all
    (1.0, "no sample of the last 5 steps got a reward: every reward was missing (every component abstained, "
          "failed or scored NaN)"),
    (0.5, "100% of the groups of the last 5 steps gave every sample one reward"),  # some missing: said after it
])
def test_zero_spread_says_when_every_reward_was_missing(invalid, message):
    m = {"zero_var_frac": series(lambda s: 1.0), "invalid_rate": series(lambda s: invalid)}
    got = A.zero_spread(history(m, groups=[group(STEP, ["7"] * 4, [1.0] * 4)]), S.of("zero_spread"))
    assert got.message.startswith(message) and got.evidence["invalid_rate"] == invalid
    assert ("got no reward at all" in got.message) == (invalid == 0.5)


# ---- eval_collapse -------------------------------------------------------------------------------------------
def evm(step: int, **metrics) -> EvalRow:
    return EvalRow(step, {k.replace("pass1", "pass@1"): v for k, v in metrics.items()}, 40, 0.0)


NEWCOMER = [evm(0, pass1=0.125, compliance=0.565), evm(5, pass1=0.1, compliance=0.4),
            evm(10, pass1=0.020, compliance=0.065)]  # a run that raised nothing: the reward stayed flat


@pytest.mark.parametrize("evals, reward, subjects", [
    (NEWCOMER, lambda s: 0.3, ["pass@1", "compliance"]),  # both collapsed, the reward flat
    (NEWCOMER, lambda s: 0.1 + 0.05 * s, ["pass@1", "compliance"]),  # ... or rising
    (NEWCOMER, lambda s: 0.8 if s <= 3 else 0.2, []),  # the reward fell too: the run is failing, not gamed
    ([evm(0, pass1=0.3), evm(5, pass1=0.5), evm(10, pass1=0.2)], lambda s: 0.3, ["pass@1"]),  # 60% below the best
    ([evm(0, pass1=0.3), evm(10, pass1=0.2)], lambda s: 0.3, []),  # 33% down: under eval_drop (0.5)
    ([evm(0, pass1=0.06), evm(10, pass1=0.02)], lambda s: 0.3, []),  # 67% down but by 0.04: noise on few prompts
    ([evm(0, pass1=0.1), evm(10, pass1=0.3)], lambda s: 0.3, []),  # rose
    ([evm(10, pass1=0.3)], lambda s: 0.3, []),  # one evaluation
    ([evm(0, pass1=0.0), evm(10, pass1=0.0)], lambda s: 0.3, []),  # never above 0
])
def test_eval_collapse(evals, reward, subjects):
    got = A.eval_collapse(history({"reward": series(reward)}, evals), S.of("eval_collapse"))
    assert [a.subject for a in got] == subjects
    for a in got:
        assert a.kind == "eval_collapse" and a.key == f"eval_collapse:{a.subject}"
        assert a.evidence["eval_after"] == evals[-1].metrics[a.subject]


def test_eval_collapse_message_names_the_metric_its_best_and_the_reward():
    (a, _) = A.eval_collapse(history({"reward": series(lambda s: 0.3)}, NEWCOMER), S.of("eval_collapse"))
    assert a.message.startswith("held-out pass@1 fell 0.125 -> 0.020 (84% below its best, step 0 -> 10) while the "
                                "training reward did not fall (0.300 -> 0.300)")


def log_step(store, checker, step: int, metrics: dict, groups=()) -> None:
    """A step logged as the trainer logs it: into the run store, and the checker's history in memory."""
    store.log_metrics(step, metrics)
    store.log_groups(step, list(groups))
    checker.add_step(step, metrics, list(groups))


def log_eval(store, checker, step: int, metrics: dict) -> None:
    store.log_eval(step, metrics)
    checker.add_eval(step, metrics)


def test_eval_collapse_on_a_logged_run(tmp_path):
    """The newcomer's run as it logged it: the reward flat, pass@1 and compliance collapsing."""
    store = RunStore.create(tmp_path / "r", config={})
    try:
        checker = A.RunAlarms(store, AlarmsConfig(), {"numeric": 1.0})
        raised = {}
        for step in range(0, 31):
            if step % 10 == 0:
                log_eval(store, checker, step, {"pass@1": [0.125, 0.11, 0.05, 0.02][step // 10],
                                                "compliance": [0.565, 0.5, 0.2, 0.065][step // 10], "len_mean": 9.0})
            if step:
                log_step(store, checker, step, {"reward": 0.3 + 0.001 * (step % 3), "zero_var_frac": 0.2})
                raised.update({a.key: step for a in checker.check(step)})
        assert raised == {"eval_collapse:pass@1": 20, "eval_collapse:compliance": 20}
        alarms = store.summary()["alarms"]
        assert [a["evidence"]["eval_best"] for a in alarms] == [0.125, 0.565]
        assert [a["evidence"]["eval_steps"] for a in alarms] == [[0, 20], [0, 20]]
    finally:
        store.close()


def test_nothing_fires_before_the_baseline_and_a_window():
    m = {"len_mean": series(lambda s: 10 if s <= 3 else 50, range(1, 7)),
         "reward/format": series(lambda s: 0.0 if s <= 3 else 1.0, range(1, 7))}
    h = history(m, [ev(0, 0.2), ev(6, 0.2)], step=6, weights={"format": 1.0, "correct": 1.0})
    assert A.length_jump(h, S.of("length_jump")) is None
    assert A.component_dominance(h, S.of("component_dominance")) is None


def test_detect_collects_every_sign():
    m = {"entropy": series(lambda s: 0.001), "zero_var_frac": series(lambda s: 1.0)}
    assert sorted(a.kind for a in A.detect(history(m), S)) == ["entropy_collapse", "zero_spread"]


# ---- raised once, cleared, re-raised -------------------------------------------------------------------------
def alarm(step: int, kind: str = "zero_spread", subject: str | None = None) -> A.Alarm:
    return A.Alarm(kind, step, "msg", subject=subject)


def test_an_alarm_is_raised_once_while_its_sign_lasts_and_again_after_it_cleared():
    watch = A.AlarmWatch(clear_steps=3)
    assert [a.step for a in watch.update([alarm(1)])[0]] == [1]
    for step in (2, 3, 4):
        assert watch.update([alarm(step)]) == ([], [])
    assert watch.update([]) == ([], [])  # quiet 1
    assert watch.update([alarm(6)]) == ([], [])  # back before clear_steps: still the same alarm
    assert watch.update([]) == ([], []) and watch.update([]) == ([], [])
    assert watch.update([]) == ([], ["zero_spread"])  # quiet 3 in a row: cleared
    assert [a.step for a in watch.update([alarm(10)])[0]] == [10]  # raised again


def test_each_pattern_is_its_own_alarm():
    watch = A.AlarmWatch(clear_steps=5)
    new, _ = watch.update([alarm(4, "answer_shape", "equation")])
    new2, _ = watch.update([alarm(5, "answer_shape", "equation"), alarm(5, "answer_shape", "number_list")])
    assert [a.key for a in new] == ["answer_shape:equation"] and [a.key for a in new2] == ["answer_shape:number_list"]


def test_the_watch_reads_raised_and_cleared_alarms_from_the_events():
    events = [{"kind": "alarm", "step": 4, "data": {"kind": "answer_shape", "subject": "equation"}},
              {"kind": "alarm", "step": 5, "data": {"kind": "zero_spread", "subject": None}},
              {"kind": "alarm_cleared", "step": 30, "data": {"kind": "zero_spread", "subject": None}},
              {"kind": "resumed", "step": 31, "data": {}}]
    watch = A.AlarmWatch(5, events)
    assert watch.raised == {"answer_shape:equation": 4}
    new, _ = watch.update([alarm(32, "answer_shape", "equation"), alarm(32)])
    assert [a.key for a in new] == ["zero_spread"]


# ---- settings --------------------------------------------------------------------------------------------------
def test_stop_on_takes_kinds_or_all():
    assert A.check_kinds(["answer_shape", "kl_blowup"], "alarms.stop_on") == ["answer_shape", "kl_blowup"]
    assert A.check_kinds(["all"], "alarms.stop_on") == list(A.KINDS)
    with pytest.raises(ConfigError, match=r"alarms.stop_on\[1\].*answer_shape"):
        A.check_kinds(["kl_blowup", "answer_shap"], "alarms.stop_on")


def test_a_config_with_an_unknown_stop_on_kind_is_refused():
    data = {"rewards": [{"name": "c", "grader": {"type": "answer"}}], "alarms": {"stop_on": ["hacking"]}}
    with pytest.raises(ConfigError, match="alarms.stop_on"):
        load_train_config(data=data)


# ---- the store: events in, the alarms list out ------------------------------------------------------------------
def test_alarms_are_stored_as_events_and_listed_by_the_summary(tmp_path):
    store = RunStore.create(tmp_path / "r", config={})
    try:
        checker = A.RunAlarms(store, AlarmsConfig(window=2, baseline_steps=1), {"numeric": 1.0})
        from kitae.store import GroupRecord

        for step in (1, 2, 3):
            groups = [GroupRecord("p", [], "7", {}, [SampleRecord("7", 1, "stop", 0.0, 0.0)] * 4, 0)]
            log_step(store, checker, step, {"zero_var_frac": 1.0, "reward": 0.0}, groups)
            raised = checker.check(step)
            assert [a.kind for a in raised] == (["zero_spread"] if step == 2 else [])
        alarms = store.summary()["alarms"]
        assert [(a["kind"], a["step"]) for a in alarms] == [("zero_spread", 2)]
        assert alarms[0]["groups"][0]["step"] == 2 and "zero_var_frac" in alarms[0]["evidence"]
        assert alarms[0]["groups"][0]["id"] == store.groups(step=2)[0].id  # the stored group's id, for its link
        assert alarms[0]["message"].startswith("100% of the groups")
        # a checker opened again on the run (a resume) does not raise it again
        again = A.RunAlarms(store, AlarmsConfig(window=2, baseline_steps=1), {"numeric": 1.0})
        assert again.check(3) == []
    finally:
        store.close()


def test_alarms_can_be_switched_off(tmp_path):
    store = RunStore.create(tmp_path / "r", config={})
    try:
        checker = A.RunAlarms(store, AlarmsConfig(window=1, enabled=False), {})
        log_step(store, checker, 1, {"entropy": 0.0})
        assert checker.check(1) == []
        assert store.events() == []
    finally:
        store.close()


# ---- agents: tool errors, episodes cut by max_turns, tool calls that buy no reward ---------------------------
@pytest.mark.parametrize("check, metrics, fires", [
    (A.tool_errors, {"agent/tool_errors": series(lambda s: 0.05 if s <= 3 else 0.4)}, True),    # 8x, over 0.2
    (A.tool_errors, {"agent/tool_errors": series(lambda s: 0.0 if s <= 3 else 0.25)}, True),    # from none
    (A.tool_errors, {"agent/tool_errors": series(lambda s: 0.3)}, False),                       # always that high
    (A.tool_errors, {"agent/tool_errors": series(lambda s: 0.01 if s <= 3 else 0.1)}, False),   # 10x but rare
    (A.tool_errors, {}, False),                                                                 # a one-turn run
    (A.max_turns, {"agent/ended/max_turns": series(lambda s: 0.1 if s <= 3 else 0.7)}, True),
    (A.max_turns, {"agent/ended/max_turns": series(lambda s: 0.7 if s not in (8, 9) else 0.1)}, False),  # mean 0.46
    (A.max_turns, {"agent/ended/max_turns": series(lambda s: 0.3)}, False),                     # most answered
    (A.max_turns, {"agent/ended/max_turns": series(lambda s: 0.9, range(7, 11))}, False),       # 4 of 5 steps
    (A.tool_calls_without_reward, {"agent/tool_calls": series(lambda s: 1.0 if s <= 3 else 3.0),
                                   "reward": series(lambda s: 0.4)}, True),                     # 3x calls, flat
    (A.tool_calls_without_reward, {"agent/tool_calls": series(lambda s: 1.0 if s <= 3 else 3.0),
                                   "reward": series(lambda s: 0.4 if s <= 3 else 0.7)}, False),  # calls that pay
    (A.tool_calls_without_reward, {"agent/tool_calls": series(lambda s: 0.1 if s <= 3 else 0.3),
                                   "reward": series(lambda s: 0.4)}, False),                    # 3x but 0.2 more
    (A.tool_calls_without_reward, {"reward": series(lambda s: 0.4)}, False),                    # a one-turn run
])
def test_agent_checks(check, metrics, fires):
    got = check(history(metrics, groups=[group(STEP, ["7"] * 4, [1.0] * 4, gid=50)]), S.of(check.__name__))
    assert (got is not None) == fires
    if fires:
        assert got.kind == check.__name__ and got.groups == [{"id": 50, "step": STEP, "group_index": 0}]


def test_tool_errors_says_how_many_timed_out():
    m = {"agent/tool_errors": series(lambda s: 0.0 if s <= 3 else 0.5), "agent/tool_timeouts": series(lambda s: 0.4)}
    got = A.tool_errors(history(m), S.of("tool_errors"))
    assert "tool errors 0% -> 50% of the tool calls" in got.message and "40% of the calls timed out" in got.message


def test_agent_alarms_are_known_kinds_with_settings():
    assert {"tool_errors", "max_turns", "tool_calls_without_reward"} <= set(A.KINDS)
    assert A.check_kinds(["max_turns"], "alarms.stop_on") == ["max_turns"]
    with pytest.raises(ConfigError, match="alarms.tool_error_rate"):
        load_train_config(data={"alarms": {"tool_error_rate": 1.5}})


def test_agent_alarms_read_the_agent_metrics_a_run_logged(tmp_path):
    """The checker keeps the agent/... metrics each step logged (the keys it reads) and raises."""
    store = RunStore.create(tmp_path / "r", config={})
    try:
        checker = A.RunAlarms(store, AlarmsConfig(window=2, baseline_steps=1), {"numeric": 1.0})
        raised = []
        for step in (1, 2, 3):
            log_step(store, checker, step, {"reward": 0.3, "agent/tool_calls": 1.0 if step == 1 else 4.0,
                                            "agent/tool_errors": 0.0 if step == 1 else 0.5, "agent/tool_timeouts": 0.5,
                                            "agent/ended/max_turns": 0.9, "agent/ended/answer": 0.1})
            raised += [(a.kind, a.step) for a in checker.check(step)]
        assert sorted(raised) == [("max_turns", 2), ("tool_calls_without_reward", 3), ("tool_errors", 3)]
    finally:
        store.close()
