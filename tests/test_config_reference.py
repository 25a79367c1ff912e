"""docs/config.md lists every training setting with its default as kitae/trainer/config.py has them."""

from __future__ import annotations

import dataclasses
import importlib.util
import typing
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
    from kitae.config import _variant_family
    from kitae.trainer.config import TrainConfig

    listed = {key for key, _, _ in _script().rows(TrainConfig)}

    def paths(cls, prefix=""):
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            value = getattr(cls(), f.name)
            if f.metadata.get("spread"):  # a mapping written in the section itself: alarms.KIND.SETTING
                for name, sub in value.items():
                    yield prefix + name
                    yield from paths(type(sub), f"{prefix}{name}.")
                continue
            key = prefix + f.metadata.get("key", f.name)
            yield key  # its YAML name (sampling.async)
            family = _variant_family(hints[f.name])
            if family is not None:  # every variant's settings: KEY (NAME) SETTING, the family's own as KEY.SETTING
                yield from (f"{key}.{s.name}" for s in dataclasses.fields(family) if s.name != "type")
                for name in family.registry.names():
                    shared = {s.name for s in dataclasses.fields(family)}
                    own = [s.name for s in dataclasses.fields(family.settings_class(name, "")) if s.name not in shared]
                    yield from (f"{key} ({name}) {s}" for s in own)
                continue
            if dataclasses.is_dataclass(value):
                yield from paths(type(value), f"{prefix}{f.name}.")

    missing = set(paths(TrainConfig)) - listed
    assert not missing, missing
    assert "algorithm.kl.adaptive.target" in listed  # a section that is null by default is listed too
    assert "algorithm.loss (dapo) eps_high" in listed and "data.sampler (prioritized) floor" in listed


def test_each_variants_settings_show_that_variants_default():
    from kitae.trainer.config import TrainConfig

    rows = {key: value for key, value, _ in _script().rows(TrainConfig)}
    assert (rows["algorithm.loss (dapo) eps_high"], rows["algorithm.loss (grpo) eps_high"]) == ("0.28", "0.2")
    assert rows["algorithm.loss (kimi) kimi_tau"] == "0.1" and rows["data.sampler"] == "'uniform'"
