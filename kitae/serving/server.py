"""``kitae serve model``: a local causal LM behind the OpenAI chat API and vLLM's completions API (stdlib
http.server, loopback by default): a local judge, and a rollout server for kitae's ``server`` engine.

    GET  /health                {"status": "ok", "model": NAME, "weight_version": V}
    GET  /v1/models             {"object": "list", "data": [{"id": NAME, "object": "model", "max_model_len": N}]}
    GET  /v1/models/NAME        that model object (OpenAI's retrieve; another name is a 404)
    POST /v1/chat/completions   {"model": NAME, "messages": [...], "temperature", "top_p", "max_tokens"
                                 (or "max_completion_tokens"), "n", "stop", "seed", "response_format",
                                 "logprobs", "top_logprobs", "chat_template_kwargs", "stream", "stream_options"}
                                -> {"object": "chat.completion", "choices": [{"message": {"role": "assistant",
                                    "content": ...}, "logprobs": null | {"content": [...]},
                                    "finish_reason": "stop" | "length"}],
                                    "usage": {"prompt_tokens", "completion_tokens", "total_tokens"}}
    POST /v1/completions        vLLM's, with token-id prompts, ``n``, per-token log-probs and token ids, and
                                the weight version that sampled them (kitae/serving/completions.py)
    POST /update_weights_from_disk   SGLang's {"model_path": FOLDER, "load_format": null}: load the folder's
                                safetensors in place once the requests in flight are done
                                -> {"success": true, "message", "weight_version": V} (kitae/serving/weights.py)
    POST /v1/load_lora_adapter  vLLM's {"lora_name": NAME, "lora_path": FOLDER}: load a peft LoRA adapter folder
                                onto the served base (peft), sample with it from then on; requests name it as
                                ``model`` -> {"success": true, "message", "weight_version": V}
                                (kitae/serving/adapters.py: one adapter samples at a time, the one loaded last)
    POST /v1/unload_lora_adapter  vLLM's {"lora_name": NAME} -> {"success": true, "message", "weight_version"}

Every plain generation (completions, chat) goes through one continuous-batching scheduler
(kitae/serving/batching.py): requests join the running batch at the next decoding step and no request waits for
another to finish; ``max_batch=1`` (``--max-batch 1``) gives one request at a time. Constrained JSON decoding
runs one sample at a time on the request's own thread, its forward passes taking turns with the batch's.

``stream: true`` (chat and completions) sends the reply as server-sent events while the batch decodes it,
OpenAI's chunk shapes, the same text as without streaming (kitae/serving/streaming.py).

Chat prompts are formatted with the tokenizer's chat template (ChatML without one); ``chat_template_kwargs``
(an object, as in vLLM's and SGLang's chat API: the template's variables, e.g. Qwen3's ``{"enable_thinking":
false}``) are merged over the server's own (``--chat-template-kwargs``); apply_chat_template's own arguments
(``tokenize``, ``chat_template``, ...) are refused there. Sampling is kitae's rollout
engine's (kitae/rollout/hf.py), and the content stops before ``<|im_start|>``, ``<|im_end|>``,
``<|endoftext|>``, any other special token of the tokenizer, or a ``stop`` string (no control-token text
reaches a client). Defaults follow OpenAI: temperature 1, top_p 1; ``max_tokens`` defaults to ``--max-tokens``
(512), capped by the context left. Sample ``i`` of a request with a seed is seeded ``seed + i``, the same alone
or batched with other requests. A message's role is one of :data:`CHAT_ROLES` (OpenAI's), given to the chat
template as it is.

``logprobs: true`` (and ``top_logprobs`` k, 0 to 20) gives ``choices[i].logprobs.content``: per completion token
(the tokens ``usage`` counts, the end-of-turn token included, as vLLM) ``{"token", "logprob", "bytes",
"top_logprobs": [{"token", "logprob", "bytes"}]}``, the k most likely tokens best first, every log-prob of the
sampling distribution before top-p, log_softmax(logits / T) (kitae/serving/completions.py says how that stands
to vLLM's). ``bytes`` is the UTF-8 of the token's text as vLLM gives it (a piece of a multi-byte character reads
as U+FFFD). Not with constrained JSON decoding (a 400).

``response_format``:
    {"type": "json_schema", "json_schema": {"schema": ...}}  constrained decoding (kitae/serving/constrained.py),
        so the content always validates; a schema outside the supported subset is sampled up to
        ``json_attempts`` times and the first reply that validates is returned (the last one when none does);
    {"type": "json_object"}  sampled and checked the same way (a JSON object);
    {"type": "text"} or absent  plain generation.
At temperature 0 sampling again gives the same text, so "sample and check" makes one attempt.

Errors are OpenAI-shaped, ``{"error": {"message", "type", "param", "code"}}`` (the reload's also carry SGLang's
``success: false`` and ``message``): 400 for a bad request, checked before any model work by kitae/http/requests.py
(a field that would change results but is not implemented: ``presence_penalty``, ``frequency_penalty``,
``logit_bias``, ``tools``, ... unless its value is a no-op; log-probs with ``stream``; a malformed message; a
prompt longer than the context, by characters before tokenizing, then by tokens; a token id outside the vocabulary;
a reload folder that does not fit the model), 401/408/411/413 from the HTTP layer (kitae/http/server.py; with a
token, the reload needs it like every endpoint; on loopback a foreign Host is a 403, and a POST that is not
``application/json`` (415) or comes from another web origin (403) is refused, so no web page can swap the weights),
404 for another model name or path, 500 when generation fails.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote

import jsonschema

from kitae.chat import TEMPLATE_TOKENS
from kitae.rollout.base import Completion, SamplingParams
from kitae.rollout.hf import HFEngine
from kitae.http import requests as check
from kitae.serving.batching import BatchScheduler, WeightGate
from kitae.serving.completions import (MAX_LOGPROBS, MIN_LOGPROB, CompletionRequest, choice_text, completion_reply,
                                       parse_completion, token_pieces)
from kitae.serving.constrained import ConstrainedDecoder, supported
from kitae.http.server import EventStream, HttpLimits, json_server
from kitae.http.requests import SEED_MAX, SEED_MIN, RequestError, cut_at_markers
from kitae.serving.streaming import Chunks, stream_job
from kitae.serving.adapters import ServedAdapters
from kitae.serving.weights import LOAD_FORMATS, apply_reload, plan_reload


KNOWN_FIELDS = {"model", "messages", "temperature", "top_p", "max_tokens", "max_completion_tokens", "n", "stop",
                "seed", "response_format", "logprobs", "top_logprobs", "chat_template_kwargs", "stream",
                "stream_options"}
NEUTRAL_FIELDS = {  # accepted with these values (they change nothing), refused with any other
    "tools": ([],), "functions": ([],),
    "tool_choice": ("none", "auto"), "presence_penalty": (0,), "frequency_penalty": (0,), "logit_bias": ({},),
}
# apply_chat_template's own arguments: not the template's variables (a client's chat_template would be its code)
TEMPLATE_ARGUMENTS = {"conversation", "messages", "tools", "documents", "chat_template", "add_generation_prompt",
                      "continue_final_message", "tokenize", "padding", "truncation", "max_length",
                      "return_tensors", "return_dict", "return_assistant_tokens_mask", "tokenizer_kwargs",
                      "processor_kwargs"}
RELOAD_PATH = "/update_weights_from_disk"
RELOAD_FIELDS = {"model_path", "load_format", "weight_version"}
LOAD_ADAPTER_PATH, UNLOAD_ADAPTER_PATH = "/v1/load_lora_adapter", "/v1/unload_lora_adapter"  # vLLM's routes
ADAPTER_NEUTRAL = {"load_inplace": (False, True), "is_3d_lora_weight": (False,), "lora_int_id": (None,)}
WEIGHT_PATHS = (RELOAD_PATH, LOAD_ADAPTER_PATH, UNLOAD_ADAPTER_PATH)  # replies carry SGLang's success and message
POST_PATHS = ("/v1/completions", "/v1/chat/completions", *WEIGHT_PATHS)
# bookkeeping, or no effect on a model without a reasoning mode
IGNORED_FIELDS = {"user", "metadata", "store", "service_tier", "parallel_tool_calls", "reasoning_effort"}
CHAT_ROLES = ("system", "user", "assistant", "tool", "developer")  # OpenAI's message roles
MODELS_PATH = "/v1/models"


class ApiError(RequestError):
    """An OpenAI-shaped error reply."""

    def __init__(self, status: int, message: str, param: str | None = None, kind: str = "invalid_request_error"):
        super().__init__(status, message, param)
        self.kind = kind


def error_payload(exc: RequestError) -> dict[str, Any]:
    kind = getattr(exc, "kind", None) or {401: "authentication_error", 403: "permission_error",
                                                 404: "not_found_error"}.get(
        exc.status, "invalid_request_error")
    return {"error": {"message": str(exc), "type": kind, "param": exc.param, "code": exc.status}}


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
    logprobs: bool = False
    top_logprobs: int = 0  # the most likely tokens per position, with logprobs
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)  # over the server's
    stream: bool = False  # server-sent events (kitae/serving/streaming.py)
    include_usage: bool = False  # with stream: a last chunk with the usage


def parse_request(body: Any, max_n: int = 16, max_context: int = 1 << 20,
                  max_prompt_chars: int = 1 << 30) -> ChatRequest:
    """A checked ChatRequest, or RequestError(400) naming the field. Nothing here tokenizes: a prompt of more
    than ``max_prompt_chars`` characters is refused before the tokenizer sees it."""
    body = check.require_object(body)
    check.check_fields(body, KNOWN_FIELDS, NEUTRAL_FIELDS, IGNORED_FIELDS, "kitae serve model")
    req = ChatRequest(messages=check.messages(body.get("messages"), "messages", max_prompt_chars, "--max-context"))
    _check_roles(req.messages)
    req.temperature = check.number(body, "temperature", 1.0, 0.0, 2.0)
    req.top_p = check.number(body, "top_p", 1.0, 0.0, 1.0)
    key = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    req.max_tokens = check.integer(body, key, None, 1, max_context)
    req.n = check.integer(body, "n", 1, 1, max_n)
    req.stop = check.stop_strings(body.get("stop"))
    req.seed = check.integer(body, "seed", None, SEED_MIN, SEED_MAX)
    req.format, req.schema = _response_format(body.get("response_format"))
    req.logprobs, req.top_logprobs = _chat_logprobs_fields(body, req)
    req.chat_template_kwargs = template_kwargs(body.get("chat_template_kwargs"))
    req.stream, req.include_usage = check.stream_fields(body)
    if req.stream and req.logprobs:
        raise ApiError(400, "logprobs are not streamed by this server; send stream: false to get them", "logprobs")
    return req


def template_kwargs(value: Any, param: str = "chat_template_kwargs") -> dict[str, Any]:
    """A request's ``chat_template_kwargs``: an object of the chat template's variables (None: none)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ApiError(400, f"{param} must be an object of the chat template's variables, e.g. "
                       f'{{"enable_thinking": false}}; got {str(value)[:40]!r}', param)
    for key in value:
        if key in TEMPLATE_ARGUMENTS:
            raise ApiError(400, f"{param}.{key} is an argument of apply_chat_template, not a variable of the chat "
                           "template; remove it", f"{param}.{key}")
    return dict(value)


