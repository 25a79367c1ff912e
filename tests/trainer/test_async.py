"""``sampling.async``: rollouts sampled ahead by a rollout worker process, at most ``max_staleness`` policy
versions behind, each sample carrying its version; the update corrects with truncated importance weights; a
stopped and resumed async run trains exactly as the uninterrupted one.

Every check is on values (versions, weights, losses), never on timings.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from kitae.config import to_dict
from kitae.errors import ConfigError
from kitae.store import RunStore
from kitae.trainer.config import load_train_config
from kitae.trainer.loop import Trainer
from tests.plugins.tiny_run import write_config

pytestmark = pytest.mark.slow

ASYNC = {"data.eval": None, "eval.every": 0, "logging.keep_checkpoints": 5, "sampling.async": True,
         "sampling.temperature": 1.0, "optim.lr": 1e-2}


def _trainer(tiny_assets: Path, root: Path, **over) -> Trainer:
    return Trainer(load_train_config(write_config(tiny_assets, root, **{**ASYNC, **over})))


def _record_versions(trainer: Trainer) -> list[tuple[int, int | None]]:
    """(step, policy version) of every sample the trainer trains on, as it takes them."""
    seen: list[tuple[int, int | None]] = []
    take = trainer.rollouts.sample_grade_and_tell_sampler

    def recording(step):
        got = take(step)
        seen.extend((step, c.policy_version) for c in got.completions)
        return got

    trainer.rollouts.sample_grade_and_tell_sampler = recording
    return seen


@pytest.mark.parametrize("k", [1, 2])
def test_no_sample_is_more_than_max_staleness_versions_behind(tiny_assets, tmp_path, rewards_on_path, k):
    trainer = _trainer(tiny_assets, tmp_path, **{"sampling.max_staleness": k, "optim.steps": 5,
                                                 "algorithm.dynamic_sampling": {"enabled": True, "max_rounds": 2}})
    seen = _record_versions(trainer)
    trainer.train()
    lags = [step - 1 - v for step, v in seen]
    assert all(v is not None for _, v in seen)
    assert min(lags) >= 0 and max(lags) <= k  # per sample: never newer than the policy, never too old
    assert max(lags) == k  # the pipeline filled up: samples were taken ahead (else the bound shows nothing)
    metrics = RunStore.open(trainer.run_dir, read_only=True).metrics()
    assert max(v for _, v in metrics["policy_lag_max"]) == k
    per_step = {s: [step - 1 - v for step, v in seen if step == s] for s in range(1, 6)}
    logged = dict(metrics["policy_lag"])
    assert all(logged[s] == pytest.approx(sum(lg) / len(lg)) for s, lg in per_step.items())
    assert "mismatch/tis_weight_mean" in metrics  # the update corrected for the lag
    with RunStore.open(trainer.run_dir, read_only=True) as store:  # each stored sample keeps its version
        stored = [(g.step, s.policy_version) for g in store.groups(limit=None, with_samples=True) for s in g.samples]
    assert sorted(stored) == sorted(seen)


def _stop_after(trainer: Trainer, step: int) -> None:
    def on_step(s, metrics):
        if s == step:
            trainer.stop.requested = True  # as Ctrl-C does: the loop saves this step and stops

    trainer.on_step = on_step


PRIORITIZED = {"optim.steps": 5, "logging.save_every": 0, "sampling.max_staleness": 2,
               "data.sampler": {"name": "prioritized", "correct": "right"},
               "rewards": [{"name": "short", "function": "tests.reward_functions:short"},
                           {"name": "right", "weight": 0.0, "grader": {"type": "text_similarity",
                                                                       "evaluation_metric": "fuzzy_match"}}]}


def test_a_stopped_and_resumed_async_run_trains_exactly_as_the_uninterrupted_one(tiny_assets, tmp_path,
                                                                                 rewards_on_path):
    whole = _trainer(tiny_assets, tmp_path / "whole", **PRIORITIZED)
    whole.train()
    cut = _trainer(tiny_assets, tmp_path / "cut", **PRIORITIZED)
    _stop_after(cut, 2)
    assert cut.train()["status"] == "stopped"
    state = torch.load(cut.run_dir / "checkpoints" / "step-000002" / "state.pt", weights_only=False)
    assert sorted(state["ahead"]["ahead"]) == [3, 4, 5]  # the steps sampled ahead were kept, not lost

    def resume_config(*overrides: str):
        cfg = load_train_config(cut.run_dir / "config.yaml", list(overrides))
        cfg.output_dir, cfg.name = str(cut.run_dir.parent), cut.run_dir.name
        return cfg

    # those steps were sampled up to 2 versions behind: a lower bound cannot hold for them, asked or not
    with pytest.raises(ConfigError, match=r"sampling.max_staleness: 2 → 1 .*cannot be lowered on resume.*"
                                          r"steps 3 to 5 were sampled ahead"):
        Trainer(resume_config("sampling.max_staleness=1"), resume=True, allow_config_change=True)
    resumed = Trainer(resume_config(), resume=True)
    seen = _record_versions(resumed)
    resumed.train()
    assert sorted({s for s, _ in seen}) == [3, 4, 5]  # no step repeated, none lost
    a = RunStore.open(whole.run_dir, read_only=True).metrics()
    b = RunStore.open(cut.run_dir, read_only=True).metrics()
    for key in ("loss", "reward", "policy_lag", "mismatch/tis_weight_mean"):
        assert [s for s, _ in b[key]] == [1, 2, 3, 4, 5]
        assert [v for _, v in b[key]] == pytest.approx([v for _, v in a[key]], rel=1e-5, abs=1e-8), key
    assert any(abs(v) > 1e-6 for _, v in a["loss"])  # it trained (else equal weights show nothing)
    wa = load_file(whole.run_dir / "checkpoints" / "step-000005" / "model" / "model.safetensors")
    wb = load_file(cut.run_dir / "checkpoints" / "step-000005" / "model" / "model.safetensors")
    assert all(torch.allclose(wa[k], wb[k], atol=1e-6) for k in wa)


@pytest.mark.parametrize("mu", [1, 2])
def test_the_importance_weights_are_the_trainers_probability_over_the_samplers_capped(tiny_assets, tmp_path,
                                                                                       rewards_on_path, mu,
                                                                                       monkeypatch):
    """A group sampled by the worker with version 0's weights, then trained by changed weights: each token's
    weight is min(p_new / p_old, cap), both computed here by a plain forward of each model. mu 1: from the
    update's own forward; mu 2: from the forward before the update (correct_mismatch)."""
    import kitae.trainer.update as update_module

    trainer = _trainer(tiny_assets, tmp_path, **{"algorithm.tis_cap": 1.5, "optim.steps": 3, "algorithm.mu": mu})
    pipeline = trainer.rollouts.pipeline
    old = {k: v.clone() for k, v in trainer.policy.state_dict().items()}
    try:
        pipeline.push(trainer.policy, 0)
        _, groups = pipeline.take(1, 0)
    finally:
        trainer.rollouts.close()
    completions = [c for g in groups for c in g]
    assert {c.policy_version for c in completions} == {0}
    with torch.no_grad():
        for p in trainer.policy.parameters():
            p.add_(0.05 * torch.randn_like(p))  # the policy moved on since the worker sampled
    batch = trainer.update.batch_before_advantages(completions)
    new = {k: v.clone() for k, v in trainer.policy.state_dict().items()}
    assert trainer.update.in_pass_correction == (mu == 1)
    if mu == 1:  # the weights the loss is given in the update's only pass
        seen, loss = [], update_module.policy_loss
        monkeypatch.setattr(update_module, "policy_loss", lambda name, inp, *a: seen.append(inp) or loss(name, inp, *a))
        batch.advantages = torch.linspace(-1, 1, len(batch))  # every row trains
        metrics = trainer.update.optimize(batch, trainer.loss_config())
        assert metrics["mismatch/tis_weight_mean"] > 0 and metrics["ratio_mean"] == pytest.approx(1.0, abs=1e-6)
        weights = torch.zeros_like(batch.mask)
        chunks = [rows for rows, _ in trainer.update.micro_batches(batch, list(range(len(batch))))]
        assert len(chunks) == len(seen)  # the loss saw the micro-batches of every row, in this order
        for rows, inp in zip(chunks, seen):  # each micro-batch's rows (the batch's indices), trimmed
            weights[rows, : inp.is_weight.shape[1]] = inp.is_weight
    else:
        trainer.update.correct_mismatch(batch)
        weights = batch.is_weight
    by_hand = []
    for c in completions:
        ids = torch.tensor([c.prompt_ids + c.completion_ids])
        logp = {}
        for name, state in (("old", old), ("new", new)):
            trainer.policy.load_state_dict(state)
            logits = trainer.policy(input_ids=ids).logits[0, len(c.prompt_ids) - 1 : -1].float()  # [T, V]
            logp[name] = torch.log_softmax(logits, -1).gather(-1, torch.tensor(c.completion_ids)[:, None])[:, 0]
        assert logp["old"].tolist() == pytest.approx(c.logprobs, abs=1e-4)  # the worker sampled with version 0
        by_hand.append([min(math.exp(n - o), 1.5) for n, o in zip(logp["new"].tolist(), logp["old"].tolist())])
    for i, expect in enumerate(by_hand):
        got = weights[i][batch.mask[i] > 0].tolist()
        assert got == pytest.approx(expect, rel=1e-4)
    assert any(w < 1.5 - 1e-3 and abs(w - 1) > 1e-3 for row in by_hand for w in row)  # weights moved, uncapped


