"""What kitae's JSON servers share (stdlib only, cheap to import): the server class, the bind rule, the access
token and the request handler. A service answers ``handle_get(path)`` / ``handle_post(path, body)`` with a
JSON-able reply (or an :class:`EventStream`, sent as server-sent events) and turns an exception into
``error_reply(exc, method, path) -> (status, payload)``; the handler does the HTTP.

What the handler guarantees before a service sees a request (each refusal is a
:class:`kitae.http.requests.RequestError` the service shapes like its other errors):
- on a loopback address, the Host header names a loopback name or address (localhost, 127.0.0.1, [::1]): else
  403, so a web page cannot reach the server through DNS rebinding (:func:`check_host`);
- with a token, every request carries it (``Authorization: Bearer TOKEN``, the scheme in any case): else 401;
- a POST says ``Content-Type: application/json`` (415) and comes from no other web origin (403): a page in the
  user's browser cannot send one without a CORS preflight, which this server never grants
  (:func:`check_json_post`; the run page's server, kitae/web/server.py, applies the same two checks);
- a POST body has a Content-Length (411 otherwise; chunked bodies are refused), a whole number (400), at most
  ``max_body_bytes`` (413, before reading it; also on ``Expect: 100-continue``), and arrives within
  ``read_timeout_s`` of silence (408) or before the client closes (400);
- the body is clean JSON (:func:`kitae.http.requests.parse_json`).
After a refusal whose body was not read, the connection is closed (after reading what the client still sends,
for a moment, so the reply is not lost to a TCP reset).
"""

from __future__ import annotations

import hmac
import ipaddress
import socket
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterable, Protocol
from urllib.parse import urlsplit

from kitae.jsonsafe import dumps as to_json
from kitae.http.requests import RequestError, parse_json

TOKEN_ENV = "KITAE_SERVE_TOKEN"
MIN_TOKEN_CHARS = 16
DEFAULT_MAX_BODY_MB = 8.0


# ---- where to listen, and who may ask ----------------------------------------------------------------
def is_loopback(host: str) -> bool:
    host = host.strip("[]")
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def check_bind(host: str, token: str | None, token_env: str, exposes: str) -> None:
    """Refuse a network address without a token too long to guess (``exposes``: what binding it would do,
    e.g. "show your runs to anyone on the network"). Raises ConfigError naming ``--host`` or ``--token``."""
    from kitae.errors import ConfigError

    token = token or None  # an empty environment variable is no token
    if token is not None and len(token) < MIN_TOKEN_CHARS:
        raise ConfigError("--token", f"the access token is {len(token)} characters; use {MIN_TOKEN_CHARS} or more, "
                          "e.g. python -c 'import secrets; print(secrets.token_urlsafe())'")
    if not is_loopback(host) and not token:
        raise ConfigError("--host", f"binding {host} would {exposes}; give an access token with --token or the "
                          f"{token_env} environment variable, or bind 127.0.0.1 (the default) and use an SSH tunnel")


def check_host(host_header: str | None, bound: str) -> None:
    """Refuse (403) a request whose Host is not a loopback name or address, on a server bound to one: a page on
    evil.example whose name an attacker points at 127.0.0.1 (DNS rebinding) sends ``Host: evil.example`` and
    could read the replies. A server bound to a network address has its token instead."""
    if not is_loopback(bound):
        return
    try:
        host = urlsplit("//" + (host_header or "")).hostname or ""
    except ValueError:  # "[bad": not a host
        host = ""
    if not is_loopback(host):
        raise RequestError(403, f"Host '{(host_header or '')[:100]}' is not this machine; a server on a loopback "
                           "address answers requests to localhost, 127.0.0.1 or [::1] only (http://127.0.0.1:PORT)")


def check_json_post(headers: Any) -> None:
    """Refuse a POST that a web page in the user's browser could send across sites: a body that is not declared
    JSON (415; a form or ``fetch`` with ``text/plain`` needs no CORS preflight) or one with an ``Origin`` other
    than this server's own (403). Clients outside a browser (curl, the OpenAI SDK, kitae's) send no Origin."""
    ctype = (headers.get("Content-Type") or "").split(";")[0].strip().lower()
    if ctype != "application/json":
        raise RequestError(415, f"POST a JSON body with Content-Type: application/json (got "
                           f"{(headers.get('Content-Type') or 'none')[:80]!r}; curl needs -H 'Content-Type: "
                           "application/json')")
    origin = headers.get("Origin")
    if origin is not None and urlsplit(origin).netloc.lower() != (headers.get("Host") or "").lower():
        raise RequestError(403, f"cross-site request from {origin[:100]} refused")


