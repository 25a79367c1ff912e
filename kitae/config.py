"""Typed configs from YAML: nested dataclasses, validated, with errors that name the key path.

    raw = apply_overrides(read_yaml("examples/zero.yaml"), ["optim.lr=1e-5", "sampling.group_size=4"])
    cfg = from_dict(TrainConfig, raw)      # kitae.trainer.config.load_train_config does exactly this

Unknown keys raise ``ConfigError("optim.lrr: unknown key; did you mean 'lr'?")``; values are checked against the
field's type (``optim.lr: expected a number, got 'fast'``). `--set a.b=c` values are parsed as YAML.

Numbers: a ``float`` field (alone, in a list, a tuple, a mapping or an Optional) refuses NaN and ±infinity, which
YAML writes ``.nan``/``.inf`` and reads ``1e400`` as, unless the field says ``setting(finite=False)``; a field's
``setting(minimum=, above=, maximum=)`` bounds what its meaning allows (``optim.lr: must be > 0, got 0.0``).
:func:`check_numbers` applies the same rule to a config built in Python (pre-flight does, before a model loads).

Every YAML kitae reads (configs, `--set` values, grader specs, curate recipes) goes through :func:`safe_load`:
``yaml.safe_load`` with limits, so a file nested 50,000 levels deep or an alias bomb (anchors that expand to
billions of values) is a ConfigError naming the file and line, not a RecursionError or gigabytes of memory; a file
over MAX_YAML_BYTES is refused by its size, unread. Error messages show values through :func:`short_repr`, never
in full.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import re
import reprlib
import types
import typing
from pathlib import Path
from typing import Any, Callable, TypeVar

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError

from kitae.errors import ConfigError
from kitae.registry import Registry, closest

T = TypeVar("T")


def setting(default: Any = dataclasses.MISSING, *, default_factory: Any = dataclasses.MISSING,
            minimum: float | None = None, above: float | None = None, maximum: float | None = None,
            finite: bool = True, key: str | None = None) -> Any:
    """A dataclass field with bounds that :func:`from_dict` checks (choices are ``Literal[...]`` types)::

        @dataclass
        class NumericSpec:
            tolerance: float = setting(0.01, minimum=0)   # >= 0
            lr: float = setting(1e-4, above=0)            # > 0
            top_p: float = setting(1.0, above=0, maximum=1)
            operation: Literal["eq", "ne"] = "eq"

    A float field refuses NaN and ±infinity unless ``finite=False`` (a field whose meaning has a use for them).
    ``key``: the field's name in YAML where that is a Python keyword (``async_: bool = setting(False,
    key="async")``); :func:`from_dict` reads it and :func:`to_dict` writes it under that name.
    """
    bounds = (("minimum", minimum), ("above", above), ("maximum", maximum))
    meta: dict[str, Any] = {k: v for k, v in bounds if v is not None}
    if not finite:
        meta["finite"] = False
    if key is not None:
        meta["key"] = key
    return dataclasses.field(default=default, default_factory=default_factory, metadata=meta)


def check_bounds(field: dataclasses.Field, value: Any, path: str) -> None:
    """A number outside the field's ``minimum``/``above``/``maximum`` (see :func:`setting`), or a NaN or
    ±infinity where the field does not allow them, is a ConfigError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return
    if isinstance(value, float) and not math.isfinite(value):
        if field.metadata.get("finite", True):
            raise ConfigError(path, not_finite_message(value))
        return
    low, above, high = (field.metadata.get(k) for k in ("minimum", "above", "maximum"))
    if low is not None and value < low:
        raise ConfigError(path, f"must be >= {low}, got {short_repr(value)}")
    if above is not None and value <= above:
        raise ConfigError(path, f"must be > {above}, got {short_repr(value)}")
    if high is not None and value > high:
        raise ConfigError(path, f"must be <= {high}, got {short_repr(value)}")


def not_finite_message(written: Any) -> str:
    """The error of a NaN or infinity (`written`: the value as the config gave it) where a number must be finite."""
    return (f"expected a finite number, got {short_repr(written)}: NaN and infinity are not values for this "
            "setting (a number beyond about 1.8e308, such as 1e400, reads as infinity); give a finite number")


