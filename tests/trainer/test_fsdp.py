"""The trainer under accelerate's FSDP2 (torch's fully_shard) in two processes on CPU over gloo, launched with
examples/accelerate/fsdp2.yaml: the weights really sharded, the same run as data parallel (examples/accelerate/
ddp.yaml), a checkpoint in kitae's layout that from_pretrained loads, and a resumed run equal to an uninterrupted
one; SIGTERM to one rank stops both at a checkpoint, and ranks end with a launcher killed by SIGKILL. Skipped
where torch cannot run FSDP2 over gloo."""

from __future__ import annotations

import contextlib
import json
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

from kitae.errors import KitaeError
from kitae.store import RunStore
from kitae.trainer.checkpoint import MANIFEST, checkpoint_problem
from tests.plugins.tiny_run import write_config
from tests.trainer.test_durability import _children, _gone_within

ROOT = Path(__file__).resolve().parents[2]


def _fsdp2_on_gloo_problem() -> str | None:
    if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
        return f"torch {torch.__version__} has no gloo backend for torch.distributed"
    try:
        from torch.distributed.fsdp import FSDPModule, fully_shard  # noqa: F401
    except ImportError as exc:
        return f"torch {torch.__version__} has no FSDP2 (torch.distributed.fsdp.fully_shard): {exc}"
    return None


pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(_fsdp2_on_gloo_problem() is not None, reason=str(_fsdp2_on_gloo_problem()))]

KEYS = ("loss", "reward", "grad_norm", "skipped_rows")
LORA = {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}


def launch_command(config_file: str, jobs: list[tuple[Path, Path, str]], log: Path) -> tuple[list[str], dict[str, str]]:
    """(the command, its environment) of tests.trainer.fsdp_probe in two processes, launched with
    examples/accelerate/CONFIG_FILE: ``jobs`` (config, out, how) one after another."""
    log.write_text(json.dumps([[str(c), str(o), how] for c, o, how in jobs]))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    return [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(ROOT / "examples/accelerate" /
            config_file), "--num_processes", "2", "-m", "tests.trainer.fsdp_probe", str(log)], env


