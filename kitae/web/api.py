"""The run page's JSON endpoints: plain functions over the run store's public reader API.

Each endpoint is registered by name in :data:`ROUTES` with its method and path pattern; the server
(:mod:`kitae.web.server`) matches a request to a route and hands it the runs folder, the path's
parameters and the query. Endpoints read only the run store (``runs/NAME/run.db``) and the labels sidecar
(``runs/NAME/labels.jsonl``, the only thing the page writes). Every page of rows is bounded (``limit``
at most :data:`MAX_LIMIT`) and every metric series is downsampled to at most ``points`` points, so a run
with 10,000 steps and 100,000 samples answers as fast as a small one.

    GET  /api/runs                             the runs list
    GET  /api/runs/NAME                        summary, plot panels, metric and eval keys
    GET  /api/runs/NAME/metrics?since=S        {key: [[step, value], ...]}; poll with since = last_step
                                               (an unknown key in keys=... is a 404 naming the close ones)
    GET  /api/runs/NAME/steps                  steps that have groups
    GET  /api/runs/NAME/groups?step&order&filter&limit&offset
    GET  /api/runs/NAME/groups/ID              one group with its samples
    GET  /api/runs/NAME/prompt/ID              the prompt of group ID across steps
    GET  /api/runs/NAME/evals                  every eval; /evals/STEP: its samples
    GET  /api/runs/NAME/labels                 your labels; POST to add or change some
    GET  /api/runs/NAME/label_queue?after=K    the next group worth labeling
    GET  /api/runs/NAME/agreement?grader=G     your labels against the grader
    GET  /api/runs/NAME/labeled.jsonl          your labeled groups, as `kitae grader validate` data
    GET  /api/runs/NAME/images/FILE            an image of the run's image prompts (runs/NAME/images/FILE only)
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable
from urllib.parse import parse_qs

from kitae.errors import DataError, KitaeError
from kitae.registry import Registry, close_names
from kitae.store import DB_NAME, GROUP_FILTERS, GROUP_ORDERS, GroupRow, RunStore, list_runs
from kitae.store.failures import StoreDamaged
from kitae.store.images import content_type, image_file
from kitae.store.records import prompt_key
from kitae.store.store import run_not_found
from kitae.web import labels as label_store
from kitae.web.downsample import downsample
from kitae.web.panels import layout

ROUTES = Registry("run page API route")
MAX_LIMIT = 200  # rows in one page
DEFAULT_POINTS, MAX_POINTS = 1000, 5000  # points per plotted series
EVAL_PREFIX = "eval/"


@dataclass(frozen=True)
class Download:
    """An endpoint's answer that is a file to save, not JSON."""

    filename: str
    data: bytes
    content_type: str
    inline: bool = False  # shown in the page (an image), not saved


class ApiError(KitaeError):
    """An error the page shows as is, with its HTTP status."""

    def __init__(self, status: int, message: str):
        self.status = status
        super().__init__(message)


@dataclass(frozen=True)
class Route:
    method: str
    pattern: str  # "/runs/{run}/groups/{id:int}"
    handler: Callable[..., Any]

    def match(self, method: str, path: str) -> dict[str, Any] | None:
        if method != self.method:
            return None
        m = re.fullmatch(_regex(self.pattern), path)
        if m is None:
            return None
        return {k: int(v) if f"{{{k}:int}}" in self.pattern else v for k, v in m.groupdict().items()}


def _regex(pattern: str) -> str:
    out = re.sub(r"\{(\w+):int\}", r"(?P<\1>-?[0-9]+)", pattern)
    return re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", out)


def route(name: str, method: str, pattern: str) -> Callable:
    def add(fn: Callable) -> Callable:
        ROUTES.register(name, Route(method, pattern, fn))
        return fn

    return add


