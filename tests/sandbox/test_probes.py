"""The probe suite: every attack in tests/sandbox/probes.py, run through a grader the way a training run would.

For each probe a host process (tests/sandbox/victim.py, holding a secret in its environment and its session
keyring) builds the grader
and grades one sample; then the test checks that the attack was contained:

- the grade is an error or 0 with a reason (not 1.0, the score an attack that worked gives itself);
- the host process is unharmed: it finished normally and received no signal;
- nothing reached the loopback servers (TCP, UDP echo, a DNS responder) and no file appeared outside;
- no process carrying the probe's marker survives the grade.

Each probe is bounded, and the fixture kills whatever it finds left over (by pid) and removes what was written.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from tests.sandbox.probes import (FORK_BOMBS, JUDGED_BY_HOST, LATER, LATER_SAMPLE_PROBES, PROBES, REFERENCE_ANSWER,
                                  RUNS_COMPLETIONS, program_source, python_grader_source)

ROOT = Path(__file__).resolve().parents[2]


class Host:
    """What a probe may try to reach: loopback servers, files, a secret, and a marker for its processes."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.marker = "kp-" + uuid.uuid4().hex[:10]
        self.secret = "sk-probe-" + uuid.uuid4().hex
        self.received: list[bytes] = []
        self.tcp = socket.socket()
        self.tcp.bind(("127.0.0.1", 0))
        self.tcp.listen(16)
        self.udp, self.dns = self._udp(), self._udp()
        replies = {self.udp: lambda data: b"echo:" + data,
                   self.dns: lambda data: data[:2] + b"\x81\x80" + data[4:]}  # the query echoed as an answer
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._serve, args=(s, r), daemon=True) for s, r in replies.items()]
        for t in self._threads:
            t.start()
        (tmp / "secret.txt").write_text(self.secret)
        self.write_targets = [tmp / "written.txt", Path("/var/tmp") / f"{self.marker}.txt"]
        self.system_target = tmp / "system.txt"
        self.ctx = {"marker": self.marker, "secret": self.secret, "tcp_port": self.tcp.getsockname()[1],
                    "udp_port": self.udp.getsockname()[1], "dns_port": self.dns.getsockname()[1],
                    "secret_file": str(tmp / "secret.txt"), "write_targets": [str(p) for p in self.write_targets],
                    "system_target": str(self.system_target), "key_description": f"kitae-{self.marker}"}

    @staticmethod
    def _udp() -> socket.socket:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", 0))
        s.settimeout(0.2)
        return s

    def _serve(self, s: socket.socket, reply) -> None:
        while not self._stop.is_set():
            try:
                data, addr = s.recvfrom(512)
            except (socket.timeout, OSError):
                continue
            self.received.append(data)
            s.sendto(reply(data), addr)

    # ---- evidence ------------------------------------------------------------------------------------
    def connections(self) -> int:
        self.tcp.settimeout(0.1)
        n = 0
        while True:
            try:
                conn, _ = self.tcp.accept()
            except (socket.timeout, OSError):
                return n
            conn.close()
            n += 1

    def written(self) -> list[str]:
        return [str(p) for p in [*self.write_targets, self.system_target] if p.exists()]

    def survivors(self, wait_s: float = 2.0) -> list[int]:
        """Pids of processes named with the marker, after giving a dying sandbox `wait_s` to go."""
        deadline = time.monotonic() + wait_s
        while True:
            found = marked_processes(self.marker)
            if not found or time.monotonic() > deadline:
                return found
            time.sleep(0.1)

    def close(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join()
        for s in (self.tcp, self.udp, self.dns):
            s.close()
        for pid in marked_processes(self.marker):  # self-cleaning: end what a probe left, by pid
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for p in self.write_targets:
            p.unlink(missing_ok=True)


def marked_processes(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() == marker:
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


@pytest.fixture
def host(tmp_path):
    h = Host(tmp_path)
    yield h
    h.close()


# ---- targets: how a probe reaches the grading machinery ---------------------------------------------
def python_grader_job(name: str, ctx: dict) -> dict:
    return {"spec": {"type": "python", "source": python_grader_source(name, ctx), "timeout": 2, "cpu_seconds": 1}}


def code_grader_job(name: str, ctx: dict) -> dict:
    program = "```python\n" + program_source(name, ctx) + "```"
    return {"spec": {"type": "code", "time_limit": 1, "total_time_limit": 3}, "sample": program,
            "item": {"tests": [{"input": "", "output": "1"}]}}


TARGETS = {"python grader": python_grader_job, "code grader": code_grader_job}


def run_victim(job: dict, secret: str, key_description: str = "") -> dict:
    env = {**os.environ, "OPENAI_API_KEY": secret, "PYTHONPATH": str(ROOT)}
    job = {**job, "key_description": key_description, "key_secret": secret}
    proc = subprocess.run([sys.executable, "-m", "tests.sandbox.victim"], input=json.dumps(job), env=env,
                          cwd=ROOT, capture_output=True, text=True, timeout=90)
    assert proc.returncode == 0, f"the host process did not finish normally ({proc.returncode}): {proc.stderr[-2000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("target", list(TARGETS))
@pytest.mark.parametrize("probe", list(PROBES))
def test_probe_is_contained(host, target, probe):
    result = run_victim(TARGETS[target](probe, host.ctx), host.secret, host.ctx["key_description"])
    assert result["signalled"] == 0, "the probe signalled the host process"
    assert host.connections() == 0, "a TCP connection reached the host"
    assert host.received == [], f"datagrams reached the host: {host.received[:3]}"
    assert host.written() == [], "files were written outside the sandbox"
    assert host.survivors() == [], "processes outlived the grade"
    if probe not in JUDGED_BY_HOST:
        assert result["score"] in (None, 0.0), f"the attack reports success: {result}"
        assert result["error"] or result["reason"], f"no reason given: {result}"


# ---- real fork bombs: only where the sandbox is shown to cap processes ---------------------------------
BOUNDED_FORKS = """
import os, time
started = 0
for _ in range(64):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(1)
        os._exit(0)
    started += 1
print(started)
"""


@pytest.fixture(scope="module")
def processes_capped(tmp_path_factory):
    """Refuse to start a fork bomb unless a bounded run (64 forks at most) shows the sandbox stops at its cap."""
    from kitae.sandbox import Limits, Sandbox
    from kitae.sandbox.process import run

    sandbox = Sandbox()
    try:
        done = run(sandbox, [sys.executable, "-I", "-S", "-c", BOUNDED_FORKS], tmp_path_factory.mktemp("forks"),
                   Limits(wall_seconds=30, processes=8))
    finally:
        sandbox.close()
    started = int(done.stdout or b"-1")
    if not 0 <= started < 8:
        pytest.fail(f"the sandbox let {started} of 64 processes start with a cap of 8: no fork bomb run")


@pytest.mark.parametrize("target", list(TARGETS))
@pytest.mark.parametrize("bomb", list(FORK_BOMBS))
def test_fork_bomb_is_contained(processes_capped, host, target, bomb):
    result = run_victim(TARGETS[target](bomb, host.ctx), host.secret)
    assert result["score"] in (None, 0.0) and (result["error"] or result["reason"]), result
    assert host.survivors() == [], "bomb processes outlived the grade"
    assert subprocess.run(["true"]).returncode == 0  # the machine still starts processes


# ---- attacks on the samples after the attacker's -------------------------------------------------------
@pytest.mark.parametrize("probe", list(LATER_SAMPLE_PROBES))
def test_a_sample_cannot_reach_the_grades_after_it(probe):
    """The attacker's completion first, then completions that answer nothing (LATER): each of those scores 0,
    in the same grade_group and in the next one (the same worker)."""
    from kitae.graders import build_grader

    grader = build_grader({"type": "python", "source": RUNS_COMPLETIONS, "timeout": 5})
    item = {"reference_answer": REFERENCE_ANSWER}
    try:
        grades = grader.grade_group(item, [{"output_text": LATER_SAMPLE_PROBES[probe]}] + [{"output_text": LATER}] * 2)
        later = grader.grade_group(item, [{"output_text": LATER}])
    finally:
        grader.close()
    assert [g.error for g in grades + later] == [None] * 4, [g.error for g in grades + later]
    assert [g.score for g in grades[1:] + later] == [0.0] * 3, "an earlier sample decided later grades"
