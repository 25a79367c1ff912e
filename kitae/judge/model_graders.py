"""OpenAI's model graders on kitae's chat client: ``score_model`` (a number) and ``label_model`` (a label).

Both read OpenAI's spec fields, plus the client fields of kitae/judge/client.py (``base_url``, ...)::

    type: score_model
    model: gpt-4.1-mini
    base_url: https://api.openai.com/v1
    input:                                   # chat messages; content is a template
      - role: system
        content: "Score the answer from 0 to 1 against the reference."
      - role: user
        content: "Reference: {{item.reference_answer}}\\nAnswer: {{sample.output_text}}"
    range: [0, 1]                            # the reply is clipped to it
    pass_threshold: null                     # optional; sub_scores.passed = 1 when score >= it
    sampling_params: {temperature: 0, top_p: null, seed: null, max_completions_tokens: null,
                      reasoning_effort: null}

    type: label_model
    input: [...]                             # as above
    labels: [correct, partly_correct, wrong]
    passing_labels: [correct]                # score 1 for these, 0 for the others

Replies are asked for as JSON (``{"result": number}`` / ``{"label": one of labels}``, by JSON-schema
``response_format`` where the server has it) and read tolerantly: that JSON, a bare number, or text that is
exactly one label (any case) or names exactly one label. As in OpenAI, output that is not a number scores 0
(even when ``range`` starts above 0), and a label outside ``labels`` scores 0; both say why in ``reason`` and
count in ``counts``. A number that is NaN or ±infinity (``1e999``) is not clipped into ``range``: the
sample abstains with an error (counted as ``non_finite``). A call that fails after its retries abstains
(``score=None`` with the error).
``input`` items may carry OpenAI's ``type: message``; ``content`` takes OpenAI's text forms: a string, one
text part (``{type: input_text, text: ...}``; ``output_text`` and ``text`` too) or a list of strings and text
parts, joined with nothing between them. Image parts (``{type: input_image, image_url: TEMPLATE}``, or OpenAI
chat's ``{type: image_url, image_url: {url: TEMPLATE}}``) send images: the template renders to a path, a data URL or
an http(s) URL, or to a list of them (``"{{item.images}}"``: every image of the prompt row), and each path goes to
the model as a data URL (a missing or unreadable image makes the sample abstain). Audio parts are refused.
"""

from __future__ import annotations

import math
import re
import threading
from dataclasses import asdict, dataclass
from typing import Any

from kitae.data.images import ImageError, resolve_ref, to_data_url
from kitae.errors import ConfigError
from kitae.graders.base import Grade, Item, Sample
from kitae.graders.spec import SpecReader, _show, register_grader
from kitae.graders.template import Template, TemplateError
from kitae.judge.client import ChatClient, ChatError, ClientGrader, read_client
from kitae.judge.parse import JudgeOutputError, extract_json

ROLES = ("system", "developer", "user", "assistant")
_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")


