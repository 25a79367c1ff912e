"""The GRPO training loop: :class:`Trainer` runs a run's steps, evaluations and checkpoints.

One step (:meth:`Trainer.train_step`), stage by stage, each in the module named:

1. sample and grade (kitae.trainer.collect): prompts from a registered sampler (``data.sampler``: uniform,
   prioritized, curriculum), G completions per prompt from the rollout engine, graded by every reward component;
   the sampler is told each prompt's pass rate. DAPO dynamic sampling (``algorithm.dynamic_sampling``) samples
   more rounds until enough groups have reward variance; ``sampling.partial`` swaps whole-trajectory generation
   for Kimi k1.5 partial rollouts (a replay buffer of unfinished groups, kitae.rollout.partial);
   ``sampling.repeat`` ends looping samples early. ``sampling.async`` samples the next steps' groups while this
   step updates, at most ``sampling.max_staleness`` policy versions behind (kitae.trainer.async_pipeline); the step
   logs ``policy_lag`` and ``policy_lag_max``.
2. the training batch, finished in one call (kitae.trainer.update, ``PolicyUpdate.prepare``): old log-probs are
   the sampling policy's, from the engine (the server engine's, and async's, corrected for the sampler
   mismatch); the reference's log-probs when the KL weight is non-zero; the advantages (kitae.trainer.advantages):
   total rewards, less the KL with ``algorithm.kl.where: reward``, turned into group-relative advantages.
3. update (kitae.trainer.update): ``mu`` optimization passes over the batch with the configured policy loss;
   then the engine gets the new weights (kitae.trainer.engine_sync: the rollout servers every
   ``sampling.sync_every`` steps, or async's rollout worker).
4. log (kitae.trainer.metrics, kitae.trainer.run_log): everything the step produced goes to the run store and
   the loggers.

After the step, its health (kitae.trainer.health, one call): the alarms (signs of reward hacking or of a run that
stopped learning, on the run's history kept in memory; each new one is an event, and one of ``alarms.stop_on``
stops the run at a checkpoint, as Ctrl-C does: kitae.trainer.stopping), skipped optimizer steps, steps without a
reward. Between steps: evaluations (kitae.trainer.evaluation) and checkpoints.

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


from kitae.algorithms.losses import LossConfig
from kitae.errors import KitaeError
from kitae.lifetime import die_with_parent
from kitae.rollout.base import RemoteLogprobs
from kitae.store.images import RunImages
from kitae.store.lock import RunLock
from kitae.threads import set_threads
from kitae.agents.engine import environment_component
from kitae.trainer import setup, sharded
from kitae.trainer.alarms import Alarm
from kitae.trainer.async_pipeline import RolloutPipeline
from kitae.trainer.checkpoint import save_checkpoint, set_rng_state
from kitae.trainer.collect import Collected, Rollouts
from kitae.trainer.config import TrainConfig
from kitae.trainer.engine_sync import EngineSync
from kitae.trainer.evaluation import Evaluations
from kitae.trainer.health import RunHealth
from kitae.trainer.loggers import make_loggers
from kitae.trainer.metrics import StepMetrics, group_records, policy_lag
from kitae.trainer.periodic import due
from kitae.trainer.preflight import Checked, preflight
from kitae.trainer.resume import ResumePlan, plan_resume, remove_stale_saves
from kitae.trainer.run_log import RunLog
from kitae.trainer.stopping import StopRequest
from kitae.trainer.update import PolicyUpdate


class Trainer:
    """One run: builds its parts (kitae.trainer.setup) and the owners a step calls, one each (sampling and
    grading, the update, keeping the engine in step, the record, evaluations, stopping); `train()` runs it.

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
        self.eval_rows = checked.eval_rows
        sampler = setup.make_sampler(cfg, checked.train_rows)
        partial = setup.make_partial(cfg, self.engine, self.tokenizer, self.acc.num_processes)
        self.rollouts = Rollouts(cfg, self.acc, self.engine, sampler, partial, checked.train_rows, self.components,
                                 checked.pass_component)
        self.engine_sync = EngineSync(cfg, self.acc, self.engine)
        self.step_metrics = StepMetrics(cfg, self.acc, self.rollouts)
        off_policy = isinstance(self.engine, RemoteLogprobs) or cfg.sampling.async_  # not the trainer's log-probs
        self.update = PolicyUpdate(cfg, self.acc, self.model, self.optimizer, self.ref_model,
                                   self.tokenizer.pad_token_id, off_policy)
        if cfg.sampling.async_:
            self.rollouts.pipeline = self.engine_sync.pipeline = RolloutPipeline.for_run(
                cfg, self.acc, self.rollouts, self.engine_sync.push_to_servers, self.processor)
        self.kl_ctl = setup.make_kl_controller(cfg.algorithm.kl)
        self.loss_config()  # a loss setting that cannot work fails here, not at the first update
        if ckpt:
            self._restore(ckpt.state, self.resume_plan)
            ckpt.state = None  # restored: its tensors are not held twice
        self.store = setup.create_or_trim_store(cfg, self.resume_plan, run_lock) if self.acc.is_main_process else None
        loggers = make_loggers(cfg.logging.report_to if self.store else [], self.run_dir, cfg.to_dict())
        self.run_log = RunLog(self.acc, self.store, loggers)
        self.evaluations = Evaluations(cfg, self.acc, self.model, self.tokenizer, checked.eval_rows,
                                       checked.eval_grader, self.engine_sync, self.run_log)
        self.stop = StopRequest(self.acc)  # a signal, or an alarm of alarms.stop_on, asked the run to stop
        self.final_eval_interrupted = False  # a signal ended the final evaluation early (kitae.trainer.evaluation)
        self.stop_alarm: Alarm | None = None  # the alarm (one of alarms.stop_on) that stopped the run, if one did
        self.health = RunHealth(cfg, self.acc, self.store, self.components, self.start_step, save=self.save,
                                request_stop=self._stop_for_alarm, skipped_total=lambda: self.update.skipped_steps,
                                on_alarm=lambda alarm: self.on_alarm(alarm) if self.on_alarm else None)

    @property
    def stop_signal(self) -> int | None:
        """The signal (SIGINT, SIGTERM) that stopped the run, if one did."""
        return self.stop.signal

    def worker_has_no_core(self) -> bool:
        """For the step line: the rollout worker of ``sampling.async`` shares its cores now (a busy machine)."""
        pipeline = self.rollouts.pipeline
        return pipeline is not None and pipeline.worker_core_problem() is not None

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
        self.rollouts.load_state_dict(state)  # the prompt sampler, the partial-rollout buffer, the steps ahead
        self.engine_sync.load_state_dict(state)
        self.kl_ctl.load_state_dict(state["kl"])
        set_rng_state(state["rng"])
        setup.apply_optim_config(self.optimizer, self.scheduler, self.cfg.optim)
        if plan.changed("algorithm.kl.coef"):
            self.kl_ctl.value = float(self.cfg.algorithm.kl.coef)  # a new coefficient from here on

    # ---- the loop -----------------------------------------------------------------------------
    def train(self) -> dict[str, Any]:
        """Run until `optim.steps`; returns the final summary. Ctrl-C (or SIGTERM) saves and stops cleanly."""
        self.stop.catch_signals()
        status, error = "crashed", None
        try:
            self.engine_sync.sync_weights(self.policy, self.start_step, force=True)  # the servers sample with ours
            if self.start_step == 0 and self.eval_rows:
                self.evaluate(0)
            step, last = self.start_step, self.cfg.optim.steps
            stop = self.stop.agreed()
            while step < last and not stop:
                step += 1
                metrics = self.train_step(step)
                if self.on_step:
                    self.on_step(step, metrics)
                stop = self.stop.agreed()  # every process decides alike, whichever got the signal
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
            self.engine_sync.close()
            self.stop.release_signals()
            crashed = {"status": status, "error": error}
            self.run_log.finish(status, lambda: self.summary(status) if status != "crashed" else crashed, error)

    def _complete(self, step: int) -> bool:
        """Every step is trained and no alarm stopped the run: it finishes, whatever signal comes now (a signal
        during the final evaluation ends that evaluation early, :meth:`evaluate`)."""
        return step >= self.cfg.optim.steps and self.stop_alarm is None

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
            return self._log_idle_step(step, got, t0, t_gen)
        # 2. the training batch: old (mismatch-corrected) and reference log-probs, advantages
        batch, mismatch = self.update.prepare(got.completions, got.scores, self.kl_ctl.value)
        t_prep = time.perf_counter()
        # 3. update, and the engine given the new weights
        trained = self.update.optimize(batch, self.loss_config())
        self._step_scheduler()  # also after a skipped optimizer step: the schedule counts steps, as verl's does
        synced = self.engine_sync.sync_weights(self.policy, step)
        t_end = time.perf_counter()
        # 4. log
        times = {"secs_per_step": t_end - t0, "secs_generate": t_gen - t0, "secs_train": t_end - t_prep}
        lag = policy_lag(got.completions, step)
        metrics = self.step_metrics.of(got, {**trained, **mismatch, **synced, **lag}, times, self.kl_ctl.value,
                                       self.scheduler.get_last_lr()[0])
        if metrics.get("kl") is not None:
            self.kl_ctl.update(metrics["kl"], 1)  # the KL coefficient of the next step
        advantages = batch.advantages.cpu().view(len(got.groups), -1)  # [num_groups, G]
        records = group_records(got.rows, got.groups, got.scores, advantages, self._run_images)
        records = self.run_log.step(step, metrics, records)
        self.health.after_step(step, metrics, records, got, trained)
        return metrics

    def _log_idle_step(self, step: int, got: Collected, t0: float, t_gen: float) -> dict[str, float]:
        """A partial-rollout iteration in which no group finished: nothing to train on; the schedule moves on."""
        self._step_scheduler()
        partial = self.rollouts.partial
        metrics = {"groups": 0, "lr": self.scheduler.get_last_lr()[0], "secs_per_step": time.perf_counter() - t0,
                   "secs_generate": t_gen - t0, **(partial.stats() if partial else {})}
        self.run_log.step(step, metrics, [])
        self.health.after_step(step, metrics, [], got, {})  # remembered for the alarms' history, nothing checked
        return metrics

    def _step_scheduler(self) -> None:
        with warnings.catch_warnings():  # torch warns when the scheduler steps before any optimizer step
            warnings.simplefilter("ignore", UserWarning)
            self.scheduler.step()

    def _stop_for_alarm(self, alarm: Alarm) -> None:
        """An alarm of ``alarms.stop_on`` (kitae.trainer.health) stops the run after this step, at a checkpoint,
        as Ctrl-C does; the first one is the reason the run gives."""
        if self.stop_alarm is None:
            self.stop_alarm, self.stop.requested = alarm, True

    # ---- evaluation, checkpoints, summary -------------------------------------------------------
    def evaluate(self, step: int, final: bool = False) -> dict[str, float] | None:
        """The evaluation of step ``step`` (kitae.trainer.evaluation); ``final``: the one after the last step,
        which a signal ends early."""
        metrics, interrupted = self.evaluations.run(step, final, lambda: self.stop.requested, self.on_eval_start,
                                                    self.on_eval)
        self.final_eval_interrupted = self.final_eval_interrupted or interrupted
        self.health.after_eval(step, metrics)  # the alarms compare evaluations
        return metrics

    def save(self, step: int) -> None:
        """A checkpoint of step `step`: the model, and the optimizer, scheduler, sampler, replay buffer, KL
        controller and random states (kitae.trainer.checkpoint)."""
        weights, optimizer = sharded.checkpoint_state(self.acc, self.model, self.optimizer)  # FSDP: gathered
        if self.acc.is_main_process:
            state = {"optimizer": optimizer, "scheduler": self.scheduler.state_dict(),
                     **self.rollouts.state_dict(), **self.engine_sync.state_dict(), "kl": self.kl_ctl.state_dict()}
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

