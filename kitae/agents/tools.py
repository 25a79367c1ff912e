"""Tools an agent calls during an episode: plain functions, an environment's methods, HTTP endpoints, MCP servers.

A :class:`Tool` is a name, an OpenAI function schema (what the chat template renders in the prompt) and a
callable, sync or async, called with the parsed arguments as keywords. They come from:

- :func:`function_tool`: a plain function with type hints and a Google-style docstring; the schema is built by
  ``transformers.utils.get_json_schema``, as TRL's ``tools=`` builds it;
- :func:`environment_tools`: an environment in TRL's ``environment_factory`` contract (trl 1.16,
  GRPOTrainer's docstring): its public methods other than ``reset`` and ``get_reward``;
- :mod:`kitae.agents.http_tools`: an endpoint POSTed with the arguments and the rollout id;
- :mod:`kitae.agents.mcp`: the tools MCP servers list, a :class:`ToolSource` (listed at :meth:`Tools.start`);
- the built-in environments of :mod:`kitae.agents.environments` (``calculator``, ``python``).

:class:`Tools` is the run's set, built once from the ``environment:`` config; it makes one :class:`ToolBox` per
episode: a fresh environment instance (from the factory) plus the run's shared tools. ``ToolBox.call`` never
raises: an unknown tool, arguments that do not fit, the tool's exception and a timeout all become
``call.error`` (text the model reads back, and the counts on the run page). Tool output is untrusted text,
capped at ``max_result_chars``.

Where this departs from TRL: a tool's exception is the call's ``error`` (TRL sends ``{"error": str(e)}`` as
the result; the model reads the same message either way); calls to one environment instance run one at a time,
in the order the model made them (its state is not shared with other episodes, but its methods need not be
thread-safe); sync tools run in a thread of their own, so a slow one never blocks sampling or other tools.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import json
import math
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Protocol, runtime_checkable

from kitae.config import Variant
from kitae.errors import ConfigError, KitaeError
from kitae.registry import Registry, closest, load_target, unknown_name_message
from kitae.rollout.base import ReportsStats
from kitae.rollout.trajectory import ToolCall

# The rollout id of the episode whose tool call is running: HTTP tools send it; a user's tool may read it.
ROLLOUT_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("kitae_rollout_id", default=None)
ENVIRONMENT_HOOKS = ("reset", "get_reward")  # an environment's methods that are not tools (TRL's contract)
DEFAULT_TIMEOUT_S = 10.0
DEFAULT_MAX_RESULT_CHARS = 4000
DEFAULT_MAX_CONCURRENT_TOOLS = 16
MCP_TIMEOUT_MARGIN_S = 1.0  # an MCP tool's bound past its server's timeout_s: the server's own timeout comes first

# Built-in environments by name (``environment.factory: calculator``); the classes live in
# kitae.agents.environments, registered here as "module:Class" strings (imported when a config names one).
ENVIRONMENTS = Registry("environment")
ENVIRONMENTS.register_lazy("calculator", "kitae.agents.environments:Calculator")
ENVIRONMENTS.register_lazy("python", "kitae.agents.environments:PythonSandbox",
                           settings="kitae.agents.environments:PythonSettings")


@dataclass
class EnvironmentSettings(Variant):
    """A built-in environment's settings (``environment.factory``: NAME, or {type: NAME, ...its settings}); a
    built-in registered without settings takes none."""

    registry: ClassVar[Registry] = ENVIRONMENTS
    kind: ClassVar[str] = "environment"

    def factory(self, path: str) -> Callable[[], Any]:
        """What makes one environment per episode: the built-in's class, called with these settings."""
        cls = ENVIRONMENTS.get(self.type, path)
        given = {k: v for k, v in self.__dict__.items() if k != "type"}
        return functools.partial(cls, **given) if given else cls