@pytest.mark.parametrize("over, field", [
    ({"sampling.max_staleness": 0}, "sampling.max_staleness"),
    ({"sampling.partial": {"segment_tokens": 4}}, "sampling.async"),
    ({"sampling.engine": "server", "sampling.servers": ["http://127.0.0.1:9"], "sampling.sync": "none"},
     "sampling.async"),
    ({"sampling.engine": "server", "sampling.servers": ["http://127.0.0.1:9"], "sampling.sync_every": 2,
      "sampling.max_staleness": 2}, "sampling.sync_every"),
])
def test_what_async_cannot_run_with_is_refused_naming_the_field(tiny_assets, tmp_path, over, field):
    with pytest.raises(ConfigError) as err:
        load_train_config(write_config(tiny_assets, tmp_path, **{**ASYNC, **over}))
    assert err.value.path == field


def test_async_is_read_and_saved_under_its_yaml_name_and_fills_in_max_staleness(tiny_assets, tmp_path):
    cfg = load_train_config(write_config(tiny_assets, tmp_path, **ASYNC))
    assert cfg.sampling.async_ is True and cfg.sampling.max_staleness == 1
    saved = to_dict(cfg)["sampling"]
    assert saved["async"] is True and "async_" not in saved
    assert load_train_config(data=to_dict(cfg)).sampling.async_ is True  # the saved config reads back
    sync = load_train_config(write_config(tiny_assets, tmp_path, **{**ASYNC, "sampling.async": False}))
    assert sync.sampling.max_staleness == 0