class Query:
    """Query-string parameters with typed getters; a bad value is a 400 that names the parameter."""

    def __init__(self, query: str | dict[str, list[str]] = ""):
        self._q = parse_qs(query) if isinstance(query, str) else query

    def str(self, name: str, default: str | None = None) -> str | None:
        values = self._q.get(name)
        return values[-1] if values and values[-1] != "" else default

    def int(self, name: str, default: int | None = None, lo: int | None = None, hi: int | None = None) -> int | None:
        raw = self.str(name)
        if raw is None:
            return default
        try:
            value = int(raw)
        except ValueError:
            raise ApiError(400, f"query parameter '{name}': expected a whole number, got {raw!r}") from None
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise ApiError(400, f"query parameter '{name}': {value} is out of range [{lo}, {hi}]")
        return value

    def list(self, name: str) -> list[str] | None:
        raw = self.str(name)
        return None if raw is None else [k for k in raw.split(",") if k]


def dispatch(runs_dir: Path, method: str, path: str, query: Query, body: Any = None) -> Any:
    """Run the route that matches `path` (the part after /api). Raises ApiError for a bad request."""
    for name in ROUTES.names():
        r = ROUTES.get(name)
        params = r.match(method, path)
        if params is None:
            continue
        if "run" not in params:
            return r.handler(runs_dir, query)
        args = (body,) if method == "POST" else ()
        try:
            with open_named_run(runs_dir, params.pop("run")) as store:
                return r.handler(store, query, *args, **params)
        except StoreDamaged as exc:  # the run's stored state, not the request, is at fault: 409, with the repair
            raise ApiError(409, str(exc)) from None
    raise ApiError(404, f"no API endpoint {method} /api{path}")


def open_named_run(runs_dir: Path, name: str) -> RunStore:
    """The run called `name` directly under `runs_dir`; never a path elsewhere on the disk."""
    if "/" in name or "\\" in name or name in ("", ".", "..") or not (runs_dir / name / DB_NAME).is_file():
        raise ApiError(404, str(run_not_found(runs_dir, name)))
    return RunStore.open(runs_dir / name, read_only=True)  # the page never writes run.db (labels are a sidecar)


# ---- the runs list --------------------------------------------------------------------------------
@route("runs", "GET", "/runs")
def runs(runs_dir: Path, query: Query) -> dict[str, Any]:
    return {"runs_dir": str(runs_dir), "runs": [asdict(s) for s in list_runs(runs_dir)]}


# ---- one run ---------------------------------------------------------------------------------------
@route("summary", "GET", "/runs/{run}")
def summary(store: RunStore, query: Query) -> dict[str, Any]:
    with store.snapshot():
        out = store.summary()
        keys = sorted(out["metrics"]) + eval_keys(store)
    return {**out, "keys": keys, "panels": layout(keys), "orders": list(GROUP_ORDERS), "filters": list(GROUP_FILTERS)}


def eval_keys(store: RunStore) -> list[str]:
    seen: dict[str, None] = {}
    for e in store.evals():
        seen.update(dict.fromkeys(e.metrics))
    return [EVAL_PREFIX + k for k in seen]


@route("metrics", "GET", "/runs/{run}/metrics")
def metrics(store: RunStore, query: Query) -> dict[str, Any]:
    """Training series from step `since` on and every eval series whole, each downsampled to `points`.

    Poll with since = the last step seen (not + 1) and replace points from `since` on: a key logged late for
    that step then still arrives. Eval series are few points and come whole, because an eval is logged after
    its step's metrics. ``alarms``: how many alarms the run raised, so a live page knows to read them again."""
    since = query.int("since", 0)
    points = query.int("points", DEFAULT_POINTS, 3, MAX_POINTS)
    wanted = query.list("keys")
    with store.snapshot():
        if wanted is not None:
            _check_keys(store, wanted)
        metric_keys = None if wanted is None else [k for k in wanted if not k.startswith(EVAL_PREFIX)]
        series = store.metrics(metric_keys, since_step=since)
        evals = _eval_series(store, wanted)
        status = store.status
        alarms = sum(1 for e in store.events() if e["kind"] == "alarm")
    last = max((s[-1][0] for s in series.values() if s), default=None)
    out = {k: downsample(v, points) for k, v in series.items()}
    return {
        "since": since, "last_step": last, "status": status, "alarms": alarms, "series": out,
        "evals": {k: downsample(v, points) for k, v in evals.items()},
        "downsampled": sorted(k for k in out if len(out[k]) < len(series[k])),
    }


