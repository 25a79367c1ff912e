"""Weight sync: how the trainer's weights reach the rollout servers (``sampling.sync``), registered in
:data:`WEIGHT_SYNCS`.

``disk`` (SGLang, ``kitae serve model``)
    The weights are written as a Hugging Face folder (config.json + safetensors) under ``sampling.sync_dir``
    (default RUN_DIR/sync; a folder the servers see at the same path), then every replica is asked to load it:
    POST /update_weights_from_disk ``{"model_path": FOLDER, "load_format": null}`` (SGLang's endpoint and body)
    -> ``{"success": true, "message": ...}``; SGLang 0.5 also says ``num_paused_requests``, kitae serve model
    adds ``weight_version`` (its load counter), which SGLang's reply does not carry. Only the newest folder is
    kept. A replica that was down during a push loads the newest folder before its next request.
``vllm`` (vLLM 0.33's weight-transfer API, server started with ``VLLM_SERVER_DEV_MODE=1`` and
    ``--weight-transfer-config '{"backend": "nccl"}'``)
    Per replica, once: GET /get_world_size, then vLLM's ``NCCLTrainerWeightTransferEngine.trainer_init`` with
    ``NCCLTrainerInitInfo(master_address, master_port, world_size + 1, rank=0, packed=True)``: it POSTs
    /init_weight_transfer_engine (the workers' init info, packing and buffer sizes agreed there: vLLM's workers
    unpack only when the trainer says so) while this process joins the NCCL group as rank 0. Per push: POST
    /pause?mode=wait, then the engine's ``send_weights()`` (POST /start_weight_update, /update_weights with the
    names, dtypes and shapes, empty after the first push, while the tensors are broadcast, /finish_weight_update
    ``{"weight_version": "V"}``), then /resume. The weights come from a ``WeightSource`` (:func:`policy_source`)
    and the routes are spoken by :class:`VllmClient` (kitae's timeout and access token; vLLM's own HTTP client
    sends neither). Needs vllm 0.33 or 0.34 and CUDA in the trainer's process; a replica that misses a push sits out
    until the next one. tests/contracts checks the calls, payloads, routes and the broadcast weights against vLLM
    0.34's modules; the NCCL transport itself is untested here (no GPU).
``none``
    Nothing is pushed: a frozen server (off-policy runs, evaluation). Versions are not tracked.

``adapter`` (LoRA runs with ``sampling.lora_sync: adapter``, the default; chosen by :func:`build_sync`, not named
    in ``sync``)
    Only the adapter moves: peft's ``save_pretrained`` of the adapter weights into ``sync_dir/adapter-vNNNNNN``
    (a plain peft adapter folder), then every replica is asked to load it under the name ``kitae-vNNNNNN`` and
    to unload the adapters older than the ``max_staleness + 1`` newest (the previous one, in a synchronous run):
    ``server_api: openai`` (vLLM 0.34, ``kitae serve model``): POST /v1/load_lora_adapter ``{"lora_name",
    "lora_path"}`` -> vLLM's text "Success: ...", kitae serve model's ``{"success": true, "weight_version"}``;
    POST /v1/unload_lora_adapter ``{"lora_name"}``. vLLM needs ``--enable-lora`` (with ``--max-lora-rank`` at
    least the run's ``r``) and ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``. ``server_api: sglang`` (SGLang 0.5):
    POST /load_lora_adapter ``{"lora_name", "lora_path"}`` -> ``{"success", "error_message",
    "loaded_adapters"}``, POST /unload_lora_adapter ``{"lora_name"}``; SGLang needs ``--enable-lora`` (and
    ``--max-lora-rank``, ``--lora-target-modules``). Sampling requests then name the adapter: ``"model"`` in
    /v1/completions, ``"lora_path"`` in SGLang's /generate. A replica that missed a push loads the newest adapter
    before its next request. Only the newest ``max_staleness + 1`` folders are kept.

Every push returns ``{"sync/bytes": B, "sync/full_bytes": F}``: the bytes it moved (the adapter folder's files;
the written safetensors files of a disk push; the broadcast tensors of a vllm push) and the bytes a full push
moves (every parameter of the base model, as held in memory), logged with the step's metrics.
``lora_sync: merged`` pushes a LoRA run's merged weights (W + the adapter's delta, under the base model's names)
with ``disk`` or ``vllm``, for servers started without LoRA support.
Under FSDP every process gathers the full state dict first (kitae.trainer.sharded.full_model_state) and the main
process pushes it (``state``); ``vllm`` under FSDP is untested here (no GPU).
"""