def _check_roles(messages: list[dict[str, str]]) -> None:
    for i, m in enumerate(messages):
        if m["role"] not in CHAT_ROLES:
            raise ApiError(400, f"messages[{i}].role must be one of {', '.join(CHAT_ROLES)}; got {m['role'][:40]!r}",
                           f"messages[{i}].role")


def _chat_logprobs_fields(body: dict[str, Any], req: ChatRequest) -> tuple[bool, int]:
    """OpenAI's ``logprobs`` (true or false) and ``top_logprobs`` (0 to 20, only with ``logprobs: true``)."""
    logprobs = body.get("logprobs")
    if logprobs is not None and not isinstance(logprobs, bool):
        raise ApiError(400, f"logprobs must be true or false, got {str(logprobs)[:40]!r}", "logprobs")
    top = check.integer(body, "top_logprobs", 0, 0, MAX_LOGPROBS)
    if top and not logprobs:
        raise ApiError(400, "top_logprobs needs logprobs: true (as in OpenAI's and vLLM's chat API)", "top_logprobs")
    if logprobs and req.format == "json_schema" and supported(req.schema):
        raise ApiError(400, "log-probs are not returned with constrained JSON decoding (this response_format "
                       "json_schema is decoded by its grammar); leave out logprobs, or ask for json_object",
                       "logprobs")
    return bool(logprobs), top


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
            raise ApiError(400, f"invalid JSON schema: {exc.message[:300]}",
                           "response_format.json_schema.schema") from None
        return kind, schema
    raise ApiError(400, f"response_format.type must be text, json_object or json_schema, got {kind!r}",
                   "response_format")


