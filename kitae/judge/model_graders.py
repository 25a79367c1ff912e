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
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from kitae.config import from_dict, setting, short_repr
from kitae.data.images import ImageError, resolve_ref, to_data_url
from kitae.errors import ConfigError
from kitae.graders.base import Grade, Item, Sample
from kitae.graders.spec import read_spec, register_grader
from kitae.graders.template import Template, TemplateError
from kitae.judge.client import ChatClient, ChatError, ClientGrader, ClientSpec
from kitae.judge.parse import JudgeOutputError, extract_json
from kitae.registry import unknown_name_message

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

    def __init__(self, client: ChatClient, messages: list[InputMessage], params: dict[str, Any]):
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
            messages = [{"role": m.role, "content": m.content.render(item, sample)} for m in self.messages]
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

    def __init__(self, client: ChatClient, messages: list[InputMessage], params: dict[str, Any],
                 range: tuple[float, float] = (0.0, 1.0), pass_threshold: float | None = None):
        super().__init__(client, messages, params)
        self.range, self.pass_threshold = range, pass_threshold

    @classmethod
    def from_spec(cls, spec: dict[str, Any], path: str) -> "ScoreModelGrader":
        s = read_spec(ScoreModelSpec, spec, path)
        return cls(s.build(), s.input, s.sampling_params.request_fields(), s.range, s.pass_threshold)

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

    def __init__(self, client: ChatClient, messages: list[InputMessage], params: dict[str, Any],
                 labels: list[str], passing_labels: list[str]):
        super().__init__(client, messages, params)
        self.labels, self.passing = labels, set(passing_labels)

    @classmethod
    def from_spec(cls, spec: dict[str, Any], path: str) -> "LabelModelGrader":
        s = read_spec(LabelModelSpec, spec, path)
        return cls(s.build(), s.input, s.sampling_params.request_fields(), s.labels, s.passing_labels)

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
class MessageContent:
    """Field type of a message's ``content`` (OpenAI's forms, module docstring), checked when the spec is read.

    Renders to text, or, when the content has image parts, to OpenAI chat content parts (text and ``image_url``).
    """

    def __init__(self, parts: list[tuple[str, Template]], with_images: bool):
        self.parts, self.with_images = parts, with_images  # ("text" | "image", template)

    @classmethod
    def from_config(cls, value: Any, path: str) -> "MessageContent":
        if isinstance(value, str):
            return cls([("text", Template(value, path))], False)
        if isinstance(value, dict):
            return cls([_part(value, path)], _is_image(value))
        if isinstance(value, list) and value:
            parts = [_part(p, f"{path}[{j}]") for j, p in enumerate(value)]
            return cls(parts, any(_is_image(p) for p in value))
        raise ConfigError(path, "expected a string (a template), a {type: input_text, text: ...} part or a list of "
                          f"them, got {short_repr(value)}")

    def render(self, item: Item, sample: Sample) -> str | list[dict[str, Any]]:
        if not self.with_images:
            return "".join(template.render(item, sample) for _, template in self.parts)
        out: list[dict[str, Any]] = []
        for kind, template in self.parts:
            if kind == "text":
                out.append({"type": "text", "text": template.render(item, sample)})
                continue
            value = template.value(item, sample)
            for ref in value if isinstance(value, list) else [value]:
                out.append({"type": "image_url", "image_url": {"url": image_url(ref)}})
        return out


@dataclass
class TextPart:
    text: Template
    type: str = "input_text"


@dataclass
class ImageURL:
    """An image part's ``image_url``: a template of an image path or URL (or of a list of them), or OpenAI chat's
    ``{url: TEMPLATE, detail: ...}``."""

    url: Template
    detail: str | None = None  # OpenAI's detail level: accepted, not sent

    @classmethod
    def from_config(cls, value: Any, path: str) -> "ImageURL":
        if not isinstance(value, (str, dict)):
            raise ConfigError(path, f"expected a template of an image path or URL, e.g. '{{{{item.images[0]}}}}' "
                              f"or '{{{{item.images}}}}', got {short_repr(value)}")
        return from_dict(cls, {"url": value} if isinstance(value, str) else value, path)

    def validate(self, path: str) -> None:
        if not self.url.text:
            raise ConfigError(path, "expected a template of an image path or URL, e.g. '{{item.images[0]}}' or "
                              "'{{item.images}}'")


