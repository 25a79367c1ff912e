"""A grader gamed during a short run (tests/trainer/gamed.py): the answer_shape alarm fires where the number
lists start, names the pattern and links the groups; `kitae runs show` lists it; `--stop-on-alarm` stops the run
at a checkpoint and the run resumes; the numeric grader's `match: last` (when it has it) pays a list no more than
any other answer; a short run of examples/zero.yaml, the healthy recipe, raises no alarm."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kitae.errors import ConfigError
from kitae.store import RunStore
from kitae.trainer.alarms import PATTERNS
from kitae.trainer.config import load_train_config
from kitae.trainer.loop import Trainer
from tests.trainer import gamed

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
IS_LIST = PATTERNS["number_list"][1]


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> Path:
    return gamed.build(tmp_path_factory.mktemp("gamed"))


@pytest.fixture(scope="module")
def gamed_run(assets, tmp_path_factory) -> Path:
    runs = tmp_path_factory.mktemp("runs")
    Trainer(load_train_config(data=gamed.config(assets, runs))).train()
    return runs / "gamed"


def list_shares(run: Path) -> dict[int, float]:
    """Per step: the share of its samples that are number lists, read from the run store."""
    with RunStore.open(run, read_only=True) as store:
        out = {}
        for step in store.group_steps():
            texts = [x.text for g in store.groups(step=step, limit=None, with_samples=True) for x in g.samples]
            out[step] = sum(map(IS_LIST, texts)) / len(texts)
        return out


def shape_alarms(run: Path) -> list[dict]:
    with RunStore.open(run, read_only=True) as store:
        return [a for a in store.summary()["alarms"] if a["kind"] == "answer_shape"]


def test_the_alarm_fires_where_the_lists_start_names_them_and_links_their_groups(gamed_run):
    shares = list_shares(gamed_run)
    start = next(step for step, share in shares.items() if share >= 0.25)  # lists well past the first steps' few
    (alarm,) = shape_alarms(gamed_run)
    assert alarm["subject"] == "number_list" and "list of four or more numbers" in alarm["message"]
    assert start <= alarm["step"] <= start + 3, (alarm["step"], shares)
    assert alarm["evidence"]["baseline_share"] <= 0.1 and alarm["evidence"]["share"] >= 0.5
    assert any(IS_LIST(t) for t in alarm["evidence"]["examples"])
    with RunStore.open(gamed_run, read_only=True) as store:
        assert alarm["groups"]
        for link in alarm["groups"]:  # every linked group is of the alarm's step and shows a list
            g = store.group(link["id"])
            assert g.step == alarm["step"] == link["step"] and any(IS_LIST(x.text) for x in g.samples)
        reward = [v for _, v in store.metrics(["reward"])["reward"]]
    assert sum(reward[-3:]) / 3 > sum(reward[:3]) / 3 + 0.1  # the numeric reward did rise: the hack paid


def runs_show(run: Path, *args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "kitae.cli.main", "runs", "show", run.name, "--runs",
                          str(run.parent), *args], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_runs_show_lists_the_alarm(gamed_run):
    data = json.loads(runs_show(gamed_run, "--json"))
    (alarm,) = [a for a in data["alarms"] if a["kind"] == "answer_shape"]
    assert set(alarm) >= {"kind", "step", "message", "evidence", "groups"}
    text = runs_show(gamed_run)
    assert "alarms (" in text and f"step {alarm['step']}" in text and "answer_shape" in text
    assert "pattern: \"number_list\"" in text and "groups: " in text
    assert text.count("answer_shape  ") == 1  # in the alarms section, not again under events


def paid(run: Path) -> tuple[float, float]:
    """The mean reward of the run's number lists and of its other samples, over every step."""
    got: dict[bool, list[float]] = {True: [], False: []}
    with RunStore.open(run, read_only=True) as store:
        for step in store.group_steps():
            for g in store.groups(step=step, limit=None, with_samples=True):
                for x in g.samples:
                    if x.reward is not None:
                        got[IS_LIST(x.text)].append(x.reward)
    return tuple(sum(v) / len(v) for v in (got[True], got[False]))


