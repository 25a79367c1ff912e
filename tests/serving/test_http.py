"""Attacks on the HTTP layer both serve commands share (kitae/http/server.py), sent to real servers on
127.0.0.1: malformed Content-Length, short and oversize bodies, bodies that are not JSON, deep nesting, lone
surrogates, and the access token. Every socket has a timeout, so a server that hangs fails the test."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys

import httpx
import pytest

from kitae.errors import ConfigError
from kitae.http.server import bearer_token, check_bind
from tests.serving.loopback import LIMITS, TOKEN

PATHS = {"rm": "/v1/score", "model": "/v1/chat/completions"}
GOOD = {"rm": {"texts": ["hello"]}, "model": {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}}
SERVERS = ["rm", "model"]
JSON = {"Content-Type": "application/json"}  # a POST of another type is refused first (test_cross_site.py)


def raw_request(port: int, data: bytes, half_close: bool = False, timeout: float = 10.0) -> bytes:
    """Send bytes, read the reply until the server closes (or `timeout` passes: then fail)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        chunks = []
        while True:
            try:
                chunk = sock.recv(65536)
            except socket.timeout:
                raise AssertionError(f"no complete reply in {timeout} s; got {b''.join(chunks)[:200]!r}") from None
            except ConnectionResetError:
                raise AssertionError(f"connection reset; got {b''.join(chunks)[:200]!r}") from None
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)


def status_and_body(reply: bytes) -> tuple[int, dict]:
    assert reply.startswith(b"HTTP/1.1 "), f"no HTTP reply: {reply[:200]!r}"
    head, _, body = reply.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def post_head(kind: str, length: str, extra: str = "") -> bytes:
    return (f"POST {PATHS[kind]} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n{extra}\r\n").encode()


def message(payload: dict) -> str:
    return payload["error"]["message"]


@pytest.mark.parametrize("kind", SERVERS)
@pytest.mark.parametrize("length, said", [
    ("abc", "Content-Length must be a whole number of bytes, got 'abc'"),
    ("-1", "Content-Length must be a whole number of bytes, got '-1'"),
    ("+5", "Content-Length must be a whole number of bytes, got '+5'"),
    ("99999999999999999999", "this server takes at most"),  # 413, before reading anything
])
def test_bad_content_length_is_refused_at_once(servers, kind, length, said):
    # the connection stays open: a server that reads "until the end" would hang here
    status, payload = status_and_body(raw_request(servers[kind], post_head(kind, length) + b'{"texts": []}'))
    assert status == (413 if said.startswith("this server") else 400)
    assert said in message(payload)


@pytest.mark.parametrize("kind", SERVERS)
def test_a_body_shorter_than_its_length_times_out_with_408(servers, kind):
    status, payload = status_and_body(raw_request(servers[kind], post_head(kind, "100") + b'{"te'))
    assert status == 408 and "4 of 100 bytes" in message(payload)


@pytest.mark.parametrize("kind", SERVERS)
def test_a_body_cut_short_by_the_client_is_a_400(servers, kind):
    status, payload = status_and_body(raw_request(servers[kind], post_head(kind, "100") + b'{"te', half_close=True))
    assert status == 400 and "4 of 100 bytes" in message(payload)


