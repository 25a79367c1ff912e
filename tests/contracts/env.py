"""The contract environment: a virtual environment that has vLLM and SGLang as released, without their GPU stack.

    python tests/contracts/env.py        # build it (CI does, in the background), print its python

vllm and sglang are installed with ``--no-deps``, then only the packages their request, reply and weight-transfer
modules import (no CUDA, no second torch: the environment sees the packages of the Python that builds it, a venv
or a system Python, torch and kitae's dependencies included, and leaves them as they are; tests/venvs.py). It
lives under ``$KITAE_CONTRACTS_DIR`` (default ~/.cache/kitae-contracts), one folder per pinned set and building
Python (its prefix and version), so a machine builds it once; a lock lets a test session wait for a build already
under way. A cached one is used only while it works: the pinned versions installed, the modules the contract
checks import importable (vllm's, and kitae's with its dependencies); else it is built again. The stamp that marks
it built is written only after that check passed. ``$KITAE_CONTRACTS_FIND_LINKS`` names a folder of wheels to
prefer (the vllm wheel is about 240 MB). Building needs a package index; without one it fails and the contract
tests skip.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib
import importlib.metadata
import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if __name__ == "__main__" and str(ROOT) not in sys.path:  # run as a script: tests.venvs is importable from the root
    sys.path.insert(0, str(ROOT))

from tests.venvs import make_venv  # noqa: E402

SERVERS = ["vllm==0.34.0", "sglang==0.5.23"]
# what vllm's completion protocol, its RL and LoRA HTTP routes and its NCCL weight-transfer modules import, pinned
IMPORT_DEPS = [
    "aiohappyeyeballs==2.7.1", "aiohttp==3.14.5", "aiosignal==1.4.0", "apache-tvm-ffi==0.1.15.post2",
    "cachetools==8.0.2", "cbor2==6.3.0", "fastapi==0.165.0", "frozenlist==1.8.0", "jiter==0.19.0",
    "llguidance==1.9.1", "msgspec==0.23.0", "multidict==7.2.1", "openai==3.57.0", "openai-harmony==0.0.8",
    "opentelemetry-api==1.45.2", "orjson==3.13.0", "partial-json-parser==0.2.1.1.post7",
    "prometheus_client==0.26.0", "propcache==0.5.4", "py-cpuinfo==9.0.0", "pybase64==1.5.1", "pyzmq==27.3.0",
    "sniffio==1.3.1",
    "starlette==1.10.0", "uvicorn==0.54.0", "uvloop==0.23.0", "watchfiles==1.3.0", "xgrammar==0.2.9", "yarl==1.25.1",
]
# what vllm_checks.py imports (vllm's modules, kitae's with its dependencies); SGLang's are read as source
CHECKED_MODULES = [
    "vllm.entrypoints.openai.completion.protocol", "vllm.entrypoints.openai.chat_completion.protocol",
    "vllm.entrypoints.serve.engine.protocol", "vllm.outputs", "vllm.distributed.weight_transfer.base",
    "vllm.distributed.weight_transfer.nccl_engine", "vllm.entrypoints.rl.online.api_router",
    "vllm.entrypoints.serve.lora.api_router", "vllm.entrypoints.serve.utils.api_utils", "uvicorn",
    "kitae.rollout.sync", "kitae.rollout.server", "kitae.serving.server",
]
SGLANG_SOURCES = ["srt/managers/io_struct.py", "srt/sampling/sampling_params.py", "srt/entrypoints/http_server.py"]
STAMP = "ok"


class BrokenEnvironment(RuntimeError):
    """A freshly built contract environment that does not work (a pin or an import missing): a defect to fix in
    this file, not a machine without a package index."""


def env_dir() -> Path:
    """This pinned set's environment for the running Python: a venv sees the packages of the Python that built
    it, so another Python (a new venv, another version) gets its own."""
    root = Path(os.environ.get("KITAE_CONTRACTS_DIR") or Path.home() / ".cache" / "kitae-contracts")
    key = hashlib.sha256("\n".join([sys.prefix, sys.version, *SERVERS, *IMPORT_DEPS]).encode()).hexdigest()[:12]
    return root / f"venv-{key}"


def python_of(venv: Path) -> Path:
    return venv / "bin" / "python"


def ensure(build: bool = True) -> tuple[Path | None, str]:
    """(the environment's python, "") when it works or was built now; (None, why not) where it could not be
    built (no package index) or ``build`` is False. Waits for a build another process holds the lock of.
    Raises BrokenEnvironment when a fresh build does not work."""
    venv = env_dir()
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a build under way finishes first
        why = broken(venv) if (venv / STAMP).exists() else f"no contract environment at {venv}"
        if not why:
            return python_of(venv), ""
        if not build:
            return None, f"{why} (build it: python tests/contracts/env.py)"
        return _build(venv)


def broken(venv: Path) -> str:
    """Why the environment at ``venv`` does not work ("" when it does): run in it, ``env.py --check``."""
    try:
        done = subprocess.run([str(python_of(venv)), __file__, "--check"], capture_output=True, text=True,
                              timeout=600, env=os.environ | {"PYTHONPATH": str(ROOT)}, cwd=ROOT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"the contract environment at {venv} does not run: {exc}"
    if done.returncode != 0:
        tail = " | ".join((done.stdout + done.stderr).strip().splitlines()[-3:])[:600]
        return f"the contract environment at {venv} does not work: {tail}"
    return ""


def what_is_missing() -> list[str]:
    """In the contract environment: the pins not installed as pinned, the checked modules that do not import."""
    missing = []
    for pin in SERVERS + IMPORT_DEPS:
        name, version = pin.split("==")
        try:
            found = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found = "not installed"
        if found != version:
            missing.append(f"{pin} ({found})")
    for module in CHECKED_MODULES:
        try:
            importlib.import_module(module)
        except Exception as exc:  # noqa: BLE001 - any import failure makes the environment unusable
            missing.append(f"import {module}: {type(exc).__name__}: {exc}")
    spec = importlib.util.find_spec("sglang")
    folder = Path(spec.submodule_search_locations[0]) if spec else None
    missing += [f"sglang/{s}" for s in SGLANG_SOURCES if folder is None or not (folder / s).is_file()]
    return missing


def _build(venv: Path) -> tuple[Path | None, str]:
    subprocess.run(["rm", "-rf", str(venv)], check=True)
    make_venv(venv)
    # --no-compile: the tests import a few of vllm's and sglang's thousands of modules; byte-compiling them all
    # is CPU time taken from the test suite this builds beside (.ci/run)
    pip = [str(python_of(venv)), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--retries", "1",
           "--no-deps", "--no-compile"]
    if os.environ.get("KITAE_CONTRACTS_FIND_LINKS"):
        pip += ["--find-links", os.environ["KITAE_CONTRACTS_FIND_LINKS"]]
    for group in (SERVERS, IMPORT_DEPS):
        done = subprocess.run([*pip, *group], capture_output=True, text=True)
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            return None, f"could not install {' '.join(group[:2])}...: {' | '.join(tail)[:400]}"
    why = broken(venv)
    if why:
        raise BrokenEnvironment(f"built, but {why}")
    (venv / STAMP).write_text(f"{time.strftime('%Y-%m-%d %H:%M:%S')}\n{sys.prefix}\n{sys.version}\n")
    return python_of(venv), ""


def main() -> int:
    if sys.argv[1:] == ["--check"]:  # in the contract environment (broken())
        missing = what_is_missing()
        print("; ".join(missing) if missing else "ok")
        return 1 if missing else 0
    started = time.monotonic()
    try:
        python, why = ensure()
    except BrokenEnvironment as exc:
        python, why = None, str(exc)
    if python is None:
        print(f"contract environment: {why}", file=sys.stderr)
        return 1
    print(f"contract environment: {python} ({time.monotonic() - started:.0f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
