"""Continuous batching for ``kitae serve model``: requests join the running batch; none waits for another.

One scheduler thread does all the batched decoding. Each step it
1. admits queued jobs, first come first served, while their samples fit in ``max_batch`` rows (a job with more
   samples than that runs alone): their prompts are prefilled in one forward pass, each prompt's KV cache is
   repeated for its ``n`` samples and merged into the running batch's cache (both left-padded to one width);
2. samples one token for every row with its own job's settings (temperature, top-p, top-k, repetition penalty)
   and its own generator when the job has a seed (sample ``i`` of a job with seed ``s`` uses ``s + i``), so a
   seeded request gives the same tokens alone or beside others;
3. retires the rows that stopped (a stop string, a stop token id, or ``max_new_tokens``) and answers a job
   once all its rows are done;
4. runs one forward pass over the rows left, each at its own position.

The pieces are kitae's rollout engine's (kitae/rollout/hf.py): ``sample_next``, stop strings matched on the
tokens and on the decoded tail (multi-token ``<|im_end|>``), and the log-prob convention of
kitae/rollout/base.py: log_softmax(logits / T) at the sampled token, before top-k, top-p and the penalty. A job
that asks for ``top_logprobs`` k also gets, at each step, the k most likely tokens of that same distribution and
their log-probs (``Job.alternatives``).

Departures from vLLM and SGLang: no paged attention, the batch's KV cache is one left-padded tensor per layer,
so a short row beside a long one attends over padding (columns are dropped once no row uses them); prefill is
not chunked (a long prompt holds the batch for one forward pass); a job's rows join together.

transformers' own continuous batching (``generate_batch``, 5.x) is not used: it samples every row with one
global generator and one ``do_sample`` for the batch (no per-request seed, no greedy row beside sampled ones),
and its log-probs are taken after top-k and top-p.

Weights: a :class:`WeightGate` counts the jobs (and constrained decodes) in flight; a weight reload waits until
none is, holds new ones back meanwhile, and bumps the version every job reports (``Job.version``).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from kitae.errors import KitaeError
from kitae.rollout.base import Completion, SamplingParams
from kitae.rollout.hf import HFEngine, left_pad, sample_next


class WeightGate:
    """The weight version, the runs sampling with it, and the reloads waiting for them.

    A run (a batch job, a constrained decode) enters before its first forward pass and leaves after its last;
    :meth:`reload` waits until no run is in, keeps new runs out until it is done, and may bump the version.
    """

    def __init__(self, version: int = 0):
        self.version = version
        self._cond = threading.Condition()
        self._runs = 0
        self._reloads = 0  # waiting or running
        self._reloading = False

    @property
    def reloading(self) -> bool:
        """Whether a reload waits or runs."""
        return self._reloads > 0

    @property
    def in_flight(self) -> int:
        """Runs entered and not left."""
        return self._runs

    def try_enter(self) -> int | None:
        """Enter and get the version, or None while a reload waits or runs."""
        with self._cond:
            if self._reloads:
                return None
            self._runs += 1
            return self.version

    def enter(self) -> int:
        with self._cond:
            self._cond.wait_for(lambda: not self._reloads)
            self._runs += 1
            return self.version

    def leave(self) -> None:
        with self._cond:
            self._runs -= 1
            self._cond.notify_all()

    def wait_open(self, timeout: float) -> None:
        """Return once no reload waits or runs, or after ``timeout`` seconds."""
        with self._cond:
            self._cond.wait_for(lambda: not self._reloads, timeout)

    @contextmanager
    def reload(self) -> Iterator[None]:
        """Exclusive use of the weights: entered once no run is in flight; new runs wait until it exits."""
        with self._cond:
            self._reloads += 1
            try:
                self._cond.wait_for(lambda: not self._runs and not self._reloading)
            except BaseException:
                self._reloads -= 1
                self._cond.notify_all()
                raise
            self._reloading = True
        try:
            yield
        finally:
            with self._cond:
                self._reloading = False
                self._reloads -= 1
                self._cond.notify_all()

    def bump(self, version: int | None = None) -> int:
        """Set the version (to ``version``, else one more); call inside :meth:`reload`."""
        with self._cond:
            self.version = self.version + 1 if version is None else version
            return self.version


@dataclass(eq=False)
class Job:
    """One prompt, ``n`` samples. ``admitted_at`` / ``finished_at``: the scheduler steps at which its rows joined
    the batch and at which the last one left (for tests and logs)."""

    prompt_ids: list[int]
    n: int
    sampling: SamplingParams
    stop_ids: frozenset[int] = frozenset()
    top_logprobs: int = 0  # alternatives per token: the k most likely tokens and their log-probs
    version: int | None = None
    admitted_at: int | None = None
    finished_at: int | None = None
    completions: list[Completion] = field(default_factory=list)
    # with top_logprobs k: per sample, per completion token, the k most likely (token id, log-prob), best first
    alternatives: list[list[list[tuple[int, float]]]] = field(default_factory=list)
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)
    # set after each step that gave its rows a token, and once done: a streaming reply waits on it and clears it
    stepped: threading.Event = field(default_factory=threading.Event)
    rows: list[_Row] = field(default_factory=list, repr=False)  # its samples, also those that left the batch

    def wait(self, timeout: float | None = None) -> list[Completion]:
        """The ``n`` completions, once done; raises what failed the job."""
        if not self.done.wait(timeout):
            raise TimeoutError(f"no completions after {timeout} s")
        if self.error is not None:
            raise self.error
        return self.completions


@dataclass(eq=False)
class _Row:
    """One sample of a job, in the batch."""

    job: Job
    index: int
    gen: torch.Generator | None
    seen: torch.Tensor | None  # [V] bool: tokens seen, for the repetition penalty
    stops: list[tuple[str, list[int]]]
    tokens: list[int] = field(default_factory=list)
    logps: list[float] = field(default_factory=list)
    tops: list[list[tuple[int, float]]] = field(default_factory=list)  # per token, with the job's top_logprobs
    finish: str | None = None


@dataclass
class _Batch:
    """Rows and their state: per layer keys/values [A, H, W, D] in ``cache``; ``attn`` [A, W] (0 = left padding);
    ``last_pos`` [A], the position of each row's last cached token; ``logits`` [A, V], its next token's."""

    rows: list[_Row] = field(default_factory=list)
    cache: Any = None
    attn: torch.Tensor | None = None
    last_pos: torch.Tensor | None = None
    logits: torch.Tensor | None = None


class BatchScheduler:
    """Continuous batching over an :class:`HFEngine`'s model (see the module docstring).

    ``submit(prompt_ids, n, sampling) -> Job``, then ``job.wait()``. ``model_lock`` is held around each step,
    so other users of the model (constrained decoding, a weight reload) take turns with it.
    """

    def __init__(self, engine: HFEngine, gate: WeightGate | None = None, model_lock: threading.Lock | None = None,
                 max_batch: int = 64):
        if max_batch < 1:
            raise KitaeError(f"max_batch must be at least 1, got {max_batch}")
        self.engine, self.max_batch = engine, max_batch
        self.gate = gate or WeightGate()
        self.model_lock = model_lock or threading.Lock()
        self.steps = 0
        self._queue: deque[Job] = deque()
        self._cond = threading.Condition()
        self._batch = _Batch()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="kitae-serve-batching", daemon=True)
        self._thread.start()

    # ---- public ---------------------------------------------------------------------------------
    def submit(self, prompt_ids: list[int], n: int, sampling: SamplingParams,
               stop_ids: frozenset[int] | set[int] = frozenset(), top_logprobs: int = 0) -> Job:
        """Queue ``n`` samples of ``prompt_ids``; the job joins the batch at the next step it fits in. With
        ``top_logprobs`` k, each sampled token comes with the k most likely ones (``Job.alternatives``)."""
        job = Job(list(prompt_ids), n, self.engine.ending(sampling), frozenset(stop_ids), top_logprobs)
        with self._cond:
            if self._stopped:
                raise KitaeError("the batching scheduler is stopped")
            self._queue.append(job)
            self._cond.notify_all()
        return job

    def close(self, timeout: float = 10.0) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        self._thread.join(timeout)

    # ---- the loop -------------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._stopped or self._queue or self._batch.rows)
                if self._stopped:
                    break
                newcomers = self._admit()
            if not newcomers and not self._batch.rows:  # jobs wait for a weight reload to finish
                self.gate.wait_open(0.05)
                continue
            try:
                with self.model_lock, torch.no_grad():
                    self._step(newcomers)
            except Exception as exc:  # noqa: BLE001 - the jobs' clients get the error; the server goes on
                self._fail({id(r.job): r.job for r in self._batch.rows} | {id(j): j for j in newcomers}, exc)
                self._batch = _Batch()
        stopping = KitaeError("the server is stopping")
        self._fail({id(r.job): r.job for r in self._batch.rows} | {id(j): j for j in self._queue}, stopping)

    def _admit(self) -> list[Job]:
        """Jobs from the head of the queue that fit (under ``self._cond``); each enters the weight gate."""
        room, admitted = self.max_batch - len(self._batch.rows), []
        while self._queue:
            job = self._queue[0]
            if job.n > room and (self._batch.rows or admitted):
                break
            version = self.gate.try_enter()
            if version is None:  # a weight reload waits for the batch to drain
                break
            self._queue.popleft()
            job.version, job.admitted_at = version, self.steps
            admitted.append(job)
            room -= job.n
        return admitted

    def _step(self, newcomers: list[Job]) -> None:
        if newcomers:
            self._join(self._prefill(newcomers))
        batch = self._batch
        nxt, logps = self._sample()  # [A], [A]
        tops = self._alternatives()
        keep, done = [], []
        for j, (row, token, logp) in enumerate(zip(batch.rows, nxt.tolist(), logps.tolist())):
            row.tokens.append(token)
            row.logps.append(logp)
            if j in tops:
                row.tops.append(tops[j])
            row.finish = self._finish_reason(row)
            if row.finish is None:
                keep.append(j)
            elif all(r.finish for r in row.job.rows):
                done.append(row.job)
        self.steps += 1
        for job in {id(row.job): row.job for row in batch.rows}.values():
            job.stepped.set()
        for job in done:
            self._complete(job)
        if len(keep) < len(batch.rows):
            self._select(keep)
        if self._batch.rows:
            self._decode(nxt[keep] if len(keep) < len(nxt) else nxt)

    def _finish_reason(self, row: _Row) -> str | None:
        job = row.job
        if row.tokens[-1] in job.stop_ids or self.engine.codec.hit_stop(row.tokens, row.stops):
            return "stop"
        if len(row.tokens) >= job.sampling.max_new_tokens:
            return "length"
        return None

    def _complete(self, job: Job) -> None:
        job.completions = [
            Completion(text=self.engine.codec.decode(r.tokens, job.sampling.stop), prompt_ids=job.prompt_ids,
                       completion_ids=r.tokens, logprobs=r.logps, finish_reason=r.finish or "length")
            for r in job.rows
        ]
        job.alternatives = [r.tops for r in job.rows] if job.top_logprobs else []
        job.rows = []
        job.finished_at = self.steps
        self.gate.leave()
        job.done.set()
        job.stepped.set()

    def _fail(self, jobs: dict[int, Job], exc: BaseException) -> None:
        for job in jobs.values():
            if job.done.is_set():
                continue
            if job.admitted_at is not None:  # it entered the weight gate
                self.gate.leave()
            job.error = exc
            job.done.set()
            job.stepped.set()

    # ---- the model ------------------------------------------------------------------------------
    def _prefill(self, jobs: list[Job]) -> _Batch:
        """The new jobs' prompts in one forward pass; each prompt's cache and logits repeated for its rows."""
        from transformers import DynamicCache

        engine, dev = self.engine, self.engine.device
        pad = engine.tokenizer.pad_token_id if engine.tokenizer.pad_token_id is not None else 0
        ids, attn = left_pad([j.prompt_ids for j in jobs], pad, dev)  # [P, L]
        pos = (attn.cumsum(-1) - 1).clamp(min=0)  # [P, L]
        out = engine.model(input_ids=ids, attention_mask=attn, position_ids=pos, cache=DynamicCache(),
                           logits_to_keep=1)
        repeat = torch.tensor([p for p, j in enumerate(jobs) for _ in range(j.n)], device=dev)  # [B]
        cache = out.cache
        cache.batch_select_indices(repeat)
        logits = out.logits[:, -1, :].float()  # [P, V]
        for job in jobs:
            job.rows = [self._new_row(job, i, logits.shape[-1]) for i in range(job.n)]
        rows = [row for job in jobs for row in job.rows]
        return _Batch(rows, cache, attn[repeat], pos[repeat, -1], logits[repeat])

    def _new_row(self, job: Job, index: int, vocab: int) -> _Row:
        sp, dev = job.sampling, self.engine.device
        gen = None if sp.seed is None else torch.Generator(device=dev).manual_seed(sp.seed + index)
        seen = None
        if sp.repetition_penalty != 1.0:
            seen = torch.zeros(vocab, dtype=torch.bool, device=dev)
            seen[torch.tensor(job.prompt_ids, device=dev).clamp(max=vocab - 1)] = True
        return _Row(job, index, gen, seen, self.engine.codec.stop_ids(tuple(sp.stop)))

    def _join(self, new: _Batch) -> None:
        """Merge ``new`` rows into the running batch: both left-padded to one width, then stacked."""
        old = self._batch
        if not old.rows:
            self._batch = new
            return
        _check_cache(old.cache)
        width = max(old.attn.shape[1], new.attn.shape[1])
        for part in (old, new):
            _pad_left(part, width)
        for a, b in zip(old.cache.layers, new.cache.layers):
            if a.get_seq_length() and b.get_seq_length():
                a.keys, a.values = torch.cat([a.keys, b.keys]), torch.cat([a.values, b.values])
        old.attn = torch.cat([old.attn, new.attn])
        old.last_pos = torch.cat([old.last_pos, new.last_pos])
        old.logits = torch.cat([old.logits, new.logits])
        old.rows += new.rows

    def _sample(self) -> tuple[torch.Tensor, torch.Tensor]:
        """One token per row [A] and its log-prob [A]; rows with the same settings are sampled together."""
        batch = self._batch
        groups: dict[tuple[float, float, int, float], list[int]] = {}
        for j, row in enumerate(batch.rows):
            sp = row.job.sampling
            groups.setdefault((sp.temperature, sp.top_p, sp.top_k, sp.repetition_penalty), []).append(j)
        nxt = torch.empty(len(batch.rows), dtype=torch.long, device=batch.logits.device)
        logps = torch.empty(len(batch.rows), dtype=torch.float32, device=batch.logits.device)
        for idx in groups.values():
            rows = [batch.rows[j] for j in idx]
            sp = rows[0].job.sampling
            seen = torch.stack([r.seen for r in rows]) if sp.repetition_penalty != 1.0 else None  # [G, V]
            gens = [r.gen for r in rows]
            at = torch.tensor(idx, device=nxt.device)
            nxt[at], logps[at] = sample_next(batch.logits[at], sp, seen, gens if any(gens) else None)
        for row, token in zip(batch.rows, nxt.tolist()):
            if row.seen is not None:
                row.seen[token] = True
        return nxt, logps

    def _alternatives(self) -> dict[int, list[tuple[int, float]]]:
        """Row -> its job's ``top_logprobs`` most likely next tokens and their log-probs, best first, for the
        rows whose job asks: the distribution :func:`sample_next` gives the sampled token's log-prob,
        log_softmax(logits / T) (T = 1 when greedy), before top-k, top-p and the repetition penalty."""
        batch = self._batch
        asking = [j for j, row in enumerate(batch.rows) if row.job.top_logprobs]
        if not asking:
            return {}
        at = torch.tensor(asking, device=batch.logits.device)
        temps = torch.tensor([batch.rows[j].job.sampling.temperature or 1.0 for j in asking],
                             device=batch.logits.device)  # [R]
        logp = torch.log_softmax(batch.logits[at] / temps[:, None], dim=-1)  # [R, V]
        k = min(max(batch.rows[j].job.top_logprobs for j in asking), logp.shape[-1])
        best = torch.topk(logp, k, dim=-1)  # values, indices [R, k]
        out = {}
        for j, ids, values in zip(asking, best.indices.tolist(), best.values.tolist()):
            wanted = batch.rows[j].job.top_logprobs
            out[j] = list(zip(ids[:wanted], values[:wanted]))
        return out

    def _select(self, keep: list[int]) -> None:
        """Keep rows ``keep`` (their cache rows too); drop the left columns no row uses any more."""
        batch = self._batch
        idx = torch.tensor(keep, dtype=torch.long, device=batch.attn.device)
        batch.rows = [batch.rows[j] for j in keep]
        if not keep:
            self._batch = _Batch()
            return
        batch.cache.batch_select_indices(idx)
        batch.attn, batch.last_pos = batch.attn[idx], batch.last_pos[idx]
        used = batch.attn.any(dim=0)  # [W]
        lead = int(used.int().argmax())  # the first column some row uses
        if lead:
            batch.attn = batch.attn[:, lead:]
            for layer in batch.cache.layers:
                if layer.get_seq_length():
                    layer.keys, layer.values = layer.keys[..., lead:, :], layer.values[..., lead:, :]

    def _decode(self, nxt: torch.Tensor) -> None:
        """One forward pass: each row's new token [A] at its own position."""
        batch = self._batch
        batch.attn = torch.cat([batch.attn, batch.attn.new_ones(len(nxt), 1)], dim=1)  # [A, W+1]
        batch.last_pos = batch.last_pos + 1
        out = self.engine.model(input_ids=nxt[:, None], attention_mask=batch.attn,
                                position_ids=batch.last_pos[:, None], cache=batch.cache)
        batch.cache = out.cache
        batch.logits = out.logits[:, -1, :].float()  # [A, V]


def _check_cache(cache: Any) -> None:
    """Merging batches needs every layer's full keys and values (not a sliding window or a recurrent state)."""
    from transformers.cache_utils import DynamicLayer

    for layer in getattr(cache, "layers", None) or [None]:
        if type(layer) is not DynamicLayer:
            raise KitaeError(f"continuous batching needs a full key/value cache per layer; this model's cache has "
                             f"{type(layer).__name__} layers. Serve it with --max-batch 1")


def _pad_left(batch: _Batch, width: int) -> None:
    """Left-pad ``batch``'s cache and mask with zeros to ``width`` columns."""
    short = width - batch.attn.shape[1]
    if not short:
        return
    batch.attn = torch.cat([batch.attn.new_zeros(batch.attn.shape[0], short), batch.attn], dim=1)
    for layer in batch.cache.layers:
        if layer.get_seq_length():
            layer.keys = torch.cat([layer.keys.new_zeros(*layer.keys.shape[:-2], short, layer.keys.shape[-1]),
                                    layer.keys], dim=-2)
            layer.values = torch.cat([layer.values.new_zeros(*layer.values.shape[:-2], short,
                                                             layer.values.shape[-1]), layer.values], dim=-2)

