"""The server rollout engine against completions servers on 127.0.0.1: the samples it reads back, routing over
replicas, failures, staleness, and the pre-flight check."""

from __future__ import annotations

import logging
import threading

import pytest
import torch

from kitae.chat import IM_END
from kitae.errors import ConfigError, KitaeError
from kitae.rollout.base import SamplingParams
from kitae.rollout.hf import HFEngine
from kitae.rollout.server import ServerEngine, check_url, cut_sample, preflight
from kitae.rollout.sync import ReloadsWeights
from tests.rollout.scripted import CompletionsServer, choice, clone_model, reply
from tests.tiny import tiny_llama, tiny_tokenizer

PROMPTS = [[{"role": "user", "content": f"what is {a}+{b}?"}] for a, b in [(1, 2), (3, 4), (12, 35)]]


@pytest.fixture(scope="module")
def multi_tok():
    """A tokenizer that splits <|im_end|> into several tokens, and a tiny model."""
    tok = tiny_tokenizer(multi_token_im_end=True)
    return tok, tiny_llama(len(tok))


def engine_for(servers, tok, **kw) -> ServerEngine:
    return ServerEngine(None, tok, [s.url for s in servers], down_secs=kw.pop("down_secs", 30.0), **kw)


def fixed(tok, text: str, finish: str = "length"):
    """A server brain answering every sample with the tokens of ``text`` (log-prob -0.5 each)."""
    ids = tok.encode(text, add_special_tokens=False)

    def answer(body):
        return reply([choice(ids, [-0.5] * len(ids), finish, i) for i in range(body["n"])])

    return answer


# ---- the samples read back --------------------------------------------------------------------------------
def test_same_samples_as_the_in_process_engine(multi_tok):
    tok, model = multi_tok
    local = HFEngine(model, tok)
    sp = SamplingParams(temperature=1.0, max_new_tokens=12, seed=7)
    with CompletionsServer(HFEngine(clone_model(model), tok)) as server:
        got = engine_for([server], tok).generate(PROMPTS, 3, sp)
    for i, group in enumerate(got):
        want = local.generate([PROMPTS[i]], 3, sp.offset_seed(i))[0]  # prompt i samples with seed + i
        assert [c.completion_ids for c in group] == [c.completion_ids for c in want]
        assert [c.text for c in group] == [c.text for c in want]
        assert [c.finish_reason for c in group] == [c.finish_reason for c in want]
        for a, b in zip(group, want):
            assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5)
            assert a.prompt_ids == local.encode_prompt(PROMPTS[i])


def test_request_carries_the_contract_fields(multi_tok):
    tok, _ = multi_tok
    sp = SamplingParams(temperature=0.7, top_p=0.9, top_k=0, repetition_penalty=1.1, max_new_tokens=5, seed=3)
    with CompletionsServer(default=fixed(tok, "47")) as server:
        engine_for([server], tok).generate(PROMPTS[:2], 4, sp)
        bodies = sorted(server.completions, key=lambda b: b["seed"])
    assert [b["seed"] for b in bodies] == [3, 4]  # prompt i: seed + i
    b = bodies[0]
    assert b["prompt"] == HFEngine(None, tok).encode_prompt(PROMPTS[0])  # token ids, chat template applied
    assert (b["n"], b["max_tokens"], b["temperature"], b["top_p"], b["top_k"]) == (4, 5, 0.7, 0.9, -1)
    assert b["stop"] == [IM_END, "<|endoftext|>"] and b["repetition_penalty"] == 1.1
    assert b["include_stop_str_in_output"] is True and b["skip_special_tokens"] is False
    assert b["logprobs"] == 0 and b["return_tokens_as_token_ids"] is True


def test_multi_token_stop_ends_the_sample_where_the_in_process_engine_would(multi_tok):
    tok, _ = multi_tok
    assert len(tok.encode(IM_END, add_special_tokens=False)) > 1
    sp = SamplingParams(max_new_tokens=40)
    with CompletionsServer(default=fixed(tok, f"47{IM_END} and more text after it")) as server:
        group = engine_for([server], tok).generate(PROMPTS[:1], 2, sp)[0]
    for c in group:
        assert c.text == f"47{IM_END}" and c.finish_reason == "stop"
        assert len(c.logprobs) == len(c.completion_ids) < len(tok.encode(f"47{IM_END} and more", add_special_tokens=False))
        assert tok.decode(c.completion_ids).endswith(IM_END)