def test_the_server_engine_samples_the_next_batch_during_the_update_and_bounds_its_lag(tiny_assets, tmp_path,
                                                                                      rewards_on_path):
    """A real `kitae serve model` replica on 127.0.0.1: requests for step s+1 go out before step s updates; the
    weights of step s reach the server between batches, so each batch is sampled by one version, one behind."""
    from kitae.rollout.replicas import Replicas

    with Replicas(str(tiny_assets / "model"), 1, log_dir=tmp_path) as replicas:
        trainer = _trainer(tiny_assets, tmp_path, **{
            "sampling.engine": "server", "sampling.servers": replicas.urls, "sampling.server_down_secs": 60.0,
            "sampling.server_max_wait": 120.0, "optim.steps": 4})
        seen = _record_versions(trainer)
        summary = trainer.train()
    assert summary["status"] == "finished"
    assert [step - 1 - v for step, v in seen] == [0] * 8 + [1] * 24  # steps 1 .. 4, 8 samples each
    metrics = RunStore.open(trainer.run_dir, read_only=True).metrics()
    assert [v for _, v in metrics["rollout/stale_dropped"]] == [0, 0, 0, 0]  # the server held the version asked
    assert [v for _, v in metrics["policy_lag_max"]] == [0, 1, 1, 1]


# ---- a busy machine -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cpus, load, trainer, worker, own, busy", [
    (2, 0.2, 1, 1, 1.0, False),  # an idle 2-core machine at the start: a core each (1.48x sync measured)
    (2, 2.0, 1, 1, 1.0, True),   # a core's worth of other programs: they take turns (0.99x at load 2)
    (2, 9.0, 1, 1, 1.0, True),   # (0.76x at load 9)
    (2, 2.1, 1, 1, 2.0, False),  # during the run the load average holds the run's own two threads
    (2, 4.0, 1, 1, 2.0, True),   # ... and two busy programs more
    (1, 0.0, 1, 1, 1.0, True),   # one core for two threads, however idle
    (16, 3.0, 4, 4, 1.0, False),  # room for 8 threads beside two busy programs
    (8, 3.0, 4, 4, 1.0, True),   # 8 cores, 8 threads, two cores' worth of other programs
])
def test_the_rollout_worker_has_a_core_of_its_own_where_the_cores_and_the_load_leave_one(cpus, load, trainer,
                                                                                          worker, own, busy):
    from kitae.threads import worker_core_problem

    assert (worker_core_problem(cpus, load, trainer, worker, own) is not None) == busy


def test_a_busy_machine_is_named_at_the_start_with_the_advice_to_sample_synchronously(tiny_assets, tmp_path,
                                                                                      rewards_on_path, monkeypatch):
    monkeypatch.setenv("KITAE_LOAD_AVERAGE", "9")  # what os.getloadavg() reads while 9 programs run
    with pytest.warns(UserWarning, match=r"sampling.async: the rollout worker has no core of its own .* slower "
                                         r"than sync here .*Set sampling.async: false"):
        trainer = _trainer(tiny_assets, tmp_path, **{"optim.steps": 1})
    try:
        assert trainer.worker_has_no_core()  # and the step line says so
    finally:
        trainer.store.close()