@dataclass
class Choice:
    text: str
    finish_reason: str
    tokens: int
    token_ids: list[int] = field(default_factory=list)  # sampled through the batch: the tokens, and
    logprobs: list[float] = field(default_factory=list)  # their log-probs,
    alternatives: list[list[tuple[int, float]]] | None = None  # and with top_logprobs, the most likely ones


class ChatService:
    """The endpoints without HTTP: a model, its tokenizer, a name, the context length, and the batching
    scheduler every plain generation goes through (``max_batch`` rows at most; 1 = one request at a time)."""

    def __init__(self, model: Any, tokenizer: Any, name: str, max_context: int | None = None,
                 default_max_tokens: int = 512, json_attempts: int = 3, max_batch: int = 64,
                 chat_template_kwargs: dict[str, Any] | None = None):
        self.engine = HFEngine(model, tokenizer)
        self.engine.set_chat(template_kwargs(chat_template_kwargs, "--chat-template-kwargs"))
        self.gate, self.model_lock = WeightGate(), threading.Lock()
        self.decoder = ConstrainedDecoder(model, tokenizer, model_lock=self.model_lock)
        self.name, self.default_max_tokens, self.json_attempts = name, default_max_tokens, json_attempts
        self.max_context = max_context or getattr(model.config, "max_position_embeddings", None) or 4096
        self.max_prompt_chars = self.max_context * longest_token_chars(tokenizer)
        self.markers = list(dict.fromkeys([*control_markers(tokenizer), *self.engine.end_marker.stops]))
        self.vocab_size = model.get_input_embeddings().weight.shape[0]
        self.eos_ids = eos_token_ids(model, tokenizer) | set(self.engine.end_marker.ids)  # every end of the model
        self._reload_lock = threading.Lock()
        self.adapters = ServedAdapters(model)  # LoRA adapters loaded at run time (/v1/load_lora_adapter)
        self.scheduler = BatchScheduler(self.engine, self.gate, self.model_lock, max_batch)  # starts its thread

    def close(self) -> None:
        """Stop the batching scheduler (requests still queued get an error)."""
        self.scheduler.close()

    # ---- routes ---------------------------------------------------------------------------------
    def error_reply(self, exc: Exception, method: str, path: str) -> tuple[int, Any]:
        if isinstance(exc, RequestError):
            status, payload = exc.status, error_payload(exc)
        else:  # generation failed: tell the client, keep serving
            status, payload = 500, error_payload(ApiError(500, f"{type(exc).__name__}: {exc}", kind="server_error"))
        if path.split("?")[0] in WEIGHT_PATHS:  # SGLang's clients read success and message
            payload = {"success": False, "message": payload["error"]["message"], **payload}
        return status, payload

    def handle_get(self, path: str) -> Any:
        if path == "/health":
            return {"status": "ok", "model": self.name, "weight_version": self.gate.version,
                    "adapter": self.adapters.active}
        if path == MODELS_PATH:
            return {"object": "list", "data": [self.model_card(), *self.adapter_cards()]}
        if path.startswith(MODELS_PATH + "/"):  # OpenAI's retrieve; an id may hold "/" (org/name), or be encoded
            wanted = unquote(path.removeprefix(MODELS_PATH + "/"))
            if wanted != self.name:
                raise ApiError(404, f"the model '{wanted[:200]}' does not exist; this server serves '{self.name}'",
                               "model", "not_found_error")
            return self.model_card()
        raise ApiError(404, f"no endpoint GET {path} (this server has /health, /v1/models and /v1/models/"
                       f"{self.name})", kind="not_found_error")

    def model_card(self) -> dict[str, Any]:
        """The served model as OpenAI's model object, with vLLM's ``max_model_len``."""
        return {"id": self.name, "object": "model", "created": 0, "owned_by": "kitae",
                "max_model_len": self.max_context}

    def adapter_cards(self) -> list[dict[str, Any]]:
        """The loaded LoRA adapters as vLLM lists them (``root`` the folder, ``parent`` the base)."""
        return [{"id": name, "object": "model", "created": 0, "owned_by": "kitae", "root": str(folder),
                 "parent": self.name, "max_model_len": self.max_context}
                for name, folder in self.adapters.folders.items()]

    def handle_post(self, path: str, body: Any) -> Any:
        if path not in POST_PATHS:
            raise ApiError(404, f"no endpoint POST {path} (this server has {', '.join(POST_PATHS)})",
                           kind="not_found_error")
        if path == RELOAD_PATH:
            return self.reload(body)
        if path == LOAD_ADAPTER_PATH:
            return self.load_adapter(body)
        if path == UNLOAD_ADAPTER_PATH:
            return self.unload_adapter(body)
        self._check_model(body.get("model") if isinstance(body, dict) else None)
        if path == "/v1/completions":
            return self.complete(parse_completion(body, self.vocab_size, self.max_context, self.max_prompt_chars))
        return self.chat(parse_request(body, max_context=self.max_context, max_prompt_chars=self.max_prompt_chars))

    # ---- /v1/completions ------------------------------------------------------------------------
    def complete(self, req: CompletionRequest) -> dict[str, Any]:
        prompt_ids = req.prompt_ids
        if prompt_ids is None:
            prompt_ids = self.engine.tokenizer(req.prompt_text, add_special_tokens=req.add_special_tokens)["input_ids"]
        max_tokens = self._room(prompt_ids, req.max_tokens, "prompt")
        sp = SamplingParams(temperature=req.temperature, top_p=req.top_p, top_k=req.top_k,
                            repetition_penalty=req.repetition_penalty, max_new_tokens=max_tokens, stop=req.stop,
                            seed=req.seed)
        stop_ids = set(req.stop_token_ids) | (set() if req.ignore_eos else self.eos_ids)
        job = self.scheduler.submit(prompt_ids, req.n, sp, stop_ids, top_logprobs=req.logprobs or 0)
        if req.stream:
            return EventStream(self._stream_completion(req, job, prompt_ids, stop_ids))
        completions = job.wait()
        return completion_reply(req, completions, self.engine.tokenizer, self.name, job.version, stop_ids,
                                job.alternatives)

    def _stream_completion(self, req: CompletionRequest, job: Any, prompt_ids: list[int],
                           stop_ids: set[int]) -> Any:
        tokenizer = self.engine.tokenizer

        def render(tokens: list[int]) -> str:
            return choice_text(Completion("", prompt_ids, tokens, [], "length"), req, tokenizer, stop_ids)

        def finals() -> list[tuple[str, str, int]]:
            return [(choice_text(c, req, tokenizer, stop_ids), "stop" if c.finish_reason == "stop" else "length",
                     c.num_tokens) for c in job.wait()]

        return stream_job(Chunks("completion", self.name, req.include_usage), job, req.n, render, req.stop, finals,
                          len(prompt_ids))

    def _room(self, prompt_ids: list[int], max_tokens: int | None, param: str) -> int:
        """``max_tokens``, else the default, capped by the context the prompt leaves; 400 when it does not fit."""
        room = self.max_context - len(prompt_ids)
        if room < 1 or (max_tokens or 0) > room:
            raise ApiError(400, f"this model's context is {self.max_context} tokens; the {param} takes "
                           f"{len(prompt_ids)} and max_tokens asks for {max_tokens or self.default_max_tokens}",
                           param)
        return min(max_tokens or self.default_max_tokens, room)

    def _check_model(self, model: Any) -> None:
        """A request's ``model``: the served one (the base, or the LoRA adapter loaded last while one is), or
        absent; 404 for a name this server does not know, 400 for one it cannot sample with now."""
        active = self.adapters.active
        if model is None or model == (active or self.name):
            return
        if model == self.name or model in self.adapters.folders:
            raise ApiError(400, f"this server samples with one LoRA adapter at a time, the one loaded last "
                           f"('{active}'); name it as the model, or unload it ({UNLOAD_ADAPTER_PATH}) to sample "
                           f"'{model}'", "model")
        raise ApiError(404, f"the model '{model}' does not exist; this server serves '{active or self.name}'",
                       "model", "not_found_error")

    # ---- /v1/load_lora_adapter, /v1/unload_lora_adapter -----------------------------------------
    def load_adapter(self, body: Any) -> dict[str, Any]:
        """Load a peft LoRA adapter folder onto the served base under ``lora_name`` and sample with it from now
        on (kitae/serving/adapters.py), once the requests in flight have finished without it."""
        body = check.require_object(body)
        check.check_fields(body, {"lora_name", "lora_path"}, ADAPTER_NEUTRAL, set(),
                           "kitae serve model's " + LOAD_ADAPTER_PATH)
        name, folder = _adapter_field(body, "lora_name"), _adapter_field(body, "lora_path")
        if name == self.name:
            raise ApiError(400, f"lora_name '{name}' is the served base model's name; give the adapter another",
                           "lora_name")
        with self._reload_lock:  # one weight change at a time; requests keep running while it is checked
            path = self.adapters.check(name, folder)
            with self.gate.reload(), self.model_lock:
                try:
                    self.adapters.load(name, path)
                except Exception as exc:
                    self.gate.bump()  # partly loaded: no later sample may claim the old version
                    raise ApiError(500, f"loading the adapter {path} failed ({type(exc).__name__}: {exc}); load "
                                   "it again", "lora_path", "server_error") from exc
                new = self.gate.bump()
        return {"success": True, "message": f"Success: LoRA adapter '{name}' added successfully.",
                "weight_version": new}

    def unload_adapter(self, body: Any) -> dict[str, Any]:
        """Unload adapter ``lora_name``: the newest remaining one (or the base) samples when it was active."""
        body = check.require_object(body)
        check.check_fields(body, {"lora_name"}, ADAPTER_NEUTRAL, set(), "kitae serve model's " + UNLOAD_ADAPTER_PATH)
        name = _adapter_field(body, "lora_name")
        with self._reload_lock, self.gate.reload(), self.model_lock:
            changed = self.adapters.unload(name)
            version = self.gate.bump() if changed else self.gate.version
        return {"success": True, "message": f"Success: LoRA adapter '{name}' removed successfully.",
                "weight_version": version}

    # ---- /update_weights_from_disk ----------------------------------------------------------------
    def reload(self, body: Any) -> dict[str, Any]:
        """Load a model folder's safetensors in place (kitae/serving/weights.py), once the requests in flight
        have finished on the old weights; requests that arrive meanwhile wait and run on the new ones."""
        body = check.require_object(body)
        check.check_fields(body, RELOAD_FIELDS, {"abort_all_requests": (False,), "flush_cache": (True, False)},
                           set(), "kitae serve model's " + RELOAD_PATH)
        folder = body.get("model_path")
        if not isinstance(folder, str) or not folder:
            raise ApiError(400, "model_path must be the path of a model folder (as the server sees it)", "model_path")
        if body.get("load_format") not in LOAD_FORMATS:
            raise ApiError(400, f"load_format must be null, 'auto' or 'safetensors', got {body['load_format']!r}",
                           "load_format")
        version = check.integer(body, "weight_version", None, 0, SEED_MAX)
        if self.adapters.active is not None:
            raise ApiError(400, f"LoRA adapters are loaded ({', '.join(self.adapters.folders)}); unload them "
                           f"({UNLOAD_ADAPTER_PATH}) before loading full weights", "model_path")
        with self._reload_lock:  # one reload at a time; requests keep running while it is checked
            plan = plan_reload(self.engine.model, folder)
            with self.gate.reload(), self.model_lock:
                try:
                    count = apply_reload(self.engine.model, plan)
                except Exception as exc:
                    self.gate.bump()  # partly replaced: no later sample may claim the old version
                    raise ApiError(500, f"loading {plan.folder} failed after the first tensors were replaced "
                                   f"({type(exc).__name__}: {exc}); load a folder again", "model_path",
                                   "server_error") from exc
                new = self.gate.bump(version)
        return {"success": True, "message": f"loaded {count} tensors from {plan.folder}", "weight_version": new}

    # ---- /v1/chat/completions -------------------------------------------------------------------
    def chat(self, req: ChatRequest) -> dict[str, Any]:
        prompt_ids = self.engine.encode_prompt(req.messages,
                                               {**self.engine.chat_template_kwargs, **req.chat_template_kwargs})
        max_tokens = self._room(prompt_ids, req.max_tokens, "messages")
        if req.stream:
            return EventStream(self._stream_chat(req, prompt_ids, max_tokens))
        choices = [self._choice(req, prompt_ids, max_tokens, i) for i in range(req.n)] \
            if req.format != "text" else self._plain(req, prompt_ids, max_tokens, req.n)
        done = sum(c.tokens for c in choices)
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": self.name,
            "choices": [{"index": i, "message": {"role": "assistant", "content": c.text},
                         "logprobs": chat_logprobs(c, self.engine.tokenizer) if req.logprobs else None,
                         "finish_reason": c.finish_reason} for i, c in enumerate(choices)],
            "usage": {"prompt_tokens": len(prompt_ids), "completion_tokens": done,
                      "total_tokens": len(prompt_ids) + done},
        }

    def _stream_chat(self, req: ChatRequest, prompt_ids: list[int], max_tokens: int) -> Any:
        """Plain text as the batch decodes it; a structured reply (JSON) whole, once it is made."""
        chunks = Chunks("chat", self.name, req.include_usage)
        if req.format != "text":
            def structured() -> list[tuple[str, str, int]]:
                return [(c.text, c.finish_reason, c.tokens)
                        for c in (self._choice(req, prompt_ids, max_tokens, i) for i in range(req.n))]

            return stream_job(chunks, None, req.n, str, [], structured, len(prompt_ids))
        job = self.scheduler.submit(prompt_ids, req.n, self._sampling(req, max_tokens))
        stops = job.sampling.stop

        def render(tokens: list[int]) -> str:
            return cut_at_markers(self.engine.codec.decode(tokens, stops), self.markers)[0]

        def finals() -> list[tuple[str, str, int]]:
            return [(c.text, c.finish_reason, c.tokens) for c in self._plain_choices(req, job)]

        return stream_job(chunks, job, req.n, render, stops, finals, len(prompt_ids))

    def _sampling(self, req: ChatRequest, max_tokens: int, offset: int = 0) -> SamplingParams:
        seed = None if req.seed is None else req.seed + offset
        return SamplingParams(temperature=req.temperature, top_p=req.top_p, max_new_tokens=max_tokens,
                              stop=[*self.markers, *req.stop], seed=seed)

    def _plain(self, req: ChatRequest, prompt_ids: list[int], max_tokens: int, n: int) -> list[Choice]:
        """``n`` samples through the batching scheduler (sample ``i`` seeded ``seed + i``)."""
        job = self.scheduler.submit(prompt_ids, n, self._sampling(req, max_tokens), top_logprobs=req.top_logprobs)
        return self._plain_choices(req, job)

    def _plain_choices(self, req: ChatRequest, job: Any) -> list[Choice]:
        """The choices of a batch job, once done: the text cut at control markers and without the stop string."""
        completions = job.wait()
        out = []
        for c, alternatives in zip(completions, job.alternatives or [None] * len(completions)):
            text, marked = cut_at_markers(c.text, self.markers)  # no control token text reaches the client
            for s in req.stop:  # the engine keeps the stop string; OpenAI does not
                if not marked and c.finish_reason == "stop" and text.endswith(s):
                    text = text[: -len(s)]
                    break
            finish = "stop" if marked or c.finish_reason != "length" else "length"
            out.append(Choice(text, finish, c.num_tokens, c.completion_ids, c.logprobs, alternatives))
        return out

    def _choice(self, req: ChatRequest, prompt_ids: list[int], max_tokens: int, index: int) -> Choice:
        """One structured choice: constrained when the schema allows (one sample at a time, outside the batch:
        its forward passes take turns with the batch's), else sampled through the batch and checked."""
        if req.format == "json_schema" and supported(req.schema):
            self.gate.enter()
            try:
                text, tokens = self.decoder.generate(prompt_ids, req.schema,
                                                     self._sampling(req, max_tokens, index), max_tokens)
            finally:
                self.gate.leave()
            return Choice(text, "stop", tokens)
        attempts = 1 if req.temperature == 0 else self.json_attempts
        candidates = self._plain(self._with_seed(req, index * attempts), prompt_ids, max_tokens, attempts)
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


