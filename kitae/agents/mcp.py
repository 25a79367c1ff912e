"""Tools from MCP servers (the Model Context Protocol), through the official ``mcp`` Python SDK (2.x).

A run names its servers in ``environment.mcp_servers``; each is started (stdio) or connected to (streamable
HTTP) once, when the run starts, its tools are listed and offered to the model as OpenAI function schemas, and
every call of an episode goes to the server that listed the tool::

    environment:
      mcp_servers:
        - {command: [python, my_server.py], env: {DATA_DIR: /data}}          # stdio: kitae starts the process
        - {url: "http://127.0.0.1:8765/mcp", api_key_env: MY_MCP_TOKEN}      # streamable HTTP: already running

    tools = McpTools(cfg.environment.mcp_servers)
    tools.start_sync()                        # or: await tools.start()
    tools.schemas                             # [{"type": "function", "function": {name, description, parameters}}]
    await tools.call("add", {"a": 2, "b": 3}) # "5"; McpCallError when the call fails
    tools.close_sync()                        # or: await tools.close(); a stdio server's process is gone after it

Which event loop holds the sessions: their own. An MCP session is a set of tasks (the transport's pipe or HTTP
readers) bound to the event loop that opened it, and it must be closed from the task that opened it. kitae's
episode runner and graders may run each step (or each turn) under a fresh ``asyncio.run``, so a session opened on
the caller's loop would die with that loop. :class:`McpTools` therefore runs every session on one event loop in a
background thread of its own, for the life of the run, and offers thread-safe wrappers: the ``async`` methods
(:meth:`McpTools.start`, :meth:`McpTools.call`, :meth:`McpTools.close`) await the background loop from any loop;
``start_sync``/``call_sync``/``close_sync`` block, for code without one. Cancelling an awaited call (a tool
timeout of the caller's own) cancels it on the background loop too.

Failures never hang an episode and never stop a run once it has started:
- a tool that reports an error (the result's ``isError``), an unknown tool, a call past ``timeout_s``, a server
  that died or dropped the connection: :class:`McpCallError`, whose message goes back to the model as the tool's
  error; each is counted in :meth:`McpTools.counters` (``tool_errors``, ``timeouts``, ``connection_errors``). A
  server that is gone stays gone for the run (``servers_down``); its later calls fail at once.
- a server that cannot start, does not answer the handshake within ``start_timeout_s``, or lists a tool name
  another server also lists: :class:`McpError` from ``start``, naming the server and showing the end of its
  stderr, before any episode runs.

A stdio server gets a small environment (the SDK's: ``HOME``, ``PATH``, ``LOGNAME``, ``SHELL``, ``TERM``, ``USER``)
plus the variables named in ``pass_env`` and set in ``env``: kitae's own variables (API keys of judges and reward
models) do not reach it. It runs in a process group of its own; closing the session closes its stdin, waits two
seconds for it to exit, and ends the whole group (SIGTERM, then SIGKILL), also the helpers a server that did exit
left behind: no process is left behind. A result's text parts are
joined with newlines; other parts become short placeholders (``[image: image/png]``); a result with no content
but structured content is that content as JSON. The text is untrusted: the caller caps and fences it.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import glob
import json
import logging
import os
import signal
import tempfile
import threading
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Coroutine

from kitae.agents.tools import ToolError
from kitae.config import from_dict, setting, short_repr
from kitae.errors import ConfigError, KitaeError

log = logging.getLogger("kitae.agents.mcp")
STDERR_TAIL_CHARS = 1500  # of a stdio server's stderr, shown when it fails to start or dies
CLOSE_TIMEOUT_S = 15.0  # the SDK's stdio shutdown is bounded at about 6.5 s (stdin closed, SIGTERM, SIGKILL)


class McpError(KitaeError):
    """An MCP server could not be started or connected to, or its tools cannot be offered."""


class McpCallError(McpError, ToolError):
    """One tool call failed. ``kind``: "tool_error" (the server's result said isError, or the tool is unknown),
    "timeout", "connection" (the server died or dropped the connection), "arguments" (not a JSON object);
    ``error_kind``: the same as the episode's tool call counts it (kitae.rollout.trajectory.TOOL_ERROR_KINDS)."""

    def __init__(self, message: str, kind: str):
        super().__init__(message)
        self.kind = kind
        self.error_kind = {"timeout": "timeout", "arguments": "bad_arguments"}.get(kind, "failed")


@dataclass
class McpServerSpec:
    """One entry of ``environment.mcp_servers``: a stdio server kitae starts, or a streamable HTTP one it connects to.
    Give ``command`` or ``url``; the other keys are optional."""

    command: list[str] | None = None  # e.g. [python, server.py]: kitae starts it and speaks MCP over its stdin/stdout
    # (no shell; the program is looked up on PATH)
    url: str | None = None  # e.g. http://127.0.0.1:8765/mcp: a running server, spoken to over streamable HTTP
    env: dict[str, str] = field(default_factory=dict)  # stdio: extra environment variables of the server
    pass_env: list[str] = field(default_factory=list)  # stdio: names of kitae's own environment variables handed on
    # to the server (it gets only HOME, PATH, LOGNAME, SHELL, TERM, USER otherwise)
    cwd: str | None = None  # stdio: the server's working directory
    api_key_env: str | None = None  # url: the variable whose value is sent as Authorization: Bearer
    name: str | None = None  # what errors, counters and the log call the server (default: the program or the url)
    tools: list[str] | None = None  # offer only these of the server's tools (default: all it lists)
    timeout_s: float = setting(10.0, above=0)  # seconds one tool call may take
    start_timeout_s: float = setting(30.0, above=0)  # seconds to start or connect, shake hands and list the tools

    @classmethod
    def read(cls, value: Any, path: str) -> "McpServerSpec":
        """A spec from a config mapping (or a spec itself), every mistake a ConfigError naming `path`."""
        return value if isinstance(value, cls) else from_dict(cls, value, path)

    def validate(self, path: str) -> None:
        if (self.command is None) == (self.url is None):
            raise ConfigError(path, "give either command (a stdio server, e.g. [python, server.py]) or url "
                                    "(a streamable HTTP server, e.g. http://127.0.0.1:8765/mcp), not both or neither")
        if self.command is not None and (not self.command or not all(self.command)):
            raise ConfigError(f"{path}.command",
                              f"expected a program and its arguments, got {short_repr(self.command)}")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ConfigError(f"{path}.url", f"expected an http:// or https:// URL, got {short_repr(self.url)}")
        stdio_only = [k for k in ("cwd",) if getattr(self, k)] + [k for k in ("env", "pass_env") if getattr(self, k)]
        if self.url is not None and stdio_only:
            raise ConfigError(f"{path}.{stdio_only[0]}", "is for a stdio server (command), not a url")
        if self.command is not None and self.api_key_env:
            raise ConfigError(f"{path}.api_key_env", "is for a url; give a stdio server its token with env or pass_env")

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        return os.path.basename(self.command[0]) if self.command else str(self.url)


@dataclass
class McpCounters:
    """What happened to the run's MCP calls (cumulative)."""

    calls: int = 0
    tool_errors: int = 0
    timeouts: int = 0
    connection_errors: int = 0
    servers_down: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


class McpTools:
    """The run's MCP servers, their sessions held on a background event loop (see the module docstring)."""

    def __init__(self, servers: list[McpServerSpec | dict], path: str = "environment.mcp_servers"):
        self.specs = [McpServerSpec.read(s, f"{path}[{i}]") for i, s in enumerate(servers)]
        self.path = path
        self.counters = McpCounters()
        self._servers = [_Server(s, f"{path}[{i}]", self.counters) for i, s in enumerate(self.specs)]
        self._by_tool: dict[str, _Server] = {}
        self._schemas: list[dict] = []
        self._loop: _BackgroundLoop | None = None
        self._start_future: concurrent.futures.Future | None = None
        self._lock = threading.Lock()

    # ---- what tools see ------------------------------------------------------------------------
    @property
    def schemas(self) -> list[dict]:
        """The tools as OpenAI function schemas, server by server in the order the servers listed them."""
        return list(self._schemas)

    @property
    def names(self) -> list[str]:
        return [s["function"]["name"] for s in self._schemas]

    def functions(self) -> dict[str, Callable[..., Awaitable[str]]]:
        """{tool name: async function(**arguments) -> text}, for a tool set that calls tools with keywords."""

        def bind(name: str) -> Callable[..., Awaitable[str]]:
            async def call(**arguments: Any) -> str:
                return await self.call(name, arguments)

            call.__name__ = name
            return call

        return {name: bind(name) for name in self.names}

    def timeout_s(self, name: str) -> float:
        """The ``timeout_s`` of the server that lists tool `name` (after start)."""
        return self._by_tool[name].spec.timeout_s

    def down(self) -> dict[str, str]:
        """{server label: why it is gone} for every server that died or dropped its connection during the run."""
        return {s.spec.label: s.down for s in self._servers if s.down is not None}

    # ---- lifecycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        """Start or connect every server and list its tools; idempotent. McpError when a server fails."""
        await asyncio.wrap_future(self._submit_start())

    def start_sync(self) -> None:
        self._submit_start().result()

    def _submit_start(self) -> concurrent.futures.Future:
        with self._lock:
            if self._loop is None:
                self._loop = _BackgroundLoop("kitae-mcp")
                self._start_future = self._loop.submit(self._start_all())
                atexit.register(self.close_sync)  # a run that ends without close() still ends its servers
            return self._start_future

    async def _start_all(self) -> None:
        try:
            for server in self._servers:  # one at a time: a failure names its server, the rest are not left open
                await server.open()
        except BaseException:
            await self._close_all()
            raise
        self._by_tool, self._schemas = {}, []
        for server in self._servers:
            for schema in server.schemas:
                name = schema["function"]["name"]
                if name in self._by_tool:
                    await self._close_all()
                    raise McpError(f"{server.path}: tool {name!r} is also offered by MCP server "
                                   f"{self._by_tool[name].spec.label!r}; keep one with the servers' `tools` lists")
                self._by_tool[name] = server
                self._schemas.append(schema)

    async def close(self) -> None:
        """Close every session (a stdio server's process ends) and stop the background loop; idempotent."""
        await asyncio.to_thread(self.close_sync)

    def close_sync(self) -> None:
        with self._lock:
            loop, self._loop = self._loop, None
        if loop is None:
            return
        atexit.unregister(self.close_sync)
        try:
            loop.submit(self._close_all()).result()
        finally:
            loop.stop()

    async def _close_all(self) -> None:
        for server in self._servers:
            await server.close()

    # ---- calls ---------------------------------------------------------------------------------
    async def call(self, name: str, arguments: Any) -> str:
        """The tool's text result; McpCallError when the call fails (the message says why)."""
        return await asyncio.wrap_future(self._submit_call(name, arguments))

    def call_sync(self, name: str, arguments: Any) -> str:
        return self._submit_call(name, arguments).result()

    def _submit_call(self, name: str, arguments: Any) -> concurrent.futures.Future:
        loop, started = self._loop, self._start_future
        if loop is None or started is None or not started.done() or started.exception() is not None:
            raise McpError("the MCP servers are not started: call start() first (or they were closed)")
        server = self._by_tool.get(name)
        if server is None:
            self.counters.calls += 1
            self.counters.tool_errors += 1
            known = ", ".join(sorted(self._by_tool)) or "none"
            raise McpCallError(f"unknown tool {name!r} (MCP tools: {known})", "tool_error")
        return loop.submit(server.call(name, arguments))


class _Server:
    """One server's session; every method runs on the background loop."""

    def __init__(self, spec: McpServerSpec, path: str, counters: McpCounters):
        self.spec, self.path, self.counters = spec, path, counters
        self.schemas: list[dict] = []
        self._client: Any = None
        self._stop: asyncio.Event | None = None
        self._holder: asyncio.Task | None = None
        self._stderr: Any = None
        self._children_before: set[int] = set()
        self._pid: int | None = None  # a stdio server's process: the leader of its own process group
        self.down: str | None = None  # why the server is gone

    async def open(self) -> None:
        """Start the session in a task of its own (it must be closed by the task that opened it), list tools."""
        if self._holder is not None:
            return
        ready: asyncio.Future = asyncio.get_running_loop().create_future()
        self._stop, self.down, self._pid = asyncio.Event(), None, None
        self._children_before = _own_children()
        ready.add_done_callback(lambda f: f.cancelled() or f.exception())  # read, also after a start timeout
        self._holder = asyncio.create_task(self._hold(ready))
        try:
            await asyncio.wait_for(asyncio.shield(ready), self.spec.start_timeout_s)
            self.schemas = await asyncio.wait_for(self._list_tools(), self.spec.start_timeout_s)
        except asyncio.TimeoutError:
            raise McpError(self._start_message(f"no answer within start_timeout_s={self.spec.start_timeout_s:g} s")
                           ) from None
        except McpError:
            raise
        except Exception as exc:
            raise McpError(self._start_message(_describe(exc))) from None

    async def _hold(self, ready: asyncio.Future) -> None:
        try:
            async with AsyncExitStack() as stack:
                self._client = await stack.enter_async_context(await self._make_client(stack))
                self._note_process()
                ready.set_result(None)
                await self._stop.wait()
        except BaseException as exc:  # the session could not open, or its transport failed later
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else McpError(_describe(exc)))
            elif not self._stop.is_set():  # not while closing: then the server is ended on purpose
                self._mark_down(_describe(exc))
            if not isinstance(exc, Exception):
                raise
        finally:
            self._client = None

    async def _make_client(self, stack: AsyncExitStack) -> Any:
        """The SDK's Client for the spec (not yet entered); what it needs besides is closed with `stack`."""
        from mcp import Client
        from mcp.client.stdio import StdioServerParameters, stdio_client
        from mcp.client.streamable_http import streamable_http_client

        spec = self.spec
        if spec.command is not None:
            if self._stderr is None:  # kept until close(): its end explains a server that failed or died
                self._stderr = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")
            env = {k: os.environ[k] for k in spec.pass_env if k in os.environ} | spec.env
            params = StdioServerParameters(command=spec.command[0], args=list(spec.command[1:]), env=env,
                                           cwd=spec.cwd)
            return Client(stdio_client(params, errlog=self._stderr))
        http = None
        key = os.environ.get(spec.api_key_env) if spec.api_key_env else None
        if key:
            from mcp.shared._httpx_utils import create_mcp_http_client

            # the transport leaves a client it was given open: the stack closes it
            http = await stack.enter_async_context(create_mcp_http_client(headers={"Authorization": f"Bearer {key}"}))
        return Client(streamable_http_client(spec.url, http_client=http))

    async def _list_tools(self) -> list[dict]:
        tools, cursor = [], None
        while True:
            page = await self._client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break
        listed = {t.name for t in tools}
        if self.spec.tools is not None:
            missing = [n for n in self.spec.tools if n not in listed]
            if missing:
                raise McpError(f"{self.path}.tools: {self.spec.label!r} lists no tool {missing[0]!r} "
                               f"(it lists: {', '.join(sorted(listed)) or 'none'})")
            tools = [t for t in tools if t.name in self.spec.tools]
        return [function_schema(t) for t in tools]

    async def call(self, name: str, arguments: Any) -> str:
        self.counters.calls += 1
        if not isinstance(arguments, dict):
            self.counters.tool_errors += 1
            raise McpCallError(f"arguments of {name!r} must be a JSON object, got {short_repr(arguments)}", "arguments")
        if self.down is not None or self._client is None:
            self.counters.connection_errors += 1
            raise McpCallError(self._gone_message(), "connection")
        try:
            result = await asyncio.wait_for(self._client.call_tool(name, arguments), self.spec.timeout_s)
        except asyncio.TimeoutError:
            self.counters.timeouts += 1
            raise McpCallError(f"timeout after {self.spec.timeout_s:g} s (MCP server {self.spec.label!r})",
                               "timeout") from None
        except Exception as exc:
            if not _is_connection_loss(exc):
                self.counters.tool_errors += 1
                raise McpCallError(f"MCP server {self.spec.label!r}: {_describe(exc)}", "tool_error") from None
            self._mark_down(_describe(exc))
            self.counters.connection_errors += 1
            raise McpCallError(self._gone_message(), "connection") from None
        text = result_text(result)
        if result.is_error:
            self.counters.tool_errors += 1
            raise McpCallError(text or f"tool {name!r} reported an error", "tool_error")
        return text

    def _note_process(self) -> None:
        """Find a stdio server's process among this process's new children (the SDK does not expose it), so that
        close() can end what is left of its process group: the SDK kills the group only when the server itself
        outlives its stdin, and a server that exits at once leaves its own helpers (npx's node) running."""
        if self.spec.command is not None and self._pid is None:
            self._pid = _server_process(self.spec.command, self._children_before)

    def _mark_down(self, why: str) -> None:
        """Remember that the server is gone (its calls fail at once from now on) and say so in the log once, with
        the end of its stderr; the model sees only the short message."""
        if self.down is None:
            self.down = why
            self.counters.servers_down += 1
            log.warning("%s%s", self._gone_message(), self._stderr_tail())

    async def close(self) -> None:
        """End the session: the holder task leaves the client's context (a stdio server's process ends). A session
        still opening (a handshake that never came) is cancelled instead."""
        if self._holder is None:
            return
        holder, self._holder = self._holder, None
        self._note_process()
        self._stop.set()
        if self._client is None:
            holder.cancel()
        try:
            await asyncio.wait_for(holder, CLOSE_TIMEOUT_S)
        except BaseException:  # a transport that failed while closing: the SDK has ended the process all the same
            pass
        if self._pid is not None:
            await _end_process_group(self._pid)
            self._pid = None
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def _gone_message(self) -> str:
        return f"MCP server {self.spec.label!r} is gone ({self.down or 'closed'})"

    def _start_message(self, why: str) -> str:
        what = "start" if self.spec.command is not None else "connect to"
        hint = self._token_hint(why)
        if self.spec.command is not None and "FileNotFoundError" in why:
            hint = f" (is {self.spec.command[0]!r} installed and on PATH? or give its full path)"
        return f"{self.path}: cannot {what} MCP server {self.spec.label!r}: {why}{hint}{self._stderr_tail()}"

    def _token_hint(self, why: str) -> str:
        """For an HTTP error status at the handshake (the SDK does not say which): where the token comes from."""
        if self.spec.url is None or "error response" not in why:
            return ""
        if not self.spec.api_key_env:
            return " (an HTTP error status; if the server wants a token, name its environment variable in api_key_env)"
        state = "is set" if os.environ.get(self.spec.api_key_env) else "is not set"
        return f" (an HTTP error status; the token comes from ${self.spec.api_key_env}, which {state})"

    def _stderr_tail(self) -> str:
        if self._stderr is None or self._stderr.closed:
            return ""
        try:
            self._stderr.flush()
            self._stderr.seek(0)
            text = self._stderr.read()
        except (OSError, ValueError):
            return ""
        text = text.strip()[-STDERR_TAIL_CHARS:]
        return f"; its stderr ends:\n{text}" if text else ""


