"""The contract environment for these tests (tests/contracts/env.py): found and checked, waited for, or built once
per machine and Python; the tests skip, saying why, where it cannot be built (no package index), and error where
a fresh build does not work (env.BrokenEnvironment: the pins need fixing). ``KITAE_CONTRACTS_BUILD=0``: use an
environment already built, never build one."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.contracts import env


@pytest.fixture(scope="session")
def contract_python() -> Path:
    python, why = env.ensure(build=os.environ.get("KITAE_CONTRACTS_BUILD", "1") != "0")
    if python is None:
        pytest.skip(f"vllm and sglang could not be installed in the contract environment: {why}")
    return python


@pytest.fixture(scope="session")
def sglang_source(contract_python) -> Path:
    """The installed sglang package's folder (read as source: its modules import its GPU stack)."""
    done = subprocess.run([str(contract_python), "-c", "import importlib.util as u; "
                           "print(u.find_spec('sglang').submodule_search_locations[0])"],
                          capture_output=True, text=True, check=True)
    return Path(done.stdout.strip())
