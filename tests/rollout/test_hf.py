"""The transformers rollout engine: stops, finish reasons, log-probs, left padding, seeds."""

from __future__ import annotations

import pytest
import torch

from kitae.chat import IM_END, chatml
from kitae.rollout.base import SamplingParams
from kitae.rollout.hf import HFEngine, filter_top_k_top_p
from tests.tiny import overfit, tiny_llama, tiny_tokenizer

USER = [{"role": "user", "content": "hi"}]


def _engine(multi_token: bool) -> HFEngine:
    tok = tiny_tokenizer(multi_token_im_end=multi_token)
    model = tiny_llama(len(tok))
    # After the answer comes a run-on ("xyz xyz"), so only the stop criterion can end the sample at IM_END.
    overfit(model, tok, [chatml(USER) + "hello" + IM_END + "xyz xyz xyz xyz"])
    return HFEngine(model, tok)


@pytest.fixture(scope="module", params=[True, False], ids=["im_end-multi-token", "im_end-special"])
def engine(request) -> HFEngine:
    return _engine(request.param)


def test_im_end_is_several_tokens_in_the_multi_token_tokenizer():
    tok = tiny_tokenizer(multi_token_im_end=True)
    assert len(tok.encode(IM_END, add_special_tokens=False)) > 1


def test_stops_at_end_marker_even_when_it_is_several_tokens(engine):
    [[c]] = engine.generate([USER], 1, SamplingParams(temperature=0, max_new_tokens=30))
    assert c.text == "hello" + IM_END
    assert c.finish_reason == "stop"
    assert engine.tokenizer.decode(c.completion_ids).endswith(IM_END)


def test_without_stop_the_model_runs_on_and_ends_by_length(engine):
    [[c]] = engine.generate([USER], 1, SamplingParams(temperature=0, max_new_tokens=12, stop=[]))
    assert c.finish_reason == "length"
    assert len(c.completion_ids) == 12
    assert c.text.startswith("hello" + IM_END + "xyz")


def test_length_when_max_new_tokens_reached_before_stop(engine):
    [[c]] = engine.generate([USER], 1, SamplingParams(temperature=0, max_new_tokens=1))
    assert (c.finish_reason, len(c.completion_ids), len(c.logprobs)) == ("length", 1, 1)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_equal_a_separate_forward_pass(engine, temperature):
    sp = SamplingParams(temperature=temperature, max_new_tokens=10, seed=3)
    groups = engine.generate([USER, [{"role": "user", "content": "what is 12+35?"}]], 4, sp)
    for c in (c for g in groups for c in g):
        ids = torch.tensor([c.prompt_ids + c.completion_ids])
        with torch.no_grad():
            logits = engine.model(input_ids=ids).logits[0, len(c.prompt_ids) - 1 : -1]  # [T, V]
        expected = torch.log_softmax(logits / temperature, -1).gather(-1, ids[0, len(c.prompt_ids) :, None])
        assert torch.allclose(torch.tensor(c.logprobs), expected.squeeze(-1), atol=1e-4)


def test_left_padded_batch_gives_the_same_greedy_outputs_as_one_by_one(engine):
    prompts = [[{"role": "user", "content": "x" * k + " hello world 12+35"}] for k in range(8)]
    sp = SamplingParams(temperature=0, max_new_tokens=8)
    batched = [g[0].completion_ids for g in engine.generate(prompts, 1, sp)]
    alone = [engine.generate([p], 1, sp)[0][0].completion_ids for p in prompts]
    assert batched == alone


def test_same_seed_same_samples_and_different_seed_differs(engine):
    run = lambda seed: [
        c.completion_ids
        for c in engine.generate([USER], 6, SamplingParams(temperature=1.5, max_new_tokens=8, seed=seed))[0]
    ]
    assert run(7) == run(7)
    assert run(7) != run(8)


def test_n_samples_per_prompt_in_prompt_order(engine):
    prompts = [USER, [{"role": "user", "content": "hello world"}]]
    groups = engine.generate(prompts, 3, SamplingParams(temperature=1.0, max_new_tokens=4, seed=0))
    assert [len(g) for g in groups] == [3, 3]
    assert groups[0][0].prompt_ids == engine.encode_prompt(USER)
    assert groups[1][2].prompt_ids == engine.encode_prompt(prompts[1])


def test_chunked_batches_match_one_batch(engine):
    prompts = [[{"role": "user", "content": f"q{k}"}] for k in range(5)]
    sp = SamplingParams(temperature=0, max_new_tokens=6)
    whole = engine.generate(prompts, 2, sp)
    small = HFEngine(engine.model, engine.tokenizer, max_batch_size=2).generate(prompts, 2, sp)
    assert [[c.completion_ids for c in g] for g in whole] == [[c.completion_ids for c in g] for g in small]


@pytest.mark.parametrize(
    "scores, top_k, top_p, kept",
    [
        ([1.0, 2.0, 3.0, 4.0], 2, 1.0, [False, False, True, True]),  # top-2
        ([0.0, 0.0, 0.0, 10.0], 0, 0.9, [False, False, False, True]),  # one token holds >99.9% of the mass
        ([0.0, 0.0, 0.0, 0.0], 0, 0.5, [True, True, False, False]),  # uniform: two tokens reach 0.5
        ([1.0, 2.0, 3.0, 4.0], 0, 1.0, [True, True, True, True]),  # no filtering
        ([1.0, 2.0, 3.0, 4.0], 0, 0.0, [False, False, False, True]),  # top_p 0 (OpenAI allows it): the top token
    ],
)
def test_top_k_top_p_filter(scores, top_k, top_p, kept):
    out = filter_top_k_top_p(torch.tensor([scores]), top_k, top_p)
    assert (out[0] > float("-inf")).tolist() == kept