def check_numbers(obj: Any, path: str = "") -> None:
    """The number rule of :func:`from_dict` (bounds, NaN and infinity) for a dataclass instance built in Python,
    through its nested dataclasses and its lists, tuples and mappings of floats. Raises ConfigError at the
    first bad value, naming its key path."""
    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        value, where = getattr(obj, f.name), _join(path, f.name)
        check_bounds(f, value, where)
        _check_nested(hints.get(f.name, Any), value, where, f.metadata.get("finite", True))


def _check_nested(tp: Any, value: Any, path: str, finite: bool) -> None:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        check_numbers(value, path)
        return
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        tp = next((a for a in args if _fits(a, value)), Any)
        origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is float and isinstance(value, float) and finite and not math.isfinite(value):
        raise ConfigError(path, not_finite_message(value))
    if origin is list and isinstance(value, list):
        for i, v in enumerate(value):
            _check_nested(args[0] if args else Any, v, f"{path}[{i}]", finite)
    elif origin is tuple and isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            arg = args[0] if len(args) == 2 and args[1] is Ellipsis else args[i] if i < len(args) else Any
            _check_nested(arg, v, f"{path}[{i}]", finite)
    elif origin is dict and isinstance(value, dict):
        for k, v in value.items():
            _check_nested(args[1] if args else Any, v, _join(path, k), finite)


def _fits(tp: Any, value: Any) -> bool:
    """Whether `value` is of the kind the union member `tp` converts to (for :func:`_check_nested`)."""
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    kinds = {list: list, tuple: (list, tuple), dict: dict}.get(typing.get_origin(tp))
    return kinds is not None and isinstance(value, kinds)


