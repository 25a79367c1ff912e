"""LoRA adapters loaded onto a served model at run time: ``kitae serve model``'s ``POST /v1/load_lora_adapter``
and ``POST /v1/unload_lora_adapter``.

The routes and bodies are vLLM's (``{"lora_name", "lora_path"}``, ``{"lora_name"}``), so one client (kitae's
adapter push, kitae.rollout.sync) loads adapters into vLLM and kitae serve model alike. The folder is a plain peft
adapter folder (adapter_config.json and adapter_model.safetensors, what peft's ``save_pretrained`` writes); peft
loads it onto the base the server already holds (``PeftModel.from_pretrained`` the first time, ``load_adapter``
after), which injects the LoRA layers into the base's own modules: the engine, the batching scheduler and the
constrained decoder keep sampling the same model object, now with the adapter.

One adapter is active at a time: the one loaded last (a request naming another is refused by the server).
Unloading the active adapter makes the newest remaining one active, and unloading the last one gives the base its
own layers back (peft's ``unload``).

    adapters.check(name, folder)   # adapter_config.json and the weights' shapes against the base: nothing changes
    adapters.load(name, folder)    # then peft loads it and makes it active (inside the weight gate's reload)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kitae.http.requests import RequestError

ADAPTER_PREFIX = "base_model.model."  # peft's prefix of a saved adapter's tensor names


def _bad(message: str, param: str = "lora_path", status: int = 400) -> RequestError:
    return RequestError(status, message, param)


class ServedAdapters:
    """The LoRA adapters loaded onto ``model`` (name -> folder, oldest first; the last one is active)."""

    def __init__(self, model: Any):
        self.model = model
        self.peft: Any = None  # peft's PeftModel around ``model`` while an adapter is loaded
        self.folders: dict[str, Path] = {}

    @property
    def active(self) -> str | None:
        return next(reversed(self.folders), None)

    def check(self, name: str, folder: str) -> Path:
        """The adapter folder, checked against the served model before anything changes; RequestError(400)
        naming lora_path."""
        path = Path(folder).expanduser().resolve()
        config_file = path / "adapter_config.json"
        if not config_file.is_file():
            raise _bad(f"lora_path: no adapter_config.json in {str(path)!r} (give the folder peft's "
                       "save_pretrained wrote, as the server sees it)")
        try:
            config = json.loads(config_file.read_text())
        except (OSError, ValueError) as exc:
            raise _bad(f"lora_path: cannot read {config_file}: {exc}") from None
        if not isinstance(config, dict) or config.get("peft_type") != "LORA":
            raise _bad(f"lora_path: {config_file} is not a LoRA adapter's config (peft_type "
                       f"{config.get('peft_type') if isinstance(config, dict) else None!r}, expected 'LORA')")
        self._check_shapes(path)
        return path

    def _check_shapes(self, path: Path) -> None:
        """Every tensor of the adapter's weights belongs to a Linear layer of the served model and fits it."""
        from safetensors import safe_open

        weights = path / "adapter_model.safetensors"
        if not weights.is_file():
            raise _bad(f"lora_path: no adapter_model.safetensors in {path} (save the adapter with "
                       "safe_serialization)")
        try:
            with safe_open(str(weights), framework="pt") as handle:
                shapes = {k: tuple(handle.get_slice(k).get_shape()) for k in handle.keys()}
        except Exception as exc:  # noqa: BLE001 - any unreadable header is the folder's problem
            raise _bad(f"lora_path: cannot read {weights}: {exc}") from None
        base = self.peft.get_base_model() if self.peft is not None else self.model
        for key, shape in shapes.items():
            owner, _, leaf = key.removeprefix(ADAPTER_PREFIX).rpartition(".lora_")
            layer = _linear(base, owner)
            if layer is None:
                raise _bad(f"lora_path: {weights.name} has {key!r}, but the served model has no Linear layer "
                           f"{owner!r}; load an adapter trained on this base model")
            want = {"A.weight": layer.in_features, "B.weight": layer.out_features}.get(leaf)
            got = shape[1] if leaf == "A.weight" else shape[0]
            if want is not None and got != want:
                raise _bad(f"lora_path: {key} has shape {list(shape)}, which does not fit the served model's "
                           f"{owner} ({layer.in_features} -> {layer.out_features}); load an adapter trained on "
                           "this base model")

    def load(self, name: str, path: Path) -> None:
        """Load the checked adapter folder ``path`` as ``name`` (replacing an adapter of that name) and make it
        active. Call inside the weight gate's reload."""
        from peft import PeftModel

        if name in self.folders:
            self.unload(name)
        if self.peft is None:
            self.peft = PeftModel.from_pretrained(self.model, str(path), adapter_name=name)
        else:
            self.peft.load_adapter(str(path), adapter_name=name)
        self.peft.set_adapter(name)
        self.model.eval()
        self.folders[name] = path

    def unload(self, name: str) -> bool:
        """Unload adapter ``name``; whether the active one changed (the served outputs). RequestError(404) for a
        name not loaded. Call inside the weight gate's reload."""
        if name not in self.folders:
            loaded = ", ".join(self.folders) or "none"
            raise _bad(f"the LoRA adapter '{name[:200]}' cannot be found (loaded: {loaded})", "lora_name", 404)
        was_active = name == self.active
        del self.folders[name]
        if not self.folders:
            self.peft.unload()  # the base's own Linear layers back, the adapter's gone
            self.peft = None
            return True
        if was_active:
            self.peft.set_adapter(self.active)
        self.peft.delete_adapter(name)
        return was_active


def _linear(model: Any, owner: str) -> Any:
    """The Linear layer ``owner`` of ``model`` (None when there is none)."""
    try:
        layer = model.get_submodule(owner)
    except AttributeError:
        return None
    layer = getattr(layer, "base_layer", layer)  # a layer an earlier adapter wrapped
    return layer if hasattr(layer, "in_features") and hasattr(layer, "out_features") else None
