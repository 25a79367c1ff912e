"""A grader that is an HTTP endpoint over the whole trajectory (the hosted RFT service's agent fine-tuning shape).

    type: endpoint
    url: http://127.0.0.1:9000/grade
    api_key_env: GRADER_TOKEN   # optional: sent as Authorization: Bearer $GRADER_TOKEN (read at each request)
    timeout: 30                 # seconds per request
    retries: 2                  # extra attempts on connection errors, timeouts, HTTP 429 and 5xx
    backoff: 0.5                # seconds before the first retry, doubled each time (capped at 8 s)
    max_concurrency: 8          # requests in flight at once
    pass_threshold: null        # OpenAI's: adds sub_scores.passed

Each sample is one POST of JSON ``{"item": ITEM, "sample": SAMPLE}``: ITEM is the dataset row as it is, SAMPLE the
sample's fields as every grader sees them, without the token ids: ``output_text`` (the final answer, up to the
end-of-turn marker), ``output_json`` (it parsed as JSON, else null), ``finish_reason``, ``completion_tokens``,
``max_completion_length``, the step fields the trainer adds, and for a multi-turn episode ``messages`` (the
conversation after the prompt, assistant turns with their ``tool_calls`` and the tool results), ``tool_calls``
(each ``{name, arguments, result, error, seconds, turn}``), ``turns``, ``episode_end`` and ``environment_reward``.
A single-turn sample has no ``messages`` or ``tool_calls``: the endpoint sees what there is.

The reply is JSON ``{"score": 0.75, "reason": "used the tool, right answer", "sub_scores": {"tool_use": 1.0}}``:
``score`` a finite number (required), ``reason`` a string and ``sub_scores`` numbers (both optional; they are logged
beside the score). Failures never stop a run: a request is retried on connection errors, timeouts, 429 and 5xx
(:class:`kitae.http.client.Retrier`, as the judge and the reward-model client do); one that still fails, other 4xx,
a reply that is not JSON or has no finite ``score``: the sample's grade abstains with the error (masked, not zero),
and :meth:`EndpointGrader.counters` counts it (``failed_calls``, ``bad_replies``, ``timeouts``, ...).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import httpx

from kitae.config import setting, short_repr
from kitae.errors import ConfigError
from kitae.graders.base import Grade, Grader, Item, Sample, is_finite_number
from kitae.graders.spec import read_spec, register_grader
from kitae.graders.template import sample_with_answer
from kitae.http.client import Retrier, WireCounters, WireError, auth_headers, token_hint
from kitae.jsonsafe import dumps

# token-level fields: of no use to an endpoint that reads text, and the longest part of a sample
NOT_SENT = ("completion_ids", "control_tokens")


class EndpointError(WireError):
    """The grading endpoint gave no usable score (after retries)."""


@dataclass
class EndpointSpec:
    url: str
    api_key_env: str | None = None
    timeout: float = setting(30.0, above=0)
    retries: int = setting(2, minimum=0)
    backoff: float = setting(0.5, minimum=0)
    max_concurrency: int = setting(8, minimum=1)
    pass_threshold: float | None = None

    def validate(self, path: str) -> None:
        if not self.url.startswith(("http://", "https://")):
            raise ConfigError(f"{path}.url", f"expected an http:// or https:// URL, got {short_repr(self.url)}")


@register_grader("endpoint")
class EndpointGrader(Grader):
    """POST ``{"item", "sample"}`` to an HTTP endpoint, read ``{"score", "reason"?, "sub_scores"?}`` back."""

    def __init__(self, url: str, api_key_env: str | None = None, timeout: float = 30.0, retries: int = 2,
                 backoff: float = 0.5, max_concurrency: int = 8, pass_threshold: float | None = None):
        self.url, self.api_key_env, self.timeout, self.pass_threshold = url, api_key_env, timeout, pass_threshold
        self.wire = WireCounters()
        self.graded = 0
        self._retrier = Retrier(f"grading endpoint {url}", self.wire, EndpointError, timeout=timeout,
                                retries=retries, backoff=backoff, max_concurrency=max_concurrency,
                                hint=lambda resp: token_hint(resp, api_key_env, who="the endpoint"))

    @classmethod
    def from_spec(cls, spec: dict, path: str) -> "EndpointGrader":
        s = read_spec(EndpointSpec, spec, path)
        return cls(s.url, api_key_env=s.api_key_env, timeout=s.timeout, retries=s.retries, backoff=s.backoff,
                   max_concurrency=s.max_concurrency, pass_threshold=s.pass_threshold)

    def counters(self) -> dict[str, float]:
        """Wire counts (requests, retries, timeouts, connection and HTTP errors, bad replies, failed calls) and
        ``graded``: samples that got a score."""
        return {**{k: float(v) for k, v in self.wire.as_dict().items()}, "graded": float(self.graded)}

    async def agrade_samples(self, item: Item, samples: list[Sample]) -> list[Grade]:
        async with httpx.AsyncClient(timeout=self.timeout) as client:  # one per call: graders run under asyncio.run
            return list(await asyncio.gather(*(self._grade(client, item, s) for s in samples)))

    async def _grade(self, client: httpx.AsyncClient, item: Item, sample: Sample) -> Grade:
        # strict JSON (NaN -> null); a value JSON has no type for (a user's object in the row) goes as its str()
        body = dumps({"item": item, "sample": sample_with_answer(sample, leave_out=NOT_SENT)}, default=str).encode()
        try:
            reply = await self._retrier.post(lambda: client.post(
                self.url, content=body, headers={"Content-Type": "application/json", **auth_headers(self.api_key_env)}))
            grade = self._read(reply)
        except EndpointError as exc:
            self.wire.failed_calls += 1
            return Grade.abstain(error=str(exc))
        self.graded += 1
        return grade.mark_passed(self.pass_threshold)

    def _read(self, reply: Any) -> Grade:
        """The reply as a Grade; EndpointError (counted as a bad reply) when it is not ``{"score": number, ...}``."""
        problem = _reply_problem(reply)
        if problem:
            self.wire.bad_replies += 1
            raise EndpointError(f"grading endpoint {self.url}: {problem}")
        subs = reply.get("sub_scores") or {}
        return Grade(score=float(reply["score"]), reason=reply.get("reason"),
                     sub_scores={str(k): None if v is None else float(v) for k, v in subs.items()})



def _reply_problem(reply: Any) -> str | None:
    """Why a decoded reply is not a grade, or None."""
    if not isinstance(reply, dict):
        return f"expected a JSON object with a 'score', got {short_repr(reply)}"
    if "score" not in reply:
        return f"the reply has no 'score': {short_repr(reply)}"
    if not is_finite_number(reply["score"]):
        return f"'score' must be a finite number, got {short_repr(reply['score'])}"
    if reply.get("reason") is not None and not isinstance(reply["reason"], str):
        return f"'reason' must be a string, got {short_repr(reply['reason'])}"
    subs = reply.get("sub_scores")
    if subs is not None and not (isinstance(subs, dict)
                                 and all(v is None or is_finite_number(v) for v in subs.values())):
        return f"'sub_scores' must map names to numbers, got {short_repr(subs)}"
    return None
