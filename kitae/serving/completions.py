"""``POST /v1/completions`` of ``kitae serve model``: vLLM's OpenAI-compatible completions, for rollouts.

The request (fields vLLM reads; the wire contract with kitae's ``server`` rollout engine):

    {"prompt": [token ids] | "text", "n": 8, "max_tokens": 256, "temperature": 1.0, "top_p": 1.0, "top_k": -1,
     "seed": 7, "stop": ["<|im_end|>"], "stop_token_ids": [2], "include_stop_str_in_output": true,
     "skip_special_tokens": false, "logprobs": 0, "return_tokens_as_token_ids": true, "repetition_penalty": 1.0,
     "ignore_eos": false, "add_special_tokens": true}

With ``stream: true`` the reply comes as server-sent ``text_completion`` chunks while it is decoded
(kitae/serving/streaming.py; not with ``logprobs`` or ``return_weight_versions``).

One prompt per request (a list of several is refused); ``n`` samples of it, sample ``i`` seeded ``seed + i``.
A string prompt is tokenized as vLLM does (the tokenizer's special tokens added unless ``add_special_tokens`` is
false); token ids are taken as they are. Generation stops at a stop string (matched on tokens and on text, so a
multi-token ``<|im_end|>`` works), a ``stop_token_ids`` token, every end-of-sequence id of the model (unless
``ignore_eos``: generation_config.json's ``eos_token_id`` list, the tokenizer's, the chat template's turn
terminator, kitae.chat.EndMarker), or ``max_tokens`` (default ``--max-tokens``, capped by the context left).

The reply (vLLM's shape, plus ``weight_version``: the weights that sampled every choice; with
``return_weight_versions`` each choice also says so as vLLM 0.33 does, ``weight_versions: [{"version": "V",
"start": 0, "end": TOKENS}]``):

    {"id", "object": "text_completion", "created", "model", "weight_version",
     "choices": [{"index", "text", "finish_reason": "stop" | "length", "stop_reason": null,
                  "logprobs": {"tokens": ["token_id:17", ...], "token_logprobs": [...],
                               "top_logprobs": [{"token_id:17": -0.4, "token_id:9": -1.6, ...}, ...],
                               "text_offset": [...]}}],
     "usage": {"prompt_tokens", "completion_tokens", "total_tokens"}}

``logprobs`` k (0 to 20, vLLM's default ``--max-logprobs``; null for none) gives each sampled token's log-prob
and, in ``top_logprobs`` (a list with one object per token, vLLM's CompletionLogProbs), the sampled token and the
k most likely ones at that position: k or k + 1 entries, the sampled one first, as in vLLM and OpenAI's legacy
completions. Every log-prob is of one distribution, log_softmax(logits / T) (T = 1 when greedy), before top-k,
top-p and the penalty (kitae/rollout/base.py). vLLM returns the raw model's log-probs by default
(``--logprobs-mode raw_logprobs``, before temperature) and after every processor, top-k and top-p included,
with ``processed_logprobs``; at temperature 1 without top-k and top-p, all three agree. -inf is written as
-9999.0 as vLLM does. The tokens are the completion's up to the stop string's last token; ``text`` keeps the
stop string only with ``include_stop_str_in_output`` (vLLM's default is false; kitae's engine sends true).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from kitae.rollout.base import Completion
from kitae.http import requests as check
from kitae.http.requests import SEED_MAX, SEED_MIN

KNOWN_FIELDS = {"model", "prompt", "n", "max_tokens", "temperature", "top_p", "top_k", "seed", "stop",
                "stop_token_ids", "include_stop_str_in_output", "skip_special_tokens", "logprobs",
                "return_tokens_as_token_ids", "repetition_penalty", "ignore_eos", "add_special_tokens",
                "return_weight_versions", "stream", "stream_options"}
NEUTRAL_FIELDS = {  # accepted with these values (they change nothing), refused with any other
    "echo": (False,), "best_of": (1,), "presence_penalty": (0,), "frequency_penalty": (0,),
    "logit_bias": ({},), "min_p": (0,), "min_tokens": (0,), "use_beam_search": (False,), "length_penalty": (1,),
    "suffix": ("",), "spaces_between_special_tokens": (True,), "prompt_logprobs": (0,),
}
IGNORED_FIELDS = {"user", "priority", "request_id", "metadata"}
MAX_N = 256
MAX_STOP_TOKEN_IDS = 64
MIN_LOGPROB = -9999.0  # vLLM's stand-in for -inf, which JSON cannot carry
MAX_LOGPROBS = 20  # alternatives per token at most: vLLM's default --max-logprobs


@dataclass
class CompletionRequest:
    prompt_ids: list[int] | None = None  # the prompt as token ids, or
    prompt_text: str | None = None  # as text, tokenized by the server
    n: int = 1
    max_tokens: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    include_stop: bool = False
    skip_special_tokens: bool = True
    logprobs: int | None = None  # None: no log-probs; k: the sampled token's and the k most likely ones'
    token_ids_out: bool = False
    repetition_penalty: float = 1.0
    ignore_eos: bool = False
    add_special_tokens: bool = True
    weight_versions: bool = False  # vLLM's per-choice weight_versions spans in the reply
    stream: bool = False  # server-sent events (kitae/serving/streaming.py)
    include_usage: bool = False  # with stream: a last chunk with the usage


def parse_completion(body: Any, vocab_size: int, max_context: int, max_prompt_chars: int,
                     max_n: int = MAX_N) -> CompletionRequest:
    """A checked CompletionRequest, or RequestError(400) naming the field; nothing is tokenized here."""
    body = check.require_object(body)
    check.check_fields(body, KNOWN_FIELDS, NEUTRAL_FIELDS, IGNORED_FIELDS, "kitae serve model")
    req = CompletionRequest()
    req.prompt_ids, req.prompt_text = _prompt(body.get("prompt"), vocab_size, max_context, max_prompt_chars)
    req.n = check.integer(body, "n", 1, 1, max_n)
    req.max_tokens = check.integer(body, "max_tokens", None, 1, max_context)
    req.temperature = check.number(body, "temperature", 1.0, 0.0, 100.0)
    req.top_p = check.number(body, "top_p", 1.0, 0.0, 1.0)
    req.top_k = max(0, check.integer(body, "top_k", 0, -1, vocab_size))  # -1 and 0: off
    req.seed = check.integer(body, "seed", None, SEED_MIN, SEED_MAX)
    req.stop = check.stop_strings(body.get("stop"))
    req.stop_token_ids = _token_ids(body.get("stop_token_ids"), "stop_token_ids", vocab_size, MAX_STOP_TOKEN_IDS)
    req.include_stop = _flag(body, "include_stop_str_in_output", False)
    req.skip_special_tokens = _flag(body, "skip_special_tokens", True)
    req.token_ids_out = _flag(body, "return_tokens_as_token_ids", False)
    req.ignore_eos = _flag(body, "ignore_eos", False)
    req.add_special_tokens = _flag(body, "add_special_tokens", True)
    req.weight_versions = _flag(body, "return_weight_versions", False)
    req.logprobs = _logprobs(body.get("logprobs"))
    req.repetition_penalty = check.number(body, "repetition_penalty", 1.0, 0.0, 10.0)
    if req.repetition_penalty <= 0:
        raise check.bad("repetition_penalty must be above 0 (1 = off)", "repetition_penalty")
    req.stream, req.include_usage = check.stream_fields(body)
    for key, given in (("logprobs", req.logprobs is not None), ("return_weight_versions", req.weight_versions)):
        if req.stream and given:
            raise check.bad(f"{key} is not streamed by this server; send stream: false to get it", key)
    return req


def _prompt(value: Any, vocab_size: int, max_context: int, max_chars: int) -> tuple[list[int] | None, str | None]:
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], (str, list)):
        value = value[0]  # a batch of one prompt
    if isinstance(value, str):
        if not value:
            raise check.bad("prompt is empty", "prompt")
        return None, check.text(value, "prompt", max_chars, "--max-context")
    if isinstance(value, list) and value and all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        if len(value) > max_context:
            raise check.bad(f"prompt has {len(value):,} tokens; this model's context is {max_context:,} "
                            "(--max-context)", "prompt")
        return _token_ids(value, "prompt", vocab_size, max_context), None
    raise check.bad("prompt must be a string or a non-empty list of token ids, one prompt per request (send "
                    "several prompts as several requests; they are batched together)", "prompt")


def _token_ids(value: Any, param: str, vocab_size: int, max_items: int) -> list[int]:
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > max_items:
        raise check.bad(f"{param} must be a list of at most {max_items:,} token ids", param)
    for i, t in enumerate(value):
        if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < vocab_size:
            raise check.bad(f"{param}[{i}] must be a token id from 0 to {vocab_size - 1} (this model's "
                            f"vocabulary), got {t!r}"[:200], param)
    return list(value)


def _flag(body: dict[str, Any], key: str, default: bool) -> bool:
    value = body.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise check.bad(f"{key} must be true or false, got {value!r}"[:120], key)
    return value


def _logprobs(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_LOGPROBS:
        raise check.bad(f"logprobs must be an integer from 0 (the sampled token's log-prob) to {MAX_LOGPROBS} (and "
                        f"that many most likely tokens' at each position), or null; got {value!r}"[:200], "logprobs")
    return value


# ---- the reply -------------------------------------------------------------------------------------------
def completion_reply(req: CompletionRequest, completions: list[Completion], tokenizer: Any, name: str,
                     version: int, stop_ids: set[int] | frozenset[int],
                     alternatives: list[list[list[tuple[int, float]]]] | None = None) -> dict[str, Any]:
    """vLLM's reply; ``alternatives``: per completion, per token, the most likely (token id, log-prob)."""
    prompt = len(completions[0].prompt_ids) if completions else 0
    done = sum(c.num_tokens for c in completions)
    alternatives = alternatives or [None] * len(completions)
    return {
        "id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()), "model": name,
        "weight_version": version,
        "choices": [_choice(i, c, alts, req, tokenizer, stop_ids, version)
                    for i, (c, alts) in enumerate(zip(completions, alternatives))],
        "usage": {"prompt_tokens": prompt, "completion_tokens": done, "total_tokens": prompt + done},
    }


