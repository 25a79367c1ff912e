"""kitae.config's rule for numbers: a float field refuses NaN and ±infinity (1e400 reads as infinity) unless it
says it allows them, and ``setting(minimum=, above=, maximum=)`` bounds what the field means; errors name the key
path. :func:`kitae.config.check_numbers` applies the same rule to a config built in Python."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pytest

from kitae.config import check_numbers, from_dict, setting
from kitae.errors import ConfigError


@dataclass
class Inner:
    rate: float = setting(0.1, above=0, maximum=1)


@dataclass
class Spec:
    scale: float = setting(1.0, minimum=0)
    offset: float = 0.0  # any finite number
    limit: float = setting(math.inf, finite=False)  # a field that means "no limit" with .inf
    cap: float | None = None
    betas: list[float] = field(default_factory=lambda: [0.9, 0.99])
    weights: dict[str, float] = field(default_factory=dict)
    pair: tuple[float, float] = (0.0, 1.0)
    inner: Inner = field(default_factory=Inner)


@pytest.mark.parametrize(
    "data, message",
    [
        ({"offset": float("nan")}, "offset: expected a finite number, got nan"),  # YAML .nan
        ({"offset": float("inf")}, "offset: expected a finite number, got inf"),  # YAML .inf or 1.0e+400
        ({"offset": "1e400"}, "offset: expected a finite number, got '1e400'"),  # YAML reads 1e400 as a string
        ({"offset": "-inf"}, "offset: expected a finite number, got '-inf'"),
        ({"offset": "nan"}, "offset: expected a finite number, got 'nan'"),
        ({"cap": float("nan")}, "cap: expected a finite number"),  # Optional[float]
        ({"betas": [0.9, float("nan")]}, "betas[1]: expected a finite number"),  # list[float]
        ({"weights": {"a": float("-inf")}}, "weights.a: expected a finite number"),  # dict[str, float]
        ({"pair": [float("inf"), 1.0]}, "pair[0]: expected a finite number"),  # tuple[float, float]
        ({"inner": {"rate": float("nan")}}, "inner.rate: expected a finite number"),  # nested
        ({"scale": float("nan")}, "scale: expected a finite number"),  # nan < 0 is False: not a bound's job
        ({"scale": -1}, "scale: must be >= 0, got -1.0"),
        ({"inner": {"rate": 0}}, "inner.rate: must be > 0, got 0.0"),
        ({"inner": {"rate": 2}}, "inner.rate: must be <= 1, got 2.0"),
    ],
)
def test_non_finite_and_out_of_bounds_numbers_name_the_key_path(data, message):
    with pytest.raises(ConfigError) as err:
        from_dict(Spec, data)
    assert str(err.value).startswith(message)


def test_the_error_says_how_to_fix_it():
    with pytest.raises(ConfigError) as err:
        from_dict(Spec, {"offset": "1e400"})
    assert "reads as infinity" in str(err.value) and "give a finite number" in str(err.value)


def test_a_field_that_allows_infinity_takes_it_and_finite_values_pass():
    spec = from_dict(Spec, {"limit": float("inf"), "offset": -3.5, "scale": 0, "inner": {"rate": 1}})
    assert spec.limit == math.inf and spec.offset == -3.5 and spec.scale == 0.0 and spec.inner.rate == 1.0
    assert math.isnan(from_dict(Spec, {"limit": float("nan")}).limit)


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: Spec(offset=math.nan), "offset: expected a finite number"),
        (lambda: Spec(scale=-2.0), "scale: must be >= 0, got -2.0"),
        (lambda: Spec(inner=Inner(rate=math.inf)), "inner.rate: expected a finite number"),
        (lambda: Spec(betas=[math.nan]), "betas[0]: expected a finite number"),
    ],
)
def test_check_numbers_applies_the_rule_to_a_config_built_in_python(build, message):
    with pytest.raises(ConfigError) as err:
        check_numbers(build())
    assert str(err.value).startswith(message)
    check_numbers(Spec(limit=math.inf))  # allowed where the field says so
