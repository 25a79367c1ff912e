"""A real HTTP server on 127.0.0.1 whose replies to POSTs follow a script, for the tests of clients that POST
JSON (the reward-model client, the endpoint grader): each request takes the next ``(status, reply, delay)`` of
``script``, then ``default``. ``reply`` is a dict (sent as JSON), bytes (sent as they are) or a function of the
request's body that gives one of those. The server keeps every body and header set it was sent and the most
requests it had in flight at once."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Step = tuple[int, Any, float]  # (HTTP status, reply, seconds to wait before answering)


class ScriptedServer:
    def __init__(self, script: list[Step] = (), default: Step = (200, {}, 0.0), path: str = ""):
        self.script, self.default = list(script), default
        self.lock, self.bodies, self.headers = threading.Lock(), [], []
        self.in_flight = self.max_in_flight = 0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}{path}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()  # a quick shutdown

    def answer(self, body: Any, headers: dict) -> tuple[int, bytes, float]:
        """The next step of the script for a request, counted in flight until :meth:`done`."""
        with self.lock:
            self.bodies.append(body)
            self.headers.append(headers)
            status, reply, delay = self.script.pop(0) if self.script else self.default
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        if callable(reply):
            reply = reply(body)
        return status, reply if isinstance(reply, bytes) else json.dumps(reply).encode(), delay

    def done(self) -> None:
        with self.lock:
            self.in_flight -= 1

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _handler(owner: ScriptedServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            status, data, delay = owner.answer(body, dict(self.headers))
            time.sleep(delay)
            owner.done()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except OSError:  # the client gave up (timeout)
                pass

        def log_message(self, *args):
            pass

    return Handler
