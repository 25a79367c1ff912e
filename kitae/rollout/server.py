"""The ``server`` rollout engine: groups sampled by inference servers (vLLM, SGLang, ``kitae serve model``).

    sampling: {engine: server, servers: [http://10.0.0.2:8000, http://10.0.0.3:8000], sync: disk}

Each prompt (its chat template applied here, as the in-process engine does) is one request for ``n`` = group size
completions, sent as token ids with the run's sampling settings and stop strings; the reply carries the sampled
token ids and their log-probs. All groups of a call are requested at once (the servers batch them).

Wire APIs, registered in :data:`SERVER_APIS` (``sampling.server_api``):

``openai`` (vLLM, ``kitae serve model``; the contract is /work's SERVER_CONTRACT, vLLM's completions API)
    POST /v1/completions ``{"prompt": [ids], "n", "max_tokens", "temperature", "top_p", "top_k", "seed", "stop",
    "include_stop_str_in_output": true, "skip_special_tokens": false, "logprobs": 0,
    "return_tokens_as_token_ids": true, "repetition_penalty", "return_weight_versions": true}`` ->
    ``choices[i].logprobs.tokens`` ("token_id:N") and ``token_logprobs``, ``finish_reason``, and the weights
    that sampled them: ``choices[i].weight_versions`` (vLLM 0.33's spans, labelled by kitae's vllm sync; kitae
    serve model answers them too) or the reply's ``weight_version`` (kitae serve model).
``sglang`` (SGLang 0.5's native API)
    POST /generate ``{"input_ids": [[ids]] * n, "sampling_params": [{..., "n": 1, "sampling_seed": seed + i}],
    "return_logprob": true}`` (a batch of one-sample requests, so each sample has its own seed) -> one object
    per sample with ``meta_info.output_token_logprobs`` ([logprob, token id, text] per token) and
    ``meta_info.finish_reason.type``. SGLang honours ``sampling_seed`` only when started with
    ``--enable-deterministic-inference``. tests/contracts checks the fields against SGLang's source; no SGLang
    server runs here.

Same samples as the in-process engine: the server's tokens are read back with the in-process engine's own rules
and a :class:`~kitae.rollout.codec.TokenCodec` as its (each engine holds one): a sample ends at the first token
where a stop string is complete (on the token sequence or the decoded tail, so a multi-token ``<|im_end|>`` stops
it), then where repeat detection fires (finish reason "repeat"), else at max_new_tokens ("length"); the text is
decoded here and cut after the stop string. A server that already stopped there returns exactly these tokens.

Finish reasons: "stop" and "length" are read as they are, and vLLM's "repetition" (0.17 on: its repetition
detection ended the sample) as kitae's "repeat". A choice the server did not finish is no sample: vLLM's "abort"
(every version: the request was aborted, e.g. by an engine paused with mode "abort" for a weight update, or
shutting down), its "error" (0.11.1 on: a retryable request-level error such as a KV-cache load failure, which
vLLM's own server answers as HTTP 500) and SGLang's "abort" (with its message). Such a reply is dropped and the
request goes to another replica, as for a failure.

Replicas: each request goes to the replica with the fewest requests in flight. A replica that fails (connection
error, timeout, HTTP 429/5xx, a reply that cannot be read, a choice it did not finish) is marked down for
``sampling.server_down_secs`` and the request goes to another one; when every replica is down the step waits,
logging one line every few seconds, and gives up with an error after ``sampling.server_max_wait`` seconds. A 4xx
answer (a request the server refuses) is an error at once: retrying elsewhere would not help.

Weights: the trainer pushes its weights after optimizer steps (:meth:`ServerEngine.sync_weights`, strategies in
kitae.rollout.sync); a LoRA run pushes only its adapter, and each replica's requests then name the adapter it
loaded last (``model``, SGLang's ``lora_path``); a 404 for that name (the server restarted and lost it) marks the
replica down until it loads the newest adapter again. Each replica remembers which policy version it holds; a
reply whose ``weight_version`` is not the one that replica reported when it loaded the weights, or samples older
than ``sampling.max_staleness`` steps, are dropped, counted (``rollout/stale_dropped``) and asked again, after the
replica reloads the latest weights. ``sync: none`` (a frozen server) tracks no versions.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Literal
from urllib.parse import urlsplit

import httpx

from kitae.chat import Message
from kitae.config import setting
from kitae.errors import ConfigError, KitaeError
from kitae.registry import Registry
from kitae.rollout.base import (CHATML_STOPS, BuiltFromConfig, ChecksServers, Completion, ContinuesTokens,
                                EngineSettings, RemoteLogprobs, ReportsStats, RolloutEngine, SamplingParams,
                                SyncsWeights)
from kitae.rollout.codec import HoldsCodec, TokenCodec, repeat_period
from kitae.http.client import Retrier, WireCounters, WireError, auth_headers

log = logging.getLogger("kitae.rollout.server")
SERVER_APIS = Registry("rollout server API")
WAIT_LOG_SECS = 10.0  # while every replica is down, one log line this often
MAX_IN_FLIGHT = 256  # requests in flight per replica (the rest wait here, not on the server)


class ReplicaError(WireError):
    """One replica could not answer one request."""


class UnfinishedChoice(ValueError):
    """A reply's choice that the server did not finish (vLLM's finish_reason "abort" or "error")."""


# ---- the engine's settings ---------------------------------------------------------------------------------
@dataclass
class ServerSettings(EngineSettings):
    """``sampling.engine: {type: server, ...}``; configs keep writing these beside ``engine: server`` in the sampling
    section (``sampling.servers``, ``sampling.sync``, ...), which reads the same."""

    on_servers: ClassVar[bool] = True
    servers: list[str] = field(default_factory=list)  # base URLs of the replicas, e.g. http://127.0.0.1:8000
    server_api: Literal["openai", "sglang"] = "openai"  # openai: vLLM, kitae serve model; sglang: its /generate
    api_key_env: str | None = "KITAE_SERVE_TOKEN"  # when this variable is set: Authorization: Bearer its value
    server_timeout: float = 600.0  # seconds one request may take
    server_down_secs: float = 30.0  # a replica that failed is skipped this long, then tried again
    server_max_wait: float = 1800.0  # every replica down this long stops the run with an error (0 = wait forever)
    sync: Literal["disk", "vllm", "none"] = "disk"  # how the trainer's weights reach the servers
    sync_every: int = setting(1, minimum=1)  # optimizer steps between weight pushes
    sync_dir: str | None = None  # disk and adapter sync: a folder both sides see (default: RUN_DIR/sync)
    lora_sync: Literal["adapter", "merged"] = "adapter"  # LoRA runs: adapter = push only the adapter (the servers
    # load it: vLLM --enable-lora, SGLang --enable-lora, kitae serve model), merged = the merged weights by sync

    def resolve(self, path: str) -> None:
        """Write each server URL as its base URL (no trailing / or /v1)."""
        for i, url in enumerate(self.servers):
            try:
                self.servers[i] = check_url(url, f"{path}.servers[{i}]")
            except ConfigError:
                pass  # not a URL: left as written, for validate to name after the checks that come first

    def validate(self, path: str) -> None:
        if not self.servers:
            raise ConfigError(f"{path}.servers", "engine 'server' needs at least one server URL, e.g. "
                              "[http://127.0.0.1:8000] (start one with `kitae serve model --port 8000`)")
        for i, url in enumerate(self.servers):
            check_url(url, f"{path}.servers[{i}]")
        for key in ("server_timeout", "server_down_secs"):
            if getattr(self, key) <= 0:
                raise ConfigError(f"{path}.{key}", f"must be > 0 seconds, got {getattr(self, key)}")
        if self.server_max_wait < 0:
            raise ConfigError(f"{path}.server_max_wait", f"must be >= 0 seconds (0 = wait forever), got "
                              f"{self.server_max_wait}")

    def check_sampling(self, sampling: Any, path: str) -> None:
        """``max_staleness`` against the pushes: samples between two pushes must not all be too old to keep;
        ``async`` needs a push after every step."""
        if sampling.async_ and self.sync == "none":
            raise ConfigError(f"{path}.async", "with sync: none the servers never get the policy's weights, so "
                              "there is no policy version to bound; set sync: disk or vllm, or async: false")
        if sampling.async_ and self.sync_every != 1:
            raise ConfigError(f"{path}.sync_every", f"is {self.sync_every}, but async: true pushes the weights "
                              "after every step (max_staleness bounds the lag); set sync_every: 1")
        if self.sync != "none" and sampling.max_staleness < self.sync_every - 1:
            raise ConfigError(f"{path}.max_staleness", f"is {sampling.max_staleness}, but with sync_every "
                              f"{self.sync_every} samples are up to {self.sync_every - 1} steps old and would all be "
                              f"dropped; set max_staleness to at least {self.sync_every - 1}")

    def check_model(self, model: Any, path: str) -> None:
        """vLLM's NCCL push needs vllm and a GPU here, unless a LoRA run pushes its adapter (through disk)."""
        if self.sync == "vllm" and not (model.lora and self.lora_sync == "adapter"):
            from kitae.rollout.sync import check_vllm_sync

            check_vllm_sync(f"{path}.sync")

    def check_push(self, model: Any, path: str) -> None:
        """A quantized base trains an adapter: its merged weights are packed tensors no server loads."""
        if model.quantization is not None and self.sync != "none" and self.lora_sync == "merged":
            raise ConfigError(f"{path}.lora_sync", "merged: the server engine's servers would take the policy's full "
                              "weights after each step, and a quantized base's weights are packed 4/8-bit tensors "
                              "a server cannot load; push only the adapter (sampling.lora_sync: adapter, the "
                              "default), sample in this process (sampling.engine: hf) or set sampling.sync: none")