def bearer_token(header: str) -> str | None:
    """The token of an ``Authorization: Bearer TOKEN`` header; the scheme is case-insensitive (RFC 9110)."""
    scheme, _, token = header.strip().partition(" ")
    return (token.strip() or None) if scheme.lower() == "bearer" else None


def token_matches(given: str | None, token: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode(), token.encode())


# ---- the server ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class HttpLimits:
    """``max_body_bytes``: the largest POST body (413 above); ``read_timeout_s``: the longest silence while a
    request arrives (408 for a body, the connection closed between requests)."""

    max_body_bytes: int = int(DEFAULT_MAX_BODY_MB * 1024 * 1024)
    read_timeout_s: float = 30.0

    @classmethod
    def from_mb(cls, max_body_mb: float, read_timeout_s: float = 30.0) -> "HttpLimits":
        return cls(int(max_body_mb * 1024 * 1024), read_timeout_s)


class LoopbackServer(ThreadingHTTPServer):
    """A threading HTTP server with a deeper accept queue: the default of 5 drops bursts of connections
    (a judge sending a batch of groups at once), and each dropped one waits a second for the TCP retry."""

    daemon_threads = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]):
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, handler)


@dataclass(frozen=True)
class EventStream:
    """A reply sent as server-sent events, as OpenAI's and vLLM's ``stream: true`` are: each of ``events`` (JSON
    values, produced while the client reads) as ``data: JSON``, then ``data: [DONE]``. A service returns one
    once the request is checked: errors before it are plain JSON replies with their status."""

    events: Iterable[Any]


class JsonService(Protocol):
    def handle_get(self, path: str) -> Any: ...

    def handle_post(self, path: str, body: Any) -> Any: ...

    def error_reply(self, exc: Exception, method: str, path: str) -> tuple[int, Any]: ...


def json_server(service: JsonService, host: str, port: int, *, token: str | None = None,
                limits: HttpLimits | None = None, quiet: bool = True,
                exposes: str = "let anyone on the network use this model") -> LoopbackServer:
    """A bound server for ``service`` (port 0 = a free port); refuses a network host without a token."""
    check_bind(host, token, TOKEN_ENV, exposes)
    return LoopbackServer((host, port), json_handler(service, quiet, token or None, limits or HttpLimits(), host))


