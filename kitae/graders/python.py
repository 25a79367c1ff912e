"""OpenAI's ``python`` grader: the user's ``grade(sample, item) -> float`` in a limited subprocess.

    type: python
    source: |
      def grade(sample, item):
          return float(sample["output_text"].strip() == item["reference_answer"])

``sample`` has ``output_text`` (up to the end-of-turn marker), ``output_json`` (the parsed output, or None)
and the sample's other fields; ``item`` is the dataset row. The code runs in a ``python -I`` process inside
the sandbox (:mod:`kitae.sandbox`: no network, no view of the machine's files, processes or environment,
a private /tmp) with a wall-clock ``timeout`` per sample (default 10 s), a CPU ``cpu_seconds`` budget
(default 5 s), an address-space limit ``memory_mb`` (default 1024) for the grade as a whole (a grade is one
process: it may start threads, not processes), and files of at most 64 MB (prints count). ``sandbox: none`` runs it unisolated, for code you trust on a machine without
user namespaces; runs that do say so. A crash, timeout, exception, non-number, NaN or infinity becomes the
sample's ``error`` (the grade abstains); it never stops the caller. ``image_tag`` (OpenAI's runtime image) is
accepted and ignored: the code sees this machine's Python and its packages. ``pass_threshold`` (OpenAI's)
leaves the score as ``grade`` returned it and adds ``sub_scores.passed``: 1 when the score is at least the
threshold, else 0. One worker serves the grader's samples one at a time and is restarted after a failure: it
runs ``source`` once, then each grade in a child forked from it, so every grade starts from the module state
the source left (a model loaded at import is loaded once) and nothing one grade changes reaches the next; the
child holds neither of the worker's channels, so a completion that a grader runs cannot answer for later
samples (it runs in the grade's process, so it can still decide its own grade). Processes a grade starts end
with it; ``/tmp`` and ``/dev/shm`` are emptied after it (and after ``source`` loads), and the worker is not
dumpable (a grade cannot write its memory), so nothing a grade leaves reaches the next.
"""

from __future__ import annotations

import ast
import asyncio
import math
from dataclasses import dataclass

from kitae.config import setting
from kitae.errors import ConfigError
from kitae.graders.base import Grade, Grader, Item, Sample
from kitae.graders.spec import read_spec, register_grader
from kitae.graders.template import sample_with_answer
from kitae.sandbox import Sandbox, SandboxKind, open_sandbox
from kitae.sandbox.seccomp import one_process_hex
from kitae.sandbox.worker import SandboxError, Worker


@dataclass
class PythonSpec:
    source: str  # defines grade(sample, item) -> float
    timeout: float = setting(10.0, minimum=0.1)  # wall-clock seconds per sample
    cpu_seconds: float = setting(5.0, minimum=0.1)
    memory_mb: int = setting(1024, minimum=64)
    pass_threshold: float | None = None
    sandbox: SandboxKind = "bwrap"
    image_tag: str | None = None  # OpenAI's runtime image: accepted, ignored

    def validate(self, path: str) -> None:
        _check_source(self.source, f"{path}.source")


@register_grader("python")
class PythonGrader(Grader):
    """OpenAI python grader: grade(sample, item) in a sandboxed, limited process (no network)."""

    def __init__(self, source: str, timeout: float = 10.0, cpu_seconds: float = 5.0, memory_mb: int = 1024,
                 pass_threshold: float | None = None, sandbox: Sandbox | None = None):
        self.source, self.pass_threshold = source, pass_threshold
        self.sandbox = sandbox if sandbox is not None else Sandbox()
        self.worker = Worker("python", timeout_s=timeout, memory_mb=memory_mb, cpu_seconds=cpu_seconds,
                             sandbox=self.sandbox, source=source, fork_per_request=True,
                             one_process=one_process_hex())

    @classmethod
    def from_spec(cls, spec: dict, path: str) -> "PythonGrader":
        s = read_spec(PythonSpec, spec, path)
        return cls(s.source, timeout=s.timeout, cpu_seconds=s.cpu_seconds, memory_mb=s.memory_mb,
                   pass_threshold=s.pass_threshold, sandbox=open_sandbox(s.sandbox, f"{path}.sandbox"))

    def grade_sample(self, item: Item, sample: Sample) -> Grade:
        try:
            value = self.worker.call({"sample": sample_with_answer(sample, leave_out=("output_json",)), "item": item})
        except SandboxError as exc:
            return Grade.abstain(error=f"python grader: {exc}")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return Grade.abstain(error=f"python grader: grade() returned {value!r}, not a number")
        if not math.isfinite(value):
            return Grade.abstain(error=f"python grader: grade() returned {value!r}, not a finite number")
        return Grade(score=float(value)).mark_passed(self.pass_threshold)

    async def agrade_sample(self, item: Item, sample: Sample) -> Grade:
        return await asyncio.to_thread(self.grade_sample, item, sample)

    def close(self) -> None:
        self.worker.close()
        self.sandbox.close()


def _check_source(source: str, path: str) -> None:
    """Syntax errors and a missing grade() are spec errors, found before any sample is graded."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise ConfigError(path, f"syntax error on line {exc.lineno}: {exc.msg}") from None
    names = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    if "grade" not in names:
        raise ConfigError(path, "must define a top-level function grade(sample, item) -> float")
