"""The test harness itself: a session of pure-Python tests pays for no import it does not use.

The root conftest (and every plugin it registers) is loaded by every pytest start; importing torch or transformers
there cost each start about 9 s, so the 17 registry tests took 19 s. The heavy imports belong in the fixtures and
test files that use them.
"""

from __future__ import annotations

import os
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
