"""The prompt sets of a run: the ``data:`` section of a training config (the prompt sets, how their rows map to
kitae's fields, and the prompt sampler), and the one reader of prompt sets of `kitae train` (pre-flight) and
`kitae eval`."""

from __future__ import annotations

from dataclasses import dataclass, field

from kitae.data.sources import DatasetSource, RowMap
from kitae.errors import ConfigError
from kitae.models import BUNDLED_DATA
from kitae.trainer.samplers import SamplerSettings


@dataclass
class DataConfig:
    """The prompt sets. ``train``/``eval``: a file (.jsonl/.json/.parquet), a datasets folder, bundled:NAME, or a
    mapping ``{hub: ORG/NAME, name: CONFIG, split: SPLIT}`` / ``{path: json|csv|parquet, data_files: GLOB}``
    (kitae.data.sources.DatasetSource). ``fields`` maps kitae's fields to the dataset's columns
    (``{prompt: question, reference_answer: answer}``), ``answer_pattern`` cuts the reference out of a longer
    answer (its first group), ``system`` is a system prompt put before every prompt without one."""

    train: str | DatasetSource = "bundled:arith/train"  # the training prompts (the forms: above)
    eval: str | DatasetSource | None = "bundled:arith/test"  # held-out prompts for evaluations; null = none
    fields: dict[str, str] = field(default_factory=dict)  # kitae field -> the dataset's column, e.g. {prompt: question}
    answer_pattern: str | None = None  # a regex; the reference is its first group (else the whole match)
    system: str | None = None  # a system prompt put before every prompt that has none
    shuffle: bool = True  # the prompt order: shuffled each epoch (by the seed) or as in the file
    sampler: SamplerSettings = SamplerSettings.default("uniform")  # which prompts each step draws (Kimi k1.5 §2.3.4):
    # uniform | prioritized | curriculum

    def validate(self, path: str) -> None:
        self.rowmap(path)  # a bad pattern fails when the config is read

    def rowmap(self, path: str = "data") -> RowMap:
        return RowMap(self.fields, self.answer_pattern, self.system, path)


def load_data(spec: str | DatasetSource | None, key: str, rowmap: RowMap | None = None,
              limit: int | None = None) -> tuple[str, list[dict]]:
    """(how errors name the data, its checked rows, the first `limit` only) of a prompt set: a file, a folder,
    bundled:NAME or a DatasetSource, each row mapped by `rowmap` (``data.fields``, ``answer_pattern``,
    ``system``) first. The one reader of prompt sets of `kitae train` (pre-flight) and `kitae eval`; `key` (the
    config key or option that named the data) is in its errors. No spec: ("", [])."""
    from kitae.data.loader import load_prompts

    if not spec:
        return "", []
    source = resolve_data_path(spec)
    rows = load_prompts(source, rowmap=rowmap, key=key)
    name = source.describe() if isinstance(source, DatasetSource) else source
    return name, rows[:limit] if limit else rows


def resolve_data_path(spec: str | DatasetSource) -> str | DatasetSource:
    """`bundled:arith/train` -> the bundled JSONL; anything else (a path, a DatasetSource) is returned unchanged."""
    if isinstance(spec, str) and spec.startswith("bundled:"):
        name = spec.removeprefix("bundled:")
        task, _, split = name.partition("/")
        path = BUNDLED_DATA.parent / task / f"{split or 'train'}.jsonl"
        if not path.exists():
            raise ConfigError("data", f"no bundled dataset '{name}' (looked for {path})")
        return str(path)
    return spec