# The kinds of shared tools the ``environment:`` config builds from entries of its own: ``http_tools`` entries
# (kitae.agents.http_tools) and ``mcp_servers`` entries (kitae.agents.mcp), each "module:function(spec, path,
# **settings)". Strings, so that this module, which those import, imports neither.
TOOL_KINDS = Registry("tool kind")
TOOL_KINDS.register_lazy("http", "kitae.agents.http_tools:http_tool")  # -> Tool
TOOL_KINDS.register_lazy("mcp", "kitae.agents.mcp:McpTools")  # (servers, path) -> the run's MCP sessions


class ToolError(Exception):
    """A tool's refusal meant for the model (a bad expression, a failed request): the message becomes the call's
    error verbatim, where any other exception is shown as ``ExceptionType: message``. ``error_kind`` is the
    call's (kitae.rollout.trajectory.TOOL_ERROR_KINDS): "failed" unless the tool knows better (an MCP server's
    own timeout is "timeout")."""

    error_kind = "failed"


@dataclass
class Tool:
    name: str
    schema: dict  # {"type": "function", "function": {"name", "description", "parameters"}}
    fn: Callable  # sync or async; called with the parsed arguments as keywords
    timeout_s: float | None = None  # None: the run's tool_timeout_s


@runtime_checkable
class ToolSource(Protocol):
    """Tools that need a connection: listed at :meth:`Tools.start`, released at :meth:`Tools.close` (MCP)."""

    async def start(self) -> list[Tool]: ...

    async def close(self) -> None: ...


def current_rollout_id() -> str | None:
    """The rollout id of the episode whose tool call is running (None outside a tool call)."""
    return ROLLOUT_ID.get()


# ---- schemas ------------------------------------------------------------------------------------------------
def function_tool(fn: Callable, path: str = "") -> Tool:
    """A tool from a function (or bound method) with type hints and a Google-style docstring.

    >>> def add(a: int, b: int) -> int:
    ...     '''Add two integers.
    ...
    ...     Args:
    ...         a: The first.
    ...         b: The second.
    ...     '''
    ...     return a + b
    >>> function_tool(add).schema["function"]["parameters"]["required"]
    ['a', 'b']
    """
    return Tool(_name_of(fn), tool_schema(fn, path), fn)


def tool_schema(fn: Callable, path: str = "", hint: str = "") -> dict:
    """The OpenAI function schema of `fn`, as TRL builds it (``transformers.utils.get_json_schema``); a
    ConfigError at `path` that names the function and the fix (and `hint`) when its docstring or type hints
    cannot be read."""
    from transformers.utils import get_json_schema
    from transformers.utils.chat_template_utils import DocstringParsingException, TypeHintParsingException

    try:
        return get_json_schema(fn)
    except (DocstringParsingException, TypeHintParsingException, ValueError, TypeError) as exc:
        raise ConfigError(path, f"cannot make a tool of {_qualified(fn)}: {exc}. A tool needs a type hint on every "
                          "argument and a Google-style docstring: a description line, then an 'Args:' section "
                          "with one line per argument ('x: what x is')" + hint) from None


def environment_tools(env: Any, path: str = "") -> list[Tool]:
    """An environment's tools (TRL's ``environment_factory`` contract): the public functions of its class, but
    ``reset`` and ``get_reward``, bound to `env`; listed on the class (so properties are not evaluated), by name."""
    names = [name for name, _ in inspect.getmembers(type(env), predicate=inspect.isfunction)
             if name not in ENVIRONMENT_HOOKS and not name.startswith("_")]
    hint = (f" (a public method of environment {type(env).__name__} is a tool; start its name with '_' to keep "
            "it from the model)")
    return [Tool(name, tool_schema(getattr(env, name), path, hint), getattr(env, name)) for name in names]


def _name_of(fn: Callable) -> str:
    return getattr(fn, "__name__", None) or type(fn).__name__


def _qualified(fn: Callable) -> str:
    module = getattr(fn, "__module__", None)
    name = getattr(fn, "__qualname__", None) or _name_of(fn)
    return f"{module}:{name}" if module else name


# ---- results ------------------------------------------------------------------------------------------------
def to_text(value: Any) -> str:
    """What the model reads back: a string as it is; a dict or list as JSON; anything else as ``str()`` (TRL's
    way: 3 -> "3")."""
    if isinstance(value, str):
        return value
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, ensure_ascii=False, default=str)
    return str(value)


