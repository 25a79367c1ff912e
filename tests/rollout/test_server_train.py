"""`kitae train` with `sampling.engine: server` against real `kitae serve model` replicas on 127.0.0.1."""

from __future__ import annotations

import shutil
import subprocess
import sys

import httpx
import pytest
import torch

from kitae.errors import KitaeError
from kitae.rollout.base import Completion
from kitae.rollout.replicas import Replicas
from kitae.trainer.batch import build_batch, token_logps
from kitae.trainer.config import load_train_config
from kitae.trainer.loop import Trainer
from tests.plugins.tiny_run import write_config

FIXED_PROMPT = [{"role": "user", "content": "what is 2+3?"}]


def server_config(tiny_assets, tmp_path, urls, **over):
    return load_train_config(write_config(tiny_assets, tmp_path, **{
        "sampling.engine": "server", "sampling.servers": urls, "sampling.server_down_secs": 60.0,
        "sampling.server_max_wait": 120.0, **over}))  # a server that misbehaves fails the test, not hangs it


def fixed_completion_gap(trainer: Trainer, url: str, model: str | None = None) -> float:
    """Max |server log-prob - trainer log-prob| over a greedy completion of a fixed prompt (``model``: the name
    the request gives, e.g. a LoRA adapter the server loaded)."""
    prompt = trainer.engine.encode_prompt(FIXED_PROMPT)
    body = {**({"model": model} if model else {}), "prompt": prompt, "n": 1, "max_tokens": 6, "temperature": 0.0,
            "logprobs": 0, "return_tokens_as_token_ids": True, "skip_special_tokens": False}
    got = httpx.post(url + "/v1/completions", json=body, timeout=60).json()["choices"][0]["logprobs"]
    ids = [int(t.removeprefix("token_id:")) for t in got["tokens"]]
    c = Completion("", prompt, ids, got["token_logprobs"], "length")
    batch = build_batch([c], [0.0], trainer.tokenizer.pad_token_id)
    with torch.no_grad():
        own = token_logps(trainer.policy, batch, 1.0)[0][batch.mask > 0]  # T = 1: greedy log-probs are at T 1
    return float((own - torch.tensor(got["token_logprobs"])).abs().max())


@pytest.mark.slow
def test_two_replicas_weights_in_step_and_one_killed_mid_run(tiny_assets, tmp_path, rewards_on_path):
    with Replicas(str(tiny_assets / "model"), 2, log_dir=tmp_path) as replicas:
        cfg = server_config(tiny_assets, tmp_path, replicas.urls)
        trainer = Trainer(cfg)
        gaps, seen = [], []

        def on_step(step, metrics):
            seen.append(metrics)
            live = replicas.urls if step <= 2 else replicas.urls[:1]
            gaps.extend(fixed_completion_gap(trainer, url) for url in live)  # after this step's sync
            if step == 2:
                replicas.kill(1)  # a replica dies mid-run

        trainer.on_step = on_step
        summary = trainer.train()
    assert summary["status"] == "finished" and summary["steps"] == 4
    assert len(gaps) == 2 + 2 + 1 + 1 and max(gaps) < 1e-4  # fp32: the server holds exactly the trainer's weights
    for step, m in enumerate(seen, start=1):
        assert m["policy_version"] == step - 1  # sampled by the weights pushed after the step before
        assert m["mismatch/logp_abs_diff_max"] < 1e-4 and m["mismatch/tis_clip_frac"] == 0
        assert m["ratio_mean"] == pytest.approx(1.0, abs=1e-6)  # old log-probs: the trainer's own, same batches
        assert m["sync_secs"] > 0 and m["rollout/stale_dropped"] == 0
    assert seen[2]["rollout/replicas_down"] == 1  # step 3 found the dead replica and went on with the other


@pytest.mark.slow
def test_lora_merged_sync_pushes_merged_weights_every_other_step(tiny_assets, tmp_path, rewards_on_path):
    with Replicas(str(tiny_assets / "model"), 1, log_dir=tmp_path) as replicas:
        cfg = server_config(tiny_assets, tmp_path, replicas.urls, **{
            "model.lora": {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}, "optim.lr": 0.05,
            "sampling.sync_every": 2, "sampling.max_staleness": 1, "sampling.lora_sync": "merged",
            "eval.every": 0})
        trainer = Trainer(cfg)
        seen = []
        trainer.on_step = lambda step, m: seen.append(m)
        trainer.train()
        gap = fixed_completion_gap(trainer, replicas.urls[0])
    assert [m["policy_version"] for m in seen] == [0, 0, 2, 2]
    assert ["sync_secs" in m for m in seen] == [False, True, False, True]
    assert seen[0]["mismatch/logp_abs_diff_max"] < 1e-4 and seen[2]["mismatch/logp_abs_diff_max"] < 1e-4
    assert seen[1]["mismatch/logp_abs_diff"] > 1e-3  # one update behind: the gap TIS corrects
    assert gap < 1e-4  # the merged adapter, after the last push


