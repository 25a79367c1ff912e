"""A run's evaluations (``eval``): pass@1 and the eval grader's metrics on the eval rows (kitae.scoring.evaluate),
sampled by the main process with the policy of the step (the engine brought in step first, kitae.trainer.
engine_sync), stored with the run and logged. The final evaluation, after the last step, is the one a signal may
end early: the run is trained and saved by then, so it finishes without it, an ``eval_interrupted`` event says
so, and ``kitae train --resume`` runs it."""

from __future__ import annotations

import time
from typing import Callable

from kitae.rollout.base import SamplingParams
from kitae.scoring.evaluate import evaluate
from kitae.trainer import sharded
from kitae.trainer.config import TrainConfig
from kitae.trainer.engine_sync import EngineSync
from kitae.trainer.run_log import RunLog


class Evaluations:
    """Evaluates ``model`` (as accelerate prepared it) on the run's eval ``rows`` with its eval ``grader``; the
    results go to the run's record (kitae.trainer.run_log, main process)."""

    def __init__(self, cfg: TrainConfig, acc, model, tokenizer, rows: list[dict], grader, engine_sync: EngineSync,
                 run_log: RunLog):
        self.cfg, self.acc, self.model, self.tokenizer = cfg, acc, model, tokenizer
        self.rows, self.grader, self.engine_sync, self.run_log = rows, grader, engine_sync, run_log

    def run(self, step: int, final: bool, stop_requested: Callable[[], bool],
            on_start: Callable[[int, int], Callable[[int], None]] | None = None,
            on_done: Callable[[int, dict, float], None] | None = None) -> tuple[dict[str, float] | None, bool]:
        """(the evaluation's metrics, or None where this process did not evaluate or a signal ended it; whether a
        signal ended it). ``final``: ``stop_requested()`` ends it after the batch of prompts it is in. The console
        hooks: ``on_start(step, prompts)`` returns a progress(prompts done) callback; ``on_done(step, metrics,
        seconds)`` follows the evaluation."""
        policy = self.acc.unwrap_model(self.model)
        self.engine_sync.sync_weights(policy, step, force=True)  # sync_every > 1: evaluate this step's policy
        interrupted = False
        with sharded.full_weights(self.acc, self.model):  # FSDP: the main process samples alone
            try:
                metrics = self._main(step, policy, final, stop_requested, on_start, on_done)
            except _EvalInterrupted:
                metrics, interrupted = None, True
                self.run_log.event(step, "eval_interrupted", f"the final evaluation at step {step} was stopped "
                                   "by a signal; the run is trained and saved. `kitae train --resume` runs it")
        self.acc.wait_for_everyone()
        return metrics, interrupted

    def _main(self, step: int, policy, final: bool, stop_requested: Callable[[], bool], on_start, on_done):
        if not self.acc.is_main_process:
            return None
        e = self.cfg.eval
        sp = SamplingParams(
            temperature=e.temperature, max_new_tokens=e.max_new_tokens or self.cfg.sampling.max_new_tokens,
            seed=self.cfg.seed + 12345,
        )
        shown = on_start(step, len(self.rows)) if on_start else None

        def progress(done: int) -> None:
            if shown:
                shown(done)
            if final and stop_requested() and done < len(self.rows):  # a whole one is kept
                raise _EvalInterrupted

        t0 = time.perf_counter()
        metrics, samples = evaluate(self.engine_sync.eval_engine(policy, self.tokenizer), self.rows, self.grader,
                                    e.k, sp, e.pass_threshold, progress=progress, think=e.think)
        self.run_log.eval(step, metrics, samples)
        if on_done:
            on_done(step, metrics, time.perf_counter() - t0)
        return metrics


class _EvalInterrupted(Exception):
    """A signal came during the final evaluation (:meth:`Evaluations.run`)."""
