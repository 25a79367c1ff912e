"""ToolBox.call never raises and never hangs: timeouts, exceptions, unknown tools, bad arguments, capped output,
the run's concurrency cap, one environment's calls in order, the rollout id a tool sees."""

from __future__ import annotations

import asyncio
import threading

import pytest

from kitae.agents.tools import Tool, ToolBox, ToolError, Tools, current_rollout_id, function_tool
from kitae.rollout.trajectory import ToolCall

RELEASE = threading.Event()  # what a hung sync tool waits for; set when the module's tests are done


@pytest.fixture(scope="module", autouse=True)
def release_hung_tools():
    yield
    RELEASE.set()


def hang(x: int) -> int:
    """Never return (until the tests end).

    Args:
        x: Anything.
    """
    RELEASE.wait(120)
    return x


async def ahang(x: int) -> int:
    """Never return.

    Args:
        x: Anything.
    """
    await asyncio.sleep(3600)
    return x


def fail(x: int) -> int:
    """Raise.

    Args:
        x: Anything.
    """
    raise ZeroDivisionError(f"cannot divide {x} by zero")


async def afail(x: int) -> int:
    """Raise, asynchronously.

    Args:
        x: Anything.
    """
    raise ToolError("the model reads exactly this")


def exits(x: int) -> int:
    """Call sys.exit.

    Args:
        x: Anything.
    """
    raise SystemExit(3)


def times_out_itself(x: int) -> int:
    """Raise a bare TimeoutError.

    Args:
        x: Anything.
    """
    raise TimeoutError()


async def aexits(x: int) -> int:
    """Call sys.exit in an async tool (asyncio re-raises SystemExit out of the event loop).

    Args:
        x: Anything.
    """
    raise SystemExit(4)


def big(n: int) -> str:
    """Return n characters.

    Args:
        n: How many.
    """
    return "x" * n


def add(a: int, b: int) -> int:
    """Add.

    Args:
        a: One.
        b: Two.
    """
    return a + b


def whoami() -> str:
    """The rollout id of the episode calling."""
    return f"sync:{current_rollout_id()}"


async def awhoami() -> str:
    """The rollout id of the episode calling."""
    return f"async:{current_rollout_id()}"


def box(*fns, timeout_s=10.0, max_result_chars=4000, **kw) -> ToolBox:
    return ToolBox([function_tool(f) for f in fns], timeout_s=timeout_s, max_result_chars=max_result_chars, **kw)


def call(toolbox: ToolBox, name: str, arguments) -> ToolCall:
    return asyncio.run(toolbox.call(ToolCall(name, arguments)))


@pytest.mark.parametrize("fn", [hang, ahang], ids=["sync", "async"])
def test_a_tool_that_never_returns_is_a_timeout_error(fn):
    done = call(box(fn, timeout_s=0.2), fn.__name__, {"x": 1})
    assert done.error == "timeout after 0.2 s" and done.result is None and done.error_kind == "timeout"
    assert done.seconds > 0


def test_a_tools_own_timeout_wins_over_the_runs():
    tool = Tool("hang", function_tool(hang).schema, hang, timeout_s=0.1)
    done = asyncio.run(ToolBox([tool], timeout_s=60).call(ToolCall("hang", {"x": 1})))
    assert done.error == "timeout after 0.1 s" and done.error_kind == "timeout"


def test_a_hung_sync_tool_does_not_keep_asyncio_run_from_returning():
    """asyncio.to_thread would run the tool on the loop's default executor, whose threads asyncio.run joins on
    the way out: one hung tool would hang the caller. The tool's own daemon thread is left behind instead."""
    finished = threading.Event()

    def episode():
        call(box(hang, timeout_s=0.1), "hang", {"x": 1})
        finished.set()

    worker = threading.Thread(target=episode, daemon=True)
    worker.start()
    assert finished.wait(60), "asyncio.run waited for a timed-out tool's thread"


@pytest.mark.parametrize("fn, error", [
    (fail, "ZeroDivisionError: cannot divide 1 by zero"),       # a tool's exception: type and message
    (afail, "the model reads exactly this"),                    # ToolError: its message as it is
    (times_out_itself, "TimeoutError"),                          # the tool's own TimeoutError is not the call's
    # timeout: it failed
    (exits, "the tool raised SystemExit(3)"),                   # even sys.exit in a tool ends only the call
    (aexits, "the tool raised SystemExit(4)"),
])
def test_a_tools_exception_is_the_calls_error(fn, error):
    done = call(box(fn), fn.__name__, {"x": 1})
    assert done.error == error and done.result is None and not done.ok and done.error_kind == "failed"


