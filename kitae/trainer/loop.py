"""The GRPO training loop: :class:`Trainer` runs a run's steps, evaluations and checkpoints.

One step (:meth:`Trainer.train_step`), stage by stage, each in the module named:

1. sample and grade (kitae.trainer.collect): prompts from a registered sampler (``data.sampler``: uniform,
   prioritized, curriculum), G completions per prompt from the rollout engine, graded by every reward component;
   the sampler is told each prompt's pass rate. DAPO dynamic sampling (``algorithm.dynamic_sampling``) samples
   more rounds until enough groups have reward variance; ``sampling.partial`` swaps whole-trajectory generation
   for Kimi k1.5 partial rollouts (a replay buffer of unfinished groups, kitae.rollout.partial);
   ``sampling.repeat`` ends looping samples early. ``sampling.async`` samples the next steps' groups while this
   step updates, at most ``sampling.max_staleness`` policy versions behind (kitae.trainer.pipeline); the step
   logs ``policy_lag`` and ``policy_lag_max``.
2. the training batch (kitae.trainer.update): old log-probs are the sampling policy's, from the engine (the
   server engine's, and async's, corrected for the sampler mismatch); the reference's log-probs when the KL
   weight is non-zero.
3. advantages (kitae.trainer.advantages): total rewards, less the KL with ``algorithm.kl.where: reward``, turned
   into group-relative advantages.
4. update (kitae.trainer.update): ``mu`` optimization passes over the batch with the configured policy loss.
5. log (kitae.trainer.metrics): everything the step produced goes to the run store and the loggers.
6. alarms (kitae.trainer.alarms): signs of reward hacking or of a run that stopped learning, read back from the
   run store; each new one is an event, and one of ``alarms.stop_on`` stops the run at a checkpoint.

Kimi k1.5: ``algorithm.reset_optimizer`` starts each iteration with fresh optimizer state; the reference of the
mirror descent step is the policy that sampled the batch: its log-probs come from the engine as ``old_logp``.

Departures from the papers, all configurable: no reference model unless the KL weight is non-zero (DAPO, Dr.
GRPO and Kimi drop it); a reward of None is masked (TRL's rule). In multi-process runs (accelerate) the loss is
normalized by the whole batch's counts over all processes (as TRL's ``dapo``), so the gradient DDP averages is
the single-process full-batch gradient.

The run's parts are built by kitae.trainer.setup; checkpoints hold everything needed to resume
(kitae.trainer.checkpoint, kitae.trainer.resume).
"""

from __future__ import annotations

import signal
import time
import warnings
from typing import Any, Callable

import torch

from kitae.algorithms.losses import LossConfig
from kitae.errors import ConfigError, KitaeError
from kitae.lifetime import die_with_parent
from kitae.rollout.base import (ContinuesTokens, RemoteLogprobs, ReportsStats, SamplesInWorker, SamplingParams,
                                SyncsWeights)
from kitae.scoring.evaluate import evaluate
from kitae.scoring.rewards import (
    Drought,
    GroupScores,
    component_errors,
    component_message,
    component_warning,
    counter_deltas,
    function_scores,
    last_problems,
    no_reward_message,
    same_score_warning,
)
from kitae.store.images import RunImages
from kitae.store.lock import RunLock
from kitae.threads import available_cpus, load_average, set_threads, worker_core_problem
from kitae.agents.engine import environment_component
from kitae.trainer import setup, sharded
from kitae.trainer.advantages import batch_advantages
from kitae.trainer.alarms import Alarm, RunAlarms
from kitae.trainer.checkpoint import save_checkpoint, set_rng_state
from kitae.trainer.collect import Collected, Rollouts
from kitae.trainer.config import TrainConfig
from kitae.trainer.loggers import make_loggers
from kitae.trainer.metrics import group_records, pass_rate_and_partial_metrics, policy_lag, reward_metrics
from kitae.trainer.periodic import due
from kitae.trainer.pipeline import RolloutPipeline, in_worker
from kitae.trainer.preflight import Checked, preflight
from kitae.trainer.processes import agree_to_stop, gather, reduce_metrics
from kitae.trainer.resume import ResumePlan, plan_resume, remove_stale_saves
from kitae.trainer.update import PolicyUpdate


