"""Checks run IN the contract environment (vllm importable): ``python vllm_checks.py < input.json`` with
``{key: [check name, its input]}`` prints ``{key: its output}``. The pytest side (test_vllm.py) builds kitae's inputs and asserts on the output."""

from __future__ import annotations

import inspect
import json
import socket
import sys
import threading
import time
from types import SimpleNamespace


def requests(bodies: list[dict]) -> dict:
    """Each body as vLLM's CompletionRequest reads it: fields it does not declare, and its SamplingParams."""
    from vllm.entrypoints.openai.completion.protocol import CompletionRequest

    out = []
    for body in bodies:
        req = CompletionRequest.model_validate(body)
        sp = req.to_sampling_params(body["max_tokens"], {})
        out.append({"undeclared": sorted(set(body) - set(CompletionRequest.model_fields)),
                    "return_weight_versions": req.return_weight_versions,
                    "return_tokens_as_token_ids": req.return_tokens_as_token_ids,
                    "sampling": {k: getattr(sp, k) for k in ("n", "seed", "max_tokens", "temperature", "top_p",
                                                            "top_k", "logprobs", "skip_special_tokens",
                                                            "include_stop_str_in_output", "repetition_penalty")}
                    | {"stop": list(sp.stop or [])}})
    return {"requests": out}


def chat(bodies: list[dict]) -> dict:
    """Each chat body as vLLM's ChatCompletionRequest reads it (fields it does not declare, its
    chat_template_kwargs), and whether its CompletionRequest has a chat_template_kwargs field."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.entrypoints.openai.completion.protocol import CompletionRequest

    out = []
    for body in bodies:
        req = ChatCompletionRequest.model_validate(body)
        out.append({"undeclared": sorted(set(body) - set(ChatCompletionRequest.model_fields)),
                    "chat_template_kwargs": req.chat_template_kwargs})
    return {"chat": out, "completions_field": "chat_template_kwargs" in CompletionRequest.model_fields}


def reply(spec: dict) -> dict:
    """A CompletionResponse built with vLLM's classes from ``spec['choices']`` ([ids, logprobs, reason, spans])."""
    from vllm.entrypoints.openai.completion.protocol import (CompletionLogProbs, CompletionResponse,
                                                             CompletionResponseChoice)
    from vllm.entrypoints.serve.engine.protocol import UsageInfo
    from vllm.outputs import WeightVersionSpan

    choices = [CompletionResponseChoice(
        index=i, text="", finish_reason=reason,
        logprobs=CompletionLogProbs(tokens=[f"token_id:{t}" for t in ids], token_logprobs=lps,
                                    top_logprobs=[{f"token_id:{t}": lp} for t, lp in zip(ids, lps)],
                                    text_offset=[0] * len(ids)),
        weight_versions=[WeightVersionSpan(*span) for span in spans] if spans is not None else None)
        for i, (ids, lps, reason, spans) in enumerate(spec["choices"])]
    resp = CompletionResponse(model="m", choices=choices, usage=UsageInfo(prompt_tokens=1))
    return {"reply": json.loads(resp.model_dump_json())}


def protocols(_: dict) -> dict:
    """kitae's WeightSource and client against vLLM's abstract classes and client protocol."""
    import torch
    from vllm.distributed.weight_transfer import base

    from kitae.rollout.sync import VllmClient, policy_source

    source = policy_source(torch.nn.Linear(3, 2))
    client = VllmClient("http://127.0.0.1:9", 1.0, None)
    wanted = {name: inspect.signature(getattr(base.VLLMWeightSyncClient, name))
              for name in ("init_weight_transfer_engine", "start_weight_update", "update_weights",
                           "finish_weight_update")}
    return {"source_is_weight_source": isinstance(source, base.WeightSource),
            "implements_iter_full": source.implements_iter_full(),
            "metadata": [[m.name, str(m.dtype), list(m.shape)] for m in source.metadata],
            "client_is_sync_client": isinstance(client, base.VLLMWeightSyncClient),
            "signatures": {name: [list(inspect.signature(getattr(client, name)).parameters),
                                  [p for p in sig.parameters if p != "self"]] for name, sig in wanted.items()}}


def sync(spec: dict) -> dict:
    """kitae's vllm sync, pushing twice to vLLM's own RL router (a real server on loopback) whose engine client
    records every call and parses the payloads with vLLM's worker-side classes; vLLM's trainer engine runs as
    released except its two NCCL calls."""
    import torch
    import uvicorn
    from fastapi import FastAPI
    from vllm.distributed.weight_transfer.nccl_common import NCCLWeightTransferInitInfo
    from vllm.distributed.weight_transfer.nccl_engine import (NCCLTrainerWeightTransferEngine,
                                                              NCCLWeightTransferUpdateInfo)
    from vllm.entrypoints.rl.online.api_router import router

    from kitae.rollout.server import Replica
    from kitae.rollout.sync import VllmSync

    calls: list[list] = []

    class Recorder:  # the engine client of vllm serve, as far as the RL routes use it
        vllm_config = SimpleNamespace(parallel_config=SimpleNamespace(world_size_across_dp=spec["world_size"],
                                                                      world_size=spec["world_size"]))

        async def pause_generation(self, mode, clear_cache):
            calls.append(["pause", mode])

        async def resume_generation(self):
            calls.append(["resume"])

        async def init_weight_transfer_engine(self, request):
            info = NCCLWeightTransferInitInfo(**request.init_info)
            calls.append(["init", {k: getattr(info, k) for k in ("rank_offset", "world_size", "packed",
                                                                  "master_port")}])

        async def start_weight_update(self):
            calls.append(["start"])

        async def update_weights(self, request):
            info = NCCLWeightTransferUpdateInfo(**request.update_info)
            calls.append(["update", info.names, info.dtype_names, info.shapes])

        async def finish_weight_update(self, weight_version):
            calls.append(["finish", weight_version])

    class WithoutNccl(NCCLTrainerWeightTransferEngine):
        def _open_trainer_endpoint(self, init_info):
            calls.append(["trainer endpoint", init_info.world_size, init_info.packed])

        def _broadcast(self, source, meta):
            sent = [[n, list(t.shape)] for n, t in self._checked_iter(source, meta)]  # vLLM's own check
            calls.append(["broadcast", sent])

    app = FastAPI()
    app.include_router(router)
    app.state.engine_client = Recorder()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    replica = Replica(f"http://127.0.0.1:{port}", 0)
    loaded, down = [], []
    engine = SimpleNamespace(replicas=[replica], mark_loaded=lambda r, v, s: loaded.append([v, s]),
                             mark_down=lambda r, why: down.append(why))
    push = VllmSync(SimpleNamespace(server_timeout=30.0, api_key_env=None), None, engine_cls=WithoutNccl)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 1)).to(torch.bfloat16)
    for version in spec["versions"]:
        push.push(engine, model, version)
    server.should_exit = True
    return {"calls": calls, "loaded": loaded, "down": down,
            "routes": sorted([r.path, sorted(r.methods)] for r in router.routes)}


CHECKS = {"requests": requests, "chat": chat, "reply": reply, "protocols": protocols, "sync": sync}

if __name__ == "__main__":  # one process for every check: importing vllm takes most of the time
    print(json.dumps({key: CHECKS[name](data) for key, (name, data) in json.load(sys.stdin).items()}))