def json_handler(service: JsonService, quiet: bool = True, token: str | None = None,
                 limits: HttpLimits | None = None, bound: str = "127.0.0.1") -> type[BaseHTTPRequestHandler]:
    """A handler class for ``service`` on the address ``bound``: JSON in and out, the query string ignored, any
    exception answered with ``service.error_reply`` (a failing model never stops the server)."""
    limits = limits or HttpLimits()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = limits.read_timeout_s  # on every socket read: a silent client cannot hold a thread

        def _send(self, status: int, payload: Any) -> None:
            data = to_json(payload).encode("utf-8")
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if status == 401:
                    self.send_header("WWW-Authenticate", "Bearer")
                if self.close_connection:
                    self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(data)
            except OSError:  # the client went away
                self.close_connection = True

        def _answer(self, call: Callable[[], Any]) -> None:
            try:
                reply = call()
            except Exception as exc:  # noqa: BLE001 - the service says what the client gets
                self._send(*service.error_reply(exc, self.command, self.path))
                return
            if isinstance(reply, EventStream):
                self._stream(reply)
            else:
                self._send(200, reply)

        def _stream(self, stream: EventStream) -> None:
            """Server-sent events in a chunked reply: ``data: JSON`` per event, an error as its last event (the
            status is sent already), then ``data: [DONE]``."""
            try:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream; charset=utf-8")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    for event in stream.events:
                        self._chunk(f"data: {to_json(event)}\n\n")
                except OSError:
                    raise
                except Exception as exc:  # noqa: BLE001 - the service shapes the error
                    self._chunk(f"data: {to_json(service.error_reply(exc, self.command, self.path)[1])}\n\n")
                self._chunk("data: [DONE]\n\n")
                self.wfile.write(b"0\r\n\r\n")
            except OSError:  # the client went away
                self.close_connection = True

        def _chunk(self, text: str) -> None:
            data = text.encode("utf-8")
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

        def _refuse(self, exc: RequestError) -> None:
            """Answer a request whose body was not read, then close without losing the answer."""
            self.close_connection = True
            self._send(*service.error_reply(exc, self.command, self.path))
            linger(self.connection)

        def _check_caller(self) -> None:
            """The Host, then the token: what every request passes before anything else."""
            check_host(self.headers.get("Host"), bound)
            if token is not None and not token_matches(bearer_token(self.headers.get("Authorization") or ""), token):
                raise RequestError(401, "this server needs its access token: send 'Authorization: Bearer TOKEN' "
                                   f"(the --token or ${TOKEN_ENV} it was started with)")

        def handle_expect_100(self) -> bool:
            try:
                self._check_caller()
                check_json_post(self.headers)
                body_length(self.headers, limits.max_body_bytes)
            except RequestError as exc:
                self._refuse(exc)
                return False
            return super().handle_expect_100()

        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            try:
                self._check_caller()
            except RequestError as exc:
                self._refuse(exc)
                return
            self._answer(lambda: service.handle_get(self.path.split("?")[0]))

        def do_POST(self) -> None:  # noqa: N802
            try:
                self._check_caller()
                check_json_post(self.headers)
                raw = read_body(self.rfile, self.headers, limits)
            except RequestError as exc:
                self._refuse(exc)
                return
            self._answer(lambda: service.handle_post(self.path.split("?")[0], parse_json(raw)))

        def log_message(self, format: str, *args: Any) -> None:
            if not quiet:
                super().log_message(format, *args)

    return Handler


def body_length(headers: Any, max_bytes: int, flag: str | None = "--max-body-mb") -> int:
    """The Content-Length of a POST, checked: present (411), a whole number (400), at most ``max_bytes`` (413,
    naming the ``flag`` that raises it)."""
    if headers.get("Transfer-Encoding"):
        raise RequestError(411, "send the body with a Content-Length header (chunked transfer encoding is not "
                           "supported)")
    raw = headers.get("Content-Length")
    if raw is None:
        raise RequestError(411, "a POST needs a Content-Length header")
    digits = raw.strip()
    if not digits.isdigit() or not digits.isascii():
        raise RequestError(400, f"Content-Length must be a whole number of bytes, got {raw[:40]!r}")
    length = int(digits) if len(digits) <= 18 else 10**18  # int() refuses thousands of digits
    if length > max_bytes:
        raise RequestError(413, f"the body is {length:,} bytes; this server takes at most "
                           f"{max_bytes / (1024 * 1024):g} MB" + (f" ({flag})" if flag else ""))
    return length


def read_body(rfile: Any, headers: Any, limits: HttpLimits, flag: str | None = "--max-body-mb") -> bytes:
    """The body of a POST, all ``Content-Length`` bytes of it: 408 when it stops arriving for
    ``read_timeout_s`` (the socket's timeout), 400 when the client closes before the end."""
    length = body_length(headers, limits.max_body_bytes, flag)
    chunks, got = [], 0
    try:
        while got < length:
            chunk = rfile.read1(length - got)
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
    except TimeoutError:
        raise RequestError(408, f"the body stopped after {got} of {length} bytes (Content-Length) for "
                           f"{limits.read_timeout_s:g} s") from None
    if got < length:
        raise RequestError(400, f"the body ended after {got} of {length} bytes (Content-Length)")
    return b"".join(chunks)


def linger(conn: socket.socket, seconds: float = 2.0, max_bytes: int = 1 << 28) -> None:
    """Stop sending, then read and drop what the client still sends for up to ``seconds``: closing a socket
    with unread data sends a TCP reset, which can destroy the reply before the client reads it."""
    try:
        conn.shutdown(socket.SHUT_WR)
        deadline, dropped = time.monotonic() + seconds, 0
        while dropped < max_bytes and (left := deadline - time.monotonic()) > 0:
            conn.settimeout(left)
            chunk = conn.recv(1 << 16)
            if not chunk:
                break
            dropped += len(chunk)
    except OSError:
        pass
