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
    """kitae's WeightSource and client against vLLM's public abstract class and client protocol (structural: every
    method it declares, with the same parameters)."""
    import torch
    from vllm.distributed.weight_transfer import VLLMWeightSyncClient, WeightSource

    from kitae.rollout.sync import VllmClient, policy_source

    source = policy_source(torch.nn.Linear(3, 2))
    client = VllmClient("http://127.0.0.1:9", 1.0, None)
    wanted = {name: inspect.signature(member) for name, member in vars(VLLMWeightSyncClient).items()
              if inspect.isfunction(member) and not name.startswith("_")}
    return {"source_is_weight_source": isinstance(source, WeightSource),
            "implements_iter_full": source.implements_iter_full(),
            "metadata": [[m.name, str(m.dtype), list(m.shape)] for m in source.metadata],
            "signatures": {name: [list(inspect.signature(getattr(client, name)).parameters)
                                  if hasattr(client, name) else None,
                                  [p for p in sig.parameters if p != "self"]] for name, sig in wanted.items()}}


class Communicator:
    """vLLM's NCCL communicator (PyNcclCommunicator) as its trainer engine uses it: ``rank``, ``broadcast``,
    ``destroy``. It keeps what it is given to broadcast instead of sending it: no GPU here."""

    def __init__(self, rank: int):
        self.rank, self.sent = rank, []

    def broadcast(self, tensor, src, stream=None):
        self.sent.append(tensor.clone())

    def destroy(self):
        pass


def packed_broadcast_on_cpu(iterator, group, src, post_iter_func, buffer_size_bytes, **_):
    """vLLM's packed_nccl_broadcast_producer without its CUDA streams: the same chunks (vLLM's pack_tensors),
    broadcast in order."""
    from vllm.distributed.weight_transfer.packed_tensor import pack_tensors

    while (chunk := pack_tensors(iterator, post_iter_func, buffer_size_bytes)) is not None:
        group.broadcast(chunk.packed_tensor, src=src)


def without_nccl(opened: list) -> None:
    """vLLM's NCCL trainer engine, as released, with its two GPU-only calls (open the NCCL group, broadcast on
    CUDA streams) replaced: the trainer endpoint is a Communicator, appended to ``opened``."""
    import torch
    from vllm.distributed.weight_transfer import nccl_engine

    def open_trainer_endpoint(init_info, rank=0):
        opened.append(Communicator(rank))
        opened[-1].init = {"world_size": init_info.world_size, "rank": rank, "packed": init_info.packed}
        return opened[-1]

    for name, stand_in in [("open_trainer_endpoint", open_trainer_endpoint),
                           ("packed_nccl_broadcast_producer", packed_broadcast_on_cpu)]:
        assert callable(getattr(nccl_engine, name, None)), \
            f"vLLM's NCCL trainer engine no longer calls {name}: change this stand-in to what it calls now"
        setattr(nccl_engine, name, stand_in)
    assert not torch.accelerator.is_available()  # else the engine's stream sync would wait on a real device


def unpacked(sent: list, update, buffer_size_bytes: int) -> list:
    """What a vLLM worker unpacks from the broadcast ``sent`` with the update info's names, dtypes and shapes
    (packed_nccl_broadcast_consumer's chunking and vLLM's unpack_tensor; its receive itself needs CUDA)."""
    import math

    import torch
    from vllm.distributed.weight_transfer.packed_tensor import unpack_tensor

    chunks, chunk, size = [], [], 0
    for name, dtype_name, shape in zip(update.names, update.dtype_names, update.shapes):
        dtype = getattr(torch, dtype_name)
        chunk.append((name, shape, dtype, math.prod(shape) * dtype.itemsize))
        size += chunk[-1][3]
        if size > buffer_size_bytes:
            chunks, chunk, size = chunks + [chunk], [], 0
    chunks += [chunk] if chunk else []
    assert len(sent) == len(chunks), f"{len(sent)} broadcasts for {len(chunks)} chunks"
    out = []
    for packed, meta in zip(sent, chunks):
        names, shapes, dtypes, sizes = (list(x) for x in zip(*meta))
        assert packed.numel() == sum(sizes), f"a chunk of {packed.numel()} bytes for {sum(sizes)}"
        out += unpack_tensor(packed, names, shapes, dtypes, sizes)
    return out