def _choice(index: int, c: Completion, alternatives: list[list[tuple[int, float]]] | None,
            req: CompletionRequest, tokenizer: Any, stop_ids: Any, version: int = 0) -> dict[str, Any]:
    finish = "stop" if c.finish_reason == "stop" else "length"
    choice = {"index": index, "text": choice_text(c, req, tokenizer, stop_ids), "finish_reason": finish,
              "stop_reason": None, "logprobs": None}
    if req.logprobs is not None:
        choice["logprobs"] = _logprobs_object(c, alternatives or [[] for _ in c.completion_ids], req, tokenizer)
    if req.weight_versions:  # one set of weights samples a whole request here
        choice["weight_versions"] = [{"version": str(version), "start": 0, "end": len(c.completion_ids)}]
    return choice


def _logprobs_object(c: Completion, alternatives: list[list[tuple[int, float]]], req: CompletionRequest,
                     tokenizer: Any) -> dict[str, Any]:
    """vLLM's CompletionLogProbs: per token its name, its log-prob, ``{name: log-prob}`` of the sampled token and
    the most likely ones (sampled first, each token once), and where its text starts."""
    ids = sorted({*c.completion_ids, *(t for alts in alternatives for t, _ in alts)})
    if req.token_ids_out:
        names = {t: f"token_id:{t}" for t in ids}
    else:
        names = dict(zip(ids, token_pieces(tokenizer, ids)))
    pieces = token_pieces(tokenizer, c.completion_ids)
    offsets, at = [], 0
    for piece in pieces:
        offsets.append(at)
        at += len(piece)
    top = []
    for token, logp, alts in zip(c.completion_ids, c.logprobs, alternatives):
        entry = {names[token]: max(logp, MIN_LOGPROB)}
        for t, lp in alts:
            entry.setdefault(names[t], max(lp, MIN_LOGPROB))
        top.append(entry)
    return {"tokens": [names[t] for t in c.completion_ids],
            "token_logprobs": [max(lp, MIN_LOGPROB) for lp in c.logprobs], "top_logprobs": top,
            "text_offset": offsets}


def token_pieces(tokenizer: Any, ids: list[int]) -> list[str]:
    """Each token's own text, special tokens included (a piece of a multi-byte character decodes to U+FFFD)."""
    return tokenizer.batch_decode([[t] for t in ids], skip_special_tokens=False)


def choice_text(c: Completion, req: CompletionRequest, tokenizer: Any, stop_ids: Any) -> str:
    """The completion's text up to its stop string, which is kept with ``include_stop_str_in_output``; a stop
    token's text likewise (and a special token's only without ``skip_special_tokens``)."""
    ids = c.completion_ids
    if c.finish_reason == "stop" and not req.include_stop and ids and ids[-1] in stop_ids:
        ids = ids[:-1]
    text = tokenizer.decode(ids, skip_special_tokens=req.skip_special_tokens)
    found = [(i, s) for s in req.stop if (i := text.find(s)) >= 0]
    if found:
        i, s = min(found)
        text = text[: i + len(s)] if req.include_stop else text[:i]
    return text
