"""`kitae runs samples NAME [--step N] [--json]`: the stored samples of one step, for people and for scripts.

Each sample as the run store keeps it (kitae.store.SampleRecord): the prompt's messages, the conversation after
it (an agent's turns with each tool call, its arguments, result or error and time; a single-turn sample's one
assistant message), every reward component with its score, reason and error, how it finished (and why its
episode ended), and which completion-token spans the loss saw.

Model output and tool results are untrusted text: printed for a terminal, their control characters (an ANSI
escape that would clear the screen or retitle the window) are shown escaped; --json escapes them as JSON does.
"""

from __future__ import annotations

import json
import re
from typing import Any

from kitae.errors import KitaeError
from kitae.store import GroupRow, RunStore, SampleRecord


def step_groups(store: RunStore, step: int | None, group: int | None) -> tuple[int, list[GroupRow]]:
    """The groups (with samples) of `step` (default: the last step with samples), or only group index `group`;
    KitaeError naming the steps there are when there is no such step or group."""
    steps = store.group_steps()
    name = store.run_dir.name
    if not steps:
        raise KitaeError(f"run '{name}' has no samples logged yet (the trainer logs them after each step)")
    if step is None:
        step = steps[-1]
    elif step not in steps:
        raise KitaeError(f"run '{name}' has no samples at step {step}; steps with samples: {_step_ranges(steps)}")
    groups = sorted(store.groups(step=step, order="step", limit=None, with_samples=True), key=lambda g: g.group_index)
    if group is not None:
        groups = [g for g in groups if g.group_index == group]
        if not groups:
            raise KitaeError(f"run '{name}' has no group {group} at step {step}; its groups are 0 to "
                             f"{store.count_groups(step=step) - 1}")
    return step, groups


def _step_ranges(steps: list[int]) -> str:
    """[1, 2, 3, 7] -> "1-3, 7"."""
    ranges: list[list[int]] = []
    for s in steps:
        if ranges and s == ranges[-1][1] + 1:
            ranges[-1][1] = s
        else:
            ranges.append([s, s])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)


# ---- JSON --------------------------------------------------------------------------------------------------
def group_json(g: GroupRow) -> dict[str, Any]:
    return {"id": g.id, "step": g.step, "group_index": g.group_index, "prompt": g.prompt, "messages": g.messages,
            "reference": g.reference, "item": g.item, "reward_mean": g.reward_mean, "reward_std": g.reward_std,
            "samples": [sample_json(s, i) for i, s in enumerate(g.samples)]}


def sample_json(s: SampleRecord, index: int) -> dict[str, Any]:
    """One sample for scripts; the same keys for a single-turn sample and an episode (docs/run_store.md)."""
    trained = s.spans()
    return {
        "index": index,
        "text": s.text,
        "reward": s.reward,
        "advantage": s.advantage,
        "finish_reason": s.finish_reason,
        "episode_end": s.episode_end,
        "turns": s.n_turns,
        "completion_tokens": s.completion_tokens,
        "sampled_tokens": s.completion_tokens if s.sampled_tokens is None else s.sampled_tokens,
        "trained_spans": trained,
        "untrained_spans": untrained_spans(trained, s.completion_tokens),
        "components": {name: {"score": s.scores.get(name), "reason": s.reasons.get(name),
                              "error": s.errors.get(name), "sub_scores": s.sub_scores.get(name) or {}}
                       for name in _components(s)},
        "environment_reward": s.environment_reward,
        "messages": conversation(s),
        "tool_calls": s.tool_calls,
        "episode": s.episode,
        "policy_version": s.policy_version,
        "thinking_open": s.thinking_open,
    }


def _components(s: SampleRecord) -> list[str]:
    return list(dict.fromkeys([*s.scores, *s.errors, *s.sub_scores]))


def conversation(s: SampleRecord) -> list[dict]:
    """The messages after the prompt: an episode's own, or a single-turn sample's one assistant message."""
    if s.episode is not None:
        return s.episode.get("messages") or []
    return [{"role": "assistant", "content": s.text}]


def untrained_spans(trained: list[list[int]], n: int) -> list[list[int]]:
    """The [start, end) spans of [0, n) outside `trained` (tool results and template tokens).

    >>> untrained_spans([[0, 12], [30, 36]], 40)
    [[12, 30], [36, 40]]
    """
    out, at = [], 0
    for start, end in trained:
        if start > at:
            out.append([at, start])
        at = max(at, end)
    if at < n:
        out.append([at, n])
    return out


