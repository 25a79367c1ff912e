"""New weights into a served model, in place: ``kitae serve model``'s ``POST /update_weights_from_disk``.

The endpoint and its body are SGLang's (``{"model_path": FOLDER, "load_format": null}``), so a trainer that
syncs SGLang by disk syncs kitae serve model the same way. The folder is what ``save_pretrained`` writes for
the served architecture: a full model, e.g. a LoRA run's merged one (``merge_and_unload`` then
``save_pretrained``); a LoRA adapter folder alone is refused here (merge it first, or load it with
``POST /v1/load_lora_adapter``: kitae/serving/adapters.py).

    plan = plan_reload(model, folder)    # safetensors headers only: every tensor's name and shape checked
    apply_reload(model, plan)            # then the tensors are copied in, one file at a time

Checking first means a wrong folder (another architecture, a missing tensor) changes nothing. A tensor the file
leaves out is allowed only when it is tied to one the file has (``lm_head.weight`` with tied embeddings).
Dtypes are converted to the served model's (a bfloat16 checkpoint into a float32 server).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from kitae.http.requests import RequestError

LOAD_FORMATS = (None, "auto", "safetensors")


@dataclass
class ReloadPlan:
    folder: Path
    files: dict[Path, list[str]]  # safetensors file -> the names to copy from it

    @property
    def tensors(self) -> int:
        return sum(len(k) for k in self.files.values())


def _bad(message: str) -> RequestError:
    return RequestError(400, message, "model_path")


def plan_reload(model: Any, folder: str) -> ReloadPlan:
    """Which tensors of ``folder`` go where, checked against ``model``; RequestError(400) naming model_path."""
    from safetensors import safe_open

    path = Path(folder).expanduser().resolve()
    if not path.is_dir():
        raise _bad(f"model_path: no folder at {str(path)!r} (give the folder save_pretrained wrote, as the "
                   "server sees it)")
    files = sorted(f for f in path.glob("*.safetensors") if f.name != "adapter_model.safetensors")
    if not files:
        if (path / "adapter_config.json").exists():
            raise _bad(f"model_path: {path} holds a LoRA adapter; load it with POST /v1/load_lora_adapter "
                       '{"lora_name": NAME, "lora_path": FOLDER}, or merge it into its base model '
                       "(merge_and_unload) and save the merged model with save_pretrained")
        raise _bad(f"model_path: no .safetensors files in {path} (save_pretrained writes model.safetensors)")
    state = model.state_dict()
    plan: dict[Path, list[str]] = {}
    loaded: set[str] = set()
    for file in files:
        try:
            with safe_open(str(file), framework="pt") as handle:
                names = list(handle.keys())
                shapes = {k: tuple(handle.get_slice(k).get_shape()) for k in names}
        except Exception as exc:  # noqa: BLE001 - any unreadable header is the folder's problem
            raise _bad(f"model_path: cannot read {file}: {exc}") from None
        for name in names:
            if name not in state:
                raise _bad(f"model_path: {file.name} has tensor {name!r}, which the served model does not have; "
                           "save a model of the served architecture")
            if shapes[name] != tuple(state[name].shape):
                raise _bad(f"model_path: {file.name}: {name} has shape {list(shapes[name])}, the served model's "
                           f"is {list(state[name].shape)}; save a model of the served architecture and size")
        plan[file] = names
        loaded.update(names)
    missing = [k for k in state if k not in loaded and not _tied_to(state, k, loaded)]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise _bad(f"model_path: the safetensors files in {path} lack {missing[0]!r}{more}; save the whole model")
    return ReloadPlan(path, plan)


def _tied_to(state: dict[str, torch.Tensor], key: str, loaded: set[str]) -> bool:
    """Whether ``key`` shares its storage with a tensor that is loaded (tied weights)."""
    ptr = state[key].data_ptr()
    return any(state[k].data_ptr() == ptr for k in loaded)


@torch.no_grad()
def apply_reload(model: Any, plan: ReloadPlan) -> int:
    """Copy the planned tensors into ``model`` (converted to its dtypes and devices); the count copied."""
    from safetensors import safe_open

    state = model.state_dict()  # shares storage with the parameters
    for file, names in plan.files.items():
        with safe_open(str(file), framework="pt", device="cpu") as handle:
            for name in names:
                state[name].copy_(handle.get_tensor(name))
    return plan.tensors
