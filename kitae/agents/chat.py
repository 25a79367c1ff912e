"""Token-in/token-out across an agent's turns, with the model's own chat template and tool-call format.

An episode's token ids are built by appending, never by re-rendering the conversation::

    prompt_ids(messages, tools)            the template with tools=schemas and the generation prompt
    + turn 0's sampled ids                 kept verbatim, ending with the model's end-of-turn token
    + suffix_ids(assistant_0, results_0)   what the template puts after that turn: the tool results and the
    + turn 1's sampled ids                 next assistant header (put in, loss mask 0)
    + ...

Re-tokenizing the sampled text would train on tokens the model never produced (a number sampled digit by
digit re-encodes as one token; a template may rewrite earlier turns). :meth:`ToolChat.suffix_ids` is computed as
TRL's GRPOTrainer does (``_get_tool_suffix_ids``): render a short dummy conversation ending with an assistant
turn that calls the same tools, once without and once with the tool messages and the generation prompt, and
take what the second adds after the turn's end token. kitae finds that end by counting the template's end
tokens (TRL trims at ``eos_token_id`` alone) so that a template whose turn ends with another token (Llama 3.1's
``<|eot_id|>`` beside ``<|eom_id|>``, Mistral's ``</s>``) or that renders the dummy turn otherwise once it is no
longer the last (Qwen3's empty ``<think>`` block) still gives the right suffix. It checks, with stand-in texts in
place of the results (tool output is untrusted text, any text must pass), that the template renders each tool
message there.

:meth:`ToolChat.rewrites` renders the whole conversation and compares it with the kept ids: Qwen3's templates
render earlier turns otherwise than sampled (their thinking blocks), Mistral's drops a calling turn's text,
Llama 3.1's writes ``<|eot_id|>`` where the model may have ended with ``<|eom_id|>``. kitae keeps the sampled
tokens either way and records the difference (``Episode.template_rewrites``).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from kitae.agents.parsers import PARSERS, ParsedTurn, ToolCallFormat, parser_for
from kitae.chat import EndMarker, end_marker_of, format_prompt
from kitae.errors import KitaeError
from kitae.rollout.trajectory import ToolCall, malformed_call

__all__ = ["ParsedTurn", "PARSERS", "ToolChat", "parser_for"]

DUMMY_USER = {"role": "user", "content": "dummy"}
BREAK = "\u200b"  # a zero-width space: put inside a control token's text, the text no longer encodes as the token


def is_markup(token: str) -> bool:
    """Whether an added token's text is template markup (``<|im_end|>``, ``</tool_response>``, ``[INST]``), not
    whitespace or a word some tokenizers add as one token (tool output keeps those as written)."""
    return len(token) > 1 and not token.isalnum() and not any(c.isspace() for c in token)


class ToolChat:
    """The model's own chat template with tools: the first prompt, the calls in a sampled turn, the tokens each
    later turn appends. Never re-tokenizes sampled tokens.

    ``chat_template_kwargs``: the template's variables (Qwen3's ``enable_thinking``); ``end_marker``: the model's
    end of turn (default :func:`kitae.chat.end_marker_of` the tokenizer); ``parser``: a name in
    :data:`PARSERS`, or "auto" for the format the template renders (:func:`parser_for`).
    """

    def __init__(self, tokenizer: Any, *, chat_template_kwargs: dict | None = None,
                 end_marker: EndMarker | None = None, parser: str = "auto"):
        self.tokenizer = tokenizer
        self.kwargs = dict(chat_template_kwargs or {})
        self.end = end_marker or end_marker_of(tokenizer)
        self.parser = parser_for(tokenizer) if parser == "auto" else parser
        self.format: ToolCallFormat = PARSERS.get(self.parser, "environment.parser")()
        own = self.tokenizer.convert_tokens_to_ids(self.end.text) if self.end.text else None
        own = own if isinstance(own, int) and self.tokenizer.convert_ids_to_tokens(own) == self.end.text else None
        self.end_ids = frozenset(i for i in (*self.end.ids, own) if isinstance(i, int) and i >= 0)  # a turn's end
        added = sorted(filter(is_markup, getattr(tokenizer, "get_added_vocab", dict)()), key=len, reverse=True)
        self._controls = re.compile("|".join(map(re.escape, added))) if added else None

    def plain_text(self, text: str) -> str:
        """Untrusted text (tool output) that encodes as text: each of the tokenizer's added tokens written in it
        (``<|im_end|>``, ``</tool_response>``, ``[TOOL_CALLS]``, ...) gets a zero-width space after its first
        character, so a result cannot end itself and open a turn with the template's own control tokens."""
        while self._controls is not None and self._controls.search(text):
            text = self._controls.sub(lambda m: m[0][0] + BREAK + m[0][1:], text)
        return text

    # ---- rendering -----------------------------------------------------------------------------------------
    def render(self, messages: list[dict], tools: list[dict] | None, add_generation_prompt: bool) -> list[int]:
        """The template applied to `messages` (with ``tools`` when there are any), as token ids."""
        if add_generation_prompt and not tools:
            text = format_prompt(self.tokenizer, messages, self.kwargs)
        else:
            text = self.tokenizer.apply_chat_template(messages, tools=tools or None, tokenize=False,
                                                      add_generation_prompt=add_generation_prompt, **self.kwargs)
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def prompt_ids(self, messages: list[dict], tools: list[dict]) -> list[int]:
        """The first prompt: the template with ``tools`` = the tools' OpenAI function schemas, and the generation
        prompt."""
        return self.render(messages, tools, add_generation_prompt=True)

    # ---- a sampled turn --------------------------------------------------------------------------------------
    def parse(self, text: str) -> ParsedTurn:
        """A sampled turn's text (end marker kept) read in the model's format: content, calls, malformed calls."""
        return self.format.read(text, self.end.stops)

    def assistant_message(self, parsed: ParsedTurn) -> dict:
        """The turn as the template takes it (``tool_calls`` when it made calls)."""
        return self.format.assistant_message(parsed)

    def tool_message(self, call: ToolCall) -> dict:
        """A call's result, or its error as ``error: ...``, as the template's tool message; control tokens written
        in them stay text (:meth:`plain_text`)."""
        safe = dataclasses.replace(call, result=None if call.result is None else self.plain_text(str(call.result)),
                                   error=None if call.error is None else self.plain_text(call.error))
        return self.format.tool_message(safe)

    def malformed_calls(self, parsed: ParsedTurn, turn: int = 0) -> list[ToolCall]:
        """The turn's malformed calls as failed ToolCalls (name MALFORMED_TOOL, error_kind "malformed", the
        message as the error), to give back to the model with :meth:`tool_message` and count."""
        return [malformed_call(msg, turn) for msg in parsed.malformed]

    # ---- the tokens after a sampled turn ---------------------------------------------------------------------
    def suffix_ids(self, assistant: dict, tool_messages: list[dict]) -> list[int]:
        """The tokens the template puts after the sampled turn (which ends with its end token): the tool results
        and the next assistant header. From a dummy conversation, as TRL does, so the sampled turn is never
        rendered; KitaeError when the template does not render the results after that turn."""
        dummy = [DUMMY_USER, self._dummy_assistant(assistant)]
        tool_messages = [{**m, "content": self.plain_text(m["content"])} if isinstance(m.get("content"), str) else m
                         for m in tool_messages]
        probes = [{**m, "content": f"kitae-result-{i}-end"} for i, m in enumerate(tool_messages)]
        before = self.render(dummy, None, add_generation_prompt=False)
        shown = self.tokenizer.decode(self._suffix(dummy, before, probes), skip_special_tokens=False)
        if missing := [m for i, m in enumerate(tool_messages) if f"kitae-result-{i}-end" not in shown]:
            raise KitaeError(f"the chat template does not render the tool message {missing[0]!r} after the "
                             f"assistant turn (tool-call format {self.parser!r}); check environment.parser")
        return self._suffix(dummy, before, list(tool_messages))

    def _suffix(self, dummy: list[dict], before: list[int], tool_messages: list[dict]) -> list[int]:
        """What rendering `tool_messages` and the generation prompt adds after `dummy`'s last turn ends (`before`:
        `dummy` rendered alone)."""
        after = self.render(dummy + tool_messages, None, add_generation_prompt=True)
        turns = sum(1 for i in before if i in self.end_ids)
        cut = self._after_nth_end(after, turns)
        if cut is None or not turns:
            raise KitaeError(f"the chat template does not end an assistant turn with {self.end.text!r} before the "
                             "tool results; set model.end_marker to the token that ends its turns")
        return after[cut:]

    @staticmethod
    def _dummy_assistant(assistant: dict) -> dict:
        """The turn's calls (names and ids, which some templates render in the result) with empty arguments and
        no text: what the template puts after a turn must not depend on what the model wrote in it."""
        calls = [{**c, "function": {**c.get("function", {}), "arguments": {}}} for c in assistant.get("tool_calls", [])]
        message: dict[str, Any] = {"role": "assistant", "content": ""}
        if calls:
            message["tool_calls"] = calls
        return message

    def _after_nth_end(self, ids: list[int], n: int) -> int | None:
        seen = 0
        for i, token in enumerate(ids):
            seen += token in self.end_ids
            if seen == n and token in self.end_ids:
                return i + 1
        return None

    # ---- does the template rewrite? ----------------------------------------------------------------------------
    def rewrites(self, prompt_messages: list[dict], episode_messages: list[dict], tools: list[dict] | None,
                 ids: list[int]) -> bool:
        """Whether rendering the whole conversation gives other tokens than `ids` (prompt + completion ids).
        The rendering may go on past `ids` by whitespace and end tokens (the newline after Qwen's last
        ``<|im_end|>``, a turn cut before its end) or by the generation prompt (an episode cut after tool results).
        A template that refuses the conversation rewrites it."""
        for generation_prompt in (False, True):
            try:
                rendered = self.render(list(prompt_messages) + list(episode_messages), tools, generation_prompt)
            except Exception:  # noqa: BLE001 - a template that raises on the conversation cannot reproduce it
                return True
            if rendered[:len(ids)] == list(ids) and self._only_closing(rendered[len(ids):]):
                return False
        return True

    def _only_closing(self, tail: list[int]) -> bool:
        text = self.tokenizer.decode([i for i in tail if i not in self.end_ids], skip_special_tokens=False)
        return not text.strip()
