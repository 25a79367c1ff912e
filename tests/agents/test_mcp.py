"""MCP tools against a real MCP server process (tests/agents/mcp_server.py, the official SDK), over stdio and over
streamable HTTP on 127.0.0.1: listing, calls, error results, timeouts, a server killed mid-session, clean close."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kitae.agents.mcp import McpCallError, McpError, McpServerSpec, McpTools
from kitae.errors import ConfigError

SERVER = str(Path(__file__).with_name("mcp_server.py"))
TOOLS = ["add", "echo", "slow", "getenv", "fail"]
pytestmark = pytest.mark.timeout(180)  # a call that hangs fails the test instead of the suite


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the MCP test server exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("the MCP test server did not listen in time")


def alive(pid: int) -> bool:
    """Whether the process runs (a zombie waiting for a parent that does not reap does not count)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def serve_http(*extra: str):
    """The test server over streamable HTTP on 127.0.0.1: (url, process)."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, SERVER, "--http", str(port), *extra], stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, proc)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return f"http://127.0.0.1:{port}/mcp", proc


@pytest.fixture
def http_server():
    url, proc = serve_http()
    yield url, proc
    proc.kill()
    proc.wait()


def stdio_spec(tmp_path: Path, **extra) -> dict:
    return {"command": [sys.executable, SERVER, "--pid-file", str(tmp_path / "pid")], **extra}


@pytest.fixture(params=["stdio", pytest.param("http", marks=pytest.mark.slow)])  # http: the full suite
def tools(request, tmp_path):
    """Started McpTools for one server, over each transport."""
    if request.param == "stdio":
        spec = stdio_spec(tmp_path, timeout_s=2)
    else:
        url, _ = request.getfixturevalue("http_server")
        spec = {"url": url, "timeout_s": 2}
    mcp = McpTools([spec])
    mcp.start_sync()
    yield mcp
    mcp.close_sync()


def test_tools_are_listed_as_openai_function_schemas(tools):
    assert tools.names == TOOLS
    add = tools.schemas[0]
    assert add["type"] == "function"
    assert add["function"]["name"] == "add"
    assert add["function"]["description"] == "Add two whole numbers."
    params = add["function"]["parameters"]
    assert params["properties"]["a"]["type"] == "integer" and sorted(params["required"]) == ["a", "b"]


def test_calls_return_the_text_of_the_result(tools):
    assert tools.call_sync("add", {"a": 2, "b": 40}) == "42"
    assert asyncio.run(tools.call("echo", {"text": "héllo\n世界"})) == "héllo\n世界"
    assert tools.counters.as_dict() == {"calls": 2, "tool_errors": 0, "timeouts": 0, "connection_errors": 0,
                                        "servers_down": 0}


def test_error_result_is_a_call_error_and_the_session_goes_on(tools):
    with pytest.raises(McpCallError, match="this tool always fails") as err:
        tools.call_sync("fail", {})
    assert err.value.kind == "tool_error"
    with pytest.raises(McpCallError, match="Input should be a valid integer") as err:  # the server refused arguments
        tools.call_sync("add", {"a": "two", "b": 1})
    assert err.value.kind == "tool_error"
    assert tools.call_sync("echo", {"text": "still here"}) == "still here"
    assert tools.counters.tool_errors == 2


def test_unknown_tool_and_arguments_that_are_not_an_object(tools):
    with pytest.raises(McpCallError, match="unknown tool 'nope'.*add, echo") as err:
        tools.call_sync("nope", {})
    assert err.value.kind == "tool_error"
    with pytest.raises(McpCallError, match="must be a JSON object") as err:
        tools.call_sync("add", [1, 2])
    assert err.value.kind == "arguments"


@pytest.mark.slow  # waits out timeouts or server starts: the full suite runs it
def test_a_call_past_timeout_s_fails_and_the_session_goes_on(tools):
    with pytest.raises(McpCallError, match="timeout after 2 s") as err:
        tools.call_sync("slow", {"seconds": 120})  # without the timeout: "slept 120", not an error
    assert err.value.kind == "timeout"
    assert tools.counters.timeouts == 1
    assert tools.call_sync("add", {"a": 1, "b": 1}) == "2"


def test_sessions_survive_the_event_loops_of_their_callers(tools):
    """The episode runner may run each turn under a fresh asyncio.run: the sessions live on their own loop."""
    for i in range(3):
        assert asyncio.run(tools.call("add", {"a": i, "b": 1})) == str(i + 1)

    async def concurrent_calls():  # calls of one turn run at once
        return await asyncio.gather(*(tools.call("echo", {"text": str(i)}) for i in range(8)))

    assert asyncio.run(concurrent_calls()) == [str(i) for i in range(8)]


def test_functions_call_tools_with_keywords(tools):
    functions = tools.functions()
    assert sorted(functions) == sorted(TOOLS)
    assert asyncio.run(functions["add"](a=5, b=6)) == "11"


def test_a_cancelled_call_is_cancelled_on_the_server_loop_too(tools):
    """A caller's own tool timeout (asyncio.wait_for) cancels the MCP call; the session stays usable."""

    async def cut_short():
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(tools.call("slow", {"seconds": 120}), 0.5)

    asyncio.run(cut_short())
    assert tools.call_sync("echo", {"text": "after"}) == "after"


