"""HTTP tools against a real server on 127.0.0.1: the wire format, retries, timeouts, 4xx, auth, the run's cap."""

from __future__ import annotations

import asyncio
import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from kitae.agents.config import EnvironmentConfig
from kitae.agents.http_tools import HttpToolSpec, http_tool
from kitae.config import from_dict
from kitae.agents.tools import Tools
from kitae.errors import ConfigError
from kitae.rollout.trajectory import ToolCall


class Server:
    """What the endpoints received, and the means to hold a request open."""

    def __init__(self):
        self.bodies: list[dict] = []
        self.headers: list[dict] = []
        self.hits: Counter = Counter()
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.now = self.peak = 0
        self.meet = threading.Barrier(2, timeout=30)
        self.sent_all: bool | None = None


def make_handler(state: Server):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with state.lock:
                state.bodies.append(body)
                state.headers.append(dict(self.headers))
                state.hits[self.path] += 1
                hits = state.hits[self.path]
            getattr(self, "on_" + self.path.strip("/"))(body, hits)

        def reply(self, status: int, payload, content_type="application/json", headers=()):
            data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            for key, value in headers:
                self.send_header(key, value)
            self.end_headers()
            try:
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up (the slow endpoint's timeout)
                pass

        def on_search(self, body, hits):
            self.reply(200, {"result": f"3 pages about {body['arguments']['query']}"})

        def on_structured(self, body, hits):
            self.reply(200, {"result": {"pages": [1, 2]}})

        def on_flaky(self, body, hits):  # fails twice, then answers
            self.reply(503, {"detail": "warming up"}) if hits <= 2 else self.reply(200, {"result": f"ok on try {hits}"})

        def on_busy(self, body, hits):
            self.reply(429, "slow down", "text/plain", [("Retry-After", "0")]) if hits == 1 else \
                self.reply(200, {"result": "served"})

        def on_slow(self, body, hits):
            state.release.wait(30)
            self.reply(200, {"result": "too late"})

        def on_missing(self, body, hits):
            self.reply(404, {"detail": "no such tool"})

        def on_text(self, body, hits):
            self.reply(200, "a plain answer", "text/plain")

        def on_refuse(self, body, hits):
            self.reply(200, {"error": "no page matches"})

        def on_auth(self, body, hits):
            if self.headers.get("Authorization") != "Bearer s3cret":
                return self.reply(401, {"detail": "who are you"})
            self.reply(200, {"result": f"team {self.headers.get('X-Team')}"})

        def on_huge(self, body, hits):  # 20 MB: the client must stop reading long before the end
            chunk, total = b"z" * 65536, 20 * 1024 * 1024
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(total))
            self.end_headers()
            try:
                for _ in range(total // len(chunk)):
                    self.wfile.write(chunk)
                state.sent_all = True
            except (BrokenPipeError, ConnectionResetError):
                state.sent_all = False

        def on_peak(self, body, hits):
            with state.lock:
                state.now += 1
                state.peak = max(state.peak, state.now)
            state.meet.wait()  # two requests meet here: the cap lets two in at once
            with state.lock:
                state.now -= 1
            self.reply(200, {"result": "met"})

    return Handler


@pytest.fixture
def server():
    state = Server()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(state))
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    yield state
    state.release.set()
    httpd.shutdown()
    httpd.server_close()


QUERY = {"type": "object", "properties": {"query": {"type": "string", "description": "What to look for."}},
         "required": ["query"]}


def spec(server, path, **more):
    return {"name": path.strip("/"), "url": server.url + path, "description": "A tool behind HTTP.",
            "parameters": QUERY, "backoff": 0.01, **more}


def call(tool_specs, name, arguments=None, rollout_id="r-1", **settings):
    async def one():
        tools = Tools.from_config({"http_tools": tool_specs, **settings})
        return await tools.toolbox(rollout_id).call(ToolCall(name, arguments or {"query": "cats"}))

    return asyncio.run(one())


def test_wire_format_arguments_and_rollout_id(server):
    done = call([spec(server, "/search")], "search", rollout_id="step2-row5-sample1")
    assert done.ok and done.result == "3 pages about cats"
    assert server.bodies == [{"arguments": {"query": "cats"}, "rollout_id": "step2-row5-sample1"}]
    assert server.headers[0]["Content-Type"] == "application/json"


