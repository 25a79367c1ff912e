"""One generic registry for every extension point (graders, losses, advantages, engines, samplers).

    LOSSES = Registry("policy loss")

    @LOSSES.register("clip")
    def clip_loss(...): ...

    LOSSES.get("clip")          # -> the function
    LOSSES.get("clpi")          # KeyError: unknown policy loss 'clpi'; did you mean 'clip'?

Entries may be lazy "module:attr" strings, imported on first use, so optional dependencies are only
imported when their entry is used. An entry may carry its typed settings, a dataclass beside its code
(``LOSSES.register("clip", clip_loss, settings=ClipSettings)``): a config names the entry and gives those settings
(kitae.config.Variant reads ``{type: clip, eps: 0.2}`` into a ``ClipSettings``). :func:`load_target` is that import, also used for the reward functions a
config names (``function: my_rewards:brevity``).

A name is taken once: a second entry under it is a KitaeError unless registered with ``replace=True``. The
module of a lazy entry registering the object the entry names, as it is imported, is the lazy path, not a
second entry. ``with LOSSES.scoped("mine", my_loss):`` registers an entry for one block (a test's) and leaves the
registry as it found it.
"""

from __future__ import annotations

import difflib
import importlib
import reprlib
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from kitae.errors import ConfigError, KitaeError


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
        self._settings: dict[str, type | str] = {}  # name -> its settings class, or "module:Class" not imported yet

    def register(self, name: str, obj: Any = None, *, settings: type | str | None = None,
                 replace: bool = False) -> Callable:
        """Register `obj` under `name`; used bare as a decorator when `obj` is None. A name already taken is a
        KitaeError unless ``replace=True``, or it holds `obj` itself, or the lazy entry that names `obj` (its
        module registering it as it is imported: the lazy path). ``settings``: the entry's settings class (or
        "module:Class"), see :meth:`settings_class`."""

        def add(target: Any) -> Any:
            if not replace:
                self._check_free(name, lambda entry: entry is target or _names(entry, target))
            self._entries[name] = target
            if settings is not None:
                self._settings[name] = settings
            return target

        return add(obj) if obj is not None else add

    def register_lazy(self, name: str, target: str, *, settings: str | None = None, replace: bool = False) -> None:
        """Register "module:attr", imported (:func:`load_target`) the first time `name` is looked up. A name
        already taken is a KitaeError unless ``replace=True``, or it holds this string or the object it names.
        ``settings``: "module:Class" of the entry's settings, imported when asked for."""
        if not replace:
            self._check_free(name, lambda entry: entry == target or _names(target, entry))
        if replace or name not in self._entries:
            self._entries[name] = target
        if settings is not None and (replace or name not in self._settings):
            self._settings[name] = settings

    def settings_class(self, name: str, path: str = "") -> type | None:
        """The settings class registered with entry `name` (imported now if lazy), or None when it has none.
        Names outside the registry are :meth:`get`'s error. An entry registered without settings has its own
        module imported first, so an entry that registers its settings as its module loads has them; one
        registered with them is not imported (reading a config does not import every engine's module)."""
        if name not in self._settings or name not in self._entries:
            self.get(name, path)
        found = self._settings.get(name)
        if isinstance(found, str):
            found = self._settings[name] = load_target(found, path)
        return found

    @contextmanager
    def scoped(self, name: str, obj: Any = None, **register_kwargs: Any) -> Iterator[Any]:
        """`obj` registered under `name` for the `with` block only (a test's own grader, or a stand-in for an
        engine), replacing what is there; on exit the registry holds exactly what it held before: the previous
        entry, or no entry. Without `obj` the block registers `name` itself (with a decorator such as
        ``register_grader``); on exit the same holds. `register_kwargs` go to :meth:`register`.

        >>> LOSSES = Registry("policy loss")
        >>> with LOSSES.scoped("clip", max):
        ...     LOSSES.get("clip")
        <built-in function max>
        >>> "clip" in LOSSES
        False
        """
        before = [(table, table.get(name, _ABSENT)) for table in self._tables()]
        try:
            if obj is not None:
                self.register(name, obj, replace=True, **register_kwargs)
            yield obj
        finally:
            for table, entry in before:
                if entry is _ABSENT:
                    table.pop(name, None)
                else:
                    table[name] = entry

    def _tables(self) -> tuple[dict[str, Any], ...]:
        """Every map keyed by entry name (what :meth:`scoped` puts back)."""
        return (self._entries, self._settings)

    def _check_free(self, name: str, same: Callable[[Any], bool]) -> None:
        if name in self._entries and not same(self._entries[name]):
            raise KitaeError(f"{self.kind} '{name}' is already registered ({_shown(self._entries[name])}); "
                             "register with replace=True to replace it, or choose another name")

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


_ABSENT = object()  # no entry under a name (None may be an entry)


def _names(lazy: Any, obj: Any) -> bool:
    """Whether `lazy` is the "module:attr" string that names `obj` (by its module and qualified name)."""
    if not isinstance(lazy, str) or isinstance(obj, str):
        return False
    module, _, attr = lazy.partition(":")
    return getattr(obj, "__module__", None) == module and getattr(obj, "__qualname__", None) == attr


def _shown(entry: Any) -> str:
    """An entry as an error message names it: "module:attr" for a lazy one, a class or a function."""
    if isinstance(entry, str):
        return entry
    module, name = getattr(entry, "__module__", None), getattr(entry, "__qualname__", None)
    return f"{module}:{name}" if module and name else reprlib.repr(entry)
