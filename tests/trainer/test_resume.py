"""`kitae train --resume` on a damaged or edited run: nothing logged is lost without a word, nothing is half-applied.

- no usable checkpoint: refused before the model loads, naming what is missing; ``--resume-from-scratch``
  restarts at step 0 and keeps the earlier history (copied aside, and said in the run's events);
- a broken newest checkpoint (state.pt unreadable, weights truncated, model/ gone): the newest complete one is
  used instead, and the run says so; stale ``step-N.tmp`` folders of a failed save are removed;
- an edited config.yaml or ``--set`` on resume: refused field by field (old → new) unless
  ``--allow-config-change``, which applies the change (lr into the optimizer) and records it; some fields never;
- adaptive KL in the loss: a stopped and resumed run follows the uninterrupted one exactly.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from kitae.errors import ConfigError, KitaeError
from kitae.store import RunStore
from kitae.trainer.checkpoint import save_checkpoint
from kitae.trainer.config import load_train_config
from kitae.trainer.loop import Trainer
from tests.plugins.tiny_run import write_config

pytestmark = pytest.mark.slow

FAST = {"data.eval": None, "eval.every": 0, "logging.keep_checkpoints": 5}


def _train(tiny_assets: Path, root: Path, **over) -> Path:
    cfg = load_train_config(write_config(tiny_assets, root, **{**FAST, **over}))
    Trainer(cfg).train()
    return cfg.run_dir


def _resume_cfg(run: Path, *overrides: str):
    """The config `kitae train --resume RUN --set ...` builds: the run's config.yaml, the overrides, the folder."""
    cfg = load_train_config(run / "config.yaml", list(overrides))
    cfg.output_dir, cfg.name = str(run.parent), run.name
    return cfg


def _resume(run: Path, *overrides: str, **kwargs) -> Trainer:
    return Trainer(_resume_cfg(run, *overrides), resume=True, **kwargs)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kitae.cli.main", "train", "-q", *args],
                          capture_output=True, text=True, timeout=300)


def _steps(run: Path) -> list[int]:
    con = sqlite3.connect(run / "run.db")
    try:
        return [r[0] for r in con.execute("SELECT DISTINCT step FROM metrics ORDER BY step")]
    finally:
        con.close()


def _events(run: Path) -> list[dict]:
    with RunStore.open(run, read_only=True) as store:
        return store.events()


def _weights(ckpt: Path) -> dict[str, torch.Tensor]:
    return load_file(ckpt / "model" / "model.safetensors")


def _point_model_at(run: Path, path: str) -> None:
    """Rewrite the run's model path in run.db and config.yaml alike (no config change): loading the model would
    now fail, so an error about anything else proves it came before the model loaded."""
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    cfg["model"]["path"] = path
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    con = sqlite3.connect(run / "run.db")
    stored = json.loads(con.execute("SELECT config FROM run").fetchone()[0])
    stored["model"]["path"] = path
    con.execute("UPDATE run SET config = ?", (json.dumps(stored),))
    con.commit()
    con.close()


@pytest.fixture(scope="module")
def four_steps(tiny_assets, tmp_path_factory) -> Path:
    """A finished 4-step run with checkpoints at steps 2 and 4 (tests copy it before changing anything)."""
    root = tmp_path_factory.mktemp("four")
    return _train(tiny_assets, root, **{"optim.steps": 4, "logging.save_every": 2})


@pytest.fixture
def run(four_steps, tmp_path, rewards_on_path) -> Path:
    copy = tmp_path / "runs" / four_steps.name
    shutil.copytree(four_steps, copy)
    return copy


# ---- no usable checkpoint ------------------------------------------------------------------------------
@pytest.mark.parametrize("damage, named", [
    ("checkpoints", "no checkpoints/ folder"),
    ("state.pt", "state.pt is missing"),
])
def test_resume_without_a_usable_checkpoint_refuses_and_keeps_the_history(run, damage, named, corrupt_model):
    if damage == "checkpoints":
        shutil.rmtree(run / "checkpoints")
    else:
        for ckpt in (run / "checkpoints").iterdir():
            (ckpt / "state.pt").unlink()
    _point_model_at(run, str(corrupt_model))
    done = _cli("--resume", str(run))
    assert done.returncode == 2, done.stdout + done.stderr
    assert named in done.stderr and str(run) in done.stderr
    assert "--resume-from-scratch" in done.stderr and "safetensors" not in done.stderr
    assert _steps(run) == [1, 2, 3, 4]  # nothing deleted
    assert RunStore.open(run, read_only=True).summary()["status"] == "finished"