@dataclasses.dataclass
class Variant:
    """The typed settings of one variant of an extension point: a loss, a sampler, an engine, ... Each variant's
    settings are a dataclass beside its code, subclassing its family's base (a subclass of this class that names
    the family's ``registry`` and ``kind``), registered with the variant's entry::

        @dataclass
        class LossSettings(Variant):          # the family: every loss's settings subclass it
            registry: ClassVar[Registry] = POLICY_LOSSES
            kind: ClassVar[str] = "loss"

        @dataclass
        class ClipSettings(LossSettings):
            eps: float = setting(0.2, minimum=0)

        POLICY_LOSSES.register("clip", clip_loss, settings=ClipSettings)

    A config field typed by the family reads ``clip`` or ``{type: clip, eps: 0.3}`` into a ``ClipSettings``
    (``.type`` is the name); a key the chosen variant does not take is an error naming the variants that take it.
    A variant registered without settings reads into the family's base. ``flat_settings`` (a ClassVar of the
    section holding the field) lets a section keep settings written beside the name, as configs did before
    (``algorithm: {loss: dapo, eps_high: 0.3}``): :func:`from_dict` hands them to the variant.
    """

    type: str = ""  # the variant's registered name
    registry: typing.ClassVar[Registry]
    kind: typing.ClassVar[str] = "variant"
    name_key: typing.ClassVar[str] = "type"  # the key of the name in a mapping (kept "name" where configs have it)

    @classmethod
    def from_config(cls, value: Any, path: str) -> "Variant":
        return cls.read(value, path)

    @classmethod
    def read(cls, value: Any, path: str, flat: dict[str, Any] | None = None, flat_path: str = "") -> "Variant":
        """`value` (NAME, or a mapping with the name under ``name_key`` and the variant's settings) as the
        settings of that variant; `flat`: settings written beside the field in its section (at `flat_path`)."""
        if isinstance(value, str):
            name, given = value, {}
        elif isinstance(value, dict):
            if cls.name_key not in value:
                raise ConfigError(_join(path, cls.name_key), f"missing: which {cls.kind} "
                                  f"(one of {', '.join(cls.registry.names())})")
            given = {k: v for k, v in value.items() if k != cls.name_key}
            name = _str(value[cls.name_key], _join(path, cls.name_key), True)
        else:
            raise ConfigError(path, f"expected a {cls.kind} name or a mapping {{{cls.name_key}: NAME, ...its "
                              f"settings}}, got {short_repr(value)}")
        flat = {k: v for k, v in (flat or {}).items() if v is not None}  # a flat setting written null: left out
        settings_cls = cls.settings_class(name, path if isinstance(value, str) else _join(path, cls.name_key))
        taken = {f.name for f in dataclasses.fields(settings_cls)} - {"type"}
        if flat:  # configs saved before settings moved beside their variant hold every variant's, at its default
            flat = {k: v for k, v in flat.items() if k in taken or not cls.at_default(str(k), v)}
        for key in flat:
            if key in given:
                raise ConfigError(_join(flat_path, key), f"given twice: here and as {_join(path, key)}; keep one")
        for key, where in [*((k, _join(path, k)) for k in given), *((k, _join(flat_path, k)) for k in flat)]:
            if key not in taken:
                raise ConfigError(where, cls.not_taken_message(name, str(key), sorted(taken)))
        where = flat_path if flat and not given else path  # settings written beside the name: errors name them there
        obj = from_dict(settings_cls, {**given, **flat}, where)
        obj.type = name
        return obj

    @classmethod
    def settings_class(cls, name: str, path: str) -> type:
        """The settings class of variant `name` (the family's base when it registered none)."""
        found = cls.registry.settings_class(name, path) or cls
        if not (isinstance(found, type) and issubclass(found, cls)):
            raise ConfigError(path, f"{cls.kind} '{name}' registered settings {found!r}, which are not a "
                              f"{cls.__name__}; subclass {cls.__module__}.{cls.__name__}")
        return found

    @classmethod
    def fields_by_variant(cls) -> dict[str, dict[str, dataclasses.Field]]:
        """Each registered variant's settings (its name -> setting name -> the dataclass field), ``type`` left out."""
        return {name: {f.name: f for f in dataclasses.fields(cls.settings_class(name, "")) if f.name != "type"}
                for name in cls.registry.names()}

    @classmethod
    def all_settings(cls) -> set[str]:
        """Every setting some registered variant of the family takes."""
        return {key for fields in cls.fields_by_variant().values() for key in fields}

    @classmethod
    def at_default(cls, key: str, value: Any) -> bool:
        """Whether `value` is the default of setting `key` in every registered variant that takes it (a saved
        config of an older kitae wrote each variant's settings so, whichever variant it chose)."""
        takers = [fields[key] for fields in cls.fields_by_variant().values() if key in fields]
        defaults = [f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default for f in takers]
        return bool(defaults) and all(d is not dataclasses.MISSING and d == value for d in defaults)

    @classmethod
    def not_taken_message(cls, name: str, key: str, taken: list[str]) -> str:
        takers = [n for n, fields in cls.fields_by_variant().items() if key in fields]
        said = f"not a setting of {cls.kind} '{name}'"
        if takers:
            said += f"; {cls.kind} {', '.join(takers)} take{'s' if len(takers) == 1 else ''} it"
        hint = closest(key, taken)
        said += f"; did you mean '{hint}'?" if hint else ""
        return said + (f" ({name}'s settings: {', '.join(taken)})" if taken else f" ({name} takes no settings)")

    @classmethod
    def default(cls, name: str) -> Any:
        """A dataclass field whose default is variant `name` with its default settings (read when a config is)."""
        return dataclasses.field(default_factory=lambda: cls.read(name, ""))


def _variant_family(tp: Any) -> type[Variant] | None:
    """The Variant family a field's type names (``LossSettings``, or ``LossSettings | None``), else None."""
    for arg in (tp, *typing.get_args(tp)):
        if isinstance(arg, type) and issubclass(arg, Variant):
            return arg
    return None


def _take_flat_settings(cls: type, data: dict, hints: dict, path: str) -> tuple[dict, dict[str, dict]]:
    """Settings of a variant written beside its field in `cls`'s section (``cls.flat_settings`` names the
    fields): (data without them, field -> its flat settings). A key that is a field of the section stays."""
    own = {f.metadata.get("key", f.name) for f in dataclasses.fields(cls)}
    flat: dict[str, dict] = {}
    for name in getattr(cls, "flat_settings", ()):
        family = _variant_family(hints[name])
        keys = family.all_settings() if family else set()
        flat[name] = {k: data[k] for k in data if k in keys and k not in own}
    taken = {k for given in flat.values() for k in given}
    return {k: v for k, v in data.items() if k not in taken}, flat


