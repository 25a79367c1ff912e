"""Whether two runs of one config sampled and logged the same thing: every stored sample (text, scores, reasons,
errors, advantages), every group, every metric that is not a timing, every evaluation and evaluated sample.

    python scripts/compare_runs.py runs/zero/run.db other/zero/run.db     # exit 0: the same; 1: where they differ

Used to show that a change left a run as it was (issue 33's trajectory change on examples/zero.yaml: docs/agents.md).
Runs repeat exactly only on one torch thread and one CPU type (README, "How much runs vary").
"""

from __future__ import annotations

import json
import sqlite3
import sys

TIMINGS = ("secs_generate", "secs_per_step", "secs_train")  # wall-clock metrics: never the same twice
QUERIES = {
    "samples": "SELECT s.step, g.group_index, s.sample_index, s.text, s.completion_tokens, s.finish_reason, s.reward, "
               "s.advantage, s.scores, s.reasons, s.errors FROM samples s JOIN groups g ON g.id = s.group_id "
               "ORDER BY s.step, g.group_index, s.sample_index",
    "groups": "SELECT step, group_index, prompt, reference, n_samples, n_scored, n_truncated, reward_mean, reward_std "
              "FROM groups ORDER BY step, group_index",
    "metrics": "SELECT step, key, value FROM metrics ORDER BY step, key",
    "evals": "SELECT step, metrics FROM evals ORDER BY step",
    "eval_samples": "SELECT step, sample_index, data FROM eval_samples ORDER BY step, sample_index",
}


def table_rows(db: sqlite3.Connection, table: str) -> list[tuple]:
    rows = db.execute(QUERIES[table]).fetchall()
    if table == "metrics":
        return [r for r in rows if r[1] not in TIMINGS]
    if table == "evals":  # an evaluation's metrics hold no timings today; drop any that would
        return [(step, {k: v for k, v in json.loads(m).items() if not k.startswith("secs")}) for step, m in rows]
    return rows


def compare(a: str, b: str) -> list[str]:
    """One line per table: its row count in each run and whether they are the same (the first difference if not)."""
    first, second = sqlite3.connect(f"file:{a}?mode=ro", uri=True), sqlite3.connect(f"file:{b}?mode=ro", uri=True)
    lines = []
    for table in QUERIES:
        x, y = table_rows(first, table), table_rows(second, table)
        where = next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), None)
        verdict = "the same" if x == y else (f"differ at row {where}: {x[where]!r:.300} vs {y[where]!r:.300}"
                                              if where is not None else "differ in length")
        lines.append(f"{table}: {len(x)} vs {len(y)} rows, {verdict}")
    return lines


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    lines = compare(sys.argv[1], sys.argv[2])
    print("\n".join(lines))
    return 0 if all(line.endswith("the same") for line in lines) else 1


if __name__ == "__main__":
    sys.exit(main())
