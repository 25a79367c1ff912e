"""A scripted OpenAI-compatible server for tests, benchmarks and judge-graded fixtures (no model, no network).

A real ``ThreadingHTTPServer`` on a free loopback port whose ``/v1/chat/completions`` replies follow a script:

    from kitae.judge.testing import Reply, ScriptedServer, judge_brain

    with ScriptedServer([Reply(status=500), Reply(content="not json")], default=judge_brain(len)) as server:
        spec = {"type": "judge", "model": server.model, "base_url": server.base_url}
        ...                                 # 1st request: HTTP 500, 2nd: prose, then valid judgements
    server.requests                         # every request: path, headers, JSON body

Each request takes the next script entry, then ``default`` once the script is used up. An entry is a
:class:`Reply` or a function ``request body -> Reply``. A Reply gives ``content`` (wrapped in a
chat.completion with ``usage``), or a raw ``body`` (any JSON, or a string sent as is, e.g. broken JSON), a
``status`` and a ``delay`` in seconds (a slow reply, to run past a client's timeout).

``judge_brain(score)`` answers like a well-behaved group judge: it reads the fenced samples out of the request
(kitae/judge/prompt.py) and gives each the value ``score(text)`` (an int for every criterion, or a dict
criterion -> value) and a reason; ``mutate`` edits the reply object first (drop an entry, put a value out of
range...). ``reject_formats`` makes the server answer HTTP 400 to those ``response_format`` types, as servers
without structured output do. Token counts in ``usage`` are approximate: words and punctuation marks.

From a shell, a stand-in group judge to try the plumbing with no model (docs/judge.md's quick start)::

    python -m kitae.judge.testing --port 8000 [--name scripted-judge] [--score 3]

It prints ``kitae.judge.testing: serving NAME on http://127.0.0.1:PORT`` (the free port with ``--port 0``),
then gives every sample it is shown ``--score`` on every criterion, until Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any, Callable

from kitae.judge.prompt import DEFAULT_CRITERIA, read_samples
from kitae.http.requests import RequestError
from kitae.http.server import LoopbackServer, check_host, check_json_post, linger

Request = dict[str, Any]


@dataclass
class Reply:
    content: str | None = None
    status: int = 200
    body: Any = None  # overrides content: a JSON value, or a str sent verbatim
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)


Entry = Reply | Callable[[Request], Reply]


def count_tokens(text: str) -> int:
    """Approximate tokens: words and punctuation marks."""
    return len(re.findall(r"\w+|[^\w\s]", text))


def completion(content: str, request: Request, model: str) -> dict[str, Any]:
    prompt = sum(count_tokens(str(m.get("content", ""))) for m in request.get("messages", []))
    done = count_tokens(content)
    return {"id": f"chatcmpl-scripted-{time.monotonic_ns()}", "object": "chat.completion", "created": int(time.time()),
            "model": model, "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": done, "total_tokens": prompt + done}}


def judge_brain(score: Callable[[str], int | dict[str, int]] = lambda text: 3,
                criteria: list[str] | None = None,
                mutate: Callable[[dict[str, Any]], Any] | None = None,
                delay: float = 0.0) -> Callable[[Request], Reply]:
    """A judge that scores every sample it is shown with ``score(text)``; see the module docstring."""
    names = criteria or [c.name for c in DEFAULT_CRITERIA]

    def answer(request: Request) -> Reply:
        reply: dict[str, Any] = {}
        for sid, text in read_samples(request.get("messages", [])):
            value = score(text)
            values = value if isinstance(value, dict) else dict.fromkeys(names, value)
            reply[sid] = {"reason": f"{sid} read {len(text)} characters", **values}
        if mutate is not None:
            reply = mutate(reply) or reply
        return Reply(content=json.dumps(reply, ensure_ascii=False), delay=delay)

    return answer


class ScriptedServer:
    """See the module docstring. Use as a context manager, or call ``close()``."""

    def __init__(self, script: list[Entry] | None = None, default: Entry | None = None, model: str = "scripted-judge",
                 reject_formats: tuple[str, ...] = (), port: int = 0):
        self.script, self.default = list(script or []), default or judge_brain()
        self.model, self.reject_formats = model, reject_formats
        self.requests: list[dict[str, Any]] = []
        self.in_flight = self.max_in_flight = 0
        self._lock, self._stop = threading.Lock(), threading.Event()
        self.server = LoopbackServer(("127.0.0.1", port), self._handler())
        self.port = self.server.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def __enter__(self) -> "ScriptedServer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self._stop.set()  # wakes handlers sleeping in a delay
        self.server.shutdown()
        self.server.server_close()

    @property
    def chat_requests(self) -> list[Request]:
        return [r["body"] for r in self.requests if r["path"].endswith("/chat/completions")]

    # ---- answering ------------------------------------------------------------------------------
    def next_reply(self, body: Request) -> Reply:
        with self._lock:
            entry = self.script.pop(0) if self.script else self.default
        fmt = (body.get("response_format") or {}).get("type")
        if fmt in self.reject_formats:
            return Reply(status=400, body={"error": {"message": f"response_format {fmt} is not supported"}})
        return entry(body) if callable(entry) else entry

    def _respond(self, handler: BaseHTTPRequestHandler, body: Request) -> tuple[int, bytes, dict[str, str]]:
        reply = self.next_reply(body)
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if reply.delay:
                self._stop.wait(reply.delay)
        finally:
            with self._lock:
                self.in_flight -= 1
        if reply.body is not None:
            payload = reply.body if isinstance(reply.body, str) else json.dumps(reply.body, ensure_ascii=False)
        elif reply.status >= 400:
            payload = json.dumps({"error": {"message": f"scripted HTTP {reply.status}"}})
        else:
            payload = json.dumps(completion(reply.content or "", body, self.model), ensure_ascii=False)
        return reply.status, payload.encode("utf-8"), reply.headers

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _send(self, status: int, data: bytes, headers: dict[str, str]) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:  # the client gave up (a timeout): nothing to do
                    pass

            def _refused(self) -> bool:
                """kitae's servers' checks (kitae/http/server.py): a loopback Host on every route, and a POST
                that is JSON from no other web origin; a refused request is answered and its connection closed."""
                try:
                    check_host(self.headers.get("Host"), "127.0.0.1")
                    if self.command == "POST":
                        check_json_post(self.headers)
                except RequestError as exc:
                    self.close_connection = True
                    self._send(exc.status, json.dumps({"error": {"message": str(exc)}}).encode(), {})
                    linger(self.connection)
                    return True
                return False

            def do_GET(self) -> None:  # noqa: N802
                if self._refused():
                    return
                data = json.dumps({"object": "list", "data": [{"id": owner.model, "object": "model"}]}).encode()
                self._send(200 if self.path.endswith("/models") else 404, data, {})

            def do_POST(self) -> None:  # noqa: N802
                if self._refused():
                    return
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                body = json.loads(raw.decode("utf-8"))
                with owner._lock:
                    owner.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
                if not self.path.endswith("/chat/completions"):
                    self._send(404, b'{"error": {"message": "no such endpoint"}}', {})
                    return
                self._send(*owner._respond(self, body))

            def log_message(self, *args: Any) -> None:
                pass

        return Handler


# ---- python -m kitae.judge.testing ----------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    """Serve a stand-in group judge on the loopback interface; see the module docstring."""
    parser = argparse.ArgumentParser(
        prog="python -m kitae.judge.testing",
        description="A scripted stand-in for an LLM judge (no model): every sample gets the same score on every "
                    "criterion. It shows the judge's requests and replies flowing, not a judgement.")
    parser.add_argument("--port", type=int, default=8000, help="port on 127.0.0.1; 0 picks a free one (printed)")
    parser.add_argument("--name", default="scripted-judge", help="the model name it reports")
    parser.add_argument("--score", type=int, default=3, choices=range(1, 6), metavar="1-5",
                        help="the value every criterion gets, on the judge's default 1-5 scale")
    args = parser.parse_args(argv)
    try:
        server = ScriptedServer(default=judge_brain(lambda text: args.score), model=args.name, port=args.port)
    except OSError as exc:
        print(f"python -m kitae.judge.testing: cannot listen on 127.0.0.1:{args.port}: {exc.strerror or exc}; "
              "choose another port (--port 0 picks a free one)", file=sys.stderr)
        return 2
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    print(f"kitae.judge.testing: serving {server.model} on http://127.0.0.1:{server.port}", flush=True)
    try:
        stop.wait()
    finally:
        server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