# ---- URLs and the pre-flight check -------------------------------------------------------------------------
def check_url(url: Any, path: str) -> str:
    """``url`` as a base URL (no trailing slash, no trailing /v1), or ConfigError at ``path``."""
    text = str(url).strip()
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(path, f"{text!r} is not an http(s) URL; write it like http://127.0.0.1:8000")
    try:
        _ = parts.port  # reading it checks it
    except ValueError:
        raise ConfigError(path, f"{text!r} has a bad port; write it like http://127.0.0.1:8000") from None
    return text.rstrip("/").removesuffix("/v1")


def preflight(urls: list[str], timeout: float = 10.0, api_key_env: str | None = None,
              path: str = "sampling.servers") -> dict[str, str | None]:
    """Ask every replica whether it answers (GET /v1/models, then /health), before the trainer loads its model.

    Returns url -> served model name (None when the server does not say). Raises KitaeError naming the URL, what
    went wrong and how to fix it, for the first replica that does not answer.
    """
    names: dict[str, str | None] = {}
    headers = auth_headers(api_key_env)
    with httpx.Client(timeout=timeout) as client:
        for i, url in enumerate(urls):
            names[url] = _probe(client, url, headers, f"{path}[{i}]", api_key_env)
    return names


def _probe(client: httpx.Client, url: str, headers: dict[str, str], where: str,
           api_key_env: str | None) -> str | None:
    last = ""
    for route in ("/v1/models", "/health"):
        try:
            resp = client.get(url + route, headers=headers)
        except httpx.HTTPError as exc:
            raise KitaeError(f"{where}: no rollout server answers at {url} ({type(exc).__name__}: {exc}). Start it "
                             f"first (kitae serve model --port PORT, vllm serve MODEL, python -m "
                             f"sglang.launch_server ...) or fix the URL.") from None
        if resp.status_code in (401, 403):
            raise KitaeError(f"{where}: {url} wants an access token (HTTP {resp.status_code}); "
                             + _token_hint(api_key_env))
        if resp.status_code == 200:
            return _served_name(resp) if route == "/v1/models" else None
        last = f"GET {route}: HTTP {resp.status_code}"
    raise KitaeError(f"{where}: {url} answers, but not as a rollout server ({last}); give the server's base URL, "
                     "e.g. http://127.0.0.1:8000")