def launch(config_file: str, jobs: list[tuple[Path, Path, str]], log: Path) -> None:
    command, env = launch_command(config_file, jobs, log)
    proc = subprocess.run(command, capture_output=True, text=True, timeout=1200, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def metrics(run: Path) -> dict[tuple[int, str], float]:
    con = sqlite3.connect(run / "run.db")
    try:
        keys = ",".join("?" * len(KEYS))
        return {(s, k): v for s, k, v in con.execute(f"SELECT step, key, value FROM metrics WHERE key IN ({keys})", KEYS)}
    finally:
        con.close()


def evals(run: Path) -> list[tuple[int, str]]:
    con = sqlite3.connect(run / "run.db")
    try:
        return con.execute("SELECT step, metrics FROM evals ORDER BY step").fetchall()
    finally:
        con.close()


def three_steps(tiny_assets: Path, root: Path) -> Path:
    """3 steps of 4 prompts (2 per process), micro-batches of 2 rows, an evaluation every 2 steps and a
    checkpoint every step. The "picky" reward gives process 1 no reward variance, so it skips every row but one
    and runs fewer micro-batches than process 0: under FSDP it must still run as many forwards."""
    return write_config(tiny_assets, root, **{
        "optim.steps": 3, "optim.prompts_per_step": 4, "optim.micro_batch_size": 2, "logging.save_every": 1,
        "logging.keep_checkpoints": 3, "eval.every": 2, "rewards": [{"name": "picky", "function": "tests.reward_functions:picky"}],
    })


def lora_with_kl(tiny_assets: Path, root: Path) -> Path:
    return write_config(tiny_assets, root, **{
        "optim.steps": 2, "optim.prompts_per_step": 4, "optim.micro_batch_size": 2, "data.eval": None,
        "model.lora": LORA, "algorithm.kl": {"coef": 0.1},
        "rewards": [{"name": "picky", "function": "tests.reward_functions:picky"}],
    })


def pushing(tiny_assets: Path, root: Path, url: str, lora: bool) -> Path:
    return write_config(tiny_assets, root, **{
        "optim.steps": 2, "optim.prompts_per_step": 4, "optim.micro_batch_size": 2, "data.eval": None,
        "logging.save_every": 1, "sampling.engine": "server", "sampling.servers": [url],
        "sampling.sync": "disk", "sampling.server_down_secs": 60.0, "sampling.server_max_wait": 120.0,
        **({"model.lora": LORA} if lora else {}),
    })


@pytest.fixture
def fsdp_runs(tiny_assets, tmp_path_factory):
    """Every run of this module, in two launches: under FSDP2 the 3-step run, the same run stopped after step 1
    and resumed, LoRA with KL, and two runs pushing weights to a `kitae serve model` replica each (full and
    LoRA, kept running for the tests to read); under data parallel the 3-step run and LoRA with KL."""
    from kitae.rollout.replicas import Replicas

    root = tmp_path_factory.mktemp("fsdp")
    with Replicas(str(tiny_assets / "model"), 2, log_dir=root) as replicas:
        cut = three_steps(tiny_assets, root / "cut")
        launch("fsdp2.yaml", [
            (three_steps(tiny_assets, root / "fsdp"), root / "fsdp.json", ""),
            (cut, root / "cut.json", "1"),  # stopped cleanly after step 1: its checkpoint
            (cut, root / "resumed.json", "resume"),
            (lora_with_kl(tiny_assets, root / "lora-fsdp"), root / "lora-fsdp.json", ""),
            (pushing(tiny_assets, root / "push-full", replicas.urls[0], False), root / "push-full.json", ""),
            (pushing(tiny_assets, root / "push-lora", replicas.urls[1], True), root / "push-lora.json", ""),
        ], root / "fsdp-jobs.json")
        launch("ddp.yaml", [
            (three_steps(tiny_assets, root / "ddp"), root / "ddp.json", ""),
            (lora_with_kl(tiny_assets, root / "lora-ddp"), root / "lora-ddp.json", ""),
        ], root / "ddp-jobs.json")
        yield root, replicas.urls


def layout(root: Path, name: str) -> dict:
    return json.loads((root / f"{name}.json").read_text())


def fsdp2_trains_as_data_parallel_does_with_the_weights_sharded(fsdp_runs):
    root, _ = fsdp_runs
    fsdp, ddp = layout(root, "fsdp"), layout(root, "ddp")
    # really sharded: FSDP2's DTensors, each process holding about half of the weights (DDP: all of them)
    assert fsdp == {"distributed_type": "FSDP", "param_type": "DTensor", "share": pytest.approx(0.5, abs=0.05),
                    "processes": 2}
    assert ddp["distributed_type"] == "MULTI_CPU" and ddp["share"] == 1.0
    a, b = metrics(root / "fsdp" / "t"), metrics(root / "ddp" / "t")
    assert sorted(a) == sorted(b) == sorted((s, k) for s in (1, 2, 3) for k in KEYS)
    for key in sorted(a):
        assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-6), key
    assert all(a[(s, "skipped_rows")] > 0 for s in (1, 2, 3))  # process 1 skipped rows: fewer micro-batches there
    assert [s for s, _ in evals(root / "fsdp" / "t")] == [0, 2, 3]
    for (s1, m1), (s2, m2) in zip(evals(root / "fsdp" / "t"), evals(root / "ddp" / "t"), strict=True):
        assert s1 == s2 and json.loads(m1) == pytest.approx(json.loads(m2), abs=1e-6)
    # the checkpoint: kitae's layout and manifest, the full model (no tied copy), as DDP saved it
    for step in (1, 2, 3):
        folder = root / "fsdp" / "t" / "checkpoints" / f"step-{step:06d}"
        assert checkpoint_problem(folder) is None and (folder / MANIFEST).is_file()
        sharded = load_file(folder / "model" / "model.safetensors")
        full = load_file(root / "ddp" / "t" / "checkpoints" / f"step-{step:06d}" / "model" / "model.safetensors")
        assert sorted(sharded) == sorted(full)
        for name, t in full.items():
            torch.testing.assert_close(sharded[name], t, atol=1e-6, rtol=1e-5, msg=name)
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(root / "fsdp" / "t" / "checkpoints" / "step-000003" / "model")
    assert torch.equal(model.lm_head.weight, model.model.embed_tokens.weight)  # still tied
    first = load_file(root / "fsdp" / "t" / "checkpoints" / "step-000001" / "model" / "model.safetensors")
    assert any(not torch.equal(first[k], v) for k, v in sharded.items())  # it trained


def fsdp2_resume_gives_the_uninterrupted_run(fsdp_runs):
    root, _ = fsdp_runs
    cut, whole = root / "cut" / "t", root / "fsdp" / "t"  # the same config: whole ran to its end
    state = torch.load(cut / "checkpoints" / "step-000001" / "state.pt", weights_only=False)
    assert len(state["optimizer"]["state"]) == 20  # every parameter's full AdamW moments, keyed by name
    assert all(isinstance(k, str) for k in state["optimizer"]["state"])
    assert layout(root, "cut") == layout(root, "resumed") == layout(root, "fsdp")
    con = sqlite3.connect(cut / "run.db")  # stopped after step 1, resumed from its checkpoint
    resumed = con.execute("SELECT data FROM events WHERE kind = 'resumed'").fetchall()
    con.close()
    assert [json.loads(d)["checkpoint"].endswith("step-000001") for (d,) in resumed] == [True]
    assert metrics(cut) == metrics(whole)
    for step in (2, 3):
        name = f"checkpoints/step-{step:06d}/model/model.safetensors"
        a, b = load_file(cut / name), load_file(whole / name)
        assert all(torch.equal(a[k], b[k]) for k in b), step


