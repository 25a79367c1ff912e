"""An OpenAI-compatible chat client for judges: one config for OpenAI, vLLM, SGLang, llama.cpp, Ollama and
``kitae serve model``.

    client = ChatClient(base_url="http://127.0.0.1:8000/v1", model="kitae-tiny-base")
    reply = await client.chat([{"role": "user", "content": "..."}], schema=SCHEMA, temperature=0)
    reply.content, reply.usage.prompt_tokens, reply.cached

Wire format: POST ``{base_url}/chat/completions`` with ``{"model", "messages", ...sampling params}``, the
reply's ``choices[0].message.content`` and ``usage``. ``base_url`` is the API root the official clients use
(``https://api.openai.com/v1``, ``http://localhost:11434/v1`` for Ollama, ``http://HOST:PORT/v1`` for vLLM,
SGLang and llama.cpp); a bare ``http://HOST:PORT`` gets ``/v1`` appended. The API key is read from the
environment variable named by ``api_key_env`` at each request (never from the spec, never cached); without
it no ``Authorization`` header is sent, which local servers accept.

Structured output (``schema`` given): ``response_format`` follows ``format``:
``json_schema`` (``{"type": "json_schema", "json_schema": {"name", "schema", "strict": true}}``),
``json_object``, ``none`` (the prompt alone asks for JSON), or ``auto`` (the default): json_schema first,
and when a server rejects it (HTTP 400/422 naming the response format or schema) json_object, then none;
the level that worked is remembered for the next calls. Callers parse tolerantly in any case.

Failures: connection errors, timeouts, HTTP 429 and 5xx are retried after ``backoff × 2^attempt`` seconds
(capped at ``max_backoff``; a ``Retry-After`` header is honoured up to that cap); other HTTP errors and
replies without a message fail at once. A call that still fails raises :class:`ChatError`. At most
``max_concurrency`` requests are in flight per event loop; backoff sleeps hold no slot.

Cache: a :class:`kitae.judge.cache.ResponseCache` answers a request seen before (same URL and body) without a
call; ``counters.cache_hits`` counts those and their tokens are not added to the token counters.

Spec fields shared by the judge, ``score_model`` and ``label_model`` graders (:func:`read_client`)::

    model: gpt-4.1-mini         # or env KITAE_JUDGE_MODEL
    base_url: https://api.openai.com/v1   # or env KITAE_JUDGE_BASE_URL, then OPENAI_BASE_URL
    api_key_env: OPENAI_API_KEY # the variable holding the key (unset: no Authorization header)
    timeout: 60                 # seconds per request
    retries: 3                  # extra attempts on connection errors, timeouts, 429 and 5xx
    backoff: 1.0                # seconds before the first retry, doubled each time
    max_backoff: 30.0
    max_concurrency: 8          # requests in flight at once
    cache: true                 # in-memory response cache
    cache_dir: null             # also keep replies in DIR/chat_cache.sqlite across runs
    extra_body: {}              # merged into every request body (e.g. {chat_template_kwargs: {enable_thinking: false}})
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

from kitae.errors import ConfigError
from kitae.graders.base import Grader
from kitae.judge.cache import ResponseCache, request_key
from kitae.http.client import Retrier, WireCounters, WireError

Message = dict[str, Any]
FORMATS = ("auto", "json_schema", "json_object", "none")
_AUTO_LEVELS = ("json_schema", "json_object", "none")
_FORMAT_WORDS = ("response_format", "json_schema", "json_object", "schema", "grammar", "guided", "structured")
MODEL_ENV, BASE_URL_ENVS = "KITAE_JUDGE_MODEL", ("KITAE_JUDGE_BASE_URL", "OPENAI_BASE_URL")


class ChatError(WireError):
    """A chat call failed after its retries (or at once, for errors not worth retrying)."""


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass
class ChatReply:
    content: str
    usage: Usage
    cached: bool = False
    finish_reason: str | None = None
    response_format: str = "none"  # the level sent: json_schema | json_object | none
    key: str = ""  # the cache key of the request ("" without a cache)


@dataclass
class ClientCounters(WireCounters):
    """The wire counters, plus: tokens of live calls, cache hits and format downgrades.
    ``failed_calls`` = chat() calls that raised."""

    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    format_downgrades: int = 0


def normalize_base_url(base_url: str) -> str:
    """``http://h:8000`` -> ``http://h:8000/v1``; a trailing ``/chat/completions`` or ``/`` is dropped."""
    url = base_url.strip().rstrip("/").removesuffix("/chat/completions")
    return url + "/v1" if urlsplit(url).path in ("", "/") else url


def response_format(level: str, schema: dict[str, Any] | None, name: str) -> dict[str, Any] | None:
    if schema is None or level == "none":
        return None
    if level == "json_object":
        return {"type": "json_object"}
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


