"""What `kitae train` shows a person: each evaluation as it happens, on its own bar, outside the step ETA."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time

import pytest
from tqdm import tqdm

from kitae.cli.train import Console, StepClock, eval_line, format_summary, step_bar
from tests.plugins.tiny_run import write_config
from tests.signals import sigint_as_in_a_terminal

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
    # was "pass@1 0.000": an eval grader that abstained on every sample scored nothing
    assert eval_line(100, {"pass@1": None, "compliance": 1.0, "abstain_rate": 1.0}) == (
        "eval step 100   pass@1 n/a (the eval grader abstained on every sample)  compliance 1.000")


@pytest.mark.parametrize("times, window, per_step", [
    ([], 10, None),  # no step yet: no estimate
    ([30.0], 10, 30.0),  # one step: all there is
    ([30.0, 2.0, 2.0], 10, 2.0),  # the first step's warm-up is left out once a second step is there
    ([30.0, 1.0, 2.0, 3.0, 4.0], 2, 3.5),  # the last `window` steps only: early steps stop counting
])
def test_step_clock(times, window, per_step):
    clock = StepClock(window)
    for t in times:
        clock.add(t)
    assert clock.seconds_per_step() == per_step
    assert clock.eta(10) == (None if per_step is None else per_step * 10)


def test_the_step_bar_eta_counts_recent_steps_not_the_warm_up_or_evaluations():
    """A 30 s first step (warm-up) and a 47 s evaluation, then 2 s steps: 9 steps left show an ETA of 18 s."""
    out = io.StringIO()
    bar = step_bar(12, 0, "t", file=out, mininterval=0)
    console = Console(bar, show=True, main=True, write=lambda line: None)
    for seconds in (30.0, 2.0):
        console.on_step(0, {"secs_per_step": seconds})
    console.on_eval(2, METRICS, 47.0)
    console.on_step(3, {"secs_per_step": 2.0})
    assert "<00:18," in str(bar) and "2.00s/step" in str(bar)
    bar.close()


@pytest.mark.slow
def test_ctrl_c_saves_exits_130_and_says_how_to_resume(tiny_assets, tmp_path, rewards_on_path):
    """A real SIGINT to `kitae train`: the step in progress finishes and is saved, the exit status is 130 (a
    script sees the run did not finish) and the last line gives the command that continues the run."""
    # many steps (a fast machine ran 500 of them in 9 s) and any checkpoint will do: with keep_checkpoints 2 the
    # first one may be gone by the time this loop looks
    steps = 100_000
    cfg = write_config(tiny_assets, tmp_path, **{"optim.steps": steps, "logging.save_every": 1, "data.eval": None,
                                                 "eval.every": 0})
    run = tmp_path / "t"
    proc = subprocess.Popen([sys.executable, "-m", "kitae.cli.main", "train", str(cfg)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
                            preexec_fn=sigint_as_in_a_terminal)
    deadline = time.monotonic() + 240
    while (not any((run / "checkpoints").glob("step-??????")) and proc.poll() is None
           and time.monotonic() < deadline):
        time.sleep(0.2)
    assert proc.poll() is None, proc.communicate()[1][-3000:]
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 130, err[-3000:]
    last = err.strip().splitlines()[-1]
    step = int(last.removeprefix("interrupted at step ").split(";")[0])
    assert last == f"interrupted at step {step}; resume with: kitae train --resume {run}"
    assert 1 <= step < steps and (run / "checkpoints" / f"step-{step:06d}").is_dir()
    assert f"run t stopped after {step} steps" in out


def test_the_step_clock_docstring_example():
    import doctest

    import kitae.cli.train

    result = doctest.testmod(kitae.cli.train)
    assert result.failed == 0 and result.attempted > 0


def test_an_alarm_is_one_line_above_the_bar_on_the_main_process_only():
    from kitae.trainer.alarms import Alarm

    alarm = Alarm("answer_shape", 12, "66% of step 12's samples carry a list of four or more numbers", subject="number_list")
    for main, expected in ((True, ["alarm at step 12: answer_shape: 66% of step 12's samples carry a list of four "
                                   "or more numbers"]), (False, [])):
        shown: list[str] = []
        Console(tqdm(total=4, file=io.StringIO()), show=True, main=main, write=shown.append).on_alarm(alarm)
        assert shown == expected
