"""The ``environment:`` section of a training config: the tools an agent gets and the limits of its episodes.

    environment:
      factory: my_envs:Calculator      # a class (TRL's environment_factory contract) or a built-in's name
      tools: [my_tools:search]         # plain functions (module:function)
      python: false                    # the sandboxed python tool
      http_tools: [{name: lookup, url: "http://127.0.0.1:9000/lookup", description: ..., parameters: {...}}]
      mcp_servers: [{command: [python, server.py]}, {url: "http://127.0.0.1:8765/mcp"}]
      max_turns: 6
      max_tool_calls: 8
      turn_max_new_tokens: 256
      episode_max_tokens: 2048

With it set, every rollout is an episode (kitae.agents.episodes): the model answers, calls tools, reads their
results, and goes on until it answers without a call or a limit cuts it. This module checks the section's shape
(names, URLs, limits); whether the named classes and functions import and the MCP servers answer is pre-flight's
(kitae.agents.engine.check_environment), before the model loads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from kitae.agents.http_tools import HttpToolSpec
from kitae.agents.mcp import McpServerSpec
from kitae.config import setting, short_repr
from kitae.errors import ConfigError

TARGET = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")  # module:attr


@dataclass
class EnvironmentConfig:
    """Agents: tools and an environment the model calls during its rollouts, which become multi-turn episodes
    (docs/agents.md)."""

    factory: str | dict[str, Any] | None = None  # an environment class, module:Class (TRL's environment_factory
    # contract: public methods with type hints and docstrings are the tools, reset(**row), optional get_reward()), a
    # built-in's name (calculator, python), or a built-in with its settings ({type: python, cpu_seconds: 8}); one
    # instance per episode
    tools: list[str] = field(default_factory=list)  # plain tool functions, module:function (schema from type
    # hints and the docstring)
    python: bool = False  # offer the python tool: code runs in kitae's sandbox (the code grader's isolation)
    http_tools: list[HttpToolSpec] = field(default_factory=list)  # HTTP endpoints as tools: {name, url,
    # description, parameters, timeout_s, retries, backoff, max_backoff, api_key_env, headers_env}
    # (kitae.agents.http_tools.HttpToolSpec)
    mcp_servers: list[McpServerSpec] = field(default_factory=list)  # MCP servers: {command: [...]} (stdio) or
    # {url: ...} (streamable HTTP), with env, pass_env, cwd, api_key_env, name, tools, timeout_s, start_timeout_s
    # (kitae.agents.mcp.McpServerSpec)
    max_turns: int = setting(6, minimum=1)  # assistant turns per episode; an episode still calling tools then ends
    # (episode end max_turns)
    max_tool_calls: int = setting(8, minimum=0)  # tool calls per episode; a call past it gets an error result and
    # the episode ends (max_tool_calls)
    turn_max_new_tokens: int = setting(256, minimum=1)  # sampled tokens per turn (sampling.max_new_tokens is not
    # used with an environment)
    episode_max_tokens: int = setting(2048, minimum=1)  # every token after the prompt (sampled, tool results and
    # template tokens); a turn samples at most what is left (episode end episode_max_tokens)
    tool_timeout_s: float = setting(10.0, above=0)  # seconds a tool call may take before it is an error
    max_result_chars: int = setting(4000, minimum=1)  # a tool's result is cut to this many characters (tool output
    # is untrusted text)
    max_concurrent_tools: int = setting(16, minimum=1)  # tool calls running at once over the whole run
    parser: str = "auto"  # the tool-call format: auto (from the chat template), hermes (Qwen2.5, Qwen3, Hermes),
    # llama3_json (Llama 3.1), mistral
    reward_weight: float = 1.0  # weight of the environment's get_reward() as a reward component (named after the
    # class); 0 = logged only

    def validate(self, path: str) -> None:
        if not (self.factory or self.tools or self.python or self.http_tools or self.mcp_servers):
            raise ConfigError(path, "gives the model no tools: set factory (an environment class or a built-in "
                              "such as calculator), tools (module:function), python: true, http_tools or "
                              "mcp_servers; or remove the environment section for single-turn rollouts")
        if self.factory is not None:
            check_factory(self.factory, f"{path}.factory")
        for i, target in enumerate(self.tools):
            if not TARGET.match(target):
                raise ConfigError(f"{path}.tools[{i}]", f"{short_repr(target)} is not module:function, e.g. "
                                  "my_tools:search (the module importable from the working directory)")
        names = [t.name for t in self.http_tools]
        if dup := sorted({n for n in names if names.count(n) > 1}):
            raise ConfigError(f"{path}.http_tools", f"two tools are named {dup[0]!r}; give each its own name")
        if self.turn_max_new_tokens > self.episode_max_tokens:
            raise ConfigError(f"{path}.turn_max_new_tokens", f"is {self.turn_max_new_tokens}, more than "
                              f"episode_max_tokens ({self.episode_max_tokens}), the budget of the whole episode; "
                              "lower it or raise episode_max_tokens")
        check_parser(self.parser, f"{path}.parser")


def builtin_environments() -> list[str] | None:
    """The built-in environments' names, or None while the registry is not there to ask."""
    try:
        from kitae.agents.environments import ENVIRONMENTS
    except ImportError:
        return None
    return sorted(ENVIRONMENTS.names())


def check_factory(factory: str | dict, path: str) -> None:
    """``factory`` is module:Class, a built-in environment's name, or one with its settings (importing a class is
    pre-flight's)."""
    if isinstance(factory, dict):
        from kitae.agents.tools import EnvironmentSettings

        EnvironmentSettings.read(factory, path)
        return
    if ":" in factory:
        if not TARGET.match(factory):
            raise ConfigError(path, f"{short_repr(factory)} is not module:Class, e.g. my_envs:Calculator")
        return
    builtins = builtin_environments()
    if builtins is not None and factory not in builtins:
        from kitae.registry import unknown_name_message

        raise ConfigError(path, unknown_name_message("environment", factory, builtins) + "; or give a class as "
                          "module:Class")


def check_parser(parser: str, path: str) -> None:
    if parser == "auto":
        return
    try:
        from kitae.agents.parsers import PARSERS
    except ImportError:
        return
    if parser not in PARSERS.names():
        from kitae.registry import unknown_name_message

        raise ConfigError(path, unknown_name_message("tool call format", parser, ["auto", *PARSERS.names()]))


def check_environment_sampling(s: Any) -> None:
    """What an ``environment:`` run cannot sample with (`s`: the ``sampling:`` section), refused with the reason."""
    if s.async_:
        raise ConfigError("sampling.async", "does not run with an environment yet: the rollout worker samples single "
                          "turns from token ids, while an episode's turns wait on its tool calls, which run in the "
                          "trainer's process; set async: false (an episode's tool calls already overlap sampling)")
    if s.partial is not None:
        raise ConfigError("sampling.partial", "does not run with an environment yet: a partial rollout's replay "
                          "buffer would have to keep each episode's tools and environment state between steps; "
                          "remove sampling.partial (environment.turn_max_new_tokens and episode_max_tokens bound "
                          "an episode)")
