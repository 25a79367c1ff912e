"""``stream: true`` for ``kitae serve model``'s chat and completions: the reply as server-sent events while the
batch decodes it (OpenAI's chunk shapes; the HTTP side is kitae/http/server.py's EventStream).

    chat:         {"object": "chat.completion.chunk", "choices": [{"index", "delta": {"role"} | {"content"} | {},
                   "logprobs": null, "finish_reason": null | "stop" | "length"}]}
    completions:  {"object": "text_completion", "choices": [{"index", "text", "logprobs": null,
                   "finish_reason", "stop_reason": null}]}

One choice per chunk, its finish_reason on its last chunk; with ``stream_options: {"include_usage": true}`` every
chunk has ``usage: null`` and a last chunk has ``choices: []`` and the usage. Then ``data: [DONE]``.

The streamed text of a choice is the text the same request gives without streaming, piece by piece: a piece is
sent once later tokens can no longer change it. The text so far is rendered from the tokens but the newest (a stop
token's text is cut once the sample ends), and its end is held back while it could still become a stop string or a
control marker, is an unfinished character (U+FFFD), or is whitespace (a tokenizer's clean-up may drop a space
before the next token). When the sample ends, what the reply has beyond the streamed text is sent.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from kitae.errors import KitaeError
from kitae.serving.batching import Job

_UNSETTLED_END = re.compile(r"[\s\ufffd]+$")


def settled(text: str, ends: list[str]) -> str:
    """``text`` without the end that later tokens may still change (see the module docstring).

    >>> settled("a b<|im", ["<|im_end|>"]), settled("x\\n\\n", []), settled("ok STO", ["STOP"])
    ('a b', 'x', 'ok')
    """
    cut = len(text)
    for end in ends:
        for k in range(min(len(end), len(text)), 0, -1):
            if text.endswith(end[:k]):
                cut = min(cut, len(text) - k)
                break
    return _UNSETTLED_END.sub("", text[:cut])


def growing_texts(job: Job, render: Callable[[list[int]], str], ends: list[str]) -> Iterator[tuple[int, str]]:
    """``(sample index, its settled text so far)`` each time that text grows, until the job is done."""
    shown: dict[int, str] = {}
    while not job.done.is_set():
        job.stepped.wait(1.0)
        job.stepped.clear()
        for row in list(job.rows):
            text = settled(render(row.tokens[:-1]), ends)
            before = shown.get(row.index, "")
            if len(text) > len(before) and text.startswith(before):
                shown[row.index] = text
                yield row.index, text


def rest_of(final: str, streamed: str) -> str:
    """What the reply's text has beyond what was streamed (the module docstring says why it always starts so)."""
    if not final.startswith(streamed):
        raise KitaeError("the streamed text differs from the reply's; send the request with stream: false")
    return final[len(streamed):]


class Chunks:
    """The chunks of one streamed reply: ``kind`` "chat" or "completion"; ``usage``: whether the client asked for
    the usage chunk."""

    def __init__(self, kind: str, model: str, usage: bool):
        self.kind, self.usage = kind, usage
        prefix, obj = ("chatcmpl", "chat.completion.chunk") if kind == "chat" else ("cmpl", "text_completion")
        self.head = {"id": f"{prefix}-{uuid.uuid4().hex}", "object": obj, "created": int(time.time()),
                     "model": model}

    def _chunk(self, choice: dict[str, Any]) -> dict[str, Any]:
        return {**self.head, "choices": [choice], **({"usage": None} if self.usage else {})}

    def start(self, index: int) -> dict[str, Any] | None:
        """The first chunk of a chat choice (its role), None for completions."""
        if self.kind != "chat":
            return None
        return self._chunk({"index": index, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                            "finish_reason": None})

    def text(self, index: int, text: str, finish: str | None = None) -> dict[str, Any]:
        if self.kind == "chat":
            delta = {"content": text} if text else {}
            return self._chunk({"index": index, "delta": delta, "logprobs": None, "finish_reason": finish})
        return self._chunk({"index": index, "text": text, "logprobs": None, "finish_reason": finish,
                            "stop_reason": None})

    def usage_chunk(self, prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
        return {**self.head, "choices": [], "usage": {"prompt_tokens": prompt_tokens,
                                                      "completion_tokens": completion_tokens,
                                                      "total_tokens": prompt_tokens + completion_tokens}}


def stream_job(chunks: Chunks, job: Job | None, n: int, render: Callable[[list[int]], str], ends: list[str],
               finals: Callable[[], list[tuple[str, str, int]]], prompt_tokens: int) -> Iterator[dict[str, Any]]:
    """The chunks of ``n`` choices: their text while ``job`` decodes them (None: a reply made whole, such as
    constrained JSON), then from ``finals()``, per choice ``(text, finish_reason, tokens)``, the rest of each
    text and its finish_reason, then the usage chunk when asked."""
    for i in range(n):
        if (first := chunks.start(i)) is not None:
            yield first
    streamed = [""] * n
    if job is not None:
        for i, text in growing_texts(job, render, ends):
            yield chunks.text(i, text[len(streamed[i]):])
            streamed[i] = text
    done = finals()
    for i, (text, finish, _) in enumerate(done):
        rest = rest_of(text, streamed[i])
        if rest and chunks.kind == "chat":
            yield chunks.text(i, rest)
            rest = ""
        yield chunks.text(i, rest, finish)
    if chunks.usage:
        yield chunks.usage_chunk(prompt_tokens, sum(tokens for _, _, tokens in done))
