"""The contract environment itself (env.py): it sees the running Python's packages, whether that Python is a venv or
not, belongs to the Python that built it, and a cached one is used only while it works."""

from __future__ import annotations

import subprocess
import sys

from tests.contracts import env
from tests.venvs import make_venv


def test_a_venv_made_here_sees_the_running_pythons_packages(tmp_path):
    """Made from a venv (as the README's install is), ``--system-site-packages`` showed the base interpreter's
    packages: no torch, no typer, and the contract checks and sandbox tests that use such a venv errored."""
    python = make_venv(tmp_path / "venv", pip=False)
    code = "import torch, typer, yaml; print(torch.__file__)"
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    import torch

    assert done.stdout.strip() == torch.__file__  # the running Python's torch, not a copy


def test_each_python_gets_its_own_environment(monkeypatch):
    """The environment imports the packages of the Python that built it (by path): another venv or Python version
    must not reuse it."""
    here = env.env_dir()
    monkeypatch.setattr(sys, "prefix", "/elsewhere/venv")
    assert env.env_dir() != here
    monkeypatch.undo()
    monkeypatch.setattr(sys, "version", sys.version + " (another build)")
    assert env.env_dir() != here


def test_a_cached_environment_that_does_not_work_is_not_used(tmp_path, monkeypatch):
    """A stamped environment whose packages are gone (or whose running venv was made anew without them) is
    refused with the reason, and rebuilt where building is allowed, never handed to the tests."""
    monkeypatch.setenv("KITAE_CONTRACTS_DIR", str(tmp_path))
    venv = env.env_dir()
    make_venv(venv, pip=False)  # no vllm, no sglang in it
    (venv / env.STAMP).write_text("built\n")
    python, why = env.ensure(build=False)
    assert python is None
    assert all(f"{pin} (not installed)" in why for pin in env.SERVERS)
    assert "build it: python tests/contracts/env.py" in why
