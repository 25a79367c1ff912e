"""docs/judge.md's quick start, run as written: every command of its bash block, in a folder that holds the
example files it names, each command's output compared with the ``# `` lines the doc shows under it.

The one liberty: the stand-in server is started on a free port (``--port 0``) and the port it prints replaces
8000 in the later commands and in the expected output, so the test never collides with a server already there.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "judge.md"
PORT = "8000"


def quick_start_steps() -> list[tuple[str, list[str]]]:
    """(command, the output lines shown under it) of the first bash block of the Quick start section."""
    section = DOC.read_text(encoding="utf-8").split("## Quick start", 1)[1]
    block = section.split("```bash\n", 1)[1].split("\n```", 1)[0]
    steps: list[tuple[str, list[str]]] = []
    pending = ""
    for line in block.splitlines():
        if line.startswith("#"):  # what the command above prints
            steps[-1][1].append(line[2:])
        elif line.endswith("\\"):
            pending += line[:-1]
        else:
            steps.append(((pending + line).strip(), []))
            pending = ""
    return steps


def argv(command: str, port: str | None) -> list[str]:
    words = shlex.split(command if port is None else command.replace(PORT, port))
    if words[0] == "python":
        return [sys.executable, *words[1:]]
    if words[0] == "kitae":
        script = shutil.which("kitae")
        return [script, *words[1:]] if script else [sys.executable, "-m", "kitae.cli.main", *words[1:]]
    raise AssertionError(f"the quick start runs a command this test does not know: {command!r}")


def first_line(proc: subprocess.Popen, timeout: float = 120) -> str:
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    assert got and got[0], f"no line from {proc.args} in {timeout} s"
    return got[0].rstrip("\n")


@pytest.fixture
def workdir(tmp_path):
    """A folder with the examples, as a checkout has them (the commands may write there: runs/, graded.jsonl)."""
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    return tmp_path


def test_the_quick_start_block_is_what_this_test_runs():
    commands = [c for c, _ in quick_start_steps()]
    assert commands[0].startswith("python -m kitae.judge.testing --port 8000") and commands[0].endswith("&")
    assert any(c.startswith("kitae grade ") for c in commands) and commands[-1] == "kill %1"


def test_the_judge_quick_start_runs_as_written_and_prints_what_the_doc_shows(workdir):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    server: subprocess.Popen | None = None
    port: str | None = None
    try:
        for command, shown in quick_start_steps():
            if command.endswith("&"):  # the stand-in server, in the background
                words = argv(command[:-1].replace(f"--port {PORT}", "--port 0"), None)
                server = subprocess.Popen(words, cwd=workdir, env=env, stdout=subprocess.PIPE, text=True)
                line = first_line(server)
                port = re.search(r":(\d+)$", line).group(1)
                assert [line] == [s.replace(PORT, port) for s in shown]
            elif command == "kill %1":
                server.send_signal(signal.SIGTERM)
                assert server.wait(timeout=30) == 0
            else:
                out = subprocess.run(argv(command, port), cwd=workdir, env=env, capture_output=True, text=True,
                                     timeout=120)
                assert out.returncode == 0, out.stdout + out.stderr
                assert out.stdout.splitlines() == [s.replace(PORT, port) for s in shown], out.stderr
    finally:
        if server is not None and server.poll() is None:
            server.kill()
    rows = [json.loads(line) for line in (workdir / "graded.jsonl").read_text(encoding="utf-8").splitlines()]
    grades = [g for row in rows for g in row.get("grades") or [row["grade"]]]
    assert len(rows) == 3 and len(grades) == 6  # as the doc says: per sample a score, four criteria, a reason
    assert all(g["score"] == 0.5 and len(g["sub_scores"]) == 4 and g["reason"] for g in grades)


def test_the_stand_in_says_which_port_is_taken():
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = subprocess.run([sys.executable, "-m", "kitae.judge.testing", "--port", str(port)],
                             capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in out.stderr and "--port 0" in out.stderr