from __future__ import annotations

import concurrent.futures
import functools
import importlib.util
import logging
import math
import shutil
import socket
import time
from pathlib import Path
from typing import Any, Iterator, Protocol, runtime_checkable
from urllib.parse import urlsplit

import httpx
import torch

from kitae.errors import ConfigError, KitaeError
from kitae.registry import Registry

log = logging.getLogger("kitae.rollout.sync")
WEIGHT_SYNCS = Registry("weight sync")


class WeightSync(Protocol):
    """A strategy of :data:`WEIGHT_SYNCS`, built as ``cls(sampling, run_dir)``."""

    def push(self, engine: Any, model: Any, version: int,
             state: dict[str, torch.Tensor] | None = None) -> dict[str, float]:
        """``model``'s weights (``state``: its gathered full state dict, under FSDP) to every replica of
        ``engine`` (kitae.rollout.server.ServerEngine) as policy ``version``; each replica that took them is
        reported with ``engine.mark_loaded``, each that did not with ``engine.mark_down``. Returns the bytes moved
        and those a full push moves (``sync/bytes``, ``sync/full_bytes``)."""
        ...


@runtime_checkable
class ReloadsWeights(Protocol):
    """A strategy that can give a replica which missed a push the newest weights later, without the model."""

    def reload(self, engine: Any, replica: Any) -> None:
        """The newest pushed weights into ``replica``; raises KitaeError when it does not take them."""
        ...


def check_vllm_sync(path: str) -> None:
    """ConfigError at ``path`` unless vllm and a CUDA device are here (the NCCL broadcast runs in this process)."""
    missing = []
    if importlib.util.find_spec("vllm") is None:
        missing.append("the vllm package is not installed (pip install vllm)")
    if not torch.cuda.is_available():
        missing.append("no CUDA device is visible")
    if missing:
        raise ConfigError(path, "'vllm' broadcasts the weights over NCCL from the trainer's process, but "
                          + " and ".join(missing) + "; use sync: disk (SGLang, kitae serve model) or run the "
                          "trainer on a GPU machine with vllm installed (docs/scale.md)")


def build_sync(sampling: Any, run_dir: Any, model: Any = None, max_staleness: int = 0):
    """The strategy of ``sampling.sync`` (None for 'none'); for a PEFT LoRA ``model`` with ``sampling.lora_sync:
    adapter``, the adapter push whichever server sync is named. ``sampling``: the server engine's settings
    (kitae.rollout.server.ServerSettings), which every strategy here is built from; ``max_staleness``: the
    sampling section's (how many adapters a replica keeps)."""
    if sampling.sync == "none":
        return None
    if is_lora(model) and sampling.lora_sync == "adapter":
        return AdapterSync(sampling, Path(run_dir), max_staleness)
    cls = WEIGHT_SYNCS.get(sampling.sync, "sampling.sync")
    return cls(sampling, Path(run_dir))


def is_lora(model: Any) -> bool:
    """Whether ``model`` is a PEFT model (whose trained weights are its LoRA adapters; not the base inside it)."""
    if model is None or importlib.util.find_spec("peft") is None:
        return False
    from peft import PeftModel

    return isinstance(model, PeftModel)


def full_bytes(model: Any) -> int:
    """The bytes a full push moves: every parameter of the base model (a LoRA model's without its adapters), as
    held in memory (tied weights counted once)."""
    base = model.get_base_model() if is_lora(model) else model
    return sum(p.numel() * p.element_size() for name, p in base.named_parameters() if ".lora_" not in name)


def folder_bytes(folder: Path) -> int:
    """The size of every file in ``folder`` (what a server reads from it)."""
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def sync_metrics(moved: int, model: Any) -> dict[str, float]:
    return {"sync/bytes": float(moved), "sync/full_bytes": float(full_bytes(model))}