# ---- a server that dies ------------------------------------------------------------------------------------
def test_stdio_server_killed_mid_session_fails_calls_at_once(tmp_path):
    mcp = McpTools([stdio_spec(tmp_path, timeout_s=120)])
    mcp.start_sync()
    try:
        assert mcp.call_sync("add", {"a": 1, "b": 2}) == "3"
        os.kill(int((tmp_path / "pid").read_text()), signal.SIGKILL)
        for _ in range(2):  # an error, not a wait for the 120 s timeout; and it stays down
            with pytest.raises(McpCallError, match="MCP server 'python.*' is gone") as err:
                mcp.call_sync("echo", {"text": "anyone?"})
            assert err.value.kind == "connection"
        assert mcp.counters.connection_errors == 2 and mcp.counters.servers_down == 1
        assert list(mcp.down()) == [Path(sys.executable).name]
    finally:
        mcp.close_sync()


@pytest.mark.slow  # waits out timeouts or server starts: the full suite runs it
def test_stdio_server_killed_during_a_call_ends_the_call(tmp_path):
    mcp = McpTools([stdio_spec(tmp_path, timeout_s=120)])
    mcp.start_sync()
    pid = int((tmp_path / "pid").read_text())
    threading.Timer(1.0, os.kill, (pid, signal.SIGKILL)).start()
    try:
        with pytest.raises(McpCallError) as err:
            mcp.call_sync("slow", {"seconds": 100})
        assert err.value.kind == "connection"
    finally:
        mcp.close_sync()


def test_http_server_killed_mid_session_fails_calls(http_server):
    url, proc = http_server
    mcp = McpTools([{"url": url, "timeout_s": 120}])
    mcp.start_sync()
    try:
        assert mcp.call_sync("add", {"a": 1, "b": 2}) == "3"
        proc.kill()
        proc.wait()
        with pytest.raises(McpCallError) as err:
            mcp.call_sync("echo", {"text": "anyone?"})
        assert err.value.kind == "connection"
    finally:
        mcp.close_sync()


# ---- start and close ---------------------------------------------------------------------------------------
def test_close_leaves_no_server_process_and_no_thread(tmp_path):
    mcp = McpTools([stdio_spec(tmp_path)])
    threads = set(threading.enumerate())
    mcp.start_sync()
    pid = int((tmp_path / "pid").read_text())
    assert alive(pid)
    mcp.close_sync()
    assert not alive(pid)
    assert set(threading.enumerate()) <= threads
    mcp.close_sync()  # idempotent
    with pytest.raises(McpError, match="not started"):
        mcp.call_sync("add", {"a": 1, "b": 2})