@pytest.mark.parametrize("name, arguments, error, kind", [
    ("ad", {"a": 1, "b": 2}, "unknown tool 'ad'; did you mean 'add'? (tools: add, big)", "unknown_tool"),
    ("search", {}, "unknown tool 'search' (tools: add, big)", "unknown_tool"),
    ("add", {"a": 1}, "'add' is missing the required argument(s) b (its arguments: a, b)", "bad_arguments"),
    ("add", {"a": 1, "b": 2, "c": 3}, "bad arguments for 'add': got an unexpected keyword argument 'c'",
     "bad_arguments"),
    ("add", '{"a": 1, "b"', "the arguments of 'add' are not a JSON object: '{\"a\": 1, \"b\"'",
     "bad_arguments"),  # raw, unparsed
    ("add", [1, 2], "the arguments of 'add' are not a JSON object: '[1, 2]'", "bad_arguments"),
    ("add", None, "'add' is missing the required argument(s) a, b (its arguments: a, b)", "bad_arguments"),  # {}
])
def test_calls_that_cannot_be_made_are_errors(name, arguments, error, kind):
    done = call(box(add, big), name, arguments)
    assert done.error == error and done.result is None and done.seconds == 0.0 and done.error_kind == kind


def test_a_call_that_ran_has_no_error_kind_even_after_a_failed_try():
    """A ToolCall reused after a failure (a retry) carries no stale kind once it ran."""
    done = call(box(add, big), "add", {"a": 1})
    assert done.error_kind == "bad_arguments"
    done.arguments = {"a": 1, "b": 2}
    again = asyncio.run(box(add, big).call(done))
    assert (again.result, again.error, again.error_kind) == ("3", None, None)


def test_output_is_capped_with_a_marker():
    done = call(box(big, max_result_chars=50), "big", {"n": 1000})
    assert done.result == "x" * 50 + "\n[... 950 more characters cut: tool output is capped at 50]"
    assert call(box(big, max_result_chars=50), "big", {"n": 50}).result == "x" * 50


def test_a_long_error_is_capped_too():
    def shout(n: int) -> str:
        """Raise a long message.

        Args:
            n: Its length.
        """
        raise ToolError("e" * n)

    done = call(box(shout, max_result_chars=20), "shout", {"n": 500})
    assert done.error.startswith("e" * 20 + "\n[... 480 more characters cut")


def test_results_become_text():
    def values(kind: str):
        """A value of a kind.

        Args:
            kind: Which.
        """
        return {"int": 3, "none": None, "list": [1, "a"], "dict": {"é": 1}, "float": 0.5}[kind]

    results = [call(box(values), "values", {"kind": k}).result for k in ("int", "none", "list", "dict", "float")]
    assert results == ["3", "None", '[1, "a"]', '{"é": 1}', "0.5"]


@pytest.mark.parametrize("fn", [whoami, awhoami], ids=["sync", "async"])
def test_a_tool_sees_its_episodes_rollout_id(fn):
    done = call(box(fn, rollout_id="step3-row1-sample0"), fn.__name__, {})
    assert done.result.endswith(":step3-row1-sample0")


# ---- the run's cap ---------------------------------------------------------------------------------------------
class Counter:
    """Counts the calls in flight inside the tool itself, and the most there ever were at once."""

    def __init__(self):
        self.lock = threading.Lock()
        self.now = self.peak = 0

    def enter(self):
        with self.lock:
            self.now += 1
            self.peak = max(self.peak, self.now)

    def leave(self):
        with self.lock:
            self.now -= 1


def test_the_concurrency_cap_holds_across_episodes_async_tools():
    counter = Counter()

    async def work(x: int) -> int:
        """Work a while.

        Args:
            x: Anything.
        """
        counter.enter()
        await asyncio.sleep(0.01)  # every call started before any ends: all 12 would be in flight uncapped
        counter.leave()
        return x

    tools = Tools(tools=[function_tool(work)], max_concurrent_tools=3)

    async def many():
        boxes = [tools.toolbox(f"r{i}") for i in range(4)]
        return await asyncio.gather(*(b.call(ToolCall("work", {"x": k})) for b in boxes for k in range(3)))

    calls = asyncio.run(many())
    assert all(c.ok for c in calls)
    assert counter.peak == 3


