"""Continuous batching (kitae/serving/batching.py) on a real tiny model: requests interleave, a request gives the
same tokens and log-probs batched as alone, log-probs equal a forward pass, reloads wait for the jobs in flight.

Ordering is asserted on the scheduler's step counter (``Job.admitted_at`` / ``finished_at``), never on time."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from kitae.rollout.base import SamplingParams
from kitae.rollout.hf import HFEngine
from kitae.serving.batching import BatchScheduler, WeightGate

TEXTS = ["hello world, the answer is", "what is 12+35?", "東京は日本の", "hi"]


@pytest.fixture(scope="module")
def engine():
    from tests.tiny import tiny_llama, tiny_tokenizer

    tok = tiny_tokenizer()
    return HFEngine(tiny_llama(len(tok)).eval(), tok)


@pytest.fixture
def scheduler(engine):
    sched = BatchScheduler(engine, max_batch=64)
    yield sched
    sched.close()


def prompts(engine) -> list[list[int]]:
    return [engine.tokenizer(t)["input_ids"] for t in TEXTS]


def sp(**kw) -> SamplingParams:
    return SamplingParams(**{"max_new_tokens": 12, "stop": ["<|im_end|>"], **kw})


def wait_for(condition, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.001)


def running(sched: BatchScheduler, job) -> None:
    """Wait until ``job`` has joined the batch and decoded at least one step."""
    wait_for(lambda: job.admitted_at is not None and sched.steps > job.admitted_at + 1, "the job to run")


def submit_beside(sched: BatchScheduler, job, *args, **kw):
    """Submit while ``job`` runs: the model lock keeps the batch from stepping between the check and the submit."""
    running(sched, job)
    with sched.model_lock:
        assert not job.done.is_set(), "the running job ended before the next one was sent; make it longer"
        return sched.submit(*args, **kw)


# ---- interleaving ----------------------------------------------------------------------------------------
def long_then_short(sched: BatchScheduler, engine):
    long = sched.submit(prompts(engine)[0], 2, sp(temperature=1.0, max_new_tokens=300, stop=[]))
    short = submit_beside(sched, long, prompts(engine)[1], 2, sp(temperature=0, max_new_tokens=3, stop=[]))
    return long, short, short.wait(), long.wait()


def test_a_short_request_joins_and_leaves_while_a_long_one_runs(scheduler, engine):
    long, short, short_out, long_out = long_then_short(scheduler, engine)
    assert long.admitted_at < short.admitted_at < long.finished_at
    assert short.finished_at == short.admitted_at + 3 < long.finished_at  # it did not wait for the long one
    assert long.finished_at == long.admitted_at + 300  # and the long one ran on, to its length
    assert [c.num_tokens for c in long_out] == [300, 300] and [c.num_tokens for c in short_out] == [3, 3]
    alone = engine.generate_tokens([prompts(engine)[1]], 1, sp(temperature=0, max_new_tokens=3, stop=[]))[0][0]
    assert all(c.completion_ids == alone.completion_ids for c in short_out)


def test_max_batch_1_serves_one_request_at_a_time(engine):
    """The baseline of benchmarks/serve_batching.py, and the proof the test above can fail."""
    sched = BatchScheduler(engine, max_batch=1)
    try:
        long, short, _, _ = long_then_short(sched, engine)
    finally:
        sched.close()
    assert short.admitted_at >= long.finished_at  # a job with n > max_batch runs alone, whole


# ---- the same result batched as alone ----------------------------------------------------------------------
SETTINGS = [
    dict(temperature=0),  # greedy
    dict(temperature=1.0, seed=11),
    dict(temperature=0.7, top_p=0.9, seed=12),
    dict(temperature=1.3, top_k=5, seed=13),
    dict(temperature=1.0, repetition_penalty=1.3, seed=14),
    dict(temperature=0, repetition_penalty=1.5),
]


def alone(sched: BatchScheduler, engine, n: int = 2):
    """Every (prompt, setting) as its own request, one after another."""
    return {(p, s): sched.submit(prompts(engine)[p], n, sp(**SETTINGS[s])).wait()
            for p in range(len(TEXTS)) for s in range(len(SETTINGS))}


def assert_same(a, b) -> None:
    for key in a:
        assert [c.completion_ids for c in a[key]] == [c.completion_ids for c in b[key]], key
        assert [c.finish_reason for c in a[key]] == [c.finish_reason for c in b[key]], key
        for x, y in zip(a[key], b[key]):
            assert torch.allclose(torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=1e-5), key


def test_requests_submitted_together_give_what_they_give_alone(scheduler, engine):
    one_by_one = alone(scheduler, engine)
    with scheduler.model_lock:  # the scheduler admits at most one job before all are queued
        jobs = {key: scheduler.submit(prompts(engine)[key[0]], 2, sp(**SETTINGS[key[1]])) for key in one_by_one}
    together = {key: job.wait() for key, job in jobs.items()}
    admitted = [job.admitted_at for job in jobs.values()]
    assert max(admitted) <= min(admitted) + 1 < min(job.finished_at for job in jobs.values())  # one batch
    assert_same(one_by_one, together)


def test_requests_joining_a_running_batch_give_what_they_give_alone(scheduler, engine):
    keys = [(k % len(TEXTS), k % len(SETTINGS)) for k in range(8)]  # every prompt, every setting
    one_by_one = {key: value for key, value in alone(scheduler, engine).items() if key in keys}
    keeper = scheduler.submit(prompts(engine)[3], 1, sp(temperature=1.0, max_new_tokens=800, stop=[]))
    jobs = {}
    for key in keys:  # each joins a batch of another width, mid-run
        jobs[key] = submit_beside(scheduler, keeper, prompts(engine)[key[0]], 2, sp(**SETTINGS[key[1]]))
        wait_for(lambda job=jobs[key]: job.admitted_at is not None, "the job to join")
    joined = {key: job.wait() for key, job in jobs.items()}
    keeper.wait()
    assert len({job.admitted_at for job in jobs.values()}) == len(jobs)  # joined one by one
    assert all(keeper.admitted_at < job.admitted_at < keeper.finished_at for job in jobs.values())
    assert_same(one_by_one, joined)


def test_a_seeded_sample_is_the_rollout_engines(scheduler, engine):
    """Sample 0 of a request with seed s is what HFEngine samples for one completion with seed s."""
    for p in prompts(engine):
        settings = sp(temperature=1.0, top_p=0.95, seed=5, max_new_tokens=16)
        [served] = scheduler.submit(p, 1, settings).wait()
        [[own]] = engine.generate_tokens([p], 1, settings)
        assert served.completion_ids == own.completion_ids


def test_each_sample_is_the_one_sample_request_with_its_seed(scheduler, engine):
    """Sample i of a request with seed s is a one-sample request with seed s + i, also when the samples end at
    different steps (a fifth of the vocabulary stops them, so they leave the batch one by one)."""
    stops = set(range(0, len(engine.tokenizer), 5))
    settings = sp(temperature=1.0, seed=20, max_new_tokens=30, stop=[])
    group = scheduler.submit(prompts(engine)[0], 8, settings, stop_ids=stops).wait()
    singles = [scheduler.submit(prompts(engine)[0], 1, settings.offset_seed(i), stop_ids=stops).wait()[0]
               for i in range(8)]
    assert len(group) == 8 and len({c.num_tokens for c in group}) > 2  # they did end at different steps
    assert [c.completion_ids for c in group] == [c.completion_ids for c in singles]
    assert [c.finish_reason for c in group] == [c.finish_reason for c in singles]


def test_samples_of_one_request_differ_and_repeat(scheduler, engine):
    first = scheduler.submit(prompts(engine)[0], 4, sp(temperature=1.0, seed=3, max_new_tokens=16)).wait()
    again = scheduler.submit(prompts(engine)[0], 4, sp(temperature=1.0, seed=3, max_new_tokens=16)).wait()
    assert [c.completion_ids for c in first] == [c.completion_ids for c in again]
    assert len({tuple(c.completion_ids) for c in first}) > 1  # sample i is seeded seed + i, not all seed


# ---- log-probs -------------------------------------------------------------------------------------------
def test_logprobs_equal_a_full_forward_pass(scheduler, engine):
    """log_softmax(logits / T) at each sampled token, from one forward pass over prompt + completion."""
    temps = [0, 0.7, 1.0, 1.5]
    jobs = [scheduler.submit(p, 2, sp(temperature=t, seed=1, max_new_tokens=20))
            for p, t in zip(prompts(engine), temps)]
    for job, t in zip(jobs, temps):
        for c in job.wait():
            ids = torch.tensor([c.prompt_ids + c.completion_ids])  # [1, P + C]
            with torch.no_grad():
                logits = engine.model(ids).logits[0].float()  # [P + C, V]
            logp = torch.log_softmax(logits / (t or 1.0), dim=-1)[len(c.prompt_ids) - 1 : -1]  # [C, V]
            want = logp.gather(-1, torch.tensor(c.completion_ids)[:, None]).squeeze(-1)  # [C]
            assert (want - torch.tensor(c.logprobs)).abs().max().item() < 1e-4


def test_alternatives_are_each_rows_own_top_k_beside_rows_without(scheduler, engine):
    """A job asking for top_logprobs beside jobs that do not (other temperatures, other prompts, leaving at other
    steps): its alternatives are the k most likely tokens of its own log_softmax(logits / T), the others get none
    and sample what they sample alone."""
    plain = [sp(temperature=0.7, seed=2, max_new_tokens=40, stop=[]), sp(temperature=0, max_new_tokens=5)]
    alone = [scheduler.submit(prompts(engine)[i], 2, s).wait() for i, s in enumerate(plain)]
    jobs = [scheduler.submit(prompts(engine)[i], 2, s) for i, s in enumerate(plain)]
    asking = submit_beside(scheduler, jobs[0], prompts(engine)[2], 2, sp(temperature=1.5, seed=9, max_new_tokens=12),
                           top_logprobs=4)
    for job, want in zip(jobs, alone):
        assert [c.completion_ids for c in job.wait()] == [c.completion_ids for c in want] and job.alternatives == []
    assert asking.admitted_at < jobs[0].finished_at  # they shared the batch
    for c, alternatives in zip(asking.wait(), asking.alternatives):
        ids = torch.tensor([c.prompt_ids + c.completion_ids])  # [1, P + C]
        with torch.no_grad():
            logits = engine.model(ids).logits[0].float()  # [P + C, V]
        logp = torch.log_softmax(logits / 1.5, dim=-1)[len(c.prompt_ids) - 1 : -1]  # [C, V]
        assert len(alternatives) == c.num_tokens
        for at, alts in enumerate(alternatives):
            best = torch.topk(logp[at], 4)
            assert [t for t, _ in alts] == best.indices.tolist()
            assert max(abs(v - w) for (_, v), w in zip(alts, best.values.tolist())) < 1e-4


# ---- stops -------------------------------------------------------------------------------------------------
def test_stop_strings_and_ids_end_samples_as_the_rollout_engine_does(scheduler, engine):
    p = prompts(engine)[0]
    [[free]] = engine.generate_tokens([p], 1, sp(temperature=0, max_new_tokens=12, stop=[]))
    stop = engine.tokenizer.decode(free.completion_ids[4:6])  # text the model writes, maybe several tokens
    settings = sp(temperature=0, max_new_tokens=12, stop=[stop])
    [served] = scheduler.submit(p, 1, settings).wait()
    [[own]] = engine.generate_tokens([p], 1, settings)
    assert served.finish_reason == own.finish_reason == "stop"
    assert served.completion_ids == own.completion_ids and len(served.completion_ids) <= 6
    assert served.text == own.text and served.text.endswith(stop)
    [by_id] = scheduler.submit(p, 1, sp(temperature=0, stop=[]), stop_ids={free.completion_ids[2]}).wait()
    assert by_id.finish_reason == "stop" and by_id.completion_ids[-1] == free.completion_ids[2]
    assert len(by_id.completion_ids) <= 3


# ---- weights ----------------------------------------------------------------------------------------------
def test_a_reload_waits_for_jobs_in_flight_and_holds_new_ones(engine):
    gate, lock = WeightGate(), threading.Lock()
    sched = BatchScheduler(engine, gate, lock, max_batch=8)
    try:
        long = sched.submit(prompts(engine)[0], 1, sp(temperature=1.0, max_new_tokens=300, stop=[]))
        running(sched, long)
        events = []

        def reload():
            with gate.reload():
                events.append(("reload", long.done.is_set()))
                gate.bump()

        with sched.model_lock:  # the batch does not step until the reload waits
            assert not long.done.is_set()
            thread = threading.Thread(target=reload)
            thread.start()
            wait_for(lambda: gate.reloading, "the reload to wait")
            late = sched.submit(prompts(engine)[1], 1, sp(temperature=0, max_new_tokens=3))
        thread.join(120)
        late.wait(120)
    finally:
        sched.close()
    assert events == [("reload", True)]  # the reload ran once the job in flight was done
    assert long.version == 0 and late.version == 1  # and the job that came meanwhile ran on the new weights
    assert late.admitted_at >= long.finished_at


def test_a_failing_forward_pass_fails_its_jobs_and_the_scheduler_goes_on(engine):
    sched = BatchScheduler(engine, max_batch=8)
    try:
        bad = sched.submit([10**6], 1, sp())  # not a token of this vocabulary: the embedding lookup fails
        with pytest.raises(IndexError):
            bad.wait(60)
        [ok] = sched.submit(prompts(engine)[0], 1, sp(temperature=0, max_new_tokens=3)).wait(60)
        assert ok.num_tokens == 3 and sched.gate.in_flight == 0  # the failed job left the gate
    finally:
        sched.close()
