"""`kitae serve rm` as a real process: grade through it, kill it mid-run, the grader abstains, counts, goes on."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading

import pytest

from kitae.graders import build_grader
from kitae.rewards.reward_model import LocalRewardModel

PREFIX = "kitae serve rm: serving "
ITEM = {"messages": [{"role": "system", "content": "計算して"}, {"role": "user", "content": "12+35は?"}],
        "reference_answer": "47"}
SAMPLES = [
    {"output_text": "47<|im_end|>"},
    {"output_text": "12+35=47です。<|im_end|>"},
    {"output_text": "48"},  # no end marker: gated, never sent
]


def start_server(model: str, port: int, log) -> tuple[subprocess.Popen, str]:
    cmd = [sys.executable, "-m", "kitae.cli.main", "serve", "rm", "--model", model, "--port", str(port)]
    env = os.environ | {"PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True, env=env)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: lines.put(proc.stdout.readline()), daemon=True).start()
    try:
        first = lines.get(timeout=120)
    except queue.Empty:
        proc.kill()
        raise AssertionError("kitae serve rm printed nothing in 120 s")
    assert first.startswith(PREFIX), f"unexpected first line {first!r} (rc={proc.poll()})"
    return proc, first.strip().rsplit(" on ", 1)[1]


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=30)


@pytest.mark.slow
def test_serve_rm_grade_kill_abstain_restart(tiny_rm, tmp_path):
    expected = LocalRewardModel(tiny_rm).score(  # what the server must answer: user + assistant turns only
        [[ITEM["messages"][1], {"role": "assistant", "content": c}] for c in ("47", "12+35=47です。")]
    )
    log = open(tmp_path / "server.log", "w")
    proc, url = start_server(tiny_rm, 0, log)
    try:
        grader = build_grader({"type": "reward_model", "url": url, "full_chars": 0, "timeout": 5.0,
                               "retries": 1, "backoff": 0.01})
        port = int(url.rsplit(":", 1)[1])
        results = []
        for step in range(6):  # a run's grading loop: the server dies at step 2, is back at step 4
            if step == 2:
                stop(proc)
            if step == 4:
                proc, url = start_server(tiny_rm, port, log)
            results.append(grader.grade_group(ITEM, SAMPLES))
    finally:
        stop(proc)
        log.close()

    for step in (0, 1, 4, 5):  # served: the RM's raw logits (clip ±10, no length factor), gated sample 0.0
        assert [g.score for g in results[step]] == pytest.approx(expected + [0.0], abs=1e-5)
    for step in (2, 3):  # down: the two ungated samples abstain with the reason, the gated one is still 0.0
        scores = [g.score for g in results[step]]
        assert scores == [None, None, 0.0]
        assert "reward model failed" in results[step][0].error
    stats = grader.stats()
    assert (stats["samples"], stats["scored"], stats["gated"]) == (18, 8, 6)
    assert (stats["failed_calls"], stats["abstained"]) == (2, 4)
    assert stats["client_connection_errors"] == 4  # 2 calls × (1 try + 1 retry)
    assert stats["client_failed_calls"] == 2
