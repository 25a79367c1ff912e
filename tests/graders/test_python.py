"""OpenAI's python grader in its sandbox: results, and every failure becomes an error grade, not a crash."""

from __future__ import annotations

import os
import socket
import subprocess
import textwrap
import threading
import time
from pathlib import Path

import pytest

from kitae.errors import ConfigError
from kitae.graders import build_grader
from tests.sandbox.venv import venv_under_tmp

ROOT = Path(__file__).resolve().parents[2]
ITEM = {"reference_answer": "47"}


def run(source: str, samples=("47",), **limits) -> list:
    grader = build_grader({"type": "python", "source": textwrap.dedent(source), **limits})
    try:
        return grader.grade_group(ITEM, [{"output_text": s} for s in samples])
    finally:
        grader.close()


def test_grade_receives_sample_and_item():
    grades = run(
        """
        def grade(sample, item):
            if isinstance(sample["output_json"], dict):  # "47" parses as JSON too
                return float(sample["output_json"]["answer"] == int(item["reference_answer"]))
            return float(sample["output_text"].strip() == item["reference_answer"])
        """,
        samples=("47", "46", '{"answer": 47}', "47<|im_end|>"),
    )
    assert [g.score for g in grades] == [1.0, 0.0, 1.0, 1.0]


def test_numpy_results_are_numbers():
    grades = run("import numpy as np\ndef grade(sample, item):\n    return np.float32(0.5)\n")
    assert grades[0].score == 0.5


def test_openai_spec_with_image_tag_loads():
    grades = run("def grade(sample, item):\n    return 0.25\n", image_tag="2025-05-08")
    assert grades[0].score == 0.25


@pytest.mark.parametrize(
    "threshold, scores, passed",
    [
        (0.5, [0.75, 0.5, 0.25], [1.0, 1.0, 0.0]),  # at the threshold passes; the score itself is unchanged
        (1, [0.75, 0.5, 0.25], [0.0, 0.0, 0.0]),  # an integer threshold (OpenAI's JSON) is a number too
        (None, [0.75, 0.5, 0.25], None),  # null (YAML ~): no passed sub-score, as when absent
    ],
)
def test_openai_pass_threshold_adds_passed_and_keeps_the_score(threshold, scores, passed):
    grades = run("def grade(sample, item):\n    return float(sample['output_text'])\n",
                 samples=tuple(map(str, scores)), pass_threshold=threshold)
    assert [g.score for g in grades] == scores
    assert [g.sub_scores.get("passed") for g in grades] == (passed or [None] * len(scores))


def test_pass_threshold_on_a_failed_sample_stays_an_abstention():
    grade = run("def grade(sample, item):\n    return 1 / 0\n", pass_threshold=0.5)[0]
    assert grade.score is None and "ZeroDivisionError" in grade.error and "passed" not in grade.sub_scores


@pytest.mark.parametrize(
    "source, error",
    [
        ("def grade(sample, item):\n    return 1 / 0\n", "ZeroDivisionError: division by zero (line 2)"),
        ("def grade(sample, item):\n    return 'high'\n", "grade() returned 'high', not a number"),
        ("def grade(sample, item):\n    return None\n", "grade() returned None, not a number"),
        ("def grade(sample, item):\n    return float('nan')\n", "grade() returned nan, not a finite number"),
        ("def grade(sample, item):\n    return float('inf')\n", "grade() returned inf, not a finite number"),
        ("def grade(sample, item):\n    return -1e308 * 10  # overflows\n", "returned -inf, not a finite number"),
        ("raise RuntimeError('at import')\ndef grade(sample, item):\n    return 1\n", "RuntimeError: at import (line 1)"),
        ("import os\ndef grade(sample, item):\n    os.system('true')\n", "blocked in the grader sandbox: os.system"),
        ("import subprocess\ndef grade(sample, item):\n    subprocess.run(['true'])\n", "blocked in the grader sandbox: subprocess.Popen"),
        ("import os\ndef grade(sample, item):\n    os._exit(3)\n", "exited with status 3"),
    ],
)
def test_failures_become_errors(source, error):
    grade = run(source)[0]
    assert grade.score is None and error in grade.error


def test_an_endless_loop_times_out():
    grade = run("def grade(sample, item):\n    while True:\n        pass\n", timeout=1, cpu_seconds=30)[0]
    assert grade.score is None and "timed out after 1s" in grade.error


def test_cpu_time_is_limited():
    source = "def grade(sample, item):\n    while True:\n        pass\n"
    grade = run(source, timeout=30, cpu_seconds=1)[0]
    assert grade.score is None and "exceeded its CPU-time limit" in grade.error