def cap(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, with a marker that says how much was cut (tool output is untrusted).

    >>> cap("abcdefgh", 4)
    'abcd\\n[... 4 more characters cut: tool output is capped at 4]'
    """
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[... {len(text) - limit} more characters cut: tool output is capped at {limit}]"


# ---- running ------------------------------------------------------------------------------------------------
async def run_in_thread(fn: Callable, /, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` in a daemon thread of its own, awaited. Unlike ``asyncio.to_thread`` (the loop's
    default executor), a call that never returns blocks neither ``asyncio.run``'s exit, which joins that
    executor's threads, nor the interpreter's, nor other tools queued behind a full executor. A timed-out call
    cannot be stopped: its thread runs on until the function returns (docs/agents.md says so)."""
    loop = asyncio.get_running_loop()
    future = loop.create_future()
    context = contextvars.copy_context()

    def settle(result: Any, error: BaseException | None) -> None:
        if future.done():  # cancelled: the caller timed out
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    def work() -> None:
        try:
            result, error = context.run(fn, *args, **kwargs), None
        except BaseException as exc:  # handed to the awaiting side, which decides
            result, error = None, _plain(exc)
        try:
            loop.call_soon_threadsafe(settle, result, error)
        except RuntimeError:  # the loop is closed: nobody waits for this call any more
            pass

    threading.Thread(target=work, daemon=True, name=f"kitae-tool-{_name_of(fn)}").start()
    return await future


async def invoke(fn: Callable, arguments: dict) -> Any:
    """Call `fn` with `arguments`: awaited when it is async (or returns an awaitable), in a thread when sync."""
    try:
        if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None)):
            return await fn(**arguments)
        result = await run_in_thread(fn, **arguments)
        return await result if inspect.isawaitable(result) else result
    except (SystemExit, KeyboardInterrupt) as exc:
        raise _plain(exc) from None


def _plain(exc: BaseException) -> BaseException:
    """A tool's sys.exit() (or KeyboardInterrupt) as an ordinary exception: asyncio re-raises those two out of
    the event loop, which would end every episode and the run, not just the call."""
    if isinstance(exc, (SystemExit, KeyboardInterrupt)):
        return ToolError(f"the tool raised {type(exc).__name__}({exc})")
    return exc


def argument_problem(tool: Tool, arguments: Any) -> str | None:
    """Why `arguments` cannot be passed to `tool` (not an object, a missing required or an unknown argument),
    or None when they fit its signature and its schema's required list."""
    if not isinstance(arguments, dict):
        return f"the arguments of '{tool.name}' are not a JSON object: {str(arguments)[:200]!r}"
    parameters = tool.schema.get("function", {}).get("parameters", {})
    missing = [name for name in parameters.get("required", []) if name not in arguments]
    if missing:
        takes = ", ".join(parameters.get("properties", {})) or "none"
        return f"'{tool.name}' is missing the required argument(s) {', '.join(missing)} (its arguments: {takes})"
    try:
        inspect.signature(tool.fn).bind(**arguments)
    except TypeError as exc:
        return f"bad arguments for '{tool.name}': {exc}"
    except ValueError:  # no signature to check (a builtin): the call itself will tell
        pass
    return None


def describe_exception(exc: BaseException) -> str:
    """An exception as the model reads it: a ToolError's or KitaeError's message as it is (they are written for
    the reader: an MCP server's refusal, a failed HTTP tool); any other as ``Type: message``."""
    if isinstance(exc, (ToolError, KitaeError)) and str(exc):
        return str(exc)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


