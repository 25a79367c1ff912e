"""HTTP tools: a tool that is an endpoint of the user's (the hosted RFT service's agent fine-tuning shape).

    environment:
      http_tools:
        - name: search
          url: http://127.0.0.1:8080/search
          description: Search the company wiki.
          parameters: {type: object, properties: {query: {type: string, description: What to look for}},
                       required: [query]}
          timeout_s: 5          # per request; default the environment's tool_timeout_s
          retries: 2            # after the first attempt, on connection errors, timeouts, HTTP 429 and 5xx
          api_key_env: WIKI_TOKEN              # Authorization: Bearer $WIKI_TOKEN (read at each call)
          headers_env: {X-Team: WIKI_TEAM}     # more headers, each from an environment variable

Wire format: each call is ``POST url`` with the JSON body ``{"arguments": {...}, "rollout_id": "..."}`` (the
rollout id is the episode's, the same for every call of one episode, so a server can keep per-episode state).
The reply is ``{"result": ...}`` (a string, or any JSON, which the model reads as JSON text), ``{"error": "..."}``
(the call's error, which the model reads), any other JSON (read as JSON text) or plain text (read as it is).
At most 1 MB of a reply is read (the rest is never received); the text is then capped at ``max_result_chars``.

Failures (:class:`kitae.http.client.Retrier`, shared with the judge and the reward-model client): connection
errors, timeouts, HTTP 429 and 5xx are retried after ``backoff x 2^attempt`` seconds (a ``Retry-After`` header
is honoured, capped at ``max_backoff``); other HTTP errors fail at once. A call that fails in the end is the
call's error; it never stops the episode. The run's ``max_concurrent_tools`` caps calls in flight across every
episode (the ToolBox's semaphore). ``timeout_s`` bounds each phase of a request (connecting, reading); the call
as a whole, retries included, is bounded by ``(retries + 1) x 2 x timeout_s`` plus the backoff sleeps and a second.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

import httpx

from kitae.agents.tools import Tool, ToolError, current_rollout_id
from kitae.config import from_dict, setting, short_repr
from kitae.errors import ConfigError
from kitae.http.client import Retrier, WireCounters, WireError, auth_headers, token_hint

MAX_REPLY_BYTES = 1 << 20  # read at most 1 MB of a reply; the ToolBox then caps the text at max_result_chars
TOOL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")  # what the OpenAI function schema allows
URL = re.compile(r"^https?://[^/\s]+")
ENV_NAME = re.compile(r"^[A-Za-z_]\w*$")


@dataclass
class HttpToolSpec:
    """One entry of ``environment.http_tools``: a tool that is an HTTP endpoint (the module docstring has the wire
    format). Read from the config by kitae.config.from_dict, or from a mapping by :meth:`read`; checked by
    :meth:`validate`, the one place its rules live."""

    name: str = ""  # the tool's name as the model calls it (letters, digits, _ or -; at most 64)
    url: str = ""  # http:// or https:// endpoint
    description: str = ""  # what the tool does, shown to the model in the tool's schema (it chooses tools by it)
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})  # JSON Schema
    # of an object: the call's keyword arguments
    timeout_s: float | None = setting(None, above=0)  # seconds per phase of a request; null = tool_timeout_s
    retries: int = setting(2, minimum=0)  # further attempts after a failed one (connection errors, timeouts,
    # HTTP 429 and 5xx), with backoff
    backoff: float = setting(0.5, minimum=0)  # seconds before the first retry, doubled each retry
    max_backoff: float = setting(8.0, minimum=0)  # the cap on one backoff sleep (and on a Retry-After)
    api_key_env: str | None = None  # the environment variable whose value is sent as Authorization: Bearer
    headers_env: dict[str, str] = field(default_factory=dict)  # header -> the environment variable holding its
    # value (secrets stay out of the config), e.g. {X-Team: WIKI_TEAM}

    @classmethod
    def read(cls, value: Any, path: str) -> "HttpToolSpec":
        """A spec from a mapping or any object with the entry's fields (a field set to None takes its default);
        every mistake a ConfigError naming `path` and the field."""
        if isinstance(value, cls):
            value.validate(path)
            return value
        if not isinstance(value, dict):
            value = {f.name: getattr(value, f.name, None) for f in dataclasses.fields(cls)}
        return from_dict(cls, {k: v for k, v in value.items() if v is not None}, path)

    def validate(self, path: str) -> None:
        if not TOOL_NAME.match(self.name or ""):
            raise ConfigError(f"{path}.name", f"a tool's name is 1-64 letters, digits, '_' or '-' starting with a "
                              f"letter or '_' (the model calls it by this name), got {short_repr(self.name)}")
        if not URL.match(self.url or ""):
            raise ConfigError(f"{path}.url", f"expected an http:// or https:// URL, e.g. "
                              f"http://127.0.0.1:9000/lookup, got {short_repr(self.url)}")
        if not self.description.strip():
            raise ConfigError(f"{path}.description", "say what the tool does, in a sentence the model reads (it "
                              "chooses tools by it)")
        check_parameters(self.parameters, f"{path}.parameters")
        for header, var in {"api_key_env": self.api_key_env, **self.headers_env}.items():
            if var is not None and not ENV_NAME.match(var):
                where = path + (".api_key_env" if header == "api_key_env" else f".headers_env.{header}")
                raise ConfigError(where, f"{short_repr(var)} is not an environment variable's name; give the name "
                                  "of the variable that holds the value (secrets stay out of the config)")


def check_parameters(value: dict, path: str) -> None:
    """`value` is a JSON schema of an object whose required arguments are among its properties."""
    properties = value.get("properties", {})
    if value.get("type") != "object" or not isinstance(properties, dict):
        raise ConfigError(path, "expected a JSON schema of an object: {type: object, properties: {name: {type: "
                          f"string, description: ...}}, required: [name]}}, got {json.dumps(value)[:200]}")
    required = value.get("required", [])
    if not isinstance(required, list) or any(r not in properties for r in required):
        raise ConfigError(f"{path}.required", f"every required argument must be one of the properties, got "
                          f"{short_repr(required)}")


class HttpToolError(WireError, ToolError):
    """An HTTP tool's request failed after its retries (or at once, for a 4xx)."""