def test_the_schema_comes_from_the_config(server):
    tools = Tools.from_config({"http_tools": [spec(server, "/search")]})
    assert tools.schemas == [{"type": "function", "function": {
        "name": "search", "description": "A tool behind HTTP.", "parameters": QUERY}}]


@pytest.mark.parametrize("path, result", [
    ("/structured", '{"pages": [1, 2]}'),   # a JSON result reaches the model as JSON text
    ("/text", "a plain answer"),            # a text reply as it is
])
def test_replies_become_text(server, path, result):
    assert call([spec(server, path)], path.strip("/")).result == result


def test_an_error_reply_is_the_calls_error(server):
    done = call([spec(server, "/refuse")], "refuse")
    assert done.result is None and done.error == "no page matches"


def test_5xx_is_retried_until_it_answers(server):
    done = call([spec(server, "/flaky", retries=2)], "flaky")
    assert done.ok and done.result == "ok on try 3" and server.hits["/flaky"] == 3


def test_429_is_retried(server):
    done = call([spec(server, "/busy", retries=1)], "busy")
    assert done.result == "served" and server.hits["/busy"] == 2


def test_retries_run_out_into_an_error(server):
    done = call([spec(server, "/flaky", retries=1)], "flaky")
    assert done.error.startswith(f"HTTP tool 'flaky' ({server.url}/flaky): HTTP 503")
    assert "after 2 attempts" in done.error and server.hits["/flaky"] == 2


def test_a_4xx_is_not_retried(server):
    done = call([spec(server, "/missing", retries=3)], "missing")
    assert "HTTP 404" in done.error and server.hits["/missing"] == 1


def test_a_slow_endpoint_is_a_timeout_error_not_a_hang(server):
    done = call([spec(server, "/slow", timeout_s=0.2, retries=1)], "slow")
    assert done.result is None and "timed out after 0.2s (after 2 attempts)" in done.error
    assert server.hits["/slow"] == 2


def test_a_server_that_is_not_there_is_a_connection_error():
    with socket_closed_port() as port:
        done = call([{"name": "gone", "url": f"http://127.0.0.1:{port}/x", "description": "Gone.",
                      "retries": 1, "backoff": 0.01}], "gone", {})
    assert "ConnectError" in done.error and "after 2 attempts" in done.error


def test_bearer_token_and_headers_from_the_environment(server, monkeypatch):
    tool = spec(server, "/auth", api_key_env="TOOL_TOKEN", headers_env={"X-Team": "TOOL_TEAM"})
    monkeypatch.delenv("TOOL_TOKEN", raising=False)
    refused = call([tool], "auth")
    assert "HTTP 401" in refused.error and "$TOOL_TOKEN, which is not set" in refused.error
    monkeypatch.setenv("TOOL_TOKEN", "s3cret")
    monkeypatch.setenv("TOOL_TEAM", "blue")
    assert call([tool], "auth").result == "team blue"


def test_a_huge_reply_is_not_read_to_the_end(server):
    """Tool output is untrusted: 20 MB from an endpoint must not fill the trainer's memory before it is capped."""
    done = call([spec(server, "/huge")], "huge", max_result_chars=100)
    assert done.ok and done.result.startswith("z" * 100 + "\n[... ")
    cut = int(done.result.split("[... ")[1].split(" ")[0])
    assert 100 + cut <= 1 << 20  # the client read at most 1 MB
    for _ in range(200):  # the server learns that the client hung up once it writes past the socket's buffers
        if server.sent_all is not None:
            break
        threading.Event().wait(0.05)
    assert server.sent_all is False


def test_the_runs_cap_limits_requests_in_flight(server):
    async def many():
        tools = Tools.from_config({"http_tools": [spec(server, "/peak")], "max_concurrent_tools": 2})
        boxes = [tools.toolbox(f"r{i}") for i in range(3)]
        return await asyncio.gather(*(b.call(ToolCall("peak", {"query": "q"})) for b in boxes for _ in range(2)))

    calls = asyncio.run(many())
    assert all(c.ok for c in calls), [c.error for c in calls]
    assert server.peak == 2


