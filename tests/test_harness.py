"""The test harness itself: a session pays only for what its tests use, shared fixtures are plugins, and an
expensive module fixture is built once however many xdist workers run its module.

The root conftest (and every plugin it registers) is loaded by every pytest start; it imported torch and
transformers, about 7 s of each start (tests/test_registry.py: 9.3 s wall for 2 s of tests). The heavy imports
belong in the fixtures and test files that use them.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers")

# a pytest plugin that writes which heavy modules the session imported, once every test has run
PROBE = f"""
import os, sys

def pytest_sessionfinish(session):
    heavy = [name for name in {HEAVY!r} if name in sys.modules]
    with open(os.environ["HEAVY_PROBE_OUT"], "w") as out:
        out.write(",".join(heavy))
"""


def test_a_pure_test_files_session_never_imports_torch_or_transformers(tmp_path):
    (tmp_path / "heavy_probe.py").write_text(PROBE)
    out = tmp_path / "heavy.txt"
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]), "HEAVY_PROBE_OUT": str(out)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "heavy_probe", "-p", "no:cacheprovider",
                           "tests/test_registry.py", "-k", "not fresh_process"],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert " passed" in done.stdout  # the probe saw a session that ran tests
    assert out.read_text() == "", f"a session of pure-Python tests imported {out.read_text()}"


THREADS = """
import torch

START = torch.get_num_threads()

def test_a_changes_torch_threads():
    torch.set_num_threads(1 if START != 1 else 2)

def test_b_starts_with_the_sessions_count():
    assert torch.get_num_threads() == START
"""


def test_each_test_starts_with_the_sessions_torch_threads_where_torch_is_loaded(tmp_path):
    """The root conftest restores torch's thread count after a test changed it, without importing torch itself."""
    (tmp_path / "test_threads_restored.py").write_text(THREADS)
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "tests.conftest", "-p", "no:cacheprovider",
                           "-p", "no:xdist", "--rootdir", str(tmp_path), str(tmp_path / "test_threads_restored.py")],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "2 passed" in done.stdout


def test_no_test_imports_a_conftest():
    """Fixtures shared by several packages are plugins (tests/plugins, registered by the root conftest) and helpers
    are plain modules: a conftest imported by name is loaded a second time beside pytest's own copy of it, and its
    fixtures then shadow the package's."""
    imports = re.compile(r"^\s*(from\s+(tests\.[\w.]*conftest|\.conftest)\s+import|import\s+tests\.[\w.]*conftest)")
    found = [f"{path.relative_to(ROOT)}:{n}" for path in sorted((ROOT / "tests").rglob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), 1) if imports.match(line)]
    assert not found, f"these lines import a conftest: {found}"


SHARED = """
import os

import pytest

from tests.built_once import built_once


def build(folder):
    with open(os.environ["BUILDS"], "a") as builds:
        builds.write("built\\n")
    (folder / "product.txt").write_text("made once")


@pytest.fixture(scope="module")
def product(tmp_path_factory):
    return (built_once(tmp_path_factory, "product", build) / "product.txt").read_text()


@pytest.mark.parametrize("i", range(6))
def test_reads_the_product(product, i):
    with open(os.environ["RAN"], "a") as ran:
        ran.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")
    assert product == "made once"
"""


def test_a_module_fixture_built_once_is_built_once_for_two_xdist_workers(tmp_path):
    """Both workers run tests of the module and set up its fixture; the product is built by one of them only."""
    (tmp_path / "test_shared_product.py").write_text(SHARED)
    builds, ran = tmp_path / "builds.txt", tmp_path / "ran.txt"
    env = os.environ | {"PYTHONPATH": str(ROOT), "BUILDS": str(builds), "RAN": str(ran)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "no:cacheprovider",
                           "--rootdir", str(tmp_path), str(tmp_path / "test_shared_product.py")],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert sorted(set(ran.read_text().split())) == ["gw0", "gw1"]  # the module's tests ran on both workers
    assert builds.read_text().split() == ["built"]