def function_schema(tool: Any) -> dict:
    """An MCP tool listing as an OpenAI function schema (what chat templates take as ``tools``)."""
    parameters = tool.input_schema or {"type": "object", "properties": {}}
    return {"type": "function", "function": {"name": tool.name, "description": tool.description or "",
                                             "parameters": parameters}}


def result_text(result: Any) -> str:
    """A CallToolResult as text: text parts joined by newlines, placeholders for the rest; structured content as
    JSON when there is nothing else."""
    parts = [_part_text(p) for p in result.content or []]
    if not parts and result.structured_content is not None:
        return json.dumps(result.structured_content, ensure_ascii=False)
    return "\n".join(parts)


def _part_text(part: Any) -> str:
    kind = getattr(part, "type", "")
    if kind == "text":
        return part.text
    if kind in ("image", "audio"):
        return f"[{kind}: {part.mime_type}]"
    if kind == "resource_link":
        return f"[resource: {part.uri}]"
    if kind == "resource":
        text = getattr(part.resource, "text", None)
        return text if text is not None else f"[resource: {part.resource.uri}]"
    return f"[{kind or type(part).__name__}]"


def _is_connection_loss(exc: BaseException) -> bool:
    """Whether a failed call means the server or its connection is gone (not a bad request)."""
    from mcp.shared.exceptions import MCPError

    if isinstance(exc, MCPError):
        return exc.code == -32000 or "connection closed" in exc.message.lower()  # the SDK's CONNECTION_CLOSED
    return isinstance(exc, (OSError, EOFError)) or type(exc).__name__ in (
        "ClosedResourceError", "BrokenResourceError", "EndOfStream", "ConnectError", "RemoteProtocolError")


