"""The episode loop: a rollout of an agent is turns of sampling and tool calls, kept token for token.

For P prompts and n samples each, the P x n episodes run in lock-step turns:

    turn 0   reset each episode's environment (its text goes at the end of the last user message), encode the
             prompts with the tools (the model's own chat template), one ``generate_tokens(prompts, n)`` call:
             each prompt is prefilled once for its n samples
    turn k   parse each active episode's sampled turn; run every tool call of every episode at once (asyncio;
             the run's cap on concurrent calls lives in the tools); append the tokens the chat template puts
             after the turn (the tool results and the next assistant header: ``ToolChat.suffix_ids``, loss
             mask 0, log-prob 0.0); one ``generate_tokens(active ids, 1)`` call samples the next turn
    end      an episode ends when a turn has no tool call (``answer``), when a limit cuts it (``max_turns``,
             ``max_tool_calls``, ``episode_max_tokens``), or when a turn is cut (``length``, ``repeat``); then its
             environment's ``get_reward()`` is read and the chat template is asked whether it would render the
             conversation otherwise than the kept tokens (``Episode.template_rewrites``)

Why lock-step rather than each episode on its own: every turn is one batched sampling call whose inputs and seed
(``sampling.seed`` offset by the turn) do not depend on which tool answered first, so the same step gives the same
episodes again, and a resumed run redoes an interrupted step exactly. Tool latency overlaps between episodes
(all the calls of a turn run together), not with sampling.

The sampled tokens are never re-tokenized: ``completion_ids`` is turn 0's tokens, the template's tokens, turn 1's
tokens, ...; ``loss_mask`` says which are the policy's (kitae.rollout.trajectory).
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Protocol

from kitae.rollout.base import Completion, ContinuesTokens, SamplingParams
from kitae.rollout.trajectory import Episode, ToolCall, Turn, malformed_call

TURN_SEED_STRIDE = 999_983  # turn k samples with sampling.seed + k * this (+ its budget group)


@dataclass(frozen=True)
class Limits:
    """How far an episode may go (``environment.max_turns`` ...; kitae.agents.config.EnvironmentConfig)."""

    max_turns: int = 6
    max_tool_calls: int = 8
    turn_max_new_tokens: int = 256
    episode_max_tokens: int = 2048

    @classmethod
    def from_config(cls, cfg: Any) -> "Limits":
        return cls(cfg.max_turns, cfg.max_tool_calls, cfg.turn_max_new_tokens, cfg.episode_max_tokens)


class Chat(Protocol):
    """What the loop needs of kitae.agents.chat.ToolChat."""

    def prompt_ids(self, messages: list[dict], tools: list[dict]) -> list[int]: ...
    def parse(self, text: str) -> Any: ...  # a ParsedTurn: content, calls, malformed
    def assistant_message(self, parsed: Any) -> dict: ...
    def tool_message(self, call: ToolCall) -> dict: ...
    def suffix_ids(self, assistant: dict, tool_messages: list[dict]) -> list[int]: ...
    def rewrites(self, prompt_messages: list[dict], episode_messages: list[dict], tools: list[dict],
                 ids: list[int]) -> bool: ...


class Box(Protocol):
    """What the loop needs of kitae.agents.tools.ToolBox: one episode's tools."""

    schemas: list[dict]

    async def call(self, call: ToolCall) -> ToolCall: ...
    async def reset(self, row: dict) -> str | None: ...
    async def reward(self) -> float | None: ...
    async def close(self) -> None: ...


@dataclass
class _Running:
    """One episode while it runs."""

    messages: list[dict]  # the prompt as encoded (the reset text in its last user message)
    box: Box
    prompt_ids: list[int] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)  # every completion token so far
    logprobs: list[float] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    chat_messages: list[dict] = field(default_factory=list)  # after the prompt
    calls_made: int = 0
    end: str | None = None  # None while it runs
    budget: int = 0  # max_new_tokens of its next turn
    last: Completion | None = None  # its last turn's completion from the engine
    policy_versions: list[int] = field(default_factory=list)

    def add_sampled(self, c: Completion) -> Turn:
        turn = Turn(len(self.ids), len(self.ids) + len(c.completion_ids), c.text, c.finish_reason)
        self.ids += c.completion_ids
        self.logprobs += c.logprobs
        self.mask += [1] * len(c.completion_ids)
        self.turns.append(turn)
        self.last = c
        if c.policy_version is not None:
            self.policy_versions.append(c.policy_version)
        return turn

    def add_context(self, ids: list[int]) -> None:
        self.ids += ids
        self.logprobs += [0.0] * len(ids)
        self.mask += [0] * len(ids)


