"""`kitae serve model` on each family, on loopback: chat and completions stop at every end id of the model."""

from __future__ import annotations

import threading

import httpx
import pytest

from kitae.serving.server import load_service, make_server
from tests.families.say import Say


@pytest.fixture
def served(family):
    """(Family, the service, its base URL): the family's model behind a real HTTP server on 127.0.0.1."""
    fam, folder = family
    service = load_service(str(folder), name=fam.name, default_max_tokens=8)
    server = make_server(service, port=0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield fam, service, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    service.close()


def test_served_chat_and_completions_stop_at_every_end_id(served):
    fam, service, url = served
    tok, end = service.engine.tokenizer, service.engine.end_marker
    word = tok.encode("hello", add_special_tokens=False)
    prompt = service.engine.encode_prompt([{"role": "user", "content": "hi"}])
    for end_id, end_text in zip(end.ids, end.texts):
        say = Say(service.engine.model, [*word, end_id, *word])
        try:
            chat = httpx.post(f"{url}/v1/chat/completions", json={
                "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "temperature": 0}, timeout=60)
            say.calls = 0
            done = httpx.post(f"{url}/v1/completions", json={
                "prompt": prompt, "max_tokens": 8, "temperature": 0.7, "seed": 1}, timeout=60)
            say.calls = 0
            on = httpx.post(f"{url}/v1/completions", json={
                "prompt": prompt, "max_tokens": 8, "temperature": 0, "ignore_eos": True}, timeout=60)
        finally:
            say.remove()
        assert chat.status_code == 200, chat.text
        choice = chat.json()["choices"][0]
        assert (choice["message"]["content"], choice["finish_reason"]) == ("hello", "stop"), (fam.name, end_text)
        assert chat.json()["usage"]["completion_tokens"] == len(word) + 1
        choice = done.json()["choices"][0]
        assert (choice["text"], choice["finish_reason"]) == ("hello", "stop"), (fam.name, end_text)
        assert on.json()["choices"][0]["finish_reason"] == "length"  # ignore_eos: past every end id


@pytest.fixture
def served_qwen3(family_dirs):
    service = load_service(str(family_dirs["qwen3"]), name="qwen3", default_max_tokens=4,
                           chat_template_kwargs={"enable_thinking": False})
    server = make_server(service, port=0)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield service, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    service.close()


def test_chat_requests_chat_template_kwargs_reach_the_template(served_qwen3):
    """As vLLM's and SGLang's chat APIs: Qwen3's thinking switch per request, over the server's default."""
    service, url = served_qwen3
    messages = [{"role": "user", "content": "hi"}]
    thinking = len(service.engine.encode_prompt(messages, {"enable_thinking": True}))
    off = len(service.engine.encode_prompt(messages, {"enable_thinking": False}))
    assert off > thinking  # the empty <think> block in the prompt

    def prompt_tokens(**extra):
        resp = httpx.post(f"{url}/v1/chat/completions", json={"messages": messages, "max_tokens": 1, **extra},
                          timeout=60)
        assert resp.status_code == 200, resp.text
        return resp.json()["usage"]["prompt_tokens"]

    assert prompt_tokens() == off  # the server's --chat-template-kwargs
    assert prompt_tokens(chat_template_kwargs={"enable_thinking": True}) == thinking  # the request's go over them
    assert prompt_tokens(chat_template_kwargs={}) == off


@pytest.mark.parametrize("value, message", [
    ("enable_thinking", "chat_template_kwargs must be an object"),
    ({"tokenize": True}, "chat_template_kwargs.tokenize is an argument of apply_chat_template"),
    ({"chat_template": "{{ 7 }}"}, "chat_template_kwargs.chat_template is an argument of apply_chat_template"),
])
def test_bad_chat_template_kwargs_are_refused(served_qwen3, value, message):
    _, url = served_qwen3
    resp = httpx.post(f"{url}/v1/chat/completions", json={
        "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, "chat_template_kwargs": value}, timeout=60)
    assert resp.status_code == 400 and message in resp.json()["error"]["message"], resp.text
    assert resp.json()["error"]["param"].startswith("chat_template_kwargs")


@pytest.mark.parametrize("value, message", [("{enable_thinking: false}", "not JSON"),
                                            ('{"tokenize": true}', "an argument of apply_chat_template")])
def test_a_bad_chat_template_kwargs_option_is_refused_before_the_model_loads(family_dirs, value, message):
    from typer.testing import CliRunner

    from kitae.cli.main import app

    result = CliRunner().invoke(app, ["serve", "model", "--model", str(family_dirs["qwen3"]), "--port", "0",
                                      "--chat-template-kwargs", value])
    assert result.exit_code == 2 and message in result.output, result.output