class ToolBox:
    """The tools of ONE episode: its environment instance (if any) + the run's shared tools (functions, python,
    http, mcp). Tool output is untrusted text: capped at max_result_chars."""

    def __init__(self, tools: list[Tool], env: Any = None, *, rollout_id: str = "", env_tools: set[str] = frozenset(),
                 timeout_s: float = DEFAULT_TIMEOUT_S, max_result_chars: int = DEFAULT_MAX_RESULT_CHARS,
                 limit: Callable[[], asyncio.Semaphore] | None = None):
        self.tools = {tool.name: tool for tool in tools}
        self.env, self.rollout_id, self.env_tools = env, rollout_id, set(env_tools)
        self.timeout_s, self.max_result_chars = timeout_s, max_result_chars
        self._limit = limit or _unlimited
        self._env_lock: asyncio.Lock | None = None

    @property
    def schemas(self) -> list[dict]:
        return [tool.schema for tool in self.tools.values()]

    async def call(self, call: ToolCall) -> ToolCall:
        """Fill ``call.result`` or ``call.error``, and ``call.seconds`` (the tool's own time, not the wait for a
        slot under the run's cap). Never raises: an unknown tool, bad arguments, the tool's exception and a
        timeout become ``call.error``."""
        tool = self.tools.get(call.name)
        arguments = {} if call.arguments is None else call.arguments  # a call that gave none (Llama 3 may omit them)
        if tool is None:
            call.seconds = 0.0
            return call.fail("unknown_tool", self._unknown(call.name))
        if (problem := argument_problem(tool, arguments)) is not None:
            call.seconds = 0.0
            return call.fail("bad_arguments", problem)
        # One environment instance's calls one at a time, in order (its methods need not be thread-safe); the
        # slot under the run's cap is taken after that turn comes, so a queued call holds none.
        async with self._serial(tool), self._limit():
            start = time.perf_counter()
            try:
                call.result, call.error, call.error_kind = await self._run(tool, arguments), None, None
            except Exception as exc:  # noqa: BLE001 - whatever the tool did, the episode goes on
                kind, message = self._failure(tool, exc)
                call.fail(kind, cap(message, self.max_result_chars))
            finally:
                call.seconds = time.perf_counter() - start
        return call

    async def _run(self, tool: Tool, arguments: dict) -> str:
        timeout = tool.timeout_s if tool.timeout_s is not None else self.timeout_s
        token = ROLLOUT_ID.set(self.rollout_id)
        try:
            value = await asyncio.wait_for(invoke(tool.fn, arguments), timeout)
        finally:
            ROLLOUT_ID.reset(token)
        return cap(to_text(value), self.max_result_chars)

    def _failure(self, tool: Tool, exc: BaseException) -> tuple[str, str]:
        """(the call's error kind, its message) for what the tool raised."""
        if isinstance(exc, TimeoutError) and isinstance(exc.__cause__, asyncio.CancelledError):  # wait_for's own
            timeout = tool.timeout_s if tool.timeout_s is not None else self.timeout_s
            return "timeout", f"timeout after {timeout:g} s"
        return (exc.error_kind if isinstance(exc, ToolError) else "failed"), describe_exception(exc)

    def _unknown(self, name: str) -> str:
        hint = closest(name, list(self.tools))
        offered = ", ".join(self.tools) or "none"
        return f"unknown tool '{name}'" + (f"; did you mean '{hint}'?" if hint else "") + f" (tools: {offered})"

    def _serial(self, tool: Tool) -> Any:
        """The environment's lock for its own tools; nothing for the shared ones."""
        if tool.name not in self.env_tools:
            return contextlib.nullcontext()
        if self._env_lock is None:
            self._env_lock = asyncio.Lock()
        return self._env_lock

    async def reset(self, row: dict) -> str | None:
        """``env.reset(**row)`` (TRL passes every column of the row as a keyword; a reset without ``**kwargs``
        gets the columns it names); None or the text to append to the last user message. No environment: None."""
        if self.env is None:
            return None
        observation = await invoke(self.env.reset, reset_arguments(self.env, row))
        return None if observation is None else to_text(observation)

    async def reward(self) -> float | None:
        """``env.get_reward()`` (sync or async) when the environment has one, else None. A KitaeError naming the
        class when it raises or gives something other than a number."""
        method = getattr(self.env, "get_reward", None) if self.env is not None else None
        if method is None:
            return None
        name = f"environment {type(self.env).__name__}.get_reward()"
        try:
            value = await invoke(method, {})
        except Exception as exc:  # noqa: BLE001 - the user's code: say whose it is
            raise KitaeError(f"{name} raised {describe_exception(exc)}") from exc
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise KitaeError(f"{name} returned {value!r}: it must return a finite number (or None to abstain)")
        return float(value)

    async def close(self) -> None:
        """The episode is over: no more calls. An environment's own ``close()`` is NOT called: in TRL's contract a
        public method is a tool ("close the door"), so the instance is dropped for the garbage collector instead."""
        self.tools = {}
        self.env = None