class ChatClient:
    """Async OpenAI-compatible chat client with retries, a concurrency limit, counters and a response cache."""

    def __init__(self, base_url: str, model: str, api_key_env: str | None = "OPENAI_API_KEY",
                 timeout: float = 60.0, retries: int = 3, backoff: float = 1.0, max_backoff: float = 30.0,
                 max_concurrency: int = 8, cache: ResponseCache | None = None, format: str = "auto",
                 extra_body: dict[str, Any] | None = None):
        if format not in FORMATS:
            raise ValueError(f"format must be one of {FORMATS}, got {format!r}")
        self.base_url, self.model = normalize_base_url(base_url), model
        self.url = self.base_url + "/chat/completions"
        self.api_key_env, self.timeout = api_key_env, timeout
        self.cache, self.format, self.extra_body = cache, format, dict(extra_body or {})
        self.counters = ClientCounters()
        self._auto_level = 0  # index into _AUTO_LEVELS that the server accepted last
        self._retrier = Retrier(self.url, self.counters, ChatError, timeout=timeout, retries=retries, backoff=backoff,
                                max_backoff=max_backoff, max_concurrency=max_concurrency, hint=self._key_hint)
        self._ssl: ssl.SSLContext | None = None

    def __repr__(self) -> str:
        return f"ChatClient({self.base_url!r}, model={self.model!r})"

    # ---- public -----------------------------------------------------------------------------
    async def chat(self, messages: list[Message], schema: dict[str, Any] | None = None, schema_name: str = "reply",
                   **params: Any) -> ChatReply:
        """One completion. ``schema`` asks for structured output (see the module docstring); ``params`` are
        sampling parameters (``temperature``, ``max_tokens``, ``seed``, ``top_p``, ...); None values are dropped."""
        levels = self._levels(schema)
        for i, level in enumerate(levels):
            body = self._body(messages, response_format(level, schema, schema_name), params)
            try:
                reply = await self._complete(body)
            except ChatError as exc:
                if i + 1 < len(levels) and _rejects_format(exc):
                    self.counters.format_downgrades += 1
                    if self.format == "auto":
                        self._auto_level = _AUTO_LEVELS.index(levels[i + 1])
                    continue
                self.counters.failed_calls += 1
                raise
            reply.response_format = level if schema is not None else "none"
            return reply
        raise AssertionError("unreachable")

    def _levels(self, schema: dict[str, Any] | None) -> tuple[str, ...]:
        if schema is None:
            return ("none",)
        if self.format == "auto":
            return _AUTO_LEVELS[self._auto_level :]
        return (self.format,)

    def _body(self, messages: list[Message], fmt: dict[str, Any] | None, params: dict[str, Any]) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        body.update({k: v for k, v in params.items() if v is not None})
        if fmt is not None:
            body["response_format"] = fmt
        if "max_tokens" in body and urlsplit(self.base_url).hostname == "api.openai.com":
            body["max_completion_tokens"] = body.pop("max_tokens")  # OpenAI's reasoning models reject max_tokens
        body.update(self.extra_body)
        return body

    # ---- one request, cached, with retries -------------------------------------------------
    async def _complete(self, body: dict[str, Any]) -> ChatReply:
        key = request_key(self.url, body) if self.cache is not None else ""
        raw = self.cache.get(key) if self.cache is not None else None
        if raw is not None:
            self.counters.cache_hits += 1
            reply = parse_reply(raw)
            reply.cached, reply.key = True, key
            return reply
        raw = await self._post_with_retries(body)
        try:
            reply = parse_reply(raw)
        except ChatError:
            self.counters.bad_replies += 1
            raise
        self.counters.prompt_tokens += reply.usage.prompt_tokens
        self.counters.completion_tokens += reply.usage.completion_tokens
        if self.cache is not None:
            self.cache.put(key, raw)
            reply.key = key
        return reply

    def forget(self, reply: ChatReply) -> None:
        """Drop a reply from the cache (the caller found it unusable), so the same request is sent again."""
        if self.cache is not None and reply.key:
            self.cache.delete(reply.key)

    async def _post_with_retries(self, body: dict[str, Any]) -> Any:
        async def send() -> httpx.Response:
            async with httpx.AsyncClient(timeout=self.timeout, verify=self._tls()) as http:
                return await http.post(self.url, json=body, headers=self._headers())

        return await self._retrier.post(send)

    def _tls(self) -> ssl.SSLContext | bool:
        """One TLS context per client (httpx builds a new one per AsyncClient otherwise: ~70 ms each)."""
        if not self.base_url.startswith("https://"):
            return False  # plain HTTP: no TLS to verify
        if self._ssl is None:
            import certifi

            self._ssl = ssl.create_default_context(cafile=certifi.where())
        return self._ssl

    def _headers(self) -> dict[str, str]:
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        return {"Authorization": f"Bearer {key}"} if key else {}

    def _key_hint(self, resp: httpx.Response) -> str:
        if resp.status_code not in (401, 403) or not self.api_key_env:
            return ""
        state = "is set" if os.environ.get(self.api_key_env) else "is not set"
        return f" (the API key comes from ${self.api_key_env}, which {state})"

    def close(self) -> None:
        if self.cache is not None:
            self.cache.close()


