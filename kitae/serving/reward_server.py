"""``kitae serve rm``: a local reward model over HTTP on the loopback interface (stdlib http.server, no extra deps).

The GRPO-zero recipe ran its reward model on a second GPU behind SGLang; this server plays that part for a local
``AutoModelForSequenceClassification`` and answers in every wire format the client (kitae/rewards/remote.py)
speaks, so a spec written for SGLang or vLLM works against it unchanged:

    GET  /health          {"status": "ok", "model": NAME}
    GET  /v1/models       {"object": "list", "data": [{"id": NAME, "object": "model"}]}
    POST /v1/score        kitae:  {"conversations": [[msg, ...], ...]} or {"texts": [...]} -> {"scores": [...]}
    POST /classify        SGLang: {"text": str | [str]} -> [{"embedding": [score], "meta_info": {...}}]
                          vLLM:   {"input": str | [str]} or {"messages": [...]} -> {"data": [{"probs": [score]}]}
    POST /v1/classify     vLLM classify format, as above
    POST /pooling         vLLM:   {"input": ...} or {"messages": [...]} -> {"data": [{"data": [score]}]}

Conversations are formatted with the RM tokenizer's chat template; texts are scored as given. Scores are always
raw logits (``use_activation`` is accepted and ignored). Requests are served on threads and scored one batch at a
time (no cross-request batching). A request holds at most ``max_items`` texts or conversations of at most
``max_chars`` characters each (``--max-items``, ``--max-chars``), so none holds the model for minutes. Bad
requests get HTTP 400 ``{"error": {"message": ..., "param": FIELD}}``; the HTTP checks (body size, token) are
kitae/http/server.py's.
"""

from __future__ import annotations

import time
from http.server import ThreadingHTTPServer
from typing import Any

from kitae.rewards.reward_model import LocalRewardModel
from kitae.http import requests as check
from kitae.http.server import HttpLimits, json_server
from kitae.http.requests import RequestError

# One request must not hold the model for minutes (5,000 texts, or one of 50 MB, did): at most MAX_ITEMS texts or
# conversations (kitae's client sends batch_size, 8 by default) of at most MAX_CHARS characters each, which is
# past what --max-length (2048 tokens) keeps anyway.
MAX_ITEMS = 256
MAX_CHARS = 32_000


VLLM_NEUTRAL = {"use_activation": (False,), "add_special_tokens": (False,)}


class RewardModelService:
    """The scoring behind the endpoints, independent of HTTP (so it is easy to test and reuse).

    Every request is checked before the model sees it: at most ``max_items`` texts or conversations, each at
    most ``max_chars`` characters, messages with string roles and contents (400 naming the field)."""

    def __init__(self, scorer: LocalRewardModel, name: str | None = None, max_items: int = MAX_ITEMS,
                 max_chars: int = MAX_CHARS):
        self.scorer, self.name = scorer, name or scorer.name
        self.max_items, self.max_chars = max_items, max_chars

    def _texts(self, value: Any, param: str) -> list[str]:
        return check.texts(value, param, self.max_items, self.max_chars)

    def _conversations(self, value: Any, param: str) -> list[list[dict[str, str]]]:
        return check.conversations(value, param, self.max_items, self.max_chars)

    @staticmethod
    def _fields(body: dict[str, Any], *known: str) -> None:
        """Refuse fields this server would not honour (vLLM's truncation, a chat template, a typo): the scores
        would not be the ones the client asked for. ``model`` and ``user`` are always accepted; vLLM's
        ``use_activation`` and ``add_special_tokens`` only as this server scores (raw logits, texts as given)."""
        check.check_fields(body, {*known, "model"}, VLLM_NEUTRAL, {"user"}, "kitae serve rm")

    def _score_input(self, body: dict[str, Any]) -> list[float]:
        self._fields(body, "input", "messages")
        if "messages" in body:
            return self.scorer.score([check.messages(body["messages"], "messages", self.max_chars)])
        if "input" in body:
            return self.scorer.score_texts(self._texts(body["input"], "input"))
        raise check.bad("expected 'input' (text or list of texts) or 'messages'")

    def kitae_score(self, body: dict[str, Any]) -> dict[str, Any]:
        if "conversations" not in body and "texts" not in body:
            raise check.bad("expected 'conversations' (list of message lists) or 'texts'")
        self._fields(body, "conversations", "texts")
        if "conversations" in body:
            scores = self.scorer.score(self._conversations(body["conversations"], "conversations"))
        else:
            scores = self.scorer.score_texts(self._texts(body["texts"], "texts"))
        return {"model": self.name, "scores": scores}

    def sglang_classify(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        self._fields(body, "text")
        scores = self.scorer.score_texts(self._texts(body["text"], "text"))
        return [{"embedding": [s], "meta_info": {"id": str(i)}} for i, s in enumerate(scores)]

    def vllm_classify(self, body: dict[str, Any]) -> dict[str, Any]:
        rows = [{"index": i, "label": "score", "probs": [s], "num_classes": 1}
                for i, s in enumerate(self._score_input(body))]
        return {"object": "list", "created": int(time.time()), "model": self.name, "data": rows}

    def vllm_pooling(self, body: dict[str, Any]) -> dict[str, Any]:
        rows = [{"index": i, "object": "pooling", "data": [s]} for i, s in enumerate(self._score_input(body))]
        return {"object": "list", "created": int(time.time()), "model": self.name, "data": rows}

    def classify(self, body: dict[str, Any]) -> Any:
        """/classify is SGLang's (``text``) or vLLM's (``input`` / ``messages``): the body says which."""
        return self.sglang_classify(body) if "text" in body else self.vllm_classify(body)

    def handle_post(self, path: str, body: Any) -> Any:
        routes = {"/v1/score": self.kitae_score, "/classify": self.classify,
                  "/v1/classify": self.vllm_classify, "/pooling": self.vllm_pooling}
        if path not in routes:
            raise RequestError(404, f"no endpoint POST {path} (this server has {', '.join(routes)})")
        return routes[path](check.require_object(body))

    def error_reply(self, exc: Exception, method: str, path: str) -> tuple[int, Any]:
        if isinstance(exc, RequestError):
            return exc.status, {"error": {"message": str(exc), "param": exc.param}}
        return 500, {"error": {"message": f"{type(exc).__name__}: {exc}"}}  # the model failed: keep serving

    def handle_get(self, path: str) -> Any:
        if path == "/health":
            return {"status": "ok", "model": self.name}
        if path == "/v1/models":
            return {"object": "list", "data": [{"id": self.name, "object": "model"}]}
        raise RequestError(404, f"no endpoint GET {path} (this server has /health and /v1/models)")


def make_server(scorer: LocalRewardModel, host: str = "127.0.0.1", port: int = 0, name: str | None = None,
                quiet: bool = True, token: str | None = None, limits: HttpLimits | None = None,
                max_items: int = MAX_ITEMS, max_chars: int = MAX_CHARS) -> ThreadingHTTPServer:
    """A bound server (port 0 = a free port; read it from ``server.server_address``); call serve_forever().
    A host other than loopback needs ``token`` (ConfigError otherwise); with a token every request needs it."""
    service = RewardModelService(scorer, name, max_items, max_chars)
    return json_server(service, host, port, token=token, limits=limits, quiet=quiet,
                       exposes="let anyone on the network use this reward model")
