"""A grader gamed during a short run (tests/trainer/gamed.py): the answer_shape alarm fires at the step where the
number lists take over, names the pattern and links the groups; `kitae runs show` lists it; `--stop-on-alarm`
stops the run at a checkpoint and the run resumes; the numeric grader's `match: last` (when it has it) pays a list
only for its final answer; a short run of examples/zero.yaml, the healthy recipe, raises no alarm."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kitae.errors import ConfigError
from kitae.graders.spec import build_grader
from kitae.store import RunStore
from kitae.trainer.alarms import PATTERNS
from kitae.trainer.config import load_train_config
from kitae.trainer.loop import Trainer
from tests.built_once import built_once
from tests.trainer import gamed

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
IS_LIST = PATTERNS["number_list"][1]


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> Path:
    return built_once(tmp_path_factory, "gamed-assets", gamed.build)


@pytest.fixture(scope="module")
def gamed_run(assets, tmp_path_factory) -> Path:
    def train(runs: Path) -> None:
        Trainer(load_train_config(data=gamed.config(assets, runs))).train()

    return built_once(tmp_path_factory, "gamed-runs", train) / "gamed"


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


def test_the_alarm_fires_where_the_lists_take_over_names_them_and_links_their_groups(gamed_run):
    shares = list_shares(gamed_run)
    limits = load_train_config(gamed_run / "config.yaml").alarms  # as the run had them
    shape = limits.of("answer_shape")
    # every step has the same number of samples, so the baseline's share is the mean of its steps' shares
    before = sum(shares[s] for s in range(1, limits.baseline_steps + 1)) / limits.baseline_steps
    assert before <= shape.shape_baseline
    # the first step after the baseline where lists are the alarm's share of the samples: lists took over there
    start = next(s for s, share in shares.items() if s > limits.baseline_steps and share >= shape.shape_share)
    (alarm,) = shape_alarms(gamed_run)
    assert alarm["subject"] == "number_list" and "list of four or more numbers" in alarm["message"]
    assert alarm["step"] == start, (alarm["step"], shares)
    assert alarm["evidence"]["baseline_share"] == pytest.approx(before, abs=1e-4)
    assert alarm["evidence"]["share"] == pytest.approx(shares[start], abs=1e-4)
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


def list_pay(run: Path) -> tuple[float, int]:
    """Over the run's number lists: the mean of (its reward - what the guide's numeric grader pays its last number
    alone), and how many lists there were. The last number is the list's final answer."""
    alone = build_grader("numeric")
    extra = []
    with RunStore.open(run, read_only=True) as store:
        for step in store.group_steps():
            for g in store.groups(step=step, limit=None, with_samples=True):
                for x in g.samples:
                    if IS_LIST(x.text) and x.reward is not None:
                        last = re.findall(r"\d+", x.text)[-1]
                        extra.append(x.reward - alone.grade_sample({"reference_answer": g.reference},
                                                                   {"output_text": last}).score)
    return sum(extra) / len(extra), len(extra)


def test_with_the_numeric_grader_matching_only_the_last_number_the_lists_no_longer_pay(assets, gamed_run, tmp_path):
    """The same seed, prompts and model: the guide's closest match pays a list for the right number anywhere in
    it, well above what its final answer alone earns; `match: last` pays a list what its final answer alone
    earns. (Whether the lists then stay few is a random walk of an unpaid shape: on some CPUs' float kernels
    they spread anyway, so that is not asserted.)"""
    try:
        build_grader({"type": "numeric", "match": "last"})
    except ConfigError as exc:
        pytest.skip(f"the numeric grader has no `match` option in this checkout ({exc})")
    cfg = gamed.config(assets, tmp_path, name="resisted", grader={"type": "numeric", "match": "last"})
    Trainer(load_train_config(data=cfg)).train()
    extra, lists = list_pay(gamed_run)
    assert lists >= 100 and extra > 0.25, (extra, lists)  # measured 0.35 to 0.81 on 9 kernel/seed runs
    extra, lists = list_pay(tmp_path / "resisted")
    assert lists >= 10 and abs(extra) < 0.05, (extra, lists)  # not 0 exactly: the grader reads numbers its own
    # way, not as the regex above does, on a rare mangled sample ("7hat8"); measured |extra| <= 0.005


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
