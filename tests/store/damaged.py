"""Run stores damaged by hand, as a person with a sqlite3 shell can leave them: a row deleted, a JSON column
edited to ``{not json``, text where a number goes. Each case starts from a real small run written by the run
store's own writer (tests/web/runs.py: 30 steps, evals every 10, groups 0-2 each step) and says which table,
row and column a reader must name."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Damage:
    id: str
    sql: str  # what the person ran on run.db
    where: str  # what the error must name: table, row and column
    shown_by: frozenset  # which readers meet it: "show" (`kitae runs show`), "list" (`kitae runs list`)


DAMAGES = [
    Damage("run-row-deleted", "DELETE FROM run", "table run has no row", frozenset({"show", "list"})),
    Damage("config-not-json", "UPDATE run SET config = '{not json'", "table run, row id 1, column config: not JSON",
           frozenset({"show"})),
    Damage("eval-metrics-not-json", "UPDATE evals SET metrics = '{not json' WHERE step = 30",
           "table evals, row step 30, column metrics: not JSON", frozenset({"show", "list"})),
    Damage("metric-value-text", "UPDATE metrics SET value = '{not json' WHERE key = 'reward' AND step = 30",
           "table metrics, row key reward, step 30, column value: expected a number", frozenset({"show", "list"})),
    Damage("sample-scores-not-json",
           "UPDATE samples SET scores = '{not json' WHERE step = 3 AND sample_index = 1 AND group_id = "
           "(SELECT id FROM groups WHERE step = 3 AND group_index = 0)",
           "table samples, row group_id {group}, sample_index 1, column scores: not JSON", frozenset()),
    Damage("group-messages-not-an-array", "UPDATE groups SET messages = '{}' WHERE step = 3 AND group_index = 0",
           "table groups, row id {group}, column messages: expected a JSON array", frozenset()),
]


def damage(run: Path, case: Damage) -> str:
    """Apply `case` to run/run.db; returns what its error must say (the damaged group's id filled in)."""
    with sqlite3.connect(run / "run.db") as db:
        group = db.execute("SELECT id FROM groups WHERE step = 3 AND group_index = 0").fetchone()[0]
        db.execute(case.sql)
    db.close()
    return case.where.format(group=group)


def unloadable_model_config(tmp_path: Path):
    """A run config named demo whose model folder cannot load (its weights file is garbage), so that a resume
    refused for another reason is seen to be refused before the model loads."""
    import shutil

    from kitae.models import BUNDLED_MODEL
    from kitae.trainer.config import load_train_config

    corrupt = tmp_path / "corrupt-model"
    shutil.copytree(BUNDLED_MODEL, corrupt)
    (corrupt / "model.safetensors").write_bytes(b"\x00" * 64 + b"not a safetensors file")
    return load_train_config(data={"name": "demo", "output_dir": str(tmp_path / "runs"),
                                   "model": {"path": str(corrupt)},
                                   "rewards": [{"name": "correct", "grader": {"type": "answer"}}]})
