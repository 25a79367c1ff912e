"""The OpenAI-compatible client against real HTTP servers on loopback: retries, timeouts, limits, cache, formats."""

from __future__ import annotations

import asyncio

import pytest

from kitae.judge.cache import ResponseCache
from kitae.judge.client import ChatClient, ChatError, normalize_base_url
from kitae.judge.testing import Reply, ScriptedServer

MSG = [{"role": "user", "content": "Say hi"}]
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": False}


def client(server: ScriptedServer, **kw) -> ChatClient:
    kw = {"retries": 2, "backoff": 0.0, "timeout": 5.0, **kw}
    return ChatClient(server.base_url, server.model, **kw)


def chat(c: ChatClient, **kw):
    return asyncio.run(c.chat(MSG, **kw))


@pytest.mark.parametrize(
    "given, expected",
    [
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000/v1"),  # bare server: /v1 added
        ("http://127.0.0.1:8000/", "http://127.0.0.1:8000/v1"),
        ("http://127.0.0.1:8000/v1/", "http://127.0.0.1:8000/v1"),
        ("https://api.openai.com/v1", "https://api.openai.com/v1"),
        ("http://h:11434/v1/chat/completions", "http://h:11434/v1"),  # the endpoint pasted whole
        ("http://h/openai/v1", "http://h/openai/v1"),  # a proxy path is kept
    ],
)
def test_base_url(given, expected):
    assert normalize_base_url(given) == expected


def test_request_shape_usage_and_api_key(monkeypatch):
    monkeypatch.setenv("KITAE_TEST_KEY", "sk-test")
    with ScriptedServer([Reply(content='{"a": 1}')]) as server:
        c = client(server, api_key_env="KITAE_TEST_KEY")
        reply = chat(c, schema=SCHEMA, temperature=0, max_tokens=None)
        body, headers = server.requests[0]["body"], server.requests[0]["headers"]
    assert reply.content == '{"a": 1}' and reply.response_format == "json_schema" and not reply.cached
    assert body == {"model": server.model, "messages": MSG, "temperature": 0, "response_format": {
        "type": "json_schema", "json_schema": {"name": "reply", "schema": SCHEMA, "strict": True}}}
    assert headers["Authorization"] == "Bearer sk-test"
    assert reply.usage.prompt_tokens == 2 and reply.usage.completion_tokens == 7  # "Say hi"; '{ " a " : 1 }'
    assert (c.counters.prompt_tokens, c.counters.completion_tokens) == (2, 7)


def test_no_key_no_authorization_header(monkeypatch):
    monkeypatch.delenv("KITAE_UNSET_KEY", raising=False)
    with ScriptedServer([Reply(content="hi")]) as server:
        chat(client(server, api_key_env="KITAE_UNSET_KEY"))
        assert "Authorization" not in server.requests[0]["headers"]


def test_openai_gets_max_completion_tokens():
    c = ChatClient("https://api.openai.com/v1", "gpt-4.1-mini")
    assert "max_completion_tokens" in c._body(MSG, None, {"max_tokens": 9})
    assert "max_tokens" in ChatClient("http://127.0.0.1:1/v1", "m")._body(MSG, None, {"max_tokens": 9})


@pytest.mark.parametrize(
    "script, retries, ok, counts",
    [
        # (replies in order, retries, succeeds?, expected counters)
        ([Reply(status=500), Reply(status=429, headers={"Retry-After": "0"}), Reply(content="hi")], 2, True,
         {"requests": 3, "retries": 2, "http_errors": 2, "failed_calls": 0}),
        ([Reply(status=503)] * 3, 2, False, {"requests": 3, "retries": 2, "http_errors": 3, "failed_calls": 1}),
        ([Reply(status=400, body={"error": {"message": "bad temperature"}})], 2, False,  # not worth retrying
         {"requests": 1, "retries": 0, "http_errors": 1, "failed_calls": 1}),
        ([Reply(body="<html>oops</html>")], 2, False, {"requests": 1, "bad_replies": 1, "failed_calls": 1}),
        ([Reply(body={"choices": []})], 2, False, {"requests": 1, "bad_replies": 1, "failed_calls": 1}),
        ([Reply(body={"choices": [{"message": {"content": None, "refusal": "no"}}]})], 2, False,
         {"requests": 1, "bad_replies": 1, "failed_calls": 1}),
    ],
)
def test_retries_and_failures(script, retries, ok, counts):
    with ScriptedServer(script, default=Reply(content="after")) as server:
        c = client(server, retries=retries)
        if ok:
            assert chat(c).content == "hi"
        else:
            with pytest.raises(ChatError):
                chat(c)
    got = c.counters.as_dict()
    assert {k: got[k] for k in counts} == counts


