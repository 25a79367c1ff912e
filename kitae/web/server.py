"""The run page's HTTP server: the standard library's ThreadingHTTPServer, static files and JSON.

Security, because model output and run folders are not for everyone:
- binds to 127.0.0.1 by default; any other address needs an access token (``--token`` or KITAE_UI_TOKEN),
  checked on every request (``Authorization: Bearer``, the ``kitae_token`` cookie, or ``?token=`` once, which
  sets the cookie and redirects to the same page without it);
- on a loopback address, a request whose Host header is not a loopback name is refused, so a web page you
  visit cannot reach the server through DNS rebinding;
- a POST must be JSON from this origin (no cross-site form can send one);
- every response forbids inline scripts (Content-Security-Policy ``script-src 'self'``) and the page writes
  model output with ``textContent`` only, so a sample containing ``<script>`` is shown as text.
"""

from __future__ import annotations

import hmac
import mimetypes
import socket
import sys
import threading
import traceback
from http import HTTPStatus
from http.cookies import SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlencode, urlsplit

from kitae.errors import KitaeError
from kitae.http.requests import RequestError, parse_json
from kitae.http.server import (HttpLimits, bearer_token, check_host, check_json_post, linger, read_body, to_json,
                               token_matches)
from kitae.http.server import check_bind as serving_check_bind
from kitae.web.api import ApiError, Download, Query, dispatch

STATIC_DIR = Path(__file__).parent / "static"
TOKEN_ENV = "KITAE_UI_TOKEN"
MAX_BODY_BYTES = 1 << 20
COOKIE = "kitae_token"
STATIC_TYPES = {  # not left to the system's mime.types: with nosniff a wrong type would block the script
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}


def check_bind(host: str, token: str | None) -> None:
    """Refuse to expose runs on a network address without a token too long to guess (the rule the serve
    commands share: kitae/http/server.py)."""
    serving_check_bind(host, token, TOKEN_ENV, "show your runs to anyone on the network")


class UIServer(ThreadingHTTPServer):
    """Serves the page for the runs under `runs_dir`; ``port`` 0 picks a free port (see ``url``)."""

    daemon_threads = True

    def __init__(self, runs_dir: Path, host: str = "127.0.0.1", port: int = 8765, token: str | None = None,
                 poll_s: float = 2.0, quiet: bool = True, read_timeout_s: float = 30.0):
        check_bind(host, token)
        self.runs_dir = Path(runs_dir)
        self.limits = HttpLimits(MAX_BODY_BYTES, read_timeout_s)
        self.token = token or None
        self.poll_s = poll_s
        self.quiet = quiet
        if ":" in host:
            self.address_family = socket.AF_INET6
        super().__init__((host, port), Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):  # a browser closed a kept-alive connection
            return
        super().handle_error(request, client_address)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{port}/"


def make_server(runs_dir: str | Path, host: str = "127.0.0.1", port: int = 8765, token: str | None = None,
                poll_s: float = 2.0, quiet: bool = True, read_timeout_s: float = 30.0) -> UIServer:
    """A bound server; call ``serve_forever()`` (or :func:`serve_in_thread`) and ``shutdown()``.
    ``read_timeout_s``: the longest silence while a request arrives (408 for a body)."""
    return UIServer(Path(runs_dir), host, port, token, poll_s, quiet, read_timeout_s)


def serve_in_thread(server: UIServer, poll_interval: float = 0.1) -> threading.Thread:
    """Serve from a daemon thread (tests, notebooks); ``server.shutdown()`` returns within `poll_interval`."""
    thread = threading.Thread(target=server.serve_forever, args=(poll_interval,), name="kitae-ui", daemon=True)
    thread.start()
    return thread