@dataclass
class ModelGraderCounters:
    samples: int = 0
    scored: int = 0
    unreadable: int = 0  # non-numeric output / not one of the labels (scored 0)
    non_finite: int = 0  # a number that is NaN or ±infinity (abstained)
    abstained: int = 0  # the call failed
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_calls: int = 0
    last_error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class ModelGrader(ClientGrader):
    """A per-sample grader that renders ``input`` messages, calls the model and reads its reply."""

    schema_name = "reply"

    def __init__(self, client: ChatClient, messages: list[tuple[str, Template]], params: dict[str, Any]):
        self.client, self.messages, self.params = client, messages, params
        self.counts = ModelGraderCounters()
        self._lock = threading.Lock()

    def schema(self) -> dict[str, Any]:
        raise NotImplementedError

    def read(self, text: str) -> Grade:
        """The grade for a reply's text (never None: unreadable output scores 0)."""
        raise NotImplementedError

    async def agrade_sample(self, item: Item, sample: Sample) -> Grade:
        try:
            messages = [{"role": role, "content": t.render(item, sample)} for role, t in self.messages]
        except (TemplateError, ImageError) as exc:
            return Grade.abstain(error=str(exc))
        self._count(samples=1)
        try:
            reply = await self.client.chat(messages, schema=self.schema(), schema_name=self.schema_name, **self.params)
        except ChatError as exc:
            self._count(abstained=1)
            self.counts.last_error = str(exc)
            return Grade.abstain(error=f"model call failed: {exc}")
        if reply.cached:
            self._count(cached_calls=1)
        else:
            self._count(prompt_tokens=reply.usage.prompt_tokens, completion_tokens=reply.usage.completion_tokens)
        grade = self.read(reply.content)
        self._count(scored=1)
        return grade

    def _count(self, **deltas: int) -> None:
        with self._lock:
            for key, value in deltas.items():
                setattr(self.counts, key, getattr(self.counts, key) + value)

    def counters(self) -> dict[str, float]:
        """Cumulative numbers for a run's metrics (``grader/NAME/judge_tokens``, ...); log differences per step."""
        c = self.counts
        return {"judge_calls": float(c.samples), "judge_cached_calls": float(c.cached_calls),
                "judge_tokens": float(c.prompt_tokens + c.completion_tokens), "judge_unreadable": float(c.unreadable),
                "judge_abstained_samples": float(c.abstained), "judge_non_finite": float(c.non_finite)}


@register_grader("score_model")
class ScoreModelGrader(ModelGrader):
    """OpenAI's score_model: the model replies with a number, clipped to ``range``; non-numeric output scores 0."""

    schema_name = "score"

    def __init__(self, client: ChatClient, messages: list[tuple[str, Template]], params: dict[str, Any],
                 range: tuple[float, float] = (0.0, 1.0), pass_threshold: float | None = None):
        super().__init__(client, messages, params)
        self.range, self.pass_threshold = range, pass_threshold

    @classmethod
    def from_spec(cls, spec: dict[str, Any], path: str) -> "ScoreModelGrader":
        r = SpecReader(spec, path)
        client, messages, params = read_client(r).build(), read_input(r), read_sampling(r)
        grader = cls(client, messages, params, read_range(r), r.number("pass_threshold", None, nullable=True))
        r.finish()
        return grader

    def schema(self) -> dict[str, Any]:
        return {"type": "object", "properties": {"result": {"type": "number"}}, "required": ["result"],
                "additionalProperties": False}

    def read(self, text: str) -> Grade:
        value = read_number(text)
        if value is None:
            self._count(unreadable=1)
            return Grade(score=0.0, reason=f"non-numeric output scores 0: {_excerpt(text)}").mark_passed(
                self.pass_threshold)
        if not math.isfinite(value):  # clipping would make infinity the top score: abstain instead
            self._count(non_finite=1)
            return Grade.abstain(error=f"model said {value}, not a finite number").mark_passed(self.pass_threshold)
        lo, hi = self.range
        score = min(hi, max(lo, value))
        note = f"model said {value:g}" + (f", clipped to {score:g}" if score != value else "")
        return Grade(score=score, reason=note).mark_passed(self.pass_threshold)


@register_grader("label_model")
class LabelModelGrader(ModelGrader):
    """OpenAI's label_model: the model picks one of ``labels``; 1 for a passing label, else 0."""

    schema_name = "label"

    def __init__(self, client: ChatClient, messages: list[tuple[str, Template]], params: dict[str, Any],
                 labels: list[str], passing_labels: list[str]):
        super().__init__(client, messages, params)
        self.labels, self.passing = labels, set(passing_labels)

    @classmethod
    def from_spec(cls, spec: dict[str, Any], path: str) -> "LabelModelGrader":
        r = SpecReader(spec, path)
        client, messages, params = read_client(r).build(), read_input(r), read_sampling(r)
        labels = read_labels(r, "labels")
        passing = read_labels(r, "passing_labels")
        for i, label in enumerate(passing):
            if label not in labels:
                from kitae.registry import unknown_name_message

                raise ConfigError(f"{r.at('passing_labels')}[{i}]", unknown_name_message("label", label, labels))
        r.finish()
        return cls(client, messages, params, labels, passing)

    def schema(self) -> dict[str, Any]:
        return {"type": "object", "properties": {"label": {"type": "string", "enum": self.labels}},
                "required": ["label"], "additionalProperties": False}

    def read(self, text: str) -> Grade:
        label = read_label(text, self.labels)
        if label is None:
            self._count(unreadable=1)
            return Grade(score=0.0, reason=f"not one of the labels ({', '.join(self.labels)}): {_excerpt(text)}")
        return Grade(score=float(label in self.passing), reason=f"label: {label}")