def reset_arguments(env: Any, row: dict) -> dict:
    """The keywords ``env.reset`` gets from `row`: all of them when it takes ``**kwargs`` (TRL's contract), else
    the columns it names; a KitaeError when a required one is missing from the row."""
    signature = inspect.signature(env.reset)
    params = signature.parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return dict(row)
    named = {p.name: p for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    missing = [name for name, p in named.items() if p.default is p.empty and name not in row]
    if missing:
        raise KitaeError(f"environment {type(env).__name__}.reset() needs the row field(s) {', '.join(missing)}, "
                         f"which the row lacks (fields: {', '.join(row) or 'none'}); add them to the dataset, give "
                         "them defaults, or take **kwargs as TRL's environments do")
    return {name: value for name, value in row.items() if name in named}


def _unlimited() -> asyncio.Semaphore:
    return asyncio.Semaphore(1 << 30)


# ---- the run's set ------------------------------------------------------------------------------------------
class Tools(ReportsStats):
    """The run's tool set, built once from the `environment:` config: makes a ToolBox per episode; holds the
    per-run concurrency cap (a semaphore over all tool calls), the shared tools (functions, python, HTTP) and
    the sources (the MCP sessions, open between start and close)."""

    def __init__(self, *, factory: Callable[[], Any] | None = None, tools: list[Tool] = (),
                 sources: list[ToolSource] = (), tool_timeout_s: float = DEFAULT_TIMEOUT_S,
                 max_result_chars: int = DEFAULT_MAX_RESULT_CHARS,
                 max_concurrent_tools: int = DEFAULT_MAX_CONCURRENT_TOOLS, path: str = "environment"):
        self.factory, self.path = factory, path
        self.shared = list(tools)
        self.listed: list[Tool] = []  # the sources' tools, while started
        self.sources = list(sources)
        self.tool_timeout_s, self.max_result_chars = tool_timeout_s, max_result_chars
        self.max_concurrent_tools = max_concurrent_tools
        self._caps: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # event loop -> Semaphore
        self._started = False
        self.environment_name: str | None = None  # the class name: the reward component of get_reward()
        self.has_reward = False
        self._env_tool_names: list[str] = []
        self._env_schemas: list[dict] = []
        if factory is not None:
            self._probe(factory)
        _check_unique(self._env_tool_names + [t.name for t in self.shared], path)

    @classmethod
    def from_config(cls, cfg: Any, path: str = "environment") -> "Tools":
        """From an ``environment:`` config (any object with its attributes: factory, tools, python, http_tools,
        mcp_servers, tool_timeout_s, max_result_chars, max_concurrent_tools)."""
        timeout = _positive(_setting(cfg, "tool_timeout_s", DEFAULT_TIMEOUT_S), f"{path}.tool_timeout_s")
        max_chars = int(_positive(_setting(cfg, "max_result_chars", DEFAULT_MAX_RESULT_CHARS),
                                  f"{path}.max_result_chars"))
        concurrent = int(_positive(_setting(cfg, "max_concurrent_tools", DEFAULT_MAX_CONCURRENT_TOOLS),
                                   f"{path}.max_concurrent_tools"))
        factory = _setting(cfg, "factory", None)
        factory = load_factory(factory, f"{path}.factory") if factory is not None else None
        shared = [_function(spec, f"{path}.tools[{i}]") for i, spec in enumerate(_setting(cfg, "tools", None) or [])]
        if _setting(cfg, "python", False):
            shared += environment_tools(ENVIRONMENTS.get("python", f"{path}.python")(), f"{path}.python")
        http_specs = _setting(cfg, "http_tools", None) or []
        make_http = TOOL_KINDS.get("http", f"{path}.http_tools") if http_specs else None
        shared += [make_http(spec, f"{path}.http_tools[{i}]", default_timeout_s=timeout)
                   for i, spec in enumerate(http_specs)]
        sources = _mcp_sources(_setting(cfg, "mcp_servers", None) or [], f"{path}.mcp_servers")
        return cls(factory=factory, tools=shared, sources=sources, tool_timeout_s=timeout,
                   max_result_chars=max_chars, max_concurrent_tools=concurrent, path=path)

    def _probe(self, factory: Callable[[], Any]) -> None:
        """Make one instance, as TRL does, to check the contract and read its tools' schemas before any episode."""
        path = f"{self.path}.factory"
        try:
            env = factory()
        except KitaeError:  # a built-in's own message (the python tool without bubblewrap)
            raise
        except Exception as exc:  # noqa: BLE001 - the user's constructor: say whose it is
            raise ConfigError(path, f"{_qualified(factory)}() raised {describe_exception(exc)}; the factory is "
                              "called with no arguments, once per episode") from exc
        if not callable(getattr(env, "reset", None)):
            raise ConfigError(path, f"the environment {type(env).__name__} has no reset() method: TRL's contract "
                              "asks for reset(self, **kwargs) -> str | None (the row's fields in, None or text "
                              "to append to the last user message out)")
        self._env_schemas = [tool.schema for tool in environment_tools(env, path)]
        self._env_tool_names = [schema["function"]["name"] for schema in self._env_schemas]
        self.environment_name = type(env).__name__
        self.has_reward = callable(getattr(env, "get_reward", None))

    def _cap(self) -> asyncio.Semaphore:
        """The per-run cap, one semaphore per event loop (a run may drive episodes from more than one loop)."""
        loop = asyncio.get_running_loop()
        if loop not in self._caps:
            self._caps[loop] = asyncio.Semaphore(self.max_concurrent_tools)
        return self._caps[loop]

    @property
    def schemas(self) -> list[dict]:
        """The schemas every episode is offered: the environment's (from the probe), the shared tools', then
        those the sources listed (MCP: only while started)."""
        return self._env_schemas + [tool.schema for tool in self.shared + self.listed]

    def toolbox(self, rollout_id: str) -> ToolBox:
        """The tools of one episode: a new environment instance from the factory (if any) and the shared tools."""
        env = self.factory() if self.factory is not None else None
        own = environment_tools(env, f"{self.path}.factory") if env is not None else []
        return ToolBox(own + self.shared + self.listed, env, rollout_id=rollout_id, env_tools={t.name for t in own},
                       timeout_s=self.tool_timeout_s, max_result_chars=self.max_result_chars, limit=self._cap)

    async def start(self) -> None:
        """List the tools of every source (MCP servers); idempotent."""
        if self._started:
            return
        listed, started = [], []
        try:
            for source in self.sources:
                listed += await source.start()
                started.append(source)
            _check_unique(self._env_tool_names + [t.name for t in self.shared + listed], self.path)
        except BaseException:  # leave no server running behind a refused start
            for source in started:
                await source.close()
            raise
        self.listed = listed
        self._started = True

    def take_stats(self) -> dict[str, float]:
        """The step's metrics of the sources that report some (MCP: ``agent/mcp/...``); {} without such sources
        (kitae.rollout.base.ReportsStats, forwarded by kitae.agents.engine.AgentEngine)."""
        stats: dict[str, float] = {}
        for source in self.sources:
            if isinstance(source, ReportsStats):
                stats.update(source.take_stats())
        return stats

    async def close(self) -> None:
        """Release every source (MCP sessions); idempotent."""
        if not self._started:
            return
        self.listed, self._started = [], False
        failures = []
        for source in self.sources:  # every one, also after one fails to close
            try:
                await source.close()
            except Exception as exc:  # noqa: BLE001 - raised below, once the others are closed
                failures.append(exc)
        if failures:
            raise failures[0]


def _setting(cfg: Any, name: str, default: Any) -> Any:
    value = cfg.get(name, default) if isinstance(cfg, dict) else getattr(cfg, name, default)
    return default if value is None else value


def _positive(value: Any, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigError(path, f"must be a positive number, got {value!r}")
    return value


def _function(spec: Any, path: str) -> Tool:
    """A ``tools:`` entry: "module:function" (or, from Python, the function itself)."""
    fn = load_target(spec, path) if isinstance(spec, str) else spec
    if not callable(fn):
        raise ConfigError(path, f"{spec!r} is not a function; expected 'module:function'")
    return function_tool(fn, path)


def _mcp_sources(specs: list, path: str) -> list[ToolSource]:
    """The run's MCP servers as one source (kitae.agents.mcp.McpTools holds their sessions; it reads each entry,
    a kitae.agents.mcp.McpServerSpec or its mapping)."""
    if not specs:
        return []
    return [McpSource(TOOL_KINDS.get("mcp", path)(list(specs), path))]


class McpSource(ReportsStats):
    """MCP servers as a ToolSource: ``servers`` is a kitae.agents.mcp.McpTools (async start/close, schemas,
    functions(): {name: async function(**arguments) -> text}, timeout_s(name), counters), whose sessions live on
    a loop of their own.

    A tool's timeout is its server's ``timeout_s`` (plus MCP_TIMEOUT_MARGIN_S, so that the server's own timeout,
    whose message names the server, comes first), not the run's ``tool_timeout_s``. :meth:`take_stats` gives the
    step's ``agent/mcp/...`` metrics (kitae.rollout.base.ReportsStats, through the agent engine)."""

    def __init__(self, servers: Any):
        self.servers = servers
        self._taken: dict[str, int] = {}

    async def start(self) -> list[Tool]:
        await self.servers.start()
        functions = self.servers.functions()
        return [Tool(name, s, functions[name], timeout_s=self.servers.timeout_s(name) + MCP_TIMEOUT_MARGIN_S)
                for s in self.servers.schemas for name in [s["function"]["name"]]]

    async def close(self) -> None:
        await self.servers.close()

    def take_stats(self) -> dict[str, float]:
        """The calls, tool errors, timeouts and connection errors since the last take (``agent/mcp/calls`` ...),
        and ``agent/mcp/servers_down``: the servers gone so far in the run (a level, not a count per step)."""
        now = self.servers.counters.as_dict()
        stats = {f"agent/mcp/{k}": float(v - self._taken.get(k, 0)) for k, v in now.items() if k != "servers_down"}
        self._taken = now
        return {**stats, "agent/mcp/servers_down": float(now.get("servers_down", 0))}


def load_factory(spec: Any, path: str) -> Callable[[], Any]:
    """The factory an ``environment.factory`` names: a built-in's name, a built-in with its settings ({type: NAME,
    ...}), "module:Class", or (from Python) a class or function; ConfigError at `path` otherwise."""
    if callable(spec):
        return spec
    if isinstance(spec, dict):
        return EnvironmentSettings.read(spec, path).factory(path)
    if not isinstance(spec, str) or not spec:
        raise ConfigError(path, f"expected a built-in environment's name or 'module:Class', got {spec!r}")
    if ":" in spec:
        factory = load_target(spec, path)
    elif spec in ENVIRONMENTS:
        factory = ENVIRONMENTS.get(spec, path)
    else:
        raise ConfigError(path, unknown_name_message("environment", spec, ENVIRONMENTS.names())
                          + "; or name your own class as 'module:Class'")
    if not callable(factory):
        raise ConfigError(path, f"{spec!r} is not a class or function that makes an environment")
    return factory


def _check_unique(names: list[str], path: str) -> None:
    seen = set()
    for name in names:
        if name in seen:
            raise ConfigError(path, f"two tools are named '{name}': the model calls tools by name, so each name "
                              "must be offered once (rename one, or drop one of the sources)")
        seen.add(name)