class HttpTool:
    """The callable of one HTTP tool: ``await tool(**arguments)`` -> the reply as text, or HttpToolError."""

    def __init__(self, name: str, url: str, *, timeout_s: float = 10.0, retries: int = 2, backoff: float = 0.5,
                 max_backoff: float = 8.0, headers_env: dict[str, str] | None = None,
                 api_key_env: str | None = None):
        self.__name__ = name
        self.url, self.timeout_s, self.retries = url, timeout_s, retries
        self.headers_env, self.api_key_env = dict(headers_env or {}), api_key_env
        self.counters = WireCounters()
        # Concurrency is the run's cap (the ToolBox holds it around each call), so the Retrier's own is not the
        # limit: it is set high enough never to bind.
        self.retrier = Retrier(f"HTTP tool '{name}' ({url})", self.counters, HttpToolError, timeout=timeout_s,
                               retries=retries, backoff=backoff, max_backoff=max_backoff, max_concurrency=1 << 16,
                               hint=lambda resp: token_hint(resp, self.api_key_env, where="the tool"))

    @property
    def budget_s(self) -> float:
        """The longest a call can take, the ToolBox's bound on it: every attempt timing out on connecting and on
        reading (httpx times each phase), every backoff sleep at its cap, and a second to spare, so that the
        request's own timeout, with its clearer message, comes first."""
        sleeps = sum(min(self.retrier.max_backoff, self.retrier.backoff * 2**k) for k in range(self.retries))
        return (self.retries + 1) * 2 * self.timeout_s + sleeps + 1.0

    async def __call__(self, **arguments: Any) -> Any:
        body = {"arguments": arguments, "rollout_id": current_rollout_id()}
        try:
            async with httpx.AsyncClient(timeout=self.timeout_s) as client:
                reply = await self.retrier.post(lambda: self._send(client, body))
        except WireError:
            self.counters.failed_calls += 1
            raise
        return read_reply(reply)

    async def _send(self, client: httpx.AsyncClient, body: dict) -> "_Reply":
        """POST, reading at most MAX_REPLY_BYTES of the reply (tool output is untrusted: a huge or endless reply
        must not fill the trainer's memory before the result is capped)."""
        request = client.build_request("POST", self.url, json=body, headers=self._headers())
        response = await client.send(request, stream=True)
        data = bytearray()
        try:
            async for chunk in response.aiter_bytes():
                data += chunk
                if len(data) > MAX_REPLY_BYTES:
                    break
        finally:
            await response.aclose()
        return _Reply(response, bytes(data[:MAX_REPLY_BYTES]))

    def _headers(self) -> dict[str, str]:
        headers = {name: os.environ[var] for name, var in self.headers_env.items() if os.environ.get(var)}
        return {**headers, **auth_headers(self.api_key_env)}


class _Reply:
    """A reply read (at most MAX_REPLY_BYTES) as the Retrier reads responses; ``json()`` takes a reply that is
    not JSON (plain text, or JSON cut at the limit) as ``{"result": text}``."""

    def __init__(self, response: httpx.Response, content: bytes):
        self.status_code, self.headers = response.status_code, response.headers
        self.text = content.decode(response.charset_encoding or "utf-8", errors="replace")

    def json(self) -> Any:
        try:
            return json.loads(self.text)
        except ValueError:
            return {"result": self.text}


def read_reply(reply: Any) -> Any:
    """The result in a reply: ``{"result": x}`` -> x; ``{"error": e}`` -> ToolError(e); anything else as it is."""
    if isinstance(reply, dict) and set(reply) <= {"result", "error"}:
        if reply.get("error") is not None:
            raise ToolError(str(reply["error"]))
        if "result" in reply:
            return reply["result"]
    return reply


def http_tool(spec: "HttpToolSpec | dict | Any", path: str, default_timeout_s: float = 10.0) -> Tool:
    """A Tool from an ``http_tools`` entry (an :class:`HttpToolSpec`, a mapping, or any object with the entry's
    fields); ConfigError at `path` when a field is wrong."""
    spec = HttpToolSpec.read(spec, path)
    timeout = spec.timeout_s if spec.timeout_s is not None else default_timeout_s
    fn = HttpTool(spec.name, spec.url, timeout_s=timeout, retries=spec.retries, backoff=spec.backoff,
                  max_backoff=spec.max_backoff, headers_env=spec.headers_env, api_key_env=spec.api_key_env)
    schema = {"type": "function", "function": {"name": spec.name, "description": spec.description,
                                               "parameters": spec.parameters}}
    return Tool(spec.name, schema, fn, timeout_s=fn.budget_s)
