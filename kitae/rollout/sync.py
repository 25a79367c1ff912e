"""Weight sync: how the trainer's weights reach the rollout servers (``sampling.sync``), registered in
:data:`WEIGHT_SYNCS`.

``disk`` (SGLang, ``kitae serve model``)
    The weights are written as a Hugging Face folder (config.json + safetensors) under ``sampling.sync_dir``
    (default RUN_DIR/sync; a folder the servers see at the same path), then every replica is asked to load it:
    POST /update_weights_from_disk ``{"model_path": FOLDER, "load_format": null}`` -> ``{"success": true,
    "weight_version": N}`` (SGLang's endpoint and body; kitae serve model implements the same). Only the newest
    folder is kept. A replica that was down during a push loads the newest folder before its next request.
``vllm`` (vLLM >= the weight-transfer API, server started with ``VLLM_SERVER_DEV_MODE=1`` and
    ``--weight-transfer-config '{"backend": "nccl"}'``)
    Per replica, once: GET /get_world_size, then POST /init_weight_transfer_engine while this process joins the
    NCCL group as rank 0 (``NCCLWeightTransferEngine.trainer_init``). Per push: POST /pause?mode=wait,
    /start_weight_update, /update_weights (names, dtypes, shapes; packed) while the tensors are broadcast
    (``trainer_send_weights``), /finish_weight_update, /resume. Needs vllm and CUDA in the trainer's process; a
    replica that misses a push sits out until the next one. Untested here: no GPU and no vLLM on this machine.
``none``
    Nothing is pushed: a frozen server (off-policy runs, evaluation). Versions are not tracked.

LoRA runs push the merged weights (W + the adapter's delta, under the base model's names), never the adapter.
"""

from __future__ import annotations

import concurrent.futures
import importlib.util
import shutil
import socket
import threading
import time
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import urlsplit

import httpx
import torch

from kitae.errors import ConfigError, KitaeError
from kitae.registry import Registry

WEIGHT_SYNCS = Registry("weight sync")


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


def build_sync(sampling: Any, run_dir: Any):
    """The strategy of ``sampling.sync`` (None for 'none')."""
    if sampling.sync == "none":
        return None
    cls = WEIGHT_SYNCS.get(sampling.sync, "sampling.sync")
    return cls(sampling, Path(run_dir))


