"""Hand-built agent trajectories for the run store, `kitae runs samples` and the run page: Completions with a
loss mask and an Episode (kitae.rollout.trajectory), graded by hand and written through the trainer's own
group_records, so no model runs.

Step 1 holds one group of two episodes and a single-turn sample:
  #0 a calculator call whose result is right, then the answer (two turns, trained [0, 12) and [30, 36));
  #1 a call whose argument and result carry markup (an XSS attempt), an unknown tool's error, cut by max_turns;
  #2 a single-turn completion (loss_mask None, episode None).
Step 2 holds one single-turn group, so "the last step" and `--step` differ.
"""

from __future__ import annotations

from pathlib import Path

import torch

from kitae.graders.base import Grade
from kitae.rollout.base import Completion
from kitae.rollout.trajectory import Episode, ToolCall, Turn
from kitae.scoring.components import GroupScores
from kitae.store import RunStore
from kitae.store.images import RunImages
from kitae.trainer.metrics import group_records

PROMPT = "What is 37 * 41? Use the calculator."
CALL_0 = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "37 * 41"}}\n</tool_call><|im_end|>'
ANSWER = "37 * 41 = 1517. The answer is 1517<|im_end|>"
XSS_ARG = '<img src=x onerror="window.__kitae_pwned = 3">'
XSS_RESULT = '<script>window.__kitae_pwned = 1</script><img src=x onerror="window.__kitae_pwned = 2">1517'
CALL_1 = f'<tool_call>\n{{"name": "calculator", "arguments": {{"expression": "{XSS_ARG}"}}}}\n</tool_call><|im_end|>'
CALL_2 = '<tool_call>\n{"name": "search", "arguments": {"q": "37*41"}}\n</tool_call><|im_end|>'
SINGLE = "The answer is 1517<|im_end|>"


def episode_completion(turns: list[tuple[str, int, list[ToolCall]]], gaps: list[int], end: str,
                       environment_reward: float | None = None) -> Completion:
    """A Completion of `turns` (text, sampled tokens, tool calls), with `gaps[k]` template and tool tokens after
    turn k (never trained): its loss mask, log-probs (0.0 where the mask is 0), turns, messages."""
    ids, mask, logprobs, out_turns, messages = [], [], [], [], []
    for k, (text, n, calls) in enumerate(turns):
        start = len(ids)
        ids += list(range(100 + start, 100 + start + n))
        mask += [1] * n
        logprobs += [-0.5] * n
        for c in calls:
            c.turn = k
        out_turns.append(Turn(start, len(ids), text, "stop", calls, malformed=0))
        messages.append({"role": "assistant", "content": text.split("<tool_call>")[0].replace("<|im_end|>", ""),
                         **({"tool_calls": [{"type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                                            for c in calls]} if calls else {})})
        messages += [{"role": "tool", "name": c.name, "content": c.result if c.ok else f"error: {c.error}"}
                     for c in calls]
        gap = gaps[k] if k < len(gaps) else 0
        ids += [7] * gap
        mask += [0] * gap
        logprobs += [0.0] * gap
    episode = Episode(out_turns, messages, end=end, environment_reward=environment_reward, tools=["calculator"])
    return Completion(turns[-1][0], [1, 2, 3], ids, logprobs, "stop", loss_mask=mask, episode=episode)


def step_1_completions() -> list[Completion]:
    right = episode_completion(
        [(CALL_0, 12, [ToolCall("calculator", {"expression": "37 * 41"}, result="1517", seconds=0.01)]),
         (ANSWER, 6, [])], gaps=[18], end="answer", environment_reward=1.0)
    hostile = episode_completion(
        [(CALL_1, 14, [ToolCall("calculator", {"expression": XSS_ARG}, result=XSS_RESULT, seconds=0.02)]),
         (CALL_2, 10, [ToolCall("search", {"q": "37*41"}).fail("unknown_tool", "unknown tool 'search'")])],
        gaps=[20, 9], end="max_turns", environment_reward=0.0)
    single = Completion(SINGLE, [1, 2, 3], list(range(200, 207)), [-0.1] * 7, "stop")
    return [right, hostile, single]


def grades_of(scores: list[float | None], reasons: list[str | None]) -> GroupScores:
    grades = [Grade(s, reason=r, error=None if s is not None else "no answer to grade")
              for s, r in zip(scores, reasons)]
    return GroupScores({"accuracy": grades}, totals=list(scores))


def write_agent_run(root: Path, name: str = "agent-run") -> Path:
    """runs/NAME with step 1 (two episodes and a single-turn sample) and step 2 (single-turn)."""
    run_dir = root / name
    row = {"messages": [{"role": "user", "content": PROMPT}], "reference_answer": "1517"}
    step_1 = group_records([row], [step_1_completions()],
                           [grades_of([1.0, None, 1.0], ["1517 matches the reference", None, "matches"])],
                           torch.tensor([[0.5, -1.0, 0.5]]), RunImages(run_dir))
    step_2 = group_records([{"messages": [{"role": "user", "content": "2+2?"}], "reference_answer": "4"}],
                           [[Completion("4<|im_end|>", [1], [5, 6], [-0.2, -0.3], "stop")]],
                           [grades_of([1.0], ["4 matches"])], torch.tensor([[0.0]]), RunImages(run_dir))
    with RunStore.create(run_dir, name=name, config={}, model="tiny") as store:
        store.log_groups(1, step_1)
        store.log_metrics(1, {"reward": 2 / 3})
        store.log_groups(2, step_2)
        store.log_metrics(2, {"reward": 1.0})
        store.finish("finished")
    return run_dir


UNSENT = "the result of a call made in the last turn allowed"


def write_odd_run(root: Path, name: str = "odd-run") -> Path:
    """One group: an episode cut by max_tool_calls right after a call (its result never went back to the model,
    so no tokens follow the last turn), and an episode a hand edit left with turns that are no list."""
    cut = episode_completion([(CALL_0, 12, [ToolCall("calculator", {"expression": "1"}, result="1")]),
                              (CALL_0, 12, [ToolCall("calculator", {"expression": "2"}, result=UNSENT)])],
                             gaps=[5, 0], end="max_tool_calls")
    row = {"messages": [{"role": "user", "content": PROMPT}]}
    [group] = group_records([row], [[cut, step_1_completions()[2]]], [grades_of([0.0, 1.0], [None, None])],
                            torch.tensor([[-1.0, 1.0]]), RunImages(root / name))
    group.samples[1].episode = {"turns": "not a list", "end": "answer", "messages": 7}
    group.samples[1].trained_spans = [[0, 7]]
    with RunStore.create(root / name, name=name, config={}, model="tiny") as store:
        store.log_groups(1, [group])
        store.log_metrics(1, {"reward": 0.5})
    return root / name