def from_dict(cls: type[T], data: Any, path: str = "", skip: tuple[str, ...] = ()) -> T:
    """Build dataclass `cls` from a mapping, checking keys, value types and bounds recursively.

    A field's type converts the value: scalars, ``Literal`` choices, lists, tuples, mappings, nested
    dataclasses, and any class with a classmethod ``from_config(value, path)`` (a grader spec, a template)
    builds itself. A field without a default that `data` lacks is ``PATH.field: missing (required)``.
    Keys in `skip` are the caller's to read (a grader spec's ``type`` and ``name``): not given to `cls`, but
    valid, and named in the did-you-mean of an unknown key. Once built, the object's ``resolve(path)``, if it has
    one, fills in what was left out (defaults that depend on other fields), then its ``validate(path)``, if it
    has one, checks what involves several fields and changes nothing."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(path, f"expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    keys = {f.metadata.get("key", f.name): f.name for f in fields.values()}  # YAML key -> attribute
    data, flat = _take_flat_settings(cls, data, hints, path)
    for key in data:
        if key not in keys and key not in skip:
            valid = [*keys, *skip]
            hint = closest(str(key), valid)
            msg = "unknown key" + (f"; did you mean '{hint}'?" if hint else f" (valid: {', '.join(valid)})")
            raise ConfigError(_join(path, key), msg)
    data = {k: v for k, v in data.items() if k not in skip}
    for key, name in keys.items():
        f = fields[name]
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if required and f.init and key not in data:
            raise ConfigError(_join(path, key), "missing (required)")
    kwargs = {}
    for key, value in data.items():  # errors name the YAML key (async), never the attribute (async_)
        f = fields[keys[key]]
        if flat.get(f.name):
            continue
        kwargs[f.name] = convert(hints[f.name], value, _join(path, key), f.metadata.get("finite", True))
        check_bounds(f, kwargs[f.name], _join(path, key))
    for name, given in flat.items():  # a variant with settings written beside it in this section
        if given:
            f = fields[name]
            written = data.get(f.metadata.get("key", name))
            if written is None:  # left out: the field's default variant, by name
                written = f.default_factory().type if f.default_factory is not dataclasses.MISSING else f.default.type
            kwargs[name] = _variant_family(hints[name]).read(written, _join(path, name), given, path)
    try:
        obj = cls(**kwargs)
    except TypeError as exc:
        raise ConfigError(path, str(exc)) from None
    for step in ("resolve", "validate"):  # fill in what was left out, then check (the check changes nothing)
        method = getattr(obj, step, None)
        if method:
            method(path)
    return obj


def convert(tp: Any, value: Any, path: str, finite: bool = True) -> Any:
    """`value` as type `tp` (see :func:`from_dict`); a float NaN or ±infinity is a ConfigError unless `finite`
    is False. Each kind of type has its reader: a union, a ``Literal``, a class with ``from_config``, a
    dataclass, a list, tuple or dict (_CONTAINERS), float, int, bool or str (_SCALARS); any other type takes the
    value as it is."""
    if tp is Any:
        return value
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return _union(args, value, path, finite)
    if origin is typing.Literal:
        return _literal(args, value, path)
    hook = getattr(tp, "from_config", None) if isinstance(tp, type) else None
    if hook is not None:
        return hook(value, path)
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value, path)
    if origin in _CONTAINERS:
        return _CONTAINERS[origin](args, value, path, finite)
    if tp in _SCALARS:
        return _SCALARS[tp](value, path, finite)
    return value


def _union(args: tuple, value: Any, path: str, finite: bool) -> Any:
    """The value as the first member of the union that takes it; None where the union allows it. When none
    does, the first member's error, or for a mapping the first section's (it says what is wrong inside)."""
    if value is None and type(None) in args:
        return None
    errors = []
    for arg in (a for a in args if a is not type(None)):
        try:
            return convert(arg, value, path, finite)
        except ConfigError as exc:
            errors.append((isinstance(value, dict) and dataclasses.is_dataclass(arg), exc))
    raise max(errors, key=lambda e: e[0])[1]


def _literal(args: tuple, value: Any, path: str) -> Any:
    if value not in args:
        hint = closest(value, [str(a) for a in args]) if isinstance(value, str) else None
        extra = f"; did you mean '{hint}'?" if hint else ""
        raise ConfigError(path, f"got {short_repr(value)}; expected one of {', '.join(map(str, args))}{extra}")
    return value


def _list(args: tuple, value: Any, path: str, finite: bool) -> list:
    if not isinstance(value, list):
        raise ConfigError(path, f"expected a list, got {type(value).__name__}")
    return [convert(args[0] if args else Any, v, f"{path}[{i}]", finite) for i, v in enumerate(value)]


def _tuple(args: tuple, value: Any, path: str, finite: bool) -> tuple:
    """A YAML list as ``tuple[X, ...]`` (any length) or ``tuple[X, Y]`` (exactly that many values)."""
    if not isinstance(value, (list, tuple)):
        raise ConfigError(path, f"expected a list, got {type(value).__name__}")
    if len(args) == 2 and args[1] is Ellipsis:
        args = (args[0],) * len(value)
    elif args and len(value) != len(args):
        raise ConfigError(path, f"expected a list of {len(args)} values, got {len(value)}")
    return tuple(convert(args[i] if args else Any, v, f"{path}[{i}]", finite) for i, v in enumerate(value))


def _dict(args: tuple, value: Any, path: str, finite: bool) -> dict:
    """A mapping; its keys as they are, its values converted."""
    if not isinstance(value, dict):
        raise ConfigError(path, f"expected a mapping, got {type(value).__name__}")
    return {k: convert(args[1] if args else Any, v, _join(path, k), finite) for k, v in value.items()}


def _float(written: Any, path: str, finite: bool) -> float:
    value = written
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        value = _number(value, path)
    try:
        number = float(value)
    except OverflowError:  # an integer of 309 digits or more
        raise ConfigError(path, f"expected a number, got {short_repr(value)}, too large") from None
    if finite and not math.isfinite(number):  # .nan, .inf, or a literal too large for a float: 1e400
        raise ConfigError(path, not_finite_message(written))
    return number


def _number(value: Any, path: str) -> float:
    if isinstance(value, str):
        try:
            return float(value)  # YAML reads 1e-5 as a string
        except ValueError:
            pass
    raise ConfigError(path, f"expected a number, got {short_repr(value)}")


def _int(value: Any, path: str, finite: bool) -> int:
    """An integer; a float that is one (3.0) as its int. YAML's true and false are not integers."""
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ConfigError(path, f"expected an integer, got {short_repr(value)}")
    return value


