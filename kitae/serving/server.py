"""``kitae serve model``: a local causal LM behind the OpenAI chat API (stdlib http.server, loopback by default).

Enough of the protocol for kitae's judge client and the official ``openai`` clients, so a local judge, the tests
and the examples need no cloud account:

    GET  /health                {"status": "ok", "model": NAME}
    GET  /v1/models             {"object": "list", "data": [{"id": NAME, "object": "model", "max_model_len": N}]}
    POST /v1/chat/completions   {"model": NAME, "messages": [...], "temperature", "top_p", "max_tokens"
                                 (or "max_completion_tokens"), "n", "stop", "seed", "response_format"}
                                -> {"object": "chat.completion", "choices": [{"message": {"role": "assistant",
                                    "content": ...}, "finish_reason": "stop" | "length"}],
                                    "usage": {"prompt_tokens", "completion_tokens", "total_tokens"}}

Prompts are formatted with the tokenizer's chat template (ChatML without one), generation is kitae's rollout
engine (kitae/rollout/hf.py), and the content stops before ``<|im_end|>``, ``<|endoftext|>`` or a ``stop``
string. Defaults follow OpenAI: temperature 1, top_p 1; ``max_tokens`` defaults to ``--max-tokens`` (512),
capped by the context left.

``response_format``:
    {"type": "json_schema", "json_schema": {"schema": ...}}  constrained decoding (kitae/serving/constrained.py),
        so the content always validates; a schema outside the supported subset is sampled up to
        ``json_attempts`` times and the first reply that validates is returned (the last one when none does);
    {"type": "json_object"}  sampled and checked the same way (a JSON object);
    {"type": "text"} or absent  plain generation.
At temperature 0 sampling again gives the same text, so "sample and check" makes one attempt.

Errors are OpenAI-shaped, ``{"error": {"message", "type", "param", "code"}}``: 400 for a bad request (an
unknown field value, ``stream``, ``tools``, ``logprobs``, a prompt longer than the context), 404 for another
model name or path, 500 when generation fails. Requests run one at a time (a lock around the model; no
batching across requests).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from typing import Any

import jsonschema

from kitae.chat import END_OF_TEXT, IM_END
from kitae.rollout.base import SamplingParams
from kitae.rollout.hf import HFEngine
from kitae.serving.constrained import ConstrainedDecoder, supported
from kitae.serving.http import LoopbackServer, json_handler


class ApiError(Exception):
    """An OpenAI-shaped error reply."""

    def __init__(self, status: int, message: str, param: str | None = None, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.param, self.kind = status, param, kind

    def payload(self) -> dict[str, Any]:
        return {"error": {"message": str(self), "type": self.kind, "param": self.param, "code": self.status}}


@dataclass
class ChatRequest:
    messages: list[dict[str, str]]
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int | None = None
    n: int = 1
    stop: list[str] = field(default_factory=list)
    seed: int | None = None
    format: str = "text"  # text | json_object | json_schema
    schema: dict[str, Any] | None = None


def parse_request(body: Any, max_n: int = 16) -> ChatRequest:
    """A checked ChatRequest, or ApiError(400) naming the field."""
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    for key in ("stream", "tools", "functions", "logprobs"):
        if body.get(key):
            raise ApiError(400, f"'{key}' is not supported by kitae serve model", key)
    req = ChatRequest(messages=_messages(body.get("messages")))
    req.temperature = _number(body, "temperature", 1.0, 0.0, 2.0)
    req.top_p = _number(body, "top_p", 1.0, 0.0, 1.0)
    limit = body.get("max_completion_tokens", body.get("max_tokens"))
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ApiError(400, f"max_tokens must be a positive integer, got {limit!r}", "max_tokens")
    req.max_tokens = limit
    n = body.get("n", 1)
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= max_n:
        raise ApiError(400, f"n must be an integer from 1 to {max_n}, got {n!r}", "n")
    req.n = n
    stop = body.get("stop") or []
    stop = [stop] if isinstance(stop, str) else stop
    if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop):
        raise ApiError(400, "stop must be a string or a list of strings", "stop")
    req.stop = stop
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ApiError(400, f"seed must be an integer, got {seed!r}", "seed")
    req.seed = seed
    req.format, req.schema = _response_format(body.get("response_format"))
    return req


def _messages(value: Any) -> list[dict[str, str]]:
    if not isinstance(value, list) or not value:
        raise ApiError(400, "messages must be a non-empty list of {role, content}", "messages")
    out = []
    for i, m in enumerate(value):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ApiError(400, f"messages[{i}] must be an object with a role", f"messages[{i}]")
        content = m.get("content")
        if isinstance(content, list):  # content parts: keep the text ones
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
        if not isinstance(content, str):
            raise ApiError(400, f"messages[{i}].content must be a string or text parts", f"messages[{i}].content")
        out.append({"role": m["role"], "content": content})
    return out


def _number(body: dict[str, Any], key: str, default: float, lo: float, hi: float) -> float:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
        raise ApiError(400, f"{key} must be a number from {lo:g} to {hi:g}, got {value!r}", key)
    return float(value)


def _response_format(value: Any) -> tuple[str, dict[str, Any] | None]:
    if value is None:
        return "text", None
    kind = value.get("type") if isinstance(value, dict) else None
    if kind in ("text", "json_object"):
        return kind, None
    if kind == "json_schema":
        spec = value.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if not isinstance(schema, dict):
            raise ApiError(400, "response_format.json_schema.schema must be a JSON schema object",
                           "response_format.json_schema.schema")
        try:
            jsonschema.validators.validator_for(schema).check_schema(schema)
        except jsonschema.SchemaError as exc:
            raise ApiError(400, f"invalid JSON schema: {exc.message}", "response_format.json_schema.schema") from None
        return kind, schema
    raise ApiError(400, f"response_format.type must be text, json_object or json_schema, got {kind!r}",
                   "response_format")


@dataclass
class Choice:
    text: str
    finish_reason: str
    tokens: int


class ChatService:
    """The endpoints without HTTP: a model, its tokenizer, a name, the context length."""

    def __init__(self, model: Any, tokenizer: Any, name: str, max_context: int | None = None,
                 default_max_tokens: int = 512, json_attempts: int = 3):
        self.engine = HFEngine(model, tokenizer)
        self.decoder = ConstrainedDecoder(model, tokenizer)
        self.name, self.default_max_tokens, self.json_attempts = name, default_max_tokens, json_attempts
        self.max_context = max_context or getattr(model.config, "max_position_embeddings", None) or 4096
        self._lock = threading.Lock()

    # ---- routes ---------------------------------------------------------------------------------
    def error_reply(self, exc: Exception, method: str, path: str) -> tuple[int, Any]:
        if isinstance(exc, ApiError):
            return exc.status, exc.payload()
        if isinstance(exc, (json.JSONDecodeError, UnicodeDecodeError)):
            return 400, ApiError(400, f"the body is not JSON: {exc}").payload()
        # generation failed: tell the client, keep serving
        return 500, ApiError(500, f"{type(exc).__name__}: {exc}", kind="server_error").payload()

    def handle_get(self, path: str) -> Any:
        if path == "/health":
            return {"status": "ok", "model": self.name}
        if path == "/v1/models":
            return {"object": "list", "data": [{"id": self.name, "object": "model", "created": 0,
                                                "owned_by": "kitae", "max_model_len": self.max_context}]}
        raise ApiError(404, f"no endpoint GET {path}", kind="not_found_error")

    def handle_post(self, path: str, body: Any) -> Any:
        if path != "/v1/chat/completions":
            raise ApiError(404, f"no endpoint POST {path} (this server has /v1/chat/completions)",
                           kind="not_found_error")
        model = body.get("model") if isinstance(body, dict) else None
        if model not in (None, self.name):
            raise ApiError(404, f"the model '{model}' does not exist; this server serves '{self.name}'", "model",
                           "not_found_error")
        return self.chat(parse_request(body))

    # ---- generation -----------------------------------------------------------------------------
    def chat(self, req: ChatRequest) -> dict[str, Any]:
        prompt_ids = self.engine.encode_prompt(req.messages)
        room = self.max_context - len(prompt_ids)
        if room < 1 or (req.max_tokens or 0) > room:
            raise ApiError(400, f"this model's context is {self.max_context} tokens; the messages take "
                           f"{len(prompt_ids)} and max_tokens asks for {req.max_tokens or self.default_max_tokens}",
                           "messages")
        max_tokens = min(req.max_tokens or self.default_max_tokens, room)
        with self._lock:
            choices = [self._choice(req, prompt_ids, max_tokens, i) for i in range(req.n)] \
                if req.format != "text" else self._plain(req, max_tokens, req.n)
        done = sum(c.tokens for c in choices)
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": self.name,
            "choices": [{"index": i, "message": {"role": "assistant", "content": c.text},
                         "finish_reason": c.finish_reason} for i, c in enumerate(choices)],
            "usage": {"prompt_tokens": len(prompt_ids), "completion_tokens": done,
                      "total_tokens": len(prompt_ids) + done},
        }

    def _sampling(self, req: ChatRequest, max_tokens: int, offset: int = 0) -> SamplingParams:
        seed = None if req.seed is None else req.seed + offset
        return SamplingParams(temperature=req.temperature, top_p=req.top_p, max_new_tokens=max_tokens,
                              stop=[IM_END, END_OF_TEXT, *req.stop], seed=seed)

    def _plain(self, req: ChatRequest, max_tokens: int, n: int) -> list[Choice]:
        sp = self._sampling(req, max_tokens)
        completions = self.engine.generate([req.messages], n, sp)[0]
        out = []
        for c in completions:
            text = c.text
            for s in sp.stop:  # the engine keeps the stop string; OpenAI does not
                if c.finish_reason == "stop" and text.endswith(s):
                    text = text[: -len(s)]
                    break
            out.append(Choice(text, "stop" if c.finish_reason != "length" else "length", c.num_tokens))
        return out

    def _choice(self, req: ChatRequest, prompt_ids: list[int], max_tokens: int, index: int) -> Choice:
        """One structured choice: constrained when the schema allows, else sampled and checked."""
        if req.format == "json_schema" and supported(req.schema):
            text, tokens = self.decoder.generate(prompt_ids, req.schema, self._sampling(req, max_tokens, index),
                                                 max_tokens)
            return Choice(text, "stop", tokens)
        attempts = 1 if req.temperature == 0 else self.json_attempts
        candidates = self._plain(self._with_seed(req, index * attempts), max_tokens, attempts)
        valid = [c for c in candidates if self._valid(c.text, req)]
        return (valid or candidates)[-1 if not valid else 0]

    @staticmethod
    def _with_seed(req: ChatRequest, offset: int) -> ChatRequest:
        return ChatRequest(**{**req.__dict__, "seed": None if req.seed is None else req.seed + offset})

    @staticmethod
    def _valid(text: str, req: ChatRequest) -> bool:
        try:
            value = json.loads(text)
        except ValueError:
            return False
        if req.schema is None:
            return isinstance(value, dict)
        return jsonschema.validators.validator_for(req.schema)(req.schema).is_valid(value)


# ---- HTTP ---------------------------------------------------------------------------------------------
def make_server(service: ChatService, host: str = "127.0.0.1", port: int = 0,
                quiet: bool = True) -> ThreadingHTTPServer:
    """A bound server (port 0 = a free port; read it from ``server.server_address``); call serve_forever()."""
    return LoopbackServer((host, port), json_handler(service, quiet))


def load_service(model: str | None, name: str | None = None, device: str = "cpu", dtype: str = "float32",
                 **kw: Any) -> ChatService:
    """A ChatService for a local model folder (None or "bundled": kitae-tiny-base); never downloads."""
    from pathlib import Path

    from kitae.errors import ConfigError
    from kitae.models import load_causal_lm, load_tokenizer, resolve_model_path

    path = resolve_model_path(model, "--model")
    if dtype not in ("float32", "bfloat16", "float16"):
        raise ConfigError("--dtype", f"expected float32, bfloat16 or float16, got {dtype!r}")
    loaded = load_causal_lm(path, dtype, device)
    loaded.eval()
    return ChatService(loaded, load_tokenizer(path), name or Path(path).name, **kw)