@pytest.mark.slow  # waits out timeouts or server starts: the full suite runs it
def test_close_ends_the_helpers_a_server_started(tmp_path):
    """A server that exits when its stdin closes can leave its own child processes (npx's node) behind."""
    mcp = McpTools([stdio_spec(tmp_path, command=[sys.executable, SERVER, "--pid-file", str(tmp_path / "pid"),
                                                  "--child-pid-file", str(tmp_path / "child")])])
    mcp.start_sync()
    pid, child = int((tmp_path / "pid").read_text()), int((tmp_path / "child").read_text())
    assert alive(pid) and alive(child)
    mcp.close_sync()
    assert not alive(pid) and not alive(child)


@pytest.mark.slow  # waits out timeouts or server starts: the full suite runs it
def test_a_program_that_forgets_close_still_ends_its_servers(tmp_path):
    script = (f"import sys; from kitae.agents.mcp import McpTools\n"
              f"t = McpTools([{{'command': [sys.executable, {SERVER!r}, '--pid-file', {str(tmp_path / 'pid')!r}, "
              f"'--child-pid-file', {str(tmp_path / 'child')!r}]}}])\n"
              f"t.start_sync(); print(t.call_sync('add', {{'a': 1, 'b': 2}}))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])})
    assert done.stdout.strip() == "3", done.stderr
    pid, child = int((tmp_path / "pid").read_text()), int((tmp_path / "child").read_text())
    assert not alive(pid) and not alive(child)


def test_async_start_and_close(tmp_path):
    async def run():
        mcp = McpTools([stdio_spec(tmp_path)])
        await mcp.start()
        await mcp.start()  # idempotent
        try:
            return await mcp.call("add", {"a": 3, "b": 4}), int((tmp_path / "pid").read_text())
        finally:
            await mcp.close()

    result, pid = asyncio.run(run())
    assert result == "7" and not alive(pid)


def test_stdio_server_gets_its_env_and_not_kitaes(tmp_path, monkeypatch):
    monkeypatch.setenv("KITAE_TEST_SECRET", "judge-api-key")
    monkeypatch.setenv("KITAE_TEST_PASSED", "passed-on")
    mcp = McpTools([stdio_spec(tmp_path, env={"GREETING": "hi"}, pass_env=["KITAE_TEST_PASSED", "NOT_SET_ANYWHERE"])])
    mcp.start_sync()
    try:
        assert mcp.call_sync("getenv", {"name": "GREETING"}) == "hi"
        assert mcp.call_sync("getenv", {"name": "KITAE_TEST_PASSED"}) == "passed-on"
        assert mcp.call_sync("getenv", {"name": "KITAE_TEST_SECRET"}) == ""
    finally:
        mcp.close_sync()


def test_a_server_that_exits_at_start_is_an_error_with_its_stderr():
    crash = [sys.executable, "-c", "import sys; print('no config file given', file=sys.stderr); sys.exit(3)"]
    mcp = McpTools([{"command": crash, "start_timeout_s": 60}])
    with pytest.raises(McpError, match=r"(?s)environment.mcp_servers\[0\]: cannot start MCP server 'python.*'"
                                       r".*no config file given"):
        mcp.start_sync()
    mcp.close_sync()


def test_a_missing_program_and_a_closed_port_are_start_errors():
    with pytest.raises(McpError, match="cannot start MCP server 'no-such-mcp-server'.*installed and on PATH"):
        McpTools([{"command": ["no-such-mcp-server"]}]).start_sync()
    url = f"http://127.0.0.1:{free_port()}/mcp"
    with pytest.raises(McpError, match=r"cannot connect to MCP server 'http://127\.0\.0\.1"):
        McpTools([{"url": url, "start_timeout_s": 30}]).start_sync()


@pytest.mark.slow  # waits out timeouts or server starts: the full suite runs it
def test_a_server_that_never_answers_is_a_start_timeout(tmp_path):
    silent = [sys.executable, "-c", "import time; time.sleep(600)"]
    mcp = McpTools([{"command": silent, "start_timeout_s": 2}])
    with pytest.raises(McpError, match="no answer within start_timeout_s=2 s"):
        mcp.start_sync()
    mcp.close_sync()


def test_http_server_gets_the_token_of_api_key_env(monkeypatch):
    url, proc = serve_http("--token", "tok-123")
    try:
        monkeypatch.setenv("MY_MCP_TOKEN", "tok-123")
        mcp = McpTools([{"url": url, "api_key_env": "MY_MCP_TOKEN"}])
        mcp.start_sync()
        try:
            assert mcp.call_sync("add", {"a": 1, "b": 1}) == "2"
        finally:
            mcp.close_sync()
        monkeypatch.setenv("MY_MCP_TOKEN", "wrong")
        with pytest.raises(McpError, match=r"cannot connect.*the token comes from \$MY_MCP_TOKEN, which is set"):
            McpTools([{"url": url, "api_key_env": "MY_MCP_TOKEN"}]).start_sync()
        with pytest.raises(McpError, match="if the server wants a token, name its environment variable in api_key_env"):
            McpTools([{"url": url}]).start_sync()
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.slow  # waits out timeouts or server starts: the full suite runs it
def test_two_servers_with_one_tool_name_and_the_tools_list(tmp_path, http_server):
    url, _ = http_server
    first = stdio_spec(tmp_path)
    with pytest.raises(McpError, match=r"mcp_servers\[1\]: tool 'add' is also offered by MCP server 'python"):
        McpTools([first, {"url": url}]).start_sync()
    assert not alive(int((tmp_path / "pid").read_text()))  # the first server was closed again
    mcp = McpTools([{**first, "tools": ["add", "echo"]}, {"url": url, "tools": ["slow"], "name": "waiter"}])
    mcp.start_sync()
    try:
        assert mcp.names == ["add", "echo", "slow"]
        assert mcp.call_sync("slow", {"seconds": 0}) == "slept 0.0"
    finally:
        mcp.close_sync()
    with pytest.raises(McpError, match=r"mcp_servers\[0\].tools: 'python.*' lists no tool 'search'"):
        McpTools([{**first, "tools": ["search"]}]).start_sync()


@pytest.mark.parametrize(
    "spec,message",
    [
        ({"command": ["x"], "url": "http://127.0.0.1:1/mcp"}, ": give either command"),  # both
        ({}, ": give either command"),  # neither
        ({"url": "127.0.0.1:8765/mcp"}, r"\.url: expected an http:// or https:// URL"),
        ({"command": []}, r"\.command: expected a program"),
        ({"url": "http://127.0.0.1:1/mcp", "env": {"A": "1"}}, r"\.env: is for a stdio server"),
        ({"command": ["x"], "api_key_env": "K"}, r"\.api_key_env: is for a url"),
        ({"command": ["x"], "timeout_s": 0}, r"\.timeout_s: must be > 0"),
        ({"command": ["x"], "timeout": 5}, r"\.timeout: unknown key; did you mean 'timeout_s'"),
    ],
)
def test_bad_specs_are_config_errors_naming_the_field(spec, message):
    with pytest.raises(ConfigError, match=r"environment\.mcp_servers\[0\]" + message):
        McpTools([spec])


def test_spec_reads_from_config_and_passes_through():
    spec = McpServerSpec.read({"command": ["python", "server.py"]}, "x")
    assert spec.label == "python" and spec.timeout_s == 10.0
    assert McpServerSpec.read(spec, "x") is spec


# ---- results as text ----------------------------------------------------------------------------------------
def _result(content, structured=None, is_error=False):
    import mcp_types as t

    return t.CallToolResult(content=content, structured_content=structured, is_error=is_error)


def _parts():
    import mcp_types as t

    return {
        "text": t.TextContent(type="text", text="42"),
        "image": t.ImageContent(type="image", data="aGk=", mime_type="image/png"),
        "link": t.ResourceLink(type="resource_link", name="notes", uri="file:///tmp/notes.txt"),
        "embedded_text": t.EmbeddedResource(type="resource", resource=t.TextResourceContents(
            uri="file:///a.txt", text="file text")),
        "embedded_blob": t.EmbeddedResource(type="resource", resource=t.BlobResourceContents(
            uri="file:///a.bin", blob="aGk=")),
    }


@pytest.mark.parametrize(
    "names,structured,text",
    [
        (["text"], None, "42"),
        (["text", "text"], None, "42\n42"),  # text parts joined by newlines
        (["text", "image"], None, "42\n[image: image/png]"),  # a placeholder, never the base64 data
        (["link"], None, "[resource: file:///tmp/notes.txt]"),
        (["embedded_text", "embedded_blob"], None, "file text\n[resource: file:///a.bin]"),
        ([], {"answer": 42}, '{"answer": 42}'),  # structured content only: as JSON
        (["text"], {"answer": 42}, "42"),  # the text wins when there is one
        ([], None, ""),
    ],
)
def test_result_text(names, structured, text):
    from kitae.agents.mcp import result_text

    parts = _parts()
    assert result_text(_result([parts[n] for n in names], structured)) == text


# ---- the config's entry, and MCP tools inside episodes (kitae.agents.tools.Tools) ------------------------------
def test_the_configs_mcp_entry_is_the_one_spec():
    """environment.mcp_servers reads every key the MCP tools take (the config once had a short spec of its own
    that refused pass_env, cwd, name, tools, timeout_s ...), and refuses with the same messages."""
    from kitae.agents.config import EnvironmentConfig
    from kitae.config import from_dict

    entry = {"command": ["python", "server.py"], "env": {"A": "1"}, "pass_env": ["HOME"], "cwd": "/tmp",
             "name": "calc", "tools": ["add"], "timeout_s": 3, "start_timeout_s": 20}
    [spec] = from_dict(EnvironmentConfig, {"mcp_servers": [entry]}, "environment").mcp_servers
    assert isinstance(spec, McpServerSpec) and spec == McpServerSpec.read(entry, "x")
    with pytest.raises(ConfigError, match=r"environment\.mcp_servers\[0\]\.timeout: unknown key; did you mean"):
        from_dict(EnvironmentConfig, {"mcp_servers": [{"command": ["x"], "timeout": 5}]}, "environment")


def test_the_config_imports_no_mcp_sdk():
    """kitae.agents.mcp imports the SDK only when a server starts: a config without MCP never loads it."""
    code = "import sys, kitae.agents.config, kitae.agents.mcp; print('mcp' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.slow  # waits out timeouts or server starts: the full suite runs it
def test_episode_calls_take_the_servers_timeout_and_count_into_the_steps_stats(tmp_path):
    """A call to an MCP tool is bounded by its server's timeout_s, not the run's tool_timeout_s; its failures carry
    their kind; the calls reach the step's metrics as agent/mcp/... (Tools.take_stats, which the agent engine
    reports)."""
    from kitae.agents.tools import Tools
    from kitae.rollout.trajectory import ToolCall

    tools = Tools.from_config({"mcp_servers": [stdio_spec(tmp_path, timeout_s=2, name="calc")], "tool_timeout_s": 0.2})

    async def calls():
        await tools.start()
        try:
            box = tools.toolbox("r")
            return [await box.call(ToolCall("slow", {"seconds": 0.5})),  # past the run's 0.2 s, within the server's
                    await box.call(ToolCall("slow", {"seconds": 120})),
                    await box.call(ToolCall("fail", {})),
                    await box.call(ToolCall("add", {"a": 1}))]  # the schema's required b is missing
        finally:
            await tools.close()

    slow, stuck, failed, bad = asyncio.run(calls())
    assert slow.ok and slow.result == "slept 0.5"
    assert stuck.error_kind == "timeout" and "MCP server 'calc'" in stuck.error
    assert failed.error_kind == "failed" and "always fails" in failed.error
    assert bad.error_kind == "bad_arguments"  # refused by the tool box: never sent
    stats = tools.take_stats()
    assert {k: stats[k] for k in ("agent/mcp/calls", "agent/mcp/timeouts", "agent/mcp/tool_errors",
                                  "agent/mcp/servers_down")} == {"agent/mcp/calls": 3.0, "agent/mcp/timeouts": 1.0,
                                                                 "agent/mcp/tool_errors": 1.0,
                                                                 "agent/mcp/servers_down": 0.0}
    assert tools.take_stats()["agent/mcp/calls"] == 0.0  # a fresh count for the next step
