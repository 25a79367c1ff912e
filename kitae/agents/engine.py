"""The agent engine: a rollout engine whose completions are episodes (kitae.agents.episodes).

:class:`AgentEngine` wraps an engine that samples from token ids (kitae.rollout.base.ContinuesTokens: the
in-process ``hf`` engine, the ``server`` engine over ``kitae serve model``, vLLM or SGLang), the model's chat
template with tools (kitae.agents.chat.ToolChat) and the run's tools (kitae.agents.tools.Tools). It is a plain
:class:`~kitae.rollout.base.RolloutEngine`, so sampling and grading, evaluation and the trainer take it as they
take any engine; it also reads each prompt's row (:class:`~kitae.rollout.base.ReadsRows`), which the environment
resets from.

What the wrapped engine can do beyond sampling, the wrapper can too: :func:`agent_engine` builds it as a class
that claims the same protocols (kitae.rollout.base: SyncsWeights, RemoteLogprobs, SavesState) and forwards them,
so weight pushes reach the servers and their log-probs are still corrected. It always reports stats
(ReportsStats): the wrapped engine's, when it reports any, with the tools' (``agent/mcp/...``). It claims neither
EncodesPrompts nor ContinuesTokens: an episode's prompt is encoded with the tools, and partial and async rollouts
are refused with an environment (kitae.agents.config.check_environment_sampling).

The tools' coroutines (environment resets, tool calls, rewards, MCP sessions) run on one event loop in a thread of
their own, the same loop for the whole run (an MCP session belongs to the loop that opened it); sampling runs in
the caller's thread.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import uuid
from typing import Any, Awaitable

from kitae.agents.episodes import Limits, run_episodes
from kitae.errors import ConfigError
from kitae.rollout.base import (ContinuesTokens, ReadsRows, RemoteLogprobs, ReportsStats, RolloutEngine,
                                SamplingParams, SavesState, SyncsWeights)


class _ToolLoop:
    """An event loop in a daemon thread: ``run(coro)`` runs a coroutine there and waits for its result."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="kitae-tools", daemon=True)
        self.thread.start()

    def run(self, coro: Awaitable) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        if not self.thread.is_alive():
            self.loop.close()


class AgentEngine(RolloutEngine, ReadsRows, ReportsStats):
    """Episodes from ``engine`` with ``chat`` and ``tools`` within ``limits``. Build it with :func:`agent_engine`,
    which also forwards what ``engine`` can do beyond sampling. Its step's stats (ReportsStats) are the wrapped
    engine's, if it reports any, and the tools' (MCP: ``agent/mcp/...``)."""

    def __init__(self, engine: ContinuesTokens, chat: Any, tools: Any, limits: Limits):
        if not isinstance(engine, ContinuesTokens):
            raise ConfigError("environment", f"episodes are sampled turn by turn from token ids, which the "
                              f"{type(engine).__name__} engine does not do (kitae.rollout.base.ContinuesTokens); "
                              "use sampling.engine hf or server")
        self.engine, self.chat, self.tools, self.limits = engine, chat, tools, limits
        self._loop: _ToolLoop | None = None

    def generate(self, prompts: list[list[dict]], n: int, sampling: SamplingParams) -> list[list[Any]]:
        """Episodes of prompts without rows (the environment resets with no fields)."""
        return self.generate_rows(prompts, [{} for _ in prompts], n, sampling)

    def generate_rows(self, prompts: list[list[dict]], rows: list[dict], n: int,
                      sampling: SamplingParams) -> list[list[Any]]:
        """``n`` episodes of each prompt; ``sampling``'s seed and temperature, the limits' token budgets
        (``sampling.max_new_tokens`` is not used: environment.turn_max_new_tokens is each turn's)."""
        run = self._tool_loop().run
        return run_episodes(self.engine, prompts, rows, n, sampling, self.chat, self.tools.toolbox, self.limits,
                            rollout_prefix=f"{uuid.uuid4().hex[:12]}-", run=run)

    def with_engine(self, engine: ContinuesTokens) -> "AgentEngine":
        """The same chat, tools and limits over another engine (evaluations sampled in this process when the
        servers keep frozen weights)."""
        other = agent_engine(engine, self.chat, self.tools, self.limits)
        other._loop = self._tool_loop()
        return other

    def take_stats(self) -> dict[str, float]:
        inner = self.engine.take_stats() if isinstance(self.engine, ReportsStats) else {}
        return {**inner, **(self.tools.take_stats() if isinstance(self.tools, ReportsStats) else {})}

    def _tool_loop(self) -> _ToolLoop:
        if self._loop is None:
            self._loop = _ToolLoop()
            self._loop.run(self.tools.start())  # MCP servers listed: their tools join the episode's
        return self._loop

    def close(self) -> None:
        """Close the tools (MCP sessions) and stop their loop; safe to call twice."""
        if self._loop is not None:
            loop, self._loop = self._loop, None
            try:
                loop.run(self.tools.close())
            finally:
                loop.stop()


# ---- what the wrapped engine can do, forwarded --------------------------------------------------------------
class _ForwardsSync(SyncsWeights):
    @property
    def version(self) -> int | None:  # type: ignore[override]
        return self.engine.version

    @version.setter
    def version(self, value: int | None) -> None:
        self.engine.version = value

    @property
    def sync_every(self) -> int:  # type: ignore[override]
        return self.engine.sync_every

    @property
    def frozen(self) -> bool:
        return self.engine.frozen

    def sync_weights(self, model: Any, version: int, state: dict[str, Any] | None = None) -> dict[str, float] | None:
        return self.engine.sync_weights(model, version, state)

    def synced_state(self) -> Any:
        return self.engine.synced_state()

    def load_synced_state(self, state: Any) -> None:
        self.engine.load_synced_state(state)