# ---- reading replies ------------------------------------------------------------------------------
def read_number(text: str) -> float | None:
    """``{"result": 0.7}`` (or score/grade/rating), a bare number (``0.7``, ``"7"``, ``7.``); else None."""
    stripped = text.strip().strip('"').rstrip(".").strip()
    if _NUMBER.fullmatch(stripped):
        return float(stripped)
    try:
        data = extract_json(text)
    except JudgeOutputError:
        return None
    if isinstance(data, dict):
        for key in ("result", "score", "grade", "rating"):
            value = data.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return float(value)
            if isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
                return float(value)
    return None


def read_label(text: str, labels: list[str]) -> str | None:
    """``{"label": x}``, text that is exactly one label (any case), or text naming exactly one label."""
    by_lower = {label.lower(): label for label in labels}
    try:
        data = extract_json(text)
        if isinstance(data, dict) and isinstance(data.get("label"), str):
            return by_lower.get(data["label"].strip().lower())
    except JudgeOutputError:
        pass
    bare = text.strip().strip("\"'`.").strip().lower()
    if bare in by_lower:
        return by_lower[bare]
    named = [label for label in labels if re.search(rf"(?<!\w){re.escape(label)}(?!\w)", text, re.I)]
    return named[0] if len(named) == 1 else None


def _excerpt(text: str, n: int = 80) -> str:
    flat = " ".join(text.split())
    return repr(flat if len(flat) <= n else flat[: n - 3] + "...")


# ---- spec fields ----------------------------------------------------------------------------------
def read_input(r: SpecReader) -> list[tuple[str, Template]]:
    """``input``: OpenAI chat messages whose content is a template."""
    items = r.items("input")
    if not items:
        raise ConfigError(r.at("input"), "needs at least one message ({role: user, content: ...})")
    out = []
    for i, message in enumerate(items):
        path = f"{r.at('input')}[{i}]"
        m = SpecReader(message, path)
        if m.raw("type", "message") != "message":
            raise ConfigError(f"{path}.type", f"only 'message' items are supported, got {m.raw('type')!r}")
        role = m.choice("role", list(ROLES))
        raw = m.raw("content")
        if _has_image_part(raw):
            out.append((role, PartsTemplate(raw, f"{path}.content")))
        else:
            out.append((role, Template(read_content(raw, f"{path}.content"), f"{path}.content")))
        m.finish()
    return out


IMAGE_PARTS = ("input_image", "image_url")


def _has_image_part(content: Any) -> bool:
    parts = content if isinstance(content, list) else [content]
    return any(isinstance(p, dict) and p.get("type") in IMAGE_PARTS for p in parts)


