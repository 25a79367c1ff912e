"""How an engine turns chat prompts into token ids and sampled tokens back into completions: one
:class:`TokenCodec`, held by the in-process engine (kitae.rollout.hf) and the server engine (kitae.rollout.server)
alike, so a server's samples read back exactly as the in-process engine's do.

Stopping follows the GRPO-zero recipe: a stop string such as ``<|im_end|>`` may be several tokens, so stops are
matched on the token sequence *and* on the decoded tail of each sample. Unless ``SamplingParams.stop`` lists its
own, a sample stops at ChatML's markers and at every end of the model (:class:`kitae.chat.EndMarker`: its chat
template's turn terminator and every end-of-sequence id, e.g. Llama 3's ``<|eot_id|>`` and ``<|end_of_text|>``),
and each completion carries the marker's text for the graders. :func:`repeat_period` is repeat detection (Kimi
k1.5 §2.6.2), which both engines end a sample by.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from kitae.chat import EndMarker, Message, end_marker_of, format_prompt, prompt_opens_thinking
from kitae.rollout.base import CHATML_STOPS, Completion, SamplingParams


class TokenCodec:
    """A tokenizer with the run's chat settings: ``chat_template_kwargs`` (the chat template's variables for every
    prompt, Qwen3's ``enable_thinking``) and ``end_marker`` (the model's end of turn; default:
    :func:`kitae.chat.end_marker_of` the tokenizer)."""

    def __init__(self, tokenizer: Any, end_marker: EndMarker | None = None,
                 chat_template_kwargs: dict[str, Any] | None = None):
        self.tokenizer = tokenizer
        self.end_marker = end_marker if end_marker is not None else end_marker_of(tokenizer)
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self._stop_cache: dict[tuple[str, ...], list[tuple[str, list[int]]]] = {}

    # ---- prompts --------------------------------------------------------------------------------------
    def set_chat(self, chat_template_kwargs: dict[str, Any] | None = None, end_marker: str | None = None) -> None:
        """A run's chat settings (``model.chat_template_kwargs``, ``model.end_marker``: the marker's text, its
        ids and the model's eos ids found again with it)."""
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        if end_marker is not None:
            self.end_marker = end_marker_of(self.tokenizer, override=end_marker)
            self._stop_cache.clear()

    def encode_prompt(self, messages: list[Message], chat_template_kwargs: dict[str, Any] | None = None) -> list[int]:
        """The prompt's token ids: its chat template applied with ``chat_template_kwargs`` (default: the
        codec's, ``model.chat_template_kwargs``)."""
        kwargs = self.chat_template_kwargs if chat_template_kwargs is None else chat_template_kwargs
        text = format_prompt(self.tokenizer, messages, kwargs)
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    # ---- stops ----------------------------------------------------------------------------------------
    def ending(self, sp: SamplingParams) -> SamplingParams:
        """``sp`` with its stop strings resolved: ``stop`` None (the default) is ChatML's ``<|im_end|>`` and
        ``<|endoftext|>`` and then every end text of the model (:class:`kitae.chat.EndMarker`); a list stays as
        given (``[]``: run on to max_new_tokens)."""
        if sp.stop is not None:
            return sp
        return dataclasses.replace(sp, stop=list(dict.fromkeys([*CHATML_STOPS, *self.end_marker.stops])))

    def stop_ids(self, stop: tuple[str, ...]) -> list[tuple[str, list[int]]]:
        """Each stop string with its token ids, and each end id of the model whose text is a stop string with
        that id alone (a special token another id also spells) (cached per stop set)."""
        if stop not in self._stop_cache:
            stops = [(s, self.tokenizer.encode(s, add_special_tokens=False)) for s in stop]
            end = self.end_marker
            stops += [(t, [i]) for i, t in zip(end.ids, end.texts) if t in stop and (t, [i]) not in stops]
            self._stop_cache[stop] = stops
        return self._stop_cache[stop]

    def hit_stop(self, toks: list[int], stops: list[tuple[str, list[int]]]) -> bool:
        """Whether the tokens sampled so far end with a stop string (``stops`` from :meth:`stop_ids`)."""
        for text, ids in stops:
            if ids and toks[-len(ids) :] == ids:
                return True
            # In context, BPE may split a multi-token stop string differently than alone: check the text too.
            if len(ids) > 1 and text in self.tokenizer.decode(toks[-(len(ids) + 4) :]):
                return True
        return False

    # ---- completions ----------------------------------------------------------------------------------
    def decode(self, toks: list[int], stop: list[str]) -> str:
        """The text of a completion, cut right after the first stop string in it (the stop string kept)."""
        text = self.tokenizer.decode(toks, skip_special_tokens=False)
        cut = min((text.find(s) + len(s) for s in stop if s in text), default=len(text))
        return text[:cut]

    def completion(self, prompt_ids: list[int], tokens: list[int], logprobs: list[float], finish_reason: str,
                   stop: list[str], image_inputs: dict[str, Any] | None = None) -> Completion:
        """A sample as a :class:`Completion`: its text decoded and cut after the stop string, the model's end
        marker and control tokens, whether its prompt opened a thinking block."""
        return Completion(text=self.decode(tokens, stop), prompt_ids=list(prompt_ids), completion_ids=tokens,
                          logprobs=logprobs, finish_reason=finish_reason, image_inputs=image_inputs,
                          end_marker=self.end_marker.text, control_tokens=self.end_marker.controls,
                          thinking_open=prompt_opens_thinking(self.tokenizer, prompt_ids))


