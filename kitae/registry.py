"""One generic registry for every extension point (graders, losses, advantages, engines, samplers).

    LOSSES = Registry("policy loss")

    @LOSSES.register("clip")
    def clip_loss(...): ...

    LOSSES.get("clip")          # -> the function
    LOSSES.get("clpi")          # KeyError: unknown policy loss 'clpi'; did you mean 'clip'?

Entries may be lazy "module:attr" strings, imported on first use, so optional dependencies are only
imported when their entry is used. :func:`load_target` is that import, also used for the reward functions a
config names (``function: my_rewards:brevity``).
"""

from __future__ import annotations

import difflib
import importlib
from typing import Any, Callable, Iterator

from kitae.errors import ConfigError


def closest(name: str, choices: list[str]) -> str | None:
    """The closest valid name to `name`, or None when nothing is close."""
    hits = difflib.get_close_matches(name, choices, n=1, cutoff=0.5)
    return hits[0] if hits else None


def close_names(name: str, choices: list[str], n: int = 5, prefixes: tuple[str, ...] = ()) -> list[str]:
    """Up to `n` valid names close to `name`, best first; a choice that is `name` behind one of `prefixes`
    ("eval/" + "pass@1") comes first."""
    exact = [p + name for p in prefixes if p + name in choices]
    similar = difflib.get_close_matches(name, choices, n=n, cutoff=0.5)
    return list(dict.fromkeys(exact + similar))[:n]


def unknown_name_message(kind: str, name: str, choices: list[str]) -> str:
    hint = closest(name, choices)
    msg = f"unknown {kind} '{name}'"
    if hint:
        msg += f"; did you mean '{hint}'?"
    return msg + f" (valid: {', '.join(sorted(choices))})"


def load_target(target: str, path: str = "") -> Any:
    """The object a "module:attr" string names, imported now. ConfigError at `path` when `target` is not of
    that form, or its module or attribute does not import.

    >>> load_target("math:sqrt")(4.0)
    2.0
    """
    module, _, attr = target.partition(":")
    if not module or not attr:
        raise ConfigError(path, f"expected 'module:function', got {target!r}")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(path, f"cannot import {target!r}: {exc}") from exc


class Registry:
    """A name -> object map with decorator registration, lazy entries and did-you-mean errors."""

    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, Any] = {}

    def register(self, name: str, obj: Any = None) -> Callable:
        """Register `obj` under `name`; used bare as a decorator when `obj` is None."""

        def add(target: Any) -> Any:
            self._entries[name] = target
            return target

        return add(obj) if obj is not None else add

    def register_lazy(self, name: str, target: str) -> None:
        """Register "module:attr", imported (:func:`load_target`) the first time `name` is looked up."""
        self._entries.setdefault(name, target)

    def get(self, name: str, path: str = "") -> Any:
        if name not in self._entries:
            raise ConfigError(path, unknown_name_message(self.kind, name, list(self._entries)))
        entry = self._entries[name]
        if isinstance(entry, str):
            entry = self._entries[name] = load_target(entry, path)
        return entry

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())
