"""What the episode-loop tests drive the loop with: the bundled tiny model's tokenizer with a ChatML template that
renders tools and tool results as Qwen2.5 does (<tool_call>{json}</tool_call>, <tool_response>; the real
ToolChat reads it as the hermes format), a tool box over plain functions that counts the calls running at once,
and an engine that says scripted turns (token ids in, the script's tokens and made-up log-probs out) for the
limits and layouts."""

from __future__ import annotations

import inspect
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from kitae.chat import EndMarker, end_marker_of
from kitae.models import BUNDLED_MODEL, load_tokenizer
from kitae.rollout.base import CHATML_STOPS, Completion, ContinuesTokens, RolloutEngine, SamplingParams
from kitae.rollout.trajectory import ToolCall

TOOLS_TEMPLATE = (
    "{%- if tools %}{{- '<|im_start|>system\\nTools:' }}{%- for t in tools %}{{- '\\n' + (t | tojson) }}{%- endfor %}"
    "{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + m.content + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- elif m.role == 'assistant' %}{{- '<|im_start|>assistant\\n' + (m.content or '') }}"
    "{%- for c in m.tool_calls or [] %}{{- '<tool_call>\\n{\"name\": \"' + c.function.name + '\", \"arguments\": '"
    " + (c.function.arguments | tojson) + '}\\n</tool_call>' }}{%- endfor %}{{- '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


COMPACT_TEMPLATE = TOOLS_TEMPLATE.replace("(t | tojson)", "t.function.name")  # tools by name: prompts that fit the
# bundled model's 192 tokens


def tools_tokenizer():
    tok = load_tokenizer(BUNDLED_MODEL)
    tok.chat_template = TOOLS_TEMPLATE
    return tok


def tools_model(dest: Path, template: str = COMPACT_TEMPLATE) -> Path:
    """A copy of the bundled tiny model at `dest` whose chat template (`template`) renders tools."""
    shutil.copytree(BUNDLED_MODEL, dest)
    (dest / "chat_template.jinja").write_text(template)
    return dest


class FunctionBox:
    """One episode's tools: plain functions (sync or async), called with the arguments as keywords."""

    def __init__(self, fns: dict[str, Callable], log: "CallLog", reset_text: str | None = None,
                 reward: float | None = None):
        self.fns, self.log, self.reset_text, self._reward = fns, log, reset_text, reward
        self.schemas = [{"type": "function", "function": {"name": n, "description": n,
                                                          "parameters": {"type": "object", "properties": {}}}}
                        for n in fns]
        self.closed = False
        self.rows: list[dict] = []

    async def call(self, call: ToolCall) -> ToolCall:
        fn = self.fns.get(call.name)
        if fn is None:
            return call.fail("unknown_tool", f"unknown tool {call.name!r}")
        self.log.enter()
        try:
            out = fn(**call.arguments)
            if inspect.isawaitable(out):
                out = await out
            call.result = str(out)
        except Exception as exc:  # noqa: BLE001
            call.fail("failed", f"{type(exc).__name__}: {exc}")
        finally:
            self.log.leave()
        return call

    async def reset(self, row):
        self.rows.append(row)
        return self.reset_text

    async def reward(self):
        return self._reward

    async def close(self):
        self.closed = True


@dataclass
class CallLog:
    """How many tool calls ran at once, at most."""

    now: int = 0
    most: int = 0
    calls: int = 0

    def enter(self):
        self.now += 1
        self.calls += 1
        self.most = max(self.most, self.now)

    def leave(self):
        self.now -= 1


class ScriptedEngine(RolloutEngine, ContinuesTokens):
    """Says ``script(prompt_text, turn)``'s text as tokens, cut at max_new_tokens; its log-probs are -0.5 each
    (made up: the layout is what these tests look at). ``calls`` keeps each generate_tokens call's (rows, n,
    sampling)."""

    def __init__(self, tokenizer, script: Callable[[str, int], str]):
        self.tokenizer, self.script = tokenizer, script
        self.end_marker: EndMarker = end_marker_of(tokenizer)
        self.calls: list[tuple[int, int, SamplingParams]] = []

    def set_chat(self, chat_template_kwargs=None, end_marker=None):
        pass

    def encode_prompt(self, messages):
        return self.tokenizer.apply_chat_template(messages, add_generation_prompt=True)

    def ending(self, sampling):
        return sampling

    def generate(self, prompts, n, sampling):
        return self.generate_tokens([self.encode_prompt(m) for m in prompts], n, sampling)

    def generate_tokens(self, prompt_ids, n, sampling):
        self.calls.append((len(prompt_ids), n, sampling))
        out = []
        for ids in prompt_ids:
            text = self.tokenizer.decode(ids)
            turn = text.count("<|im_start|>assistant")
            group = []
            for j in range(n):
                said = self.tokenizer(self.script(text, turn - 1), add_special_tokens=False)["input_ids"]
                cut = said[:sampling.max_new_tokens]
                finish = "stop" if len(cut) == len(said) and self.tokenizer.decode(cut).endswith(CHATML_STOPS) \
                    else "length"
                group.append(Completion(self.tokenizer.decode(cut), list(ids), cut, [-0.5] * len(cut), finish))
            out.append(group)
        return out


def call_text(name: str, **args: Any) -> str:
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": args})}\n</tool_call>'
