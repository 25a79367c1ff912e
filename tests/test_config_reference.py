"""docs/config.md lists every training setting with its default as kitae/trainer/config.py has them."""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("config_reference", ROOT / "scripts" / "config_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_page_is_what_the_code_says():
    script = _script()
    assert script.OUT.read_text(encoding="utf-8") == script.page(), \
        "docs/config.md is out of date: run python scripts/config_reference.py"


def test_every_setting_is_on_the_page():
    from kitae.trainer.config import TrainConfig

    listed = {key for key, _, _ in _script().rows(TrainConfig)}

    from kitae.config import Variant

    def paths(cls, prefix=""):
        for f in dataclasses.fields(cls):
            if f.name == "type" and issubclass(cls, Variant):
                continue  # a variant's name: its field's row
            yield prefix + f.metadata.get("key", f.name)  # its YAML name (sampling.async)
            value = getattr(cls(), f.name)
            if isinstance(value, Variant):  # each variant's settings, beside the name where the section keeps them
                family = next(c for c in type(value).__mro__ if "registry" in vars(c))
                at = prefix if f.name in getattr(cls, "flat_settings", ()) else f"{prefix}{f.name}."
                for name in family.registry.names():
                    yield from paths(family.settings_class(name, ""), at)
            elif dataclasses.is_dataclass(value):
                yield from paths(type(value), f"{prefix}{f.name}.")

    missing = set(paths(TrainConfig)) - listed
    assert not missing, missing
    assert "algorithm.kl.adaptive.target" in listed  # a section that is null by default is listed too
