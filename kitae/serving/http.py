"""What kitae's loopback JSON servers share (stdlib only, cheap to import): the server class and the request
handler. A service answers ``handle_get(path)`` / ``handle_post(path, body)`` with a JSON-able reply and turns
an exception into ``error_reply(exc, method, path) -> (status, payload)``; the handler does the HTTP."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Protocol


class LoopbackServer(ThreadingHTTPServer):
    """A threading HTTP server with a deeper accept queue: the default of 5 drops bursts of connections
    (a judge sending a batch of groups at once), and each dropped one waits a second for the TCP retry."""

    daemon_threads = True
    request_queue_size = 128


class JsonService(Protocol):
    def handle_get(self, path: str) -> Any: ...

    def handle_post(self, path: str, body: Any) -> Any: ...

    def error_reply(self, exc: Exception, method: str, path: str) -> tuple[int, Any]: ...


def json_handler(service: JsonService, quiet: bool = True) -> type[BaseHTTPRequestHandler]:
    """A handler class for ``service``: JSON in and out, the query string ignored, any exception answered
    with ``service.error_reply`` (a failing model never stops the server)."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _send(self, status: int, payload: Any) -> None:
            data = json.dumps(payload, ensure_ascii=False).encode("utf-8")
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except OSError:  # the client went away
                pass

        def _answer(self, call: Callable[[], Any]) -> None:
            try:
                self._send(200, call())
            except Exception as exc:  # noqa: BLE001 - the service says what the client gets
                self._send(*service.error_reply(exc, self.command, self.path))

        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            self._answer(lambda: service.handle_get(self.path.split("?")[0]))

        def do_POST(self) -> None:  # noqa: N802
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self._answer(lambda: service.handle_post(self.path.split("?")[0], json.loads(raw.decode("utf-8"))))

        def log_message(self, format: str, *args: Any) -> None:
            if not quiet:
                super().log_message(format, *args)

    return Handler
