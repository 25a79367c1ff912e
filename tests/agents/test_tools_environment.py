"""The environment contract (TRL's environment_factory) and plain function tools: schemas, reset, reward, errors."""

from __future__ import annotations

import asyncio

import pytest

from kitae.agents.tools import Tool, Tools, ToolBox, environment_tools, function_tool
from kitae.errors import ConfigError, KitaeError
from kitae.rollout.trajectory import ToolCall


# ---- an environment written as TRL's docs write one (GRPOTrainer's environment_factory) ----------------------
class CounterEnv:
    def __init__(self):
        self.counter = 0
        self.target = 0

    def reset(self, **kwargs) -> str | None:
        self.counter = 0
        self.target = int(kwargs["target"])
        return f"The counter starts at 0. Reach {self.target}."

    def increment(self, step: int) -> int:
        """
        Increment the internal counter.

        Args:
            step: Value to add to the counter.

        Returns:
            The updated counter value.
        """
        self.counter += step
        return self.counter

    def read(self) -> str:
        """
        Read the counter.

        Returns:
            The counter's value, as text.
        """
        return f"counter={self.counter}"

    def get_reward(self) -> float:
        return 1.0 if self.counter == self.target else 0.0

    def _helper(self) -> None:  # private: never a tool
        pass

    @property
    def doubled(self) -> int:  # a property is not a tool (and is never evaluated while listing tools)
        raise AssertionError("listing tools must not evaluate properties")


class AsyncRewardEnv(CounterEnv):
    async def get_reward(self) -> float:
        await asyncio.sleep(0)
        return float(self.counter)


def run(coro):
    return asyncio.run(coro)


def test_a_trl_environment_runs_unchanged():
    tools = Tools(factory=CounterEnv)
    assert [s["function"]["name"] for s in tools.schemas] == ["increment", "read"]  # not reset/get_reward/_helper
    increment = tools.schemas[0]["function"]
    assert increment["description"] == "Increment the internal counter."
    assert increment["parameters"] == {"type": "object", "required": ["step"],
                                       "properties": {"step": {"type": "integer",
                                                               "description": "Value to add to the counter."}}}
    assert tools.environment_name == "CounterEnv" and tools.has_reward

    async def episode():
        box = tools.toolbox("rollout-1")
        text = await box.reset({"prompt": [{"role": "user", "content": "go"}], "target": 5})
        calls = [await box.call(ToolCall("increment", {"step": 2})), await box.call(ToolCall("increment", {"step": 3})),
                 await box.call(ToolCall("read", {}))]
        return box, text, calls, await box.reward()

    box, text, calls, reward = run(episode())
    assert text == "The counter starts at 0. Reach 5."
    assert [c.result for c in calls] == ["2", "5", "counter=5"] and all(c.ok for c in calls)
    assert reward == 1.0


def test_each_episode_has_its_own_environment_instance():
    tools = Tools(factory=CounterEnv)

    async def two():
        a, b = tools.toolbox("a"), tools.toolbox("b")
        await a.reset({"target": 1})
        await b.reset({"target": 1})
        await a.call(ToolCall("increment", {"step": 1}))
        return await a.reward(), await b.reward()

    assert run(two()) == (1.0, 0.0)


def test_async_get_reward_and_no_get_reward():
    async def reward(factory):
        box = Tools(factory=factory).toolbox("r")
        await box.reset({"target": 0})
        await box.call(ToolCall("increment", {"step": 4}))
        return await box.reward()

    class NoReward:
        def reset(self, **kwargs):
            return None

        def increment(self, step: int) -> int:
            """Add.

            Args:
                step: How much.
            """
            return step

    assert run(reward(AsyncRewardEnv)) == 4.0
    assert run(reward(NoReward)) is None
    assert Tools(factory=NoReward).has_reward is False


def test_reset_gets_the_row_fields_it_names_when_it_takes_no_kwargs():
    class Named:
        def reset(self, target: int, hint: str = "none") -> str:
            return f"{target}/{hint}"

    class Needs:
        def reset(self, secret: str) -> None:
            return None

    assert run(ToolBox([], Named()).reset({"target": 3, "prompt": "p", "other": 1})) == "3/none"
    with pytest.raises(KitaeError, match=r"Needs.reset\(\) needs the row field\(s\) secret.*fields: prompt"):
        run(ToolBox([], Needs()).reset({"prompt": "p"}))
    assert run(ToolBox([]).reset({"prompt": "p"})) is None  # no environment: nothing to append


def test_get_reward_that_raises_or_returns_a_non_number_names_the_class():
    class Broken(CounterEnv):
        def get_reward(self) -> float:
            raise ValueError("no state")

    class Wordy(CounterEnv):
        def get_reward(self):
            return "good"

    with pytest.raises(KitaeError, match=r"Broken.get_reward\(\) raised ValueError: no state"):
        run(ToolBox([], Broken()).reward())
    with pytest.raises(KitaeError, match=r"Wordy.get_reward\(\) returned 'good'"):
        run(ToolBox([], Wordy()).reward())