class _ForwardsRemoteLogprobs(RemoteLogprobs):
    pass


class _ForwardsState(SavesState):
    def state_dict(self) -> dict[str, Any]:
        return self.engine.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.engine.load_state_dict(state)


FORWARDED = ((SyncsWeights, _ForwardsSync), (RemoteLogprobs, _ForwardsRemoteLogprobs),
             (SavesState, _ForwardsState))


@functools.cache
def _agent_class(forwards: tuple[type, ...]) -> type:
    if not forwards:
        return AgentEngine
    names = "".join(f.__name__.replace("_Forwards", "+") for f in forwards)
    return type(f"AgentEngine{names}", (AgentEngine, *forwards), {})


def agent_engine(engine: ContinuesTokens, chat: Any, tools: Any, limits: Limits) -> AgentEngine:
    """An :class:`AgentEngine` over ``engine`` that claims and forwards the protocols ``engine`` claims."""
    forwards = tuple(mixin for protocol, mixin in FORWARDED if isinstance(engine, protocol))
    return _agent_class(forwards)(engine, chat, tools, limits)


# ---- the run's parts ------------------------------------------------------------------------------------------
def build_agent_engine(cfg: Any, engine: RolloutEngine, tokenizer: Any) -> AgentEngine:
    """The ``environment:`` run's engine over ``engine`` (kitae.trainer.setup.make_engine): its chat template with
    the tools (``environment.parser``, the run's chat settings and end marker), the tools, the limits."""
    if not isinstance(engine, ContinuesTokens):
        raise ConfigError("sampling.engine", f"{cfg.sampling.engine.type}: an environment's episodes are sampled turn "
                          "by turn from token ids (kitae.rollout.base.ContinuesTokens), which this engine does "
                          "not do; use hf or server")
    return episode_engine(engine, cfg.environment, cfg.model.chat_template_kwargs, tokenizer)


def episode_engine(engine: ContinuesTokens, env: Any, chat_template_kwargs: dict | None = None,
                   tokenizer: Any = None) -> AgentEngine:
    """An agent engine over ``engine`` for the environment section ``env`` (also ``kitae eval --config`` with
    one): the model's chat template with the tools, the tools, the limits."""
    from kitae.agents.chat import ToolChat
    from kitae.agents.tools import Tools

    chat = ToolChat(tokenizer if tokenizer is not None else engine.tokenizer,
                    chat_template_kwargs=chat_template_kwargs, end_marker=engine.end_marker, parser=env.parser)
    return agent_engine(engine, chat, Tools.from_config(env), Limits.from_config(env))


def environment_component(cfg: Any, engine: RolloutEngine) -> list:
    """The reward component of the environment's ``get_reward()`` (the ``environment_reward`` grader, weight
    ``environment.reward_weight``), named after the environment class; none when the run has no environment or
    its environment has no get_reward."""
    from kitae.graders import build_grader
    from kitae.scoring.components import RewardComponent

    if cfg.environment is None or not isinstance(engine, AgentEngine) or not engine.tools.has_reward:
        return []
    name = engine.tools.environment_name or "environment"
    if any(r.name == name for r in cfg.rewards):
        raise ConfigError("environment.factory", f"its get_reward() becomes a reward component named {name!r}, "
                          "which the rewards already have; rename yours")
    grader = build_grader({"type": "environment_reward"}, "environment")
    return [RewardComponent(name, cfg.environment.reward_weight, grader)]


def check_environment(cfg: Any, tokenizer: Any) -> Any | None:
    """Pre-flight of ``environment:`` (kitae.trainer.preflight), before the model loads: the factory and the tool
    functions import and describe themselves, the model's chat template renders tools in a tool-call format
    kitae reads, and the MCP servers answer with their tools. Returns a prompt encoder with the tools (for the
    length check against ``environment.episode_max_tokens``), or None without an environment."""
    from kitae.agents.chat import ToolChat
    from kitae.agents.tools import Tools
    from kitae.aio import run_sync
    from kitae.errors import KitaeError

    env = cfg.environment
    if env is None:
        return None
    tools = Tools.from_config(env)
    try:
        chat = ToolChat(tokenizer, chat_template_kwargs=cfg.model.chat_template_kwargs, parser=env.parser)
    except KitaeError as exc:
        raise ConfigError("environment.parser", f"the model's chat template cannot be used for tools: {exc}. "
                          "Use a model whose chat template renders tools (Qwen2.5, Qwen3, Llama 3.1, Mistral), or "
                          "set the template (the tokenizer's chat_template) to one that does") from exc

    async def listed() -> list[dict]:
        await tools.start()  # an MCP server that does not answer fails here, naming it
        try:
            return list(tools.schemas)
        finally:
            await tools.close()

    schemas = run_sync(listed())
    check_tool_results(chat, schemas)
    return lambda messages: chat.prompt_ids(messages, schemas)


def check_tool_results(chat: Any, schemas: list[dict]) -> None:
    """The chat template renders a turn that calls the first tool and that tool's result after it (what every
    later turn of an episode appends), or a ConfigError before the model loads."""
    from kitae.agents.parsers import ParsedTurn
    from kitae.errors import KitaeError
    from kitae.rollout.trajectory import ToolCall

    if not schemas:
        return
    call = ToolCall(schemas[0]["function"]["name"], {}, result="ok")
    try:
        chat.suffix_ids(chat.assistant_message(ParsedTurn("", [call], [])), [chat.tool_message(call)])
    except KitaeError as exc:
        raise ConfigError("environment", f"the model's chat template does not render a tool's result after the "
                          f"turn that called it: {exc}. Use a model whose chat template renders tool messages "
                          "(Qwen2.5, Qwen3, Llama 3.1, Mistral)") from exc