def _check_keys(store: RunStore, wanted: list[str]) -> None:
    """A key the run never logged is a 404 that names it and the run's keys closest to it."""
    known = store.metric_keys() + eval_keys(store)
    for key in wanted:
        if key not in known:
            close = close_names(key, known, prefixes=(EVAL_PREFIX,))
            hint = f"; close: {', '.join(close)}" if close else f"; this run has {len(known)} keys (GET /api/runs/NAME)"
            raise ApiError(404, f"unknown metric key {key!r}{hint}")


def _eval_series(store: RunStore, wanted: list[str] | None) -> dict[str, list]:
    out: dict[str, list] = {}
    for e in store.evals():
        for key, value in e.metrics.items():
            name = EVAL_PREFIX + key
            if wanted is None or name in wanted:
                out.setdefault(name, []).append((e.step, value))
    return out


# ---- groups and samples ----------------------------------------------------------------------------
@route("steps", "GET", "/runs/{run}/steps")
def steps(store: RunStore, query: Query) -> dict[str, Any]:
    return {"steps": store.group_steps()}


@route("groups", "GET", "/runs/{run}/groups")
def groups(store: RunStore, query: Query) -> dict[str, Any]:
    step = query.int("step")
    order, filter_ = query.str("order", "worst"), query.str("filter", "all")
    limit, offset = query.int("limit", 20, 1, MAX_LIMIT), query.int("offset", 0, 0)
    with store.snapshot():
        rows = store.groups(step=step, order=order, filter=filter_, limit=limit, offset=offset)
        total = store.count_groups(step=step, filter=filter_)
    return {"total": total, "offset": offset, "limit": limit, "groups": [group_json(g) for g in rows]}


@route("group", "GET", "/runs/{run}/groups/{id:int}")
def group(store: RunStore, query: Query, id: int) -> dict[str, Any]:
    row = store.group(id)
    if row is None:
        raise ApiError(404, f"run '{store.run_dir.name}' has no group {id} (a resumed run renumbers groups)")
    return group_json(row)


@route("prompt", "GET", "/runs/{run}/prompt/{id:int}")
def prompt_history(store: RunStore, query: Query, id: int) -> dict[str, Any]:
    """The prompt of group `id` at every step it was sampled, oldest first (a page of them with samples),
    and its mean reward at every step (``rewards``, for a plot)."""
    limit, offset = query.int("limit", 20, 1, MAX_LIMIT), query.int("offset", 0, 0)
    with store.snapshot():
        anchor = store.group(id, with_samples=False)
        if anchor is None:
            raise ApiError(404, f"run '{store.run_dir.name}' has no group {id}")
        rows = store.prompt_history(anchor.prompt, limit=limit, offset=offset)
        every = store.prompt_history(anchor.prompt, limit=None, with_samples=False)
    rewards = downsample([(g.step, g.reward_mean) for g in every], DEFAULT_POINTS)
    return {"prompt": anchor.prompt, "reference": anchor.reference, "total": len(every), "offset": offset,
            "limit": limit, "rewards": rewards, "groups": [group_json(g) for g in rows]}


def group_json(g: GroupRow) -> dict[str, Any]:
    out = asdict(g)
    out["prompt_key"] = prompt_key(g.prompt)
    return out


# ---- evals -----------------------------------------------------------------------------------------
@route("evals", "GET", "/runs/{run}/evals")
def evals(store: RunStore, query: Query) -> dict[str, Any]:
    return {"evals": [{**asdict(e), "score": e.score} for e in store.evals()]}


@route("eval_samples", "GET", "/runs/{run}/evals/{step:int}")
def eval_samples(store: RunStore, query: Query, step: int) -> dict[str, Any]:
    limit, offset = query.int("limit", 20, 1, MAX_LIMIT), query.int("offset", 0, 0)
    return {"step": step, "offset": offset, "samples": store.eval_samples(step, limit, offset)}


