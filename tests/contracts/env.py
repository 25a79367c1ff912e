"""The contract environment: a virtual environment that has vLLM and SGLang as released, without their GPU stack.

    python3 tests/contracts/env.py        # build it (CI does, in the background), print its python

vllm and sglang are installed with ``--no-deps``, then only the packages their request, reply and weight-transfer
modules import (no CUDA, no second torch: the environment sees this python's packages, torch and kitae's
dependencies included, and leaves them as they are). It lives under ``$KITAE_CONTRACTS_DIR`` (default
~/.cache/kitae-contracts), one folder per pinned set, so a machine builds it once; a lock lets a test session wait
for a build already under way. ``$KITAE_CONTRACTS_FIND_LINKS`` names a folder of wheels to prefer (the vllm
wheel is about 340 MB). Building needs a package index; without one it fails and the contract tests skip.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

SERVERS = ["vllm==0.33.0", "sglang==0.5.23"]
# what vllm's completion protocol, its RL HTTP routes and its NCCL weight-transfer modules import, pinned
IMPORT_DEPS = [
    "aiohappyeyeballs==2.7.1", "aiohttp==3.14.5", "aiosignal==1.4.0", "apache-tvm-ffi==0.1.15.post2",
    "cachetools==8.0.2", "cbor2==6.3.0", "fastapi==0.165.0", "frozenlist==1.8.0", "jiter==0.19.0",
    "llguidance==1.9.1", "msgspec==0.23.0", "multidict==7.2.1", "openai==3.57.0", "openai-harmony==0.0.8",
    "opentelemetry-api==1.45.2", "partial-json-parser==0.2.1.1.post7", "prometheus_client==0.26.0",
    "propcache==0.5.4", "pybase64==1.5.1", "pyzmq==27.3.0", "starlette==1.10.0", "uvicorn==0.54.0",
    "uvloop==0.23.0", "watchfiles==1.3.0", "xgrammar==0.2.9", "yarl==1.25.1",
]


def env_dir() -> Path:
    root = Path(os.environ.get("KITAE_CONTRACTS_DIR") or Path.home() / ".cache" / "kitae-contracts")
    key = hashlib.sha256(" ".join([sys.version, *SERVERS, *IMPORT_DEPS]).encode()).hexdigest()[:12]
    return root / f"venv-{key}"


def python_of(venv: Path) -> Path:
    return venv / "bin" / "python"


def ensure(build: bool = True) -> tuple[Path | None, str]:
    """(the environment's python, "") when it is built or could be built now; (None, why not) otherwise. Waits
    for a build another process holds the lock of."""
    venv = env_dir()
    if (venv / "ok").exists():
        return python_of(venv), ""
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a build under way finishes first
        if (venv / "ok").exists():
            return python_of(venv), ""
        if not build:
            return None, f"no contract environment at {venv} (build it: python3 tests/contracts/env.py)"
        return _build(venv)


def _build(venv: Path) -> tuple[Path | None, str]:
    subprocess.run(["rm", "-rf", str(venv)], check=True)
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
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
    (venv / "ok").write_text(time.strftime("%Y-%m-%d %H:%M:%S\n"))
    return python_of(venv), ""


if __name__ == "__main__":
    started = time.monotonic()
    python, why = ensure()
    if python is None:
        print(f"contract environment: {why}", file=sys.stderr)
        sys.exit(1)
    print(f"contract environment: {python} ({time.monotonic() - started:.0f}s)")
