"""Prompt sets as users have them: a Hub dataset or any ``datasets.load_dataset`` source, and a map from its
columns to kitae's fields.

A config's ``data.train`` / ``data.eval`` is a file or folder (a string, :func:`kitae.data.loader.load_prompts`)
or a :class:`DatasetSource` mapping::

    {hub: openai/gsm8k, name: main, split: train}              # a Hub dataset (cached, or downloaded: kitae.hub)
    {path: json, data_files: "data/*.jsonl", split: train}     # a datasets builder on files or globs
    {path: csv, data_files: [a.csv, b.csv]}                    #   (json, csv, parquet, text, a local folder ...)

:class:`RowMap` (``data.fields``, ``data.answer_pattern``, ``data.system``) turns each row into kitae's shape
before it is checked: ``fields: {prompt: question, reference_answer: answer}`` copies the dataset's
``question`` column to ``prompt`` (columns not named stay in the row, so graders still read them as
``item.COLUMN``); ``answer_pattern: '####\\s*(.+)$'`` keeps the part of the reference its first group (else
the whole match) catches, GSM8K-style; ``system`` puts a system turn first in every prompt without one.
A column that is not there is a DataError naming it and the columns that are; so is a prompt column that is not
text (naming the row). A ``fields`` key that is not one of kitae's fields (FIELDS) is a ConfigError with a
did-you-mean, and ``data_files`` that match no file, or files without rows, are a DataError naming them.
"""

from __future__ import annotations

import glob
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kitae.config import short_repr
from kitae.errors import ConfigError, DataError
from kitae.registry import closest


@dataclass
class DatasetSource:
    """A dataset ``datasets.load_dataset`` reads: a Hub id (`hub`) or a builder / folder (`path`)."""

    hub: str | None = None  # a Hub dataset id, e.g. openai/gsm8k
    path: str | None = None  # json | csv | parquet | text | a local dataset folder
    name: str | None = None  # the dataset's configuration (subset), e.g. main
    split: str = "train"
    revision: str | None = None  # the Hub dataset's branch, tag or commit
    data_files: str | list[str] | None = None  # with path: files or globs (relative to the current folder)

    def validate(self, path: str) -> None:
        if (self.hub is None) == (self.path is None):
            raise ConfigError(path, "give exactly one of 'hub' (a Hub dataset id) or 'path' (a datasets builder "
                              "such as json/csv/parquet with data_files, or a dataset folder)")
        if self.hub is not None and self.data_files is not None:
            raise ConfigError(f"{path}.data_files", "takes 'path' (a builder), not 'hub'; remove one")

    def describe(self) -> str:
        """How errors name this dataset: ``openai/gsm8k (main, train)``."""
        what = self.hub or (f"{self.path} {self.data_files}" if self.data_files else self.path)
        return f"{what} ({', '.join(x for x in (self.name, self.split) if x)})"

    def load(self, key: str = "data") -> list[dict]:
        """The split's rows as dicts."""
        import datasets

        if self.hub is not None:
            source, kwargs = hub_dataset_folder(self.hub, self.name, self.revision, key), {}
        else:
            self.check_data_files(key)
            source, kwargs = self.path, {"data_files": self.data_files} if self.data_files else {}
        try:
            ds = datasets.load_dataset(source, self.name, split=self.split, **kwargs)
        except ValueError as exc:  # an unknown split or configuration: datasets names the ones there are
            raise DataError(self.describe(), None, None, _first_line(exc)) from None
        except (FileNotFoundError, datasets.exceptions.DatasetNotFoundError) as exc:
            raise DataError(self.describe(), None, None, f"not found ({_first_line(exc)}); check data_files "
                            "(relative to the current folder) or the path") from None
        except StopIteration:  # datasets' json/csv builders on files with no rows
            raise DataError(self.describe(), None, None, f"no rows ({key}): the files data_files names are empty; "
                            "give files with at least one row") from None
        return list(ds)

    def check_data_files(self, key: str) -> None:
        """Each of `data_files` (a path or glob, relative to the current folder) names at least one file, else a
        DataError naming it (datasets stops with a StopIteration traceback on a glob that matches nothing)."""
        files = [self.data_files] if isinstance(self.data_files, str) else self.data_files or []
        for pattern in files:
            if isinstance(pattern, str) and "://" not in pattern and not glob.glob(pattern, recursive=True):
                raise DataError(self.describe(), None, None, f"{key}.data_files {pattern!r} matches no file (relative "
                                f"to the current folder, {Path.cwd()}); check the path or the glob")


def hub_dataset_folder(repo: str, name: str | None, revision: str | None, key: str) -> str:
    """The Hub dataset's snapshot folder (kitae.hub). Online, only the files of configuration `name` are fetched
    when the dataset card's ``configs`` list them; datasets then reads the folder as the Hub would."""
    from kitae.hub import hub_file, hub_snapshot, offline

    files = None
    readme = None if offline() else hub_file(repo, "README.md", revision, repo_type="dataset")
    if readme is not None:
        found = config_files(Path(readme).read_text(encoding="utf-8", errors="replace"), name)
        files = tuple(found + ["README.md", "*.json"]) if found else None
    return hub_snapshot(repo, revision, key, repo_type="dataset", what="dataset", files=files)


