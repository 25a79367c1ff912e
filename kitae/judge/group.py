"""The hosted RFT grader guide's group judge (spec type ``judge``): one LLM call reads the conversation, the reference answer and
all N samples together and scores each sample on every criterion; the scores are scaled to 0-1.

    type: judge
    model: kitae-tiny-base                 # client fields: kitae/judge/client.py (model, base_url, api_key_env,
    base_url: http://127.0.0.1:8000/v1     #   timeout, retries, backoff, max_concurrency, cache, cache_dir, ...)
    criteria:                              # default: the guide's four, weight 1 each
      correctness: {weight: 2, description: "Agrees with the reference answer; nothing invented."}
      helpfulness: 1                       # a weight (the default description)
      tone: "Polite, in the user's language."   # a description (weight 1)
    scale: [1, 5]                          # integers; scaled to 0-1 as (value - 1) / (5 - 1)
    rubric: ""                             # extra instructions appended to the judge's system prompt
    calls: 1                               # k calls with different sample orders, averaged (2 = order + reversed;
                                           #   never more calls than the group has distinct orders)
    parse_retries: 2                       # extra calls after an invalid reply, then the group abstains
    temperature: 0.0
    seed: null                             # sent to servers that support it
    max_tokens: null                       # default: 256 + 160 per sample
    shuffle: true                          # shuffle the sample order per call (mapped back)
    reference: "{{item.reference_answer}}" # null: no reference answer in the prompt
    input: "{{sample.output_text}}"        # what of each sample the judge reads (this default: an agent's episode
                                           #   is its whole transcript, tool output quoted as untrusted)
    max_sample_chars: 6000                 # longer samples are cut (and the cut is said)
    images: true                           # show the judge the prompt's images (item.images) as image parts
    response_format: auto                  # auto | json_schema | json_object | none (client.py)

What a grade holds: ``score`` = Σ wᶜ·scaledᶜ / Σ wᶜ (weight 0 logs a criterion without counting it),
``sub_scores`` = each criterion's scaled score (mean over the calls) plus ``order_spread`` (max - min of the
score across the calls) when calls >= 2, ``reason`` = the judge's sentence.

Departures from a plain "ask the judge": the call order, delimiters and shuffle are drawn from a seeded hash of
the group's content (not from global randomness), so re-grading the same group repeats the same requests
and the response cache answers them for free (replies that failed the checks are dropped from the cache);
a retry after an invalid reply changes the delimiters and tells the judge why the last reply was rejected.
The sample order of call c is a shuffle P for c = 0, P reversed for c = 1, and rotations of P (and their
reversals) after that, so the k orders differ as much as they can.

Nothing raises out of the grader: a failed or invalid call is retried, then the group abstains
(``Grade(score=None, error=...)``) and :attr:`counts` says why (``invalid`` by kind, ``failed_calls``,
``abstained_samples``). Token usage per call is kept in ``counts`` and the last calls in ``call_log``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import threading
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Any

from kitae.config import from_dict, setting, short_repr
from kitae.data.images import ImageError, to_data_url
from kitae.errors import ConfigError
from kitae.graders.base import Grade, Item, Sample
from kitae.graders.spec import read_spec, register_grader
from kitae.graders.template import Template, TemplateError
from kitae.judge.client import ChatClient, ChatError, ClientGrader, ClientSpec
from kitae.judge.parse import KINDS, Entry, JudgeOutputError, parse_judgement
from kitae.judge.prompt import (DEFAULT_CRITERIA, DEFAULT_NAMES, Criterion, clip_text, image_parts, make_tag,
                                render_conversation, render_transcript, reply_schema, sample_ids, system_prompt,
                                user_prompt)


DEFAULT_INPUT = "{{sample.output_text}}"  # what the judge reads of a sample; an agent's episode: its transcript


class Criteria(tuple):
    """Field type of ``criteria``: a list of names or a map name -> weight | description | {weight, description};
    a name of the guide's four keeps its description unless given."""

    @classmethod
    def from_config(cls, value: Any, path: str) -> "Criteria":
        if isinstance(value, list):
            value = {name: {} for name in value}
        if not isinstance(value, dict) or not value:
            raise ConfigError(path, "expected a non-empty list of names or a map name -> weight/description, "
                              f"got {short_repr(value)}")
        criteria = cls(_criterion(str(name), v, f"{path}.{name}") for name, v in value.items())
        if not any(c.weight > 0 for c in criteria):
            raise ConfigError(path, "every weight is 0; give at least one criterion a positive weight")
        return criteria


