"""Retries with backoff, a concurrency limit and counters for kitae's JSON-over-HTTP clients.

The judge's chat client (:mod:`kitae.judge.client`) and the reward-model client (:mod:`kitae.rewards.remote`)
send JSON and read JSON back; both go through one :class:`Retrier`:

    retrier = Retrier("http://127.0.0.1:8011 (kitae)", WireCounters(), RewardModelError, timeout=30, retries=2)
    reply = await retrier.post(lambda: http.post(url, json=body))   # decoded JSON, or raises RewardModelError

Rules: connection errors, timeouts, HTTP 429 and 5xx are retried after ``backoff × 2^attempt`` seconds, capped
at ``max_backoff`` (a ``Retry-After`` header is honoured up to that cap); other HTTP errors and replies that are
not JSON fail at once. At most ``max_concurrency`` requests are in flight per event loop; backoff sleeps hold
no slot. Every outcome is counted in the :class:`WireCounters` given.
"""

from __future__ import annotations

import asyncio
import os
import weakref
from dataclasses import asdict, dataclass
from typing import Any, Awaitable, Callable

import httpx


class WireError(RuntimeError):
    """A request failed after its retries (or at once, for errors not worth retrying)."""

    def __init__(self, message: str, status: int | None = None, body: str = ""):
        super().__init__(message)
        self.status, self.body = status, body


@dataclass
class WireCounters:
    """What happened on the wire. ``failed_calls`` is kept by the caller: calls that raised in the end."""

    requests: int = 0
    retries: int = 0
    timeouts: int = 0
    connection_errors: int = 0
    http_errors: int = 0
    bad_replies: int = 0
    failed_calls: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True)
class _Retryable:
    message: str
    wait: float | None = None  # seconds the server asked for (Retry-After)


class Retrier:
    """Sends one request with retries. ``name`` starts every error message; ``error`` is the exception raised;
    ``hint(response)`` may add advice to the message of a 4xx (the judge explains its API-key variable)."""

    def __init__(self, name: str, counters: WireCounters, error: type[WireError] = WireError, *,
                 timeout: float = 30.0, retries: int = 2, backoff: float = 0.5, max_backoff: float = 8.0,
                 max_concurrency: int = 4, hint: Callable[[httpx.Response], str] | None = None):
        self.name, self.counters, self.error = name, counters, error
        self.timeout, self.retries, self.backoff, self.max_backoff = timeout, retries, backoff, max_backoff
        self.max_concurrency, self.hint = max_concurrency, hint
        self._limits: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # event loop -> Semaphore

    async def post(self, send: Callable[[], Awaitable[httpx.Response]]) -> Any:
        """The decoded JSON reply of ``await send()``, retried as the module docstring says."""
        problem = _Retryable("no attempt made")
        for attempt in range(self.retries + 1):
            if attempt:
                self.counters.retries += 1
                wait = self.backoff * 2 ** (attempt - 1) if problem.wait is None else problem.wait
                await asyncio.sleep(min(self.max_backoff, wait))
            async with self._limit():
                result = await self._once(send)
            if not isinstance(result, _Retryable):
                return result
            problem = result
        raise self.error(f"{self.name}: {problem.message} (after {self.retries + 1} attempts)")

    def _limit(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        if loop not in self._limits:
            self._limits[loop] = asyncio.Semaphore(self.max_concurrency)
        return self._limits[loop]

    async def _once(self, send: Callable[[], Awaitable[httpx.Response]]) -> Any:
        """The decoded reply, or a _Retryable; raises ``self.error`` on errors not worth retrying."""
        self.counters.requests += 1
        try:
            resp = await send()
        except httpx.TimeoutException:
            self.counters.timeouts += 1
            return _Retryable(f"timed out after {self.timeout:g}s")
        except httpx.TransportError as exc:
            self.counters.connection_errors += 1
            return _Retryable(f"{type(exc).__name__}: {exc}")
        if resp.status_code == 429 or resp.status_code >= 500:
            self.counters.http_errors += 1
            return _Retryable(f"HTTP {resp.status_code}: {resp.text[:200]}", retry_after(resp))
        if resp.status_code >= 400:
            self.counters.http_errors += 1
            hint = self.hint(resp) if self.hint else ""
            raise self.error(f"{self.name}: HTTP {resp.status_code}: {resp.text[:300]}{hint}",
                             resp.status_code, resp.text)
        try:
            return resp.json()
        except ValueError:
            self.counters.bad_replies += 1
            raise self.error(f"{self.name}: reply is not JSON: {resp.text[:200]!r}", resp.status_code) from None


def retry_after(resp: httpx.Response) -> float | None:
    """The seconds of a ``Retry-After`` header (the number form), or None."""
    try:
        return max(0.0, float(resp.headers.get("retry-after", "")))
    except ValueError:
        return None


def token_hint(resp: Any, api_key_env: str | None, who: str = "the server", where: str = "the spec") -> str:
    """For a reply of HTTP 401 or 403, where the request's token comes from and whether that variable is set (or
    that `where` should name one); "" for any other status. A Retrier's ``hint``."""
    if resp.status_code not in (401, 403):
        return ""
    if not api_key_env:
        return f" ({who} wants a token: name its environment variable in {where}'s api_key_env)"
    state = "is set" if os.environ.get(api_key_env) else "is not set"
    return f" (the token comes from ${api_key_env}, which {state})"


def auth_headers(api_key_env: str | None) -> dict[str, str]:
    """``Authorization: Bearer`` the value of ``api_key_env`` when that variable is set (read at each call)."""
    key = os.environ.get(api_key_env) if api_key_env else None
    return {"Authorization": f"Bearer {key}"} if key else {}
