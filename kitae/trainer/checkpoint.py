"""Checkpoints: runs/NAME/checkpoints/step-000123/{model/, state.pt}.

`model/` is HF `save_pretrained` (the LoRA adapter alone for LoRA runs) plus the tokenizer; `state.pt` holds the
optimizer, scheduler, KL controller, prompt sampler and RNG states and the step. A checkpoint is written to a
temporary folder and renamed into place, so a run killed mid-save never leaves a half checkpoint behind.
"""

from __future__ import annotations

import os
import random
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

_NAME = re.compile(r"^step-(\d+)$")


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


def rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def save_checkpoint(run_dir: Path, step: int, model: Any, tokenizer: Any, state: dict[str, Any], keep: int) -> Path:
    final = checkpoint_dir(run_dir, step)
    tmp = final.with_name(final.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp / "model")
    tokenizer.save_pretrained(tmp / "model")
    torch.save({**state, "step": step, "rng": rng_state()}, tmp / "state.pt")
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    for _, old in list_checkpoints(run_dir)[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    return final


def load_state(path: Path) -> dict[str, Any]:
    return torch.load(path / "state.pt", weights_only=False)
