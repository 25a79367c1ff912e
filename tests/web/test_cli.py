"""`kitae ui` as a user runs it: a real subprocess."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys

import httpx
import pytest

from tests.signals import sigint_as_in_a_terminal

KITAE = [sys.executable, "-m", "kitae.cli.main"]


def run_cli(*args, env=None, timeout=60):
    return subprocess.run([*KITAE, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


@pytest.mark.parametrize("args, env, message", [
    (["--host", "0.0.0.0"], {"KITAE_UI_TOKEN": ""}, "error: --host: binding 0.0.0.0 would show your runs"),
    (["--host", "0.0.0.0", "--token", "abc"], {}, "error: --token: the access token is 3 characters"),
])
def test_refusals_are_one_clear_line(tmp_path, args, env, message):
    r = run_cli("ui", "--runs", str(tmp_path), *args, env=env)
    assert r.returncode == 2
    assert r.stderr.startswith(message), r.stderr
    assert "Traceback" not in r.stderr


def test_a_busy_port_is_an_error_not_a_traceback(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        r = run_cli("ui", "--runs", str(tmp_path), "--port", str(busy.getsockname()[1]))
    assert r.returncode == 2 and "choose another --port" in r.stderr and "Traceback" not in r.stderr


def test_ui_serves_the_runs_until_ctrl_c(runs_dir):
    proc = subprocess.Popen([*KITAE, "ui", "--runs", str(runs_dir), "--port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=sigint_as_in_a_terminal)
    try:
        lines = [proc.stdout.readline() for _ in range(2)]
        url = re.search(r"open (http://127\.0\.0\.1:\d+/)", lines[1]).group(1)
        runs = httpx.get(url + "api/runs", timeout=10).json()["runs"]
        assert {r["name"] for r in runs} == {"finished-run", "crashed-run"}
        assert "<title>kitae" in httpx.get(url, timeout=10).text
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0 and "stopped" in out, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_ui_on_a_damaged_run_answers_409_and_prints_no_traceback(fresh_runs):
    from tests.store.damaged import DAMAGES, damage

    where = damage(fresh_runs / "finished-run", next(c for c in DAMAGES if c.id == "run-row-deleted"))
    proc = subprocess.Popen([*KITAE, "ui", "--runs", str(fresh_runs), "--port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=sigint_as_in_a_terminal)
    try:
        lines = [proc.stdout.readline() for _ in range(2)]
        url = re.search(r"open (http://127\.0\.0\.1:\d+/)", lines[1]).group(1)
        runs = {r["name"]: r for r in httpx.get(url + "api/runs", timeout=10).json()["runs"]}
        assert runs["finished-run"]["status"] == "unreadable" and where in runs["finished-run"]["error"]
        assert runs["crashed-run"]["status"] == "crashed"  # one damaged run hides no other
        shown = httpx.get(url + "api/runs/finished-run", timeout=10)
        assert shown.status_code == 409 and where in shown.json()["error"], shown.text
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0 and "Traceback" not in err, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
