"""Grader specs: the registry of grader types, typed field reading, and `build_grader`.

A spec is a dict (or a YAML/JSON file or string) with a ``type`` and that type's fields, in the OpenAI
grader schema where OpenAI has the type (``string_check``, ``text_similarity``, ``python``, ``multi``) and
in kitae's own words otherwise (``numeric``, ``format``, ``math``, ``answer``, ``code``, ``weighted``, ``gate``)::

    type: weighted
    graders:
      num: {type: numeric, weight: 0.5, tolerance: 0.01}
      sim: {type: text_similarity, weight: 0.5, evaluation_metric: rouge_l}

Every mistake raises :class:`kitae.errors.ConfigError` whose message starts with the key path inside the
spec (``grader.graders.num.tolerance: expected a number, got 'one'``) and, for names, suggests the closest
valid one.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from kitae.config import read_text, safe_load, short_repr
from kitae.errors import ConfigError
from kitae.registry import Registry, closest, unknown_name_message

if TYPE_CHECKING:
    from kitae.graders.base import Grader
    from kitae.graders.template import Template

GRADERS = Registry("grader")

# Keys every spec may carry; the reader of each type never sees them as unknown.
COMMON_KEYS = ("type", "name")
_REQUIRED = object()


def register_grader(type_name: str) -> Callable[[type], type]:
    """Class decorator: register a Grader subclass under its spec ``type``.

    The class builds itself from a spec with the classmethod ``from_spec(spec: dict, path: str)``.
    """

    def add(cls: type) -> type:
        cls.type_name = type_name
        GRADERS.register(type_name, cls)
        return cls

    return add


# ---- typed field reading -------------------------------------------------------------------------
class SpecReader:
    """Reads typed fields of one spec and rejects unknown keys with a did-you-mean.

        r = SpecReader(spec, path)
        tol = r.number("tolerance", 0.01, minimum=0)
        op = r.choice("operation", ["eq", "ne", "like", "ilike"])
        r.finish()  # raises on keys nobody read: "grader.tolerence: unknown key; did you mean 'tolerance'?"
    """

    def __init__(self, spec: dict[str, Any], path: str):
        if not isinstance(spec, dict):
            raise ConfigError(path, f"expected a mapping (a grader spec), got {_show(spec)}")
        self.spec, self.path = spec, path
        self._read: set[str] = set(COMMON_KEYS)

    def at(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def has(self, key: str) -> bool:
        return key in self.spec

    def raw(self, key: str, default: Any = _REQUIRED) -> Any:
        self._read.add(key)
        if key in self.spec:
            return self.spec[key]
        if default is _REQUIRED:
            raise ConfigError(self.at(key), "missing (required)")
        return default

    def text(self, key: str, default: Any = _REQUIRED) -> Any:
        value = self.raw(key, default)
        if value is not default and not isinstance(value, str):
            raise ConfigError(self.at(key), f"expected a string, got {_show(value)}")
        return value

    def number(self, key: str, default: Any = _REQUIRED, minimum: float | None = None,
               maximum: float | None = None, nullable: bool = False) -> Any:
        """A number; ``nullable`` also accepts an explicit null (YAML ``~``), read as None."""
        value = self.raw(key, default)
        if value is default or (nullable and value is None):
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(self.at(key), f"expected a number, got {_show(value)}")
        if minimum is not None and value < minimum:
            raise ConfigError(self.at(key), f"must be >= {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise ConfigError(self.at(key), f"must be <= {maximum}, got {value}")
        return float(value)

    def integer(self, key: str, default: Any = _REQUIRED, minimum: int | None = None) -> Any:
        value = self.raw(key, default)
        if value is default:
            return value
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(self.at(key), f"expected an integer, got {_show(value)}")
        if minimum is not None and value < minimum:
            raise ConfigError(self.at(key), f"must be >= {minimum}, got {value}")
        return value

    def flag(self, key: str, default: Any = _REQUIRED) -> Any:
        value = self.raw(key, default)
        if value is not default and not isinstance(value, bool):
            raise ConfigError(self.at(key), f"expected true or false, got {_show(value)}")
        return value

    def choice(self, key: str, choices: list[str], default: Any = _REQUIRED) -> Any:
        value = self.raw(key, default)
        if value is default:
            return value
        if not isinstance(value, str):  # never str() a value that may be large (a list an alias expanded)
            raise ConfigError(self.at(key), f"expected one of {', '.join(choices)}, got {_show(value)}")
        if value not in choices:
            raise ConfigError(self.at(key), unknown_name_message(key, value, list(choices)))
        return value

    def items(self, key: str, default: Any = _REQUIRED) -> Any:
        value = self.raw(key, default)
        if value is not default and not isinstance(value, list):
            raise ConfigError(self.at(key), f"expected a list, got {_show(value)}")
        return value

    def mapping(self, key: str, default: Any = _REQUIRED) -> Any:
        value = self.raw(key, default)
        if value is not default and not isinstance(value, dict):
            raise ConfigError(self.at(key), f"expected a mapping, got {_show(value)}")
        return value

    def template(self, key: str, default: Any = _REQUIRED) -> "Template":
        """A ``{{item.FIELD}}`` / ``{{sample.output_text}}`` template, checked now, rendered per sample."""
        from kitae.graders.template import Template

        return Template(self.text(key, default), self.at(key))

    def grader(self, key: str) -> "Grader":
        """A nested grader spec."""
        return build_grader(self.mapping(key), self.at(key))

    def finish(self) -> None:
        """Raise on the first key no field read (a typo or a field of another grader type)."""
        for key in self.spec:
            if key not in self._read:
                known = sorted(self._read - set(COMMON_KEYS)) + list(COMMON_KEYS)
                hint = closest(str(key), known)
                msg = "unknown key" + (f"; did you mean '{hint}'?" if hint else "")
                raise ConfigError(self.at(str(key)), msg + f" (valid: {', '.join(known)})")


def _show(value: Any) -> str:
    return short_repr(value)


# ---- loading and building ------------------------------------------------------------------------
def load_spec(spec: dict | str | Path, path: str = "grader") -> dict[str, Any]:
    """A spec dict from a dict, a .yaml/.json file, inline YAML/JSON text, or a bare type name.

    A file whose top level is ``{grader: {...}}`` (a config section) yields the inner spec. A string is a
    file when a file of that name exists; inline text of any length is never mistaken for one.
    """
    if isinstance(spec, dict):
        return spec
    if isinstance(spec, Path):
        return _load_file(spec, path)
    if isinstance(spec, str):
        text = spec.strip()
        if text.isidentifier():
            return {"type": text}
        if "\n" not in text and _is_file(text):  # a spec file, whatever its extension
            return _load_file(Path(text), path)
        if "\n" not in text and text.endswith((".yaml", ".yml", ".json")) and not _looks_inline(text):
            raise ConfigError(path, f"grader spec file {text!r} does not exist")
        return _unwrap(_parse_text(text, path), path)
    raise ConfigError(path, f"expected a grader spec (mapping, file or type name), got {_show(spec)}")


def _load_file(file: Path, path: str) -> dict[str, Any]:
    if not _is_file(file):
        raise ConfigError(path, f"grader spec file {str(file)!r} does not exist")
    where = f"{path} ({file})"
    try:
        text = read_text(file, where)  # other bytes than UTF-8: a ConfigError naming the line
    except OSError as exc:
        raise ConfigError(where, f"cannot read the grader spec file: {exc}") from None
    return _unwrap(_parse_text(text, where, str(file)), path)


def _is_file(name: str | Path) -> bool:
    """Whether a file of that name exists; False for names no file can have (too long, a NUL byte)."""
    try:
        return Path(name).is_file()
    except (OSError, ValueError):  # ENAMETOOLONG for inline specs over 255 bytes; "embedded null byte"
        return False


def _looks_inline(text: str) -> bool:
    return text.startswith(("{", "[")) or ": " in text


def _parse_text(text: str, where: str, name: str = "<inline spec>") -> Any:
    import yaml  # YAML is a superset of the JSON specs are written in

    try:
        return safe_load(text, name)  # with limits on nesting and aliases (kitae.config)
    except yaml.YAMLError as exc:
        raise ConfigError(where, f"not valid YAML/JSON: {exc}") from None


def _unwrap(data: Any, path: str) -> dict[str, Any]:
    if isinstance(data, dict) and "type" not in data and set(data) == {"grader"}:
        data = data["grader"]
    if not isinstance(data, dict):
        raise ConfigError(path, f"expected a mapping with a 'type', got {_show(data)}")
    return data


def build_grader(spec: dict | str | Path, path: str = "grader") -> "Grader":
    """Build a grader from a spec (dict, file, inline YAML/JSON, or a type name such as ``"numeric"``).

    ``path`` is where the spec sits in the user's config; errors are reported under it.
    """
    spec = load_spec(spec, path)
    kind = spec.get("type")
    if kind is None:
        raise ConfigError(f"{path}.type", f"missing; one of: {', '.join(GRADERS.names())}")
    if not isinstance(kind, str):
        raise ConfigError(f"{path}.type", f"expected a grader type name, got {_show(kind)}")
    entry = GRADERS.get(kind, f"{path}.type")
    from_spec = getattr(entry, "from_spec", None)
    if from_spec is None:  # a grader without fields: only `type` and `name`
        SpecReader(spec, path).finish()
        grader = entry()
    else:
        grader = from_spec(spec, path)
    name = spec.get("name")
    if name is not None and not isinstance(name, str):
        raise ConfigError(f"{path}.name", f"expected a string, got {_show(name)}")
    grader.name = name or grader.name or kind
    return grader


# Every grader type kitae ships, imported when a spec first names it: the judge's and the reward graders
# live in packages above this one, which import it (kitae/judge, kitae/rewards), never the other way round.
_BUILTIN = {
    "string_check": "kitae.graders.checks:StringCheckGrader",
    "format": "kitae.graders.checks:FormatGrader",
    "text_similarity": "kitae.graders.similarity:TextSimilarityGrader",
    "numeric": "kitae.graders.numeric:NumericGrader",
    "answer": "kitae.graders.answer:AnswerGrader",
    "math": "kitae.graders.answer:MathGrader",
    "python": "kitae.graders.python:PythonGrader",
    "code": "kitae.graders.code:CodeGrader",
    "multi": "kitae.graders.combine:MultiGrader",
    "weighted": "kitae.graders.combine:WeightedGrader",
    "gate": "kitae.graders.combine:GateGrader",
    "judge": "kitae.judge.group:GroupJudgeGrader",
    "score_model": "kitae.judge.model_graders:ScoreModelGrader",
    "label_model": "kitae.judge.model_graders:LabelModelGrader",
    "template": "kitae.rewards.graders:TemplateGrader",
    "repetition": "kitae.rewards.graders:RepetitionGrader",
    "overlong": "kitae.rewards.graders:OverlongGrader",
    "soft_overlong": "kitae.rewards.graders:SoftOverlongGrader",
    "diversity": "kitae.rewards.graders:DiversityGrader",
    "length": "kitae.rewards.graders:LengthGrader",
    "reward_model": "kitae.rewards.graders:RewardModelGrader",
}
for _name, _target in _BUILTIN.items():
    GRADERS.register_lazy(_name, _target)
