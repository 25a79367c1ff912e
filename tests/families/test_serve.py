"""`kitae serve model` on each family, on loopback: chat and completions stop at every end id of the model."""

from __future__ import annotations

import threading

import httpx
import pytest

from kitae.serving.server import load_service, make_server
from tests.families.conftest import Say


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