class PartsTemplate:
    """Message content with image parts: renders to OpenAI chat content parts, text and ``image_url``."""

    def __init__(self, content: Any, path: str):
        self.parts: list[tuple[str, Template]] = []  # ("text" | "image", template)
        for j, part in enumerate(content if isinstance(content, list) else [content]):
            at = f"{path}[{j}]" if isinstance(content, list) else path
            if isinstance(part, dict) and part.get("type") in IMAGE_PARTS:
                p = SpecReader(part, at)
                p.raw("type")
                url = p.raw("image_url")
                if part["type"] == "image_url" and isinstance(url, dict):
                    u = SpecReader(url, f"{at}.image_url")
                    url = u.text("url")
                    u.raw("detail", None)
                    u.finish()
                if not isinstance(url, str) or not url:
                    raise ConfigError(f"{at}.image_url", "expected a template of an image path or URL, e.g. "
                                      "'{{item.images[0]}}' or '{{item.images}}'")
                p.raw("detail", None)  # OpenAI's detail level: accepted, not sent
                p.finish()
                self.parts.append(("image", Template(url, f"{at}.image_url")))
            else:
                self.parts.append(("text", Template(_part_text(part, at), at)))

    def render(self, item: Item, sample: Sample) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for kind, template in self.parts:
            if kind == "text":
                out.append({"type": "text", "text": template.render(item, sample)})
                continue
            value = template.value(item, sample)
            for ref in value if isinstance(value, list) else [value]:
                out.append({"type": "image_url", "image_url": {"url": image_url(ref)}})
        return out


def image_url(ref: Any) -> str:
    """What the model server is sent for an image: a web URL as is, anything else as a data URL."""
    if not isinstance(ref, str):
        raise ImageError(f"an image part rendered to {type(ref).__name__}, not an image path or URL")
    if ref.startswith(("http://", "https://")):
        return ref
    return to_data_url(ref if ref.startswith("data:") else resolve_ref(ref, None))


TEXT_PARTS = ("input_text", "output_text", "text")


def read_content(content: Any, path: str) -> str:
    """OpenAI message content as one template text: a string, a text part, or a list of strings and text parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        return _part_text(content, path)
    if isinstance(content, list) and content:
        return "".join(_part_text(p, f"{path}[{j}]") for j, p in enumerate(content))
    raise ConfigError(path, f"expected a string (a template), a {{type: input_text, text: ...}} part or a list of "
                      f"them, got {_show(content)}")


def _part_text(part: Any, path: str) -> str:
    if isinstance(part, str):
        return part
    if not isinstance(part, dict):
        raise ConfigError(path, f"expected a string or a {{type: input_text, text: ...}} part, got {_show(part)}")
    kind = part.get("type", "input_text")
    if kind not in TEXT_PARTS:
        raise ConfigError(f"{path}.type", f"only text parts ({', '.join(TEXT_PARTS)}) are supported, got {kind!r}")
    p = SpecReader(part, path)
    text = p.text("text")
    p.finish()
    return text


def read_sampling(r: SpecReader) -> dict[str, Any]:
    """``sampling_params`` (OpenAI's keys; ``max_completions_tokens`` is OpenAI's spelling) -> request fields."""
    raw = r.mapping("sampling_params", {})
    s = SpecReader(raw, r.at("sampling_params"))
    params = {"temperature": s.number("temperature", None, minimum=0, nullable=True),
              "top_p": s.number("top_p", None, minimum=0, maximum=1, nullable=True),
              "seed": None if s.raw("seed", None) is None else s.integer("seed"),
              "reasoning_effort": s.text("reasoning_effort", None)}
    limits = [s.raw(k, None) for k in ("max_completions_tokens", "max_completion_tokens", "max_tokens")]
    limit = next((v for v in limits if v is not None), None)
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ConfigError(r.at("sampling_params.max_completions_tokens"), f"expected a positive integer, got {limit!r}")
    params["max_tokens"] = limit
    s.finish()
    return params


def read_range(r: SpecReader) -> tuple[float, float]:
    raw = r.raw("range", [0, 1])
    ok = isinstance(raw, list) and len(raw) == 2 and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in raw)
    if not ok or raw[0] >= raw[1]:
        raise ConfigError(r.at("range"), f"expected [low, high] with low < high, got {raw!r}")
    return float(raw[0]), float(raw[1])


def read_labels(r: SpecReader, key: str) -> list[str]:
    labels = r.items(key)
    if not labels or not all(isinstance(x, str) and x.strip() for x in labels):
        raise ConfigError(r.at(key), f"expected a non-empty list of label strings, got {labels!r}")
    if len(set(labels)) != len(labels):
        raise ConfigError(r.at(key), f"labels repeat: {labels!r}")
    return labels