def test_resume_from_scratch_restarts_at_step_0_and_keeps_the_earlier_history(run):
    for ckpt in (run / "checkpoints").iterdir():
        (ckpt / "state.pt").unlink()
    done = _cli("--resume", str(run), "--resume-from-scratch", "--set", "optim.steps=2")
    assert done.returncode == 0, done.stdout + done.stderr
    assert _steps(run) == [1, 2]
    restarted = [e for e in _events(run) if e["kind"] == "restarted"]
    assert len(restarted) == 1 and restarted[0]["step"] == 0
    previous = Path(restarted[0]["data"]["previous"])
    assert previous.parent == run / "restarts" and str(previous) in restarted[0]["message"]
    assert _steps(previous) == [1, 2, 3, 4]  # the earlier history, whole
    assert sorted(p.name for p in (previous / "checkpoints").iterdir()) == ["step-000002", "step-000004"]
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-000002"]  # the new run's own


def test_resume_from_scratch_needs_resume():
    done = _cli("--resume-from-scratch")
    assert done.returncode == 2 and "--resume-from-scratch goes with --resume runs/NAME" in done.stderr


# ---- broken checkpoints --------------------------------------------------------------------------------
def _garbage_state(ckpt: Path) -> None:
    (ckpt / "state.pt").write_bytes(b"not a torch file" * 10)
    (ckpt / "manifest.json").unlink()  # as a checkpoint from before checksums: found out by loading state.pt


def _truncated_weights(ckpt: Path) -> None:
    weights = ckpt / "model" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])


def _no_model(ckpt: Path) -> None:
    shutil.rmtree(ckpt / "model")


def _flip_a_bit(file: Path, at: int) -> None:
    data = bytearray(file.read_bytes())
    data[at] ^= 0x01
    file.write_bytes(bytes(data))


def _flipped_weight(ckpt: Path) -> None:  # the file is as long as its header says: only a checksum tells
    _flip_a_bit(ckpt / "model" / "model.safetensors", -5)


def _flipped_state(ckpt: Path) -> None:  # in the middle, in an optimizer tensor's bytes: state.pt still loads
    state = ckpt / "state.pt"
    _flip_a_bit(state, state.stat().st_size // 2)


@pytest.mark.parametrize("damage, problem", [
    (_garbage_state, "state.pt cannot be loaded"),
    (_truncated_weights, "model/model.safetensors is cut short"),
    (_no_model, "model/ is missing"),
    (_flipped_weight, "model/model.safetensors does not match the sha256 checksum"),
    (_flipped_state, "state.pt does not match the sha256 checksum"),
])
def test_a_broken_newest_checkpoint_falls_back_to_the_newest_complete_one(run, damage, problem, caplog):
    damage(run / "checkpoints" / "step-000004")
    with caplog.at_level(logging.WARNING, logger="kitae"):
        trainer = _resume(run)
    trainer.store.close()
    assert trainer.start_step == 2
    said = caplog.text
    assert "checkpoints/step-000004" in said and problem in said and "step-000002" in said
    skipped, resumed = _events(run)[-2:]
    assert skipped["kind"] == "checkpoint_skipped" and problem in skipped["message"]
    assert skipped["data"]["checkpoint"].endswith("step-000004")
    assert resumed["kind"] == "resumed" and resumed["step"] == 2 and resumed["data"]["removed_steps"] == [3, 4]


def test_a_checkpoint_saved_without_checksums_resumes_unchecked(run):
    """Checkpoints from before checksums were recorded have no manifest.json: not checked, still resumed."""
    for ckpt in (run / "checkpoints").iterdir():
        (ckpt / "manifest.json").unlink()
    _flipped_weight(run / "checkpoints" / "step-000004")  # nothing to tell it by
    trainer = _resume(run)
    trainer.store.close()
    assert trainer.start_step == 4
    assert "checkpoint_skipped" not in [e["kind"] for e in _events(run)]


def test_resume_from_an_older_checkpoint_ends_where_the_uninterrupted_run_did(run, four_steps):
    _garbage_state(run / "checkpoints" / "step-000004")
    trainer = _resume(run)
    assert trainer.train()["status"] == "finished"
    assert _steps(run) == [1, 2, 3, 4]
    a, b = _weights(four_steps / "checkpoints" / "step-000004"), _weights(run / "checkpoints" / "step-000004")
    assert all(torch.allclose(a[k], b[k], atol=1e-5) for k in a)


def test_stale_tmp_folders_of_a_failed_save_are_removed(run, tiny_assets):
    stale = run / "checkpoints" / "step-000003.tmp"
    (stale / "model").mkdir(parents=True)
    (stale / "model" / "config.json").write_text("{")
    trainer = _resume(run)
    trainer.store.close()
    assert not stale.exists() and trainer.start_step == 4

    (stale / "model").mkdir(parents=True)  # and a save removes any it finds
    save_checkpoint(run, 5, trainer.policy, trainer.tokenizer, {"optimizer": {}}, keep=5)
    assert not stale.exists() and (run / "checkpoints" / "step-000005" / "state.pt").exists()


@pytest.mark.parametrize("refusal", ["config change", "no usable checkpoint"])
def test_a_refused_resume_leaves_no_temporary_checkpoint_folder(run, refusal):
    """A save cut short (SIGKILL, a full disk) leaves step-N.tmp; a resume that is refused removes it all the
    same: the run lock says no trainer is writing it."""
    stale = run / "checkpoints" / "step-000005.tmp"
    (stale / "model").mkdir(parents=True)
    overrides = ["optim.lr=0.5"] if refusal == "config change" else []
    if refusal == "no usable checkpoint":
        for ckpt in (run / "checkpoints").glob("step-??????"):
            (ckpt / "state.pt").unlink()
    with pytest.raises(KitaeError, match="optim.lr" if overrides else "no usable checkpoint"):
        _resume(run, *overrides)
    assert not list((run / "checkpoints").glob("*.tmp"))


# ---- config changes on resume --------------------------------------------------------------------------
def _edit(run: Path, **changes) -> None:
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    for key, value in changes.items():
        node = cfg
        *parents, last = key.split(".")
        for p in parents:
            node = node[p]
        node[last] = value
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))


