"""JSON-schema constrained decoding for ``kitae serve model``: the output always validates against the schema.

The method is the one of jsonformer (github.com/1rgs/jsonformer), not a grammar-compiled token mask (as in
outlines or xgrammar): the decoder writes the JSON structure itself (braces, keys, commas, quotes) and lets
the model choose only the values, token by token, from the tokens that keep the value valid:

- ``enum`` / ``const`` / ``boolean`` / small integer ranges (``minimum``..``maximum``, at most 32 values): a
  walk down the trie of the options' tokens, so the model picks one of them;
- ``integer`` / ``number``: digits (one ``-``, one ``.`` for numbers) until the model picks a token that ends
  a number; the value is clipped to ``minimum``/``maximum``;
- ``string``: any token without a quote, a backslash, a control character or a special token, until the
  model picks a token with a quote; ``minLength``/``maxLength`` are kept; at most ``max_string_tokens``;
- ``object``: every property, in the schema's order (required or not); ``array``: ``minItems`` items (at
  least one when ``maxItems`` allows), then the model chooses between ``,`` and ``]`` up to ``maxItems``
  (16 when unbounded); ``prefixItems`` give positional schemas;
- ``$ref`` to ``#/$defs/...`` or ``#/definitions/...``; ``anyOf`` takes its first branch; a ``type`` list
  takes its first non-null type; ``{}`` is generated as a string.

Everything else (``pattern``, ``format``, ``oneOf``, ``allOf``, ``not``, exclusive bounds, ...) makes
:func:`supported` False, and the server falls back to sampling and validating (kitae/serving/server.py).
Departures: ``max_tokens`` bounds the free strings, not the structure, which is always closed; forced text is
tokenized on its own, so the model may see a tokenization it would not have produced; the model never sees
a clipped number's clipped form.
"""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

import torch

from kitae.rollout.base import SamplingParams
from kitae.rollout.hf import sample_next

_KNOWN = {"type", "properties", "required", "additionalProperties", "items", "prefixItems", "minItems", "maxItems",
          "enum", "const", "minimum", "maximum", "minLength", "maxLength", "description", "title", "$defs",
          "definitions", "$ref", "anyOf", "default", "$schema", "$id", "examples", "strict", "name"}
_TYPES = {"object", "array", "string", "integer", "number", "boolean", "null", "enum"}
_INT_PREFIX, _INT_DONE = re.compile(r"-?\d*"), re.compile(r"-?\d+")
_NUM_PREFIX, _NUM_DONE = re.compile(r"-?(\d+(\.\d*)?)?"), re.compile(r"-?\d+(\.\d+)?")
ENUM_RANGE = 32
UNBOUNDED_ITEMS = 16


class UnsupportedSchema(ValueError):
    """A schema this decoder cannot guarantee; the server validates sampled text instead."""


def resolve(schema: Any, root: dict[str, Any]) -> Any:
    """Follow a local ``$ref`` (``#/$defs/X``, ``#/definitions/X``)."""
    seen = 0
    while isinstance(schema, dict) and "$ref" in schema:
        ref = schema["$ref"]
        if not isinstance(ref, str) or not ref.startswith("#/"):
            raise UnsupportedSchema(f"only local $ref is supported, got {ref!r}")
        target: Any = root
        for part in ref[2:].split("/"):
            if not isinstance(target, dict) or part not in target:
                raise UnsupportedSchema(f"$ref {ref!r} points nowhere")
            target = target[part]
        schema, seen = target, seen + 1
        if seen > 32:
            raise UnsupportedSchema("$ref cycle")
    return schema


def supported(schema: Any, root: dict[str, Any] | None = None, depth: int = 0) -> bool:
    """Whether :class:`ConstrainedDecoder` can generate this schema (see the module docstring)."""
    try:
        _check(schema, root if root is not None else schema, depth)
    except UnsupportedSchema:
        return False
    return True