def fsdp2_lora_with_kl_to_the_base_trains_as_data_parallel_does(fsdp_runs):
    """LoRA under FSDP2: the frozen base and the adapter sharded together, the KL's reference the base under the
    adapter (the policy's own forwards, as many on every process); the saved adapter is DDP's."""
    root, _ = fsdp_runs
    assert layout(root, "lora-fsdp")["param_type"] == "DTensor"
    a, b = metrics(root / "lora-fsdp" / "t"), metrics(root / "lora-ddp" / "t")
    assert sorted(a) == sorted(b) and a
    for key in sorted(a):
        assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-6), key
    name = "checkpoints/step-000002/model/adapter_model.safetensors"
    sharded, full = load_file(root / "lora-fsdp" / "t" / name), load_file(root / "lora-ddp" / "t" / name)
    assert sorted(sharded) == sorted(full) and all("lora_" in k for k in full)
    for k, t in full.items():
        torch.testing.assert_close(sharded[k], t, atol=1e-6, rtol=1e-5, msg=k)


def server_logp_gap(model, tokenizer, url: str) -> float:
    """Max |server log-prob - ``model``'s log-prob| over the server's greedy completion of a fixed prompt."""
    import httpx

    from kitae.rollout.base import Completion
    from kitae.trainer.batch import build_batch, token_logps

    prompt = tokenizer("what is 2+3?")["input_ids"]
    body = {"prompt": prompt, "n": 1, "max_tokens": 6, "temperature": 0.0, "logprobs": 0,
            "return_tokens_as_token_ids": True, "skip_special_tokens": False}
    got = httpx.post(url + "/v1/completions", json=body, timeout=60).json()["choices"][0]["logprobs"]
    ids = [int(t.removeprefix("token_id:")) for t in got["tokens"]]
    batch = build_batch([Completion("", prompt, ids, got["token_logprobs"], "length")], [0.0], tokenizer.pad_token_id)
    with torch.no_grad():
        own = token_logps(model, batch, 1.0)[0][batch.mask > 0]  # T = 1: greedy log-probs are at T 1
    return float((own - torch.tensor(got["token_logprobs"])).abs().max())


