"""kitae.config.Variant: a variant's typed settings beside its code, read from a name, a mapping or flat keys."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pytest

from kitae.config import Variant, from_dict, setting, to_dict
from kitae.errors import ConfigError
from kitae.registry import Registry

SHAPES = Registry("shape")


@dataclass
class ShapeSettings(Variant):
    registry: ClassVar[Registry] = SHAPES
    kind: ClassVar[str] = "shape"


@dataclass
class CircleSettings(ShapeSettings):
    radius: float = setting(1.0, above=0)


@dataclass
class SquareSettings(ShapeSettings):
    side: float = 2.0
    rounded: bool = False


SHAPES.register("circle", object(), settings=CircleSettings)
SHAPES.register("square", object(), settings=SquareSettings)
SHAPES.register("point", object())  # no settings: the family's base


@dataclass
class Drawing:
    flat_settings: ClassVar[tuple[str, ...]] = ("shape",)
    shape: ShapeSettings = ShapeSettings.default("circle")
    color: str = "red"


def test_a_name_alone_is_the_variant_with_its_defaults():
    d = from_dict(Drawing, {"shape": "square"})
    assert isinstance(d.shape, SquareSettings) and (d.shape.type, d.shape.side) == ("square", 2.0)
    assert from_dict(Drawing, {}).shape == CircleSettings(type="circle", radius=1.0)
    assert type(from_dict(Drawing, {"shape": "point"}).shape) is ShapeSettings


def test_a_mapping_gives_the_settings_and_round_trips():
    d = from_dict(Drawing, {"shape": {"type": "circle", "radius": 3}})
    assert d.shape.radius == 3.0
    assert to_dict(d) == {"shape": {"type": "circle", "radius": 3.0}, "color": "red"}
    assert from_dict(Drawing, to_dict(d)) == d


def test_flat_settings_beside_the_name_go_to_the_variant():
    assert from_dict(Drawing, {"shape": "square", "side": 5}).shape.side == 5.0
    assert from_dict(Drawing, {"radius": 4}).shape.radius == 4.0  # the default variant takes it


def test_a_setting_the_chosen_variant_does_not_take_names_who_takes_it():
    with pytest.raises(ConfigError) as e:
        from_dict(Drawing, {"shape": "circle", "side": 5}, "drawing")
    msg = str(e.value)
    assert msg.startswith("drawing.side:") and "not a setting of shape 'circle'" in msg and "square" in msg
    with pytest.raises(ConfigError, match=r"drawing.shape.side: not a setting of shape 'point'.*takes no settings"):
        from_dict(Drawing, {"shape": {"type": "point", "side": 1}}, "drawing")


def test_bad_names_values_and_doubles_are_errors_naming_the_key():
    with pytest.raises(ConfigError, match=r"d.shape: unknown shape 'cirle'; did you mean 'circle'"):
        from_dict(Drawing, {"shape": "cirle"}, "d")
    with pytest.raises(ConfigError, match=r"d.shape.radius: must be > 0"):
        from_dict(Drawing, {"shape": {"type": "circle", "radius": 0}}, "d")
    with pytest.raises(ConfigError, match=r"d.shape.type: missing"):
        from_dict(Drawing, {"shape": {"radius": 2}}, "d")
    with pytest.raises(ConfigError, match=r"d.radius: given twice"):
        from_dict(Drawing, {"shape": {"type": "circle", "radius": 2}, "radius": 3}, "d")
    with pytest.raises(ConfigError, match=r"d.colr: unknown key; did you mean 'color'"):
        from_dict(Drawing, {"colr": "blue"}, "d")


def test_a_lazy_entry_carries_lazy_settings():
    reg = Registry("thing")
    reg.register_lazy("circle", "tests.test_config_variants:SHAPES", settings="tests.test_config_variants:CircleSettings")
    assert reg.settings_class("circle") is CircleSettings
    reg.register("bare", object())
    assert reg.settings_class("bare") is None
    with pytest.raises(ConfigError, match="unknown thing 'nope'"):
        reg.settings_class("nope", "x")


def test_a_flat_setting_at_its_default_for_a_variant_that_does_not_take_it_is_what_old_configs_saved():
    """Configs saved before settings moved beside their variant hold every variant's settings at their defaults:
    they still load; a value that is not the default is still an error."""
    assert from_dict(Drawing, {"shape": "circle", "side": 2.0, "rounded": False}).shape == CircleSettings("circle")
    with pytest.raises(ConfigError, match="not a setting of shape 'circle'"):
        from_dict(Drawing, {"shape": "circle", "side": 3.0})
    with pytest.raises(ConfigError, match="not a setting of shape 'point'"):
        from_dict(Drawing, {"shape": {"type": "point", "side": 2.0}})  # written for the variant: not a saved default
