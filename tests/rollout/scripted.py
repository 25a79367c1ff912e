"""A completions server for the server engine's tests: a real HTTP server on 127.0.0.1 that speaks the
contract's /v1/completions, /update_weights_from_disk, /v1/models and /health (vLLM's field names).

Samples come from a real :class:`HFEngine` (``engine``), or from ``script``: a list of entries used in order, then
``default``; an entry is a function ``request body -> reply`` (a dict sent as JSON) or an ``(HTTP status, body)``
pair. ``weight_version`` counts weight loads as kitae serve model does; every request is kept in ``requests``.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Callable

import torch

from kitae.rollout.base import SamplingParams
from kitae.http.server import json_server
from kitae.http.requests import RequestError

Entry = Callable[[dict], Any] | tuple[int, Any]


def choice(token_ids: list[int], logprobs: list[float], finish: str = "stop", index: int = 0) -> dict:
    """One choice of a completions reply, vLLM-shaped."""
    return {"index": index, "text": "", "finish_reason": finish,
            "logprobs": {"tokens": [f"token_id:{t}" for t in token_ids], "token_logprobs": logprobs,
                         "top_logprobs": [{f"token_id:{t}": lp} for t, lp in zip(token_ids, logprobs)],
                         "text_offset": [0] * len(token_ids)}}


def reply(choices: list[dict], weight_version: int | None = 0) -> dict:
    out = {"id": "cmpl-scripted", "object": "text_completion", "model": "scripted", "choices": choices,
           "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}}
    if weight_version is not None:
        out["weight_version"] = weight_version
    return out


class _Refused(RequestError):
    def __init__(self, status: int, payload: Any):
        super().__init__(status, "scripted")
        self.payload = payload


class CompletionsServer:
    def __init__(self, engine: Any = None, script: list[Entry] | None = None, default: Entry | None = None,
                 delay: float = 0.0, port: int = 0):
        self.engine, self.script, self.default, self.delay = engine, list(script or []), default, delay
        self.requests: list[dict] = []
        self.reloads: list[str] = []
        self.weight_version = 0
        self.report_version = True
        self._lock = threading.Lock()
        self.server = json_server(self, "127.0.0.1", port)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._thread.start()

    def __enter__(self) -> "CompletionsServer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    @property
    def completions(self) -> list[dict]:
        return [r["body"] for r in self.requests if r["path"] == "/v1/completions"]

    # ---- JsonService --------------------------------------------------------------------------------
    def error_reply(self, exc: Exception, method: str, path: str) -> tuple[int, Any]:
        if isinstance(exc, _Refused):
            return exc.status, exc.payload
        status = exc.status if isinstance(exc, RequestError) else 500
        return status, {"error": {"message": f"{type(exc).__name__}: {exc}", "type": "error", "param": None,
                                  "code": status}}

    def handle_get(self, path: str) -> Any:
        if path == "/health":
            return {"status": "ok", "model": "scripted", "weight_version": self.weight_version}
        if path == "/v1/models":
            return {"object": "list", "data": [{"id": "scripted", "object": "model", "max_model_len": 512}]}
        raise RequestError(404, f"no endpoint GET {path}")

    def handle_post(self, path: str, body: Any) -> Any:
        with self._lock:
            self.requests.append({"path": path, "body": body})
        if path == "/update_weights_from_disk":
            return self._reload(body["model_path"])
        if path in ("/load_lora_adapter", "/unload_lora_adapter"):  # SGLang's adapter routes, answered as SGLang's
            return {"success": True, "error_message": None, "loaded_adapters": {}}  # LoRAUpdateOutput
        if path != "/v1/completions":
            raise RequestError(404, f"no endpoint POST {path}")
        if self.delay:
            time.sleep(self.delay)
        with self._lock:
            entry = self.script.pop(0) if self.script else self.default
        if entry is None:
            return self._sample(body)
        if isinstance(entry, tuple):
            raise _Refused(*entry)
        return entry(body)

    # ---- a real model behind it -----------------------------------------------------------------------
    def _sample(self, body: dict) -> dict:
        sp = SamplingParams(temperature=body["temperature"], top_p=body["top_p"], top_k=max(0, body["top_k"]),
                            repetition_penalty=body["repetition_penalty"], max_new_tokens=body["max_tokens"],
                            stop=body["stop"], seed=body["seed"])
        with self._lock:
            group = self.engine.generate_tokens([body["prompt"]], body["n"], sp)[0]
            version = self.weight_version
        choices = [choice(c.completion_ids, c.logprobs, "stop" if c.finish_reason == "stop" else "length", i)
                   for i, c in enumerate(group)]
        return reply(choices, version if self.report_version else None)

    def _reload(self, folder: str) -> dict:
        from safetensors.torch import load_file

        weights = {}
        for f in sorted(Path(folder).glob("*.safetensors")):
            weights.update(load_file(f))
        with self._lock:
            if self.engine is not None:
                missing, unexpected = self.engine.model.load_state_dict(weights, strict=False)
                assert not unexpected and all("lm_head" in k for k in missing), (missing, unexpected)
            self.reloads.append(folder)
            self.weight_version += 1
            return {"success": True, "message": "loaded", "weight_version": self.weight_version}


def clone_model(model: Any) -> Any:
    """A copy of ``model`` with its own weights (a server's copy of the trainer's model)."""
    import copy

    out = copy.deepcopy(model)
    with torch.no_grad():
        for p in out.parameters():
            p.data = p.data.clone()
    return out
