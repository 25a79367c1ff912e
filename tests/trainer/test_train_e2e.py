"""End to end on a tiny real model: the run store, checkpoints, resume after SIGKILL, Ctrl-C, 2 processes."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from kitae.store import RunStore
from kitae.trainer.config import load_train_config
from kitae.trainer.loop import Trainer
from tests.built_once import built_once
from tests.plugins.tiny_run import write_config
from tests.signals import sigint_as_in_a_terminal

pytestmark = pytest.mark.slow


@pytest.fixture
def spawn():
    """Start `kitae train` subprocesses; any still running when the test ends is killed."""
    procs: list[subprocess.Popen] = []

    def start(cfg_path: Path, *args: str) -> subprocess.Popen:
        proc = subprocess.Popen(
            [sys.executable, "-m", "kitae.cli.main", "train", str(cfg_path), "-q", *args],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, preexec_fn=sigint_as_in_a_terminal,
        )
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _steps(db: Path, table: str = "metrics") -> list[int]:
    con = sqlite3.connect(db)
    try:
        col = "DISTINCT step" if table != "evals" else "step"
        return [r[0] for r in con.execute(f"SELECT {col} FROM {table} ORDER BY step")]
    except sqlite3.OperationalError:  # the trainer is still creating the database
        return []
    finally:
        con.close()


def test_short_run_stores_every_group_component_and_eval(tiny_assets, tmp_path, rewards_on_path):
    cfg = load_train_config(write_config(tiny_assets, tmp_path, **{
        "rewards": [{"name": "short", "function": "tests.reward_functions:short"},
                    {"name": "flaky", "function": "tests.reward_functions:flaky", "weight": 0.5}],
        "logging.report_to": ["tensorboard"],
    }))
    summary = Trainer(cfg).train()
    assert summary["status"] == "finished" and summary["steps"] == 4
    store = RunStore.open(tmp_path / "t")
    s = store.summary()
    assert s["first_eval"]["step"] == 0 and s["latest_eval"]["step"] == 4
    metrics = store.metrics()
    for key in ("reward", "reward/short", "reward/flaky", "loss", "entropy", "clip_frac", "len_mean",
                "trunc_rate", "secs_per_step", "grader/flaky/abstain_rate", "grader/flaky/error_rate"):
        assert [step for step, _ in metrics[key]] == [1, 2, 3, 4], key
    con = sqlite3.connect(tmp_path / "t" / "run.db")
    assert con.execute("SELECT count(*) FROM groups").fetchone()[0] == 4 * 2
    assert con.execute("SELECT count(*) FROM samples").fetchone()[0] == 4 * 2 * 4
    # the flaky component abstains on half the samples and errors on some groups; the run goes on
    abstain = dict(metrics["grader/flaky/abstain_rate"])
    assert all(0.5 <= v <= 1.0 for v in abstain.values())
    assert (tmp_path / "t" / "config.yaml").exists()
    assert list((tmp_path / "t" / "tensorboard").rglob("events.out.tfevents.*"))  # report_to: tensorboard
    ckpt = tmp_path / "t" / "checkpoints" / "step-000004"
    assert (ckpt / "model" / "model.safetensors").exists() and (ckpt / "model" / "tokenizer.json").exists()


def test_component_scores_and_advantages_reach_the_store(tiny_assets, tmp_path, rewards_on_path):
    cfg = load_train_config(write_config(tiny_assets, tmp_path, **{"optim.steps": 1, "data.eval": None}))
    Trainer(cfg).train()
    store = RunStore.open(tmp_path / "t")
    group = store.groups(step=1, limit=10)[0]
    samples = store.samples(group.id)
    rewards = [s.reward for s in samples]
    advs = [s.advantage for s in samples]
    assert all(s.scores["short"] == pytest.approx(s.reward) for s in samples)
    mean = sum(rewards) / len(rewards)
    # GRPO advantages are z-scores within the group: same sign as (r - mean), mean zero
    assert sum(advs) == pytest.approx(0.0, abs=1e-4)
    assert all((a > 0) == (r > mean) for a, r in zip(advs, rewards) if abs(r - mean) > 1e-6)


def _final_weights(run: Path) -> dict[str, torch.Tensor]:
    ckpts = sorted((run / "checkpoints").iterdir())
    return load_file(ckpts[-1] / "model" / "model.safetensors")


@pytest.mark.slow
def test_resume_after_sigkill_loses_and_duplicates_no_step(tiny_assets, tmp_path, rewards_on_path, spawn):
    over = {"optim.steps": 6, "logging.save_every": 2, "logging.keep_checkpoints": 5, "eval.every": 0}
    # the uninterrupted reference run in this process (its weights are all it gives); the killed and the
    # resumed run are real `kitae train` processes
    clean = Trainer(load_train_config(write_config(tiny_assets, tmp_path / "clean", **over))).train()
    assert clean["status"] == "finished" and clean["steps"] == 6

    cfg = write_config(tiny_assets, tmp_path / "killed", **over)
    proc = spawn(cfg)
    db = tmp_path / "killed" / "t" / "run.db"
    deadline = time.time() + 240
    while time.time() < deadline:  # wait until step 3 is logged: past the step-2 checkpoint, mid-run
        if db.exists() and max(_steps(db) or [0]) >= 3:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert RunStore.open(db.parent).summary()["status"] == "crashed"

    # resumed in this process, with the config `kitae train --resume` builds (`kitae train --resume` as a
    # process: tests/trainer/test_durability.py, test_resume.py and the two-process resume below)
    from tests.trainer.test_resume import _resume

    resumed = _resume(db.parent).train()
    assert resumed["status"] == "finished", resumed
    assert _steps(db) == [1, 2, 3, 4, 5, 6]
    assert _steps(db, "groups") == [1, 2, 3, 4, 5, 6]
    con = sqlite3.connect(db)
    assert con.execute("SELECT count(*) FROM groups").fetchone()[0] == 6 * 2  # no group twice
    assert RunStore.open(db.parent).summary()["status"] == "finished"
    # same seed, same prompts, same sampling: the resumed run ends where the uninterrupted one did
    a, b = _final_weights(tmp_path / "clean" / "t"), _final_weights(db.parent)
    assert all(torch.allclose(a[k], b[k], atol=1e-5) for k in a)


@pytest.mark.slow
def test_ctrl_c_saves_a_checkpoint_and_exits_cleanly(tiny_assets, tmp_path, rewards_on_path, spawn):
    cfg = write_config(tiny_assets, tmp_path, **{"optim.steps": 100_000, "logging.save_every": 1000, "eval.every": 0,
                                                  "data.eval": None})
    proc = spawn(cfg)
    db = tmp_path / "t" / "run.db"
    deadline = time.time() + 240
    while time.time() < deadline and not (db.exists() and max(_steps(db) or [0]) >= 2):
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, out  # 128 + SIGINT, as a shell reports a run stopped by Ctrl-C
    assert "resume with: kitae train --resume" in out
    store = RunStore.open(tmp_path / "t")
    s = store.summary()
    assert s["status"] == "stopped"
    last = max(_steps(db))
    assert (tmp_path / "t" / "checkpoints" / f"step-{last:06d}" / "state.pt").exists()


def launch_two_processes(cfg, *args: str) -> None:
    """``kitae train`` in two real processes (torch.distributed, gloo)."""
    accelerate_launch("kitae.cli.main", "train", str(cfg), "-q", *args)


def accelerate_launch(module: str, *args: str, env: dict | None = None) -> None:
    """``python -m module args`` in two real processes (torch.distributed, gloo). ``--multi_gpu`` is accelerate's
    switch for several processes; without it, on a machine without GPUs, accelerate starts one process."""
    env = {**os.environ, **(env or {}), "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
         "--mixed_precision", "no", "--dynamo_backend", "no", "-m", module, *args],
        capture_output=True, text=True, timeout=300, env=env,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]


PROBE = {"optim.micro_batch_size": 2, "optim.max_grad_norm": 1e9, "data.eval": None}  # no clipping hides a scale
ZERO_ROWS = "1,4,5,7"


@pytest.fixture(scope="module")
def two_process_grads(tiny_assets, tmp_path_factory) -> dict[str, dict]:
    """One two-process launch of tests.trainer.grad_probe (skip_zero_advantage on, its default) on two batches:
    "all" (every advantage set) and "zero" (rows 1, 4, 5 and 7 at advantage 0)."""
    def launch(root: Path) -> None:
        cfg = write_config(tiny_assets, root, **PROBE)
        accelerate_launch("tests.trainer.grad_probe", str(cfg), str(root / "all.pt"), f"{root / 'zero.pt'}:{ZERO_ROWS}",
                          env={"PYTHONPATH": str(Path(__file__).resolve().parents[2])})

    root = built_once(tmp_path_factory, "two-process-grads", launch)
    return {name: torch.load(root / f"{name}.pt") for name in ("all", "zero")}


def one_process_grads(cfg: Path, tmp_path: Path, zero_rows: str = "") -> dict:
    """The same probe in this process, on one torch thread as each of the two processes has."""
    from tests.trainer import grad_probe

    torch.set_num_threads(1)  # restored after the test (tests/conftest.py)
    grad_probe.main(str(cfg), f"{tmp_path / 'one.pt'}:{zero_rows}")
    return torch.load(tmp_path / "one.pt")


@pytest.mark.slow
def test_two_processes_with_uneven_token_counts_step_with_the_full_batch_gradient(tiny_assets, tmp_path,
                                                                                 rewards_on_path, two_process_grads):
    """The trainer's own update.optimize on 8 rows: in one process, and split over two processes that hold 23 and 6
    counted tokens (and one masked row). Every loss and aggregation gives the one-process gradient, because the
    loss is normalized by the whole batch's counts (token_mean: tokens; Dr. GRPO: every row) over all
    processes; each process normalizing by its own counts would weight a token by where it landed."""
    from tests.trainer.grad_probe import LOSSES

    single = one_process_grads(write_config(tiny_assets, tmp_path / "one", **PROBE), tmp_path)
    split = two_process_grads["all"]
    assert sorted(split) == sorted(LOSSES)
    for name in LOSSES:
        for g1, g2 in zip(single[name]["grad"], split[name]["grad"], strict=True):
            torch.testing.assert_close(g2, g1, atol=1e-6, rtol=1e-5, msg=lambda m, name=name: f"{name}: {m}")
        assert split[name]["loss"] == pytest.approx(single[name]["loss"], abs=1e-6)
        assert max(float(g.abs().max()) for g in single[name]["grad"]) > 1e-3  # a gradient worth comparing


@pytest.mark.slow
def test_two_processes_skipping_zero_advantage_rows_step_with_the_full_batch_gradient(tiny_assets, tmp_path,
                                                                                     rewards_on_path,
                                                                                     two_process_grads):
    """Rows 1, 4, 5 and 7 get advantage 0: one process without skipping (every row in the forward) against two
    processes that skip them. Process 1 then has nothing left to learn from (rows 4, 5, 7 at 0, row 6 masked)
    and still runs one row, so DDP's all-reduce does not wait for it; the divisors count the skipped rows
    (token_mean: their tokens; Dr. GRPO: every row), so every loss steps with the full batch's gradient."""
    from tests.trainer.grad_probe import LOSSES

    cfg_one = write_config(tiny_assets, tmp_path / "one", **PROBE, **{"optim.skip_zero_advantage": False})
    full, skipped = one_process_grads(cfg_one, tmp_path, ZERO_ROWS), two_process_grads["zero"]
    for name in LOSSES:
        for g1, g2 in zip(full[name]["grad"], skipped[name]["grad"], strict=True):
            torch.testing.assert_close(g2, g1, atol=1e-6, rtol=1e-5, msg=lambda m, name=name: f"{name}: {m}")
        assert skipped[name]["loss"] == pytest.approx(full[name]["loss"], abs=1e-6)
        assert max(float(g.abs().max()) for g in full[name]["grad"]) > 1e-3
        assert full[name]["skipped_rows"] == 0
    # per process (a mean over the two): process 0 skips row 1, process 1 three of its four rows (it runs one)
    assert skipped["grpo"]["skipped_rows"] == (1 + 3) / 2
    assert skipped["kimi"]["skipped_rows"] == (0 + 1) / 2  # kimi keeps zero-advantage rows; the masked one goes