@pytest.mark.parametrize("kind", SERVERS)
def test_chunked_bodies_and_missing_lengths_are_refused(servers, kind):
    head = (f"POST {PATHS[kind]} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            "Transfer-Encoding: chunked\r\n\r\n").encode()
    status, payload = status_and_body(raw_request(servers[kind], head + b"5\r\n{}\r\n0\r\n\r\n"))
    assert status == 411 and "Content-Length" in message(payload)
    head = (f"POST {PATHS[kind]} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\r\n").encode()
    status, payload = status_and_body(raw_request(servers[kind], head))
    assert status == 411 and "Content-Length" in message(payload)


@pytest.mark.parametrize("kind", SERVERS)
def test_an_oversize_body_gets_413_and_the_reply_arrives(servers, kind):
    big = json.dumps({"texts": ["x" * (2 * LIMITS.max_body_bytes)]})
    reply = httpx.post(f"http://127.0.0.1:{servers[kind]}{PATHS[kind]}", content=big, headers=JSON, timeout=10)
    assert reply.status_code == 413
    assert re.search(r"the body is [\d,]+ bytes; this server takes at most 0.0625 MB \(--max-body-mb\)",
                     message(reply.json()))


@pytest.mark.parametrize("kind", SERVERS)
def test_expect_100_continue_is_refused_before_the_body_is_sent(servers, kind):
    head = post_head(kind, str(10 * LIMITS.max_body_bytes), "Expect: 100-continue\r\n")
    status, payload = status_and_body(raw_request(servers[kind], head))
    assert status == 413


@pytest.mark.parametrize("kind", SERVERS)
@pytest.mark.parametrize("body, said", [
    (b"", "the body is not JSON"),
    (b"texts=hello", "the body is not JSON: Expecting value: line 1 column 1 (char 0)"),
    (b"\xff\xfe{}", "the body is not UTF-8"),
    (b'{"texts": [NaN]}', "the body is not JSON: NaN"),
    (b"[" * 30_000 + b"]" * 30_000, "nested more than 64 deep"),  # past the recursion limit
    (b'{"a": ' * 70 + b"1" + b"}" * 70, "nested more than 64 deep"),
    (b'{"texts": ["\\ud800"], "messages": [{"role": "user", "content": "\\ud800"}]}', "lone surrogate"),
    (b'{"\\udfff": 1}', "lone surrogate"),
], ids=["empty", "form", "latin-1", "nan", "deep-30000", "deep-70", "surrogate", "surrogate-key"])
def test_bodies_that_are_not_clean_json_get_400(servers, kind, body, said):
    reply = httpx.post(f"http://127.0.0.1:{servers[kind]}{PATHS[kind]}", content=body, headers=JSON, timeout=10)
    assert reply.status_code == 400, reply.text
    assert said in message(reply.json())


@pytest.mark.parametrize("kind", SERVERS)
def test_the_connection_still_serves_after_an_error(servers, kind):
    with httpx.Client(base_url=f"http://127.0.0.1:{servers[kind]}", timeout=10) as client:
        assert client.post(PATHS[kind], content=b"{", headers=JSON).status_code == 400
        assert client.post(PATHS[kind], json=GOOD[kind]).status_code == 200


@pytest.mark.parametrize("kind", SERVERS)
def test_an_idle_connection_is_closed_after_the_read_timeout(servers, kind):
    assert raw_request(servers[kind], b"POST /v1/score HTTP/1.1\r\nHost: 127.0.0.1\r\n") == b""


# ---- the access token --------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", SERVERS)
@pytest.mark.parametrize("header, status", [
    (None, 401),
    (f"Bearer {TOKEN}x", 401),
    (f"Basic {TOKEN}", 401),
    (f"Bearer {TOKEN}", 200),
    (f"bearer {TOKEN}", 200),  # the scheme is case-insensitive (RFC 9110)
    (f"BEARER   {TOKEN}", 200),
])
def test_the_token_is_checked_on_every_request(guarded, kind, header, status):
    headers = {"Authorization": header} if header else {}
    url = f"http://127.0.0.1:{guarded[kind]}"
    reply = httpx.post(url + PATHS[kind], json=GOOD[kind], headers=headers, timeout=30)
    assert reply.status_code == status, reply.text
    assert httpx.get(url + "/health", headers=headers, timeout=10).status_code == status
    if status == 401:
        assert "KITAE_SERVE_TOKEN" in message(reply.json()) and reply.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize("header, token", [
    ("Bearer abc", "abc"), ("bearer abc", "abc"), ("BeArEr  abc ", "abc"), ("Basic abc", None), ("Bearer", None),
    ("", None), ("Bearerabc", None),
])
def test_bearer_token(header, token):
    assert bearer_token(header) == token


EXPOSES = "let anyone on the network use this model"


@pytest.mark.parametrize("host, token, refused", [
    ("127.0.0.1", None, None),
    ("::1", None, None),
    ("localhost", None, None),
    ("0.0.0.0", None, "--host: binding 0.0.0.0 would let anyone on the network use this model"),
    ("192.168.1.20", None, "KITAE_SERVE_TOKEN"),
    ("0.0.0.0", "", "--host"),  # an empty token is no token
    ("0.0.0.0", TOKEN, None),
    ("127.0.0.1", "short", "--token: the access token is 5 characters; use 16 or more"),
])
def test_check_bind(host, token, refused):
    if refused is None:
        check_bind(host, token, "KITAE_SERVE_TOKEN", EXPOSES)
    else:
        with pytest.raises(ConfigError, match=re.escape(refused)):
            check_bind(host, token, "KITAE_SERVE_TOKEN", EXPOSES)


@pytest.mark.parametrize("command", ["rm", "model"])
def test_the_cli_refuses_a_network_address_without_a_token_before_loading(command, tmp_path):
    env = {k: v for k, v in __import__("os").environ.items() if k != "KITAE_SERVE_TOKEN"}
    proc = subprocess.run([sys.executable, "-m", "kitae.cli.main", "serve", command, "--host", "0.0.0.0",
                           "--model", str(tmp_path / "no-model"), "--port", "0"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode != 0
    assert "--host: binding 0.0.0.0" in proc.stderr and "--token" in proc.stderr, proc.stderr
    assert "no model folder" not in proc.stderr  # refused before looking at the model


@pytest.mark.parametrize("command", ["rm", "model"])
def test_api_key_is_vllms_name_for_the_token(command, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "kitae.cli.main", "serve", command, "--api-key", "short",
                           "--model", str(tmp_path / "no-model"), "--port", "0"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "the access token is 5 characters" in proc.stderr, proc.stderr
