"""The GRPO training loop.

Each step: sample prompts, generate G completions per prompt with the rollout engine, grade them with every
reward component, turn rewards into advantages, and run `mu` optimization passes over the batch with the
configured policy loss (old log-probs are the sampling policy's, from the engine). Everything a step produced
goes to the run store; checkpoints hold everything needed to resume.

Kimi k1.5 pieces: prompts come from a registered sampler (``data.sampler``: uniform, prioritized, curriculum),
told each prompt's pass rate after grading; ``sampling.partial`` swaps whole-trajectory generation for partial
rollouts (a replay buffer of unfinished groups, kitae.rollout.partial); ``sampling.repeat`` ends looping samples
early; ``algorithm.reset_optimizer`` starts each iteration with fresh optimizer state. The reference of the mirror
descent step is the policy that sampled the batch: its log-probs come from the engine as ``old_logp``.

Departures from the papers, all configurable: no reference model unless the KL weight is non-zero (DAPO, Dr.
GRPO and Kimi drop it); a reward of None is masked (TRL's rule). In multi-process runs (accelerate) the loss is
normalized by the whole batch's counts over all processes (as TRL's ``dapo``), so the gradient DDP averages is
the single-process full-batch gradient.
"""

from __future__ import annotations

import math
import signal
import statistics
import time
import warnings
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Callable

import torch
import yaml

from kitae.algorithms.advantages import compute_advantages, dynamic_sampling_keep
from kitae.algorithms.kl import AdaptiveKLController, FixedKLController, kl_estimate, masked_entropy
from kitae.algorithms.losses import LossInputs, Normalizer, policy_loss, rows_without_gradient
from kitae.algorithms.mismatch import mismatch_metrics, tis_weight
from kitae.errors import ConfigError, KitaeError
from kitae.graders.base import is_finite_number
from kitae.chat import content_text
from kitae.models import language_targets, load_causal_lm
from kitae.rollout.base import ENGINES, Completion, SamplingParams
from kitae.rollout.partial import PartialRollouts
from kitae.rewards.graders import RepeatPenalty
from kitae.store import GroupRecord, RunStore, SampleRecord
from kitae.store.images import RunImages
from kitae.threads import set_threads
from kitae.trainer.batch import (
    PackedBatch,
    TrainBatch,
    attention_weight,
    build_batch,
    micro_batch_rows,
    packed_logps,
    packed_micro_batches,
    token_logps,
)
from kitae.trainer.checkpoint import save_checkpoint, set_rng_state
from kitae.trainer.config import TrainConfig
from kitae.scoring.evaluate import evaluate, sample_dict
from kitae.trainer.loggers import make_loggers
from kitae.trainer.preflight import Checked, preflight
from kitae.trainer.resume import ResumePlan, plan_resume, record_resume
from kitae.scoring.rewards import GroupScores, RewardComponent, counter_deltas, last_problems, no_reward_message, score_groups
from kitae.trainer.samplers import SAMPLERS