# ---- plain functions -----------------------------------------------------------------------------------------
def lookup(city: str, units: str = "metric") -> dict:
    """Look up the weather of a city.

    Args:
        city: The city's name.
        units: metric or imperial.
    """
    return {"city": city, "temperature": 21, "units": units}


async def slow_echo(text: str) -> str:
    """Echo text after a pause.

    Args:
        text: What to echo.
    """
    await asyncio.sleep(0)
    return text


def test_plain_function_tools_sync_and_async():
    tools = Tools(tools=[function_tool(lookup), function_tool(slow_echo)])
    assert tools.schemas[0]["function"]["parameters"]["required"] == ["city"]

    async def calls():
        box = tools.toolbox("r")
        return [await box.call(ToolCall("lookup", {"city": "Oslo"})), await box.call(ToolCall("slow_echo", {"text": "hi"}))]

    weather, echo = run(calls())
    assert weather.result == '{"city": "Oslo", "temperature": 21, "units": "metric"}'  # a dict comes back as JSON
    assert echo.result == "hi"


def test_tools_from_config_by_module_path():
    tools = Tools.from_config({"factory": "tests.agents.test_tools_environment:CounterEnv",
                               "tools": ["tests.agents.test_tools_environment:lookup"], "tool_timeout_s": 3})
    assert [s["function"]["name"] for s in tools.schemas] == ["increment", "read", "lookup"]
    assert tools.tool_timeout_s == 3


class Settings:  # the runner's config class is an object with these attributes, not a dict
    factory = "calculator"
    tools = None
    python = False
    http_tools = None
    mcp_servers = None
    tool_timeout_s = 2.5
    max_result_chars = 100
    max_concurrent_tools = 3


def test_tools_from_a_config_object():
    tools = Tools.from_config(Settings())
    assert [s["function"]["name"] for s in tools.schemas] == ["calculator"]
    assert (tools.tool_timeout_s, tools.max_result_chars, tools.max_concurrent_tools) == (2.5, 100, 3)


# ---- what is refused, with what message ------------------------------------------------------------------------
def no_docstring(x: int) -> int:
    return x


def no_hints(x):
    """Double it.

    Args:
        x: The number.
    """
    return 2 * x


def undocumented_argument(x: int) -> int:
    """Only a description."""
    return x


class EnvWithUndocumentedMethod:
    def reset(self, **kwargs):
        return None

    def move(self, direction: str) -> str:
        return direction


@pytest.mark.parametrize("fn, says", [
    (no_docstring, "no docstring"),                       # the function's name and the fix
    (no_hints, "missing a type hint"),
    (undocumented_argument, "no description for the argument 'x'"),
])
def test_a_function_tool_without_docstring_or_hints_is_a_config_error(fn, says):
    with pytest.raises(ConfigError) as err:
        function_tool(fn, "environment.tools[0]")
    message = str(err.value)
    assert message.startswith("environment.tools[0]: cannot make a tool of tests.agents.test_tools_environment:")
    assert fn.__name__ in message and says in message and "Google-style docstring" in message


def test_an_environment_method_without_docstring_says_how_to_hide_it():
    with pytest.raises(ConfigError, match=r"EnvWithUndocumentedMethod.move.*start its name with '_'"):
        Tools(factory=EnvWithUndocumentedMethod)
    with pytest.raises(ConfigError, match="EnvWithUndocumentedMethod.move"):
        environment_tools(EnvWithUndocumentedMethod())


@pytest.mark.parametrize("config, says", [
    ({"factory": "calculater"}, "environment.factory: unknown environment 'calculater'; did you mean 'calculator'?"),
    ({"factory": "no_such_module:Env"}, "environment.factory: cannot import 'no_such_module:Env'"),
    ({"factory": 3}, "environment.factory: expected a built-in environment's name or 'module:Class'"),
    ({"tools": ["math"]}, "environment.tools[0]: expected 'module:function'"),
    ({"tools": ["math:pi"]}, "environment.tools[0]: 'math:pi' is not a function"),      # not callable
    ({"tool_timeout_s": 0}, "environment.tool_timeout_s: must be a positive number, got 0"),
    ({"max_result_chars": -1}, "environment.max_result_chars: must be a positive number"),
    ({"max_concurrent_tools": "many"}, "environment.max_concurrent_tools: must be a positive number"),
    ({"factory": "calculator", "tools": ["tests.agents.test_tools_environment:Calculator_clash"]},
     "two tools are named 'calculator'"),
    ({"factory": "tests.agents.test_tools_environment:NoReset"}, "has no reset() method"),
    ({"factory": "tests.agents.test_tools_environment:Exploding"}, "Exploding() raised RuntimeError: boom"),
    ({"factory": {"type": "calculator", "cpu_seconds": 8}}, "environment.factory.cpu_seconds: not a setting of "
                                                            "environment 'calculator'; environment python takes it"),
    ({"factory": {"type": "python", "cpu_secs": 8}}, "environment.factory.cpu_secs: not a setting of environment "
                                                     "'python'; did you mean 'cpu_seconds'?"),
    ({"factory": {"type": "python", "memory_mb": 0}}, "environment.factory.memory_mb: must be >= 1"),
])
def test_bad_environment_configs_are_refused_with_the_field(config, says):
    with pytest.raises(ConfigError) as err:
        Tools.from_config(config)
    assert says in str(err.value)