@pytest.mark.slow
def test_two_process_accelerate_run_and_its_resume(tiny_assets, tmp_path, rewards_on_path):
    """A two-process run of 2 steps, stopped after step 2 (its checkpoint) and resumed in two processes: steps
    3-4 follow, none twice."""
    cfg = write_config(tiny_assets, tmp_path, **{"optim.steps": 2, "eval.every": 0, "optim.prompts_per_step": 4,
                                                 "logging.save_every": 2})
    launch_two_processes(cfg)
    con = sqlite3.connect(tmp_path / "t" / "run.db")
    # 4 prompts per step, 2 per process, gathered into one store
    assert con.execute("SELECT step, count(*) FROM groups GROUP BY step").fetchall() == [(1, 4), (2, 4)]
    # the "groups" metric is a mean over processes: 2 per process (one process alone would log 4)
    assert con.execute("SELECT value FROM metrics WHERE key = 'groups' ORDER BY step").fetchall() == [(2.0,), (2.0,)]
    con.close()
    launch_two_processes(cfg, "--resume", str(tmp_path / "t"), "--set", "optim.steps=4")
    con = sqlite3.connect(tmp_path / "t" / "run.db")
    assert con.execute("SELECT step, count(*) FROM groups GROUP BY step").fetchall() == [(s, 4) for s in (1, 2, 3, 4)]
    assert con.execute("SELECT value FROM metrics WHERE key = 'groups' ORDER BY step").fetchall() == [(2.0,)] * 4
    assert (tmp_path / "t" / "checkpoints" / "step-000004").is_dir()