class Trainer:
    """Owns the model, optimizer, engine, rewards and run store of one run. `train()` runs it.

    ``resume``: go on from the run's newest complete checkpoint (kitae.trainer.resume: what is refused and what
    is recorded); ``allow_config_change`` applies config fields that differ from the run's saved config;
    ``resume_from_scratch`` restarts the run at step 0, keeping its earlier history aside. ``checked``: what
    :func:`kitae.trainer.preflight.preflight` built for `cfg`; run here when not given, so every config, grader,
    data and length error comes before the model loads."""

    # Console hooks (kitae.cli.train sets them): on_eval_start(step, prompts) returns a progress(prompts done)
    # callback for the evaluation's own bar; on_eval(step, metrics, seconds) follows each evaluation.
    on_eval_start: Callable[[int, int], Callable[[int], None]] | None = None
    on_eval: Callable[[int, dict, float], None] | None = None

    def __init__(self, cfg: TrainConfig, resume: bool = False, on_step: Callable[[int, dict], None] | None = None,
                 checked: Checked | None = None, allow_config_change: bool = False,
                 resume_from_scratch: bool = False):
        from accelerate import Accelerator
        from accelerate.utils import set_seed

        checked = checked or preflight(cfg)
        self.cfg = cfg
        self.on_step = on_step
        self.acc = Accelerator(cpu=not torch.cuda.is_available())
        set_seed(cfg.seed)
        set_threads(cfg.threads, cfg.model.path, option="threads")  # threads: N, else the rule for the model's size
        self.run_dir = cfg.run_dir
        # before the model loads: a resume that cannot go on as asked fails in seconds, naming why
        self.resume_plan = plan_resume(cfg, allow_config_change, resume_from_scratch) if resume else None
        ckpt = self.resume_plan.checkpoint if self.resume_plan else None
        self.start_step = ckpt.step if ckpt else 0
        self.tokenizer = checked.tokenizer
        self.processor = checked.processor  # vision-language models; None for text
        self._run_images = RunImages(self.run_dir)
        model = self._load_model(ckpt.path / "model" if ckpt else None)
        self.ref_model = self._load_ref_model(model)
        params = [p for p in model.parameters() if p.requires_grad]
        o = cfg.optim
        optimizer = torch.optim.AdamW(params, lr=o.lr, betas=tuple(o.betas), weight_decay=o.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, self._lr_factor)
        self.model, self.optimizer = self.acc.prepare(model, optimizer)
        self.engine = self._make_engine(checked)
        self.components = checked.components + self._repeat_component()
        self.eval_grader = checked.eval_grader
        self.train_rows, self.eval_rows = checked.train_rows, checked.eval_rows
        self.sampler = self._make_sampler()
        self.pass_component = checked.pass_component
        self.partial = self._make_partial()
        kl = cfg.algorithm.kl
        self.kl_ctl = (
            AdaptiveKLController(kl.coef, kl.adaptive.target, kl.adaptive.horizon) if kl.adaptive else FixedKLController(kl.coef)
        )
        self.loss_cfg = cfg.loss_config(self._kl_coef_in_loss())
        if ckpt:
            self._restore(ckpt.state, self.resume_plan)
            ckpt.state = None  # restored: its tensors are not held twice
        self.store = self._open_store() if self.acc.is_main_process else None
        self.loggers = make_loggers(cfg.logging.report_to if self.store else [], self.run_dir, cfg.to_dict())
        self._stop_requested = False
        self._mismatch_metrics: dict[str, float] = {}  # server engine: this step's sampler/trainer gap
        self._rounds = 0  # sampling rounds the last step took (logged as sampling_rounds with dynamic sampling)

    # ---- setup --------------------------------------------------------------------------------
    @property
    def policy(self):
        return self.acc.unwrap_model(self.model) if hasattr(self, "model") else None

    def _make_engine(self, checked: Checked):
        """The rollout engine; one with a ``from_config`` (the server engine) gets the sampling settings and the
        servers pre-flight found answering."""
        cls = ENGINES.get(self.cfg.sampling.engine, "sampling.engine")
        if self.processor is not None:  # pre-flight allows only the in-process engine here
            from kitae.rollout.vision import VisionEngine

            return VisionEngine(self.policy, self.tokenizer, self.processor)
        build = getattr(cls, "from_config", None)
        if build is None:
            return cls(self.policy, self.tokenizer)
        return build(self.policy, self.tokenizer, self.cfg.sampling, self.run_dir, checked.servers)

    def _load_model(self, checkpoint_model: Path | None):
        cfg = self.cfg.model
        lora = cfg.lora
        if checkpoint_model is not None and lora is None:
            model = load_causal_lm(checkpoint_model, cfg.dtype)
        else:
            model = load_causal_lm(cfg.path, cfg.dtype)
        if lora is not None:
            import peft

            if checkpoint_model is not None:
                model = peft.PeftModel.from_pretrained(model, str(checkpoint_model), is_trainable=True)
            else:
                lc = peft.LoraConfig(
                    r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                    target_modules=language_targets(model, lora.target_modules), task_type="CAUSAL_LM",
                )
                model = peft.get_peft_model(model, lc)
        if cfg.gradient_checkpointing:
            model.gradient_checkpointing_enable()
        model.config.use_cache = True
        return model

    def _load_ref_model(self, model):
        kl = self.cfg.algorithm.kl
        if kl.coef == 0 and kl.adaptive is None:
            return None  # no reference model when the KL weight is 0
        if self.cfg.model.lora is not None:
            return "adapter-disabled"  # the base model under the adapter is the reference
        ref = load_causal_lm(self.cfg.model.path, self.cfg.model.dtype).to(self.acc.device)
        ref.requires_grad_(False)
        return ref.eval()

    def _make_sampler(self):
        sc = self.cfg.data.sampler
        options = {k: v for k, v in sc.__dict__.items() if k not in ("name", "correct", "pass_threshold")}
        cls = SAMPLERS.get(sc.name, "data.sampler.name")
        return cls(len(self.train_rows), seed=self.cfg.seed, shuffle=self.cfg.data.shuffle, rows=self.train_rows,
                   **options)

    def _make_partial(self) -> PartialRollouts | None:
        pc = self.cfg.sampling.partial
        if pc is None:
            return None
        if not hasattr(self.engine, "generate_tokens"):
            raise ConfigError("sampling.partial", f"the {self.cfg.sampling.engine} engine cannot continue trajectories")
        if self.acc.num_processes > 1:
            raise ConfigError("sampling.partial", "partial rollouts run in one process for now (the replay buffer "
                              "is not shared between processes)")
        return PartialRollouts(self.engine, self.tokenizer, pc.segment_tokens, self.cfg.sampling.max_new_tokens)

    def _repeat_component(self) -> list[RewardComponent]:
        rc = self.cfg.sampling.repeat
        if rc is None or rc.penalty == 0:
            return []
        if any(r.name == "repeat" for r in self.cfg.rewards):
            raise ConfigError("sampling.repeat.penalty", "adds a reward component named 'repeat'; rename yours")
        return [RewardComponent("repeat", 1.0, RepeatPenalty(rc.penalty))]

    def _lr_factor(self, step: int) -> float:
        o = self.cfg.optim
        if o.warmup_steps and step < o.warmup_steps:
            return (step + 1) / o.warmup_steps
        if o.scheduler == "constant":
            return 1.0
        frac = min(1.0, (step - o.warmup_steps) / max(1, o.steps - o.warmup_steps))
        return 1.0 - frac if o.scheduler == "linear" else 0.5 * (1 + math.cos(math.pi * frac))

    def _kl_coef_in_loss(self) -> float:
        return self.kl_ctl.value if self.cfg.algorithm.kl.where == "loss" else 0.0

    def _open_store(self) -> RunStore:
        if self.resume_plan is not None:
            store = RunStore.open(self.run_dir)
            record_resume(store, self.resume_plan, self.cfg)  # trims the steps to redo; records what happened
            store.mark_running()
            return store
        store = RunStore.create(self.run_dir, name=self.cfg.name, config=self.cfg.to_dict(), model=self.cfg.model.path)
        (self.run_dir / "config.yaml").write_text(yaml.safe_dump(self.cfg.to_dict(), sort_keys=False, allow_unicode=True))
        return store

    def _restore(self, state: dict[str, Any], plan: ResumePlan) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.sampler.load_state_dict(state["sampler"])
        if self.partial is not None and state.get("partial") is not None:
            self.partial.load_state_dict(state["partial"])
        self.kl_ctl.load_state_dict(state["kl"])
        set_rng_state(state["rng"])
        self._apply_optim_config()
        if plan.changed("algorithm.kl.coef"):
            self.kl_ctl.value = float(self.cfg.algorithm.kl.coef)  # a new coefficient from here on
        self.loss_cfg.kl_coef = self._kl_coef_in_loss()  # the restored coefficient, from the first resumed step

    def _apply_optim_config(self) -> None:
        """The config's optimizer settings over the restored ones: the same values unless the config changed on
        resume, when a new lr, betas or weight decay (and schedule) take effect from the next step."""
        o = self.cfg.optim
        groups = self.optimizer.param_groups
        factor = self._lr_factor(self.scheduler.last_epoch)  # LambdaLR: lr = base lr * factor(last_epoch)
        for g in groups:
            g.update(lr=o.lr * factor, initial_lr=o.lr, betas=tuple(o.betas), weight_decay=o.weight_decay)
        self.scheduler.base_lrs = [o.lr] * len(groups)

    # ---- the loop -----------------------------------------------------------------------------
    def train(self) -> dict[str, Any]:
        """Run until `optim.steps`; returns the final summary. Ctrl-C (or SIGTERM) saves and stops cleanly."""
        old_handlers = self._install_signal_handlers()
        status, error = "crashed", None
        try:
            self._sync_weights(self.start_step, force=True)  # the servers sample with this run's weights
            if self.start_step == 0 and self.eval_rows:
                self.evaluate(0)
            step = self.start_step
            while step < self.cfg.optim.steps and not self._stop_requested:
                step += 1
                metrics = self.train_step(step)
                if self.on_step:
                    self.on_step(step, metrics)
                if self._due(step, self.cfg.eval.every) and step != self.cfg.optim.steps and self.eval_rows:
                    self.evaluate(step)
                if self._due(step, self.cfg.logging.save_every) or self._stop_requested:
                    self.save(step)
            if not self._stop_requested:
                if self.eval_rows:
                    self.evaluate(step)
                self.save(step)
            status = "stopped" if self._stop_requested else "finished"
            return self.summary(status)
        except BaseException as exc:  # recorded with the run, so `kitae runs show` says why it crashed
            error = str(exc) if isinstance(exc, KitaeError) else f"{type(exc).__name__}: {exc}"
            raise
        finally:
            self._restore_signal_handlers(old_handlers)
            self.loggers.close()
            if self.store is not None:
                final = self.summary(status) if status != "crashed" else {"status": status, "error": error}
                self.store.finish(status, final)
                self.store.close()

    @staticmethod
    def _due(step: int, every: int) -> bool:
        return every > 0 and step % every == 0

    def _install_signal_handlers(self):
        def request_stop(signum, frame):
            if self._stop_requested:  # a second Ctrl-C stops at once
                raise KeyboardInterrupt
            self._stop_requested = True

        try:
            return {s: signal.signal(s, request_stop) for s in (signal.SIGINT, signal.SIGTERM)}
        except ValueError:  # not the main thread
            return {}

    @staticmethod
    def _restore_signal_handlers(old: dict) -> None:
        for s, h in old.items():
            signal.signal(s, h)

    # ---- one step -----------------------------------------------------------------------------
    def train_step(self, step: int) -> dict[str, float]:
        t0 = time.perf_counter()
        if self.cfg.algorithm.reset_optimizer:
            self.optimizer.state.clear()  # Kimi k1.5: each iteration is a fresh mirror-descent problem
        rows, groups, scores = self._collect(step)
        t_gen = time.perf_counter()
        if not groups:  # partial rollouts: no group finished this iteration
            return self._log_idle_step(step, t0, t_gen)
        completions = [c for g in groups for c in g]
        rewards, valid = self._reward_tensor(scores)
        batch = self._to_batch(completions, rewards, valid, groups)
        adv = batch.advantages.view(len(groups), -1)
        t_prep = time.perf_counter()
        train_metrics = self._optimize(batch)
        self.scheduler.step()
        sync_metrics = self._sync_weights(step)
        t_end = time.perf_counter()
        metrics = {
            **self._reward_metrics(scores, completions),
            **train_metrics,
            **self._mismatch_metrics,
            **sync_metrics,
            **(self.engine.take_stats() if hasattr(self.engine, "take_stats") else {}),
            "kl_coef": self.kl_ctl.value,
            "lr": self.scheduler.get_last_lr()[0],
            "secs_per_step": t_end - t0,
            "secs_generate": t_gen - t0,
            "secs_train": t_end - t_prep,
            "groups": len(groups),
            **({"sampling_rounds": self._rounds} if self.cfg.algorithm.dynamic_sampling.enabled else {}),
            **self._kimi_metrics(scores, completions),
        }
        metrics = {**self._reduce(metrics), **self._reduce(self._grader_counter_metrics(), "sum")}
        if "kl" in metrics and metrics["kl"] is not None:
            self.kl_ctl.update(metrics["kl"], 1)
            self.loss_cfg.kl_coef = self.kl_ctl.value if self.cfg.algorithm.kl.where == "loss" else 0.0
        records = self._group_records(rows, groups, scores, rewards, valid, adv)
        self._log(step, metrics, records)
        self._stop_without_reward(step, metrics["invalid_rate"], scores)
        return metrics

    def _stop_without_reward(self, step: int, invalid_rate: float, scores: list[GroupScores]) -> None:
        """After `algorithm.max_steps_without_reward` steps in a row in which no sample got a reward (a grader
        failing on every sample, a reward server down), save a checkpoint and stop with an error: a run that
        trains on nothing must not end as "finished". `invalid_rate` is the mean over processes, so every
        process decides alike."""
        limit = self.cfg.algorithm.max_steps_without_reward
        count = getattr(self, "_steps_without_reward", 0) + 1 if invalid_rate >= 1.0 else 0
        self._steps_without_reward = count
        if not limit or count < limit:
            return
        self.save(step)
        raise KitaeError(no_reward_message(count, step, last_problems(self.components, scores), self.run_dir))

    def _collect(self, step: int) -> tuple[list[dict], list[list[Completion]], list[GroupScores]]:
        """Prompts, completions and scores for this step (DAPO dynamic sampling when enabled)."""
        if self.partial is not None:
            return self._collect_partial(step)
        o, ds = self.cfg.optim, self.cfg.algorithm.dynamic_sampling
        want = self._local_count(o.prompts_per_step)
        rows: list[dict] = []
        groups: list[list[Completion]] = []
        scores: list[GroupScores] = []
        rounds = ds.max_rounds if ds.enabled else 1
        for r in range(rounds):
            self._rounds = r + 1
            idx = self._local_share(self.sampler.sample(o.prompts_per_step, step))
            new_rows = [self.train_rows[i] for i in idx]
            new_groups = self.engine.generate([x["messages"] for x in new_rows], self.cfg.sampling.group_size, self._sampling(step, r))
            new_scores = self._score(new_rows, new_groups, step)
            self._update_sampler(idx, new_scores)
            last = (new_rows, new_groups, new_scores)
            if ds.enabled:
                rw, vd = self._reward_tensor(new_scores)
                keep = dynamic_sampling_keep(rw, vd).tolist()
                new_rows = [x for x, k in zip(new_rows, keep) if k]
                new_groups = [x for x, k in zip(new_groups, keep) if k]
                new_scores = [x for x, k in zip(new_scores, keep) if k]
            rows, groups, scores = rows + new_rows, groups + new_groups, scores + new_scores
            if self._fewest(len(groups)) >= want:  # every process decides alike: same rounds, same sampler draws
                break
        if not groups:  # every round had zero variance: keep the last round (its advantages are all 0)
            rows, groups, scores = last
        keep = self._fewest(min(len(groups), want))  # processes train on equally many groups (same micro-steps)
        return rows[:keep], groups[:keep], scores[:keep]

    def _fewest(self, n: int) -> int:
        """The smallest ``n`` over all processes (``n`` itself in one process)."""
        if self.acc.num_processes == 1:
            return n
        from accelerate.utils import gather_object

        return min(gather_object([n]))

    def _collect_partial(self, step: int) -> tuple[list[dict], list[list[Completion]], list[GroupScores]]:
        """Kimi partial rollouts: new prompts start, buffered trajectories continue; finished groups come back."""
        idx = self.sampler.sample(self.cfg.optim.prompts_per_step, step)
        prompts = [(i, self.engine.encode_prompt(self.train_rows[i]["messages"])) for i in idx]
        done = self.partial.step(prompts, self.cfg.sampling.group_size, self._sampling(step), step)
        rows = [self.train_rows[i] for i, _ in done]
        groups = [g for _, g in done]
        scores = self._score(rows, groups, step)
        self._update_sampler([i for i, _ in done], scores)
        return rows, groups, scores

    def _pass_rates(self, scores: list[GroupScores]) -> list[float | None]:
        """Per group: the fraction of graded samples whose pass component scored >= the threshold."""
        thr, out = self.cfg.data.sampler.pass_threshold, []
        for gs in scores:
            got = [g.score for g in gs.grades[self.pass_component] if g.score is not None]
            out.append(statistics.fmean(x >= thr for x in got) if got else None)
        return out

    def _update_sampler(self, indices: list[int], scores: list[GroupScores]) -> None:
        if self.pass_component is None:
            return
        pairs = list(zip(indices, self._pass_rates(scores)))
        if self.acc.num_processes > 1:  # every process keeps the same sampler state
            from accelerate.utils import gather_object

            pairs = gather_object(pairs)
        self.sampler.update([i for i, _ in pairs], [r for _, r in pairs])

    def _local_count(self, n: int) -> int:
        return len(range(self.acc.process_index, n, self.acc.num_processes))

    def _local_share(self, idx: list[int]) -> list[int]:
        return idx[self.acc.process_index :: self.acc.num_processes]

    def _sampling(self, step: int, round_: int = 0) -> SamplingParams:
        s = self.cfg.sampling
        seed = (self.cfg.seed * 1_000_003 + step * 7919 + round_ * 104_729 + self.acc.process_index) % (2**31)
        rep = {} if s.repeat is None else {
            "repeat_min_count": s.repeat.min_count, "repeat_max_period": s.repeat.max_period,
            "repeat_min_span": s.repeat.min_span,
        }
        return SamplingParams(s.temperature, s.top_p, s.top_k, s.repetition_penalty, s.max_new_tokens, seed=seed, **rep)

    def _score(self, rows: list[dict], groups: list[list[Completion]], step: int) -> list[GroupScores]:
        max_len = self.cfg.sampling.max_new_tokens
        samples = [[sample_dict(c, max_len, step=step) for c in g] for g in groups]
        return score_groups(self.components, rows, samples)

    @staticmethod
    def _reward_tensor(scores: list[GroupScores]) -> tuple[torch.Tensor, torch.Tensor]:
        """Total rewards [num_groups, G] (0 where invalid) and validity [num_groups, G]; only a finite total is valid."""
        vals = [[math.nan if t is None else t for t in gs.totals] for gs in scores]
        r = torch.tensor(vals, dtype=torch.float32)
        valid = torch.isfinite(r)
        return torch.where(valid, r, torch.zeros_like(r)), valid

    def _to_batch(self, completions, rewards, valid, groups) -> TrainBatch:
        a = self.cfg.algorithm
        counted = [not (a.mask_truncated and c.finish_reason == "length") for c in completions]
        batch = build_batch(completions, [0.0] * len(completions), self.tokenizer.pad_token_id, counted)
        pc = self.cfg.sampling.partial
        if pc is not None and pc.old_segments == "exclude":
            _mask_earlier_segments(batch, completions)
        batch = _to_device(batch, self.acc.device)
        self._mismatch_metrics = self._correct_mismatch(batch) if getattr(self.engine, "remote_logprobs", False) else {}
        if self.ref_model is not None:
            batch.ref_logp = self._ref_logps(batch)
        if self.ref_model is not None and a.kl.where == "reward":
            kl_seq = (kl_estimate(batch.old_logp, batch.ref_logp, a.kl.estimator) * batch.mask).sum(-1)  # [B]
            rewards = rewards - self.kl_ctl.value * kl_seq.view_as(rewards).cpu()
        adv = compute_advantages(a.advantage, rewards, valid)  # [num_groups, G]
        batch.advantages = adv.reshape(-1).to(self.acc.device)
        return batch

    @torch.no_grad()
    def _correct_mismatch(self, batch: TrainBatch) -> dict[str, float]:
        """Server samples (kitae.algorithms.mismatch): the trainer's own log-probs of the sampled tokens, before
        the update and packed into micro-batches as :meth:`_optimize` packs them (every row here; the update
        may leave some out), become the ratio's old log-probs; the server's give the truncated importance
        weights (``algorithm.tis_cap``)."""
        cap = self.cfg.algorithm.tis_cap
        self.model.train()  # as in _optimize: at the first pass the ratio is 1
        own = torch.zeros_like(batch.old_logp)  # [B, L-1]
        for rows, mb in self._micro_batches(batch, list(range(len(batch)))):
            logp = self._logps(mb)[0]  # [b, w-1] of the micro-batch's trimmed rows
            own[rows, : logp.shape[1]] = logp
        metrics = mismatch_metrics(own, batch.old_logp, batch.mask, cap)
        batch.is_weight = tis_weight(own, batch.old_logp, batch.mask, cap) if cap is not None else None
        batch.old_logp = own
        return metrics

    def _sync_weights(self, version: int, force: bool = False) -> dict[str, float]:
        """Push the policy to the rollout servers every ``sampling.sync_every`` steps (or now, with ``force``)
        unless they hold ``version`` already; returns ``sync_secs`` when it pushed."""
        engine = self.engine
        if not hasattr(engine, "sync_weights") or engine.weight_sync is None or engine.version == version:
            return {}
        if not (force or self._due(version, self.cfg.sampling.sync_every)):
            return {}
        t0 = time.perf_counter()
        if self.acc.is_main_process:
            engine.sync_weights(self.policy, version)
        if self.acc.num_processes > 1:  # every process's engine learns what the replicas now hold
            from accelerate.utils import broadcast_object_list

            state = [[(r.synced, r.server_version, r.down_until) for r in engine.replicas]]
            broadcast_object_list(state)
            for r, (synced, server_version, down_until) in zip(engine.replicas, state[0]):
                r.synced, r.server_version, r.down_until = synced, server_version, down_until
            engine.version = version
        return {"sync_secs": time.perf_counter() - t0}

    @torch.no_grad()
    def _ref_logps(self, batch: TrainBatch) -> torch.Tensor:
        temp = self.cfg.sampling.temperature
        out = torch.zeros_like(batch.old_logp)  # [B, L-1]
        for rows in micro_batch_rows(batch, self.cfg.optim.micro_batch_size):
            mb = batch.select(torch.tensor(rows, device=out.device)).trimmed()
            if self.ref_model == "adapter-disabled":
                with self.policy.disable_adapter():
                    logp = token_logps(self.model, mb, temp)[0]
            else:
                logp = token_logps(self.ref_model, mb, temp)[0]
            out[rows, : logp.shape[1]] = logp  # [b, w-1] of the trimmed rows
        return out

    def _optimize(self, batch: TrainBatch) -> dict[str, float]:
        """`mu` optimizer steps over the batch, each accumulating gradients over the micro-batches of
        :meth:`_update_plan` (rows that cannot change the gradient left out)."""
        cfg = self.cfg
        norm, chunks, plan = self._update_plan(batch)
        self.model.train()
        agg: dict[str, float] = {}
        grad_norms = []
        loss_sum = 0.0
        mu = cfg.algorithm.mu
        trained_tokens = max(1.0, sum(float(mb.rows.mask.sum() if isinstance(mb, PackedBatch) else mb.mask.sum())
                                      for mb in chunks))
        for _ in range(mu):
            for i, mb in enumerate(chunks):
                sync = self.acc.no_sync(self.model) if i < len(chunks) - 1 else nullcontext()
                with sync:
                    logp, logits, logits_mask = self._logps(mb)
                    mb = mb.rows if isinstance(mb, PackedBatch) else mb
                    inp = LossInputs(logp, mb.old_logp, mb.advantages, mb.mask, mb.ref_logp, mb.is_weight)
                    loss, m = policy_loss(cfg.algorithm.loss, inp, self.loss_cfg, norm)
                    self.acc.backward(loss)
                loss_sum += float(loss.detach()) / mu  # micro-batch losses sum to the batch loss
                m["entropy"] = float(masked_entropy(logits.detach(), logits_mask))
                tokens = float(mb.mask.sum())
                for k, v in m.items():  # token-weighted mean over the trained rows and passes
                    if k != "num_tokens":
                        agg[k] = agg.get(k, 0.0) + float(v) * tokens / trained_tokens / mu
            if not chunks:  # every row skipped: step with the full batch's gradient, exactly zero
                _zero_grads(self.model)
            grad_norms.append(float(self.acc.clip_grad_norm_(self.model.parameters(), cfg.optim.max_grad_norm)))
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        return {**agg, "loss": loss_sum, "grad_norm": statistics.fmean(grad_norms), **plan}

    def _update_plan(self, batch: TrainBatch) -> tuple[Normalizer, list[PackedBatch | TrainBatch], dict[str, float]]:
        """What the update runs: the Normalizer of the whole batch (every row, skipped or not, over all
        processes: the aggregation divides by the full batch's counts), the micro-batches of the rows that can
        change the gradient, and ``skipped_rows`` and ``pad_frac`` (padding share of the positions the forward
        computes). The samples of one prompt are packed into one sequence that computes their common prefix
        once, where that costs less (kitae.trainer.batch.pack); sequences of similar length share a
        micro-batch. A model whose attention takes no block mask gets rows of similar length, each micro-batch
        trimmed to its longest (kitae.trainer.batch.micro_batches)."""
        local = Normalizer.from_masks([batch.mask])  # sequences with no counted token drop out
        norm = local.over_processes(lambda t: self.acc.reduce(t.to(self.acc.device), "sum"), self.acc.num_processes)
        skip = self._rows_to_skip(batch)  # [B]
        rows = (~skip).nonzero().flatten().tolist()
        if not rows and self.acc.num_processes > 1:  # each process runs a backward, or DDP's all-reduce waits
            rows = [int(batch.attention_mask.sum(dim=-1).argmin())]  # the shortest row; it adds exactly 0
        chunks = [mb for _, mb in self._micro_batches(batch, rows)]
        counts = [mb.padded_tokens() for mb in chunks]  # (positions computed, of them padding) per micro-batch
        computed, padded = sum(c for c, _ in counts), sum(p for _, p in counts)
        stats = {"skipped_rows": float(len(batch) - len(rows)), "pad_frac": padded / computed if computed else 0.0}
        return norm, chunks, stats

    def _micro_batches(self, batch: TrainBatch, rows: list[int]) -> list[tuple[list[int], PackedBatch | TrainBatch]]:
        """``rows`` of ``batch`` as the update's micro-batches, each with the indices of its rows in ``batch``:
        packed by prompt where the model's attention takes a block mask, else rows of similar length."""
        mbs, config = self.cfg.optim.micro_batch_size, self.policy.config
        if _takes_block_masks(config):
            chunks = packed_micro_batches(batch, rows, self.cfg.sampling.group_size, mbs, attention_weight(config))
            return [(mb.index, mb) for mb in chunks]
        runs = micro_batch_rows(batch, mbs, rows)
        return [(r, batch.select(torch.tensor(r, device=batch.input_ids.device)).trimmed()) for r in runs]

    def _logps(self, mb: PackedBatch | TrainBatch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Log-probs [b, L-1] of the micro-batch's rows under the policy, and logits with the mask of the
        tokens they predict (for the entropy)."""
        temp = self.cfg.sampling.temperature
        if isinstance(mb, PackedBatch):
            logp, logits = packed_logps(self.model, mb, temp)  # logits [N, V] of the counted tokens
            return logp, logits, logits.new_ones(logits.shape[0])
        logp, logits = token_logps(self.model, mb, temp)  # logits [b, K, V] of the last K columns
        return logp, logits, mb.mask[:, -logits.shape[1] :]

    def _rows_to_skip(self, batch: TrainBatch) -> torch.Tensor:
        """[B] bool: rows left out of the update (kitae.algorithms.losses.rows_without_gradient). With an
        adaptive KL coefficient, only rows with no counted token: the controller follows the KL of every row."""
        if not self.cfg.optim.skip_zero_advantage:
            return torch.zeros(len(batch), dtype=torch.bool, device=batch.mask.device)
        if self.cfg.algorithm.kl.adaptive is not None:
            return batch.mask.sum(dim=-1) == 0
        return rows_without_gradient(self.cfg.algorithm.loss, batch.advantages, batch.mask, self.loss_cfg)

    # ---- metrics and logging ------------------------------------------------------------------
    def _reward_metrics(self, scores: list[GroupScores], completions: list[Completion]) -> dict[str, float]:
        """Reward statistics of the step. Only finite numbers count (graders abstain on others; should one slip
        through, statistics.pstdev would raise on it at every step, resumed or not)."""
        totals = [t for gs in scores for t in gs.totals]
        valid = [t for t in totals if is_finite_number(t)]
        m: dict[str, float] = {
            "reward": statistics.fmean(valid) if valid else math.nan,
            "reward_std": statistics.pstdev(valid) if len(valid) > 1 else 0.0,
            "len_mean": statistics.fmean(c.num_tokens for c in completions),
            "trunc_rate": statistics.fmean(c.finish_reason == "length" for c in completions),
            "repeat_rate": statistics.fmean(c.finish_reason == "repeat" for c in completions),
            "invalid_rate": 1 - len(valid) / len(totals),
            "zero_var_frac": statistics.fmean(
                len({t for t in gs.totals if t is not None}) <= 1 for gs in scores
            ),
        }
        for comp in self.components:
            grades = [g for gs in scores for g in gs.grades[comp.name]]
            got = [g.score for g in grades if is_finite_number(g.score)]
            m[f"reward/{comp.name}"] = statistics.fmean(got) if got else math.nan
            m[f"grader/{comp.name}/abstain_rate"] = 1 - len(got) / len(grades)
            m[f"grader/{comp.name}/error_rate"] = statistics.fmean(g.error is not None for g in grades)
        return m

    def _kimi_metrics(self, scores: list[GroupScores], completions: list[Completion]) -> dict[str, float]:
        """Pass rate of the sampler's component, and the replay buffer of partial rollouts."""
        m: dict[str, float] = {}
        if self.pass_component is not None:
            rates = [r for r in self._pass_rates(scores) if r is not None]
            m["pass_rate"] = statistics.fmean(rates) if rates else math.nan
        if self.partial is not None:
            m.update(self.partial.stats())
            m["partial/continued_frac"] = statistics.fmean(c.earlier_tokens > 0 for c in completions)
        return m

    def _log_idle_step(self, step: int, t0: float, t_gen: float) -> dict[str, float]:
        """A partial-rollout iteration in which no group finished: nothing to train on; the schedule moves on."""
        with warnings.catch_warnings():  # torch warns when the scheduler steps before any optimizer step
            warnings.simplefilter("ignore", UserWarning)
            self.scheduler.step()
        metrics = {"groups": 0, "lr": self.scheduler.get_last_lr()[0], "secs_per_step": time.perf_counter() - t0,
                   "secs_generate": t_gen - t0, **(self.partial.stats() if self.partial else {})}
        self._log(step, metrics, [])
        return metrics

    def _grader_counter_metrics(self) -> dict[str, float]:
        """This step's change in graders' own counters (judge tokens, reward-model failures, ...)."""
        deltas, self._counters = counter_deltas(self.components, getattr(self, "_counters", {}))
        return deltas

    def _reduce(self, metrics: dict[str, float], op: str = "mean") -> dict[str, float]:
        """Metrics over all processes: means of per-process values, or sums for counters."""
        if self.acc.num_processes == 1 or not metrics:
            return metrics
        keys = sorted(metrics)
        t = torch.tensor([metrics[k] for k in keys], dtype=torch.float64, device=self.acc.device)
        t = self.acc.reduce(t, op)
        return dict(zip(keys, t.tolist()))

    def _group_records(self, rows, groups, scores, rewards, valid, adv) -> list[GroupRecord]:
        out = []
        for gi, (row, group, gs) in enumerate(zip(rows, groups, scores)):
            samples = []
            for si, c in enumerate(group):
                grades = {name: g[si] for name, g in gs.grades.items()}
                samples.append(
                    SampleRecord(
                        text=c.text, completion_tokens=c.num_tokens, finish_reason=c.finish_reason,
                        reward=gs.totals[si], advantage=float(adv[gi, si]),
                        scores={n: g.score for n, g in grades.items()},
                        reasons={n: g.reason for n, g in grades.items()},
                        sub_scores={n: g.sub_scores for n, g in grades.items() if g.sub_scores},
                        errors={n: g.error for n, g in grades.items()},
                    )
                )
            messages, extra = row["messages"], {k: v for k, v in row.items() if k not in ("messages", "reference_answer")}
            if row.get("images"):  # the page shows them from the run's folder (kitae.store.images)
                messages, extra["images"] = self._run_images.stored_row(messages, row["images"])
            user = [content_text(m["content"], _image_mark) for m in messages if m["role"] == "user"]
            out.append(GroupRecord(user[-1] if user else "", messages, row.get("reference_answer"), extra, samples, gi))
        return out

    def _log(self, step: int, metrics: dict[str, float], records: list[GroupRecord]) -> None:
        if self.acc.num_processes > 1:
            from accelerate.utils import gather_object

            records = gather_object(records)
            for i, r in enumerate(records):
                r.group_index = i
        if self.store is not None:
            self.store.log_groups(step, records)
            self.store.log_metrics(step, metrics)
            self.loggers.log(step, metrics)

    # ---- evaluation, checkpoints, summary -------------------------------------------------------
    def evaluate(self, step: int) -> dict[str, float] | None:
        self._sync_weights(step, force=True)  # server engine with sync_every > 1: evaluate this step's policy
        metrics = None
        if self.acc.is_main_process:
            e = self.cfg.eval
            sp = SamplingParams(
                temperature=e.temperature, max_new_tokens=e.max_new_tokens or self.cfg.sampling.max_new_tokens,
                seed=self.cfg.seed + 12345,
            )
            progress = self.on_eval_start(step, len(self.eval_rows)) if self.on_eval_start else None
            t0 = time.perf_counter()
            metrics, samples = evaluate(self._eval_engine(), self.eval_rows, self.eval_grader, e.k, sp,
                                        e.pass_threshold, progress=progress)
            self.store.log_eval(step, metrics, samples)
            self.loggers.log_eval(step, metrics)
            if self.on_eval:
                self.on_eval(step, metrics, time.perf_counter() - t0)
        self.acc.wait_for_everyone()
        return metrics

    def _eval_engine(self):
        """The trainer's policy samples evaluations: through the servers, which hold its weights, unless they are
        frozen (``sampling.sync: none``); then in this process."""
        if getattr(self.engine, "weight_sync", True) is None:
            from kitae.rollout.hf import HFEngine

            return HFEngine(self.policy, self.tokenizer)
        return self.engine

    def save(self, step: int) -> None:
        if self.acc.is_main_process:
            state = {
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(),
                "sampler": self.sampler.state_dict(),
                "partial": self.partial.state_dict() if self.partial is not None else None,
                "kl": self.kl_ctl.state_dict(),
            }
            save_checkpoint(self.run_dir, step, self.policy, self.processor or self.tokenizer, state,
                            self.cfg.logging.keep_checkpoints)
        self.acc.wait_for_everyone()

    def summary(self, status: str) -> dict[str, Any]:
        """Status, steps, latest metrics and the first and latest evaluations."""
        if self.store is None:
            return {"status": status}
        s = self.store.summary()
        keep = ("name", "path", "steps", "metrics", "first_eval", "latest_eval")
        return {"status": status, **{k: s.get(k) for k in keep}}


def _mask_earlier_segments(batch: TrainBatch, completions: list[Completion]) -> None:
    """Partial rollouts, old_segments "exclude": tokens sampled before a trajectory's last segment leave the
    loss (they stay in the input as context)."""
    for i, c in enumerate(completions):
        p = len(c.prompt_ids)
        batch.mask[i, p - 1 : p - 1 + c.earlier_tokens] = 0.0  # [L-1] columns of those tokens


def _takes_block_masks(config) -> bool:
    """Whether the model's attention accepts a 4D boolean mask (sdpa and eager do; flash attention does not)."""
    return getattr(config, "_attn_implementation", None) in (None, "sdpa", "eager")


def _zero_grads(model) -> None:
    """Zero gradients where there are none yet, so that the optimizer steps (momentum, weight decay) as it
    would after a backward whose gradient is all zero."""
    for p in model.parameters():
        if p.requires_grad and p.grad is None:
            p.grad = torch.zeros_like(p)


def _to_device(batch: TrainBatch, device) -> TrainBatch:
    out = TrainBatch(*(t.to(device) if t is not None else None for t in (
        batch.input_ids, batch.attention_mask, batch.mask, batch.old_logp, batch.advantages, batch.ref_logp,
        batch.is_weight)))
    if batch.image_inputs is not None:  # the rows of a group share one dict: move each once
        moved = {id(x): {k: v.to(device) for k, v in x.items()} for x in batch.image_inputs if x is not None}
        out.image_inputs = [moved[id(x)] if x is not None else None for x in batch.image_inputs]
    return out


def _image_mark(part: dict) -> str:
    """How a stored prompt's text shows an image: by its stored file name, so prompts that differ only in
    their picture stay apart ("the same prompt across steps" matches on this text)."""
    return f"[image {str(part.get('image', ''))[:12]}]"
