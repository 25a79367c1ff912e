"""Async rollouts (``sampling.async``): runners that sample the next steps' groups while the trainer updates.

A runner takes weight pushes and sampling jobs in the order the trainer gives them, and a job samples with the
weights of the last push before it, whatever the timing: which policy version samples which step is decided by
that order alone (kitae.trainer.async_pipeline), so an async run is as reproducible as a synchronous one. Every
returned :class:`~kitae.rollout.base.Completion` carries ``policy_version``, the version that sampled it.

Which runner an engine gets is decided by its abilities (kitae.rollout.base), and both sample from token ids
(:class:`~kitae.rollout.base.ContinuesTokens`):

- :class:`WorkerRunner` (an engine that samples with the trainer's model and can be built over a copy of it,
  :class:`~kitae.rollout.base.SamplesInWorker`: ``engine: hf``): a rollout worker process (torch.multiprocessing,
  spawn) with its own copy of the model and its own torch threads, so the trainer and the sampler each have a
  core. It samples with the engine itself (:meth:`~kitae.rollout.base.SamplesInWorker.on_model` the copy). Jobs
  and pushes share one queue; a push carries the trainable tensors only (every weight for full fine-tuning, the
  adapter for LoRA), copied once into shared memory.
- :class:`ThreadRunner` (an engine that syncs weights, :class:`~kitae.rollout.base.SyncsWeights`: ``engine:
  server``): each job's requests in flight on a background thread while the trainer updates; a push waits for
  the jobs in flight, then sends the weights (kitae.rollout.sync), so weights change between batches, never
  under one.
"""

from __future__ import annotations

import concurrent.futures
import copy
import os
import queue
import signal
import traceback
from typing import Any, Callable, Protocol

import torch

from kitae.errors import KitaeError
from kitae.rollout.base import Completion, ContinuesTokens, SamplesInWorker, SamplingParams

POLL_SECS = 2.0  # how often a wait for the worker checks that it is still alive


class Runner(Protocol):
    """What the async pipeline needs of a runner."""

    def push(self, policy: Any, version: int) -> None: ...

    def submit(self, prompt_ids: list[list[int]], n: int, sampling: SamplingParams) -> int: ...

    def result(self, ticket: int) -> list[list[Completion]]: ...

    def close(self) -> None: ...


def trainable_tensors(policy: Any) -> dict[str, torch.Tensor]:
    """The weights an update changes, as CPU copies: every trainable parameter (the adapter alone for LoRA)."""
    return {name: p.detach().to("cpu", copy=True) for name, p in policy.named_parameters() if p.requires_grad}


class WorkerRunner:
    """A rollout worker process holding ``engine`` over a copy of ``policy`` (at ``version``); it runs
    ``threads`` torch threads."""

    def __init__(self, policy: Any, engine: SamplesInWorker, version: int, threads: int):
        ctx = torch.multiprocessing.get_context("spawn")
        self._jobs, self._results = ctx.Queue(), ctx.Queue()
        model = copy.deepcopy(policy).to("cpu")  # its own weights: the trainer's change under it otherwise
        device = str(next(policy.parameters()).device)
        self._proc = ctx.Process(target=_worker_main, daemon=True, name="kitae-rollout-worker",
                                 args=(engine.on_model(model), device, version, threads, self._jobs, self._results,
                                       os.getpid()))
        self._proc.start()
        del model
        self._tickets = 0
        self._done: dict[int, list[list[Completion]]] = {}

    def push(self, policy: Any, version: int) -> None:
        self._jobs.put(("weights", version, trainable_tensors(policy)))

    def submit(self, prompt_ids: list[list[int]], n: int, sampling: SamplingParams) -> int:
        self._tickets += 1
        self._jobs.put(("generate", self._tickets, prompt_ids, n, sampling))
        return self._tickets

    def result(self, ticket: int) -> list[list[Completion]]:
        """The groups of job ``ticket``, waiting for them; KitaeError when the worker failed or died."""
        while ticket not in self._done:
            try:
                kind, done, payload = self._results.get(timeout=POLL_SECS)
            except queue.Empty:
                if not self._proc.is_alive():
                    raise KitaeError(f"the rollout worker process stopped (exit code {self._proc.exitcode}) "
                                     "before it returned its samples; see its output above") from None
                continue
            if kind == "error":
                raise KitaeError(f"the rollout worker process failed:\n{payload}")
            self._done[done] = payload
        return self._done.pop(ticket)

    def close(self) -> None:
        if self._proc.is_alive():
            self._jobs.put(("stop",))
            self._proc.join(timeout=10)
        if self._proc.is_alive():
            self._proc.kill()  # SIGKILL: the worker ignores SIGTERM (see _worker_main)
            self._proc.join(timeout=5)
        for q in (self._jobs, self._results):
            q.close()
            q.cancel_join_thread()


