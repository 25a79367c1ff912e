"""``stream: true`` on `kitae serve model` (kitae/serving/streaming.py), over real HTTP on 127.0.0.1: the events
parsed as an OpenAI client reads them (the `openai` package is not a dependency), and the streamed text equal to
the text of the same request without streaming."""

from __future__ import annotations

import json
import threading

import httpx
import pytest

from kitae.serving.streaming import settled
from tests.served import serve_model

TIMEOUT = 120
USER = [{"role": "user", "content": "Say something about the sea."}]


@pytest.fixture(scope="module")
def url(random_lm):
    with serve_model(random_lm, name="tiny", default_max_tokens=24) as served:
        yield served


def post(url: str, path: str, body: dict) -> dict:
    reply = httpx.post(url + path, json=body, timeout=TIMEOUT)
    assert reply.status_code == 200, reply.text
    return reply.json()


def events(url: str, path: str, body: dict) -> list[dict]:
    """The `data:` events of a streamed reply, as OpenAI's SDK reads them; the last one must be [DONE]."""
    with httpx.stream("POST", url + path, json={**body, "stream": True}, timeout=TIMEOUT) as reply:
        assert reply.status_code == 200, reply.read()
        assert reply.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in reply.iter_lines() if line]
    assert all(line.startswith("data: ") for line in lines), lines
    assert lines[-1] == "data: [DONE]"
    return [json.loads(line[len("data: "):]) for line in lines[:-1]]


def streamed_choices(chunks: list[dict], field) -> dict[int, dict]:
    """Per choice index: its text joined from the chunks, its finish_reason, and how many chunks carried text."""
    out: dict[int, dict] = {}
    for chunk in chunks:
        for choice in chunk["choices"]:
            got = out.setdefault(choice["index"], {"text": "", "finish": None, "pieces": 0})
            assert got["finish"] is None, "a chunk after the choice's finish_reason"
            piece = field(choice)
            got["text"] += piece
            got["pieces"] += bool(piece)
            got["finish"] = choice["finish_reason"]
    return out


