"""A Python installed under /tmp, as a venv in a Docker build or some CI images has it: the sandbox mounts a /tmp
of its own, which must not hide the interpreter it runs."""

from __future__ import annotations

from pathlib import Path

from tests.venvs import make_venv


def venv_under_tmp(folder: Path) -> str:
    """A venv in ``folder`` (under /tmp) that sees this Python's packages; the path of its interpreter."""
    assert str(folder).startswith("/tmp/"), folder
    folder.mkdir(exist_ok=True)
    folder.chmod(0o755)  # as venvs are made; pytest's are 0700, and nobody (the code, when kitae is root) could not enter
    return str(make_venv(folder, pip=False))
