"""An expensive module fixture's product built once per test session, however many pytest-xdist workers use it.

Under ``-n N`` a module's tests are handed out one by one, so two workers may each set up the same module-scoped
fixture: a trained run or a two-process launch built twice. ``built_once`` builds the product into a folder the
session's workers share (the parent of each worker's base temp folder, as pytest-xdist's docs recommend for
session data), under a file lock: the first worker builds it, a second waits for it and reads what was written.
Only public parts: the ``PYTEST_XDIST_WORKER`` variable, ``tmp_path_factory`` and ``filelock``. Without xdist it
is a fresh temp folder.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Callable

from filelock import FileLock


def built_once(tmp_path_factory, name: str, build: Callable[[Path], object]) -> Path:
    """The folder into which ``build(folder)`` wrote `name`'s product, called once in this session."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        folder = tmp_path_factory.mktemp(name)
        build(folder)
        return folder
    shared = tmp_path_factory.getbasetemp().parent  # this session's folder, above each worker's own
    folder, done = shared / name, shared / f"{name}.done"
    with FileLock(str(shared / f"{name}.lock")):
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)  # what a worker's failed build left
            folder.mkdir()
            build(folder)
            done.touch()
    return folder
