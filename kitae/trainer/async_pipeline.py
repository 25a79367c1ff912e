"""Async rollouts (``sampling.async: true``): the next steps' groups are sampled while this step updates.

The schedule, with k = ``sampling.max_staleness`` and policy version v = optimizer steps taken:

- at the start (version v0 = the step the run starts from), steps v0+1 .. v0+1+k are submitted;
- after step s updates, its weights (version s) are pushed and step s+1+k is submitted.

So step t samples with version max(v0, t-1-k) and is trained by policy version t-1: its lag, t-1 minus the
version that sampled it, is at most k (exactly k once the pipeline is full). Prompts are drawn when a step is
submitted, after the pass rates of every step graded so far reached the prompt sampler; a step's samples are
graded (and the sampler told) at that step. Dynamic sampling's further rounds are sampled at their step with the
newest pushed weights (lag 0). The order of pushes and jobs alone decides which weights sample which step
(kitae.rollout.async_runners), so the schedule does not depend on timing.

Checkpoints: a checkpoint of step s holds the groups of the steps already submitted (s+1 .. s+1+k; the save
waits for them), so a resumed run trains on exactly the samples the uninterrupted run would have: no step is
lost or repeated.

Built for a run by :meth:`RolloutPipeline.for_run`: refused where it cannot run (several training processes, image
prompts, an engine that does not sample from token ids), the torch threads split with the rollout worker.

The update treats the samples as off-policy (kitae.trainer.update): the trainer's log-probs before the update are
the ratio's old log-probs, and the sampler's give truncated importance weights (kitae.algorithms.mismatch).
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from typing import Any, Callable

import torch

from kitae.errors import ConfigError
from kitae.rollout.async_runners import Runner, ThreadRunner, WorkerRunner
from kitae.rollout.base import Completion, ContinuesTokens, RolloutEngine, SamplesInWorker, SyncsWeights
from kitae.threads import available_cpus, load_average, worker_core_problem


def in_worker(engine: RolloutEngine) -> bool:
    """Whether ``engine``'s rollouts run in a rollout worker process with a copy of the policy (it samples with
    the trainer's own model and can be built over a copy, kitae.rollout.base.SamplesInWorker); one that syncs
    weights (the servers) has its requests sent from a background thread, and gets the weights pushed."""
    return isinstance(engine, SamplesInWorker)


@dataclasses.dataclass
class Ahead:
    """A step submitted ahead: its prompts (indices into the rows) and its job, or its groups once they came."""

    indices: list[int]
    ticket: int | None = None
    groups: list[list[Completion]] | None = None


class RolloutPipeline:
    """The schedule of the module docstring over ``rollouts`` (kitae.trainer.collect.Rollouts).
    ``push_to_servers(policy, version)`` takes the weights to an engine that syncs them (the rollout servers;
    kitae.trainer.engine_sync.EngineSync.push_to_servers); an in-process engine samples in a rollout worker with
    ``threads`` torch threads."""

    def __init__(self, rollouts: Any, push_to_servers: Callable[[Any, int], Any], threads: int = 1):
        self.rollouts, self.push_to_servers, self.threads = rollouts, push_to_servers, threads
        self.k = rollouts.cfg.sampling.max_staleness
        self.runner: Runner | None = None
        self.version: int | None = None
        self.ahead: dict[int, Ahead] = {}
        self.next_step: int | None = None  # the first step not submitted yet

    @classmethod
    def for_run(cls, cfg: Any, acc: Any, rollouts: Any, push_to_servers: Callable[[Any, int], Any],
                processor: Any) -> "RolloutPipeline":
        """``sampling.async``'s pipeline for a run, refused (ConfigError) where it cannot run. The in-process
        engine's rollout worker and the trainer split the torch threads the trainer was given (at least one
        each); a warning when the worker has no core of its own."""
        where, engine = "sampling.async", rollouts.engine
        if acc.num_processes > 1:
            raise ConfigError(where, f"runs in one training process; this run has {acc.num_processes} "
                              "(accelerate): set async: false, or train in one process")
        if processor is not None:
            raise ConfigError(where, "does not sample image prompts (a vision-language model); set async: false")
        name = cfg.sampling.engine.type
        if not isinstance(engine, ContinuesTokens):
            raise ConfigError(where, f"samples from token ids, which the {name} engine does not "
                              "(kitae.rollout.base.ContinuesTokens); set async: false")
        if not isinstance(engine, (SamplesInWorker, SyncsWeights)):
            raise ConfigError(where, f"the {name} engine ({type(engine).__name__}) can neither be built in the "
                              "rollout worker over its own copy of the policy (kitae.rollout.base.SamplesInWorker) "
                              "nor take the policy's weights (SyncsWeights, whose requests are sent from a "
                              "background thread); set async: false, or give the engine one of them")
        threads = max(1, torch.get_num_threads() // 2)
        if in_worker(engine):
            torch.set_num_threads(threads)  # the other half is the rollout worker's
        pipeline = cls(rollouts, push_to_servers, threads)
        if acc.is_main_process and (problem := pipeline.worker_core_problem(running=False)):
            warnings.warn(f"sampling.async: the rollout worker has no core of its own ({problem}), so sampling "
                          "and the update take turns: async is slower than sync here (docs/performance.md). Set "
                          "sampling.async: false, or train on a machine with free cores", stacklevel=2)
        return pipeline

    def worker_core_problem(self, running: bool = True) -> str | None:
        """Why the rollout worker has no core of its own now, or None (also without a worker: the servers').
        ``running``: the trainer and the worker are busy, so the load average holds their threads."""
        if not in_worker(self.rollouts.engine):
            return None
        trainer, worker = torch.get_num_threads(), self.threads
        return worker_core_problem(available_cpus(), load_average(), trainer, worker,
                                   own=trainer + worker if running else 1.0)

    def _make_runner(self, policy: Any, version: int) -> Runner:
        """The runner of the engine, holding the policy at ``version``."""
        engine = self.rollouts.engine
        if in_worker(engine):
            return WorkerRunner(policy, engine, version, self.threads)  # a copy of the policy
        runner = ThreadRunner(engine, lambda p, v: self.push_to_servers(p, v), version)
        runner.push(policy, version)  # the servers get the weights now
        return runner

    # ---- the schedule ----------------------------------------------------------------------------------
    def push(self, policy: Any, version: int) -> dict[str, float]:
        """The policy is at ``version``: its weights go to the sampler and the steps up to version+1+k are
        submitted. Returns ``sync_secs``."""
        if version == self.version:
            return {}
        t0 = time.perf_counter()
        if self.runner is None:
            self.runner = self._make_runner(policy, version)
        else:
            self.runner.push(policy, version)
        self.version = version
        if self.next_step is None:
            self.next_step = version + 1
        last = min(self.rollouts.cfg.optim.steps, version + 1 + self.k)
        while self.next_step <= last:
            self.ahead[self.next_step] = self._submit(self.next_step, 0)
            self.next_step += 1
        return {"sync_secs": time.perf_counter() - t0}

    def _submit(self, step: int, round_: int) -> Ahead:
        r = self.rollouts
        idx = r.sampler.sample(r.cfg.optim.prompts_per_step, step)
        prompts = [r.engine.encode_prompt(r.rows[i]["messages"]) for i in idx]
        return Ahead(idx, self.runner.submit(prompts, r.cfg.sampling.group_size, r.sampling_params(step, round_)))

    def take(self, step: int, round_: int) -> tuple[list[int], list[list[Completion]]]:
        """Step ``step``'s prompts and groups: round 0 as submitted ahead, a further round sampled now."""
        job = self.ahead.pop(step) if round_ == 0 else self._submit(step, round_)
        return job.indices, self._groups(job)

    def _groups(self, job: Ahead) -> list[list[Completion]]:
        if job.groups is None:
            job.groups, job.ticket = self.runner.result(job.ticket), None
        return job.groups

    def close(self) -> None:
        if self.runner is not None:
            self.runner.close()
            self.runner = None

    # ---- checkpoints -------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The steps submitted ahead, with their groups (waited for): a resumed run trains on them."""
        steps = {}
        for step, job in sorted(self.ahead.items()):
            groups = [[dataclasses.asdict(c) for c in g] for g in self._groups(job)]
            steps[step] = {"indices": list(job.indices), "groups": groups}
        return {"ahead": steps, "next_step": self.next_step}

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        if not state:
            return
        self.ahead = {int(step): Ahead(s["indices"], groups=[[Completion(**c) for c in g] for g in s["groups"]])
                      for step, s in state["ahead"].items()}
        self.next_step = state["next_step"]