SAMPLED = {"temperature": 1.0, "seed": 7}  # the random model's greedy text repeats one token; sampled text varies
def with_stop_from_text(url: str, path: str, body: dict) -> dict:
    """``body`` with ``stop: "FROM_TEXT"`` replaced by a letter from the middle of the reply's text without a stop,
    so the reply is cut there (checked)."""
    if body.get("stop") != "FROM_TEXT":
        return body
    text = reply_text(post(url, path, {**body, "stop": None}))
    letters = [c for c in text[len(text) // 2:] if c.isalnum()]
    assert letters, f"no letter in the second half of {text!r}"
    body = {**body, "stop": [letters[0]]}
    assert len(reply_text(post(url, path, body))) < len(text)
    return body


def reply_text(reply: dict) -> str:
    choice = reply["choices"][0]
    return choice["text"] if "text" in choice else choice["message"]["content"]


CHAT_CASES = [
    {"temperature": 0},  # greedy
    {**SAMPLED, "n": 2},  # sample i seeded seed + i, streamed or not
    {**SAMPLED, "stop": "FROM_TEXT"},  # a stop string taken from the middle of the text, cut out of it
    {**SAMPLED, "max_tokens": 3},  # cut at the length limit
    {"temperature": 0, "response_format": {"type": "json_schema", "json_schema": {"schema": {
        "type": "object", "properties": {"score": {"type": "integer", "minimum": 1, "maximum": 5}},
        "required": ["score"]}}}},  # constrained JSON: sent whole
]


@pytest.mark.parametrize("settings", CHAT_CASES, ids=["greedy", "seeded-n2", "stop", "length", "json-schema"])
def test_streamed_chat_text_is_the_reply_text(url, settings):
    body = with_stop_from_text(url, "/v1/chat/completions", {"model": "tiny", "messages": USER, **settings})
    whole = post(url, "/v1/chat/completions", body)
    chunks = events(url, "/v1/chat/completions", body)
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"} and len({c["id"] for c in chunks}) == 1
    got = streamed_choices(chunks, lambda choice: choice["delta"].get("content") or "")
    for choice in whole["choices"]:
        streamed = got[choice["index"]]
        assert (streamed["text"], streamed["finish"]) == (choice["message"]["content"], choice["finish_reason"])
    firsts = {}
    for chunk in chunks:
        firsts.setdefault(chunk["choices"][0]["index"], chunk["choices"][0]["delta"])
    assert all(delta == {"role": "assistant", "content": ""} for delta in firsts.values())


def test_a_long_reply_arrives_in_pieces(url):
    body = {"prompt": "The sea", "max_tokens": 24, **SAMPLED, "ignore_eos": True}
    whole = post(url, "/v1/completions", body)["choices"][0]["text"]
    got = streamed_choices(events(url, "/v1/completions", body), lambda choice: choice["text"])[0]
    assert got["text"] == whole and got["finish"] == "length"
    assert got["pieces"] > 1  # streamed as it was decoded, not in one piece at the end


@pytest.mark.parametrize("settings", [
    {"temperature": 0},
    {**SAMPLED, "n": 3},
    {**SAMPLED, "stop": "FROM_TEXT"},
    {**SAMPLED, "stop": "FROM_TEXT", "include_stop_str_in_output": True},
    {**SAMPLED, "skip_special_tokens": False},
], ids=["greedy", "seeded-n3", "stop", "stop-kept", "special-tokens"])
def test_streamed_completions_text_is_the_reply_text(url, settings):
    body = with_stop_from_text(url, "/v1/completions", {"prompt": "The sea is", "max_tokens": 20, **settings})
    whole = post(url, "/v1/completions", body)
    chunks = events(url, "/v1/completions", body)
    assert {c["object"] for c in chunks} == {"text_completion"}
    got = streamed_choices(chunks, lambda choice: choice["text"])
    assert len(got) == len(whole["choices"])
    for choice in whole["choices"]:
        assert (got[choice["index"]]["text"], got[choice["index"]]["finish"]) == (choice["text"],
                                                                                  choice["finish_reason"])


@pytest.mark.parametrize("path, body", [
    ("/v1/chat/completions", {"messages": USER, "n": 2}),
    ("/v1/completions", {"prompt": "The sea", "n": 2}),
])
def test_include_usage_adds_a_last_chunk_with_the_usage(url, path, body):
    body = {**body, "temperature": 0, "max_tokens": 6}
    whole = post(url, path, body)
    chunks = events(url, path, {**body, "stream_options": {"include_usage": True}})
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == whole["usage"]
    assert all(c["usage"] is None for c in chunks[:-1])
    assert "usage" not in events(url, path, body)[-1]  # not asked: no usage field


@pytest.mark.parametrize("path, body, param", [
    ("/v1/chat/completions", {"messages": USER, "logprobs": True}, "logprobs"),
    ("/v1/completions", {"prompt": "x", "logprobs": 1}, "logprobs"),
    ("/v1/completions", {"prompt": "x", "return_weight_versions": True}, "return_weight_versions"),
    ("/v1/chat/completions", {"messages": USER, "stream_options": {"include_usage": "yes"}},
     "stream_options.include_usage"),
    ("/v1/completions", {"prompt": "x", "stream_options": {"continuous_usage_stats": True}},
     "stream_options.continuous_usage_stats"),
])
def test_what_is_not_streamed_is_refused_before_the_stream_starts(url, path, body, param):
    reply = httpx.post(url + path, json={**body, "stream": True}, timeout=TIMEOUT)
    assert reply.status_code == 400 and reply.headers["content-type"] == "application/json"
    assert reply.json()["error"]["param"] == param


def test_stream_must_be_a_boolean(url):
    reply = httpx.post(url + "/v1/chat/completions", json={"messages": USER, "stream": "yes"}, timeout=TIMEOUT)
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "stream"


@pytest.mark.parametrize("text, ends, kept", [
    ("hello", [], "hello"),
    ("hello ", [], "hello"),  # a space may be cleaned up before the next token
    ("hello\n\n", [], "hello"),
    ("caf\ufffd", [], "caf"),  # half of a multi-byte character
    ("a b<|im", ["<|im_end|>"], "a b"),  # could become a control marker
    ("a b<|im_end|>", ["<|im_end|>"], "a b"),
    ("ok STO", ["STOP"], "ok"),
    ("ok ST", ["STOP", "T"], "ok"),  # the longest start of any end is held back
    ("<|i", ["<|im_end|>"], ""),
    ("ok S.", ["STOP"], "ok S."),  # no longer a start of STOP
])
def test_settled_holds_back_what_later_tokens_may_change(text, ends, kept):
    assert settled(text, ends) == kept


class _FailingMidway:
    """A service whose stream fails after its first event (a model that fails mid-reply)."""

    def handle_get(self, path):
        return {}

    def handle_post(self, path, body):
        from kitae.http.server import EventStream

        def events():
            yield {"n": 1}
            raise RuntimeError("the model failed")

        return EventStream(events())

    def error_reply(self, exc, method, path):
        return 500, {"error": {"message": f"{type(exc).__name__}: {exc}"}}


def test_an_error_mid_stream_is_the_last_event_before_done():
    from kitae.http.server import json_server

    server = json_server(_FailingMidway(), "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        got = events(f"http://127.0.0.1:{server.server_address[1]}", "/x", {})
    finally:
        server.shutdown()
        server.server_close()
    assert got == [{"n": 1}, {"error": {"message": "RuntimeError: the model failed"}}]