def _bool(value: Any, path: str, finite: bool) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(path, f"expected true or false, got {short_repr(value)}")
    return value


def _str(value: Any, path: str, finite: bool) -> str:
    """A string; a number written where a string goes as its text (YAML reads `name: 7` as an int)."""
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        raise ConfigError(path, f"expected a string, got {short_repr(value)}")
    return str(value)


# convert's readers of generic containers (by typing.get_origin) and of scalar types: (args, value, path,
# finite) and (value, path, finite)
_CONTAINERS: dict[Any, Callable[[tuple, Any, str, bool], Any]] = {list: _list, tuple: _tuple, dict: _dict}
_SCALARS: dict[Any, Callable[[Any, str, bool], Any]] = {float: _float, int: _int, bool: _bool, str: _str}


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
        try:
            value = safe_load(raw, f"--set {key}") if raw != "" else ""
        except yaml.YAMLError as exc:
            raise ConfigError(key, f"not valid YAML: {exc}") from None
        if value is None and raw.strip() not in NULLS:
            raise ConfigError(f"--set {key}", read_as_nothing_message(raw, key))
        node[parts[-1]] = value
    return data


NULLS = ("null", "Null", "NULL", "~")  # how a --set value says null on purpose


def read_as_nothing_message(raw: str, key: str) -> str:
    """Why a --set value YAML reads as null was refused: it was text, and the setting would silently be unset
    (GSM8K's answer pattern ``####\\s*(.+)$`` is a YAML comment)."""
    why = "'#' starts a YAML comment" if raw.lstrip().startswith("#") else "it holds no YAML value"
    quoted = "'" + raw.replace("'", "''") + "'"
    return (f"YAML reads '{raw}' as nothing ({why}), so the setting would be null; to give this text, "
            f"quote it for YAML inside the shell's quotes: --set \"{key}={quoted}\" (or write it in the config "
            f"file, quoted); for null write {key}=null")


