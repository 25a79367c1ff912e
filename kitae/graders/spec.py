"""Grader specs: the registry of grader types, reading a spec's fields, and `build_grader`.

A spec is a dict (or a YAML/JSON file or string) with a ``type`` and that type's fields, in the OpenAI
grader schema where OpenAI has the type (``string_check``, ``text_similarity``, ``python``, ``multi``) and
in kitae's own words otherwise (``numeric``, ``format``, ``math``, ``answer``, ``code``, ``weighted``, ``gate``)::

    type: weighted
    graders:
      num: {type: numeric, weight: 0.5, tolerance: 0.01}
      sim: {type: text_similarity, weight: 0.5, evaluation_metric: rouge_l}

Each type's fields are a dataclass beside its grader class (``NumericSpec`` in numeric.py, ...), read by
:func:`read_spec` with :func:`kitae.config.from_dict`, the reader of every kitae config. Every mistake raises
:class:`kitae.errors.ConfigError` whose message starts with the key path inside the spec
(``grader.graders.num.tolerance: expected a number, got 'one'``) and, for names, suggests the closest valid one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from kitae.config import from_dict, read_text, safe_load, short_repr
from kitae.errors import ConfigError
from kitae.registry import Registry

if TYPE_CHECKING:
    from kitae.graders.base import Grader

T = TypeVar("T")

GRADERS = Registry("grader")

# Keys every spec may carry, read by build_grader; the fields of each type are the others.
COMMON_KEYS = ("type", "name")


def register_grader(type_name: str) -> Callable[[type], type]:
    """Class decorator: register a Grader subclass under its spec ``type``.

    The class builds itself from a spec with the classmethod ``from_spec(spec: dict, path: str)``, which reads
    its fields with :func:`read_spec`; a class without fields needs none.
    """

    def add(cls: type) -> type:
        cls.type_name = type_name
        GRADERS.register(type_name, cls)
        return cls

    return add


# ---- reading a spec's fields ---------------------------------------------------------------------
def read_spec(cls: type[T], spec: Any, path: str) -> T:
    """A grader spec's fields as the dataclass `cls`, read by :func:`kitae.config.from_dict` like every config.

    Field types check the values (``Literal`` for choices, :class:`~kitae.graders.template.Template` for
    templates, :class:`SubGrader` for a nested spec), ``setting(default, minimum=, maximum=)`` gives bounds,
    a ``validate(path)`` method checks what involves several fields; an unknown key gets a did-you-mean.
    ``type`` and ``name`` are :func:`build_grader`'s.
    """
    if not isinstance(spec, dict):
        raise ConfigError(path, f"expected a mapping (a grader spec), got {short_repr(spec)}")
    return from_dict(cls, spec, path, skip=COMMON_KEYS)


@dataclass
class NoFields:
    """The spec of a grader type without fields: only ``type`` and ``name``."""


class SubGrader:
    """Field type of a nested grader spec (gate's ``gate``, length's ``correct``): the field holds the
    :class:`Grader` built from it, errors named under the field's path (``grader.gate.check: ...``)."""

    @classmethod
    def from_config(cls, value: Any, path: str) -> "Grader":
        if not isinstance(value, dict):
            raise ConfigError(path, f"expected a mapping (a grader spec), got {short_repr(value)}")
        return build_grader(value, path)


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
    raise ConfigError(path, f"expected a grader spec (mapping, file or type name), got {short_repr(spec)}")


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
        raise ConfigError(path, f"expected a mapping with a 'type', got {short_repr(data)}")
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
        raise ConfigError(f"{path}.type", f"expected a grader type name, got {short_repr(kind)}")
    entry = GRADERS.get(kind, f"{path}.type")
    from_spec = getattr(entry, "from_spec", None)
    if from_spec is None:  # a grader without fields: only `type` and `name`
        read_spec(NoFields, spec, path)
        grader = entry()
    else:
        grader = from_spec(spec, path)
    name = spec.get("name")
    if name is not None and not isinstance(name, str):
        raise ConfigError(f"{path}.name", f"expected a string, got {short_repr(name)}")
    grader.name = name or grader.name or kind
    return grader


# Every grader type kitae ships, imported when a spec first names it: the judge's and the reward graders
# live in packages above this one, which import it (kitae/judge, kitae/rewards), never the other way round.
_BUILTIN = {
    "string_check": "kitae.graders.string_check:StringCheckGrader",
    "format": "kitae.graders.string_check:FormatGrader",
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
    "tool_format": "kitae.graders.tool_use:ToolFormatGrader",
    "tool_cost": "kitae.graders.tool_use:ToolCostGrader",
    "environment_reward": "kitae.graders.tool_use:EnvironmentRewardGrader",
}
for _name, _target in _BUILTIN.items():
    GRADERS.register_lazy(_name, _target)
