"""The sandbox runs this Python however it was started: by a relative path (``../venv/bin/python``), or from a venv
that lives under /work, where the sandbox mounts its work folder. Before the fix every python and code grade
abstained in both cases (the interpreter was not found inside)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Grades one sample with each grader and prints the results; the python grade reports whether this venv's
# site-packages is on the sandboxed interpreter's path
GRADE_BOTH = """
import json, sys
if RELATIVE:
    sys.executable = PATH  # as a launcher or an embedding may leave it
from kitae.graders import build_grader
site = [p for p in sys.path if p.endswith("site-packages")]
source = "import sys\\ndef grade(sample, item):\\n    return float(sample['output_text'] in sys.path)\\n"
results = {}
for name, spec, sample, item in [
        ("python", {"type": "python", "source": source}, site[-1], {}),
        ("code", {"type": "code", "workers": 1}, "```python\\nprint(int(input()) * 2)\\n```",
         {"tests": [{"input": "21\\n", "output": "42"}]})]:
    grader = build_grader(spec)
    try:
        grade = grader.grade_group(item, [{"output_text": sample}])[0]
    finally:
        grader.close()
    results[name] = [grade.score, grade.error]
print(json.dumps(results))
"""


@pytest.mark.parametrize("relative_executable", [False, True],
                         ids=["started by a relative path", "sys.executable relative"])
def test_grades_score_when_python_is_given_by_a_relative_path(relative_executable):
    python = os.path.relpath(os.path.abspath(sys.executable), ROOT)
    assert not os.path.isabs(python) and python.startswith("..")
    script = f"RELATIVE = {relative_executable}\nPATH = {python!r}\n" + GRADE_BOTH
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([python, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert results == {"python": [1.0, None], "code": [1.0, None]}, results
