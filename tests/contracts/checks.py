"""vllm_checks.py's checks, run in the contract environment (tests/contracts/env.py) in one process."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def run_checks(python: Path, checks: dict) -> dict:
    """vllm_checks.py's checks ``{key: [name, input]}`` run in the contract environment, in one process."""
    done = subprocess.run([str(python), str(HERE / "vllm_checks.py")], input=json.dumps(checks),
                          capture_output=True, text=True, timeout=600, env=os.environ | {"PYTHONPATH": str(ROOT)},
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