def read_yaml(path: str | Path, empty: str | None = None) -> dict:
    """The mapping in YAML file `path`. An empty file (or one of comments only) reads as {}, or with `empty`
    (what the file needs, and where to start) is a ConfigError naming the file."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(str(path), "config file not found" if not path.exists() else "not a file")
    try:
        data = safe_load(read_text(path, str(path)), str(path))
    except yaml.YAMLError as exc:
        raise ConfigError(str(path), f"not valid YAML: {exc}") from None
    if data is None and empty is not None:
        raise ConfigError(str(path), f"the file is empty (or holds only comments): {empty}")
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise ConfigError(str(path), "the config must be a mapping at the top level")
    return data


def read_text(path: Path, where: str) -> str:
    """A YAML file's UTF-8 text; other bytes are a ConfigError naming the line, and a file over MAX_YAML_BYTES
    is one too, before a byte of it is read (PyYAML takes minutes over 100 MB)."""
    size = path.stat().st_size
    if size > MAX_YAML_BYTES:
        raise ConfigError(where, f"{size:,} bytes: too large for a config or spec file (at most "
                          f"{MAX_YAML_BYTES:,} bytes; they take a few kilobytes): is this the file you meant?")
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ConfigError(where, f"line {line}: not UTF-8 text (byte 0x{raw[exc.start]:02x}); "
                          "save the file as UTF-8") from None


# ---- YAML with limits ------------------------------------------------------------------------
MAX_YAML_DEPTH = 100  # nesting levels, counted through aliases; configs use under 10
MAX_YAML_NODES = 100_000  # values in a document once every alias is expanded; configs use a few hundred
MAX_YAML_BYTES = 1 << 20  # 1 MiB of text (characters, for a string); configs and specs take a few kilobytes


class _BoundedLoader(yaml.SafeLoader):
    """yaml.SafeLoader that stops composing beyond MAX_YAML_DEPTH levels, before Python's recursion limit."""

    def __init__(self, stream: str, name: str):
        super().__init__(stream)
        self.name = name  # marks in error messages say this instead of "<unicode string>"
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self._depth >= MAX_YAML_DEPTH:
            raise ComposerError(None, None, f"nested deeper than {MAX_YAML_DEPTH} levels", self.peek_event().start_mark)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def safe_load(text: str, name: str = "<text>") -> Any:
    """``yaml.safe_load`` that refuses a text over MAX_YAML_BYTES characters (unparsed), documents nested deeper
    than MAX_YAML_DEPTH or whose aliases expand to more than MAX_YAML_NODES values, and recursive aliases.
    Raises yaml.YAMLError (with file and line)."""
    if len(text) > MAX_YAML_BYTES:
        raise yaml.YAMLError(f"in {name}: {len(text):,} characters, too large (at most {MAX_YAML_BYTES:,}; configs "
                             "and specs take a few kilobytes)")
    loader = _BoundedLoader(text, name)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expansion(node)
        try:
            return loader.construct_document(node)
        except (ValueError, OverflowError) as exc:  # e.g. an integer of more than 4300 digits
            raise ConstructorError(None, None, f"cannot read a value: {exc}", None) from None
    finally:
        loader.dispose()