def test_an_edited_config_is_refused_field_by_field_before_the_model_loads(run, corrupt_model):
    _edit(run, **{"optim.lr": 5e-4})
    _point_model_at(run, str(corrupt_model))
    done = _cli("--resume", str(run), "--set", "sampling.group_size=3", "--set", "optim.steps=6")
    assert done.returncode == 2, done.stdout + done.stderr
    err = " ".join(done.stderr.split())
    assert "optim.lr: 0.001 → 0.0005" in err and "sampling.group_size: 4 → 3" in err
    assert "optim.steps" not in err  # running longer needs no permission
    assert "--allow-config-change" in err and "safetensors" not in err
    assert _steps(run) == [1, 2, 3, 4]


def test_a_config_file_given_with_resume_is_compared_not_ignored(run, corrupt_model, tmp_path):
    """`kitae train CONFIG --resume RUN`: CONFIG is what the run would go on with, so its differences from the
    run's saved config are refused like an edited config.yaml (it used to be silently ignored)."""
    _point_model_at(run, str(corrupt_model))
    other = yaml.safe_load((run / "config.yaml").read_text())
    other["optim"]["lr"] = 5e-4
    (tmp_path / "other.yaml").write_text(yaml.safe_dump(other))
    done = _cli(str(tmp_path / "other.yaml"), "--resume", str(run))
    assert done.returncode == 2, done.stdout + done.stderr
    err = " ".join(done.stderr.split())
    assert "optim.lr: 0.001 → 0.0005" in err and "--allow-config-change" in err
    assert _steps(run) == [1, 2, 3, 4]


def test_allowed_config_changes_are_applied_and_recorded(run):
    _edit(run, **{"optim.lr": 5e-4})
    trainer = _resume(run, "sampling.group_size=3", "optim.steps=5", allow_config_change=True)
    assert [g["lr"] for g in trainer.optimizer.param_groups] == [5e-4]  # not the restored 1e-3
    assert trainer.scheduler.base_lrs == [5e-4]
    trainer.train()
    with RunStore.open(run, read_only=True) as store:
        metrics, config, events = store.metrics(), store.config, store.events()
    assert dict(metrics["lr"])[5] == pytest.approx(5e-4)
    assert (config["optim"]["lr"], config["sampling"]["group_size"], config["optim"]["steps"]) == (5e-4, 3, 5)
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert (saved["optim"]["lr"], saved["sampling"]["group_size"]) == (5e-4, 3)
    change = [e for e in events if e["kind"] == "config_changed"][-1]
    assert change["step"] == 4
    assert change["data"]["changes"] == [  # in config order
        {"field": "sampling.group_size", "old": 4, "new": 3},
        {"field": "optim.steps", "old": 4, "new": 5},
        {"field": "optim.lr", "old": 1e-3, "new": 5e-4},
    ]
    group = RunStore.open(run, read_only=True).groups(step=5, limit=1, with_samples=True)[0]
    assert len(group.samples) == 3