@pytest.mark.parametrize("entry, says", [
    ({"url": "http://127.0.0.1:1/x", "description": "d"}, "http_tools[0].name: a tool's name"),
    ({"name": "bad name", "url": "http://127.0.0.1:1/x", "description": "d"}, "http_tools[0].name"),
    ({"name": "t", "url": "ftp://host/x", "description": "d"}, "http_tools[0].url: expected an http:// or https://"),
    ({"name": "t", "url": "http://127.0.0.1:1/x"}, "http_tools[0].description: say what the tool does"),
    ({"name": "t", "url": "http://127.0.0.1:1/x", "description": "d", "parameters": {"type": "string"}},
     "http_tools[0].parameters: expected a JSON schema of an object"),
    ({"name": "t", "url": "http://127.0.0.1:1/x", "description": "d",
      "parameters": {"type": "object", "properties": {}, "required": ["q"]}}, "parameters.required"),
    ({"name": "t", "url": "http://127.0.0.1:1/x", "description": "d", "timeout_s": 0}, "http_tools[0].timeout_s"),
    ({"name": "t", "url": "http://127.0.0.1:1/x", "description": "d", "retries": 1.5},
     "http_tools[0].retries: expected an integer"),
    ({"name": "t", "url": "http://127.0.0.1:1/x", "description": "d", "headers_env": ["X"]}, "headers_env"),
    ({"name": "t", "url": "http://127.0.0.1:1/x", "description": "d", "headers_env": {"X-Team": "not a var"}},
     "http_tools[0].headers_env.X-Team: 'not a var' is not an environment variable's name"),
    ({"name": "t", "url": "http://127.0.0.1:1/x", "description": "d", "api_key_env": "$TOKEN"},
     "http_tools[0].api_key_env: '$TOKEN' is not an environment variable's name"),
    ({"name": "t", "url": "http://127.0.0.1:1/x", "description": "  "}, "description: say what the tool does"),
    ({"name": "t", "url": "http://127.0.0.1:1/x", "description": "d", "tiemout_s": 3},
     "http_tools[0].tiemout_s: unknown key; did you mean 'timeout_s'?"),
])
@pytest.mark.parametrize("reader", ["http_tool", "config"])
def test_bad_http_tool_entries_name_the_field(entry, says, reader):
    """One spec (HttpToolSpec), one set of rules: the tool built from a mapping and the environment section of a
    config refuse the same entries with the same message."""
    with pytest.raises(ConfigError) as err:
        if reader == "http_tool":
            http_tool(entry, "environment.http_tools[0]")
        else:
            from_dict(EnvironmentConfig, {"http_tools": [entry]}, "environment")
    assert says in str(err.value)


def test_the_configs_entry_is_the_tools_spec(server, monkeypatch):
    """What the environment section reads (api_key_env included) is what the tool is built from."""
    cfg = from_dict(EnvironmentConfig, {"http_tools": [{**spec(server, "/search"), "api_key_env": "WIKI_TOKEN",
                                                         "retries": 0}]}, "environment")
    assert isinstance(cfg.http_tools[0], HttpToolSpec)
    tool = http_tool(cfg.http_tools[0], "environment.http_tools[0]", default_timeout_s=3)
    assert (tool.fn.api_key_env, tool.fn.retries, tool.fn.timeout_s) == ("WIKI_TOKEN", 0, 3)


def test_an_entry_may_be_a_config_object(server):
    class Entry:
        name, url, description = "search", server.url + "/search", "Search."
        parameters, timeout_s, retries, headers_env = QUERY, None, None, None

    tool = http_tool(Entry(), "environment.http_tools[0]", default_timeout_s=4)
    assert tool.fn.timeout_s == 4 and tool.fn.retries == 2 and tool.name == "search"


class socket_closed_port:
    """A loopback port nothing listens on (bound, then closed)."""

    def __enter__(self):
        import socket

        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        self.port = s.getsockname()[1]
        s.close()
        return self.port

    def __exit__(self, *exc):
        return False