def test_memory_is_limited():
    grade = run("def grade(sample, item):\n    x = bytearray(1024 ** 3)\n    return 1.0\n", memory_mb=256)[0]
    assert grade.score is None and "MemoryError" in grade.error


def test_network_is_refused_and_no_connection_arrives():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.5)
    port = server.getsockname()[1]
    source = f"""
        import socket
        def grade(sample, item):
            socket.create_connection(("127.0.0.1", {port}), timeout=2).sendall(b"leak")
            return 1.0
        """
    try:
        grade = run(source)[0]
        with pytest.raises(socket.timeout):
            server.accept()  # nothing connected
    finally:
        server.close()
    assert grade.score is None and "blocked in the grader sandbox: socket" in grade.error


def test_environment_is_scrubbed(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    grade = run("import os\ndef grade(sample, item):\n    return float('OPENAI_API_KEY' in os.environ)\n")[0]
    assert grade.score == 0.0


def test_prints_do_not_break_the_protocol_and_the_worker_recovers():
    source = """
        def grade(sample, item):
            print("debugging", sample)
            if sample["output_text"] == "crash":
                import os
                os._exit(1)
            return 1.0
        """
    grades = run(source, samples=("a", "crash", "b"))
    assert [g.score for g in grades] == [1.0, None, 1.0]  # restarted after the crash


def test_the_worker_outlives_the_thread_that_started_it():
    """bubblewrap's --die-with-parent follows the thread that spawned it (PR_SET_PDEATHSIG): a worker started
    from a thread that then ended (asyncio.to_thread's pool, a finished asyncio.run) was killed with it, so
    module state was lost at every step and a request from another thread could die mid-grade."""
    source = "import random\nWORKER = random.random()  # drawn once, when a worker loads the source\n" \
             "def grade(sample, item):\n    return WORKER\n"
    grader = build_grader({"type": "python", "source": source})
    try:
        first = []
        starter = threading.Thread(target=lambda: first.append(grader.grade_sample({}, {"output_text": "a"}).score))
        starter.start()
        starter.join()
        assert len(first) == 1 and first[0] is not None
        for _ in range(50):  # give a parent-death signal time to arrive, were one on its way
            if grader.worker._proc.poll() is not None:
                break
            time.sleep(0.01)
        assert grader.worker._proc.poll() is None, "the worker died with the thread that started it"
        assert grader.grade_sample({}, {"output_text": "a"}).score == first[0]  # the same worker, as it loaded
    finally:
        grader.close()


def test_graded_from_threads_at_once():
    grader = build_grader({"type": "python", "source": "def grade(sample, item):\n    return len(sample['output_text'])\n"})
    results = {}

    def work(n):
        results[n] = grader.grade_group({}, [{"output_text": "x" * n}])[0].score

    threads = [threading.Thread(target=work, args=(n,)) for n in range(1, 6)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        grader.close()
    assert results == {n: float(n) for n in range(1, 6)}


def test_close_ends_the_worker_process():
    grader = build_grader({"type": "python", "source": "def grade(sample, item):\n    return 1.0\n"})
    grader.grade_group({}, [{"output_text": "a"}])
    pid = grader.worker._proc.pid
    grader.close()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


@pytest.mark.parametrize(
    "spec, message",
    [
        ({"source": "def grade(sample, item)\n    return 1\n"}, "grader.source: syntax error on line 1"),
        ({"source": "def score(sample, item):\n    return 1\n"}, "grader.source: must define a top-level function grade"),
        ({}, "grader.source: missing (required)"),
        ({"source": "def grade(s, i): return 1", "timeout": "5s"}, "grader.timeout: expected a number"),
        ({"source": "def grade(s, i): return 1", "memory_mb": 1}, "grader.memory_mb: must be >= 64"),
        ({"source": "def grade(s, i): return 1", "pass_threshold": "high"}, "grader.pass_threshold: expected a number"),
        ({"source": "def grade(s, i): return 1", "pass_treshold": 0.5}, "did you mean 'pass_threshold'?"),
    ],
)
def test_spec_errors(spec, message):
    with pytest.raises(ConfigError) as err:
        build_grader({"type": "python", **spec})
    assert message in str(err.value)


def test_a_python_installed_under_tmp_grades(tmp_path):
    """The sandbox's private /tmp must not cover the interpreter it runs (it did: every grade abstained)."""
    python = venv_under_tmp(tmp_path / "venv")
    code = ("from kitae.graders import build_grader\n"
            "g = build_grader({'type': 'python', 'source': 'def grade(s, i):\\n    return 0.5\\n'})\n"
            "grade = g.grade_group({}, [{'output_text': 'x'}])[0]\n"
            "g.close()\n"
            "print(grade.score, grade.error)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([python, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "0.5 None", done.stdout + done.stderr[-2000:]
