"""What `kitae train` shows a person: each evaluation as it happens, on its own bar, outside the step ETA."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest
from tqdm import tqdm

from kitae.cli.train import Console, eval_line, format_summary
from tests.trainer.conftest import write_config

METRICS = {"pass@1": 0.25, "compliance": 0.5, "len_mean": 3.25, "trunc_rate": 0.0, "pass@1/en": 0.25}


@pytest.mark.slow
def test_train_prints_every_eval_as_it_happens(tiny_assets, tmp_path, rewards_on_path):
    cfg = write_config(tiny_assets, tmp_path, **{"optim.steps": 4, "eval.every": 2})
    proc = subprocess.run([sys.executable, "-m", "kitae.cli.main", "train", str(cfg)], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    evals = [line for line in lines if line.startswith("eval step")]
    assert [line.split()[2] for line in evals] == ["0", "2", "4"]  # step 0, during training, the last step
    assert all("pass@1 " in line and "compliance " in line and line.endswith(" s)") for line in evals)
    assert lines[-3].startswith("run t finished after 4 steps")
    assert lines[-2].startswith("step 0 -> 4: pass@1 ")
    assert lines[-1] == "inspect it: kitae runs show t"
    assert "eval at step 0" in proc.stderr  # the evaluation's own progress bar


def test_eval_time_is_kept_out_of_the_step_clock():
    bar = tqdm(total=400, file=io.StringIO(), mininterval=0)
    shown: list[str] = []
    console = Console(bar, show=True, main=True, write=shown.append)
    start = bar.start_t
    progress = console.on_eval_start(0, 200)
    progress(100)
    progress(200)  # the evaluation's bar closes when it is done
    console.on_eval(0, METRICS, 47.0)
    assert bar.start_t == pytest.approx(start + 47.0)  # the 47 s of evaluation do not count as step time
    assert shown == ["eval step 0     pass@1 0.250  compliance 0.500  len_mean 3.2  trunc_rate 0.000  (47 s)"]


def test_summary_of_a_stopped_run_has_no_repeated_eval():
    """Stopped after the step-0 evaluation: first and latest are the same eval, printed once (as it happened)."""
    e0 = {"step": 0, "metrics": METRICS}
    stopped = {"name": "zero", "status": "stopped", "steps": 12, "path": "runs/zero", "first_eval": e0,
               "latest_eval": e0}
    assert format_summary(stopped).splitlines() == ["run zero stopped after 12 steps  (runs/zero)",
                                                     "inspect it: kitae runs show zero"]
    e4 = {"step": 400, "metrics": {**METRICS, "pass@1": 0.271}}
    finished = {**stopped, "status": "finished", "steps": 400, "latest_eval": e4}
    assert format_summary(finished).splitlines()[1] == (
        "step 0 -> 400: pass@1 0.250 -> 0.271  compliance 0.500 -> 0.500  len_mean 3.2 -> 3.2  "
        "trunc_rate 0.000 -> 0.000")
    assert eval_line(100, {"pass@1": None}) == "eval step 100   pass@1 -"