@dataclass
class CriterionSpec:
    weight: float | None = setting(None, minimum=0)  # default: 1, or the guide's
    description: str | None = None


def _criterion(name: str, value: Any, path: str) -> Criterion:
    if not name.isidentifier():
        raise ConfigError(path, f"a criterion name must be a plain word (letters, digits, _), got {name!r}")
    if isinstance(value, bool):
        raise ConfigError(path, f"expected a weight, a description or a mapping, got {value!r}")
    if isinstance(value, (int, float)):
        value = {"weight": value}
    elif isinstance(value, str):
        value = {"description": value}
    spec = from_dict(CriterionSpec, value, path)
    default = DEFAULT_NAMES.get(name, Criterion(name, 1.0, ""))
    description = default.description if spec.description is None else spec.description
    if not description:
        raise ConfigError(f"{path}.description", f"missing; say what '{name}' means to the judge")
    return Criterion(name, default.weight if spec.weight is None else spec.weight, description)


@dataclass(kw_only=True)
class JudgeConfig(ClientSpec):
    """The fields of ``type: judge`` (the module docstring): the judge's own and the chat client's."""

    criteria: Criteria = DEFAULT_CRITERIA
    scale: tuple[int, int] = (1, 5)
    rubric: str = ""
    calls: int = setting(1, minimum=1)
    parse_retries: int = setting(2, minimum=0)
    temperature: float | None = setting(0.0, minimum=0)
    seed: int | None = None
    max_tokens: int | None = setting(None, minimum=1)
    shuffle: bool = True
    reference: Template | None = Template("{{item.reference_answer}}")  # null: no reference answer
    input: Template = Template(DEFAULT_INPUT)
    max_sample_chars: int = setting(6000, minimum=0)
    images: bool = True

    def validate(self, path: str) -> None:
        super().validate(path)
        lo, hi = self.scale
        if not 0 < hi - lo <= 100:
            raise ConfigError(f"{path}.scale", "expected [low, high], two integers with low < high (at most 100 "
                              f"apart), got {list(self.scale)}")

    def tokens_for(self, n: int) -> int:
        return self.max_tokens or 256 + 160 * n


@dataclass
class JudgeCounters:
    """Outcomes of a judge grader; ``calls`` counts every request made, retries and cache hits included."""

    groups: int = 0
    samples: int = 0
    calls: int = 0
    cached_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    invalid: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    parse_retries: int = 0  # calls repeated after an invalid reply
    failed_calls: int = 0  # calls given up (a transport failure, or invalid after every retry)
    abstained_groups: int = 0
    abstained_samples: int = 0
    order_groups: int = 0  # groups judged under 2+ orders
    order_spread_sum: float = 0.0  # Σ over those groups of the mean |score spread| across orders
    order_top_changes: int = 0  # ... of which the best sample was not the same under every order
    last_error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["invalid_outputs"] = sum(self.invalid.values())
        out["order_sensitivity"] = self.order_spread_sum / self.order_groups if self.order_groups else None
        return out


@dataclass
class CallRecord:
    """One request of the judge (kept in ``call_log``)."""

    group: str  # the group's content hash (first 12 hex digits)
    call: int
    attempt: int
    prompt_tokens: int
    completion_tokens: int
    cached: bool
    outcome: str  # "ok", an invalid-output kind, or "failed"


@dataclass
class CallResult:
    """One call's entries in the samples' original order, or why it failed."""

    order: list[int]
    entries: list[Entry] | None = None
    error: str | None = None


@dataclass
class Group:
    """What one group's calls share: the texts, the prompt parts and the seed of their randomness."""

    key: str
    conversation: str
    reference: str | None
    texts: list[str]
    images: list[str] = field(default_factory=list)  # data URLs of the conversation's images, in order
    transcripts: bool = False  # some text is an agent episode's transcript (the system prompt says how to read it)