def repeat_period(tokens: list[int], max_period: int, min_count: int, min_span: int) -> int | None:
    """The smallest period p <= max_period such that the last max(min_count * p, min_span rounded up to whole
    blocks) tokens are one block of p tokens repeated; None when there is none.

    >>> repeat_period([5, 1, 2, 1, 2, 1, 2], max_period=4, min_count=3, min_span=4)
    2
    >>> repeat_period([1, 2, 1, 2, 3], max_period=4, min_count=2, min_span=4) is None
    True
    """
    n = len(tokens)
    for p in range(1, max_period + 1):
        span = p * max(2, min_count, -(-min_span // p))  # whole blocks: >= min_count (and 2), >= min_span tokens
        if span > n:
            continue
        if tokens[-1] == tokens[-1 - p] and tokens[n - span : n - p] == tokens[n - span + p :]:
            return p
    return None


class HoldsCodec:
    """The members an engine holding a :class:`TokenCodec` (``self.codec``) answers through it: its tokenizer,
    end marker and chat settings, prompt encoding and stop resolution (kitae.rollout.base.ContinuesTokens'). The
    in-process and the server engine both list it first among their bases."""

    codec: TokenCodec

    @property
    def tokenizer(self) -> Any:
        return self.codec.tokenizer

    @property
    def end_marker(self) -> EndMarker:
        return self.codec.end_marker

    @property
    def chat_template_kwargs(self) -> dict[str, Any]:
        return self.codec.chat_template_kwargs

    def set_chat(self, chat_template_kwargs: dict[str, Any] | None = None, end_marker: str | None = None) -> None:
        """A run's chat settings (``model.chat_template_kwargs``, ``model.end_marker``), kept by the codec."""
        self.codec.set_chat(chat_template_kwargs, end_marker)

    def encode_prompt(self, messages: list[Message], chat_template_kwargs: dict[str, Any] | None = None) -> list[int]:
        """The prompt's token ids (:meth:`TokenCodec.encode_prompt`)."""
        return self.codec.encode_prompt(messages, chat_template_kwargs)

    def ending(self, sp: SamplingParams) -> SamplingParams:
        """``sp`` with its stop strings resolved (:meth:`TokenCodec.ending`)."""
        return self.codec.ending(sp)