def _adapter_field(body: dict[str, Any], key: str) -> str:
    value = body.get(key)
    if not isinstance(value, str) or not value.strip():
        what = "the adapter's name" if key == "lora_name" else "the adapter folder's path (as the server sees it)"
        raise ApiError(400, f"{key} must be {what}, a non-empty string", key)
    return value


def chat_logprobs(choice: Choice, tokenizer: Any) -> dict[str, Any]:
    """OpenAI's ``choices[i].logprobs``: per token its text, log-prob and UTF-8 bytes, and the most likely tokens."""
    alternatives = choice.alternatives or [[] for _ in choice.token_ids]
    ids = sorted({*choice.token_ids, *(t for alts in alternatives for t, _ in alts)})
    names = dict(zip(ids, token_pieces(tokenizer, ids)))

    def entry(token: int, logp: float) -> dict[str, Any]:
        name = names[token]
        return {"token": name, "logprob": max(logp, MIN_LOGPROB), "bytes": list(name.encode("utf-8", "replace"))}

    return {"content": [{**entry(t, lp), "top_logprobs": [entry(a, alp) for a, alp in alts]}
                        for t, lp, alts in zip(choice.token_ids, choice.logprobs, alternatives)]}


def longest_token_chars(tokenizer: Any) -> int:
    """The most characters one token can stand for, at most: the longest vocabulary entry (byte-level and
    SentencePiece entries have a character per byte or per character), so a prompt of more than
    ``context × this`` characters cannot fit in the context, and is refused without tokenizing it."""
    vocab = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else {}
    return max((len(t) for t in vocab), default=64) or 64