def _check_expansion(root: yaml.Node) -> None:
    """Count the values and the depth of the document as if every alias were copied out, without copying.

    An alias is the node of its anchor, shared, so each node is measured once: (values, levels) per node id.
    """
    measured: dict[int, tuple[int, int] | None] = {}  # None: being measured (an alias back to it is a cycle)

    def measure(node: yaml.Node, depth: int) -> tuple[int, int]:
        if id(node) in measured:
            known = measured[id(node)]
            if known is None:
                raise ComposerError(None, None, "an alias refers to a node that contains it", node.start_mark)
            if depth + known[1] > MAX_YAML_DEPTH:
                raise ComposerError(None, None, f"aliases make it nested deeper than {MAX_YAML_DEPTH} levels",
                                    node.start_mark)
            return known
        if depth >= MAX_YAML_DEPTH:
            raise ComposerError(None, None, f"aliases make it nested deeper than {MAX_YAML_DEPTH} levels",
                                node.start_mark)
        measured[id(node)] = None
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            _check_unique_keys(node)
            _check_values_read_as_comments(node)
            children = [part for pair in node.value for part in pair]
        else:
            children = []
        values, levels = 1, 1
        for child in children:
            v, lv = measure(child, depth + 1)
            values, levels = values + v, max(levels, lv + 1)
            if values > MAX_YAML_NODES:
                raise ComposerError(None, None, f"aliases expand it to more than {MAX_YAML_NODES:,} values; anchors "
                                    "(&name, *name) are for sharing small pieces", node.start_mark)
        measured[id(node)] = (values, levels)
        return values, levels

    measure(root, 0)


MERGE_TAG = "tag:yaml.org,2002:merge"  # `<<: *base`: the keys it brings in may be overridden, as YAML intends


def _check_unique_keys(node: yaml.MappingNode) -> None:
    """A key written twice in one mapping: YAML keeps the last silently, so half of what was written is lost."""
    seen: dict[tuple[str, str], yaml.Node] = {}
    for key, _ in node.value:
        if not isinstance(key, yaml.ScalarNode) or key.tag == MERGE_TAG:
            continue
        first = seen.setdefault((key.tag, key.value), key)
        if first is not key:
            raise ComposerError(None, None, f"the key {short_repr(key.value)} is written twice in one mapping (first "
                                f"at line {first.start_mark.line + 1}); YAML would keep only the last: keep one",
                                key.start_mark)


# `key: ####\s*(.+)$`: the value starts like a comment ('#' then no space and no letter), so the key reads as null
_COMMENT_VALUE = re.compile(r"\s*:[ \t]+(#[^\sA-Za-z].*)")


def _check_values_read_as_comments(node: yaml.MappingNode) -> None:
    """A key whose value YAML read as a comment (GSM8K's answer pattern ``####\\s*(.+)$`` unquoted): the setting
    would silently be null. A comment after a key is ``# text``; one without a space or letter after '#' is
    taken for a value, and refused with how to quote it."""
    for key, value in node.value:
        if not (isinstance(value, yaml.ScalarNode) and value.tag == "tag:yaml.org,2002:null" and value.value == ""):
            continue
        mark = key.end_mark
        if mark is None or mark.buffer is None:
            continue
        end = mark.buffer.find("\n", mark.pointer)
        found = _COMMENT_VALUE.match(mark.buffer[mark.pointer: end if end >= 0 else None])
        if found:
            text = found.group(1).rstrip().rstrip("\x00").replace("'", "''")
            raise ComposerError(None, None, f"the value of {short_repr(key.value)} reads as a comment ('#' starts "
                                f"one), so it would be null; to give the text, quote it: {key.value}: "
                                f"'{text}' (for null write {key.value}: null)", key.start_mark)


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxlist, _REPR.maxdict, _REPR.maxset, _REPR.maxtuple = 3, 4, 4, 4, 4
_REPR.maxstring, _REPR.maxother, _REPR.maxlong = 60, 60, 60


def short_repr(value: Any, limit: int = 60) -> str:
    """repr(value) cut to `limit` characters, without ever building the full repr of a huge value."""
    text = _REPR.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def to_dict(obj: Any) -> Any:
    """A dataclass as plain dicts, each field under its YAML name (``setting(key=...)``), as from_dict reads it.
    A mapping field whose metadata says ``spread`` is written in the section itself, entry by entry (the alarms'
    settings by kind: ``alarms.length_jump.length_jump``, not ``alarms.settings.length_jump...``); the section's
    ``from_config`` reads them back."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out: dict[str, Any] = {}
        for f in dataclasses.fields(obj):
            value = to_dict(getattr(obj, f.name))
            if f.metadata.get("spread"):
                out.update(value)
            else:
                out[f.metadata.get("key", f.name)] = value
        return out
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_dict(v) for v in obj)
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    return copy.deepcopy(obj)