def test_the_concurrency_cap_holds_for_sync_tools():
    counter = Counter()
    together = threading.Barrier(2, timeout=30)  # two calls meet inside the tool: the cap lets two in at once

    def work(x: int) -> int:
        """Work a while.

        Args:
            x: Anything.
        """
        counter.enter()
        together.wait()
        counter.leave()
        return x

    tools = Tools(tools=[function_tool(work)], max_concurrent_tools=2, tool_timeout_s=60)

    async def many():
        boxes = [tools.toolbox(f"r{i}") for i in range(3)]
        return await asyncio.gather(*(b.call(ToolCall("work", {"x": k})) for b in boxes for k in range(2)))

    calls = asyncio.run(many())
    assert all(c.ok for c in calls), [c.error for c in calls]
    assert counter.peak == 2


def test_one_environments_calls_run_one_at_a_time_in_order():
    """Calls of one turn run concurrently, but an environment instance's methods need not be thread-safe."""

    class Stack:
        def reset(self, **kwargs):
            self.items, self.counter = [], Counter()

        def push(self, item: str) -> str:
            """Push an item.

            Args:
                item: The item.
            """
            self.counter.enter()
            self.items.append(item)
            self.counter.leave()
            return ",".join(self.items)

    tools = Tools(factory=Stack, max_concurrent_tools=8)

    async def turn():
        toolbox = tools.toolbox("r")
        await toolbox.reset({})
        calls = await asyncio.gather(*(toolbox.call(ToolCall("push", {"item": str(k)})) for k in range(6)))
        return toolbox.env, calls

    env, calls = asyncio.run(turn())
    assert env.items == [str(k) for k in range(6)] and env.counter.peak == 1
    assert calls[-1].result == "0,1,2,3,4,5"


def test_the_cap_works_on_a_second_event_loop():
    tools = Tools(tools=[function_tool(add)], max_concurrent_tools=1)
    for _ in range(2):  # a semaphore bound to the first loop would raise on the second
        assert asyncio.run(tools.toolbox("r").call(ToolCall("add", {"a": 1, "b": 2}))).result == "3"


def test_an_environment_call_waiting_its_turn_is_not_timed_out_for_the_wait():
    """Eight calls of one turn take 8 x 0.2 s one after another; each has 1 s of its own."""

    class Slow:
        def reset(self, **kwargs):
            return None

        async def wait(self, k: int) -> int:
            """Wait a while.

            Args:
                k: Which call.
            """
            await asyncio.sleep(0.2)
            return k

    tools = Tools(factory=Slow, tool_timeout_s=1.0)

    async def turn():
        toolbox = tools.toolbox("r")
        return await asyncio.gather(*(toolbox.call(ToolCall("wait", {"k": k})) for k in range(8)))

    calls = asyncio.run(turn())
    assert [c.error for c in calls] == [None] * 8 and [c.result for c in calls] == [str(k) for k in range(8)]


def test_a_call_waiting_for_its_environment_holds_no_slot_of_the_cap():
    """Episode A's first call blocks until episode B's tool has run; A's second call queues behind the first.
    With a cap of 2, B must get a slot: a queued call that held one would leave B waiting, and A timing out."""
    opened = asyncio.Event()

    class Gate:
        def reset(self, **kwargs):
            return None

        async def enter(self, k: int) -> int:
            """Wait for the gate.

            Args:
                k: Which call.
            """
            await opened.wait()
            return k

    async def open_gate() -> str:
        """Open the gate."""
        opened.set()
        return "open"

    tools = Tools(factory=Gate, tools=[function_tool(open_gate)], max_concurrent_tools=2, tool_timeout_s=5)

    async def two_episodes():
        a, b = tools.toolbox("a"), tools.toolbox("b")
        first, second = a.call(ToolCall("enter", {"k": 1})), a.call(ToolCall("enter", {"k": 2}))
        return await asyncio.gather(first, second, b.call(ToolCall("open_gate", {})))

    calls = asyncio.run(two_episodes())
    assert [c.error for c in calls] == [None, None, None] and calls[2].result == "open"