def _served_name(resp: httpx.Response) -> str | None:
    try:
        data = resp.json().get("data") or []
        return str(data[0]["id"]) if data else None
    except (ValueError, AttributeError, KeyError, IndexError, TypeError):
        return None


def _refusal_hint(status: int) -> str:
    if status == 404:
        return (" (no such endpoint or model: the server_api setting must match the server: openai for vLLM and "
                "kitae serve model, sglang for SGLang's native API)")
    if status in (401, 403):
        return ""  # the Retrier's hint explains the token
    return " (the server refused the request: the message names the setting it does not take)"


def _token_hint(api_key_env: str | None) -> str:
    if not api_key_env:
        return "name the environment variable holding it in sampling.api_key_env"
    state = "is set" if os.environ.get(api_key_env) else "is not set"
    return f"kitae sends ${api_key_env} (sampling.api_key_env), which {state}"


# ---- wire APIs ---------------------------------------------------------------------------------------------
@dataclass
class Choice:
    """One sample as a server returned it."""

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str  # "stop" | "length" | "repeat"


@dataclass
class Reply:
    choices: list[Choice]
    weight_version: int | str | None  # the server's own counter or vLLM's label of the oldest weights, if any


@dataclass(frozen=True)
class ServerApi:
    """``build(prompt_ids, n, sampling, model, adapter=None)`` -> JSON body for ``path`` (``adapter``: the LoRA
    adapter the replica serves the policy under, kitae.rollout.sync's adapter push); ``parse(reply, n)`` -> Reply
    (raises ValueError, KeyError or TypeError on a reply it cannot read)."""

    path: str
    build: Callable[..., dict[str, Any]]
    parse: Callable[[Any, int], Reply]


