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
time (no cross-request batching). Bad requests get HTTP 400 ``{"error": {"message": ...}}``.
"""

from __future__ import annotations

import json
import time
from http.server import ThreadingHTTPServer
from typing import Any

from kitae.rewards.reward_model import LocalRewardModel
from kitae.serving.http import LoopbackServer, json_handler


class BadRequest(ValueError):
    """HTTP 400."""


class NotFound(Exception):
    """HTTP 404."""


def _texts(value: Any) -> list[str]:
    texts = [value] if isinstance(value, str) else value
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        raise BadRequest("expected a string or a list of strings")
    return texts


def _conversations(value: Any) -> list[list[dict[str, str]]]:
    ok = isinstance(value, list) and all(
        isinstance(c, list) and all(isinstance(m, dict) and {"role", "content"} <= set(m) for m in c) for c in value
    )
    if not ok:
        raise BadRequest("'conversations' must be a list of message lists ({role, content} each)")
    return value


class RewardModelService:
    """The scoring behind the endpoints, independent of HTTP (so it is easy to test and reuse)."""

    def __init__(self, scorer: LocalRewardModel, name: str | None = None):
        self.scorer, self.name = scorer, name or scorer.name

    def _score_input(self, body: dict[str, Any]) -> list[float]:
        if "messages" in body:
            return self.scorer.score([_conversations([body["messages"]])[0]])
        if "input" in body:
            return self.scorer.score_texts(_texts(body["input"]))
        raise BadRequest("expected 'input' (text or list of texts) or 'messages'")

    def kitae_score(self, body: dict[str, Any]) -> dict[str, Any]:
        if "conversations" in body:
            scores = self.scorer.score(_conversations(body["conversations"]))
        elif "texts" in body:
            scores = self.scorer.score_texts(_texts(body["texts"]))
        else:
            raise BadRequest("expected 'conversations' (list of message lists) or 'texts'")
        return {"model": self.name, "scores": scores}

    def sglang_classify(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        scores = self.scorer.score_texts(_texts(body["text"]))
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
            raise NotFound(path)
        if not isinstance(body, dict):
            raise BadRequest("the request body must be a JSON object")
        return routes[path](body)

    def error_reply(self, exc: Exception, method: str, path: str) -> tuple[int, Any]:
        if isinstance(exc, NotFound):
            return 404, {"error": {"message": f"no endpoint {method} {path}"}}
        if isinstance(exc, (BadRequest, json.JSONDecodeError, UnicodeDecodeError)):
            return 400, {"error": {"message": str(exc)}}
        return 500, {"error": {"message": f"{type(exc).__name__}: {exc}"}}  # the model failed: keep serving

    def handle_get(self, path: str) -> Any:
        if path == "/health":
            return {"status": "ok", "model": self.name}
        if path == "/v1/models":
            return {"object": "list", "data": [{"id": self.name, "object": "model"}]}
        raise NotFound(path)


def make_server(scorer: LocalRewardModel, host: str = "127.0.0.1", port: int = 0, name: str | None = None,
                quiet: bool = True) -> ThreadingHTTPServer:
    """A bound server (port 0 = a free port; read it from ``server.server_address``); call serve_forever()."""
    return LoopbackServer((host, port), json_handler(RewardModelService(scorer, name), quiet))
