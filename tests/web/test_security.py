"""The run page shows model output and run folders: who may see them, and that nothing in them runs."""

from __future__ import annotations

import http.client
import json
import re
import socket
from pathlib import Path

import httpx
import pytest

from kitae.errors import ConfigError
from kitae.web import check_bind, make_server
from kitae.web.server import STATIC_DIR

TOKEN = "k" * 24


@pytest.mark.parametrize("host, token, refused", [
    ("127.0.0.1", None, None),  # loopback needs no token
    ("localhost", None, None),
    ("::1", None, None),
    ("127.0.0.2", None, None),  # all of 127/8 is loopback
    ("0.0.0.0", None, "--host: binding 0.0.0.0 would show your runs to anyone"),
    ("192.168.1.20", None, "--host: binding 192.168.1.20"),
    ("0.0.0.0", TOKEN, None),  # another address with a token
    ("0.0.0.0", "", "--host"),  # an empty token is no token
    ("127.0.0.1", "short", "--token: the access token is 5 characters; use 16 or more"),
])
def test_check_bind(host, token, refused):
    if refused is None:
        check_bind(host, token)
    else:
        with pytest.raises(ConfigError, match=re.escape(refused)):
            check_bind(host, token)


def test_a_network_address_without_token_is_refused_before_binding(tmp_path):
    with pytest.raises(ConfigError, match="KITAE_UI_TOKEN"):
        make_server(tmp_path, host="0.0.0.0", port=0)


def test_the_token_is_required_on_every_request(serve, runs_dir):
    s = serve(runs_dir, host="0.0.0.0", token=TOKEN)  # reached here through 127.0.0.1
    port = s.server.server_address[1]
    base = f"http://127.0.0.1:{port}"
    with httpx.Client(base_url=base) as c:
        assert c.get("/api/runs").status_code == 401
        assert c.get("/").status_code == 401
        assert c.get("/api/runs", headers={"Authorization": "Bearer wrong-token-wrong-token"}).status_code == 401
        assert c.get("/api/runs", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
        assert c.get("/api/runs", headers={"Authorization": f"bearer {TOKEN}"}).status_code == 200  # any case
        assert c.get("/api/runs", headers={"Authorization": f"Basic {TOKEN}"}).status_code == 401
        # the link `kitae ui` prints: sets a cookie and redirects to the page without the token
        r = c.get(f"/?token={TOKEN}")
        assert r.status_code == 303 and r.headers["location"] == "/"
        assert f"kitae_token={TOKEN}" in r.headers["set-cookie"] and "HttpOnly" in r.headers["set-cookie"]
        assert c.get("/api/runs").status_code == 200  # the cookie now travels with every request
        assert c.get("/?token=nope-nope-nope-nope").status_code == 401


def test_a_foreign_host_header_is_refused_on_loopback(serve, runs_dir):
    s = serve(runs_dir)
    assert s.http.get("/api/runs", headers={"Host": "attacker.example:80"}).status_code == 403  # DNS rebinding
    assert s.http.get("/api/runs", headers={"Host": "localhost"}).status_code == 200


@pytest.mark.parametrize("headers, body, status", [
    ({"Content-Type": "text/plain"}, b'{"labels": []}', 415),  # what a cross-site form can send
    ({"Content-Type": "application/json", "Origin": "http://attacker.example"}, b'{"labels": []}', 403),
    ({"Content-Type": "application/json"}, b"{not json", 400),
    ({"Content-Type": "application/json"}, b"[" * 30_000 + b"]" * 30_000, 400),  # was a 500 (RecursionError)
], ids=["form-type", "cross-site", "not-json", "nested-30000"])
def test_posts_must_be_json_from_this_origin(serve, fresh_runs, headers, body, status):
    s = serve(fresh_runs)
    r = s.http.post("/api/runs/finished-run/labels", content=body, headers=headers)
    assert r.status_code == status, r.text
    assert not (fresh_runs / "finished-run" / "labels.jsonl").exists()


def test_a_huge_body_is_refused_before_it_is_read(serve, fresh_runs):
    s = serve(fresh_runs)
    conn = http.client.HTTPConnection("127.0.0.1", s.server.server_address[1])
    conn.putrequest("POST", "/api/runs/finished-run/labels")
    conn.putheader("Content-Type", "application/json")
    conn.putheader("Content-Length", str(2 << 20))  # announced, never sent
    conn.endheaders()
    assert conn.getresponse().status == 413
    conn.close()


@pytest.mark.parametrize("length, tail, half_close, status, said", [
    ("abc", b"{}", False, 400, "Content-Length must be a whole number of bytes, got 'abc'"),
    ("-1", b"{}", False, 400, "got '-1'"),  # once read "until the end": the thread hung
    ("100", b'{"la', False, 408, "the body stopped after 4 of 100 bytes"),
    ("100", b'{"la', True, 400, "the body ended after 4 of 100 bytes"),
])
def test_a_malformed_or_short_body_is_answered_at_once(serve, fresh_runs, length, tail, half_close, status, said):
    s = serve(fresh_runs, read_timeout_s=1.0)
    head = (f"POST /api/runs/finished-run/labels HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", s.server.server_address[1]), timeout=10) as sock:
        sock.sendall(head + tail)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        reply = b""
        while chunk := sock.recv(65536):  # a hung server times this out: the test fails
            reply += chunk
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(f"HTTP/1.1 {status}".encode()), reply[:300]
    assert said in json.loads(body)["error"]


@pytest.mark.parametrize("path", ["/", "/app.js", "/api/runs", "/api/runs/nope"])
def test_every_response_forbids_inline_scripts(serve, runs_dir, path):
    r = serve(runs_dir).http.get(path)
    csp = r.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert r.headers["x-content-type-options"] == "nosniff"


@pytest.mark.parametrize("path", ["/../server.py", "/%2e%2e/server.py", "/..%2fserver.py", "/static/../api.py",
                                  "/api/runs/..%2F..%2Fetc", "/api/runs/%2Ftmp"])
def test_nothing_outside_the_static_folder_and_the_runs_is_served(serve, runs_dir, path):
    s = serve(runs_dir)
    conn = http.client.HTTPConnection("127.0.0.1", s.server.server_address[1])
    conn.request("GET", path)  # sent as is (httpx would normalize the dots)
    assert conn.getresponse().status == 404
    conn.close()


def test_the_page_never_turns_strings_into_markup():
    """Model output is shown with textContent only: no API that parses HTML or runs strings as code."""
    sinks = re.compile(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function|srcdoc")
    for path in sorted(Path(STATIC_DIR).glob("*.js")):
        hits = [f"{path.name}:{i}: {line.strip()}" for i, line in enumerate(path.read_text().splitlines(), 1)
                if sinks.search(line) and not line.lstrip().startswith("//")]
        assert hits == [], hits
