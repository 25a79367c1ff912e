"""Checkpoints: runs/NAME/checkpoints/step-000123/{model/, state.pt}.

`model/` is HF `save_pretrained` (the LoRA adapter alone for LoRA runs, naming its base by Hub id and commit,
with kitae_adapter.json and the base's generation config: kitae.adapters) plus the base's tokenizer files as they
were (:func:`save_model`); `state.pt` holds the
optimizer, scheduler, KL controller, prompt sampler, partial-rollout buffer and RNG states, the rollout engine's
own (an engine that SavesState, kitae.rollout.base) and the step. A checkpoint is written to a
temporary folder (step-000123.tmp) and renamed into place, so a run killed mid-save never leaves a half
checkpoint behind; the next save or resume removes such a stale .tmp folder.

A checkpoint can still be damaged afterwards (a file deleted, a disk that filled up, a copy cut short, a bit
flipped), so resuming takes the newest one that passes :func:`checkpoint_problem` and whose state.pt loads
(:func:`find_checkpoint`), and names each newer one it skipped and why. ``manifest.json``, written last, holds
the sha256 of every other file of the checkpoint; resuming checks them (a checkpoint saved before manifests
were written is not checked). A save that fails (a full disk) raises a KitaeError naming the file and the fix,
and leaves no .tmp folder behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from kitae.store.failures import is_write_error, space_problem, write_failure

_NAME = re.compile(r"^step-(\d+)$")
_TMP = re.compile(r"^step-\d+\.tmp$")
STATE_KEYS = ("optimizer", "scheduler", "sampler", "kl", "rng", "step")
# model/ of a full model, then of a LoRA adapter: the weight files save_pretrained writes, in the order looked for
MODEL_WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
MANIFEST = "manifest.json"  # {"sha256": {"model/model.safetensors": hex digest, "state.pt": ..., ...}}


@dataclass
class Checkpoint:
    step: int
    path: Path
    state: dict[str, Any] | None  # state.pt, loaded once; dropped after the trainer restored it


def checkpoint_dir(run_dir: Path, step: int) -> Path:
    return run_dir / "checkpoints" / f"step-{step:06d}"


def list_checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    root = run_dir / "checkpoints"
    if not root.exists():
        return []
    found = []
    for p in root.iterdir():
        m = _NAME.match(p.name)
        if m and (p / "state.pt").exists():
            found.append((int(m.group(1)), p))
    return sorted(found)


def latest_checkpoint(run_dir: Path) -> tuple[int, Path] | None:
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def checkpoint_folders(run_dir: Path) -> list[tuple[int, Path]]:
    """Every checkpoints/step-N folder, complete or not, oldest first."""
    root = run_dir / "checkpoints"
    if not root.is_dir():
        return []
    return sorted((int(m.group(1)), p) for p in root.iterdir() if (m := _NAME.match(p.name)) and p.is_dir())


def find_checkpoint(run_dir: Path) -> tuple[Checkpoint | None, list[tuple[Path, str]]]:
    """The newest checkpoint that is complete, with its state.pt loaded; and each newer one, with why it was
    skipped. (None, [...]) when no checkpoint is usable."""
    skipped: list[tuple[Path, str]] = []
    for step, path in reversed(checkpoint_folders(run_dir)):
        problem = checkpoint_problem(path)
        if problem is None:
            state, problem = _load_checked(path, step)
            if problem is None:
                return Checkpoint(step, path, state), skipped
        skipped.append((path, problem))
    return None, skipped


def checkpoint_problem(path: Path) -> str | None:
    """Why the checkpoint folder `path` cannot be resumed from, or None. Cheap but real: the files are there
    and each weight file is as long as its own header says (state.pt is checked by loading it)."""
    if not (path / "state.pt").is_file():
        return "state.pt is missing"
    model = path / "model"
    if not model.is_dir():
        return "model/ is missing"
    adapter = (model / "adapter_config.json").is_file()
    if not adapter and not (model / "config.json").is_file():
        return "model/config.json is missing"
    names = ADAPTER_WEIGHTS if adapter else MODEL_WEIGHTS
    found = next((model / n for n in names if (model / n).is_file()), None)
    if found is None:
        return f"model/ has no weights (none of {', '.join(names)})"
    problem = _sharded_problem(found) if found.name.endswith(".index.json") else _weights_problem(found)
    return problem or _checksum_problem(path)


def _sharded_problem(index: Path) -> str | None:
    try:
        shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        return f"model/{index.name} cannot be read ({type(exc).__name__}: {exc})"
    for name in shards:
        shard = index.parent / name
        problem = f"model/{name} (listed in {index.name}) is missing" if not shard.is_file() else _weights_problem(shard)
        if problem:
            return problem
    return None


def _weights_problem(file: Path) -> str | None:
    """A safetensors file must be exactly as long as its header says; a .bin file (a zip) must open."""
    name, size = f"model/{file.name}", file.stat().st_size
    if file.suffix != ".safetensors":
        if not zipfile.is_zipfile(file):
            return f"{name} cannot be read (not a complete torch file)"
        return None
    with file.open("rb") as f:
        head = f.read(8)
        n = int.from_bytes(head, "little") if len(head) == 8 else -1
        if n < 0 or 8 + n > size:
            return f"{name} is cut short ({size} bytes, not even its header)"
        try:
            header = json.loads(f.read(n))
            end = max((int(t["data_offsets"][1]) for k, t in header.items() if k != "__metadata__"), default=0)
        except (ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
            return f"{name} cannot be read (bad header: {exc})"
    if 8 + n + end != size:
        short = "is cut short" if 8 + n + end > size else "has trailing bytes"
        return f"{name} {short} ({size} bytes; its header describes {8 + n + end})"
    return None


def _checksum_problem(path: Path) -> str | None:
    """A file whose bytes are not the ones saved (its sha256 differs from the manifest's); None without a
    manifest (a checkpoint from before they were written: not checked)."""
    manifest = path / MANIFEST
    if not manifest.is_file():
        return None
    try:
        sums = json.loads(manifest.read_text(encoding="utf-8"))["sha256"]
        files = {str(k): str(v) for k, v in sums.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        return f"{MANIFEST} cannot be read ({type(exc).__name__}: {exc})"
    for name, digest in files.items():
        file = path / name
        if ".." in Path(name).parts or not file.is_file():
            return f"{name} (listed in {MANIFEST}) is missing"
        if sha256_of(file) != digest:
            return (f"{name} does not match the sha256 checksum recorded when it was saved ({MANIFEST}): its bytes "
                    "changed since (a flipped bit, a bad copy)")
    return None


def sha256_of(file: Path) -> str:
    h = hashlib.sha256()
    with file.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def write_manifest(folder: Path) -> None:
    """The sha256 of every file under `folder` (a checkpoint being written), in folder/manifest.json."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST)
    sums = {p.relative_to(folder).as_posix(): sha256_of(p) for p in files}
    (folder / MANIFEST).write_text(json.dumps({"sha256": sums}, indent=1) + "\n", encoding="utf-8")


def _load_checked(path: Path, step: int) -> tuple[dict[str, Any] | None, str | None]:
    try:
        state = load_state(path)
    except Exception as exc:  # noqa: BLE001 - any unreadable state.pt is a reason to skip the checkpoint
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return None, f"state.pt cannot be loaded ({type(exc).__name__}{': ' + first if first else ''})"
    if not isinstance(state, dict):
        return None, f"state.pt cannot be loaded (holds a {type(state).__name__}, not a checkpoint state)"
    missing = [k for k in STATE_KEYS if k not in state]
    if missing:
        return None, f"state.pt lacks {', '.join(missing)}"
    if state["step"] != step:
        return None, f"state.pt is for step {state['step']}, not {step}"
    return state, None


def remove_stale_tmp(run_dir: Path) -> list[Path]:
    """Remove the step-N.tmp folders that a save interrupted by a crash or a full disk left behind."""
    root = run_dir / "checkpoints"
    stale = [p for p in root.iterdir() if _TMP.match(p.name)] if root.is_dir() else []
    for p in stale:
        shutil.rmtree(p, ignore_errors=True)
    return stale


def rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def save_checkpoint(run_dir: Path, step: int, model: Any, tokenizer: Any, state: dict[str, Any], keep: int,
                    weights: dict[str, Any] | None = None, base_folder: str | Path | None = None,
                    quantization: Any = None) -> Path:
    """Write checkpoints/step-N (through step-N.tmp), then keep the newest `keep`. A failed write (a full disk,
    a read-only folder) removes the .tmp folder and raises a KitaeError that names the file and the fix.
    ``weights``: the model's full state dict where the model holds a shard of it (FSDP, kitae.trainer.sharded).
    ``base_folder``: the model folder the run started from (its tokenizer files are kept as they were; an
    adapter names it and carries its generation config, kitae.adapters); ``quantization``: model.quantization."""
    final = checkpoint_dir(run_dir, step)
    tmp = final.with_name(final.name + ".tmp")
    remove_stale_tmp(run_dir)  # this step's own, and any an earlier failed save left
    try:
        tmp.mkdir(parents=True)
        save_model(tmp / "model", model, tokenizer, weights, base_folder, quantization)
        torch.save({**state, "step": step, "rng": rng_state()}, tmp / "state.pt")
        write_manifest(tmp)
    except Exception as exc:
        # torch and safetensors wrap a failed write's OSError in errors of their own, some without the reason
        failed = is_write_error(exc) or space_problem(tmp) is not None
        error = write_failure(exc, tmp, run_dir) if failed else None
        shutil.rmtree(tmp, ignore_errors=True)  # frees what it took; the older checkpoints are untouched
        if error is None:
            raise
        raise error from exc
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    for _, old in list_checkpoints(run_dir)[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    return final


def save_model(dest: Path, model: Any, tokenizer: Any, weights: dict[str, Any] | None = None,
               base_folder: str | Path | None = None, quantization: Any = None) -> None:
    """`model` (a peft model: its adapter, kitae.adapters' additions) and the tokenizer files into `dest`."""
    from kitae.adapters import finish_adapter_folder, keep_base_files, name_base

    adapter = hasattr(model, "peft_config") and base_folder is not None
    if adapter:
        name_base(model, base_folder)
    model.save_pretrained(dest, **({"state_dict": weights} if weights is not None else {}))
    before = set(os.listdir(dest))
    tokenizer.save_pretrained(dest)
    keep_base_files(dest, sorted(set(os.listdir(dest)) - before), base_folder)
    if adapter:
        finish_adapter_folder(dest, base_folder, quantization)


def load_state(path: Path) -> dict[str, Any]:
    return torch.load(path / "state.pt", weights_only=False)