# ---- text ----------------------------------------------------------------------------------------------------
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: Any) -> str:
    """`text` safe to print to a terminal: control characters but newline and tab shown as \\xNN."""
    return _CONTROLS.sub(lambda m: f"\\x{ord(m.group()):02x}", str(text))


def format_step(run: str, step: int, groups: list[GroupRow]) -> str:
    lines = [f"run {run} · step {step} · {len(groups)} group{'s' if len(groups) != 1 else ''}"]
    for g in groups:
        lines += ["", f"== group {g.group_index} (id {g.id}) · mean reward {_num(g.reward_mean)} · "
                      f"std {_num(g.reward_std)}"]
        lines += [f"  {m.get('role', '?')}: " + _block(_content(m.get("content")), 4) for m in g.messages]
        if g.reference is not None:
            lines.append("  reference: " + _block(g.reference, 4))
        for i, s in enumerate(g.samples):
            lines += ["", *_sample_lines(s, i)]
    return printable("\n".join(lines))


def _sample_lines(s: SampleRecord, i: int) -> list[str]:
    finish = f"finish {s.finish_reason}" + (f" · episode end {s.episode_end}" if s.episode_end else "")
    tokens = f"{s.completion_tokens} tokens" + (f", {s.sampled_tokens} sampled" if s.sampled_tokens is not None else "")
    head = [f"-- sample #{i} · reward {_num(s.reward)} · advantage {_signed(s.advantage)} · {finish} · "
            f"{s.n_turns} turn{'s' if s.n_turns != 1 else ''} · {tokens}"]
    trained = s.spans()
    spans = f"  trained tokens: {_spans(trained) or 'none'}"
    untrained = untrained_spans(trained, s.completion_tokens)
    head.append(spans + (f"   not trained: {_spans(untrained)}" if untrained else ""))
    body = _episode_lines(s) if s.episode is not None else ["  assistant: " + _block(s.text, 4)]
    return [*head, *body, *_component_lines(s)]


def _episode_lines(s: SampleRecord) -> list[str]:
    lines = []
    turns = s.turns
    for k, t in enumerate(turns):
        lines.append(f"  turn {k} [{t.get('start')}, {t.get('end')}) finish {t.get('finish_reason')}"
                     + (f" · {t['malformed']} malformed call(s)" if t.get("malformed") else "") + ":")
        lines.append("    " + _block(t.get("text", ""), 4))
        for c in (c for c in t.get("tool_calls") or [] if isinstance(c, dict)):
            lines.append(f"    tool call {c.get('name')}({_args(c.get('arguments'))}) · {_num(c.get('seconds'))} s")
            lines.append("      " + ("ERROR " + _block(c["error"], 6) if c.get("error") else
                                     "-> " + _block(c.get("result") or "", 6)))
        nxt = turns[k + 1].get("start") if k + 1 < len(turns) else s.completion_tokens
        if isinstance(t.get("end"), int) and isinstance(nxt, int) and nxt > t["end"]:
            lines.append(f"  [{t['end']}, {nxt}) not trained: the tool results and the template's tokens")
    if s.episode.get("template_rewrites"):
        lines.append("  the chat template renders earlier turns otherwise: the sampled tokens were kept")
    if s.environment_reward is not None:
        lines.append(f"  environment reward {_num(s.environment_reward)}")
    return lines


def _component_lines(s: SampleRecord) -> list[str]:
    lines = []
    for name in _components(s):
        score = s.scores.get(name)
        shown = "abstained" if score is None and not s.errors.get(name) else _num(score)
        lines.append(f"  reward {name}: {shown}" + (f" · {s.reasons[name]}" if s.reasons.get(name) else ""))
        if s.sub_scores.get(name):
            lines.append(f"    sub-scores {json.dumps(s.sub_scores[name], ensure_ascii=False)}")
        if s.errors.get(name):
            lines.append(f"    error {s.errors[name]}")
    return lines


def _content(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # multimodal parts: text, and each image by name
        return " ".join(p.get("text", "") if p.get("type") == "text" else f"[{p.get('type')}]"
                        for p in content if isinstance(p, dict))
    return json.dumps(content, ensure_ascii=False)


def _args(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)


def _block(text: str, indent: int) -> str:
    """Multi-line text, its later lines indented."""
    return str(text).replace("\n", "\n" + " " * indent)


def _spans(spans: list[list[int]]) -> str:
    return " ".join(f"[{a}, {b})" for a, b in spans)


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _signed(value: float | None) -> str:
    return "-" if value is None else f"{value:+.4g}"
