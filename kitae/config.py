"""Typed configs from YAML: nested dataclasses, validated, with errors that name the key path.

    cfg = load_config("examples/zero.yaml", overrides=["optim.lr=1e-5", "sampling.group_size=4"])

Unknown keys raise ``ConfigError("optim.lrr: unknown key; did you mean 'lr'?")``; values are checked against the
field's type (``optim.lr: expected a number, got 'fast'``). `--set a.b=c` values are parsed as YAML.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

import yaml

from kitae.errors import ConfigError
from kitae.registry import closest

T = TypeVar("T")


def from_dict(cls: type[T], data: Any, path: str = "") -> T:
    """Build dataclass `cls` from a mapping, checking keys and value types recursively."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(path, f"expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in data:
        if key not in fields:
            hint = closest(str(key), list(fields))
            msg = "unknown key" + (f"; did you mean '{hint}'?" if hint else f" (valid: {', '.join(fields)})")
            raise ConfigError(_join(path, key), msg)
    kwargs = {k: convert(hints[k], v, _join(path, k)) for k, v in data.items()}
    try:
        obj = cls(**kwargs)
    except TypeError as exc:
        raise ConfigError(path, str(exc)) from None
    check = getattr(obj, "validate", None)
    if check:
        check(path)
    return obj


def convert(tp: Any, value: Any, path: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return convert(arg, value, path)
            except ConfigError as exc:
                errors.append(exc)
        raise errors[0]
    if origin is typing.Literal:
        if value not in args:
            hint = closest(str(value), [str(a) for a in args])
            extra = f"; did you mean '{hint}'?" if hint else ""
            raise ConfigError(path, f"got {value!r}; expected one of {', '.join(map(str, args))}{extra}")
        return value
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value, path)
    if origin is list:
        if not isinstance(value, list):
            raise ConfigError(path, f"expected a list, got {type(value).__name__}")
        return [convert(args[0] if args else Any, v, f"{path}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(path, f"expected a mapping, got {type(value).__name__}")
        return {k: convert(args[1] if args else Any, v, _join(path, k)) for k, v in value.items()}
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            value = _number(value, path)
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise ConfigError(path, f"expected an integer, got {value!r}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(path, f"expected true or false, got {value!r}")
        return value
    if tp is str:
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise ConfigError(path, f"expected a string, got {value!r}")
        return str(value)
    return value


def _number(value: Any, path: str) -> float:
    if isinstance(value, str):
        try:
            return float(value)  # YAML reads 1e-5 as a string
        except ValueError:
            pass
    raise ConfigError(path, f"expected a number, got {value!r}")


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """Apply `a.b=c` overrides (values parsed as YAML) to a nested dict, in place."""
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(item, "an override looks like key.path=value")
        node = data
        parts = key.split(".")
        for part in parts[:-1]:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[parts[-1]] = yaml.safe_load(raw) if raw != "" else ""
    return data


def read_yaml(path: str | Path) -> dict:
    path = Path(path)
    if not path.exists():
        raise ConfigError(str(path), "config file not found")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(str(path), f"not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(str(path), "the config must be a mapping at the top level")
    return data


def to_dict(obj: Any) -> Any:
    return dataclasses.asdict(obj) if dataclasses.is_dataclass(obj) else obj