def eos_token_ids(model: Any, tokenizer: Any) -> set[int]:
    """The end-of-sequence token ids (the generation config's, else the tokenizer's): where vLLM stops unless
    ``ignore_eos``."""
    ids = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if ids is None:
        ids = tokenizer.eos_token_id
    return set(ids if isinstance(ids, list) else [] if ids is None else [ids])


def control_markers(tokenizer: Any) -> list[str]:
    """The ChatML markers and the tokenizer's special tokens: where a reply ends."""
    special = getattr(tokenizer, "all_special_tokens", None) or []
    return list(dict.fromkeys([*TEMPLATE_TOKENS, *(t for t in special if isinstance(t, str) and t)]))


# ---- HTTP ---------------------------------------------------------------------------------------------
def make_server(service: ChatService, host: str = "127.0.0.1", port: int = 0, quiet: bool = True,
                token: str | None = None, limits: HttpLimits | None = None) -> ThreadingHTTPServer:
    """A bound server (port 0 = a free port; read it from ``server.server_address``); call serve_forever().
    A host other than loopback needs ``token`` (ConfigError otherwise); with a token every request needs it,
    the weight reload included."""
    return json_server(service, host, port, token=token, limits=limits, quiet=quiet)


def load_service(model: str | None, name: str | None = None, device: str = "cpu", dtype: str = "float32",
                 quantization: Any = None, **kw: Any) -> ChatService:
    """A ChatService for a model folder, Hub id (None or "bundled": kitae-tiny-base) or LoRA adapter folder (its
    base, quantized as trained, and the adapter: kitae.models.load_adapter_model); ``quantization``
    (kitae.quantization.QuantizationConfig) holds the base in 4 or 8 bits."""
    from kitae.errors import ConfigError
    from kitae.models import load_causal_lm, load_tokenizer, model_name, resolve_model_path

    path = resolve_model_path(model, "--model", adapter=True)
    if dtype not in ("float32", "bfloat16", "float16"):
        raise ConfigError("--dtype", f"expected float32, bfloat16 or float16, got {dtype!r}")
    loaded = load_causal_lm(path, dtype, device, quantization=quantization)
    loaded.eval()
    return ChatService(loaded, load_tokenizer(path), name or model_name(path), **kw)
