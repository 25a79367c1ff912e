"""Every test starts with the torch thread count the session started with, and no test can reach a model hub.

A trainer's ``threads`` setting (and some fixtures) change torch's process-wide thread count; restoring it
after each test keeps every later test's result independent of the order tests run in.

Hub ids resolve offline from an empty cache of the session's own (set before huggingface_hub is imported, so
its constants and every subprocess see it): a test that needs a cached model lays it out (tests/hub_cache.py).

Nothing heavy is imported here or in the plugins below (every pytest start loads them): torch is imported by the
tests that use it, and this file only looks at it when it is already loaded (tests/test_harness.py checks that a
pure-Python test file's session never imports it).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

_HF_HOME = tempfile.mkdtemp(prefix="kitae-tests-hf-")
os.environ.update(HF_HUB_OFFLINE="1", HF_HOME=_HF_HOME, HF_HUB_CACHE=os.path.join(_HF_HOME, "hub"))

import pytest

# fixtures shared across test packages (each imports torch inside the fixtures that need it)
pytest_plugins = ("tests.plugins.tiny_run", "tests.plugins.long_model", "tests.plugins.tiny_models",
                  "tests.plugins.run_page", "tests.plugins.read_only", "tests.plugins.registries")

ROOT = Path(__file__).resolve().parents[1]
# what a test run may leave in the checkout (screenshots of the browser tests, caches)
MAY_WRITE = {".pytest_cache", "test-artifacts", "__pycache__", ".benchmarks"}


def _checkout_entries() -> set[str]:
    top = {p.name for p in ROOT.iterdir()} - MAY_WRITE
    nested = {f"{d}/{p.name}" for d in ("runs", "curated", "eval_results") if (ROOT / d).is_dir()
              for p in (ROOT / d).iterdir()}
    return top | nested


@pytest.fixture(autouse=True, scope="session")
def _nothing_written_into_the_checkout():
    """Tests write into tmp_path, never into the checkout (a relative default such as runs/judge-cache would)."""
    before = _checkout_entries()
    yield
    new = sorted(_checkout_entries() - before)
    assert not new, f"tests wrote {', '.join(new)} into the checkout {ROOT}; write into tmp_path instead"


# torch's thread count before any test ran: read once the test modules are imported (all that a session does
# before its first test), or, in a session whose modules do not import torch, before the first test that finds it
_SESSION_THREADS = pytest.StashKey[int]()


def _note_session_threads(config) -> None:
    if _SESSION_THREADS not in config.stash and "torch" in sys.modules:
        config.stash[_SESSION_THREADS] = sys.modules["torch"].get_num_threads()


def pytest_collection_finish(session):
    _note_session_threads(session.config)


@pytest.fixture(autouse=True)
def _restore_torch_threads(request):
    _note_session_threads(request.config)
    yield
    torch, count = sys.modules.get("torch"), request.config.stash.get(_SESSION_THREADS, None)
    if torch is not None and count is not None and torch.get_num_threads() != count:  # torch unloaded: untouched
        torch.set_num_threads(count)


# The longest tests (minutes each on a 2-core machine), started first so that `-n 2` ends both workers together:
# handed out in file order, the README walkthroughs (tests/test_readme.py sorts late) ran alone at the end.
LONGEST = ("tests/test_readme.py::test_curate_walkthrough_as_written", "tests/test_readme.py::test_quick_start_as_written",
           "tests/trainer/test_fsdp.py::")


# `-n 2` hands tests out one by one (pytest-xdist's default), so both workers may run tests of one module: an
# expensive module fixture (a trained run, a two-process launch) builds its product once for the session with
# tests/built_once.py. (pytest-xdist's --dist loadgroup does not group under pytest 9: pytest-xdist issue 1386.)
# A file's first test starts the build; its other tests wait at the end of the queue, so that the other worker
# runs other tests meanwhile instead of waiting on the build's lock (in `.ci/run` that wait cost about 4 minutes).
BUILT_ONCE_FILES = ("tests/curate/test_testcases.py", "tests/trainer/test_gamed_run.py",
                    "tests/trainer/test_train_e2e.py", "tests/contracts/test_vllm.py")


def pytest_collection_modifyitems(session, config, items):
    """Longest first, then the other `slow` tests, then the rest, each group in file order; then the tests of a
    file whose module fixture is built once (BUILT_ONCE_FILES), but its first, go last."""
    def rank(item) -> int:
        if item.nodeid.startswith(LONGEST):
            return 0
        return 1 if item.get_closest_marker("slow") else 2

    items.sort(key=rank)
    seen: set[str] = set()
    later = []
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        if path in BUILT_ONCE_FILES and path in seen:
            later.append(item)
        seen.add(path)
    waiting = set(map(id, later))
    items[:] = [item for item in items if id(item) not in waiting] + later