def _worker_main(engine: SamplesInWorker, device: str, version: int, threads: int, jobs: Any, results: Any,
                 trainer_pid: int) -> None:
    """The worker process: ``engine`` (over its copy of the policy, on the CPU until here) applies pushes and runs
    jobs in queue order until "stop"; a failure is reported with its traceback and ends the worker. It ends with
    the trainer, however the trainer ends."""
    from kitae.lifetime import die_with_parent

    die_with_parent(signal.SIGKILL, trainer_pid)  # a trainer killed by SIGKILL leaves no worker behind
    # Ctrl-C and SIGTERM are the trainer's: it saves (waiting for the groups sampled ahead), then stops the worker.
    # A shell's Ctrl-C, systemd, Slurm and `timeout` signal the whole process group, the worker with the trainer.
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, signal.SIG_IGN)
    torch.set_num_threads(threads)
    engine.model = engine.model.to(device)
    params = dict(engine.model.named_parameters())
    while True:
        msg = jobs.get()
        try:
            if msg[0] == "stop":
                return
            if msg[0] == "weights":
                _, version, tensors = msg
                with torch.no_grad():
                    for name, tensor in tensors.items():
                        params[name].copy_(tensor)
                del tensors, msg
                continue
            _, ticket, prompt_ids, n, sampling = msg
            groups = engine.generate_tokens(prompt_ids, n, sampling)
            for group in groups:
                for c in group:
                    c.policy_version = version
            results.put(("done", ticket, groups))
        except BaseException:  # noqa: BLE001 - reported to the trainer, which raises it
            results.put(("error", None, traceback.format_exc()))
            return


class ThreadRunner:
    """Jobs of ``engine`` (the server engine) on a background thread; ``sync(policy, version)`` pushes the
    weights to the servers, between jobs."""

    def __init__(self, engine: ContinuesTokens, sync: Callable[[Any, int], Any], version: int):
        self.engine, self._sync, self.version = engine, sync, version
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="kitae-rollouts")
        self._futures: dict[int, concurrent.futures.Future] = {}
        self._tickets = 0

    def push(self, policy: Any, version: int) -> None:
        concurrent.futures.wait(list(self._futures.values()))  # weights change between batches
        self._sync(policy, version)
        self.version = version

    def submit(self, prompt_ids: list[list[int]], n: int, sampling: SamplingParams) -> int:
        self._tickets += 1
        self._futures[self._tickets] = self._pool.submit(self._generate, prompt_ids, n, sampling, self.version)
        return self._tickets

    def _generate(self, prompt_ids: list[list[int]], n: int, sampling: SamplingParams,
                  version: int) -> list[list[Completion]]:
        groups = self.engine.generate_tokens(prompt_ids, n, sampling)
        for group in groups:
            for c in group:
                c.policy_version = version
        return groups

    def result(self, ticket: int) -> list[list[Completion]]:
        return self._futures.pop(ticket).result()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
