"""scripts/step_calls.py: the named kitae functions one training step calls, counted once each, by file."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "step_calls.py"
spec = importlib.util.spec_from_file_location("step_calls", SCRIPT)
step_calls = importlib.util.module_from_spec(spec)
spec.loader.exec_module(step_calls)


def test_counts_named_kitae_functions_once_and_leaves_out_lambdas_and_other_packages():
    import kitae
    from kitae.trainer.periodic import due

    def work():
        for step in range(3):  # called three times: counted once
            due(step, 2)
        (lambda: due(1, 1))()  # the lambda is not named; due is already counted
        os.path.join("a", "b")  # not kitae's

    called = step_calls.count_calls(work, Path(kitae.__file__).resolve().parent)
    assert called == {"kitae/trainer/periodic.py": {"due"}}


@pytest.mark.slow
def test_the_script_prints_the_total_and_the_functions_file_by_file():
    out = subprocess.run([sys.executable, str(SCRIPT), "--list"], capture_output=True, text=True, check=True,
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout.splitlines()
    total, files = map(int, re.fullmatch(r"(\d+) named functions in (\d+) files", out[0]).groups())
    assert total > 0 and files > 0
    headers = [re.fullmatch(r"(kitae/\S+\.py) \((\d+)\)", line) for line in out[1:] if not line.startswith("    ")]
    assert all(headers) and len(headers) == files
    assert sum(int(h.group(2)) for h in headers) == total == sum(line.startswith("    ") for line in out[1:])
    listed = {h.group(1) for h in headers}
    assert {"kitae/trainer/loop.py", "kitae/trainer/update.py"} <= listed
    assert "    Trainer.train_step" in out  # the step itself, called under the profile