def _describe(exc: BaseException) -> str:
    """One line for an exception, the first of an exception group's leaves (anyio task groups wrap them)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    message = str(exc).strip() or type(exc).__name__
    return message if type(exc).__name__ in message else f"{type(exc).__name__}: {message}"


def _own_children() -> set[int]:
    """The process ids of this process's children (Linux /proc; empty elsewhere)."""
    pids: set[int] = set()
    for task in glob.glob("/proc/self/task/*/children"):
        try:
            with open(task, encoding="ascii") as f:
                pids.update(int(p) for p in f.read().split())
        except (OSError, ValueError):
            continue
    return pids


def _server_process(command: list[str], before: set[int]) -> int | None:
    """The child started since `before` that runs `command` (its argv ends with it: a script run through its
    shebang gets the interpreter in front) as the leader of a session of its own, as the SDK starts servers."""
    want = [a.encode() for a in command]
    for pid in sorted(_own_children() - before):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")[:-1]
            if argv[-len(want):] == want and os.getsid(pid) == pid:
                return pid
        except OSError:
            continue
    return None


async def _end_process_group(pgid: int) -> None:
    """SIGTERM to what is left of a server's process group, SIGKILL after a second; nothing when it is empty."""
    for sig, wait in ((signal.SIGTERM, 1.0), (signal.SIGKILL, 0.0)):
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            await asyncio.sleep(0.02)
            try:
                os.killpg(pgid, 0)
            except (ProcessLookupError, PermissionError):
                return


class _BackgroundLoop:
    """An event loop running in a daemon thread; ``submit(coro)`` from any thread gives a concurrent Future."""

    def __init__(self, name: str):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def submit(self, coro: Coroutine) -> concurrent.futures.Future:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        if not self.thread.is_alive():
            self.loop.close()