@pytest.mark.parametrize("override, field", [
    ("model.lora={r: 4}", "model.lora"),
    ("seed=7", "seed"),
    ("model.dtype=bfloat16", "model.dtype"),
    ("data.sampler={name: prioritized, correct: short}", "data.sampler.name"),
])
def test_fields_that_can_never_change_on_resume_are_refused_even_when_allowed(run, override, field):
    with pytest.raises(ConfigError, match=rf"{field}: .* → .*cannot change on resume"):
        _resume(run, override, allow_config_change=True)


def test_a_renamed_run_folder_is_refused_by_name(run):
    renamed = run.parent / "renamed"
    run.rename(renamed)
    with pytest.raises(KitaeError, match=r"name: 't' → 'renamed'"):
        _resume(renamed, allow_config_change=True)


# ---- adaptive KL in the loss ---------------------------------------------------------------------------
ADAPTIVE_KL = {**FAST, "optim.lr": 1e-2, "logging.save_every": 3,
               "algorithm.kl": {"coef": 0.5, "where": "loss", "adaptive": {"target": 1e-6, "horizon": 2}}}


def test_adaptive_kl_in_the_loss_resumes_exactly(tiny_assets, tmp_path, rewards_on_path):
    """The first resumed step's loss uses the restored coefficient, not the configured initial one."""
    whole = _train(tiny_assets, tmp_path / "whole", **{**ADAPTIVE_KL, "optim.steps": 5})
    cut = _train(tiny_assets, tmp_path / "cut", **{**ADAPTIVE_KL, "optim.steps": 3})
    _resume(cut, "optim.steps=5").train()
    a, b = RunStore.open(whole, read_only=True).metrics(), RunStore.open(cut, read_only=True).metrics()
    coefs = [v for _, v in a["kl_coef"]]
    assert abs(coefs[3] / coefs[0] - 1) > 0.05  # it moved away from the configured coef (else this shows nothing)
    assert [s for s, _ in b["kl_coef"]] == [s for s, _ in a["kl_coef"]]  # (step, value) rows: approx takes no tuples
    assert [v for _, v in b["kl_coef"]] == pytest.approx(coefs, rel=1e-9)
    assert [v for _, v in b["loss"]] == pytest.approx([v for _, v in a["loss"]], rel=1e-5, abs=1e-8)
    wa, wb = _weights(whole / "checkpoints" / "step-000005"), _weights(cut / "checkpoints" / "step-000005")
    assert all(torch.allclose(wa[k], wb[k], atol=1e-6) for k in wa)


# ---- a signal during the final evaluation ----------------------------------------------------------------
def test_a_signal_during_the_final_evaluation_leaves_the_run_finished_and_resume_runs_it(tiny_assets, tmp_path,
                                                                                         rewards_on_path):
    """Every step trained and saved: SIGTERM in the final evaluation (of two batches of prompts) ends that
    evaluation early, the run is "finished" and says the evaluation is missing; resuming runs it."""
    rows = [json.loads(line) for line in (tiny_assets / "train.jsonl").read_text().splitlines()]
    eval_file = tmp_path / "eval.jsonl"
    eval_file.write_text("".join(json.dumps(r) + "\n" for r in (rows * 3)[:40]))  # 40 prompts: 2 batches
    cfg = load_train_config(write_config(tiny_assets, tmp_path, **{
        "optim.steps": 1, "logging.save_every": 0, "data.eval": str(eval_file), "eval.every": 0, "eval.k": 1,
        "eval.limit": 40}))
    trainer = Trainer(cfg)

    def signal_in_the_final_evaluation(step: int, prompts: int):
        if step == 1:
            os.kill(os.getpid(), signal.SIGTERM)  # handled by the trainer, as from systemd or Slurm
        return None

    trainer.on_eval_start = signal_in_the_final_evaluation
    assert trainer.train()["status"] == "finished"
    run = cfg.run_dir
    assert [e["step"] for e in _events(run) if e["kind"] == "eval_interrupted"] == [1]
    with RunStore.open(run, read_only=True) as store:
        assert [e.step for e in store.evals()] == [0]  # the interrupted evaluation is not stored half done
    assert (run / "checkpoints" / "step-000001" / "state.pt").is_file()
    resumed = _resume(run)
    assert resumed.train()["status"] == "finished"
    with RunStore.open(run, read_only=True) as store:
        assert sorted(e.step for e in store.evals()) == [0, 1]
        assert store.last_step() == 1  # nothing trained again