@dataclass
class ImagePart:
    """``{type: input_image, image_url: TEMPLATE}`` or OpenAI chat's ``{type: image_url, image_url: {url: ...}}``."""

    image_url: ImageURL
    type: str = "input_image"
    detail: str | None = None  # accepted, not sent


PARTS = {"input_text": TextPart, "output_text": TextPart, "text": TextPart, "input_image": ImagePart,
         "image_url": ImagePart}


def _is_image(part: Any) -> bool:
    return isinstance(part, dict) and PARTS.get(part.get("type")) is ImagePart


def _part(part: Any, path: str) -> tuple[str, Template]:
    """One content part: a string or a text part (a template), or an image part (a template of images)."""
    if isinstance(part, str):
        return "text", Template(part, path)
    if not isinstance(part, dict):
        raise ConfigError(path, f"expected a string or a {{type: input_text, text: ...}} part, got {short_repr(part)}")
    kind = part.get("type", "input_text")
    if kind not in PARTS:
        raise ConfigError(f"{path}.type", f"got {short_repr(kind)}; expected one of {', '.join(PARTS)} (the judge "
                          "client sends text and images)")
    read = from_dict(PARTS[kind], part, path)
    return ("image", read.image_url.url) if isinstance(read, ImagePart) else ("text", read.text)


def image_url(ref: Any) -> str:
    """What the model server is sent for an image: a web URL as is, anything else as a data URL."""
    if not isinstance(ref, str):
        raise ImageError(f"an image part rendered to {type(ref).__name__}, not an image path or URL")
    if ref.startswith(("http://", "https://")):
        return ref
    return to_data_url(ref if ref.startswith("data:") else resolve_ref(ref, None))


@dataclass
class InputMessage:
    """One ``input`` item: an OpenAI chat message whose content is a template."""

    role: Literal["system", "developer", "user", "assistant"]
    content: MessageContent
    type: Literal["message"] = "message"


@dataclass
class SamplingParams:
    """``sampling_params``, OpenAI's keys (``max_completions_tokens`` is OpenAI's spelling of the token limit)."""

    temperature: float | None = setting(None, minimum=0)
    top_p: float | None = setting(None, minimum=0, maximum=1)
    seed: int | None = None
    reasoning_effort: str | None = None
    max_completions_tokens: int | None = setting(None, minimum=1)
    max_completion_tokens: int | None = setting(None, minimum=1)
    max_tokens: int | None = setting(None, minimum=1)

    def request_fields(self) -> dict[str, Any]:
        limits = (self.max_completions_tokens, self.max_completion_tokens, self.max_tokens)
        return {"temperature": self.temperature, "top_p": self.top_p, "seed": self.seed,
                "reasoning_effort": self.reasoning_effort,
                "max_tokens": next((v for v in limits if v is not None), None)}


@dataclass(kw_only=True)
class ModelGraderSpec(ClientSpec):
    """The fields score_model and label_model share: the chat client's, ``input`` and ``sampling_params``."""

    input: list[InputMessage]
    sampling_params: SamplingParams = field(default_factory=SamplingParams)

    def validate(self, path: str) -> None:
        super().validate(path)
        if not self.input:
            raise ConfigError(f"{path}.input", "needs at least one message ({role: user, content: ...})")


@dataclass(kw_only=True)
class ScoreModelSpec(ModelGraderSpec):
    range: tuple[float, float] = (0.0, 1.0)  # the reply is clipped to it
    pass_threshold: float | None = None

    def validate(self, path: str) -> None:
        super().validate(path)
        if self.range[0] >= self.range[1]:
            raise ConfigError(f"{path}.range", f"expected [low, high] with low < high, got {list(self.range)}")


@dataclass(kw_only=True)
class LabelModelSpec(ModelGraderSpec):
    labels: list[str]
    passing_labels: list[str]  # score 1 for these, 0 for the others

    def validate(self, path: str) -> None:
        super().validate(path)
        for key in ("labels", "passing_labels"):
            labels = getattr(self, key)
            if not labels or not all(label.strip() for label in labels):
                raise ConfigError(f"{path}.{key}",
                                  f"expected a non-empty list of label strings, got {short_repr(labels)}")
            if len(set(labels)) != len(labels):
                raise ConfigError(f"{path}.{key}", f"labels repeat: {short_repr(labels)}")
        for i, label in enumerate(self.passing_labels):
            if label not in self.labels:
                raise ConfigError(f"{path}.passing_labels[{i}]", unknown_name_message("label", label, self.labels))
