"""The alarms' settings: each alarm registered with its own settings dataclass, read from ``alarms.KIND.SETTING`` and
from today's flat keys (``alarms.length_jump: 4``, a shared one such as ``flat`` to every alarm that takes it);
a key no alarm takes is an error with the closest valid key; the saved config round-trips."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import pytest

from kitae.config import to_dict
from kitae.errors import ConfigError
from kitae.trainer import alarms as A
from kitae.trainer.alarms import ALARMS, KINDS, AlarmsConfig
from kitae.trainer.config import load_train_config

REWARDS = [{"name": "c", "grader": {"type": "answer"}}]
TAKE_FLAT = ["reward_vs_eval", "component_dominance", "eval_collapse", "tool_calls_without_reward"]


def alarms(section: dict) -> AlarmsConfig:
    return load_train_config(data={"rewards": REWARDS, "alarms": section}).alarms


def test_every_alarm_is_registered_with_its_settings_in_the_order_they_run():
    assert list(KINDS) == ["reward_vs_eval", "component_dominance", "answer_shape", "length_jump", "length_collapse",
                           "entropy_collapse", "kl_blowup", "zero_spread", "eval_collapse", "mismatch_growth",
                           "tool_errors", "max_turns", "tool_calls_without_reward"]
    assert ALARMS.names() == sorted(KINDS)
    for kind in KINDS:
        settings = ALARMS.settings_class(kind)
        assert dataclasses.is_dataclass(settings) and dataclasses.fields(settings), kind
        assert isinstance(AlarmsConfig().of(kind), settings)


@pytest.mark.parametrize("section, kind, setting, value", [
    ({"length_jump": 4}, "length_jump", "length_jump", 4.0),                      # today's flat key
    ({"length_jump": {"length_jump": 4}}, "length_jump", "length_jump", 4.0),     # the alarm's own section
    ({"kl_max": 2, "kl_blowup": {"kl_growth": 20}}, "kl_blowup", "kl_max", 2.0),  # both forms at once
    ({"kl_max": 2, "kl_blowup": {"kl_growth": 20}}, "kl_blowup", "kl_growth", 20.0),
    ({"zero_spread": 0.8}, "zero_spread", "zero_spread", 0.8),                    # a kind's name, flat: its setting
    ({}, "answer_shape", "shape_share", 0.5),                                     # the default
])
def test_a_threshold_reads_from_its_alarm_or_flat(section, kind, setting, value):
    assert getattr(alarms(section).of(kind), setting) == value


def test_a_flat_key_shared_by_several_alarms_goes_to_each_and_the_alarms_own_overrides_it():
    got = alarms({"flat": 0.05, "eval_collapse": {"flat": 0.2}})
    assert [got.of(k).flat for k in TAKE_FLAT] == [0.05, 0.05, 0.2, 0.05]
    assert all(k in TAKE_FLAT or not hasattr(got.of(k), "flat") for k in KINDS)


@pytest.mark.parametrize("section, message", [
    ({"lenght_jump": 3}, r"alarms.lenght_jump: not a setting of the alarms; did you mean 'length_jump'"),
    ({"kl_blowup": {"kl_mx": 1}}, r"alarms.kl_blowup.kl_mx: unknown key; did you mean 'kl_max'"),
    ({"max_turns": 3}, r"alarms.max_turns: expected a mapping of alarm max_turns's settings \(max_turns_share\)"),
    ({"length_jump": 0.5}, r"alarms.length_jump: must be > 1"),                   # bounds, named as written
    ({"tool_errors": {"tool_error_rate": 1.5}}, r"alarms.tool_errors.tool_error_rate: must be <= 1"),
    ({"window": 0}, r"alarms.window: must be >= 1"),
    ({"settings": {}}, r"alarms.settings: not a setting of the alarms"),          # the field is no key of the section
    ({"stop_on": ["hacking"]}, r"alarms.stop_on\[0\]: unknown alarm kind 'hacking'"),
    ("on", r"alarms: expected a mapping"),
])
def test_a_bad_alarms_section_is_an_error_naming_the_key(section, message):
    with pytest.raises(ConfigError, match=message):
        alarms(section)


def test_stop_on_all_is_every_kind():
    assert alarms({"stop_on": ["all"]}).stop_on == list(KINDS)


def test_the_saved_config_writes_each_alarms_settings_in_its_section_and_reads_back():
    cfg = load_train_config(data={"rewards": REWARDS, "alarms": {"flat": 0.05, "kl_blowup": {"kl_max": 2}}})
    saved = cfg.to_dict()["alarms"]
    assert saved["kl_blowup"] == {"kl_max": 2.0, "kl_growth": 10.0} and saved["eval_collapse"]["flat"] == 0.05
    assert "settings" not in saved and saved["window"] == 5
    assert load_train_config(data=cfg.to_dict()).alarms == cfg.alarms
    # a run saved with today's flat keys reads as the same settings (a resume compares the two)
    flat = load_train_config(data={"rewards": REWARDS, "alarms": {"flat": 0.05, "kl_max": 2}})
    assert flat.to_dict() == cfg.to_dict()


def test_detect_runs_each_alarm_with_its_own_settings():
    h = A.History(10, {"len_mean": {s: 10.0 if s <= 3 else 35.0 for s in range(1, 11)}})
    assert [a.kind for a in A.detect(h, AlarmsConfig())] == ["length_jump"]
    assert A.detect(h, alarms({"length_jump": {"length_jump": 4}})) == []


@dataclass
class _Section:
    name: str = "x"
    parts: dict = field(default_factory=lambda: {"a": {"k": 1}}, metadata={"spread": True})


def test_to_dict_writes_a_spread_mapping_in_the_section_itself():
    assert to_dict(_Section()) == {"name": "x", "a": {"k": 1}}
