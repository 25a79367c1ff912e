"""The host side of a probe: a process that builds a grader, grades one sample and prints what happened.

Run as ``python -m tests.sandbox.victim`` with the job (grader spec, item, sample) as JSON on stdin. It stands in
for a training run: it holds a secret in its environment from the start (as a run holds OPENAI_API_KEY) and
counts the SIGUSR1 signals it receives, so a probe that reaches it is seen. ``__VICTIM_PID__`` in the job is
replaced by this process's pid, so a probe knows whom to attack.
"""

from __future__ import annotations

import json
import os
import signal
import sys


def main() -> None:
    job = json.loads(sys.stdin.read().replace("__VICTIM_PID__", str(os.getpid())))
    signalled = []
    signal.signal(signal.SIGUSR1, lambda *_: signalled.append(1))
    from kitae.graders import build_grader

    grader = build_grader(job["spec"])
    try:
        grade = grader.grade_group(job.get("item", {}), [{"output_text": job.get("sample", "")}])[0]
    finally:
        grader.close()
    print(json.dumps({"score": grade.score, "error": grade.error, "reason": grade.reason,
                      "signalled": len(signalled)}))


if __name__ == "__main__":
    main()