def fsdp2_pushes_the_full_weights_to_a_rollout_server(fsdp_runs, tiny_assets, lora):
    """sampling.engine: server, sync: disk under FSDP2: every process gathers, the main process pushes the whole
    policy (for LoRA only the adapter) after each step; the server then samples with exactly the trainer's weights
    of that step."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    root, urls = fsdp_runs
    name = "push-lora" if lora else "push-full"
    assert layout(root, name)["param_type"] == "DTensor"
    run = root / name / "t"
    folder = run / "checkpoints" / "step-000002" / "model"
    if lora:
        base = AutoModelForCausalLM.from_pretrained(tiny_assets / "model")
        trained = PeftModel.from_pretrained(base, folder).merge_and_unload()
    else:
        trained = AutoModelForCausalLM.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(tiny_assets / "model")
    gap = server_logp_gap(trained.eval(), tokenizer, urls[1 if lora else 0])
    assert gap < 1e-4  # fp32: the server holds the trainer's weights after the last step
    if lora:  # sampling.lora_sync: adapter (the default): the adapter of step 2, gathered whole, and nothing else
        pushed = load_file(run / "sync" / "adapter-v000002" / "adapter_model.safetensors")
        saved = load_file(folder / "adapter_model.safetensors")
        assert sorted(pushed) == sorted(saved) and all("lora_" in k for k in pushed)
        for name, t in pushed.items():
            torch.testing.assert_close(t, saved[name], atol=0, rtol=0, msg=name)
        assert not (run / "sync" / "adapter-v000001").exists()  # the previous adapter unloaded and removed
    else:  # the whole model of step 2 (every weight at its full shape), not a shard nor step 1's
        pushed = load_file(run / "sync" / "v000002" / "model.safetensors")
        full = trained.state_dict()
        assert sorted(pushed) == sorted(k for k in full if k != "lm_head.weight")  # the tied copy: not written
        for name, t in pushed.items():
            torch.testing.assert_close(t, full[name], atol=1e-6, rtol=1e-5, msg=name)
        base = load_file(tiny_assets / "model" / "model.safetensors")
        assert any(not torch.equal(t, base[k]) for k, t in pushed.items())  # it trained: not the initial weights
    con = sqlite3.connect(run / "run.db")
    try:
        seen = dict(con.execute("SELECT step || ' ' || key, value FROM metrics WHERE key IN "
                                "('policy_version', 'mismatch/logp_abs_diff_max')").fetchall())
    finally:
        con.close()
    for step in (1, 2):  # sampled by the weights pushed after the step before, the trainer's own
        assert seen[f"{step} policy_version"] == step - 1
        assert seen[f"{step} mismatch/logp_abs_diff_max"] < 1e-4


def test_fsdp2_in_two_processes(fsdp_runs, tiny_assets, subtests):
    """Each check on the runs of fsdp_runs, reported on its own (one test, so that one pytest worker makes the
    two launches: pytest-xdist's --dist loadgroup does not group tests under pytest 9)."""
    checks = [("trains as data parallel does, with the weights sharded",
               lambda: fsdp2_trains_as_data_parallel_does_with_the_weights_sharded(fsdp_runs)),
              ("a resumed run is the uninterrupted one", lambda: fsdp2_resume_gives_the_uninterrupted_run(fsdp_runs)),
              ("LoRA with KL to the base trains as data parallel does",
               lambda: fsdp2_lora_with_kl_to_the_base_trains_as_data_parallel_does(fsdp_runs)),
              ("pushes the full weights to a rollout server",
               lambda: fsdp2_pushes_the_full_weights_to_a_rollout_server(fsdp_runs, tiny_assets, False)),
              ("pushes only the LoRA adapter to a rollout server",
               lambda: fsdp2_pushes_the_full_weights_to_a_rollout_server(fsdp_runs, tiny_assets, True))]
    for name, check in checks:
        with subtests.test(name):
            check()


# ---- signals -------------------------------------------------------------------------------------------------
def endless(tiny_assets: Path, root: Path) -> Path:
    """A run that trains until it is stopped; no evaluation, a checkpoint only when it stops."""
    return write_config(tiny_assets, root, **{
        "optim.steps": 100000, "optim.prompts_per_step": 4, "optim.micro_batch_size": 2, "data.eval": None,
        "logging.save_every": 0, "rewards": [{"name": "picky", "function": "tests.reward_functions:picky"}]})


def _wait_for_step(run: Path, step: int, launcher: subprocess.Popen, log: Path, timeout: float = 600) -> int:
    """The pid of the main process (rank 0) once the run logged ``step``."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        assert launcher.poll() is None, log.read_text()[-3000:]
        with contextlib.suppress(KitaeError):  # not created yet, or being opened
            with RunStore.open(run, read_only=True) as store:
                if (store.last_step() or 0) >= step:
                    return store.summary()["pid"]
        time.sleep(0.5)
    raise AssertionError(f"{run} did not reach step {step}")


def _stopped_at_a_checkpoint(run: Path) -> None:
    with RunStore.open(run, read_only=True) as store:
        assert store.status == "stopped"
        last = store.last_step()
    assert checkpoint_problem(run / "checkpoints" / f"step-{last:06d}") is None


def test_fsdp2_ranks_stop_together_on_sigterm_to_one_and_end_with_a_killed_launcher(tiny_assets, tmp_path):
    """One launch, two runs: SIGTERM to rank 0 alone (the `kill PID` of the run lock's message) stops both ranks
    after the same step, at a checkpoint, and the launch goes on to the next run; SIGKILL of the launcher then
    ends both ranks (the kernel kills each with its parent), and the run reads "crashed", not "running"."""
    first, second = tmp_path / "first", tmp_path / "second"
    command, env = launch_command("fsdp2.yaml", [(endless(tiny_assets, first), tmp_path / "first.json", ""),
                                                 (endless(tiny_assets, second), tmp_path / "second.json", "")],
                                  tmp_path / "jobs.json")
    log = tmp_path / "launch.log"
    with log.open("w") as out:  # a file, not a pipe: nobody reads a pipe while the ranks train
        launcher = subprocess.Popen(command, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
    ranks: list[int] = []
    try:
        os.kill(_wait_for_step(first / "t", 2, launcher, log), signal.SIGTERM)
        _wait_for_step(second / "t", 1, launcher, log)  # the first run ended cleanly in both ranks
        assert "Traceback" not in log.read_text()
        _stopped_at_a_checkpoint(first / "t")
        ranks = _children(launcher.pid, "fsdp_probe")
        assert len(ranks) == 2
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
        assert _gone_within(ranks, timeout=300)  # not training on to the end under PID 1
        with RunStore.open(second / "t", read_only=True) as store:
            assert store.status == "crashed"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(launcher.pid, signal.SIGKILL)
        for pid in ranks:  # torch's launcher starts each rank in a session of its own
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