@pytest.mark.parametrize("text,server_reason,max_new,want_reason", [
    ("47", "stop", 10, "stop"),  # the server stopped on a token of its own (an end-of-sequence id): kept
    ("47", "length", 10, "length"),  # the server ran out of room: kept
    ("1 2 3 4 5 6 7 8 9", "length", 4, "length"),  # more tokens than max_new_tokens: cut there
])
def test_finish_reason_without_a_stop_string(multi_tok, text, server_reason, max_new, want_reason):
    tok, _ = multi_tok
    with CompletionsServer(default=fixed(tok, text, server_reason)) as server:
        c = engine_for([server], tok).generate(PROMPTS[:1], 2, SamplingParams(max_new_tokens=max_new))[0][0]
    assert c.finish_reason == want_reason and c.num_tokens <= max_new


def test_vllms_repetition_finish_reason_is_kitaes_repeat(multi_tok):
    """vLLM (0.17 on) ends a sample its repetition detection caught with finish_reason "repetition": kitae's
    "repeat" (what the repeat penalty and repeat_rate count), the tokens as the server sent them."""
    tok, _ = multi_tok
    with CompletionsServer(default=fixed(tok, "47 ab ab ab", "repetition")) as server:
        engine = engine_for([server], tok, down_secs=0.2, max_wait=2)
        group = engine.generate(PROMPTS[:1], 2, SamplingParams(max_new_tokens=40))[0]
    assert [c.finish_reason for c in group] == ["repeat", "repeat"] and group[0].text == "47 ab ab ab"
    assert engine.counters.bad_replies == 0 and len(server.completions) == 1


@pytest.mark.parametrize("reason, said", [
    ("abort", "aborted the request"),  # vLLM: a paused engine (pause mode "abort"), a shutdown, an abort call
    ("error", "an internal error"),  # vLLM 0.11.1 on: a retryable request-level error (a KV-cache load failure)
])
def test_an_aborted_or_failed_choice_is_asked_again_elsewhere(multi_tok, reason, said):
    """A choice vLLM did not finish is no sample: the reply is dropped, the replica marked down with what it said,
    and the group asked of another replica; it is not an unreadable reply."""
    tok, _ = multi_tok

    def one_unfinished(body):
        return reply([choice([5, 6], [-1.0, -1.0], reason if i == 1 else "stop", i) for i in range(body["n"])])

    with CompletionsServer(default=one_unfinished) as a, CompletionsServer(default=fixed(tok, "47")) as b:
        engine = engine_for([a, b], tok)
        groups = engine.generate(PROMPTS[:1] * 3, 2, SamplingParams(max_new_tokens=4))
        stats = engine.take_stats()
    assert all(c.text == "47" for g in groups for c in g)  # every sample from b
    assert 1 <= len(a.completions) and stats["rollout/failovers"] == len(a.completions)
    error = engine.replicas[0].last_error
    assert f"finish_reason '{reason}'" in error and said in error and "choice 1" in error
    assert "unreadable" not in error and engine.counters.bad_replies == 0


def test_repeat_detection_cuts_a_looping_sample(multi_tok):
    tok, _ = multi_tok
    sp = SamplingParams(max_new_tokens=60, repeat_min_count=4, repeat_max_period=4, repeat_min_span=8)
    with CompletionsServer(default=fixed(tok, "47 " + "ab " * 20)) as server:
        c = engine_for([server], tok).generate(PROMPTS[:1], 2, sp)[0][0]
    assert c.finish_reason == "repeat" and c.num_tokens < len(tok.encode("47 " + "ab " * 20, add_special_tokens=False))


def test_cut_sample_prefers_stop_to_repeat_to_length():
    sp = SamplingParams(max_new_tokens=3, repeat_min_count=2, repeat_max_period=1, repeat_min_span=2)
    # token 9 is the stop; [4, 4] is a repeat; the stop and the repeat and the length limit all fire at token 3
    assert cut_sample([4, 5, 9], [-1.0] * 3, "length", sp, lambda t: t[-1] == 9)[2] == "stop"
    assert cut_sample([5, 4, 4], [-1.0] * 3, "length", sp, lambda t: False)[2] == "repeat"
    assert cut_sample([5, 4, 6, 7], [-1.0] * 4, "length", sp, lambda t: False) == ([5, 4, 6], [-1.0] * 3, "length")