def run_episodes(engine: ContinuesTokens, prompts: list[list[dict]], rows: list[dict], n: int,
                 sampling: SamplingParams, chat: Chat, toolbox: Callable[[str], Box], limits: Limits,
                 rollout_prefix: str = "", run: Callable[[Awaitable], Any] | None = None) -> list[list[Completion]]:
    """``n`` episodes of each prompt (chat messages; ``rows[i]`` is prompt i's row, the environment's reset
    arguments): per prompt, its n Completions, each with its loss mask and :class:`Episode`. ``toolbox(rollout_id)``
    makes one episode's tools (the id ``{rollout_prefix}{prompt}.{sample}``).

    Sampling runs in the calling thread (under its autocast and torch settings); the tools' coroutines run through
    ``run`` (default kitae.aio.run_sync; kitae.agents.engine gives the event loop the run's tool sessions live on)."""
    from kitae.aio import run_sync

    run = run or run_sync
    eps = [_Running(copy.deepcopy(m), toolbox(f"{rollout_prefix}{p}.{j}"))
           for p, m in enumerate(prompts) for j in range(n)]
    try:
        _start(eps, rows, n, chat, run)
        _first_turn(engine, eps, n, sampling, limits)
        for turn in range(1, limits.max_turns + 1):
            _after_turn(eps, turn - 1, chat, limits, run)
            active = [e for e in eps if e.end is None]
            if not active:
                break
            _sample_turn(engine, active, sampling, turn)
        rewards = run(_gather(*(e.box.reward() for e in eps)))
        completions = [_finish(e, chat, r) for e, r in zip(eps, rewards)]
    finally:
        run(_gather(*(e.box.close() for e in eps), return_exceptions=True))
    return [completions[p * n:(p + 1) * n] for p in range(len(prompts))]


async def _gather(*coros: Awaitable, return_exceptions: bool = False) -> list[Any]:
    return list(await asyncio.gather(*coros, return_exceptions=return_exceptions))


