"""kitae.config.convert, kind by kind: what each field type turns a YAML value into, and the error (with its key
path) for a value it cannot take. Every case is one line; the errors are checked in full. And from_dict's order:
a section is resolved (what it leaves out filled in), then validated."""

from __future__ import annotations

import math
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Optional

import pytest

from kitae.config import convert, from_dict, short_repr
from kitae.errors import ConfigError


@dataclass
class Section:
    size: int = 1


class Hooked:
    """A class that builds itself from a config value (as grader specs and templates do)."""

    def __init__(self, value: Any, path: str):
        self.value, self.path = value, path

    @classmethod
    def from_config(cls, value: Any, path: str) -> "Hooked":
        if value == "bad":
            raise ConfigError(path, "hooked says no")
        return cls(value, path)


@dataclass
class HookedSection:
    """A dataclass with a hook: the hook builds it, not from_dict."""

    size: int = 1

    @classmethod
    def from_config(cls, value: Any, path: str) -> "HookedSection":
        return cls(size=len(value))


BIG = 10 ** 400  # an integer no float holds

CONVERTED = [
    # type, YAML value, converted value
    (Any, {"a": [1]}, {"a": [1]}),  # Any: as it is
    (int, 3, 3),
    (int, 3.0, 3),  # a float that is an integer
    (float, 2, 2.0),
    (float, "1e-5", 1e-5),  # YAML 1.1 reads 1e-5 as a string
    (float, " 2.5 ", 2.5),
    (bool, True, True),
    (str, "x", "x"),
    (str, 7, "7"),  # a number where a string goes: its text
    (str, 1.5, "1.5"),
    (Path, "a/b", "a/b"),  # a type without a rule: as it is
    (Literal["a", "b"], "b", "b"),
    (Literal[1, 2], 2, 2),
    (Optional[int], None, None),
    (int | None, None, None),
    (int | None, 4, 4),
    (int | str, 2.5, "2.5"),  # the first member that takes it
    (float | str, "abc", "abc"),
    (str | Section, {"size": 2}, Section(2)),
    (list[int], [1, 2.0], [1, 2]),
    (typing.List, [1, "a"], [1, "a"]),  # no item type: items as they are
    (list, (1, 2), (1, 2)),  # bare list: not checked
    (tuple[int, ...], [1, 2, 3], (1, 2, 3)),
    (tuple[int, str], [1, 2], (1, "2")),
    (typing.Tuple, [1, "a"], (1, "a")),
    (tuple[float, float], (1, 2), (1.0, 2.0)),
    (dict[str, int], {"a": 1.0}, {"a": 1}),  # keys as they are, values converted
    (typing.Dict, {"a": "b"}, {"a": "b"}),
    (Section, {"size": 3}, Section(3)),
    (Section, None, Section(1)),  # a section given as null: its defaults
    (HookedSection, "abc", HookedSection(3)),  # the hook wins over the dataclass reader
    (list[Section], [{"size": 4}], [Section(4)]),
    (Optional[list[float]], [1], [1.0]),
]


@pytest.mark.parametrize("tp, value, expected", CONVERTED)
def test_a_value_converts_to_its_field_type(tp, value, expected):
    out = convert(tp, value, "f")
    assert out == expected and type(out) is type(expected)


@pytest.mark.parametrize("tp, value, expected", [
    (float, float("inf"), math.inf),
    (float, "-inf", -math.inf),
    (float, "1e400", math.inf),
    (list[float], [float("inf")], [math.inf]),  # finite=False reaches the items
    (dict[str, float], {"a": float("-inf")}, {"a": -math.inf}),
    (tuple[float, ...], [float("inf")], (math.inf,)),
    (Optional[float], float("inf"), math.inf),
])
def test_finite_false_lets_infinity_through(tp, value, expected):
    assert convert(tp, value, "f", finite=False) == expected


def test_finite_false_lets_nan_through():
    assert math.isnan(convert(float, float("nan"), "f", finite=False))


def test_a_hook_gets_the_value_and_the_key_path():
    out = convert(Hooked, [1], "a.b")
    assert isinstance(out, Hooked) and (out.value, out.path) == ([1], "a.b")
    assert isinstance(convert(Hooked | None, "x", "p"), Hooked)


FINITE = ("expected a finite number, got {}: NaN and infinity are not values for this setting (a number beyond "
          "about 1.8e308, such as 1e400, reads as infinity); give a finite number")