# ---- replicas ---------------------------------------------------------------------------------------------
def test_requests_spread_over_replicas(multi_tok):
    tok, _ = multi_tok
    prompts = PROMPTS * 4  # 12 groups sent together
    with CompletionsServer(default=fixed(tok, "47"), delay=0.05) as a, \
            CompletionsServer(default=fixed(tok, "47"), delay=0.05) as b:
        groups = engine_for([a, b], tok).generate(prompts, 2, SamplingParams(max_new_tokens=4))
        counts = len(a.completions), len(b.completions)
    assert len(groups) == 12 and all(len(g) == 2 for g in groups)
    assert sum(counts) == 12 and abs(counts[0] - counts[1]) <= 1


def test_failing_replica_is_marked_down_and_its_requests_go_elsewhere(multi_tok, caplog):
    tok, _ = multi_tok
    with CompletionsServer(default=(500, {"error": {"message": "out of memory"}})) as a, \
            CompletionsServer(default=fixed(tok, "47")) as b:
        engine = engine_for([a, b], tok)
        groups = engine.generate(PROMPTS * 2, 2, SamplingParams(max_new_tokens=4))
        stats = engine.take_stats()
        assert len(b.completions) == 6  # every group answered by b
        assert 1 <= len(a.completions) <= 6
    assert all(len(g) == 2 and g[0].text == "47" for g in groups)
    assert stats["rollout/failovers"] == len(a.completions) and stats["rollout/replicas_down"] == 1
    assert "out of memory" in caplog.text


def test_killed_replica_the_run_goes_on_with_the_other(multi_tok):
    tok, _ = multi_tok
    a = CompletionsServer(default=fixed(tok, "47"))
    with CompletionsServer(default=fixed(tok, "47")) as b:
        engine = engine_for([a, b], tok)
        engine.generate(PROMPTS, 2, SamplingParams(max_new_tokens=4))
        a.close()  # killed between steps
        groups = engine.generate(PROMPTS * 2, 2, SamplingParams(max_new_tokens=4))
    assert len(groups) == 6 and all(len(g) == 2 for g in groups)
    assert engine.replicas[0].last_error  # it says why it is down


def test_unreadable_reply_fails_over(multi_tok):
    tok, _ = multi_tok
    broken = lambda body: {"choices": [{"index": 0, "text": "47", "finish_reason": "stop"}]}  # no logprobs
    with CompletionsServer(script=[broken], default=fixed(tok, "47")) as a, \
            CompletionsServer(default=fixed(tok, "47")) as b:
        engine = engine_for([a, b], tok)
        group = engine.generate(PROMPTS[:1], 2, SamplingParams(max_new_tokens=4))[0]
    assert group[0].text == "47" and engine.counters.bad_replies == 1 and "unreadable" in engine.replicas[0].last_error


def test_all_down_the_step_waits_logs_and_retries(multi_tok, caplog):
    tok, _ = multi_tok
    caplog.set_level(logging.WARNING, logger="kitae.rollout.server")
    down = (503, {"error": {"message": "loading"}})
    with CompletionsServer(script=[down, down], default=fixed(tok, "47")) as a:
        engine = engine_for([a], tok, down_secs=0.3)
        group = engine.generate(PROMPTS[:1], 2, SamplingParams(max_new_tokens=4))[0]
        stats = engine.take_stats()
    assert group[0].text == "47" and len(a.completions) == 3
    assert "all 1 rollout servers are down; the step waits" in caplog.text
    assert stats["rollout/wait_secs"] > 0


def test_all_down_past_max_wait_is_an_error(multi_tok):
    tok, _ = multi_tok
    with CompletionsServer(default=(503, {"error": {"message": "loading"}})) as a:
        engine = engine_for([a], tok, down_secs=0.2, max_wait=0.5)
        with pytest.raises(KitaeError, match=r"no rollout server answered .*server_max_wait.*loading"):
            engine.generate(PROMPTS[:1], 2, SamplingParams(max_new_tokens=4))


def test_refused_request_is_an_error_at_once(multi_tok):
    tok, _ = multi_tok
    refusal = (400, {"error": {"message": "unsupported field: top_k", "type": "invalid_request_error"}})
    with CompletionsServer(default=refusal) as a, CompletionsServer(default=fixed(tok, "47")) as b:
        with pytest.raises(KitaeError, match=rf"{a.url}: HTTP 400: .*unsupported field: top_k"):
            engine_for([a, b], tok).generate(PROMPTS[:1], 2, SamplingParams(max_new_tokens=4))
        assert b.completions == []  # another replica would refuse it too


