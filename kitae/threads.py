"""How many torch CPU threads a command uses: one rule for every command that runs a model.

torch starts with one thread per core. For the small matrices of a small model the threads spend more time
waiting for each other than multiplying, and on a machine other programs are using, a thread that waits for a
descheduled sibling stalls the whole product. ``benchmarks/threads.py`` measured it on this project's 2-core
machine while it was busy (numbers in docs/threads.md): one thread beat two at 2M, 20M and 100M parameters, by
3x to 30x. So:

    parameters < ONE_THREAD_BELOW      -> 1 thread
    otherwise                          -> the cores the 1-minute load average leaves free (at least 1), shared
                                          among the processes of a multi-process run on this machine

The user always has the last word: ``--threads N`` on every command that runs a model, ``threads: N`` in a
training config or a curation recipe. The size comes from the weights' file headers (safetensors), read
before anything loads; a model whose size cannot be read keeps torch's default.
"""

from __future__ import annotations

import json
import os
import struct
from functools import lru_cache
from pathlib import Path

from kitae.errors import ConfigError

ONE_THREAD_BELOW = 10_000_000  # parameters; see docs/threads.md for the measurement


def threads_for(params: int | None, cpus: int | None = None, load: float | None = None,
                processes: int | None = None) -> int | None:
    """The rule: 1 below ONE_THREAD_BELOW parameters; else the cores nobody else is using (`cpus` minus the
    1-minute `load` average, at least 1), shared among this machine's `processes` of the run. None when the
    size is unknown. `cpus`, `load` and `processes` default to this machine's.

    >>> threads_for(1_967_808), threads_for(20_000_000, cpus=2, load=0.1), threads_for(20_000_000, cpus=2, load=8)
    (1, 2, 1)
    """
    if params is None:
        return None
    if params < ONE_THREAD_BELOW:
        return 1
    cpus = cpus if cpus is not None else available_cpus()
    load = load if load is not None else load_average()
    free = min(cpus, max(1, round(cpus - load)))
    return max(1, free // (processes if processes is not None else local_processes()))


def load_average() -> float:
    """This machine's 1-minute load average; ``KITAE_LOAD_AVERAGE`` where set (tests: a busy machine on demand)."""
    given = os.environ.get("KITAE_LOAD_AVERAGE")
    return float(given) if given else os.getloadavg()[0]


def worker_core_problem(cpus: int, load: float, trainer_threads: int, worker_threads: int,
                        own: float = 1.0) -> str | None:
    """Why ``sampling.async``'s rollout worker has no core of its own, or None: fewer cores than the trainer's and
    the worker's threads, or fewer left free by other programs (the 1-minute ``load`` average less ``own``, the
    busy processes of this run in it). Then sampling and the update take turns instead of overlapping, and async
    is slower than sync (docs/performance.md: 1.48x idle, 0.99x at load 2 and 0.76x at load 9 on 2 cores).

    >>> worker_core_problem(2, 0.2, 1, 1) is None, worker_core_problem(2, 9.0, 1, 1) is None
    (True, False)
    """
    need = trainer_threads + worker_threads
    threads = f"the trainer's {trainer_threads} and the rollout worker's {worker_threads} torch thread(s)"
    if cpus < need:
        return f"{cpus} core(s) for {threads}"
    others = max(0.0, load - own)
    if round(cpus - others) < need:
        return (f"the machine is busy: a 1-minute load average of {load:.1f} on {cpus} cores leaves about "
                f"{max(0, round(cpus - others))} free for {threads}")
    return None


def available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def local_processes() -> int:
    """Processes of this run on this machine (accelerate and torchrun set LOCAL_WORLD_SIZE)."""
    try:
        return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    except ValueError:
        return 1


def set_threads(threads: int | None, model: str | Path | None = "bundled", *, params: int | None = None,
                option: str = "--threads") -> int:
    """Set torch's CPU thread count and return it: `threads` when given (--threads, a config's ``threads:``),
    else the rule for the model at `model` (a folder or "bundled") or of `params` parameters."""
    import torch

    if threads is not None:
        if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
            raise ConfigError(option, f"expected a whole number of threads >= 1, got {threads!r}")
        chosen = threads
    else:
        chosen = threads_for(params if params is not None else count_parameters(model))
    if chosen is not None and chosen != torch.get_num_threads():
        torch.set_num_threads(chosen)
    return torch.get_num_threads()


def count_parameters(model: str | Path | None) -> int | None:
    """Parameters of the model in folder `model` ("bundled"/None: the bundled base model), read from its
    safetensors headers (a LoRA adapter counts with its base model); None when no header says."""
    from kitae.models import BUNDLED_MODEL

    folder = BUNDLED_MODEL if model is None or str(model) in ("bundled", "kitae-tiny-base") else Path(model)
    # no model check here: a missing or broken folder is reported where the model loads
    return _count_folder(folder.resolve()) if folder.is_dir() else None


@lru_cache(maxsize=64)
def _count_folder(folder: Path) -> int | None:
    files = _weight_files(folder)
    if not files:
        return None
    total = sum(_count_file(f) for f in files)
    adapter = folder / "adapter_config.json"
    if adapter.exists():  # a LoRA adapter runs on top of its base model
        try:
            base = json.loads(adapter.read_text(encoding="utf-8")).get("base_model_name_or_path")
        except (OSError, ValueError):
            base = None
        base_params = count_parameters(base) if base else None
        total += base_params or 0
    return total or None


def _weight_files(folder: Path) -> list[Path]:
    index = folder / "model.safetensors.index.json"
    if index.exists():
        try:
            shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
            return [folder / s for s in shards if (folder / s).exists()]
        except (OSError, ValueError, KeyError, TypeError):
            return []
    return sorted(folder.glob("*.safetensors"))


def _count_file(path: Path) -> int:
    """Elements of every tensor in a safetensors file, from its JSON header (8-byte length, then the header)."""
    try:
        with path.open("rb") as f:
            (size,) = struct.unpack("<Q", f.read(8))
            if size > 100_000_000:
                return 0
            header = json.loads(f.read(size))
    except (OSError, ValueError, struct.error):
        return 0
    total = 0
    for name, entry in header.items():
        if name != "__metadata__" and isinstance(entry, dict):
            n = 1
            for dim in entry.get("shape", []):
                n *= int(dim)
            total += n
    return total