def request_stops(sp: SamplingParams) -> list[str]:
    """The stop strings a request carries: ``sp.stop`` as the engine resolved it (:meth:`ending`: ChatML's and
    the model's end texts); unresolved (None), ChatML's."""
    return list(sp.stop) if sp.stop is not None else list(CHATML_STOPS)


def _openai_body(prompt_ids: list[int], n: int, sp: SamplingParams, model: str | None,
                 adapter: str | None = None) -> dict[str, Any]:
    """vLLM's completions body; an adapter is named as the model (vLLM serves each loaded adapter as a model)."""
    model = adapter or model
    body = {
        "prompt": list(prompt_ids), "n": n, "max_tokens": sp.max_new_tokens, "temperature": sp.temperature,
        "top_p": sp.top_p, "top_k": sp.top_k or -1, "seed": sp.seed, "stop": request_stops(sp),
        "include_stop_str_in_output": True, "skip_special_tokens": False, "logprobs": 0,
        "return_tokens_as_token_ids": True, "repetition_penalty": sp.repetition_penalty,
        "return_weight_versions": True,
    }
    return {"model": model, **body} if model else body


def _token_id(token: Any) -> int:
    text = str(token)
    if not text.startswith("token_id:"):
        raise ValueError(f"token {text[:40]!r} is not 'token_id:N' (send return_tokens_as_token_ids)")
    return int(text.removeprefix("token_id:"))