# ---- the weights ---------------------------------------------------------------------------------------------
def policy_tensors(model: Any) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) of every weight under the base model's names; a PEFT LoRA model's adapted layers come out
    merged (W + delta), computed aside: the training model is not touched."""
    if not hasattr(model, "peft_config"):
        for name, t in model.state_dict().items():
            yield name, t.detach()
        return
    base = model.get_base_model()
    for name, t in base.state_dict().items():
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
                        merged = merged + layer.get_delta_weight(adapter).to(merged.dtype)
        yield f"{owner}.{leaf}", merged


def write_weights(model: Any, folder: Path) -> Path:
    """``model``'s weights (merged, for LoRA) as a Hugging Face folder at ``folder``, written aside and renamed
    into place, so a server never reads half a folder."""
    tmp = folder.with_name(f".{folder.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    base = model.get_base_model() if hasattr(model, "peft_config") else model
    base.save_pretrained(tmp, state_dict=dict(policy_tensors(model)), safe_serialization=True)
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    return folder


# ---- disk -----------------------------------------------------------------------------------------------------
@WEIGHT_SYNCS.register("disk")
class DiskSync:
    """Write the weights, then ask each replica to load them (see the module docstring)."""

    can_reload = True  # a replica that missed a push loads the newest folder later, without the model

    def __init__(self, sampling: Any, run_dir: Path):
        self.root = Path(sampling.sync_dir) if sampling.sync_dir else run_dir / "sync"
        self.timeout = sampling.server_timeout
        self.api_key_env = sampling.api_key_env
        self.latest: tuple[int, Path] | None = None

    def push(self, engine: Any, model: Any, version: int) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        folder = write_weights(model, (self.root / f"v{version:06d}").resolve())
        self.latest = (version, folder)
        now = time.monotonic()
        live = [r for r in engine.replicas if r.is_up(now)]  # the others load the folder when they are back
        with concurrent.futures.ThreadPoolExecutor(max(1, len(live))) as pool:
            list(pool.map(lambda r: self._try_reload(engine, r), live))
        for old in self.root.glob("v*"):
            if old.is_dir() and old.resolve() != folder:
                shutil.rmtree(old, ignore_errors=True)

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
@WEIGHT_SYNCS.register("vllm")
class VllmSync:
    """vLLM's weight-transfer API: HTTP control plane, NCCL data plane (see the module docstring)."""

    can_reload = False

    def __init__(self, sampling: Any, run_dir: Path):
        check_vllm_sync("sampling.sync")
        self.timeout = sampling.server_timeout
        self.api_key_env = sampling.api_key_env
        self.groups: dict[str, Any] = {}  # replica URL -> NCCL group (the trainer is rank 0)

    def push(self, engine: Any, model: Any, version: int) -> None:
        for replica in engine.replicas:
            try:
                self._push_one(replica, model, version)
            except (KitaeError, OSError, RuntimeError) as exc:
                replica.synced = None
                engine.mark_down(replica, f"could not receive the weights: {exc}")
                continue
            engine.mark_loaded(replica, version, None)

    def _push_one(self, replica: Any, model: Any, version: int) -> None:
        from vllm.distributed.weight_transfer.nccl_engine import (
            NCCLTrainerSendWeightsArgs,
            NCCLWeightTransferEngine,
        )

        group = self.groups.get(replica.url) or self._init_group(replica)
        tensors = list(policy_tensors(model))
        info = {"names": [n for n, _ in tensors], "dtype_names": [str(t.dtype).split(".")[-1] for _, t in tensors],
                "shapes": [list(t.shape) for _, t in tensors], "packed": True}
        self._call(replica, "/pause", {}, params={"mode": "wait"})
        try:
            self._call(replica, "/start_weight_update", {"is_checkpoint_format": True}, optional=True)
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                receiving = pool.submit(self._call, replica, "/update_weights", {"update_info": info})
                device = torch.device("cuda", torch.cuda.current_device())
                NCCLWeightTransferEngine.trainer_send_weights(
                    iterator=((n, t.to(device, non_blocking=True)) for n, t in tensors),
                    trainer_args=NCCLTrainerSendWeightsArgs(group=group, packed=True))
                receiving.result()
            self._call(replica, "/finish_weight_update", {"weight_version": str(version)}, optional=True)
        finally:
            self._call(replica, "/resume", {})

    def _init_group(self, replica: Any) -> Any:
        from vllm.distributed.weight_transfer.nccl_engine import NCCLWeightTransferEngine

        from kitae.http.client import auth_headers

        resp = httpx.get(replica.url + "/get_world_size", timeout=self.timeout,
                         headers=auth_headers(self.api_key_env))
        if resp.status_code == 404:
            raise KitaeError(f"{replica.url} has no weight-transfer routes: start vllm serve with "
                             "VLLM_SERVER_DEV_MODE=1 and --weight-transfer-config '{\"backend\": \"nccl\"}'")
        world = int(resp.json()["world_size"]) + 1  # the trainer is rank 0, the server's workers 1..
        address, port = _local_address(replica.url), _free_port()
        init = {"init_info": {"master_address": address, "master_port": port, "rank_offset": 1, "world_size": world}}
        errors: list[BaseException] = []
        thread = threading.Thread(target=lambda: _keep(errors, self._call, replica, "/init_weight_transfer_engine",
                                                       init))
        thread.start()
        group = NCCLWeightTransferEngine.trainer_init(
            {"master_address": address, "master_port": port, "world_size": world})
        thread.join()
        if errors:
            raise errors[0]
        self.groups[replica.url] = group
        return group

    def _call(self, replica: Any, route: str, body: Any, params: dict | None = None, optional: bool = False) -> Any:
        try:
            return _post(replica.url + route, body, self.timeout, self.api_key_env, params)
        except KitaeError as exc:
            if optional and "HTTP 404" in str(exc):  # older vLLM: no start/finish phases
                return None
            raise


def _keep(errors: list[BaseException], fn: Any, *args: Any) -> None:
    try:
        fn(*args)
    except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
        errors.append(exc)


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