def _check(schema: Any, root: Any, depth: int) -> None:
    if depth > 24:
        raise UnsupportedSchema("nested too deep (or recursive)")
    schema = resolve(schema, root)
    if schema is True or schema == {}:
        return
    if not isinstance(schema, dict):
        raise UnsupportedSchema(f"not a schema: {schema!r}")
    unknown = set(schema) - _KNOWN
    if unknown:
        raise UnsupportedSchema(f"unsupported keywords: {sorted(unknown)}")
    if "anyOf" in schema:
        _check(schema["anyOf"][0], root, depth + 1)
        return
    kind = value_type(schema)
    if kind not in _TYPES:
        raise UnsupportedSchema(f"unsupported type {kind!r}")
    for sub in (schema.get("properties") or {}).values():
        _check(sub, root, depth + 1)
    for sub in schema.get("prefixItems") or []:
        _check(sub, root, depth + 1)
    if isinstance(schema.get("items"), dict):
        _check(schema["items"], root, depth + 1)


def value_type(schema: dict[str, Any]) -> str:
    if "const" in schema or "enum" in schema:
        return "enum"
    kind = schema.get("type", "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    return kind


@dataclass
class Vocab:
    """Per-tokenizer token classes (computed once per decoder)."""

    size: int  # the logits' width
    texts: list[str]
    in_string: torch.Tensor  # [V] bool: may appear inside a JSON string
    quote: torch.Tensor  # [V] bool: contains a double quote (ends a string)
    ends_value: torch.Tensor  # [V] bool: starts with , } ] or white space (ends a number or an enum option)
    numeric: list[int] = field(default_factory=list)  # ids of tokens made of 0-9 . -


def build_vocab(tokenizer: Any, size: int) -> Vocab:
    n = min(size, len(tokenizer))
    texts = [tokenizer.decode([i]) for i in range(n)] + [""] * (size - n)
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    in_string, quote, ends = (torch.zeros(size, dtype=torch.bool) for _ in range(3))
    numeric = []
    for i, text in enumerate(texts[:n]):
        if i in special or not text:
            continue
        if '"' in text:
            quote[i] = True
        elif "\\" not in text and not any(ord(ch) < 0x20 for ch in text):
            in_string[i] = True
        if text[0] in ",}] \n\t":
            ends[i] = True
        if re.fullmatch(r"[0-9.\-]+", text):
            numeric.append(i)
    return Vocab(size, texts, in_string, quote, ends, numeric)


class ConstrainedDecoder:
    """``generate(prompt_ids, schema, sampling, max_tokens) -> (json_text, tokens_fed)``: one sample per call,
    not batched. ``model_lock`` (when given) is held around each forward pass, so decodes on several threads and
    kitae serve model's batching scheduler take turns with the model, one forward pass at a time."""

    def __init__(self, model: Any, tokenizer: Any, max_string_tokens: int = 64, model_lock: Any = None):
        self.model, self.tokenizer, self.max_string_tokens = model, tokenizer, max_string_tokens
        self.model_lock = model_lock if model_lock is not None else contextlib.nullcontext()
        self._vocab: Vocab | None = None

    @property
    def vocab(self) -> Vocab:
        if self._vocab is None:
            size = self.model.get_output_embeddings().weight.shape[0]
            self._vocab = build_vocab(self.tokenizer, size)
        return self._vocab

    @torch.no_grad()
    def generate(self, prompt_ids: list[int], schema: dict[str, Any], sampling: SamplingParams,
                 max_tokens: int = 512) -> tuple[str, int]:
        if not supported(schema):
            raise UnsupportedSchema("schema outside the supported subset")
        run = _Run(self, prompt_ids, sampling, max_tokens)
        run.value(schema, schema, depth=0)
        run.flush()
        return "".join(run.out), run.fed


class _Run:
    """One generation: the KV cache, the last logits, the text written so far."""

    def __init__(self, dec: ConstrainedDecoder, prompt_ids: list[int], sp: SamplingParams, max_tokens: int):
        from transformers import DynamicCache

        self.dec, self.vocab, self.sp, self.max_tokens = dec, dec.vocab, sp, max_tokens
        self.device = next(dec.model.parameters()).device
        self.gen = torch.Generator(device=self.device).manual_seed(sp.seed) if sp.seed is not None else None
        self.cache, self.length, self.fed = DynamicCache(), 0, 0
        self.out: list[str] = []
        self.pending = ""
        self.logits = self._forward(prompt_ids)
        self.fed = 0

    # ---- the model ------------------------------------------------------------------------------
    def _forward(self, ids: list[int]) -> torch.Tensor:
        x = torch.tensor([ids], device=self.device)  # [1, t]
        pos = torch.arange(self.length, self.length + len(ids), device=self.device)[None]  # [1, t]
        with self.dec.model_lock:
            out = self.dec.model(input_ids=x, position_ids=pos, cache=self.cache, logits_to_keep=1)
        self.cache = out.cache
        self.length += len(ids)
        self.fed += len(ids)
        return out.logits[0, -1].float()  # [V]

    def force(self, text: str) -> None:
        """Write text the schema dictates (fed to the model before the next choice)."""
        self.out.append(text)
        self.pending += text

    def flush(self) -> None:
        if self.pending:
            ids = self.dec.tokenizer.encode(self.pending, add_special_tokens=False)
            self.pending = ""
            if ids:
                self.logits = self._forward(ids)

    def pick(self, allowed: torch.Tensor) -> int:
        """The model's choice among ``allowed`` ([V] bool), sampled as the request asks (greedy at T=0)."""
        self.flush()
        masked = self.logits.masked_fill(~allowed.to(self.logits.device), float("-inf"))  # [V]
        token, _ = sample_next(masked[None], self.sp, None, self.gen)  # [1]
        return int(token[0])

    def take(self, token: int) -> None:
        self.logits = self._forward([token])

    def mask(self, ids: list[int] | set[int]) -> torch.Tensor:
        m = torch.zeros(self.vocab.size, dtype=torch.bool)
        m[list(ids)] = True
        return m

    # ---- values ---------------------------------------------------------------------------------
    def value(self, schema: Any, root: dict[str, Any], depth: int) -> None:
        schema = resolve(schema, root)
        if schema is True or schema == {}:
            schema = {"type": "string"}
        if "anyOf" in schema:
            return self.value(schema["anyOf"][0], root, depth + 1)
        kind = value_type(schema)
        if kind == "integer" and _small_range(schema):
            return self.options(list(range(int(schema["minimum"]), int(schema["maximum"]) + 1)))
        handlers = {"enum": self.enum, "boolean": lambda s: self.options([True, False]),
                    "null": lambda s: self.force("null"), "string": self.string,
                    "integer": lambda s: self.number(s, integer=True),
                    "number": lambda s: self.number(s, integer=False),
                    "object": lambda s: self.object(s, root, depth), "array": lambda s: self.array(s, root, depth)}
        handlers[kind](schema)

    def enum(self, schema: dict[str, Any]) -> None:
        self.options([schema["const"]] if "const" in schema else list(schema["enum"]))

    def options(self, values: list[Any]) -> None:
        texts = [json.dumps(v, ensure_ascii=False) for v in values]
        self.force(texts[self.choose(texts)])

    def choose(self, texts: list[str]) -> int:
        """Index of the option the model picks, walking the trie of the options' tokens (nothing is written)."""
        if len(texts) == 1:
            return 0
        self.flush()
        encoded = [self.dec.tokenizer.encode(t, add_special_tokens=False) for t in texts]
        alive, prefix = list(range(len(texts))), []
        saved = (self.length, self.fed, self.logits)
        while len(alive) > 1:
            done = [i for i in alive if len(encoded[i]) == len(prefix)]
            nxt = {encoded[i][len(prefix)] for i in alive if len(encoded[i]) > len(prefix)}
            if not nxt:
                break
            allowed = self.mask(nxt) | (self.vocab.ends_value if done else torch.zeros_like(self.vocab.ends_value))
            token = self.pick(allowed)
            if token not in nxt:  # the model ended the value: one of the options already complete
                alive = done
                break
            prefix.append(token)
            alive = [i for i in alive if len(encoded[i]) >= len(prefix) and encoded[i][len(prefix) - 1] == token]
            self.take(token)
        self._rewind(saved)
        return alive[0]

    def _rewind(self, saved: tuple[int, int, torch.Tensor]) -> None:
        """Drop the tokens fed while choosing; ``force`` then writes the chosen text as one piece."""
        length, fed, logits = saved
        if self.length > length:
            self.cache.crop(length - self.length)  # a negative count: tokens to drop
        self.length, self.fed, self.logits = length, fed, logits

    def string(self, schema: dict[str, Any]) -> None:
        self.force('"')
        lo, hi = int(schema.get("minLength", 0)), schema.get("maxLength")
        tokens: list[int] = []
        text = tail = ""
        for _ in range(self.dec.max_string_tokens):
            self.flush()  # so that `fed` counts the structure written so far
            if hi is not None and len(text) >= hi or (self.fed >= self.max_tokens and len(text) >= lo):
                break
            allowed = self.vocab.in_string | (self.vocab.quote if len(text) >= lo else False)
            token = self.pick(allowed)
            if self.vocab.quote[token]:  # the model closes the string; keep what its token had before the quote
                tail = self.vocab.texts[token].split('"', 1)[0]
                break
            tokens.append(token)
            self.take(token)
            text = self.dec.tokenizer.decode(tokens)
        self.pending += tail
        text = (text + tail).replace("\ufffd", "")  # bytes of a character the string did not finish
        if hi is not None:
            text = text[: int(hi)]
        text += "." * max(0, lo - len(text))
        self.out.append(json.dumps(text, ensure_ascii=False)[1:-1])
        self.force('"')

    def number(self, schema: dict[str, Any], integer: bool) -> None:
        prefix_re, done_re = (_INT_PREFIX, _INT_DONE) if integer else (_NUM_PREFIX, _NUM_DONE)
        text = ""
        for _ in range(16):
            ok = [i for i in self.vocab.numeric if prefix_re.fullmatch(text + self.vocab.texts[i])]
            complete = bool(done_re.fullmatch(text))
            if not ok and not complete:
                break
            allowed = self.mask(ok) | (self.vocab.ends_value if complete else torch.zeros_like(self.vocab.ends_value))
            token = self.pick(allowed)
            if token not in ok:
                break
            text += self.vocab.texts[token]
            self.take(token)
        value = _clip(float(text) if done_re.fullmatch(text) else 0.0, schema)
        self.out.append(json.dumps(int(value) if integer or value.is_integer() else value))

    def object(self, schema: dict[str, Any], root: dict[str, Any], depth: int) -> None:
        self.force("{")
        for i, (key, sub) in enumerate((schema.get("properties") or {}).items()):
            self.force((", " if i else "") + json.dumps(key, ensure_ascii=False) + ": ")
            self.value(sub, root, depth + 1)
        self.force("}")

    def array(self, schema: dict[str, Any], root: dict[str, Any], depth: int) -> None:
        positional = list(schema.get("prefixItems") or [])
        rest = schema.get("items", {})
        most = schema.get("maxItems", len(positional) if rest is False else UNBOUNDED_ITEMS)
        least = max(int(schema.get("minItems", 0)), 1 if most >= 1 else 0)
        self.force("[")
        for i in range(int(most)):
            if i >= least and self.choose([", ", "]"]) == 1:
                break
            if i:
                self.force(", ")
            self.value(positional[i] if i < len(positional) else rest, root, depth + 1)
        self.force("]")


def _small_range(schema: dict[str, Any]) -> bool:
    lo, hi = schema.get("minimum"), schema.get("maximum")
    return isinstance(lo, (int, float)) and isinstance(hi, (int, float)) and 0 <= hi - lo < ENUM_RANGE


def _clip(value: float, schema: dict[str, Any]) -> float:
    if "minimum" in schema:
        value = max(value, schema["minimum"])
    if "maximum" in schema:
        value = min(value, schema["maximum"])
    return value