# ---- versions ---------------------------------------------------------------------------------------------
class Reloads(ReloadsWeights):
    """A sync strategy that only asks replicas to reload (the disk sync's second half)."""

    def __init__(self):
        self.calls = 0

    def push(self, engine, model, version, state=None):
        for r in engine.replicas:
            self.reload(engine, r, version)

    def reload(self, engine, replica, version=None):
        import httpx

        self.calls += 1
        version = engine.version if version is None else version
        got = httpx.post(replica.url + "/update_weights_from_disk", json={"model_path": "/nowhere"}).json()
        engine.mark_loaded(replica, version, got["weight_version"])


def test_samples_from_other_weights_are_dropped_counted_and_asked_again(multi_tok):
    tok, _ = multi_tok
    with CompletionsServer(default=lambda body: reply([choice([5], [-1.0], "stop", i) for i in range(body["n"])],
                                                      weight_version=server.weight_version)) as server:
        sync = Reloads()
        engine = engine_for([server], tok, weight_sync=sync, down_secs=0.2)
        engine.sync_weights(None, 5)  # policy version 5; the server now reports weight_version 1
        engine.generate(PROMPTS[:1], 2, SamplingParams(max_new_tokens=4))
        assert engine.take_stats() == {"rollout/stale_dropped": 0, "rollout/failovers": 0,
                                       "rollout/replicas_down": 0, "policy_version": 5}
        server.weight_version = 0  # it restarted with the weights it was started with
        engine.generate(PROMPTS[:1], 2, SamplingParams(max_new_tokens=4))
        stats = engine.take_stats()
    assert stats["rollout/stale_dropped"] == 2 and stats["policy_version"] == 5
    assert sync.calls == 2 and len(server.completions) == 3  # dropped, reloaded, asked again


def test_older_than_max_staleness_is_dropped():
    engine = ServerEngine(None, None, ["http://127.0.0.1:9"], max_staleness=1, weight_sync=Reloads())
    engine.version = 7
    assert [engine._too_old(v) for v in (7, 6, 5, None)] == [False, False, True, True]
    frozen = ServerEngine(None, None, ["http://127.0.0.1:9"], max_staleness=None)
    frozen.version = 7
    assert not frozen._too_old(None)


# ---- URLs and pre-flight ----------------------------------------------------------------------------------
@pytest.mark.parametrize("url,want", [
    ("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
    ("http://127.0.0.1:8000/", "http://127.0.0.1:8000"),  # trailing slash
    ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000"),  # the OpenAI base URL people copy
    ("https://rollouts.example:443/v1/", "https://rollouts.example:443"),
])
def test_check_url_normalizes(url, want):
    assert check_url(url, "sampling.servers[0]") == want


@pytest.mark.parametrize("url", [
    "127.0.0.1:8000",  # no scheme
    "ftp://127.0.0.1:8000",  # not http
    "http://:8000",  # no host
    "http://127.0.0.1:port",  # a port that is not a number
])
def test_check_url_refuses(url):
    with pytest.raises(ConfigError, match=r"sampling.servers\[1\]: .* like http://127.0.0.1:8000"):
        check_url(url, "sampling.servers[1]")


def test_preflight_names_the_dead_server():
    with CompletionsServer() as live:
        dead = CompletionsServer()
        dead.close()
        assert preflight([live.url]) == {live.url: "scripted"}
        with pytest.raises(KitaeError, match=rf"sampling.servers\[1\]: no rollout server answers at {dead.url} .*"
                                             r"kitae serve model --port"):
            preflight([live.url, dead.url])


def test_preflight_explains_a_missing_token(monkeypatch):
    from kitae.http.server import json_server

    with CompletionsServer() as plain:
        guarded = json_server(plain, "127.0.0.1", 0, token="a-token-long-enough-1234")
        threading.Thread(target=guarded.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{guarded.server_address[1]}"
        try:
            monkeypatch.delenv("KITAE_SERVE_TOKEN", raising=False)
            with pytest.raises(KitaeError, match=r"wants an access token .*KITAE_SERVE_TOKEN.*is not set"):
                preflight([url], api_key_env="KITAE_SERVE_TOKEN")
            monkeypatch.setenv("KITAE_SERVE_TOKEN", "a-token-long-enough-1234")
            assert preflight([url], api_key_env="KITAE_SERVE_TOKEN") == {url: "scripted"}
        finally:
            guarded.shutdown()
            guarded.server_close()
