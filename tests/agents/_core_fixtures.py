"""Episodes built by hand (no runner): Completions with a loss mask and an Episode, for the trainer-side tests."""

from __future__ import annotations

from kitae.rollout.base import Completion
from kitae.rollout.trajectory import Episode, ToolCall, Turn


def call(name: str = "calculator", arguments=None, result: str | None = "42", error: str | None = None,
         turn: int = 0, seconds: float = 0.01, kind: str = "failed") -> ToolCall:
    """A call that answered `result`, or, with `error`, failed with error kind `kind`."""
    made = ToolCall(name, {"expression": "6*7"} if arguments is None else arguments, result=result, seconds=seconds,
                    turn=turn)
    return made if error is None else made.fail(kind, error)


def an_episode(turn_calls: list[list[ToolCall]], final: str = "42<|im_end|>", end: str = "answer",
               malformed: list[int] | None = None, environment_reward: float | None = None,
               template_rewrites: bool = False, sampled: int = 3, put_in: int = 4) -> Completion:
    """An episode of len(turn_calls) + 1 turns: turn k makes turn_calls[k] (each answered by a tool message),
    the last answers ``final``. Each turn samples ``sampled`` tokens; ``put_in`` tokens follow each but the last."""
    malformed = malformed or [0] * len(turn_calls)
    turns, messages, ids, mask = [], [], [], []
    for k, calls in enumerate(turn_calls + [[]]):
        start = len(ids)
        ids += [10 + k] * sampled
        mask += [1] * sampled
        last = k == len(turn_calls)
        text = final if last else f'<tool_call>{{"name": "calculator"}}</tool_call><|im_end|>'
        for c in calls:
            c.turn = k
        turns.append(Turn(start, len(ids), text, "stop", calls, malformed[k] if not last else 0))
        messages.append({"role": "assistant", "content": text.replace("<|im_end|>", ""), **({"tool_calls": [
            {"type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in calls]}
            if calls else {})})
        messages += [{"role": "tool", "name": c.name, "content": c.result if c.ok else c.error} for c in calls]
        if not last:
            ids += [99] * put_in
            mask += [0] * put_in
    episode = Episode(turns, messages, end, environment_reward, template_rewrites, tools=["calculator"])
    return Completion(final, [1, 2, 3], ids, [-0.5 * m for m in mask], "stop", loss_mask=mask, episode=episode)