def test_repetition_penalty_changes_sampling_but_not_the_reported_logprobs(engine):
    sp = SamplingParams(temperature=0, max_new_tokens=6, repetition_penalty=1.3)
    [[c]] = engine.generate([USER], 1, sp)
    ids = torch.tensor([c.prompt_ids + c.completion_ids])
    with torch.no_grad():
        logits = engine.model(input_ids=ids).logits[0, len(c.prompt_ids) - 1 : -1]
    expected = torch.log_softmax(logits, -1).gather(-1, ids[0, len(c.prompt_ids) :, None]).squeeze(-1)
    assert torch.allclose(torch.tensor(c.logprobs), expected, atol=1e-4)


def test_reserved_cache_samples_what_transformers_dynamic_cache_samples(engine, monkeypatch):
    """The engine's KV cache writes in place into room reserved up front; with transformers' own DynamicCache
    (concatenating at every token) the same seeded samples come out, with the same log-probs, while rows
    finish at different steps and leave the batch."""
    from transformers import DynamicCache

    import kitae.rollout.hf as hf

    prompts = [USER, [{"role": "user", "content": "what is 12+35?"}], [{"role": "user", "content": "x" * 9}]]
    sp = SamplingParams(temperature=1.0, max_new_tokens=12, seed=5)
    reserved = [c for g in engine.generate(prompts, 4, sp) for c in g]
    monkeypatch.setattr(hf, "reserved_cache", lambda capacity: DynamicCache())
    dynamic = [c for g in engine.generate(prompts, 4, sp) for c in g]
    assert [c.completion_ids for c in reserved] == [c.completion_ids for c in dynamic]
    assert len({len(c.completion_ids) for c in reserved}) > 1  # rows left the batch at different steps
    for r, d in zip(reserved, dynamic):
        torch.testing.assert_close(torch.tensor(r.logprobs), torch.tensor(d.logprobs), atol=1e-5, rtol=0)


def test_reserved_cache_makes_room_past_its_capacity():
    from kitae.rollout.hf import reserved_cache

    cache, parts = reserved_cache(3), [torch.randn(2, 1, n, 4) for n in (2, 1, 2)]  # 5 positions into room for 3
    for part in parts:
        keys, values = cache.update(part, -part, 0)
    torch.testing.assert_close(keys, torch.cat(parts, dim=2))
    torch.testing.assert_close(values, -torch.cat(parts, dim=2))
    assert cache.get_seq_length() == 5
    cache.batch_select_indices(torch.tensor([1]))
    torch.testing.assert_close(cache.layers[0].keys, torch.cat(parts, dim=2)[1:])


def test_refilled_batch_samples_what_the_batch_kept_in_order_samples(engine, monkeypatch):
    """Finished rows' places are taken by rows from the end of the batch (only those rows' cache is copied), and
    the rows are still sampled in their original order: the same seeded tokens and log-probs as the batch that
    keeps its rows in order, with transformers' own DynamicCache (the engine before refilling)."""
    from transformers import DynamicCache

    import kitae.rollout.hf as hf

    prompts = [USER, [{"role": "user", "content": "what is 12+35?"}], [{"role": "user", "content": "x" * 9}]]
    sp = SamplingParams(temperature=1.0, max_new_tokens=12, seed=5)
    moved = []
    refill = hf.refill
    monkeypatch.setattr(hf, "refill", lambda keep: moved.append(refill(keep) != keep) or refill(keep))
    refilled = [c for g in engine.generate(prompts, 4, sp) for c in g]
    assert any(moved)  # rows did change place
    monkeypatch.setattr(hf, "refill", lambda keep: keep)
    monkeypatch.setattr(hf, "reserved_cache", lambda capacity: DynamicCache())
    in_order = [c for g in engine.generate(prompts, 4, sp) for c in g]
    assert [c.completion_ids for c in refilled] == [c.completion_ids for c in in_order]
    assert [c.finish_reason for c in refilled] == [c.finish_reason for c in in_order]
    for r, d in zip(refilled, in_order):
        torch.testing.assert_close(torch.tensor(r.logprobs), torch.tensor(d.logprobs), atol=1e-5, rtol=0)


@pytest.mark.parametrize("indices", [[0, 5, 2, 3], [4, 3, 2, 1, 0], [1, 2, 3], [5], [0, 1, 2, 3, 4, 5]])
def test_reserved_cache_selects_rows_in_place_as_a_gather_would(indices):
    from kitae.rollout.hf import reserved_cache

    cache, keys = reserved_cache(8), torch.randn(6, 2, 3, 4)
    cache.update(keys, -keys, 0)
    cache.batch_select_indices(torch.tensor(indices))
    torch.testing.assert_close(cache.layers[0].keys, keys[indices])
    torch.testing.assert_close(cache.layers[0].values, -keys[indices])
    more = torch.randn(len(indices), 2, 1, 4)  # the next token is written after the kept rows' positions
    out, _ = cache.update(more, -more, 0)
    torch.testing.assert_close(out, torch.cat([keys[indices], more], dim=2))