@pytest.mark.slow
def test_two_process_run_with_dynamic_sampling(tiny_assets, tmp_path, rewards_on_path):
    """Zero-variance groups are dropped per process, so processes keep different numbers of groups per round
    (here: process 1 never has variance). They must still sample the same rounds (the sampler update is a
    collective call: else one process waits forever) and train on equally many groups."""
    cfg = write_config(tiny_assets, tmp_path, **{
        "optim.steps": 3, "eval.every": 0, "optim.prompts_per_step": 4, "optim.micro_batch_size": 4,
        "logging.save_every": 3, "data.sampler": {"name": "uniform", "correct": "picky", "pass_threshold": -0.5},
        "rewards": [{"name": "picky", "function": "tests.reward_functions:picky"}],
        "algorithm.dynamic_sampling": {"enabled": True, "max_rounds": 3},
    })
    launch_two_processes(cfg)
    con = sqlite3.connect(tmp_path / "t" / "run.db")
    # process 0 found its 2 groups in round 1, process 1 none in 3 rounds (it keeps its last round's 2)
    assert con.execute("SELECT step, count(*) FROM groups GROUP BY step").fetchall() == [(1, 4), (2, 4), (3, 4)]
    rounds = [v for (v,) in con.execute("SELECT value FROM metrics WHERE key = 'sampling_rounds' ORDER BY step")]
    assert rounds == [3.0, 3.0, 3.0]