# ---- labels ----------------------------------------------------------------------------------------
@route("labels", "GET", "/runs/{run}/labels")
def labels(store: RunStore, query: Query) -> dict[str, Any]:
    found = label_store.read_labels(store.run_dir)
    return {"file": str(store.run_dir / label_store.LABELS_FILE), "labels": [asdict(l) for l in found.values()]}


@route("save_labels", "POST", "/runs/{run}/labels")
def save_labels(store: RunStore, query: Query, body: Any) -> dict[str, Any]:
    """Body: {"labels": [{"group_id": 12, "sample_index": 0, "score": 4}, ...]}; score null removes one."""
    items = body.get("labels") if isinstance(body, dict) else None
    if not isinstance(items, list) or not items:
        raise DataError("request body", None, "labels", 'expected {"labels": [{"group_id", "sample_index", "score"}]}')
    new = [_label_for(store, item, i) for i, item in enumerate(items)]
    try:
        label_store.append_labels(store.run_dir, new)
    except label_store.LabelsNotSaved as exc:  # the server cannot store them, whatever the request: 503
        raise ApiError(503, str(exc)) from None
    return {"saved": len(new), "file": str(store.run_dir / label_store.LABELS_FILE)}


def _label_for(store: RunStore, item: Any, i: int) -> label_store.Label:
    field = f"labels[{i}]"
    gid = item.get("group_id") if isinstance(item, dict) else None
    if isinstance(gid, bool) or not isinstance(gid, int):
        raise DataError("request body", None, f"{field}.group_id", "expected the id of a group of this run")
    g = store.group(gid, with_samples=False)
    if g is None:
        raise DataError("request body", None, f"{field}.group_id", f"run has no group {gid}")
    index = item.get("sample_index")
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < g.n_samples:
        raise DataError("request body", None, f"{field}.sample_index", f"expected 0..{g.n_samples - 1}, got {index!r}")
    obj = {"step": g.step, "group_index": g.group_index, "sample_index": index, "score": item.get("score"),
           "prompt_key": prompt_key(g.prompt)}
    return label_store.parse_label(obj, "request body", None)


@route("label_queue", "GET", "/runs/{run}/label_queue")
def label_queue(store: RunStore, query: Query) -> dict[str, Any]:
    """The next group (from position `after` on) with 2+ samples not all labeled, widest reward spread first:
    where the grader's ranking matters most to GRPO."""
    position = query.int("after", -1, -1) + 1
    done = label_store.read_labels(store.run_dir)
    while True:
        page = store.groups(order="variance", limit=50, offset=position)
        if not page:
            return {"group": None, "position": position}
        for g in page:
            if g.n_samples >= 2 and any((g.step, g.group_index, i) not in done for i in range(g.n_samples)):
                return {"group": group_json(store.group(g.id)), "position": position}
            position += 1


@route("labeled_rows", "GET", "/runs/{run}/labeled.jsonl")
def labeled_rows(store: RunStore, query: Query) -> Download:
    """Your labeled groups as a file for ``kitae grader validate --grader SPEC --data labeled.jsonl``."""
    rows = label_store.labeled_rows(store)
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    name = re.sub(r"[^A-Za-z0-9._-]", "_", store.run_dir.name)  # a header is latin-1, a run name need not be
    return Download(f"{name}-labeled.jsonl", text.encode("utf-8"), "application/x-ndjson")


@route("image", "GET", "/runs/{run}/images/{name}")
def image(store: RunStore, query: Query, name: str) -> Download:
    """A stored image of the run (kitae.store.images): only a content-addressed file name of its images
    folder is served; any other name, a path, or a link out of the folder is a 404."""
    try:
        file = image_file(store.run_dir, name)
    except KitaeError as exc:
        raise ApiError(404, str(exc)) from None
    return Download(name, file.read_bytes(), content_type(name), inline=True)


@route("agreement", "GET", "/runs/{run}/agreement")
def agreement(store: RunStore, query: Query) -> dict[str, Any]:
    return label_store.label_agreement(store, query.str("grader", label_store.TOTAL))