@register_grader("judge")
class GroupJudgeGrader(ClientGrader):
    """The hosted RFT grader guide's LLM judge: all N samples in one call, scored 1-5 per criterion, scaled to 0-1."""

    needs_group = True

    def __init__(self, client: ChatClient, config: JudgeConfig | None = None):
        self.client, self.config = client, config if config is not None else JudgeConfig()
        self.counts = JudgeCounters()
        self.call_log: deque[CallRecord] = deque(maxlen=1000)
        self._lock = threading.Lock()

    # ---- building -------------------------------------------------------------------------------
    @classmethod
    def from_spec(cls, spec: dict[str, Any], path: str) -> "GroupJudgeGrader":
        config = read_spec(JudgeConfig, spec, path)
        return cls(config.build(), config)

    # ---- grading --------------------------------------------------------------------------------
    async def agrade_samples(self, item: Item, samples: list[Sample]) -> list[Grade]:
        if not samples:
            return []
        self._count(groups=1, samples=len(samples))
        try:
            group = self.prepare(item, samples)
        except (TemplateError, ImageError) as exc:
            return self._abstain(len(samples), str(exc))
        orders = []  # one call per distinct order (a group of one has a single order)
        for c in range(self.config.calls):
            if (order := self.order(group, c)) not in orders:
                orders.append(order)
        results = await asyncio.gather(*(self.judge_once(group, order, c) for c, order in enumerate(orders)))
        done = [r for r in results if r.entries is not None]
        if not done:
            return self._abstain(len(samples), "; ".join(dict.fromkeys(r.error or "" for r in results)))
        return self.combine(done, len(samples))

    def prepare(self, item: Item, samples: list[Sample]) -> Group:
        """Render the texts; raises TemplateError when a template path is missing from this row."""
        cfg = self.config
        episodes = cfg.input.text == DEFAULT_INPUT and any(isinstance(s.get("messages"), list) for s in samples)
        texts = [self.sample_text(item, s, episodes) for s in samples]
        reference = None if cfg.reference is None else cfg.reference.render(item, {})
        conversation = render_conversation(item)
        images = [to_data_url(ref) for ref in item.get("images") or []] if cfg.images else []
        blob = json.dumps([conversation, reference, texts, cfg.seed, images], ensure_ascii=False)
        return Group(hashlib.sha256(blob.encode("utf-8")).hexdigest(), conversation, reference, texts, images,
                     episodes)

    def sample_text(self, item: Item, sample: Sample, episodes: bool) -> str:
        """What the judge reads of a sample: ``input`` rendered; with the default input, an agent's episode is its
        whole transcript (kitae.judge.prompt.render_transcript), tool output quoted as untrusted."""
        cfg = self.config
        text = cfg.input.render(item, sample)
        if episodes and isinstance(sample.get("messages"), list):
            return render_transcript(sample, text, cfg.max_sample_chars)
        return clip_text(text, cfg.max_sample_chars)

    def order(self, group: Group, call: int) -> list[int]:
        """The display order of call ``call``: original index of the sample shown at each position."""
        n = len(group.texts)
        base = list(range(n))
        if self.config.shuffle:
            random.Random(f"{group.key}:order").shuffle(base)
        shift = (call // 2) * max(1, n // max(1, (self.config.calls + 1) // 2))
        rotated = base[shift % n :] + base[: shift % n] if n else base
        return rotated[::-1] if call % 2 else rotated

    async def judge_once(self, group: Group, order: list[int], call: int = 0) -> CallResult:
        """One call (with its retries on invalid output) showing the samples in ``order``."""
        cfg = self.config
        shown = [group.texts[i] for i in order]
        ids = sample_ids(len(shown))
        names = [c.name for c in cfg.criteria]
        schema = reply_schema(len(shown), cfg.criteria, cfg.scale)
        system = system_prompt(cfg.criteria, cfg.scale, cfg.rubric, transcripts=group.transcripts)
        feedback: str | None = None
        for attempt in range(cfg.parse_retries + 1):
            tag = make_tag(random.Random(f"{group.key}:{call}:{attempt}"), shown + [group.conversation])
            text = user_prompt(group.conversation, group.reference, shown, tag, feedback)
            user = [{"type": "text", "text": text}] + image_parts(group.images) if group.images else text
            messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
            try:
                reply = await self.client.chat(messages, schema=schema, schema_name="judgement",
                                               temperature=cfg.temperature, seed=cfg.seed,
                                               max_tokens=cfg.tokens_for(len(shown)))
            except ChatError as exc:
                self._record(group, call, attempt, None, "failed")
                return self._failed(order, f"judge call failed: {exc}")
            try:
                entries = parse_judgement(reply.content, ids, names, cfg.scale)
            except JudgeOutputError as exc:
                self._record(group, call, attempt, reply, exc.kind)
                self.client.forget(reply)  # only valid judgements are reused; a re-grade asks again
                feedback = str(exc)
                if attempt < cfg.parse_retries:
                    self._count(parse_retries=1)
                continue
            self._record(group, call, attempt, reply, "ok")
            back = [entries[ids[order.index(i)]] for i in range(len(order))]
            return CallResult(order=order, entries=back)
        return self._failed(order, f"invalid judge reply after {cfg.parse_retries + 1} attempts: {feedback}")

    def combine(self, results: list[CallResult], n: int) -> list[Grade]:
        """Average the scaled criteria over the calls; score = weighted mean of the criteria."""
        entries = [r.entries for r in results if r.entries is not None]  # [call][sample]
        per_call = [[self.score_entry(e) for e in call] for call in entries]  # [call][sample] -> (score, scaled)
        grades = [self._grade([call[i] for call in per_call], [call[i].reason for call in entries])
                  for i in range(n)]
        if len(per_call) > 1:
            self._note_order(per_call)
        return grades

    def _grade(self, scored: list[tuple[float, dict[str, float]]], reasons: list[str]) -> Grade:
        """One sample's grade from its (score, scaled criteria) under each call."""
        subs = {c.name: sum(s[c.name] for _, s in scored) / len(scored) for c in self.config.criteria}
        sub_scores: dict[str, float | None] = dict(subs)
        if len(scored) > 1:
            totals = [total for total, _ in scored]
            sub_scores["order_spread"] = max(totals) - min(totals)
        reason = " / ".join(dict.fromkeys(r for r in reasons if r)) or None
        return Grade(score=self.weighted(subs), sub_scores=sub_scores, reason=reason)

    def score_entry(self, entry: Entry) -> tuple[float, dict[str, float]]:
        lo, hi = self.config.scale
        scaled = {name: (v - lo) / (hi - lo) for name, v in entry.values.items()}
        return self.weighted(scaled), scaled

    def weighted(self, scaled: dict[str, float]) -> float:
        total = sum(c.weight for c in self.config.criteria)
        return sum(c.weight * scaled[c.name] for c in self.config.criteria) / total

    # ---- bookkeeping ----------------------------------------------------------------------------
    def _count(self, **deltas: Any) -> None:
        with self._lock:
            for key, value in deltas.items():
                setattr(self.counts, key, getattr(self.counts, key) + value)

    def _record(self, group: Group, call: int, attempt: int, reply: Any, outcome: str) -> None:
        p, c = (reply.usage.prompt_tokens, reply.usage.completion_tokens) if reply is not None else (0, 0)
        cached = bool(reply is not None and reply.cached)
        with self._lock:
            self.counts.calls += 1
            self.counts.cached_calls += cached
            if not cached:
                self.counts.prompt_tokens += p
                self.counts.completion_tokens += c
            if outcome in self.counts.invalid:
                self.counts.invalid[outcome] += 1
            self.call_log.append(CallRecord(group.key[:12], call, attempt, p, c, cached, outcome))

    def _failed(self, order: list[int], error: str) -> CallResult:
        with self._lock:
            self.counts.failed_calls += 1
            self.counts.last_error = error
        return CallResult(order=order, error=error)

    def _abstain(self, n: int, error: str) -> list[Grade]:
        with self._lock:
            self.counts.abstained_groups += 1
            self.counts.abstained_samples += n
            self.counts.last_error = error
        return [Grade.abstain(error=error) for _ in range(n)]

    def _note_order(self, per_call: list[list[tuple[float, dict[str, float]]]]) -> None:
        n = len(per_call[0])
        spread = sum(max(c[i][0] for c in per_call) - min(c[i][0] for c in per_call) for i in range(n)) / n
        tops = {max(range(n), key=lambda i: call[i][0]) for call in per_call}
        with self._lock:
            self.counts.order_groups += 1
            self.counts.order_spread_sum += spread
            self.counts.order_top_changes += len(tops) > 1

    def counters(self) -> dict[str, float]:
        """Cumulative numbers for a run's metrics (``grader/NAME/judge_tokens``, ...); log differences per step."""
        c = self.counts
        out = {"judge_calls": c.calls, "judge_cached_calls": c.cached_calls, "judge_prompt_tokens": c.prompt_tokens,
               "judge_completion_tokens": c.completion_tokens, "judge_tokens": c.prompt_tokens + c.completion_tokens,
               "judge_invalid_outputs": sum(c.invalid.values()), "judge_failed_calls": c.failed_calls,
               "judge_abstained_samples": c.abstained_samples}
        if c.order_groups:
            out["judge_order_sensitivity"] = c.order_spread_sum / c.order_groups
        return {k: float(v) for k, v in out.items()}