def test_judge_component_scores_reasons_and_tokens_reach_the_store(tiny_assets, tmp_path, rewards_on_path):
    """A group judge on a real loopback server as a reward component: per-criterion sub-scores and reasons are
    stored per sample and its token use is logged per step; the server failing once makes it abstain, not crash."""
    from kitae.judge.testing import Reply, ScriptedServer, judge_brain

    with ScriptedServer([Reply(status=500)] * 3, default=judge_brain(lambda text: 1 + len(text) % 5)) as server:
        judge = {"type": "judge", "model": server.model, "base_url": server.base_url, "retries": 0}
        cfg = load_train_config(write_config(tiny_assets, tmp_path, **{
            "optim.steps": 2, "data.eval": None,
            "rewards": [{"name": "short", "function": "tests.reward_functions:short"}, {"name": "judge", "grader": judge}],
        }))
        Trainer(cfg).train()
    store = RunStore.open(tmp_path / "t")
    metrics = store.metrics()
    assert sum(v for _, v in metrics["grader/judge/judge_tokens"]) > 0
    assert max(v for _, v in metrics["grader/judge/abstain_rate"]) > 0  # the 500s: abstained, counted
    samples = [s for g in store.groups(step=2, limit=10) for s in store.samples(g.id)]
    sample = next(s for s in samples if s.scores["judge"] is not None)
    assert set(sample.sub_scores["judge"]) >= {"correctness", "helpfulness", "tone", "format"}
    assert sample.reasons["judge"]


def test_lora_run_with_kl_to_the_adapter_free_base(tiny_assets, tmp_path, rewards_on_path):
    """LoRA (peft): only adapter weights train; the reference for KL is the base under the adapter."""
    cfg = load_train_config(write_config(tiny_assets, tmp_path, **{
        "optim.steps": 2, "data.eval": None, "model.lora": {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]},
        "algorithm.kl": {"coef": 0.1}, "logging.save_every": 2,
    }))
    trainer = Trainer(cfg)
    trainable = [n for n, p in trainer.policy.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    trainer.train()
    metrics = RunStore.open(tmp_path / "t").metrics()
    assert [s for s, _ in metrics["kl"]] == [1, 2]
    assert (tmp_path / "t" / "checkpoints" / "step-000002" / "model" / "adapter_config.json").exists()


@pytest.mark.slow
def test_reward_model_server_killed_mid_run_abstains_and_training_goes_on(tiny_assets, tmp_path, rewards_on_path):
    """`kitae serve rm` as a real process; killed after step 1: its component abstains, the run finishes."""
    from kitae.models import BUNDLED_RM

    if not (BUNDLED_RM / "config.json").exists():
        pytest.skip("the bundled reward model is not built")
    server = subprocess.Popen(
        [sys.executable, "-m", "kitae.cli.main", "serve", "rm", "--model", "bundled", "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        url = server.stdout.readline().strip().rsplit(" ", 1)[-1]
        assert url.startswith("http://127.0.0.1:"), url
        rm = {"type": "reward_model", "url": url, "retries": 0, "timeout": 5, "gate": False}  # score every sample
        cfg = load_train_config(write_config(tiny_assets, tmp_path, **{
            "optim.steps": 3, "data.eval": None,
            "rewards": [{"name": "short", "function": "tests.reward_functions:short"}, {"name": "quality", "grader": rm}],
        }))
        trainer = Trainer(cfg)
        trainer.on_step = lambda step, m: server.kill() if step == 1 else None
        assert trainer.train()["status"] == "finished"
    finally:
        server.kill()
        server.wait()
    abstain = dict(RunStore.open(tmp_path / "t").metrics()["grader/quality/abstain_rate"])
    assert abstain[1] < 1.0 and abstain[3] == 1.0  # scored while the server lived, abstained after
