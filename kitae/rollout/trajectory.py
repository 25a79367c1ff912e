"""What an agent's rollout holds beyond one completion: its turns, each tool call, where each span came from.

A rollout is a trajectory: the token ids of the whole episode after the prompt (:attr:`Completion.completion_ids`),
a per-token loss mask of what the policy sampled (1: trained) against what the chat template, the environment
and the tools put in (0: context only, never trained), the sampler's log-prob of every sampled token (0.0 for the
others), and, for an episode of several turns, an :class:`Episode`: the turns with their token spans and tool
calls, the messages after the prompt, why the episode ended and the policy version.

A single-turn completion is the one-turn case: ``loss_mask`` None (every token sampled) and ``episode`` None.
Every loss, the packing and the shared-prefix update read the mask through the training batch's per-token
``mask`` (kitae.trainer.batch.TrainBatch.from_completions), so a token the policy did not sample never gets a
gradient.

    prompt | turn 0 sampled      | tool result + next header | turn 1 sampled
           | <tool_call>..<|im_end|> | \\n<|im_start|>user\\n<tool_response>..<|im_start|>assistant\\n | 85<|im_end|>
    mask   | 1 1 1 ... 1         | 0 0 0 ... 0               | 1 1
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Why an episode ended (Episode.end): a turn without a tool call answered; or a limit of the environment cut it
EPISODE_ENDS = ("answer", "max_turns", "max_tool_calls", "episode_max_tokens", "length", "repeat")
# Why a tool call failed (ToolCall.error_kind), set where the error is made:
#   malformed      the model's call could not be read (kitae.agents.parsers); it goes back under MALFORMED_TOOL
#   unknown_tool   it named no tool the episode offers            bad_arguments  its arguments do not fit the tool
#   timeout        the tool ran past its timeout                  refused        past the episode's max_tool_calls
#   failed         the tool raised, or its HTTP endpoint or MCP server answered with an error
TOOL_ERROR_KINDS = ("malformed", "unknown_tool", "bad_arguments", "timeout", "refused", "failed")
MALFORMED_TOOL = "invalid_tool_call"  # the tool name a malformed call's error message goes back to the model under


@dataclass
class ToolCall:
    """One call the model made, as parsed from its turn, and what came back."""

    name: str
    arguments: Any  # the parsed arguments (a dict); the raw text when they could not be read
    id: str | None = None  # the call id the template renders (Mistral's 9 characters), when the format has one
    result: str | None = None  # the text given back to the model (length-capped)
    error: str | None = None  # why it failed, as the model reads it (free text: match error_kind, never this)
    seconds: float = 0.0
    turn: int = 0  # the turn that made it
    error_kind: str | None = None  # one of TOOL_ERROR_KINDS when error is set; None when it ran (and in episodes
    # stored before the field existed)

    @property
    def ok(self) -> bool:
        return self.error is None

    def fail(self, kind: str, error: str) -> "ToolCall":
        """Mark the call failed: no result, `error` for the model, `kind` (one of TOOL_ERROR_KINDS) for counting."""
        if kind not in TOOL_ERROR_KINDS:
            raise ValueError(f"unknown tool error kind {kind!r} (kinds: {', '.join(TOOL_ERROR_KINDS)})")
        self.result, self.error, self.error_kind = None, error, kind
        return self


def malformed_call(message: str, turn: int = 0) -> ToolCall:
    """A call the parser could not read, as a failed ToolCall under MALFORMED_TOOL: given back to the model as a
    tool error and counted (Turn.malformed)."""
    return ToolCall(MALFORMED_TOOL, None, turn=turn).fail("malformed", message)


@dataclass
class Turn:
    """One assistant turn: the policy sampled ``completion_ids[start:end]``; the tokens from ``end`` to the next
    turn's ``start`` were put in by the template and the tools (the loss mask is 0 there)."""

    start: int
    end: int
    text: str  # the turn's text, its end marker kept
    finish_reason: str  # "stop" | "length" | "repeat"
    tool_calls: list[ToolCall] = field(default_factory=list)
    malformed: int = 0  # tool calls in the turn that could not be read (each went back as a tool error)


@dataclass
class Episode:
    """The turns of one multi-turn rollout (kitae.agents.episodes)."""

    turns: list[Turn]
    messages: list[dict]  # the conversation after the prompt: assistant messages (with tool_calls) and tool results
    end: str = "answer"  # one of EPISODE_ENDS
    environment_reward: float | None = None  # the environment's get_reward(), when it has one
    template_rewrites: bool = False  # the chat template renders earlier turns otherwise than sampled (Qwen3's
    # dropped <think>): the sampled tokens were kept, see docs/agents.md
    tools: list[str] = field(default_factory=list)  # the tools offered

    @property
    def tool_calls(self) -> list[ToolCall]:
        return [c for t in self.turns for c in t.tool_calls]


def trained_spans(loss_mask: list[int] | None, n: int) -> list[tuple[int, int]]:
    """The [start, end) spans of completion tokens that are trained (loss mask 1).

    >>> trained_spans([1, 1, 0, 0, 1], 5)
    [(0, 2), (4, 5)]
    >>> trained_spans(None, 3)
    [(0, 3)]
    """
    if loss_mask is None:
        return [(0, n)] if n else []
    spans, start = [], None
    for i, m in enumerate(loss_mask):
        if m and start is None:
            start = i
        elif not m and start is not None:
            spans.append((start, i))
            start = None
    if start is not None:
        spans.append((start, len(loss_mask)))
    return spans