class ClientGrader(Grader):
    """A grader that talks through a :class:`ChatClient` (``self.client``) and keeps its own ``self.counts``."""

    client: ChatClient
    counts: Any

    def stats(self) -> dict[str, Any]:
        """Everything counted (``self.counts``, with the last error), plus the HTTP client's counters as
        ``client_*``; :meth:`counters` is the part a run logs."""
        out = self.counts.as_dict()
        out.update({f"client_{k}": v for k, v in self.client.counters.as_dict().items()})
        return out

    def close(self) -> None:
        self.client.close()


def parse_reply(raw: Any) -> ChatReply:
    """The first choice's message content and the usage of an OpenAI chat.completion object."""
    try:
        choice = raw["choices"][0]
        content = choice["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise ChatError(f"reply has no choices[0].message.content: {str(raw)[:200]}") from None
    if not isinstance(content, str):
        raise ChatError(f"reply content is {type(content).__name__}, not text (a refusal?): {str(raw)[:200]}")
    usage = raw.get("usage") or {}
    return ChatReply(content=content, finish_reason=choice.get("finish_reason"),
                     usage=Usage(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)))


def _rejects_format(exc: ChatError) -> bool:
    """An HTTP 400/422 whose message is about the response format (so a lower level may work)."""
    text = (exc.body or str(exc)).lower()
    return exc.status in (400, 422) and any(word in text for word in _FORMAT_WORDS)


# ---- reading the client fields of a grader spec -------------------------------------------------
@dataclass
class ClientSpec:
    """The client fields of a grader spec (kept so a grader can be rebuilt and shown)."""

    model: str
    base_url: str
    api_key_env: str | None = "OPENAI_API_KEY"
    timeout: float = 60.0
    retries: int = 3
    backoff: float = 1.0
    max_backoff: float = 30.0
    max_concurrency: int = 8
    cache: bool = True
    cache_dir: str | None = None
    response_format: str = "auto"
    extra_body: dict[str, Any] = field(default_factory=dict)

    def build(self) -> ChatClient:
        cache = ResponseCache(self.cache_dir) if self.cache or self.cache_dir else None
        return ChatClient(self.base_url, self.model, self.api_key_env, self.timeout, self.retries, self.backoff,
                          self.max_backoff, self.max_concurrency, cache, self.response_format, self.extra_body)


def read_client(r: Any) -> ClientSpec:
    """Read the client fields (module docstring) from a :class:`kitae.graders.spec.SpecReader`."""
    model = r.text("model", None) or os.environ.get(MODEL_ENV)
    if not model:
        raise ConfigError(r.at("model"), f"missing; name the judge model here or set ${MODEL_ENV}")
    base_url = r.text("base_url", None) or next((os.environ[e] for e in BASE_URL_ENVS if os.environ.get(e)), None)
    if not base_url:
        raise ConfigError(r.at("base_url"), "missing; give the server's API root (e.g. http://127.0.0.1:8000/v1 "
                          f"for `kitae serve model`, https://api.openai.com/v1) or set ${BASE_URL_ENVS[0]}")
    if urlsplit(base_url).scheme not in ("http", "https"):
        raise ConfigError(r.at("base_url"), f"expected an http:// or https:// URL, got {base_url!r}")
    key_env = r.raw("api_key_env", "OPENAI_API_KEY")
    if key_env is not None and not isinstance(key_env, str):
        raise ConfigError(r.at("api_key_env"), f"expected the name of an environment variable, got {key_env!r}")
    return ClientSpec(
        model=model, base_url=base_url, api_key_env=key_env,
        timeout=r.number("timeout", 60.0, minimum=0.001), retries=r.integer("retries", 3, minimum=0),
        backoff=r.number("backoff", 1.0, minimum=0), max_backoff=r.number("max_backoff", 30.0, minimum=0),
        max_concurrency=r.integer("max_concurrency", 8, minimum=1), cache=r.flag("cache", True),
        cache_dir=r.text("cache_dir", None), response_format=r.choice("response_format", list(FORMATS), "auto"),
        extra_body=r.mapping("extra_body", {}),
    )