def config_files(card: str, name: str | None) -> list[str]:
    """The ``data_files`` paths of configuration `name` (default: the one marked default, else the first) in a
    dataset card's YAML header; [] when the card lists none."""
    import yaml

    head = re.match(r"---\s*\n(.*?)\n---", card, flags=re.S)
    try:
        meta = yaml.safe_load(head.group(1)) if head else None
    except yaml.YAMLError:
        return []
    configs = [c for c in (meta or {}).get("configs") or [] if isinstance(c, dict)]
    chosen = [c for c in configs if c.get("config_name") == name] if name else \
        [c for c in configs if c.get("default")] or configs[:1]
    out: list[str] = []
    for config in chosen:
        files = config.get("data_files")
        for entry in files if isinstance(files, list) else [files]:
            paths = entry.get("path") if isinstance(entry, dict) else entry
            out += [str(p) for p in (paths if isinstance(paths, list) else [paths]) if p]
    return out


# kitae's fields, which data.fields maps columns to (kitae.data.loader reads them); the prompt ones must be text
FIELDS = ("prompt", "messages", "reference_answer", "difficulty", "lang", "images")
TEXT_FIELDS = ("prompt", "messages")


class RowMap:
    """``data.fields`` / ``data.answer_pattern`` / ``data.system`` (see the module docstring), checked when
    built: a bad pattern or an empty column name is a ConfigError under `path`."""

    def __init__(self, fields: dict[str, str] | None = None, answer_pattern: str | None = None,
                 system: str | None = None, path: str = "data"):
        self.fields, self.answer_pattern, self.system = dict(fields or {}), answer_pattern, system
        for target, column in self.fields.items():
            if target not in FIELDS:
                hint = closest(str(target), list(FIELDS))
                raise ConfigError(f"{path}.fields.{target}", "unknown kitae field" + (
                    f"; did you mean '{hint}'?" if hint else "") + f" (the keys are kitae's fields: "
                    f"{', '.join(FIELDS)}; the values your dataset's columns; every other column reaches graders "
                    "under its own name, as item.COLUMN)")
            if not isinstance(column, str) or not column:
                raise ConfigError(f"{path}.fields.{target}", "expected the name of one of the dataset's columns")
        self._pattern = None
        if answer_pattern is not None:
            try:
                self._pattern = re.compile(answer_pattern)
            except re.error as exc:
                raise ConfigError(f"{path}.answer_pattern", f"not a regular expression ({exc})") from None

    @property
    def empty(self) -> bool:
        return not self.fields and self.answer_pattern is None and self.system is None

    def apply(self, row: Any, file: str, n: int) -> Any:
        """The row with its columns copied to kitae's fields, the reference cut out and the system turn put first."""
        if not isinstance(row, dict):
            return row  # validate_row names it
        row = dict(row)
        for target, column in self.fields.items():
            if column not in row:
                hint = closest(column, list(row))
                raise DataError(file, n, column, f"no such column (data.fields.{target}); the columns are "
                                f"{', '.join(map(str, row))}" + (f"; did you mean '{hint}'?" if hint else ""))
            if target in TEXT_FIELDS and not isinstance(row[column], (str, list)):
                raise DataError(file, n, column, f"is not text (got {type(row[column]).__name__}: "
                                f"{short_repr(row[column])}), but data.fields.{target} maps it to the {target}; map "
                                f"{target} to a column of text, or fix the row")
            row[target] = row[column]
        if self.answer_pattern is not None and row.get("reference_answer") is not None:
            row["reference_answer"] = self._cut(str(row["reference_answer"]), file, n)
        if self.system is not None:
            row = self._with_system(row)
        return row

    def _cut(self, text: str, file: str, n: int) -> str:
        pattern = self._pattern
        found = pattern.search(text)
        if found is None:
            raise DataError(file, n, "reference_answer", f"data.answer_pattern {self.answer_pattern!r} does not "
                            f"match {text[-80:]!r}; fix the pattern or the row")
        return (found.group(1) if pattern.groups else found.group(0)).strip()

    def _with_system(self, row: dict) -> dict:
        if "messages" in row and isinstance(row["messages"], list):
            turns = row["messages"]
        elif isinstance(row.get("prompt"), list):
            turns = row.pop("prompt")
        elif isinstance(row.get("prompt"), str):
            turns = [{"role": "user", "content": row.pop("prompt")}]
        else:
            return row  # no prompt: validate_row names it
        if not (turns and isinstance(turns[0], dict) and turns[0].get("role") == "system"):
            turns = [{"role": "system", "content": self.system}, *turns]
        row["messages"] = turns
        return row


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__