# ---- the weights ---------------------------------------------------------------------------------------------
def policy_tensors(model: Any, state: dict[str, torch.Tensor] | None = None) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) of every weight under the base model's names; a PEFT LoRA model's adapted layers come out
    merged (W + delta), computed aside: the training model is not touched. ``state``: ``model``'s full state
    dict gathered elsewhere (under FSDP, where ``model``'s own holds one process's shard), read instead."""
    if not hasattr(model, "peft_config"):
        for name, t in (model.state_dict() if state is None else state).items():
            yield name, t.detach()
        return
    base = model.get_base_model()
    weights = base.state_dict() if state is None else {k.removeprefix("base_model.model."): v for k, v in state.items()}
    for name, t in weights.items():
        if ".lora_" in name:
            continue
        if ".base_layer." not in name:
            yield name, t.detach()
            continue
        owner, _, leaf = name.rpartition(".base_layer.")
        layer = base.get_submodule(owner)
        merged = t.detach()
        if leaf == "weight":
            with torch.no_grad():
                for adapter in layer.active_adapters:
                    if adapter in getattr(layer, "lora_A", {}):
                        merged = merged + _delta(layer, adapter, owner, state and weights).to(merged.dtype)
        yield f"{owner}.{leaf}", merged


def _delta(layer: Any, adapter: str, owner: str, weights: dict[str, torch.Tensor] | None) -> torch.Tensor:
    """A LoRA layer's weight delta: PEFT's own, or (from gathered ``weights``) B @ A times its scaling, as PEFT's
    Linear computes it (kitae's LoRA: Linear layers, no DoRA)."""
    if weights is None:
        return layer.get_delta_weight(adapter)
    a, b = weights[f"{owner}.lora_A.{adapter}.weight"], weights[f"{owner}.lora_B.{adapter}.weight"]
    delta = b.float() @ a.float()
    return (delta.T if layer.fan_in_fan_out else delta) * layer.scaling[adapter]


def write_weights(model: Any, folder: Path, state: dict[str, torch.Tensor] | None = None) -> Path:
    """``model``'s weights (merged, for LoRA; ``state``: as :func:`policy_tensors`) as a Hugging Face folder at
    ``folder``, written aside and renamed into place, so a server never reads half a folder."""
    tmp = folder.with_name(f".{folder.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    base = model.get_base_model() if hasattr(model, "peft_config") else model
    base.save_pretrained(tmp, state_dict=dict(policy_tensors(model, state)), safe_serialization=True)
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    return folder


# ---- disk -----------------------------------------------------------------------------------------------------
@WEIGHT_SYNCS.register("disk")
class DiskSync(WeightSync, ReloadsWeights):
    """Write the weights, then ask each replica to load them (see the module docstring). A replica that missed a
    push loads the newest folder later (:meth:`reload`)."""

    def __init__(self, sampling: Any, run_dir: Path):
        self.root = Path(sampling.sync_dir) if sampling.sync_dir else run_dir / "sync"
        self.timeout = sampling.server_timeout
        self.api_key_env = sampling.api_key_env
        self.latest: tuple[int, Path] | None = None

    def push(self, engine: Any, model: Any, version: int,
             state: dict[str, torch.Tensor] | None = None) -> dict[str, float]:
        self.root.mkdir(parents=True, exist_ok=True)
        folder = write_weights(model, (self.root / f"v{version:06d}").resolve(), state)
        self.latest = (version, folder)
        now = time.monotonic()
        live = [r for r in engine.replicas if r.is_up(now)]  # the others load the folder when they are back
        with concurrent.futures.ThreadPoolExecutor(max(1, len(live))) as pool:
            list(pool.map(lambda r: self._try_reload(engine, r), live))
        for old in self.root.glob("v*"):
            if old.is_dir() and old.resolve() != folder:
                shutil.rmtree(old, ignore_errors=True)
        return sync_metrics(sum(f.stat().st_size for f in folder.glob("*.safetensors")), model)

    def _try_reload(self, engine: Any, replica: Any) -> None:
        try:
            self.reload(engine, replica)
        except (KitaeError, OSError) as exc:
            replica.synced = None
            engine.mark_down(replica, f"could not load the weights: {exc}")

    def reload(self, engine: Any, replica: Any) -> None:
        """Load the newest folder into ``replica``; raises KitaeError when it does not."""
        if self.latest is None:
            return
        version, folder = self.latest
        body = {"model_path": str(folder), "load_format": None}
        reply = _post(replica.url + "/update_weights_from_disk", body, self.timeout, self.api_key_env)
        if not (isinstance(reply, dict) and reply.get("success") is True):
            message = reply.get("message") if isinstance(reply, dict) else reply
            raise KitaeError(f"{replica.url} did not load {folder}: {str(message)[:300]}")
        engine.mark_loaded(replica, version, reply.get("weight_version"))


# ---- adapter ---------------------------------------------------------------------------------------------------
ADAPTER_ROUTES = {  # server_api -> (load, unload): vLLM's and kitae serve model's, SGLang's
    "openai": ("/v1/load_lora_adapter", "/v1/unload_lora_adapter"),
    "sglang": ("/load_lora_adapter", "/unload_lora_adapter"),
}


def adapter_name(version: int) -> str:
    """The name a replica serves policy ``version``'s adapter under (what sampling requests name)."""
    return f"kitae-v{version:06d}"


def write_adapter(model: Any, folder: Path, state: dict[str, torch.Tensor] | None = None) -> Path:
    """A PEFT LoRA ``model``'s adapter (its weights and adapter_config.json, nothing of the base) as a peft adapter
    folder at ``folder``, written aside and renamed into place. ``state``: the gathered full state dict (FSDP)."""
    tmp = folder.with_name(f".{folder.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, state_dict=state, safe_serialization=True)
    (tmp / "README.md").unlink(missing_ok=True)  # peft's model card: no server reads it
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    return folder


class AdapterSync(WeightSync, ReloadsWeights):
    """Push only a LoRA run's adapter (see the module docstring): written once per push, loaded by every live
    replica under :func:`adapter_name`; the replica's requests name it from then on (``replica.adapter``). A
    replica that missed a push loads the newest adapter later (:meth:`reload`)."""

    def __init__(self, sampling: Any, run_dir: Path, max_staleness: int | None = 0):
        self.root = Path(sampling.sync_dir) if sampling.sync_dir else run_dir / "sync"
        self.load_route, self.unload_route = ADAPTER_ROUTES[sampling.server_api]
        self.timeout, self.api_key_env = sampling.server_timeout, sampling.api_key_env
        self.keep = (max_staleness or 0) + 1  # adapters a replica keeps: those samples may still name
        self.latest: tuple[int, Path] | None = None

    def push(self, engine: Any, model: Any, version: int,
             state: dict[str, torch.Tensor] | None = None) -> dict[str, float]:
        self.root.mkdir(parents=True, exist_ok=True)
        folder = write_adapter(model, (self.root / f"adapter-v{version:06d}").resolve(), state)
        self.latest = (version, folder)
        now = time.monotonic()
        live = [r for r in engine.replicas if r.is_up(now)]  # the others load the adapter when they are back
        with concurrent.futures.ThreadPoolExecutor(max(1, len(live))) as pool:
            list(pool.map(lambda r: self._try_reload(engine, r), live))
        for old in sorted(self.root.glob("adapter-v*"))[:-self.keep]:
            shutil.rmtree(old, ignore_errors=True)
        return sync_metrics(folder_bytes(folder), model)

    def _try_reload(self, engine: Any, replica: Any) -> None:
        try:
            self.reload(engine, replica)
        except (KitaeError, OSError) as exc:
            replica.synced = None
            engine.mark_down(replica, f"could not load the adapter: {exc}")

    def reload(self, engine: Any, replica: Any) -> None:
        """Load the newest adapter into ``replica``, then unload its oldest beyond :attr:`keep`; raises
        KitaeError when it does not load."""
        if self.latest is None:
            return
        version, folder = self.latest
        name = adapter_name(version)
        try:
            reply = _post(replica.url + self.load_route, {"lora_name": name, "lora_path": str(folder)},
                          self.timeout, self.api_key_env)
        except KitaeError as exc:
            if "HTTP 404" not in str(exc):
                raise
            raise KitaeError(f"{exc} (the server does not load LoRA adapters at run time: start vLLM with "
                             "--enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True, SGLang with --enable-lora, "
                             "or set sampling.lora_sync: merged)") from None
        if isinstance(reply, dict) and reply.get("success") is False:  # SGLang's and kitae's refusal
            raise KitaeError(f"{replica.url} did not load the adapter {folder}: "
                             f"{str(reply.get('error_message') or reply.get('message'))[:300]}")
        replica.adapter = name
        replica.adapters = [*(a for a in replica.adapters if a != name), name]
        engine.mark_loaded(replica, version, reply.get("weight_version") if isinstance(reply, dict) else None)
        while len(replica.adapters) > self.keep:
            self._unload(replica, replica.adapters.pop(0))

    def _unload(self, replica: Any, name: str) -> None:
        """Unload an old adapter; a failure only costs the server's memory (a restarted server lost it anyway)."""
        try:
            _post(replica.url + self.unload_route, {"lora_name": name}, self.timeout, self.api_key_env)
        except KitaeError as exc:
            log.warning("rollout server %s: could not unload the old adapter %s: %s", replica.url, name, exc)


def _post(url: str, body: Any, timeout: float, api_key_env: str | None, params: dict | None = None) -> Any:
    from kitae.http.client import auth_headers

    try:
        resp = httpx.post(url, json=body, params=params, timeout=timeout, headers=auth_headers(api_key_env))
    except httpx.HTTPError as exc:
        raise KitaeError(f"POST {url}: {type(exc).__name__}: {exc}") from None
    if resp.status_code >= 400:
        raise KitaeError(f"POST {url}: HTTP {resp.status_code}: {resp.text[:300]}")
    try:
        return resp.json()
    except ValueError:
        return resp.text


# ---- vLLM (NCCL) ----------------------------------------------------------------------------------------------
VLLM_ROUTES = {"world_size": ("GET", "/get_world_size"), "pause": ("POST", "/pause"), "resume": ("POST", "/resume"),
               "init": ("POST", "/init_weight_transfer_engine"), "start": ("POST", "/start_weight_update"),
               "update": ("POST", "/update_weights"), "finish": ("POST", "/finish_weight_update")}


class VllmClient:
    """vLLM's weight-sync control plane over ``vllm serve``'s HTTP routes (vLLM's ``VLLMWeightSyncClient``
    protocol, plus pause/resume and the world size), with kitae's timeout and access token. ``label`` is the
    weight version the next finish_weight_update names (vLLM's trainer engine calls it without one)."""

    def __init__(self, url: str, timeout: float, api_key_env: str | None):
        self.url, self.timeout, self.api_key_env = url, timeout, api_key_env
        self.label: str | None = None

    def _send(self, what: str, body: Any = None, params: dict | None = None) -> Any:
        method, route = VLLM_ROUTES[what]
        if method == "POST":
            return _post(self.url + route, body, self.timeout, self.api_key_env, params)
        from kitae.http.client import auth_headers

        try:
            resp = httpx.get(self.url + route, params=params, timeout=self.timeout,
                             headers=auth_headers(self.api_key_env))
        except httpx.HTTPError as exc:
            raise KitaeError(f"GET {self.url}{route}: {type(exc).__name__}: {exc}") from None
        if resp.status_code == 404:
            raise KitaeError(f"{self.url} has no weight-transfer routes: start vllm serve (0.33 on) with "
                             "VLLM_SERVER_DEV_MODE=1 and --weight-transfer-config '{\"backend\": \"nccl\"}'")
        if resp.status_code >= 400:
            raise KitaeError(f"GET {self.url}{route}: HTTP {resp.status_code}: {resp.text[:300]}")
        return resp.json()

    def world_size(self) -> int:
        return int(self._send("world_size")["world_size"])

    def pause(self) -> None:
        self._send("pause", None, params={"mode": "wait"})  # in-flight requests finish on the old weights

    def resume(self) -> None:
        self._send("resume")

    def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None:
        self._send("init", {"init_info": init_info})

    def start_weight_update(self) -> None:
        self._send("start")

    def update_weights(self, update_info: Any) -> None:
        self._send("update", {"update_info": update_info})

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        label = weight_version if weight_version is not None else self.label
        self._send("finish", {"weight_version": label} if label is not None else None)


def policy_source(model: Any) -> Any:
    """``model``'s weights (merged, for LoRA) as a vLLM ``WeightSource``: names, dtypes and shapes read once
    (they do not change during a run), the tensors on this process's CUDA device at each push. ``source.model``
    is the model the next push reads, ``source.state`` its gathered full state dict (FSDP) or None."""
    from vllm.distributed.weight_transfer.base import ParamMeta, WeightSource

    class PolicySource(WeightSource):
        def __init__(self, model: Any, state: dict[str, torch.Tensor] | None = None):
            self.model, self.state = model, state

        @functools.cached_property
        def metadata(self) -> list[Any]:
            return [ParamMeta(n, t.dtype, tuple(t.shape)) for n, t in policy_tensors(self.model, self.state)]

        @functools.cached_property
        def nbytes(self) -> int:
            """The bytes one push broadcasts."""
            return sum(math.prod(m.shape) * m.dtype.itemsize for m in self.metadata)

        def iter_full(self) -> Iterator[tuple[str, torch.Tensor]]:
            device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else None
            for name, t in policy_tensors(self.model, self.state):
                yield name, (t.to(device, non_blocking=True) if device is not None else t)

    return PolicySource(model)


@WEIGHT_SYNCS.register("vllm")
class VllmSync(WeightSync):
    """vLLM's weight-transfer API: HTTP control plane, NCCL data plane (see the module docstring). No reload: a
    replica that missed a push gets the weights at the next one.
    ``engine_cls``: vLLM's NCCLTrainerWeightTransferEngine unless given (the contract tests give one without
    NCCL)."""

    def __init__(self, sampling: Any, run_dir: Path, engine_cls: Any = None):
        if engine_cls is None:
            check_vllm_sync("sampling.sync")
        self.engine_cls = engine_cls
        self.timeout = sampling.server_timeout
        self.api_key_env = sampling.api_key_env
        self.engines: dict[str, Any] = {}  # replica URL -> vLLM's trainer engine (NCCL group, the trainer rank 0)

    def push(self, engine: Any, model: Any, version: int,
             state: dict[str, torch.Tensor] | None = None) -> dict[str, float]:
        moved = 0
        for replica in engine.replicas:
            try:
                self._push_one(replica, model, version, state)
            except (KitaeError, OSError, RuntimeError, ValueError) as exc:
                replica.synced = None
                self.engines.pop(replica.url, None)  # its NCCL group is unusable: the next push joins anew
                engine.mark_down(replica, f"could not receive the weights: {exc}")
                continue
            engine.mark_loaded(replica, version, version)  # finish_weight_update labelled them str(version)
            moved += self.engines[replica.url].source.nbytes
        return sync_metrics(moved, model)

    def _push_one(self, replica: Any, model: Any, version: int, state: dict[str, torch.Tensor] | None) -> None:
        transfer = self.engines.get(replica.url) or self._init_engine(replica, model)
        transfer.source.model, transfer.source.state = model, state
        transfer.client.label = str(version)
        transfer.client.pause()
        try:
            transfer.send_weights()  # start_weight_update, update_weights with the broadcast, finish_weight_update
        finally:
            transfer.client.resume()

    def _init_engine(self, replica: Any, model: Any) -> Any:
        from vllm.distributed.weight_transfer.nccl_engine import NCCLTrainerInitInfo

        client = VllmClient(replica.url, self.timeout, self.api_key_env)
        world = client.world_size() + 1  # the trainer is rank 0, the server's workers 1..
        info = NCCLTrainerInitInfo(master_address=_local_address(replica.url), master_port=_free_port(),
                                   world_size=world, rank=0, packed=True)  # packing is agreed here, at init
        transfer = self._engine_cls().trainer_init(info, client=client, source=policy_source(model))
        self.engines[replica.url] = transfer
        return transfer

    def _engine_cls(self) -> Any:
        if self.engine_cls is None:
            from vllm.distributed.weight_transfer.nccl_engine import NCCLTrainerWeightTransferEngine

            self.engine_cls = NCCLTrainerWeightTransferEngine
        return self.engine_cls


def _local_address(url: str) -> str:
    """This machine's address on the route to ``url``'s host (what the server's NCCL workers connect to)."""
    host = urlsplit(url).hostname or "127.0.0.1"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((host, 9))  # no packet is sent: this only picks the route
        return s.getsockname()[0]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]