REFUSED = [
    # type, YAML value, the whole error
    (int, "3", "f: expected an integer, got '3'"),
    (int, 2.5, "f: expected an integer, got 2.5"),
    (int, True, "f: expected an integer, got True"),  # YAML true is not 1
    (int, None, "f: expected an integer, got None"),
    (int, float("nan"), "f: expected an integer, got nan"),
    (float, True, "f: expected a number, got True"),
    (float, "fast", "f: expected a number, got 'fast'"),
    (float, [1], "f: expected a number, got [1]"),
    (float, None, "f: expected a number, got None"),
    (float, BIG, "f: expected a number, got " + short_repr(BIG) + ", too large"),  # no float holds it
    (float, float("nan"), "f: " + FINITE.format("nan")),
    (float, float("-inf"), "f: " + FINITE.format("-inf")),
    (float, "1e400", "f: " + FINITE.format("'1e400'")),  # the value as written
    (bool, "yes", "f: expected true or false, got 'yes'"),
    (bool, 1, "f: expected true or false, got 1"),
    (str, True, "f: expected a string, got True"),
    (str, ["a"], "f: expected a string, got ['a']"),
    (str, None, "f: expected a string, got None"),
    (str, list(range(100)), "f: expected a string, got [0, 1, 2, 3, ...]"),  # a long value, cut (short_repr)
    (Literal["token_mean", "seq_mean"], "tokenmean",
     "f: got 'tokenmean'; expected one of token_mean, seq_mean; did you mean 'token_mean'?"),
    (Literal["a", "b"], "zzz", "f: got 'zzz'; expected one of a, b"),  # nothing close: no hint
    (Literal[1, 2], 3, "f: got 3; expected one of 1, 2"),
    (Literal["a"], None, "f: got None; expected one of a"),
    (Optional[int], "x", "f: expected an integer, got 'x'"),  # the member's own error
    (int | float, "x", "f: expected an integer, got 'x'"),  # every member refuses: the first one's error
    (int | Section, {"sise": 1}, "f.sise: unknown key; did you mean 'size'?"),  # a mapping: the section's error
    (str | Section, [1], "f: expected a string, got [1]"),
    (list[int], "1, 2", "f: expected a list, got str"),
    (list[int], {"a": 1}, "f: expected a list, got dict"),
    (list[int], [1, "x"], "f[1]: expected an integer, got 'x'"),
    (list[list[int]], [[1], [2, "x"]], "f[1][1]: expected an integer, got 'x'"),
    (list[float], [0.5, float("nan")], "f[1]: " + FINITE.format("nan")),
    (tuple[int, ...], 3, "f: expected a list, got int"),
    (tuple[int, int], [1, 2, 3], "f: expected a list of 2 values, got 3"),
    (tuple[int, str], [1.5, "a"], "f[0]: expected an integer, got 1.5"),
    (tuple[float, ...], [1, float("inf")], "f[1]: " + FINITE.format("inf")),
    (dict[str, int], [1], "f: expected a mapping, got list"),
    (dict[str, int], {"a": "x"}, "f.a: expected an integer, got 'x'"),
    (dict[str, float], {"w": float("-inf")}, "f.w: " + FINITE.format("-inf")),
    (Section, 3, "f: expected a mapping, got int"),
    (Section, {"size": "x"}, "f.size: expected an integer, got 'x'"),
    (Section, {"siz": 1}, "f.siz: unknown key; did you mean 'size'?"),
    (Hooked, "bad", "f: hooked says no"),
    (list[Hooked], ["ok", "bad"], "f[1]: hooked says no"),
]


@pytest.mark.parametrize("tp, value, message", REFUSED)
def test_a_value_the_type_cannot_take_is_an_error_naming_the_key_path(tp, value, message):
    with pytest.raises(ConfigError) as err:
        convert(tp, value, "f")
    assert str(err.value) == message


def test_the_key_path_of_a_top_level_value_is_its_own():
    with pytest.raises(ConfigError) as err:
        convert(dict[str, int], {"a": "x"}, "")
    assert str(err.value) == "a: expected an integer, got 'x'"


@dataclass
class Bounds:
    low: int = 0
    high: int | None = None  # left out: low + 1

    def resolve(self, path: str) -> None:
        if self.high is None:
            self.high = self.low + 1

    def validate(self, path: str) -> None:
        if self.high <= self.low:
            raise ConfigError(f"{path}.high", f"must be above low ({self.low}), got {self.high}")


def test_from_dict_resolves_a_section_then_validates_it():
    assert from_dict(Bounds, {"low": 3}, "b") == Bounds(3, 4)  # validate saw high filled in
    with pytest.raises(ConfigError) as err:
        from_dict(Bounds, {"low": 3, "high": 2}, "b")
    assert str(err.value) == "b.high: must be above low (3), got 2"
