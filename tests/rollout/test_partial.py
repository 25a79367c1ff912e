"""Partial rollouts: a trajectory split over iterations is the same trajectory, token for token."""

from __future__ import annotations

import copy

import pytest
import torch

from kitae.rollout.base import SamplingParams
from kitae.rollout.partial import PartialRollouts
from tests.plugins.long_model import LONG_ANSWER, LONG_USER, LOOP_USER


def _run(pr: PartialRollouts, prompts, n: int, sp: SamplingParams, iterations: int):
    """Iterate until the buffer is empty (at most `iterations`); returns [(iteration, index, completions)]."""
    out = []
    for it in range(iterations):
        done = pr.step(prompts if it == 0 else [], n, sp, step=it)
        out += [(it, i, comps) for i, comps in done]
        if not pr.pending:
            break
    return out


@pytest.mark.parametrize("segment", [1, 4, 7, 18, 100])
def test_greedy_segments_give_the_unsplit_completion(long_engine, segment):
    sp = SamplingParams(temperature=0, max_new_tokens=40)
    [[whole]] = long_engine.generate([LONG_USER], 1, sp)
    assert whole.num_tokens == 18 and whole.finish_reason == "stop"
    pr = PartialRollouts(long_engine, long_engine.tokenizer, segment, 40)
    [(it, idx, [c])] = _run(pr, [(5, long_engine.encode_prompt(LONG_USER))], 1, sp, 50)
    assert (idx, it) == (5, -(-18 // segment) - 1)  # finished in the ceil(18 / segment)-th iteration
    assert c.completion_ids == whole.completion_ids and c.text == whole.text == LONG_ANSWER
    assert c.prompt_ids == whole.prompt_ids and c.finish_reason == "stop"
    assert c.earlier_tokens == (18 - 1) // segment * segment  # tokens before the last segment
    assert torch.allclose(torch.tensor(c.logprobs), torch.tensor(whole.logprobs), atol=1e-4)


def test_sampled_trajectory_keeps_its_prefix_and_survives_a_checkpoint(long_engine):
    """At temperature 1 the continuation is new, but earlier tokens are kept verbatim and every log-prob is the
    sampling policy's; saving and loading the buffer mid-way changes nothing."""
    sp = SamplingParams(temperature=1.0, max_new_tokens=20, seed=11, stop=[])
    prompt = [(0, long_engine.encode_prompt(LOOP_USER))]
    pr = PartialRollouts(long_engine, long_engine.tokenizer, 6, 20)
    assert pr.step(prompt, 3, sp) == []
    first = [list(t.completion_ids) for t in pr.pending[0].trajectories]
    assert [len(x) for x in first] == [6, 6, 6]

    saved = copy.deepcopy(pr.state_dict())
    resumed = PartialRollouts(long_engine, long_engine.tokenizer, 6, 20)
    resumed.load_state_dict(saved)
    a = _run(pr, [], 3, SamplingParams(temperature=1.0, max_new_tokens=20, seed=12, stop=[]), 5)
    b = _run(resumed, [], 3, SamplingParams(temperature=1.0, max_new_tokens=20, seed=12, stop=[]), 5)
    [(it, _, comps)] = a
    assert it == 2  # 6 + 6 + 6 + 2 tokens: the 20-token limit is reached in the third call after the first
    assert [c.completion_ids for c in comps] == [c.completion_ids for c in b[0][2]]
    for c, prefix in zip(comps, first):
        assert c.completion_ids[:6] == prefix and c.num_tokens == 20 and c.finish_reason == "length"
        assert c.earlier_tokens == 18
        ids = torch.tensor([c.prompt_ids + c.completion_ids])
        with torch.no_grad():
            logits = long_engine.model(input_ids=ids).logits[0, len(c.prompt_ids) - 1 : -1]  # [T, V]
        expected = torch.log_softmax(logits, -1).gather(-1, ids[0, len(c.prompt_ids):, None]).squeeze(-1)  # [T]
        assert torch.allclose(torch.tensor(c.logprobs), expected, atol=1e-4)


def test_a_group_is_returned_only_when_all_its_samples_have_finished(long_engine):
    sp = SamplingParams(temperature=0, max_new_tokens=30)
    pr = PartialRollouts(long_engine, long_engine.tokenizer, 10, 30)
    short, loop = (0, long_engine.encode_prompt(LONG_USER)), (1, long_engine.encode_prompt(LOOP_USER))
    assert pr.step([short, loop], 2, sp) == []  # nothing finishes within 10 tokens
    assert pr.stats() == {"partial/pending_groups": 2, "partial/pending_trajectories": 4}
    done = pr.step([], 2, sp)
    assert [i for i, _ in done] == [0] and [c.num_tokens for c in done[0][1]] == [18, 18]
    assert pr.stats() == {"partial/pending_groups": 1, "partial/pending_trajectories": 2}
    [(i, comps)] = pr.step([], 2, sp)
    assert i == 1 and [(c.num_tokens, c.finish_reason) for c in comps] == [(30, "length")] * 2
    assert pr.pending == []