def calculator(expression: str) -> str:
    """A second tool under a taken name.

    Args:
        expression: Anything.
    """
    return expression


Calculator_clash = calculator


class NoReset:
    def step(self, action: str) -> str:
        """Act.

        Args:
            action: The action.
        """
        return action


class Exploding:
    def __init__(self):
        raise RuntimeError("boom")


def test_a_tool_is_a_plain_dataclass():
    tool = function_tool(lookup)
    assert isinstance(tool, Tool) and tool.name == "lookup" and tool.fn is lookup and tool.timeout_s is None


# ---- sources of tools that need a connection (MCP) -------------------------------------------------------------
class ListedSource:
    """A ToolSource (kitae.agents.mcp's shape): lists its tools at start, released at close."""

    def __init__(self, *names):
        self.names, self.starts, self.closes = names, 0, 0

    async def start(self):
        self.starts += 1
        return [Tool(n, {"type": "function", "function": {"name": n, "description": n, "parameters": {
            "type": "object", "properties": {}}}}, self._answer(n)) for n in self.names]

    def _answer(self, name):
        async def answer():
            return f"{name} answered"
        return answer

    async def close(self):
        self.closes += 1


def test_sources_are_listed_at_start_and_closed_once():
    source = ListedSource("remote_search")
    tools = Tools(factory=CounterEnv, sources=[source])

    async def life():
        await tools.start()
        await tools.start()  # idempotent
        done = await tools.toolbox("r").call(ToolCall("remote_search", {}))
        await tools.close()
        await tools.close()
        return done

    done = run(life())
    assert done.result == "remote_search answered"
    assert [s["function"]["name"] for s in tools.schemas] == ["increment", "read"]  # closed: listed no more
    assert (source.starts, source.closes) == (1, 1)

    async def again():  # pre-flight starts and closes the tools, then the run starts them again
        await tools.start()
        names = [s["function"]["name"] for s in tools.schemas]
        await tools.close()
        return names

    assert run(again()) == ["increment", "read", "remote_search"] and (source.starts, source.closes) == (2, 2)


def test_a_source_tool_under_a_taken_name_is_refused_at_start():
    first, clashing = ListedSource("search"), ListedSource("increment")
    tools = Tools(factory=CounterEnv, sources=[first, clashing])
    with pytest.raises(ConfigError, match="two tools are named 'increment'"):
        run(tools.start())
    assert (first.closes, clashing.closes) == (1, 1)  # no server left running behind the refusal


def test_closing_a_toolbox_does_not_call_an_environment_method_named_close():
    """In TRL's contract a public method is a tool, so a method named close() is the model's ("close the door")."""

    class Door(CounterEnv):
        def close(self) -> str:
            """Close the door.

            Returns:
                What happened.
            """
            self.closed = True
            return "closed"

    tools = Tools(factory=Door)
    assert "close" in [s["function"]["name"] for s in tools.schemas]
    box = tools.toolbox("r")
    env = box.env
    run(box.close())
    assert not getattr(env, "closed", False)
    assert run(box.call(ToolCall("read", {}))).error.startswith("unknown tool 'read'")  # closed: nothing to call


def test_a_built_in_environment_declares_its_settings_beside_it_and_the_config_gives_them():
    """The python tool's limits are PythonSettings (kitae/agents/environments.py), registered with it; a config
    names the built-in alone (its defaults) or with settings, which each episode's instance is made with."""
    from kitae.agents.config import EnvironmentConfig
    from kitae.agents.environments import ENVIRONMENTS, PythonSandbox, PythonSettings
    from kitae.agents.tools import load_factory
    from kitae.config import from_dict

    assert ENVIRONMENTS.settings_class("python") is PythonSettings
    assert ENVIRONMENTS.settings_class("calculator") is None
    assert PythonSandbox(sandbox=object()).limits.seconds == PythonSettings().cpu_seconds == 4.0  # one default
    spec = {"type": "python", "cpu_seconds": 8, "memory_mb": 512}
    cfg = from_dict(EnvironmentConfig, {"factory": spec}, "environment")
    factory = load_factory(cfg.factory, "environment.factory")
    limits = factory(sandbox=object()).limits
    assert (limits.seconds, limits.memory_mb, limits.output_kb) == (8.0, 512, 64)
    assert load_factory("python", "environment.factory") is PythonSandbox  # by name: no settings, as before
