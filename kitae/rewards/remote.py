"""A reward model behind HTTP: the client, with timeouts, retries with backoff, a concurrency limit and counters.

The GRPO-zero recipe ran its reward model on a second GPU with SGLang. The client speaks four wire protocols, registered by
name in ``RM_PROTOCOLS`` (the spec's ``protocol``):

``kitae`` (default; ``kitae serve rm``)
    POST /v1/score ``{"conversations": [[{role, content}, ...], ...]}`` -> ``{"scores": [float, ...]}``.
    The server applies the RM's chat template.
``sglang`` (SGLang native reward API; ``python -m sglang.launch_server --is-embedding``)
    POST /classify ``{"text": [str, ...]}`` -> ``[{"embedding": [score, ...], "meta_info": {...}}, ...]``;
    the score is ``embedding[0]``. The client formats each conversation itself (``tokenizer`` in the spec: the
    RM's tokenizer folder, for its chat template; ChatML without one).
``vllm-classify`` (vLLM ``/classify``, for ``*ForSequenceClassification`` models)
    POST /classify ``{"input": [str, ...], "use_activation": false, "add_special_tokens": false}`` ->
    ``{"data": [{"index": i, "probs": [score, ...]}, ...]}``; ``use_activation: false`` asks for raw logits
    instead of a sigmoid/softmax (vLLM >= 0.11 spelling; older servers ignore it and return probabilities).
    Texts are formatted by the client, as for sglang.
``vllm-pooling`` (vLLM ``/pooling``, chat form; also reward models served with ``--convert reward``)
    POST /pooling ``{"messages": [...], "use_activation": false}``, one request per conversation ->
    ``{"data": [{"index": 0, "data": ...}]}``; ``data`` is a number, a list (the score is its first element) or
    a per-token list of lists (the score is the last token's first element). The server applies the template.

Not supported: SGLang's OpenAI-style ``/v1/classify`` (it returns softmaxed probabilities, which are constant
for one-label reward models) and vLLM ``/score`` (cross-encoder pair scoring, not reward models).
Every protocol sends ``"model"`` when the spec gives ``served_model``, and ``Authorization: Bearer KEY`` when
the spec names an environment variable in ``api_key_env`` that is set (read at each request, never stored;
``kitae serve rm --token`` checks it: ``api_key_env: KITAE_SERVE_TOKEN``).

Failure handling (:class:`kitae.http.client.Retrier`, shared with the judge's chat client): a request is
retried on connection errors, timeouts, HTTP 429 and 5xx, after ``backoff × 2^attempt`` seconds (capped at
``max_backoff``); other HTTP errors and malformed replies fail at once. A call that still fails raises
:class:`RewardModelError`; the grader turns it into abstentions (None). ``RemoteRewardModel.counters`` counts
requests, retries, timeouts, HTTP and connection errors, bad replies and failed calls.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from typing import Any, Callable

import httpx

from kitae.registry import Registry
from kitae.rewards.reward_model import format_conversation
from kitae.http.client import Retrier, WireCounters, WireError, auth_headers, token_hint

Message = dict[str, str]
RM_PROTOCOLS = Registry("reward model protocol")


class RewardModelError(WireError):
    """The reward model could not score a batch (after retries)."""


@dataclass(frozen=True)
class Protocol:
    """How to ask one kind of server for scores.

    ``build(items, model)`` makes one JSON body from conversations (``takes_text`` False) or formatted texts
    (``takes_text`` True); ``parse(reply, n)`` reads n scores back. ``batched`` False sends one item per request.
    """

    path: str
    takes_text: bool
    batched: bool
    build: Callable[[list[Any], str | None], dict[str, Any]]
    parse: Callable[[Any, int], list[float]]


def _with_model(body: dict[str, Any], model: str | None) -> dict[str, Any]:
    return {"model": model, **body} if model else body


def _expect(ok: bool, what: str) -> None:
    if not ok:
        raise RewardModelError(f"unexpected reply: {what}")


def _score(value: Any) -> float:
    """One served score; null (how a strict-JSON server sends NaN) is NaN, which the grader then refuses."""
    return math.nan if value is None else float(value)


def _parse_kitae(reply: Any, n: int) -> list[float]:
    _expect(isinstance(reply, dict) and isinstance(reply.get("scores"), list), "no 'scores' list")
    return [_score(s) for s in reply["scores"]]


def _parse_sglang(reply: Any, n: int) -> list[float]:
    rows = [reply] if isinstance(reply, dict) else reply
    _expect(isinstance(rows, list) and all(isinstance(r, dict) and r.get("embedding") for r in rows),
            "expected a list of {'embedding': [score, ...]}")
    return [_score(r["embedding"][0]) for r in rows]


def _parse_vllm_classify(reply: Any, n: int) -> list[float]:
    _expect(isinstance(reply, dict) and isinstance(reply.get("data"), list), "no 'data' list")
    rows = sorted(reply["data"], key=lambda r: r.get("index", 0))
    _expect(all(isinstance(r.get("probs"), list) and r["probs"] for r in rows), "a row without 'probs'")
    return [_score(r["probs"][0]) for r in rows]


def _pooled_score(data: Any) -> float:
    while isinstance(data, list):  # [[per-token values], ...] -> last token; [score, ...] -> first label
        _expect(bool(data), "empty pooling data")
        data = data[-1] if isinstance(data[0], list) else data[0]
    return _score(data)


def _parse_vllm_pooling(reply: Any, n: int) -> list[float]:
    _expect(isinstance(reply, dict) and isinstance(reply.get("data"), list), "no 'data' list")
    rows = sorted(reply["data"], key=lambda r: r.get("index", 0))
    return [_pooled_score(r.get("data")) for r in rows]


RM_PROTOCOLS.register("kitae", Protocol(
    "/v1/score", False, True, lambda convs, m: _with_model({"conversations": convs}, m), _parse_kitae))
RM_PROTOCOLS.register("sglang", Protocol(
    "/classify", True, True, lambda texts, m: _with_model({"text": texts}, m), _parse_sglang))
RM_PROTOCOLS.register("vllm-classify", Protocol(
    "/classify", True, True,
    lambda texts, m: _with_model({"input": texts, "use_activation": False, "add_special_tokens": False}, m),
    _parse_vllm_classify))
RM_PROTOCOLS.register("vllm-pooling", Protocol(
    "/pooling", False, False,
    lambda convs, m: _with_model({"messages": convs[0], "use_activation": False}, m), _parse_vllm_pooling))


class RemoteRewardModel:
    """Client of a reward-model server; ``await score(conversations)`` -> one float each, or RewardModelError."""

    def __init__(self, url: str, protocol: str = "kitae", served_model: str | None = None,
                 tokenizer: Any = None, timeout: float = 30.0, retries: int = 2, backoff: float = 0.5,
                 max_backoff: float = 8.0, max_concurrency: int = 4, batch_size: int = 16,
                 api_key_env: str | None = None):
        self.url = url.rstrip("/")
        self.api_key_env = api_key_env
        self.protocol_name, self.protocol = protocol, RM_PROTOCOLS.get(protocol)
        self.served_model, self.tokenizer = served_model, tokenizer
        self.timeout = timeout
        self.batch_size = batch_size if self.protocol.batched else 1
        self.counters = WireCounters()
        self._retrier = Retrier(self.name, self.counters, RewardModelError, timeout=timeout, retries=retries,
                                backoff=backoff, max_backoff=max_backoff, max_concurrency=max_concurrency,
                                hint=lambda resp: token_hint(resp, api_key_env))

    @property
    def name(self) -> str:
        return f"{self.url} ({self.protocol_name})"

    async def score(self, conversations: list[list[Message]]) -> list[float]:
        """Scores in order; raises RewardModelError when any batch fails (the caller abstains on all)."""
        items: list[Any] = conversations
        if self.protocol.takes_text:
            items = [format_conversation(self.tokenizer, c) for c in conversations]
        chunks = [items[i : i + self.batch_size] for i in range(0, len(items), self.batch_size)]
        async with httpx.AsyncClient(timeout=self.timeout) as client:
            parts = await asyncio.gather(*(self._score_chunk(client, c) for c in chunks), return_exceptions=True)
        for part in parts:
            if isinstance(part, BaseException):
                self.counters.failed_calls += 1
                raise part
        return [s for part in parts for s in part]

    async def _score_chunk(self, client: httpx.AsyncClient, chunk: list[Any]) -> list[float]:
        body = self.protocol.build(chunk, self.served_model)
        reply = await self._retrier.post(lambda: client.post(self.url + self.protocol.path, json=body,
                                                              headers=auth_headers(self.api_key_env)))
        try:
            scores = self.protocol.parse(reply, len(chunk))
        except (RewardModelError, TypeError, ValueError, KeyError, IndexError) as exc:
            self.counters.bad_replies += 1
            raise RewardModelError(f"{self.name}: {exc}") from None
        if len(scores) != len(chunk):
            self.counters.bad_replies += 1
            raise RewardModelError(f"{self.name}: {len(scores)} scores for {len(chunk)} inputs")
        return scores