# ---- turn 0 -----------------------------------------------------------------------------------------------
def _start(eps: list[_Running], rows: list[dict], n: int, chat: Chat, run: Callable) -> None:
    """Reset every episode's environment (all at once) and encode its prompt with its tools."""
    texts = run(_gather(*(e.box.reset(dict(rows[i // n])) for i, e in enumerate(eps))))
    for e, text in zip(eps, texts):
        if text:
            append_to_last_user(e.messages, text)
        e.prompt_ids = list(chat.prompt_ids(e.messages, e.box.schemas))


def append_to_last_user(messages: list[dict], text: str) -> None:
    """The environment's reset text at the end of the last user message (TRL's environment_factory contract).

    >>> m = [{"role": "user", "content": "What is 12*7?"}]
    >>> append_to_last_user(m, "Use the calculator."); m[0]["content"]
    'What is 12*7?\\n\\nUse the calculator.'
    """
    for m in reversed(messages):
        if m.get("role") == "user":
            m["content"] = f"{m.get('content') or ''}\n\n{text}" if m.get("content") else text
            return
    messages.append({"role": "user", "content": text})


def _first_turn(engine: ContinuesTokens, eps: list[_Running], n: int, sampling: SamplingParams,
                limits: Limits) -> None:
    """One sampling call for turn 0: the prompts with n samples each (each prefilled once), or, when resets gave
    the n episodes of a prompt different prompts, every episode's prompt once."""
    sp = dataclasses.replace(sampling, max_new_tokens=min(limits.turn_max_new_tokens, limits.episode_max_tokens))
    shared = all(eps[i].prompt_ids == eps[i - i % n].prompt_ids for i in range(len(eps)))
    if shared:
        groups = engine.generate_tokens([eps[p].prompt_ids for p in range(0, len(eps), n)], n, sp)
        flat = [c for g in groups for c in g]
    else:
        flat = [g[0] for g in engine.generate_tokens([e.prompt_ids for e in eps], 1, sp)]
    for e, c in zip(eps, flat):
        e.budget = sp.max_new_tokens
        e.add_sampled(c)


def _sample_turn(engine: ContinuesTokens, active: list[_Running], sampling: SamplingParams, turn: int) -> None:
    """Turn ``turn`` of the active episodes: one call per token budget (usually one), in a fixed order, each with
    the turn's seed."""
    budgets = sorted({e.budget for e in active}, reverse=True)
    for g, budget in enumerate(budgets):
        group = [e for e in active if e.budget == budget]
        sp = dataclasses.replace(sampling.offset_seed(turn * TURN_SEED_STRIDE + g), max_new_tokens=budget)
        out = engine.generate_tokens([e.prompt_ids + e.ids for e in group], 1, sp)
        for e, [c] in zip(group, out):
            e.add_sampled(c)


# ---- between turns ----------------------------------------------------------------------------------------
def _after_turn(eps: list[_Running], turn: int, chat: Chat, limits: Limits, run: Callable) -> None:
    """Read the turn each active episode sampled, run its tool calls (every episode's at once), and end the
    episode or append the template's tokens for its next turn."""
    active = [e for e in eps if e.end is None]
    plans = [_plan(e, turn, chat, limits) for e in active]
    results = run(_gather(*(_call(e.box, c) for e, (_, todo, _) in zip(active, plans) for c in todo)))
    it = iter(results)
    for e, (parsed, todo, refused) in zip(active, plans):
        done = [next(it) for _ in todo]
        if e.end is not None:  # an answer or a cut turn: nothing to call
            continue
        _record(e, turn, chat, parsed, done, refused, limits)


def _plan(e: _Running, turn: int, chat: Chat, limits: Limits) -> tuple[Any, list[ToolCall], list[ToolCall]]:
    """(the parsed turn, the calls to run, the calls refused past max_tool_calls); sets ``e.end`` for a turn
    without calls or a cut one."""
    t = e.turns[-1]
    if t.finish_reason != "stop":  # cut: no end marker to continue after
        e.end = "episode_max_tokens" if e.budget < limits.turn_max_new_tokens and t.finish_reason == "length" \
            else t.finish_reason
        e.chat_messages.append({"role": "assistant", "content": t.text})
        return None, [], []
    parsed = chat.parse(t.text)
    t.malformed = len(parsed.malformed)
    if not parsed.calls and not parsed.malformed:
        e.end = "answer"
        e.chat_messages.append(chat.assistant_message(parsed))
        return parsed, [], []
    for c in parsed.calls:
        c.turn = turn
    room = max(0, limits.max_tool_calls - e.calls_made)
    return parsed, parsed.calls[:room], parsed.calls[room:]


async def _call(box: Box, call: ToolCall) -> ToolCall:
    """The toolbox's call, which never raises by contract; a tool box that breaks it still gives an error."""
    try:
        return await box.call(call)
    except Exception as exc:  # noqa: BLE001 - the episode goes on with the error as the tool's answer
        return call.fail("failed", f"{type(exc).__name__}: {exc}")


def _record(e: _Running, turn: int, chat: Chat, parsed: Any, done: list[ToolCall], refused: list[ToolCall],
            limits: Limits) -> None:
    """The turn's messages and calls; the episode's end, or the template's tokens before its next turn."""
    for c in refused:
        c.fail("refused", f"not run: the episode's limit of {limits.max_tool_calls} tool calls was reached")
    calls = [*done, *refused]
    e.calls_made += len(done)
    e.turns[-1].tool_calls = calls
    malformed = [malformed_call(m, turn) for m in parsed.malformed]
    assistant = chat.assistant_message(parsed)
    tool_messages = [chat.tool_message(c) for c in [*calls, *malformed]]
    e.chat_messages += [assistant, *tool_messages]
    if refused:
        e.end = "max_tool_calls"
    elif turn + 1 >= limits.max_turns:
        e.end = "max_turns"
    if e.end is not None:
        return
    suffix = list(chat.suffix_ids(assistant, tool_messages))
    left = limits.episode_max_tokens - len(e.ids) - len(suffix)
    if left < 1:
        e.end = "episode_max_tokens"
        return
    e.add_context(suffix)
    e.budget = min(limits.turn_max_new_tokens, left)


# ---- the end ----------------------------------------------------------------------------------------------
def _finish(e: _Running, chat: Chat, reward: float | None) -> Completion:
    """The episode as one Completion: every token after the prompt, its mask and log-probs, the last turn's text
    and finish reason, the environment's reward."""
    episode = Episode(e.turns, e.chat_messages, end=e.end or "answer", environment_reward=reward,
                      tools=[s.get("function", {}).get("name", "") for s in e.box.schemas])
    if len(e.turns) > 1:
        episode.template_rewrites = bool(chat.rewrites(e.messages, e.chat_messages, e.box.schemas,
                                                       e.prompt_ids + e.ids))
    last = e.last
    return dataclasses.replace(
        last, text=last.text, prompt_ids=list(e.prompt_ids), completion_ids=list(e.ids), logprobs=list(e.logprobs),
        finish_reason=last.finish_reason, earlier_tokens=0, loss_mask=list(e.mask), episode=episode,
        policy_version=min(e.policy_versions) if e.policy_versions else None)