def test_slow_replies_time_out_and_are_retried():
    with ScriptedServer([Reply(content="late", delay=5.0)] * 2, default=Reply(content="fast")) as server:
        c = client(server, timeout=0.2, retries=1)
        with pytest.raises(ChatError, match="timed out after 0.2s"):
            chat(c)
        assert c.counters.timeouts == 2 and c.counters.requests == 2
        assert chat(c).content == "fast"  # the server is fine again; the client too


def test_unauthorized_names_the_key_variable(monkeypatch):
    monkeypatch.delenv("KITAE_UNSET_KEY", raising=False)
    with ScriptedServer([Reply(status=401, body={"error": {"message": "no key"}})]) as server:
        with pytest.raises(ChatError, match=r"\$KITAE_UNSET_KEY, which is not set"):
            chat(client(server, api_key_env="KITAE_UNSET_KEY"))


@pytest.mark.parametrize(
    "rejected, sent",
    [
        ((), ["json_schema"]),
        (("json_schema",), ["json_schema", "json_object"]),
        (("json_schema", "json_object"), ["json_schema", "json_object", None]),
    ],
)
def test_auto_format_downgrades_and_remembers(rejected, sent):
    with ScriptedServer(default=Reply(content='{"a": 1}'), reject_formats=rejected) as server:
        c = client(server)
        first = chat(c, schema=SCHEMA)
        chat(c, schema={**SCHEMA, "title": "other"})  # a second call starts at the level that worked
        formats = [(b.get("response_format") or {}).get("type") for b in server.chat_requests]
    assert formats == sent + [sent[-1]]
    assert first.response_format == (sent[-1] or "none")
    assert c.counters.format_downgrades == len(sent) - 1


def test_fixed_format_does_not_downgrade():
    with ScriptedServer(reject_formats=("json_schema",)) as server:
        with pytest.raises(ChatError, match="HTTP 400"):
            chat(client(server, format="json_schema"), schema=SCHEMA)


def test_cache_in_memory_and_on_disk(tmp_path):
    with ScriptedServer(default=Reply(content="cached?")) as server:
        c = client(server, cache=ResponseCache(tmp_path))
        first, second = chat(c, temperature=0), chat(c, temperature=0)
        third = chat(c, temperature=0.5)  # another request: a miss
        c.close()
        again = client(server, cache=ResponseCache(tmp_path))  # a new process would see the SQLite file
        fourth = chat(again, temperature=0)
        assert len(server.chat_requests) == 2
    assert (first.cached, second.cached, third.cached, fourth.cached) == (False, True, False, True)
    assert c.counters.cache_hits == 1 and again.counters.cache_hits == 1 and again.counters.requests == 0
    assert c.counters.prompt_tokens == 2 * 2  # two live calls of 2 prompt tokens; the hit costs nothing
    assert (tmp_path / "chat_cache.sqlite").exists()


def test_concurrency_limit():
    with ScriptedServer(default=Reply(content="x", delay=0.3)) as server:
        c = client(server, max_concurrency=2)

        async def many():
            return await asyncio.gather(*(c.chat([{"role": "user", "content": str(i)}]) for i in range(6)))

        assert len(asyncio.run(many())) == 6
        assert server.max_in_flight == 2