@pytest.mark.slow
def test_lora_pushes_only_the_adapter_and_the_server_samples_with_it(tiny_assets, tmp_path, rewards_on_path):
    from transformers import AutoModelForCausalLM

    full = sum(p.numel() * p.element_size() for p in AutoModelForCausalLM.from_pretrained(tiny_assets / "model")
               .parameters())  # what a full push moves: every weight of the base
    with Replicas(str(tiny_assets / "model"), 1, log_dir=tmp_path) as replicas:
        url = replicas.urls[0]
        cfg = server_config(tiny_assets, tmp_path, replicas.urls, **{
            "model.lora": {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}, "optim.lr": 0.05,
            "optim.steps": 3, "eval.every": 0})
        trainer = Trainer(cfg)
        sync_dir = trainer.cfg.run_dir / "sync"
        seen, gaps, base_gaps, served = [], [], [], []

        def on_step(step, metrics):
            seen.append(metrics)
            folder = sync_dir / f"adapter-v{step:06d}"  # this step's push
            assert metrics["sync/bytes"] == sum(f.stat().st_size for f in folder.iterdir())
            assert sorted(f.name for f in sync_dir.iterdir()) == [folder.name]  # old adapters cleaned up
            served.append([m["id"] for m in httpx.get(url + "/v1/models", timeout=30).json()["data"]])
            gaps.append(fixed_completion_gap(trainer, url, model=f"kitae-v{step:06d}"))
            with trainer.policy.disable_adapter():  # the base alone: the server must not sample like it
                base_gaps.append(fixed_completion_gap(trainer, url, model=f"kitae-v{step:06d}"))

        trainer.on_step = on_step
        summary = trainer.train()
    assert summary["status"] == "finished" and summary["steps"] == 3
    for step, m in enumerate(seen, start=1):
        assert m["sync/full_bytes"] == full and m["sync/bytes"] < full / 20  # only the adapter moved
        assert m["policy_version"] == step - 1 and m["rollout/stale_dropped"] == 0
        assert m["mismatch/logp_abs_diff_max"] < 1e-4  # sampled by the adapter of the step before, exactly
    assert served == [["model", f"kitae-v{s:06d}"] for s in (1, 2, 3)]  # the previous adapter unloaded
    assert max(gaps) < 1e-4  # fp32: the server samples with exactly the trainer's adapter
    assert base_gaps[-1] > 1e-3  # ... which changed the base's outputs


def broken_model(tiny_assets, tmp_path):
    """The tiny model's folder with unreadable weights: loading it fails, reading its tokenizer does not."""
    folder = tmp_path / "broken-model"
    shutil.copytree(tiny_assets / "model", folder)
    (folder / "model.safetensors").write_bytes(b"not a safetensors file")
    return folder


def test_a_dead_server_fails_before_the_model_loads(tiny_assets, tmp_path, rewards_on_path):
    dead = "http://127.0.0.1:9"
    cfg = load_train_config(write_config(tiny_assets, tmp_path, **{
        "model.path": str(broken_model(tiny_assets, tmp_path)), "sampling.engine": "server",
        "sampling.servers": [dead]}))
    with pytest.raises(KitaeError, match=r"sampling.servers\[0\]: no rollout server answers at http://127.0.0.1:9 "):
        Trainer(cfg)


@pytest.mark.slow  # a CLI subprocess per case: the full suite runs it, the fast subset leaves it
def test_cli_names_the_bad_url(tiny_assets, tmp_path, rewards_on_path):
    cfg = write_config(tiny_assets, tmp_path, **{"model.path": str(broken_model(tiny_assets, tmp_path))})
    cases = [("http://127.0.0.1:9", r"sampling.servers[0]: no rollout server answers at http://127.0.0.1:9"),
             ("127.0.0.1:9", "sampling.servers[0]: '127.0.0.1:9' is not an http(s) URL")]
    for url, says in cases:
        out = subprocess.run([sys.executable, "-m", "kitae.cli.main", "train", str(cfg), "-q",
                              "--set", "sampling.engine=server", "--set", f"sampling.servers=[{url}]"],
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 2 and says in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_frozen_servers_sample_training_groups_but_not_evaluations(tiny_assets, tmp_path, rewards_on_path):
    from tests.rollout.scripted import CompletionsServer, choice, reply

    def answer(body):  # every sample "4" and the end marker
        ids = [body["prompt"][-1]]  # a token the tiny tokenizer has
        return reply([choice(ids, [-1.0], "length", i) for i in range(body["n"])], weight_version=None)

    with CompletionsServer(default=answer) as server:
        cfg = server_config(tiny_assets, tmp_path, [server.url], **{
            "sampling.sync": "none", "optim.steps": 2, "eval.every": 1})
        seen = []
        trainer = Trainer(cfg)
        trainer.on_step = lambda step, m: seen.append(m)
        summary = trainer.train()
        asked = len(server.completions)
    assert summary["status"] == "finished"
    assert asked == 2 * 2  # 2 prompts a step, 2 steps; the 3 evaluations sampled in process
    assert all("policy_version" not in m and "sync_secs" not in m for m in seen)  # frozen: no versions
    assert all(m["mismatch/logp_abs_diff"] > 0 for m in seen)  # the server's -1.0 is not the trainer's log-prob