def sync(spec: dict) -> dict:
    """kitae's vllm sync, pushing to vLLM's own RL router (a real server on loopback) whose engine client records
    every call and parses the payloads with vLLM's worker-side classes. kitae drives vLLM's trainer engine as
    released, its NCCL group and CUDA-stream broadcast replaced (without_nccl); what it broadcast is unpacked as a
    vLLM worker would and compared with the model's weights. The weights change between pushes."""
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
    worker: dict = {"init": None, "updates": []}

    class Recorder:  # the engine client of vllm serve, as far as the RL routes use it
        vllm_config = SimpleNamespace(parallel_config=SimpleNamespace(world_size_across_dp=spec["world_size"],
                                                                      world_size=spec["world_size"]))

        async def pause_generation(self, mode, clear_cache):
            calls.append(["pause", mode])

        async def resume_generation(self):
            calls.append(["resume"])

        async def init_weight_transfer_engine(self, request):
            worker["init"] = NCCLWeightTransferInitInfo(**request.init_info)
            calls.append(["init", {k: getattr(worker["init"], k) for k in ("rank_offset", "world_size", "packed")}])

        async def start_weight_update(self):
            calls.append(["start"])

        async def update_weights(self, request):
            info = NCCLWeightTransferUpdateInfo(**request.update_info)
            worker["updates"].append(info)
            calls.append(["update", info.names, info.dtype_names, info.shapes, info.src])

        async def finish_weight_update(self, weight_version):
            calls.append(["finish", weight_version])

    opened: list[Communicator] = []
    without_nccl(opened)
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
    loaded, down, received = [], [], []
    engine = SimpleNamespace(replicas=[replica], mark_loaded=lambda r, v, s: loaded.append([v, s]),
                             mark_down=lambda r, why: down.append(why))
    push = VllmSync(SimpleNamespace(server_timeout=30.0, api_key_env=None), None,
                    engine_cls=NCCLTrainerWeightTransferEngine)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 1)).to(torch.bfloat16)
    update = None
    for version in spec["versions"]:
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1.0)  # new weights for each push: the worker must get these, not the first push's
        push.push(engine, model, version)
        latest = worker["updates"][-1]
        update = latest if latest.names else update  # vLLM's worker: empty lists reuse the previous metadata
        sent, opened[-1].sent = opened[-1].sent, []
        weights = model.state_dict()
        received.append([[name, str(t.dtype), list(t.shape), torch.equal(t, weights[name])]
                         for name, t in unpacked(sent, update, worker["init"].packed_buffer_size_bytes)])
    server.should_exit = True
    return {"calls": calls, "loaded": loaded, "down": down, "received": received,
            "endpoints": [c.init for c in opened],
            "routes": sorted([r.path, sorted(r.methods)] for r in router.routes)}


def without_sagemaker() -> None:
    """SageMaker's adapter-handler registry (model_hosting_container_standards, a vllm dependency the contract
    environment does not install; vLLM's LoRA routes register themselves there too) as decorators that register
    nothing: the routes themselves stay vLLM's."""
    import types

    sagemaker = types.ModuleType("model_hosting_container_standards.sagemaker")
    sagemaker.register_load_adapter_handler = lambda **_: (lambda f: f)
    sagemaker.register_unload_adapter_handler = lambda **_: (lambda f: f)
    package = types.ModuleType("model_hosting_container_standards")
    package.sagemaker = sagemaker
    sys.modules.update({package.__name__: package, sagemaker.__name__: sagemaker})


def lora(spec: dict) -> dict:
    """kitae's adapter push against vLLM's LoRA routes as released (vllm.entrypoints.serve.lora.api_router, attached
    as ``vllm serve`` attaches it with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True), served by uvicorn: vLLM's request
    models read kitae's bodies, and kitae reads the text vLLM's handler answers. The handler (OpenAIServingModels,
    which needs a running engine) is replaced by one that records the requests and answers with the strings vLLM's
    gives; so is SageMaker's registry (:func:`without_sagemaker`)."""
    import os
    from pathlib import Path

    import uvicorn
    from fastapi import FastAPI

    os.environ["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
    without_sagemaker()
    from vllm.entrypoints.openai.models.serving import OpenAIServingModels
    from vllm.entrypoints.serve.lora import api_router

    from kitae.rollout.server import Replica
    from kitae.rollout.sync import AdapterSync

    seen = []

    class Models:  # OpenAIServingModels' two LoRA methods, answering as vLLM's do on success
        async def load_lora_adapter(self, request, base_model_name=None):
            seen.append(["load", request.model_dump()])
            return f"Success: LoRA adapter '{request.lora_name}' added successfully."

        async def unload_lora_adapter(self, request):
            seen.append(["unload", request.model_dump()])
            return f"Success: LoRA adapter '{request.lora_name}' removed successfully."

    app = FastAPI()
    api_router.attach_router(app)
    app.state.openai_serving_models = Models()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    replica, loaded = Replica(f"http://127.0.0.1:{port}", 0), []
    engine = SimpleNamespace(mark_loaded=lambda r, v, s: loaded.append([v, s, r.adapter]))
    push = AdapterSync(SimpleNamespace(sync_dir=spec["folder"], server_api="openai", server_timeout=30.0,
                                       api_key_env=None, max_staleness=0), Path(spec["folder"]))
    for version in spec["versions"]:
        push.latest = (version, Path(spec["folder"]) / f"adapter-v{version:06d}")
        push.reload(engine, replica)
    server.should_exit = True
    source = inspect.getsource(OpenAIServingModels.load_lora_adapter)
    return {"seen": seen, "loaded": loaded,
            "routes": sorted([r.path, sorted(r.methods)] for r in api_router.router.routes),
            "answers_text": "return f\"Success: LoRA adapter '{lora_name}' added successfully.\"" in source}


CHECKS = {"requests": requests, "chat": chat, "reply": reply, "protocols": protocols, "sync": sync, "lora": lora}

if __name__ == "__main__":  # one process for every check: importing vllm takes most of the time
    print(json.dumps({key: CHECKS[name](data) for key, (name, data) in json.load(sys.stdin).items()}))