def _version(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _span_version(spans: Any) -> int | str | None:
    """The oldest weights among a choice's ``weight_versions`` spans (vLLM 0.33's ``[{"version", "start",
    "end"}]``, the labels kitae gave at finish_weight_update): an int for kitae's labels, the label itself for
    any other (weights kitae did not push), None for no spans."""
    if not spans:
        return None
    labels = [str(span["version"]) for span in spans]
    if all(label.isdigit() for label in labels):
        return min(int(label) for label in labels)
    return next(label for label in labels if not label.isdigit())


def _openai_parse(reply: Any, n: int) -> Reply:
    choices = sorted(reply["choices"], key=lambda c: c.get("index", 0))
    out, spans = [], []
    for i, c in enumerate(choices):
        reason = _finish(c.get("finish_reason"), i, c.get("stop_reason"))
        lp = c["logprobs"]
        ids = [_token_id(t) for t in lp["tokens"]]
        out.append(Choice(ids, [float(x) for x in lp["token_logprobs"]], reason))
        spans.extend(c.get("weight_versions") or [])
    if spans:  # vLLM: per choice, the weights that sampled each range of tokens
        return Reply(out, _span_version(spans))
    return Reply(out, _version(reply.get("weight_version")))


def _sglang_body(prompt_ids: list[int], n: int, sp: SamplingParams, model: str | None,
                 adapter: str | None = None) -> dict[str, Any]:
    """A batch of ``n`` one-sample requests of the prompt, sample ``i`` seeded ``seed + i`` (as vLLM and kitae
    serve model seed a request's samples): SGLang copies one ``sampling_seed`` to all ``n`` samples of a request,
    which would make them one sample ``n`` times where it honours the seed. An adapter is named by ``lora_path``
    (SGLang's name of a loaded adapter, copied to every request of the batch)."""
    params = {
        "n": 1, "max_new_tokens": sp.max_new_tokens, "temperature": sp.temperature, "top_p": sp.top_p,
        "top_k": sp.top_k or -1, "repetition_penalty": sp.repetition_penalty, "stop": request_stops(sp),
        "no_stop_trim": True, "skip_special_tokens": False,
    }
    seeds = [None if sp.seed is None else sp.seed + i for i in range(n)]
    body = {"input_ids": [list(prompt_ids)] * n, "return_logprob": True,
            "sampling_params": [{**params, "sampling_seed": seed} if seed is not None else params for seed in seeds]}
    return {**body, "lora_path": adapter} if adapter else body


def _sglang_parse(reply: Any, n: int) -> Reply:
    rows = [reply] if isinstance(reply, dict) else list(reply)
    out, versions = [], set()
    for i, row in enumerate(rows):
        meta = row["meta_info"]
        reason = meta.get("finish_reason")
        said = reason.get("message") if isinstance(reason, dict) else None
        reason = _finish(reason.get("type") if isinstance(reason, dict) else reason, i, said)
        triples = meta["output_token_logprobs"]  # [[logprob, token id, text or null], ...]
        out.append(Choice([int(t[1]) for t in triples], [float(t[0]) for t in triples], reason))
        versions.add(_version(meta.get("weight_version")))
    return Reply(out, versions.pop() if len(versions) == 1 else None)


FINISH_REASONS = {"stop": "stop", "length": "length", "repetition": "repeat"}  # the server's -> kitae's
UNFINISHED = {  # finish reasons of a choice that is no sample, and what they mean
    "abort": "aborted the request (e.g. an engine paused with mode 'abort' for a weight update, or shutting down)",
    "error": "had an internal error generating it (vLLM's retryable request-level error, e.g. a KV-cache load "
             "failure)",
}


def _finish(reason: Any, index: int, said: Any = None) -> str:
    """kitae's finish reason for the server's; UnfinishedChoice for a choice the server did not finish, ValueError
    for a reason no server gives."""
    if reason in UNFINISHED:
        detail = f": {str(said)[:200]}" if said else ""
        raise UnfinishedChoice(f"it {UNFINISHED[reason]} (choice {index}: finish_reason '{reason}'{detail}); "
                               "asked again")
    if reason not in FINISH_REASONS:
        raise ValueError(f"finish_reason {reason!r} (expected {', '.join(map(repr, [*FINISH_REASONS, *UNFINISHED]))})")
    return FINISH_REASONS[reason]


SERVER_APIS.register("openai", ServerApi("/v1/completions", _openai_body, _openai_parse))
SERVER_APIS.register("sglang", ServerApi("/generate", _sglang_body, _sglang_parse))


# ---- replicas ----------------------------------------------------------------------------------------------
@dataclass
class Replica:
    url: str
    index: int
    served_model: str | None = None
    in_flight: int = 0
    down_until: float = 0.0
    last_error: str = ""
    synced: int | None = None  # the policy version it holds (None: not pushed by this run, or lost)
    server_version: int | None = None  # its own weight_version when it loaded them (None: it reports none)
    adapter: str | None = None  # the LoRA adapter its requests name (adapter push), None: its base model
    adapters: list[str] = field(default_factory=list)  # the adapters this run loaded into it, oldest first
    retrier: Retrier | None = field(default=None, repr=False)

    def is_up(self, now: float) -> bool:
        return self.down_until <= now


@dataclass
class RolloutStats:
    """Counters of one training step (read and reset by :meth:`ServerEngine.take_stats`)."""

    versions: list[int] = field(default_factory=list)
    stale_dropped: int = 0  # samples dropped for old weights
    failovers: int = 0  # requests sent again to another replica after one failed
    wait_secs: float = 0.0  # the longest time a group waited with every replica down


class ServerEngine(HoldsCodec, RolloutEngine, ContinuesTokens, SyncsWeights, RemoteLogprobs, ReportsStats, ChecksServers,
                   BuiltFromConfig):
    """Rollouts from inference servers. Prompts are encoded, stop strings matched and texts decoded by a
    :class:`~kitae.rollout.codec.TokenCodec`, as in the in-process engine (see the module docstring). The trainer
    pushes its weights to the servers, recomputes its own log-probs (RemoteLogprobs), and logs the replicas'
    counters (kitae.rollout.base's abilities). ``model``: not used (the policy's weights come with each push);
    engines are built as ``cls(policy, tokenizer, ...)``."""

    def __init__(self, model: Any, tokenizer: Any, servers: list[str] | tuple[str, ...] = (), *,
                 api: str = "openai", timeout: float = 600.0, down_secs: float = 30.0, max_wait: float = 1800.0,
                 max_staleness: int | None = 0, api_key_env: str | None = None, weight_sync: Any = None,
                 served_models: dict[str, str | None] | None = None, sync_every: int = 1):
        self.codec = TokenCodec(tokenizer)
        self.api = SERVER_APIS.get(api, "sampling.server_api")
        self.timeout, self.down_secs, self.max_wait = timeout, down_secs, max_wait
        self.max_staleness, self.api_key_env = max_staleness, api_key_env
        self.weight_sync = weight_sync  # kitae.rollout.sync strategy (a WeightSync); None = frozen servers
        self.sync_every = sync_every  # optimizer steps between pushes (SyncsWeights)
        self.version: int | None = None  # the policy version last pushed to the replicas
        self.counters = WireCounters()
        self.replicas = [Replica(url, i, (served_models or {}).get(url)) for i, url in enumerate(servers)]
        for r in self.replicas:
            r.retrier = Retrier(f"rollout server {r.url}", self.counters, ReplicaError, timeout=timeout,
                                retries=0, max_concurrency=MAX_IN_FLIGHT, hint=self._hint)
        self.stats = RolloutStats()
        self._last_wait_log = 0.0

    @staticmethod
    def check_servers(sampling: Any) -> dict[str, str | None]:
        """The trainer's pre-flight (kitae.trainer.preflight): every replica of ``sampling`` (a SamplingConfig, its
        ``engine`` the ServerSettings) answers, before the model loads; URL -> served model name."""
        s: ServerSettings = sampling.engine
        return preflight(s.servers, min(30.0, s.server_timeout), s.api_key_env)

    @classmethod
    def from_config(cls, model: Any, tokenizer: Any, sampling: Any, run_dir: Any,
                    served_models: dict[str, str | None] | None = None) -> "ServerEngine":
        """The engine of ``sampling`` (its ``engine``: the ServerSettings); ``served_models`` from
        :meth:`check_servers` (asked here when not given)."""
        from kitae.rollout.sync import build_sync

        s: ServerSettings = sampling.engine
        names = served_models if served_models is not None else cls.check_servers(sampling)
        tracked = s.sync != "none"
        return cls(model, tokenizer, s.servers, api=s.server_api, timeout=s.server_timeout,
                   down_secs=s.server_down_secs, max_wait=s.server_max_wait,
                   max_staleness=sampling.max_staleness if tracked else None, api_key_env=s.api_key_env,
                   weight_sync=build_sync(s, run_dir, model, sampling.max_staleness), served_models=names,
                   sync_every=s.sync_every)

    # ---- weights ----------------------------------------------------------------------------------------
    @property
    def frozen(self) -> bool:
        """``sampling.sync: none``: the servers keep the weights they started with."""
        return self.weight_sync is None

    def sync_weights(self, model: Any, version: int, state: dict[str, Any] | None = None) -> dict[str, float]:
        """Push ``model``'s weights (for LoRA its adapter, or the merged weights; ``state``: its gathered full
        state dict, under FSDP) to every replica as policy ``version``; the bytes moved and those of a full push
        (``sync/bytes``, ``sync/full_bytes``)."""
        if self.weight_sync is None:
            return {}
        moved = self.weight_sync.push(self, model, version, state)
        self.version = version
        return moved

    def synced_state(self) -> tuple[int | None, list[tuple[Any, Any, float]]]:
        """The version pushed last and what each replica holds since (its version, the server's own label, when
        it is down until)."""
        return self.version, [(r.synced, r.server_version, r.down_until, r.adapter, list(r.adapters))
                              for r in self.replicas]

    def load_synced_state(self, state: tuple[int | None, list[tuple[Any, ...]]]) -> None:
        self.version, replicas = state
        for r, (synced, server_version, down_until, adapter, adapters) in zip(self.replicas, replicas):
            r.synced, r.server_version, r.down_until, r.adapter, r.adapters = (synced, server_version, down_until,
                                                                              adapter, adapters)

    def mark_loaded(self, replica: Replica, version: int, server_version: Any) -> None:
        """A sync strategy's report: ``replica`` now holds policy ``version`` (its reply said ``server_version``)."""
        replica.synced, replica.server_version = version, _version(server_version)

    def mark_down(self, replica: Replica, reason: str) -> None:
        now = time.monotonic()
        if replica.is_up(now):  # requests failing together log once
            log.warning("rollout server %s: %s; skipping it for %gs", replica.url, reason, self.down_secs)
        replica.down_until = now + self.down_secs
        replica.last_error = reason

    def take_stats(self) -> dict[str, float]:
        """This step's rollout metrics, and a fresh count for the next step."""
        s, self.stats = self.stats, RolloutStats()
        now = time.monotonic()
        out = {"rollout/stale_dropped": s.stale_dropped, "rollout/failovers": s.failovers,
               "rollout/replicas_down": sum(not r.is_up(now) for r in self.replicas)}
        if s.wait_secs:
            out["rollout/wait_secs"] = s.wait_secs
        if s.versions:
            out["policy_version"] = min(s.versions)
        return out

    # ---- sampling ---------------------------------------------------------------------------------------
    def generate(self, prompts: list[list[Message]], n: int, sampling: SamplingParams) -> list[list[Completion]]:
        return self.generate_tokens([self.encode_prompt(m) for m in prompts], n, sampling)

    def generate_tokens(self, prompt_ids: list[list[int]], n: int, sampling: SamplingParams) -> list[list[Completion]]:
        from kitae.aio import run_sync

        if not self.replicas:
            raise ConfigError("sampling.servers", "the server engine has no servers")
        return run_sync(self._generate_all(prompt_ids, n, self.ending(sampling)))  # the model's end texts too

    async def _generate_all(self, prompt_ids: list[list[int]], n: int, sp: SamplingParams) -> list[list[Completion]]:
        limits = httpx.Limits(max_connections=MAX_IN_FLIGHT * len(self.replicas), max_keepalive_connections=64)
        locks = {r.url: asyncio.Lock() for r in self.replicas}  # one reload at a time per replica
        async with httpx.AsyncClient(timeout=self.timeout, limits=limits) as client:
            tasks = [self._group(client, locks, ids, n, sp.offset_seed(i)) for i, ids in enumerate(prompt_ids)]
            return list(await asyncio.gather(*tasks))

    async def _group(self, client: httpx.AsyncClient, locks: dict[str, asyncio.Lock], prompt_ids: list[int], n: int,
                     sp: SamplingParams) -> list[Completion]:
        """One group: asked of the least-loaded current replica until one answers with fresh enough weights."""
        waiting_since: float | None = None  # every replica down since then, with no answer in between
        while True:
            replica = self._pick()
            if replica is None:
                waiting_since = waiting_since or time.monotonic()
                await self._wait_for_replica(waiting_since)
                continue
            replica.in_flight += 1  # counted from the pick on, so requests sent together spread out
            try:
                current = await self._ensure_current(replica, locks[replica.url])
                reply = await self._ask(client, replica, prompt_ids, n, sp) if current else False
            finally:
                replica.in_flight -= 1
            if reply is False:
                continue
            if reply is None:
                self.stats.failovers += 1
                continue
            version = self._sample_version(replica, reply)
            if self._too_old(version):
                self.stats.stale_dropped += n
                replica.synced = None  # it reloads before its next request
                self.mark_down(replica, f"answered with old weights (its weight_version {reply.weight_version}, "
                                        f"policy version {version}, now {self.version}): samples dropped")
                continue
            if version is not None:
                self.stats.versions.append(version)
            return [self._completion(prompt_ids, c, sp) for c in reply.choices]

    def _pick(self) -> Replica | None:
        now = time.monotonic()
        up = [r for r in self.replicas if r.is_up(now)]
        return min(up, key=lambda r: (r.in_flight, r.index)) if up else None

    async def _wait_for_replica(self, since: float) -> None:
        now = time.monotonic()
        waited = now - since
        if self.max_wait and waited > self.max_wait:
            raise KitaeError(f"no rollout server answered for {waited:.0f}s (sampling.server_max_wait "
                             f"{self.max_wait:g}s): {self._down_report()}")
        wake = min(WAIT_LOG_SECS, max(0.2, min(r.down_until for r in self.replicas) - now))
        if now - self._last_wait_log >= WAIT_LOG_SECS:
            self._last_wait_log = now
            log.warning("all %d rollout servers are down; the step waits and retries in %.0fs (waiting %.0fs so far; "
                        "gives up after sampling.server_max_wait %gs): %s", len(self.replicas), wake, waited,
                        self.max_wait, self._down_report())
        await asyncio.sleep(wake)
        self.stats.wait_secs = max(self.stats.wait_secs, time.monotonic() - since)

    def _down_report(self) -> str:
        return "; ".join(f"{r.url}: {r.last_error or 'down'}" for r in self.replicas)

    async def _ensure_current(self, replica: Replica, lock: asyncio.Lock) -> bool:
        """Reload the latest pushed weights into a replica that missed them (disk sync). False: it could not."""
        if self.weight_sync is None or self.version is None or replica.synced == self.version:
            return True
        async with lock:
            if replica.synced == self.version or not replica.is_up(time.monotonic()):
                return replica.synced == self.version
            from kitae.rollout.sync import ReloadsWeights

            if not isinstance(self.weight_sync, ReloadsWeights):
                self.mark_down(replica, f"it missed the weights of policy version {self.version}; it gets them "
                                        "at the next push")
                return False
            try:
                await asyncio.to_thread(self.weight_sync.reload, self, replica)
            except (WireError, KitaeError, OSError) as exc:
                self.mark_down(replica, f"reloading weights failed: {exc}")
                return False
            return True

    async def _ask(self, client: httpx.AsyncClient, replica: Replica, prompt_ids: list[int], n: int,
                   sp: SamplingParams) -> Reply | None:
        """The reply of ``replica``, or None after marking it down; raises KitaeError on a refused request."""
        body = self.api.build(prompt_ids, n, sp, replica.served_model, replica.adapter)
        url, headers = replica.url + self.api.path, auth_headers(self.api_key_env)
        try:
            raw = await replica.retrier.post(lambda: client.post(url, json=body, headers=headers))
            reply = self.api.parse(raw, n)
            if len(reply.choices) != n:
                raise ValueError(f"{len(reply.choices)} choices for n={n}")
            for c in reply.choices:
                if len(c.token_ids) != len(c.logprobs) or not c.token_ids:
                    raise ValueError(f"{len(c.token_ids)} tokens and {len(c.logprobs)} log-probs in a choice")
            return reply
        except ReplicaError as exc:
            if exc.status == 404 and replica.adapter is not None:  # it lost the adapter (a restart): reload it
                replica.synced = None
                self.mark_down(replica, f"it does not know the adapter {replica.adapter} (restarted?); it loads the "
                                        "newest adapter before its next request")
                return None
            if exc.status is not None and 400 <= exc.status < 500 and exc.status != 429:
                raise KitaeError(f"{exc}{_refusal_hint(exc.status)}") from None
            self.mark_down(replica, str(exc).removeprefix(f"rollout server {replica.url}: "))
        except UnfinishedChoice as exc:
            self.mark_down(replica, str(exc))
        except (ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
            self.counters.bad_replies += 1
            self.mark_down(replica, f"unreadable reply: {type(exc).__name__}: {exc}")
        return None

    def _hint(self, resp: httpx.Response) -> str:
        return f" ({_token_hint(self.api_key_env)})" if resp.status_code in (401, 403) else ""

    def _sample_version(self, replica: Replica, reply: Reply) -> int | None:
        """The policy version that sampled ``reply``: the version ``replica`` was last given, unless the server
        reports weights other than the ones it loaded then (a restart, another trainer)."""
        if self.weight_sync is None or replica.synced is None:
            return None
        reported = reply.weight_version
        if replica.server_version is not None and reported is not None and reported != replica.server_version:
            return None
        return replica.synced

    def _too_old(self, version: int | None) -> bool:
        if self.max_staleness is None or self.version is None:
            return False
        return version is None or self.version - version > self.max_staleness

    # ---- one sample, read back with the in-process engine's rules ------------------------------------------
    def _completion(self, prompt_ids: list[int], choice: Choice, sp: SamplingParams) -> Completion:
        codec = self.codec
        tokens, logps, reason = cut_sample(choice.token_ids, choice.logprobs, choice.finish_reason, sp,
                                           lambda toks: codec.hit_stop(toks, codec.stop_ids(tuple(sp.stop))))
        return codec.completion(prompt_ids, tokens, logps, reason, sp.stop)


def cut_sample(tokens: list[int], logps: list[float], server_reason: str, sp: SamplingParams,
               hit_stop: Callable[[list[int]], bool]) -> tuple[list[int], list[float], str]:
    """(tokens, log-probs, finish reason) of a sample as the in-process engine would have ended it: at the first
    token where ``hit_stop`` fires ("stop"), else where repeat detection fires ("repeat"), else at max_new_tokens
    ("length"); a server that stopped earlier for a reason of its own (an end-of-sequence token outside the stop
    strings, its context) keeps its finish reason.

    >>> sp = SamplingParams(max_new_tokens=8, repeat_min_count=3, repeat_max_period=2, repeat_min_span=4)
    >>> cut_sample([5, 7, 7, 7, 7, 9], [-1.0] * 6, "length", sp, lambda t: t[-1] == 9)
    ([5, 7, 7, 7, 7], [-1.0, -1.0, -1.0, -1.0, -1.0], 'repeat')
    """
    for t in range(min(len(tokens), sp.max_new_tokens)):
        prefix = tokens[: t + 1]
        if hit_stop(prefix):
            reason = "stop"
        elif sp.repeat_min_count and repeat_period(prefix, sp.repeat_max_period, sp.repeat_min_count,
                                                   sp.repeat_min_span):
            reason = "repeat"
        elif t == sp.max_new_tokens - 1:
            reason = "length"
        else:
            continue
        return prefix, logps[: t + 1], reason
    return list(tokens), list(logps), server_reason