class Handler(BaseHTTPRequestHandler):
    server: UIServer
    server_version = "kitae-ui"
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        self.timeout = self.server.limits.read_timeout_s  # on every socket read: a silent client cannot hold a thread
        super().setup()
        # headers and body leave in two writes; without this, Nagle's algorithm and the client's delayed ACK
        # hold the body back ~40 ms on every keep-alive request
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    # ---- entry points --------------------------------------------------------------------------
    def do_GET(self) -> None:  # noqa: N802 - the http.server interface
        self._handle("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._handle("POST")

    def _handle(self, method: str) -> None:
        url = urlsplit(self.path)
        self._body_unread = method == "POST"
        try:
            self._check_host()
            if self._token_in_query(url):
                return
            self._check_token()
            if url.path.startswith("/api/"):
                self._api(method, unquote(url.path[len("/api"):]), url.query)
            elif method == "GET":
                self._static(url.path)
            else:
                raise ApiError(404, f"no page {method} {url.path}")
        except ApiError as exc:
            self._error(exc.status, str(exc))
        except KitaeError as exc:  # a bad query value or body: the message says which
            self._error(400, str(exc))
        except ConnectionError:  # the browser left the page mid-answer
            self.close_connection = True
        except Exception as exc:  # noqa: BLE001 - a bug answers 500 and leaves the server running
            traceback.print_exc(file=sys.stderr)
            self._error(500, f"internal error: {type(exc).__name__}: {exc}")

    def _error(self, status: int, message: str) -> None:
        # closes the connection: an unread request body must not be read as the next request
        self._send(status, to_json({"error": message}).encode("utf-8"), "application/json; charset=utf-8", close=True)
        if self._body_unread:
            linger(self.connection)  # so a TCP reset does not destroy the answer

    # ---- checks --------------------------------------------------------------------------------
    def _check_host(self) -> None:
        try:  # the check every kitae server makes (kitae/http/server.py)
            check_host(self.headers.get("Host"), self.server.server_address[0])
        except RequestError as exc:
            raise ApiError(exc.status, str(exc)) from None

    def _token_in_query(self, url: Any) -> bool:
        """``?token=T`` on a page link: set the cookie and redirect to the link without it."""
        query = parse_qs(url.query)
        if self.server.token is None or "token" not in query or url.path.startswith("/api/"):
            return False
        if not hmac.compare_digest(query["token"][-1].encode(), self.server.token.encode()):
            raise ApiError(401, "wrong access token")
        rest = urlencode({k: v[-1] for k, v in query.items() if k != "token"})
        self.send_response(HTTPStatus.SEE_OTHER)
        self.send_header("Location", url.path + (f"?{rest}" if rest else ""))
        self.send_header("Set-Cookie", f"{COOKIE}={self.server.token}; HttpOnly; SameSite=Strict; Path=/")
        self.send_header("Content-Length", "0")
        self.end_headers()
        return True

    def _check_token(self) -> None:
        if self.server.token is None:
            return
        given = bearer_token(self.headers.get("Authorization") or "")  # "bearer" in any case
        if given is None:
            morsel = SimpleCookie(self.headers.get("Cookie") or "").get(COOKIE)
            given = morsel.value if morsel else None
        if not token_matches(given, self.server.token):
            raise ApiError(401, "this page needs the access token: open the link with ?token=... that `kitae ui` "
                           "printed, or send 'Authorization: Bearer TOKEN'")

    def _check_post(self) -> Any:
        try:
            check_json_post(self.headers)  # JSON, from this origin (kitae/http/server.py)
            raw = read_body(self.rfile, self.headers, self.server.limits, flag=None)
            self._body_unread = False
            return parse_json(raw or b"null")  # not JSON, too deep, lone surrogates: 400
        except RequestError as exc:
            raise ApiError(exc.status, str(exc)) from None

    # ---- answers -------------------------------------------------------------------------------
    def _api(self, method: str, path: str, query: str) -> None:
        if path == "/config" and method == "GET":
            self._json(200, {"poll_ms": int(self.server.poll_s * 1000), "runs_dir": str(self.server.runs_dir)})
            return
        body = self._check_post() if method == "POST" else None
        answer = dispatch(self.server.runs_dir, method, path, Query(query), body)
        if isinstance(answer, Download):
            how = "inline" if answer.inline else "attachment"
            self._send(200, answer.data, answer.content_type,
                       headers={"Content-Disposition": f'{how}; filename="{answer.filename}"'})
        else:
            self._json(200, answer)

    def _static(self, path: str) -> None:
        name = "index.html" if path in ("/", "/index.html") else path.lstrip("/")
        file = (STATIC_DIR / name).resolve()
        if STATIC_DIR.resolve() not in file.parents or not file.is_file():
            raise ApiError(404, f"no page {path}")
        ctype = STATIC_TYPES.get(file.suffix) or mimetypes.guess_type(file.name)[0] or "application/octet-stream"
        self._send(200, file.read_bytes(), ctype)

    def _json(self, status: int, payload: Any) -> None:
        self._send(status, to_json(payload).encode("utf-8"), "application/json; charset=utf-8")

    def _send(self, status: int, data: bytes, ctype: str, close: bool = False, headers: dict | None = None) -> None:
        self.send_response(status)
        if close:
            self.send_header("Connection", "close")
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        for key, value in SECURITY_HEADERS.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the http.server signature
        if not self.server.quiet:
            super().log_message(format, *args)
