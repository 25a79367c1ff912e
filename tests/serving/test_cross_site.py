"""A web page in the user's browser against kitae's loopback servers (`kitae serve model`, `kitae serve rm`, the
scripted stand-in judge), sent to real servers on 127.0.0.1.

Two attacks: a cross-site POST the browser sends without asking (Content-Type text/plain needs no CORS preflight)
that would swap the served weights, and DNS rebinding (a page on evil.example whose name now resolves to
127.0.0.1: its requests reach the server with ``Host: evil.example``, and the page can read the replies).
Clients that send no Origin (curl, the OpenAI SDK, kitae's own clients) keep working."""

from __future__ import annotations

import httpx
import pytest

from kitae.judge.testing import ScriptedServer
from tests.serving.loopback import TOKEN

PATHS = {"rm": "/v1/score", "model": "/v1/chat/completions", "judge": "/v1/chat/completions"}
GOOD = {"rm": {"texts": ["hello"]}, "model": {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
        "judge": {"model": "scripted-judge", "messages": [{"role": "user", "content": "hi"}]}}
SERVERS = ["rm", "model", "judge"]
EVIL = "http://evil.example"


@pytest.fixture(scope="module")
def ports(servers):
    with ScriptedServer() as judge:
        yield {**servers, "judge": judge.port}


def url(port: int, path: str) -> str:
    return f"http://127.0.0.1:{port}{path}"


def weight_version(port: int) -> int:
    return httpx.get(url(port, "/health"), timeout=10).json()["weight_version"]


@pytest.mark.parametrize("ctype, origin", [
    ("text/plain", EVIL),  # what a page's fetch() or form sends without a preflight
    ("text/plain", None),
    ("application/json", EVIL),
    ("application/json", "null"),  # a sandboxed frame or a file:// page
])
def test_a_cross_site_post_cannot_swap_the_served_weights(servers, random_lm, ctype, origin):
    port = servers["model"]
    before = weight_version(port)
    headers = {"Content-Type": ctype, **({"Origin": origin} if origin else {})}
    reply = httpx.post(url(port, "/update_weights_from_disk"), content=f'{{"model_path": "{random_lm}"}}',
                       headers=headers, timeout=60)
    assert reply.status_code == (415 if ctype == "text/plain" else 403), reply.text
    assert reply.json()["success"] is False  # still SGLang's reply shape
    assert weight_version(port) == before


def test_the_weights_still_load_for_a_client_without_origin(servers, random_lm):
    port = servers["model"]
    before = weight_version(port)
    reply = httpx.post(url(port, "/update_weights_from_disk"), json={"model_path": random_lm}, timeout=60)
    assert reply.status_code == 200 and reply.json()["success"] is True, reply.text
    assert weight_version(port) == before + 1


@pytest.mark.parametrize("kind", SERVERS)
@pytest.mark.parametrize("headers, status", [
    ({"Content-Type": "text/plain", "Origin": EVIL}, 415),
    ({"Content-Type": "application/x-www-form-urlencoded"}, 415),  # an HTML form
    ({"Content-Type": "multipart/form-data; boundary=x"}, 415),
    ({}, 415),  # no type at all (a fetch() of a Blob)
    ({"Content-Type": "application/json", "Origin": EVIL}, 403),
    ({"Content-Type": "application/json", "Origin": "http://127.0.0.1:1"}, 403),  # another port is another site
    ({"Content-Type": "application/json"}, 200),  # curl -H, the OpenAI SDK, kitae's clients: no Origin
    ({"Content-Type": "Application/JSON; charset=utf-8"}, 200),  # a media type is case-insensitive
    ({"Content-Type": "application/json", "Origin": "SAME"}, 200),  # a page served from this very origin
])
def test_posts_must_be_json_and_not_from_another_site(ports, kind, headers, status):
    port = ports[kind]
    if headers.get("Origin") == "SAME":
        headers = {**headers, "Origin": f"http://127.0.0.1:{port}"}
    reply = httpx.post(url(port, PATHS[kind]), content=httpx.Request("POST", "/", json=GOOD[kind]).content,
                       headers=headers, timeout=60)
    assert reply.status_code == status, reply.text
    if status == 415:
        assert "Content-Type: application/json" in reply.json()["error"]["message"]


@pytest.mark.parametrize("kind", SERVERS)
@pytest.mark.parametrize("host, status", [
    ("evil.example:{port}", 403),  # DNS rebinding
    ("evil.example", 403),
    ("127.0.0.1.evil.example:{port}", 403),
    ("[bad", 403),  # not a host at all
    ("", 403),
    ("127.0.0.1:{port}", 200),
    ("localhost:{port}", 200),
    ("LOCALHOST", 200),
    ("[::1]:{port}", 200),  # the loopback names answer, whichever the client used
])
def test_a_foreign_host_header_is_refused_on_every_route(ports, kind, host, status):
    port = ports[kind]
    headers = {"Host": host.format(port=port)}
    get = httpx.get(url(port, "/v1/models"), headers=headers, timeout=10)
    post = httpx.post(url(port, PATHS[kind]), json=GOOD[kind], headers=headers, timeout=60)
    assert (get.status_code, post.status_code) == (status, status), (get.text, post.text)
    if status == 403:
        assert "is not this machine" in post.json()["error"]["message"]


@pytest.fixture(scope="module")
def networked(random_rm):
    """`kitae serve rm` bound to every interface (reached here through 127.0.0.1), with its access token."""
    from kitae.rewards.reward_model import LocalRewardModel
    from kitae.serving.reward_server import make_server
    from tests.serving.loopback import serve_in_thread

    server = serve_in_thread(make_server(LocalRewardModel(random_rm), host="0.0.0.0", port=0, token=TOKEN))
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("headers, status", [
    ({"Host": "gpu-box.lan"}, 401),  # the machine's network name, without the token
    ({"Host": "gpu-box.lan", "Authorization": f"Bearer {TOKEN}x"}, 401),
    ({"Host": "gpu-box.lan", "Authorization": f"Bearer {TOKEN}"}, 200),  # any name reaches a network address
    ({"Host": "gpu-box.lan", "Authorization": f"Bearer {TOKEN}", "Origin": EVIL}, 403),
])
def test_a_network_address_checks_the_token_instead_of_the_host(networked, headers, status):
    reply = httpx.post(url(networked, PATHS["rm"]), json=GOOD["rm"], headers=headers, timeout=30)
    assert reply.status_code == status, reply.text