def test_with_the_numeric_grader_matching_only_the_last_number_the_lists_no_longer_pay(assets, gamed_run, tmp_path):
    """The same seed, prompts and model: the guide's closest match pays a list about 1 where another answer gets
    about 1/7; `match: last` pays a list what it pays any answer. (Whether the lists then stay few is a random
    walk of an unpaid shape: on some CPUs' float kernels they spread anyway, so that is not asserted.)"""
    from kitae.graders.spec import build_grader

    try:
        build_grader({"type": "numeric", "match": "last"})
    except ConfigError as exc:
        pytest.skip(f"the numeric grader has no `match` option in this checkout ({exc})")
    cfg = gamed.config(assets, tmp_path, name="resisted", grader={"type": "numeric", "match": "last"})
    Trainer(load_train_config(data=cfg)).train()
    lists, others = paid(gamed_run)
    assert lists > others + 0.5, (lists, others)
    lists, others = paid(tmp_path / "resisted")
    assert lists < others + 0.1, (lists, others)


def train_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kitae.cli.main", "train", *args, "-q"], capture_output=True,
                          text=True, timeout=600)


def test_stop_on_alarm_stops_at_a_checkpoint_and_the_run_resumes(assets, tmp_path):
    path = tmp_path / "gamed.yaml"
    path.write_text(yaml.safe_dump(gamed.config(assets, tmp_path / "runs", **{"eval.every": 0})))
    run = tmp_path / "runs" / "gamed"
    stopped = train_cli(str(path), "--stop-on-alarm", "answer_shape")
    out = stopped.stdout + stopped.stderr
    assert stopped.returncode == 3, out
    (alarm,) = shape_alarms(run)
    last = out.strip().splitlines()
    assert f"stopped by alarm answer_shape:number_list at step {alarm['step']}" in last[-2]
    assert last[-1].endswith(f"resume with: kitae train --resume {run}")
    with RunStore.open(run, read_only=True) as store:
        s = store.summary()
    assert s["status"] == "stopped" and s["steps"] == alarm["step"] < 16
    assert s["final"]["stopped_by"]["alarm"] == "answer_shape"
    assert (run / "checkpoints" / f"step-{alarm['step']:06d}" / "state.pt").exists()

    resumed = train_cli("--resume", str(run))
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    with RunStore.open(run, read_only=True) as store:
        s = store.summary()
    assert s["status"] == "finished" and s["steps"] == 16
    assert [a["step"] for a in shape_alarms(run)] == [alarm["step"]]  # raised once, not again on resume


def test_a_short_run_of_the_healthy_recipe_raises_no_alarm(tmp_path):
    over = [f"output_dir={tmp_path}", "optim.steps=12", "eval.every=6", "eval.limit=40", "logging.save_every=0"]
    cfg = load_train_config(ROOT / "examples" / "zero.yaml", over)
    Trainer(cfg).train()
    with RunStore.open(tmp_path / "zero", read_only=True) as store:
        assert store.summary()["alarms"] == []


@pytest.mark.parametrize("spec, flags_spray", [("numeric", True), ({"type": "numeric", "match": "last"}, False)])
def test_attack_flags_the_gamed_grader_before_training(spec, flags_spray):
    """`kitae grader attack` on the gamed task's own rows: the guide's closest-match numeric grader pays a number
    spray (what the run learns), the grader scoring the final answer does not."""
    from kitae.graders import build_grader
    from kitae.graders.attacks import run_attacks
    from kitae.graders.rows import Row

    grader = build_grader(spec)
    try:
        report = run_attacks(grader, [Row(data=r, item=r, samples=[], is_group=True, number=n)
                                      for n, r in enumerate(gamed.rows(), 1)])
    finally:
        grader.close()
    spray = next(a for a in report.attacks if a.name == "number_spray")
    assert spray.flagged is flags_spray and report.rows == len(gamed.PROMPTS)
