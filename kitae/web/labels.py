"""Your own scores for a run's samples, and how well the grader agrees with them (the hosted RFT grader guide's advice:
score answers yourself before trusting a grader for a long run; the verdict needs MIN_LABELS, 30, to give a grade).

Labels live in a sidecar file, ``runs/NAME/labels.jsonl``, never in run.db (the trainer owns run.db).
One JSON object per line, appended; a later line for the same sample replaces an earlier one, and a line
with ``"score": null`` removes the label:

    {"step": 12, "group_index": 0, "sample_index": 3, "score": 4, "prompt_key": "9f86d081884c7d65",
     "labeled_at": 1748779862.1}

A sample is named by (step, group_index, sample_index), which survives a resume (``truncate_after``
renumbers group ids, not steps). ``prompt_key`` guards against a resumed run that logged a different
prompt at that place: such a label is ignored.

Agreement is computed by :func:`kitae.graders.agreement.agreement` and judged by
:func:`kitae.graders.agreement.verdict`, the same code as ``kitae grader validate``; the grader score of a
sample is its total reward, or one component's score. :func:`labeled_rows` turns the labeled groups into
``kitae grader validate`` rows, to try another grader spec on the same labels.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from kitae.errors import DataError, KitaeError
from kitae.graders.agreement import MIN_LABELS, agreement, verdict
from kitae.store import GroupRow, RunStore
from kitae.store.failures import NO_SPACE, READ_ONLY
from kitae.store.records import prompt_key

LABELS_FILE = "labels.jsonl"
TOTAL = "reward"  # the grader score is the total reward unless a component is named
Place = tuple[int, int, int]  # step, group_index, sample_index


@dataclass
class Label:
    step: int
    group_index: int
    sample_index: int
    score: float | None
    prompt_key: str | None = None
    labeled_at: float | None = None

    @property
    def where(self) -> Place:
        return self.step, self.group_index, self.sample_index


# ---- the sidecar file ---------------------------------------------------------------------------
def read_labels(run_dir: str | Path) -> dict[Place, Label]:
    """(step, group_index, sample_index) -> the latest label; a missing file has none."""
    path = Path(run_dir) / LABELS_FILE
    if not path.is_file():
        return {}
    out: dict[Place, Label] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(str(path), number, None, f"not JSON ({exc.msg}); fix or delete the line") from exc
        label = parse_label(obj, str(path), number)
        if label.score is None:
            out.pop(label.where, None)
        else:
            out[label.where] = label
    return out


def parse_label(obj: Any, source: str, row: int | None) -> Label:
    """A Label from one JSON object; DataError names the source, row and field."""
    if not isinstance(obj, dict):
        raise DataError(source, row, None, f"expected a JSON object, got {type(obj).__name__}")
    ints = {}
    for key in ("step", "group_index", "sample_index"):
        value = obj.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise DataError(source, row, key, f"expected a whole number >= 0, got {value!r}")
        ints[key] = value
    score = obj.get("score")
    is_number = isinstance(score, (int, float)) and not isinstance(score, bool) and math.isfinite(score)
    if score is not None and not is_number:
        raise DataError(source, row, "score", f"expected a number (or null to remove the label), got {score!r}")
    key = obj.get("prompt_key")
    if key is not None and not isinstance(key, str):
        raise DataError(source, row, "prompt_key", f"expected a string, got {key!r}")
    score = None if score is None else float(score)
    return Label(**ints, score=score, prompt_key=key, labeled_at=obj.get("labeled_at"))


def append_labels(run_dir: str | Path, labels: list[Label]) -> None:
    """Append labels to the sidecar file in one O_APPEND write, so that two writers (two browser tabs, two
    servers) never interleave their lines and a reader never sees half a line."""
    now = time.time()
    lines = "".join(json.dumps({**asdict(l), "labeled_at": l.labeled_at or now}, ensure_ascii=False) + "\n"
                    for l in labels)
    path = Path(run_dir) / LABELS_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, lines.encode("utf-8"))
        finally:
            os.close(fd)
    except OSError as exc:
        raise labels_not_saved(path, exc) from exc


class LabelsNotSaved(KitaeError):
    """labels.jsonl could not be written (a read-only run folder, a full disk); the message says which and why."""


def labels_not_saved(path: Path, exc: OSError) -> LabelsNotSaved:
    reason = exc.strerror or str(exc)
    if exc.errno in READ_ONLY:
        fix = ("this run folder is read-only (a read-only mount, an archive, another user's folder); copy the run "
               "folder to writable storage and label it there (kitae ui --runs FOLDER)")
    elif exc.errno in NO_SPACE:
        fix = "the disk is full, or a quota or file-size limit was hit; free space there and save again"
    else:
        fix = "check the run folder and its disk, then save again"
    return LabelsNotSaved(f"cannot save your labels: {path} ({reason}): {fix}")


# ---- agreement with the grader ------------------------------------------------------------------
def labeled_groups(store: RunStore, labels: dict[Place, Label]) -> list[tuple[GroupRow, list[Label | None]]]:
    """Each group that has a label, with its samples' labels in sample order (None = not labeled).

    A label whose group is gone, whose sample index is out of range or whose prompt changed is ignored."""
    places = sorted({(step, gi) for step, gi, _ in labels})
    out = []
    for step, gi in places:
        group = _group_at(store, step, gi)
        if group is None:
            continue
        row = [labels.get((step, gi, si)) for si in range(len(group.samples))]
        row = [l if l is not None and l.prompt_key in (None, prompt_key(group.prompt)) else None for l in row]
        if any(l is not None for l in row):
            out.append((group, row))
    return out


def _group_at(store: RunStore, step: int, group_index: int) -> GroupRow | None:
    for group in store.groups(step=step, order="step", limit=None):
        if group.group_index == group_index:
            return store.group(group.id)
    return None


def grader_score(sample: Any, grader: str) -> float | None:
    return sample.reward if grader == TOTAL else sample.scores.get(grader)


def label_agreement(store: RunStore, grader: str = TOTAL, worst: int = 5) -> dict[str, Any]:
    """Agreement of the run's grader (total reward, or component `grader`) with the labels, as JSON."""
    groups = labeled_groups(store, read_labels(store.run_dir))
    human = [[None if l is None else l.score for l in row] for _, row in groups]
    graded = [[grader_score(s, grader) for s in g.samples] for g, _ in groups]
    result = agreement(human, graded, worst)
    return {
        "grader": grader,
        "labels": sum(l is not None for _, row in groups for l in row),
        "min_labels": MIN_LABELS,
        "agreement": result.to_dict(),
        "verdict": verdict(result),
        "worst": [_disagreement(groups[d.group][0], d) for d in result.worst],
    }


def _disagreement(group: GroupRow, d: Any) -> dict[str, Any]:
    return {
        "group_id": group.id, "step": group.step, "group_index": group.group_index, "prompt": group.prompt,
        "better": {"sample_index": d.better, "text": group.samples[d.better].text, "human": d.human[0],
                   "grader": d.grader[0]},
        "worse": {"sample_index": d.worse, "text": group.samples[d.worse].text, "human": d.human[1],
                  "grader": d.grader[1]},
        "severity": d.severity,
    }


def labeled_rows(store: RunStore) -> list[dict[str, Any]]:
    """Labeled groups as ``kitae grader validate --data`` rows: the dataset row as ``item``, every sample with
    ``output_text`` and, where you scored it, ``human_score``."""
    rows = []
    for group, row in labeled_groups(store, read_labels(store.run_dir)):
        item = {**group.item, "messages": group.messages, "reference_answer": group.reference}
        samples = []
        for s, label in zip(group.samples, row):
            sample = {"output_text": s.text, "finish_reason": s.finish_reason, "completion_tokens": s.completion_tokens}
            if label is not None:
                sample["human_score"] = label.score
            samples.append(sample)
        rows.append({"item": item, "samples": samples, "step": group.step, "group_index": group.group_index})
    return rows
