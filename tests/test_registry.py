"""kitae.registry: names to objects, lazy "module:attr" entries, and the one "module:attr" loader that reward
functions in a config (`function: my_rewards:brevity`) are imported with as well. A name is registered once:
a second entry under it is refused unless asked to replace."""

from __future__ import annotations

import doctest
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kitae.errors import ConfigError, KitaeError
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


def test_a_lazy_entry_is_imported_once_on_first_use(tmp_path, monkeypatch):
    (tmp_path / "lazy_thing.py").write_text("IMPORTS = []\nIMPORTS.append(1)\n\ndef thing():\n    return 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "lazy_thing", raising=False)
    reg = Registry("thing")
    reg.register_lazy("root", "lazy_thing:thing")
    assert "lazy_thing" not in sys.modules  # not imported yet
    assert reg.get("root")() == 2 and reg.get("root") is sys.modules["lazy_thing"].thing
    assert sys.modules["lazy_thing"].IMPORTS == [1]


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


class Named:
    """A class that a lazy entry names: "tests.test_registry:Named"."""


def test_a_second_entry_under_a_taken_name_is_refused_unless_asked_to_replace():
    """It used to replace the first silently: a plugin's grader named "answer" would have replaced kitae's."""
    reg = Registry("policy loss")
    first, second = object(), object()
    reg.register("clip", first)
    taken = "policy loss 'clip' is already registered"
    with pytest.raises(KitaeError, match=re.escape(taken) + ".*replace=True"):
        reg.register("clip", second)
    with pytest.raises(KitaeError, match=re.escape(taken)):
        @reg.register("clip")  # the decorator form
        def clip_loss():
            pass
    assert reg.get("clip") is first  # the first entry is kept
    reg.register("clip", second, replace=True)
    assert reg.get("clip") is second


@pytest.mark.parametrize("lazy, obj, allowed", [
    ("tests.test_registry:Named", Named, True),  # the module registering the object its lazy entry names
    ("math:sqrt", math.sqrt, True),
    ("math:sqrt", math.floor, False),  # another object of that module
    ("tests.test_registry:Other", Named, False),  # the right module, another name
    ("other_module:Named", Named, False),
])
def test_a_lazy_entry_is_replaced_only_by_the_object_it_names(lazy, obj, allowed):
    reg = Registry("thing")
    reg.register_lazy("it", lazy)
    if allowed:
        reg.register("it", obj)
        assert reg.get("it") is obj
    else:
        for _ in range(2):  # the second time: the entry is still the lazy one
            with pytest.raises(KitaeError, match=re.escape(f"thing 'it' is already registered ({lazy})")):
                reg.register("it", obj)


def test_the_same_object_again_and_a_lazy_entry_again_are_no_conflict():
    reg = Registry("thing")
    reg.register("root", math.sqrt)
    reg.register("root", math.sqrt)  # a module registering what it registered: nothing changes
    reg.register_lazy("root", "math:sqrt")  # names the object already there
    reg.register_lazy("floor", "math:floor")
    reg.register_lazy("floor", "math:floor")
    assert reg.get("root") is math.sqrt and reg.get("floor") is math.floor
    with pytest.raises(KitaeError, match=re.escape("thing 'floor' is already registered (math:floor)")):
        reg.register_lazy("floor", "math:ceil")
    reg.register_lazy("floor", "math:ceil", replace=True)
    assert reg.get("floor") is math.ceil


def test_every_lazy_builtin_imports_and_registers_itself_in_a_fresh_process():
    """The normal lazy path: GRADERS holds "module:Class" strings until a spec names the type; importing the
    module then registers the class under the name its string holds (@register_grader), which must not count
    as a second registration. A fresh process, so no module is imported beforehand."""
    code = ("from kitae.graders import GRADERS\n"
            "from kitae.curate.step import STEPS\n"
            "from kitae.rollout.base import ENGINES\n"
            "for reg in (GRADERS, STEPS, ENGINES):\n"
            "    for name in reg.names():\n"
            "        assert not isinstance(reg.get(name), str), name\n"
            "print(len(GRADERS.names()), len(STEPS.names()), len(ENGINES.names()))\n")
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, timeout=300)
    assert done.returncode == 0, done.stderr
    graders, steps, engines = map(int, done.stdout.split())
    assert graders >= 20 and steps >= 6 and engines >= 2  # the loop above saw every registry


def test_the_docstring_examples_run():
    import kitae.registry

    result = doctest.testmod(kitae.registry)
    assert result.failed == 0 and result.attempted > 0


def _filled() -> Registry:
    reg = Registry("thing")
    reg.register("taken", math.floor)
    reg.register_lazy("lazy", "no_such_module_xyz:thing")  # still lazy when getting it is "cannot import"
    return reg


@pytest.mark.parametrize("name", [
    "new",  # not registered before: gone after
    "taken",  # replaced in the block, the previous entry back after
    "lazy",  # a lazy entry replaced: the "module:attr" string back after
])
def test_a_scoped_entry_is_there_in_the_block_and_the_registry_as_it_was_after(name):
    reg = _filled()
    with reg.scoped(name, math.sqrt) as obj:
        assert obj is math.sqrt and reg.get(name) is math.sqrt
    assert reg.names() == ["lazy", "taken"] and reg.get("taken") is math.floor
    with pytest.raises(ConfigError, match=re.escape("cannot import 'no_such_module_xyz:thing'")):
        reg.get("lazy")


def test_a_scoped_entry_is_taken_back_when_the_block_raises():
    reg = _filled()
    with pytest.raises(RuntimeError, match="in the block"):
        with reg.scoped("taken", math.sqrt), reg.scoped("new", math.sqrt):
            raise RuntimeError("in the block")
    assert reg.get("taken") is math.floor and "new" not in reg


def test_a_scope_without_an_object_takes_back_what_the_block_registered():
    reg = _filled()
    with reg.scoped("decorated"):
        @reg.register("decorated")
        def decorated():
            pass

        assert reg.get("decorated") is decorated
    with reg.scoped("taken"):
        reg.register("taken", math.sqrt, replace=True)
    assert "decorated" not in reg and reg.get("taken") is math.floor


def test_scopes_nest():
    reg = _filled()
    with reg.scoped("taken", math.sqrt):
        with reg.scoped("taken", math.fabs):
            assert reg.get("taken") is math.fabs
        assert reg.get("taken") is math.sqrt
    assert reg.get("taken") is math.floor
