"""A folder seen read-only by a subprocess, as on read-only storage: a read-only bind mount in a private mount
namespace (``unshare -rm``, which works as root, where ``chmod`` would not stop a write), or, for a user who is not
root, ``chmod a-w`` (the run store's tests and the trainer's durability tests)."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _unshare_works(folder: Path) -> bool:
    """True when this process can give a child a read-only bind mount of `folder` (and the mount holds)."""
    if shutil.which("unshare") is None:
        return False
    probe = f"mount --bind -o ro {shlex.quote(str(folder))} {shlex.quote(str(folder))} && ! touch {shlex.quote(str(folder / 'x'))}"
    done = subprocess.run(["unshare", "-rm", "sh", "-c", probe], capture_output=True)
    return done.returncode == 0 and not (folder / "x").exists()


@pytest.fixture(scope="module")
def read_only_view(tmp_path_factory):
    """``run(folder, python_code) -> CompletedProcess``: the code runs in a process that sees `folder` read-only."""
    if _unshare_works(tmp_path_factory.mktemp("probe")):
        def run(folder: Path, code: str) -> subprocess.CompletedProcess:
            inner = f"mount --bind -o ro {shlex.quote(str(folder))} {shlex.quote(str(folder))} && " \
                    f"exec {shlex.quote(sys.executable)} -c {shlex.quote(code)}"
            return subprocess.run(["unshare", "-rm", "sh", "-c", inner], capture_output=True, text=True,
                                  timeout=120, env=repo_env())
        return run
    if os.geteuid() != 0:
        def run(folder: Path, code: str) -> subprocess.CompletedProcess:
            modes = {p: p.stat().st_mode for p in [folder, *folder.rglob("*")]}
            for p, mode in modes.items():
                p.chmod(mode & ~0o222)
            try:
                return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                                      env=repo_env())
            finally:
                for p, mode in modes.items():
                    p.chmod(mode)
        return run
    pytest.skip("root without user namespaces (unshare -rm): no way to make a folder read-only for this process")


def repo_env() -> dict[str, str]:
    """This environment with the repository on PYTHONPATH (for `python -c` in a subprocess)."""
    return {**os.environ, "PYTHONPATH": f"{REPO}:{os.environ.get('PYTHONPATH', '')}"}
