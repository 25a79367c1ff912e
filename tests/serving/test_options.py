"""`kitae serve rm|model` options are plain typer options: bounds (`min=`) and choices (`Literal`) are checked by
typer before the command runs, so a bad value is refused before any model is looked at."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.mark.parametrize("command", ["rm", "model"])
@pytest.mark.parametrize("option, value, said", [
    ("--dtype", "int4", "'int4' is not one of 'float32', 'bfloat16', 'float16'"),
    ("--max-body-mb", "0", "greater than or equal to 0.001"),
])
def test_a_bad_option_is_refused_before_the_model_is_looked_at(command, option, value, said, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "kitae.cli.main", "serve", command, "--model",
                           str(tmp_path / "no-model"), option, value], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "200"})
    err = " ".join(line.strip("│ ") for line in proc.stderr.splitlines())  # typer wraps the message in a box
    assert proc.returncode == 2, proc.stderr
    assert option in err and said in err, proc.stderr
    assert "no model folder" not in err
