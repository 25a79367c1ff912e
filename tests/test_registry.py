"""kitae.registry: names to objects, lazy "module:attr" entries, and the one "module:attr" loader that reward
functions in a config (`function: my_rewards:brevity`) are imported with as well."""

from __future__ import annotations

import math
import re

import pytest

from kitae.errors import ConfigError
from kitae.registry import Registry, load_target


def test_load_target_imports_the_attribute():
    assert load_target("math:sqrt", "rewards[0].function") is math.sqrt
    assert load_target("os.path:join", "x") is __import__("os").path.join  # a dotted module


@pytest.mark.parametrize("target, message", [
    ("math", "x.function: expected 'module:function', got 'math'"),  # no colon
    ("math:", "x.function: expected 'module:function', got 'math:'"),  # no attribute
    (":sqrt", "x.function: expected 'module:function', got ':sqrt'"),  # no module
    ("math:nope", "x.function: cannot import 'math:nope': module 'math' has no attribute 'nope'"),
    ("no_such_module_xyz:f", "x.function: cannot import 'no_such_module_xyz:f': No module named 'no_such_module_xyz'"),
])
def test_load_target_errors_name_the_key_and_the_target(target, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_target(target, "x.function")


def test_a_lazy_entry_is_imported_once_on_first_use():
    reg = Registry("thing")
    reg.register_lazy("root", "math:sqrt")
    assert reg._entries["root"] == "math:sqrt"  # not imported yet
    assert reg.get("root") is math.sqrt
    assert reg._entries["root"] is math.sqrt


def test_a_lazy_entry_that_does_not_import_is_a_config_error_at_the_key():
    """Was a bare ModuleNotFoundError / AttributeError with no key in it."""
    reg = Registry("thing")
    reg.register_lazy("gone", "no_such_module_xyz:Thing")
    reg.register_lazy("typo", "math:sqrtt")
    with pytest.raises(ConfigError, match=re.escape("rewards[1].grader.type: cannot import 'no_such_module_xyz:Thing'")):
        reg.get("gone", "rewards[1].grader.type")
    with pytest.raises(ConfigError, match=re.escape("cannot import 'math:sqrtt': module 'math' has no attribute")):
        reg.get("typo", "rewards[1].grader.type")


def test_an_unknown_name_gets_did_you_mean():
    reg = Registry("policy loss")
    reg.register("clip", object())
    with pytest.raises(ConfigError, match=re.escape("algorithm.loss: unknown policy loss 'clpi'; did you mean 'clip'?")):
        reg.get("clpi", "algorithm.loss")