class Trainer:
    """Owns the model, optimizer, engine, rewards and run store of one run. `train()` runs it.

    ``resume``: go on from the run's newest complete checkpoint (kitae.trainer.resume: what is refused and what
    is recorded); ``allow_config_change`` applies config fields that differ from the run's saved config;
    ``resume_from_scratch`` restarts the run at step 0, keeping its earlier history aside. ``checked``: what
    :func:`kitae.trainer.preflight.preflight` built for `cfg`; run here when not given, so every config, grader,
    data and length error comes before the model loads."""

    # Console hooks (kitae.cli.train sets them): on_step(step, metrics) follows each step; on_eval_start(step,
    # prompts) returns a progress(prompts done) callback for the evaluation's own bar; on_eval(step, metrics,
    # seconds) follows each evaluation.
    on_step: Callable[[int, dict], None] | None = None
    on_eval_start: Callable[[int, int], Callable[[int], None]] | None = None
    on_eval: Callable[[int, dict, float], None] | None = None
    on_alarm: Callable[[Alarm], None] | None = None  # follows each alarm raised (kitae.trainer.alarms)

    def __init__(self, cfg: TrainConfig, resume: bool = False, *, checked: Checked | None = None,
                 allow_config_change: bool = False, resume_from_scratch: bool = False):
        from accelerate.utils import set_seed

        checked = checked or preflight(cfg)
        self.cfg = cfg
        self.acc = setup.make_accelerator(cfg)  # on CUDA when there is one; model.dtype's mixed precision
        setup.check_distributed(self.acc, cfg)  # DeepSpeed and FSDP1 refused before the model loads
        if self.acc.num_processes > 1:  # a rank of `accelerate launch`: it ends with the launcher
            die_with_parent(signal.SIGKILL)
        set_seed(cfg.seed)
        set_threads(cfg.threads, checked.model_path, option="threads")  # threads: N, else the rule for the model's size
        self.run_dir = cfg.run_dir
        # one writer per run (kitae.store.lock), taken before a checkpoint is looked for; the store holds it
        run_lock = RunLock.acquire(self.run_dir) if self.acc.is_main_process else None
        try:
            if resume and run_lock is not None:  # also when the resume is refused below
                remove_stale_saves(self.run_dir)
            self._build(cfg, resume, checked, allow_config_change, resume_from_scratch, run_lock)
        except BaseException:
            if run_lock is not None:
                run_lock.release()
            raise

    def _build(self, cfg: TrainConfig, resume: bool, checked: Checked, allow_config_change: bool,
               resume_from_scratch: bool, run_lock: RunLock | None) -> None:
        # before the model loads: a resume that cannot go on as asked fails in seconds, naming why
        self.resume_plan = plan_resume(cfg, allow_config_change, resume_from_scratch) if resume else None
        ckpt = self.resume_plan.checkpoint if self.resume_plan else None
        self.start_step = ckpt.step if ckpt else 0
        self.tokenizer = checked.tokenizer
        self.processor = checked.processor  # vision-language models; None for text
        self._run_images = RunImages(self.run_dir)
        self.model_path = checked.model_path  # the base: checkpoints keep its tokenizer files and name it
        model = setup.load_policy(cfg.model, checked.model_path, ckpt.path / "model" if ckpt else None,
                                  cuda=self.acc.device.type == "cuda", device=self.acc.device)
        self.ref_model = setup.load_reference(cfg, checked.model_path, self.acc.device)
        optimizer, self.scheduler = setup.make_optimizer(model, cfg.optim)
        self.model, self.optimizer = self.acc.prepare(model, optimizer)
        self.engine = setup.make_engine(cfg, self.policy, self.tokenizer, self.processor, checked.servers)
        self.components = checked.components + setup.repeat_component(cfg) + environment_component(cfg, self.engine)
        self.eval_grader, self.eval_rows = checked.eval_grader, checked.eval_rows
        sampler = setup.make_sampler(cfg, checked.train_rows)
        partial = setup.make_partial(cfg, self.engine, self.tokenizer, self.acc.num_processes)
        self.rollouts = Rollouts(cfg, self.acc, self.engine, sampler, partial, checked.train_rows, self.components,
                                 checked.pass_component)
        self.update = PolicyUpdate(cfg, self.acc, self.model, self.optimizer, self.ref_model,
                                   self.tokenizer.pad_token_id)
        if cfg.sampling.async_:
            self.rollouts.pipeline = self._async_pipeline()
        self.kl_ctl = setup.make_kl_controller(cfg.algorithm.kl)
        self.loss_config()  # a loss setting that cannot work fails here, not at the first update
        if ckpt:
            self._restore(ckpt.state, self.resume_plan)
            ckpt.state = None  # restored: its tensors are not held twice
        self.store = setup.create_or_trim_store(cfg, self.resume_plan, run_lock) if self.acc.is_main_process else None
        self.loggers = make_loggers(cfg.logging.report_to if self.store else [], self.run_dir, cfg.to_dict())
        self._stop_requested = False
        self.final_eval_interrupted = False  # a signal ended the final evaluation early (see evaluate)
        self._drought = Drought([c.name for c in self.components])  # steps in a row without a finite score
        self.stop_signal: int | None = None  # the signal (SIGINT, SIGTERM) that stopped the run, if one did
        self.stop_alarm: Alarm | None = None  # the alarm (one of alarms.stop_on) that stopped the run, if one did
        weights = {r.name: r.weight for r in cfg.rewards}
        self.alarms = RunAlarms(self.store, cfg.alarms, weights) if self.store is not None else None
        self._counters: dict[str, float] = {}  # graders' own counters (judge tokens, ...) at the last step

    def _async_pipeline(self) -> RolloutPipeline:
        """``sampling.async``'s pipeline (kitae.trainer.pipeline). The in-process engine's rollout worker and the
        trainer split the torch threads the trainer was given (at least one each)."""
        where = "sampling.async"
        if self.acc.num_processes > 1:
            raise ConfigError(where, f"runs in one training process; this run has {self.acc.num_processes} "
                              "(accelerate): set async: false, or train in one process")
        if self.processor is not None:
            raise ConfigError(where, "does not sample image prompts (a vision-language model); set async: false")
        name = self.cfg.sampling.engine.type
        if not isinstance(self.engine, ContinuesTokens):
            raise ConfigError(where, f"samples from token ids, which the {name} engine does not "
                              "(kitae.rollout.base.ContinuesTokens); set async: false")
        if not isinstance(self.engine, (SamplesInWorker, SyncsWeights)):
            raise ConfigError(where, f"the {name} engine ({type(self.engine).__name__}) can neither be built in the "
                              "rollout worker over its own copy of the policy (kitae.rollout.base.SamplesInWorker) "
                              "nor take the policy's weights (SyncsWeights, whose requests are sent from a "
                              "background thread); set async: false, or give the engine one of them")
        # mu 1: the update's one forward gives the old log-probs and the weights (no forward more per step)
        self.update.in_pass_correction = self.cfg.algorithm.mu == 1
        threads = max(1, torch.get_num_threads() // 2)
        if in_worker(self.engine):
            torch.set_num_threads(threads)  # the other half is the rollout worker's
        pipeline = RolloutPipeline(self.rollouts, threads)
        if self.acc.is_main_process and (problem := self._worker_core_problem(pipeline, running=False)):
            warnings.warn(f"sampling.async: the rollout worker has no core of its own ({problem}), so sampling "
                          "and the update take turns: async is slower than sync here (docs/performance.md). Set "
                          "sampling.async: false, or train on a machine with free cores", stacklevel=2)
        return pipeline

    def _worker_core_problem(self, pipeline: RolloutPipeline | None = None, running: bool = True) -> str | None:
        """Why the rollout worker of ``sampling.async`` has no core of its own now, or None (also without one).
        ``running``: the trainer and the worker are busy, so the load average holds their threads."""
        pipeline = pipeline or self.rollouts.pipeline
        if pipeline is None or not in_worker(self.engine):
            return None
        trainer, worker = torch.get_num_threads(), pipeline.threads
        return worker_core_problem(available_cpus(), load_average(), trainer, worker,
                                   own=trainer + worker if running else 1.0)

    def worker_has_no_core(self) -> bool:
        """For the step line: the rollout worker of ``sampling.async`` shares its cores now (a busy machine)."""
        return self._worker_core_problem() is not None

    @property
    def policy(self):
        return self.acc.unwrap_model(self.model) if hasattr(self, "model") else None

    def loss_config(self) -> LossConfig:
        """The policy loss's settings now: the KL controller's coefficient when the KL is in the loss."""
        in_loss = self.cfg.algorithm.kl.where == "loss"
        return self.cfg.loss_config(self.kl_ctl.value if in_loss else 0.0)

    def _restore(self, state: dict[str, Any], plan: ResumePlan) -> None:
        sharded.load_optimizer_state(self.acc, self.model, self.optimizer, state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.rollouts.load_state_dict(state)  # the prompt sampler and the partial-rollout buffer
        self.kl_ctl.load_state_dict(state["kl"])
        set_rng_state(state["rng"])
        setup.apply_optim_config(self.optimizer, self.scheduler, self.cfg.optim)
        if plan.changed("algorithm.kl.coef"):
            self.kl_ctl.value = float(self.cfg.algorithm.kl.coef)  # a new coefficient from here on

    # ---- the loop -----------------------------------------------------------------------------
    def train(self) -> dict[str, Any]:
        """Run until `optim.steps`; returns the final summary. Ctrl-C (or SIGTERM) saves and stops cleanly."""
        old_handlers = self._install_signal_handlers()
        status, error = "crashed", None
        try:
            self.rollouts.sync_weights(self.policy, self.start_step, force=True)  # the servers sample with our weights
            if self.start_step == 0 and self.eval_rows:
                self.evaluate(0)
            step, last = self.start_step, self.cfg.optim.steps
            stop = self._agreed_stop()
            while step < last and not stop:
                step += 1
                metrics = self.train_step(step)
                if self.on_step:
                    self.on_step(step, metrics)
                stop = self._agreed_stop()  # every process decides alike, whichever got the signal
                if due(step, self.cfg.eval.every) and step != last and self.eval_rows:
                    self.evaluate(step)
                if (due(step, self.cfg.logging.save_every) or stop) and not self._complete(step):
                    self.save(step)
            if self._complete(step):  # the final evaluation (a signal ends it early) and checkpoint
                if self.eval_rows:
                    self.evaluate(step, final=True)
                self.save(step)
            status = "finished" if self._complete(step) else "stopped"
            return self.summary(status)
        except BaseException as exc:  # recorded with the run, so `kitae runs show` says why it crashed
            error = str(exc) if isinstance(exc, KitaeError) else f"{type(exc).__name__}: {exc}"
            raise
        finally:
            self.rollouts.close()  # the rollout worker of sampling.async
            for s, h in old_handlers.items():
                signal.signal(s, h)
            self.loggers.close()
            if self.store is not None:
                final = self.summary(status) if status != "crashed" else {"status": status, "error": error}
                try:
                    self.store.finish(status, final)
                except KitaeError:  # a full disk: the error that stopped the run is the one to see
                    if error is None:
                        raise
                finally:
                    self.store.close()  # and lets the run's lock go

    def _complete(self, step: int) -> bool:
        """Every step is trained and no alarm stopped the run: it finishes, whatever signal comes now (a signal
        during the final evaluation ends that evaluation early, :meth:`evaluate`)."""
        return step >= self.cfg.optim.steps and self.stop_alarm is None

    def _agreed_stop(self) -> bool:
        """Whether to stop after this step: asked (a signal, an alarm of ``alarms.stop_on``) in any process. A
        collective call in multi-process runs: a signal to one rank alone (``kill PID``) stops them all at the
        same step, where each deciding alone would leave the others waiting in a collective call."""
        stop, signum = agree_to_stop(self.acc, self.stop_signal, self._stop_requested)
        if stop:  # a signal that came after the agreement counts at the next step
            self._stop_requested, self.stop_signal = True, self.stop_signal or signum
        return stop

    def _install_signal_handlers(self) -> dict:
        def request_stop(signum, frame):
            if self._stop_requested:  # a second Ctrl-C stops at once
                raise KeyboardInterrupt
            self._stop_requested, self.stop_signal = True, signum

        try:
            return {s: signal.signal(s, request_stop) for s in (signal.SIGINT, signal.SIGTERM)}
        except ValueError:  # not the main thread
            return {}

    # ---- one step -----------------------------------------------------------------------------
    def train_step(self, step: int) -> dict[str, float]:
        """One iteration: sample and grade groups of completions, turn their rewards into advantages, update the
        policy, log. Returns the step's metrics."""
        t0 = time.perf_counter()
        if self.cfg.algorithm.reset_optimizer:
            self.optimizer.state.clear()  # Kimi k1.5: each iteration is a fresh mirror-descent problem
        # 1. sample and grade
        with sharded.full_weights(self.acc, self.model):  # FSDP: each process samples with the whole policy
            got = self.rollouts.sample_grade_and_tell_sampler(step)
        t_gen = time.perf_counter()
        if not got.groups:  # partial rollouts: no group finished this iteration
            return self._log_idle_step(step, t0, t_gen)
        # 2. the training batch: the sampler's log-probs (corrected for a server's mismatch), the reference's
        batch = self.update.batch_before_advantages(got.completions)  # [B, L] on the device
        # the sampler's log-probs are not the trainer's: a server's kernels, or async's older weights
        off_policy = isinstance(self.engine, RemoteLogprobs) or self.cfg.sampling.async_
        mismatch = self.update.correct_mismatch(batch) if off_policy and not self.update.in_pass_correction else {}
        if self.ref_model is not None:
            batch.ref_logp = self.update.reference_logps(batch)  # [B, L-1]
        # 3. advantages
        advantages = batch_advantages(got.scores, batch, self.cfg.algorithm, self.kl_ctl.value)  # [B]
        batch.advantages = advantages.to(self.acc.device)
        t_prep = time.perf_counter()
        # 4. update
        trained = self.update.optimize(batch, self.loss_config())
        self._step_scheduler()  # also after a skipped optimizer step: the schedule counts steps, as verl's does
        synced = self.rollouts.sync_weights(self.policy, step)
        t_end = time.perf_counter()
        # 5. log
        times = {"secs_per_step": t_end - t0, "secs_generate": t_gen - t0, "secs_train": t_end - t_prep}
        lag = policy_lag(got.completions, step)
        metrics = self._step_metrics(got, {**trained, **mismatch, **synced, **lag}, times)
        if metrics.get("kl") is not None:
            self.kl_ctl.update(metrics["kl"], 1)  # the KL coefficient of the next step
        records = group_records(got.rows, got.groups, got.scores, advantages.view(len(got.groups), -1),
                                self._run_images)
        self._log(step, metrics, records)
        self._check_alarms(step)
        self._record_skipped_steps(step, trained)
        self._watch_rewards(step, metrics, got)
        return metrics

    def _step_metrics(self, got: Collected, trained: dict[str, float], times: dict[str, float]) -> dict[str, float]:
        """The step's metrics over all processes: rewards, the update's (and the mismatch and weight sync's),
        the engine's own, the KL coefficient and lr, timings, pass rate and partial rollouts, grader counters."""
        completions = got.completions
        metrics = {
            **reward_metrics(self.components, got.scores, completions),
            **trained,
            **(self.engine.take_stats() if isinstance(self.engine, ReportsStats) else {}),
            "kl_coef": self.kl_ctl.value,
            "lr": self.scheduler.get_last_lr()[0],
            **times,
            "groups": len(got.groups),
            **({"sampling_rounds": got.rounds} if self.cfg.algorithm.dynamic_sampling.enabled else {}),
            **pass_rate_and_partial_metrics(got.scores, completions, self.rollouts.pass_component,
                                            self.cfg.data.sampler.pass_threshold, self.rollouts.partial),
        }
        counters, self._counters = counter_deltas(self.components, self._counters)  # this step's change
        return {**reduce_metrics(self.acc, metrics), **reduce_metrics(self.acc, counters, "sum")}

    def _log_idle_step(self, step: int, t0: float, t_gen: float) -> dict[str, float]:
        """A partial-rollout iteration in which no group finished: nothing to train on; the schedule moves on."""
        self._step_scheduler()
        partial = self.rollouts.partial
        metrics = {"groups": 0, "lr": self.scheduler.get_last_lr()[0], "secs_per_step": time.perf_counter() - t0,
                   "secs_generate": t_gen - t0, **(partial.stats() if partial else {})}
        self._log(step, metrics, [])
        return metrics

    def _step_scheduler(self) -> None:
        with warnings.catch_warnings():  # torch warns when the scheduler steps before any optimizer step
            warnings.simplefilter("ignore", UserWarning)
            self.scheduler.step()

    def _log(self, step: int, metrics: dict[str, float], records: list) -> None:
        """The step's metrics and groups (every process's) into the run store and the loggers."""
        if self.acc.num_processes > 1:
            records = gather(self.acc, records)
            for i, r in enumerate(records):
                r.group_index = i
        if self.store is not None:
            self.store.log_groups(step, records)
            self.store.log_metrics(step, metrics)
            self.loggers.log(step, metrics)

    def _check_alarms(self, step: int) -> None:
        """The run's alarms after the step is logged (kitae.trainer.alarms, main process): each new one is an event
        and goes to the console; one of ``alarms.stop_on`` stops the run after this step, at a checkpoint, as
        Ctrl-C does. Every process learns whether to stop."""
        raised = self.alarms.check(step) if self.alarms is not None else []
        for alarm in raised:
            if self.on_alarm:
                self.on_alarm(alarm)
        stop = next((a for a in raised if a.kind in self.cfg.alarms.stop_on), None)
        if self.cfg.alarms.stop_on and self.acc.num_processes > 1:
            stop = next((a for a in gather(self.acc, [stop]) if a is not None), None)
        if stop is not None and self.stop_alarm is None:
            self.stop_alarm, self._stop_requested = stop, True

    def _record_skipped_steps(self, step: int, trained: dict[str, float]) -> None:
        """An optimizer step skipped for a gradient norm that was not finite (kitae.trainer.update) is an event
        of the run: it says the step's batch did not train."""
        skipped = int(trained.get("skipped_steps", 0))
        if skipped and self.store is not None:
            self.store.log_event(step, "step_skipped", f"{skipped} of {self.cfg.algorithm.mu} optimizer step(s) "
                                 f"skipped: the gradient norm was not finite ({trained['grad_norm']}); the weights "
                                 "were left as they were", {"skipped_steps": skipped,
                                                            "total": self.update.skipped_steps})

    def _watch_rewards(self, step: int, metrics: dict[str, float], got: Collected) -> None:
        """Stop (a checkpoint saved, an error raised) after `algorithm.max_steps_without_reward` steps in a row in
        which no sample got a reward (a grader failing on every sample, a reward server down), or in which one
        component gave no sample a finite score (a reward function that fails on every sample: the run trained
        on the others alone); `algorithm.component_without_reward: warn` only warns for the latter. A run that
        trains on nothing, or not on what was asked, must not end as "finished". Warns at the first step a
        component has no finite score, and at the run's first step when a reward function gives every sample
        the same score. The rates are means over processes, so every process decides alike."""
        a = self.cfg.algorithm
        limit = a.max_steps_without_reward or 0
        dry = {c.name: metrics[f"grader/{c.name}/abstain_rate"] >= 1.0 for c in self.components}
        first_dry = self._drought.update(metrics["invalid_rate"] >= 1.0, dry)
        if limit and self._drought.no_reward >= limit:
            self.save(step)
            raise KitaeError(no_reward_message(self._drought.no_reward, step,
                                               last_problems(self.components, got.scores), self.run_dir))
        name, steps = self._drought.longest()
        if limit and steps >= limit and a.component_without_reward == "stop":
            self.save(step)
            raise KitaeError(component_message(name, steps, step, component_errors(name, got.scores), self.run_dir))
        if self.acc.is_main_process:
            for name in first_dry:
                warnings.warn(component_warning(name, step, component_errors(name, got.scores), limit,
                                                a.component_without_reward), stacklevel=2)
        if step == self.start_step + 1:
            self._warn_same_scores(step, got)

    def _warn_same_scores(self, step: int, got: Collected) -> None:
        """A reward function that gave every sample of the step (all processes) one score reads its input wrong,
        often: for chat prompts TRL's completions are message lists, not strings."""
        values: dict[str, set[float]] = {}
        scored: dict[str, int] = {}
        for per_process in gather(self.acc, [function_scores(self.components, got.scores)]):
            for name, (distinct, n) in per_process.items():
                values.setdefault(name, set()).update(distinct)
                scored[name] = scored.get(name, 0) + n
        row = got.rows[0]
        conversational = isinstance(row.get("prompt", row.get("messages")), list)
        for name, seen in values.items():
            if len(seen) == 1 and scored[name] > 1 and self.acc.is_main_process:
                warnings.warn(same_score_warning(name, next(iter(seen)), step, conversational), stacklevel=2)

    # ---- evaluation, checkpoints, summary -------------------------------------------------------
    def evaluate(self, step: int, final: bool = False) -> dict[str, float] | None:
        """Pass@1 and the eval grader's metrics on the eval rows (main process), stored and logged. ``final``: the
        evaluation after the last step, which a signal ends early (after the batch of prompts it is in): the run
        is trained and saved, so it finishes without this evaluation, an ``eval_interrupted`` event says so, and
        ``kitae train --resume`` runs it. Other evaluations run to their end before the run stops."""
        self.rollouts.sync_weights(self.policy, step, force=True)  # sync_every > 1: evaluate this step's policy
        with sharded.full_weights(self.acc, self.model):  # FSDP: the main process samples alone
            try:
                metrics = self._evaluate_main(step, final)
            except _EvalInterrupted:
                metrics = None
                self.final_eval_interrupted = True
                self.store.log_event(step, "eval_interrupted", f"the final evaluation at step {step} was stopped "
                                     "by a signal; the run is trained and saved. `kitae train --resume` runs it")
        self.acc.wait_for_everyone()
        return metrics

    def _evaluate_main(self, step: int, final: bool = False) -> dict[str, float] | None:
        metrics = None
        if self.acc.is_main_process:
            e = self.cfg.eval
            sp = SamplingParams(
                temperature=e.temperature, max_new_tokens=e.max_new_tokens or self.cfg.sampling.max_new_tokens,
                seed=self.cfg.seed + 12345,
            )
            shown = self.on_eval_start(step, len(self.eval_rows)) if self.on_eval_start else None

            def progress(done: int) -> None:
                if shown:
                    shown(done)
                if final and self._stop_requested and done < len(self.eval_rows):  # a whole one is kept
                    raise _EvalInterrupted

            t0 = time.perf_counter()
            metrics, samples = evaluate(self.rollouts.eval_engine(self.policy, self.tokenizer), self.eval_rows,
                                        self.eval_grader, e.k, sp, e.pass_threshold, progress=progress,
                                        think=e.think)
            self.store.log_eval(step, metrics, samples)
            self.loggers.log_eval(step, metrics)
            if self.on_eval:
                self.on_eval(step, metrics, time.perf_counter() - t0)
        return metrics

    def save(self, step: int) -> None:
        """A checkpoint of step `step`: the model, and the optimizer, scheduler, sampler, replay buffer, KL
        controller and random states (kitae.trainer.checkpoint)."""
        weights, optimizer = sharded.checkpoint_state(self.acc, self.model, self.optimizer)  # FSDP: gathered
        if self.acc.is_main_process:
            state = {"optimizer": optimizer, "scheduler": self.scheduler.state_dict(),
                     **self.rollouts.state_dict(), "kl": self.kl_ctl.state_dict()}
            save_checkpoint(self.run_dir, step, self.policy, self.processor or self.tokenizer, state,
                            self.cfg.logging.keep_checkpoints, weights, self.model_path, self.cfg.model.quantization)
        self.acc.wait_for_everyone()

    def summary(self, status: str) -> dict[str, Any]:
        """Status, steps, latest metrics and the first and latest evaluations."""
        if self.store is None:
            return {"status": status}
        s = self.store.summary()
        keep = ("name", "path", "steps", "metrics", "first_eval", "latest_eval")
        out = {"status": status, **{k: s.get(k) for k in keep}}
        if self.stop_alarm is not None:  # `kitae runs show` says why the run stopped
            a = self.stop_alarm
            out["stopped_by"] = {"alarm": a.kind, "subject": a.subject, "step": a.step, "message": a.message}
        return out


class _EvalInterrupted(Exception):
    """A signal came during the final evaluation (:meth:`Trainer.evaluate`)."""
