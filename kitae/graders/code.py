"""The ``code`` grader (Kimi k1.5 §2.6): run the completion's program on the item's test cases in the sandbox.

    type: code
    language: auto            # auto: the code fence's tag, then item.language, then python; or python, cpp
    mode: fraction            # score = fraction of cases passed; `all`: 1 only when every case passes
    compare: tokens           # stdout vs expected: tokens (any whitespace), lines (trailing spaces ignored), exact
    tolerance: null           # numbers within this (absolute or relative) difference count as equal
    time_limit: 2             # CPU seconds per case (a sleeping program is stopped at 2x + 1 s wall clock)
    total_time_limit: 60      # wall clock for all cases of one sample
    memory_mb: 512            # per case, as a whole: a case is one process (threads, no forks)
    workers: 4                # cases run in parallel, across all samples being graded
    tests_field: tests        # the item field that holds the cases
    sandbox: bwrap            # `none` runs the program unisolated (trusted code only; runs say so)

The program is the last fenced block of the completion (```python ... ```), or the whole text when there is
none. Test cases (``item.tests``), one kind per item:

    {"input": "1 2\\n", "output": "3\\n"}        stdin in, stdout compared with `compare`
    {"call": "add(1, 2)", "expected": 3}       Python: the program runs, then the call; its value compared
    "assert add(1, 2) == 3"                    the same, parsed on this side of the sandbox

For asserts with a literal right-hand side the program only ever sees the call: the expected value stays
outside, so a program cannot print or forge it. Other asserts (``assert is_prime(7)``) run as ``bool(...)``.
Returned values are compared as plain data (their repr read back with ``ast.literal_eval``; tuples equal lists,
as in JSON). The reason names the first failing case with its input and a diff of expected vs got; a compile
error (C++, or a Python syntax error) scores 0 with the compiler's message. A broken test list, a sandbox
that fails to start or a missing g++ abstain (score None) with the error.
"""

from __future__ import annotations

import ast
import asyncio
import difflib
import math
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal

from kitae.config import setting
from kitae.graders.base import Grade, Grader, Item, Sample
from kitae.graders.spec import read_spec, register_grader
from kitae.graders.template import output_text
from kitae.sandbox import Sandbox, SandboxKind, open_sandbox
from kitae.sandbox.programs import CaseLimits, CaseResult, run_program

FENCE = re.compile(r"```[ \t]*([\w+#.-]*)[^\n]*\n(.*?)```", re.DOTALL)
OPEN_FENCE = re.compile(r"```[ \t]*([\w+#.-]*)[^\n]*\n(.*)$", re.DOTALL)
TAGS = {"python": "python", "py": "python", "python3": "python", "cpp": "cpp", "c++": "cpp", "cc": "cpp",
        "cxx": "cpp"}


@dataclass
class CodeSpec:
    """The fields of ``type: code`` (the module docstring says what each does)."""

    language: Literal["auto", "python", "cpp"] = "auto"
    mode: Literal["fraction", "all"] = "fraction"
    compare: Literal["tokens", "lines", "exact"] = "tokens"
    tolerance: float | None = setting(None, minimum=0)
    time_limit: float = setting(2.0, minimum=0.1)
    total_time_limit: float = setting(60.0, minimum=1)
    memory_mb: int = setting(512, minimum=32)
    workers: int = setting(4, minimum=1)
    tests_field: str = "tests"
    sandbox: SandboxKind = "bwrap"


@register_grader("code")
class CodeGrader(Grader):
    """Runs the completion's program (Python or C++) on the item's test cases in the sandbox."""

    def __init__(self, language: str = "auto", mode: str = "fraction", compare: str = "tokens",
                 tolerance: float | None = None, limits: CaseLimits = CaseLimits(), workers: int = 4,
                 tests_field: str = "tests", sandbox: Sandbox | None = None):
        self.language, self.mode, self.compare, self.tolerance = language, mode, compare, tolerance
        self.limits, self.workers, self.tests_field = limits, workers, tests_field
        self.sandbox = sandbox if sandbox is not None else Sandbox()
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    @classmethod
    def from_spec(cls, spec: dict, path: str) -> "CodeGrader":
        s = read_spec(CodeSpec, spec, path)
        limits = CaseLimits(seconds=s.time_limit, total_seconds=s.total_time_limit, memory_mb=s.memory_mb)
        return cls(s.language, s.mode, s.compare, s.tolerance, limits, s.workers, s.tests_field,
                   open_sandbox(s.sandbox, f"{path}.sandbox"))

    # ---- grading ---------------------------------------------------------------------------------------
    def grade_sample(self, item: Item, sample: Sample) -> Grade:
        try:
            kind, cases, expected = parse_tests(item.get(self.tests_field), f"item.{self.tests_field}")
        except ValueError as exc:
            return Grade.abstain(error=f"code grader: {exc}")
        language, source = extract_program(output_text(sample), self.language, item.get("language"))
        if not source.strip():
            return Grade(score=0.0, reason="no program in the completion")
        if kind == "call" and language != "python":
            return Grade(score=0.0, reason=f"these tests call Python functions; the program is {language}")
        run = run_program(self.sandbox, language, source, cases, kind, self.limits, self.workers, self._workers())
        if run.error:
            return Grade.abstain(error=f"code grader: {run.error}")
        if run.compile_error:
            return Grade(score=0.0, reason=f"compile error ({language}):\n{run.compile_error}")
        return self._score(kind, cases, expected, run.results)

    async def agrade_sample(self, item: Item, sample: Sample) -> Grade:
        return await asyncio.to_thread(self.grade_sample, item, sample)

    def _score(self, kind: str, cases: list[dict], expected: list[Any], results: list[CaseResult]) -> Grade:
        verdicts = [self._verdict(kind, want, got) for want, got in zip(expected, results)]
        passed = sum(v is None for v in verdicts)
        fraction = passed / len(verdicts)
        score = fraction if self.mode == "fraction" else float(passed == len(verdicts))
        reason = f"{passed}/{len(verdicts)} cases passed"
        failed = next((i for i, v in enumerate(verdicts) if v is not None), None)
        if failed is not None:
            reason += f"; case {failed + 1}: {verdicts[failed]}" + _case_text(cases[failed])
        return Grade(score=score, sub_scores={"cases_passed": fraction}, reason=reason)

    def _verdict(self, kind: str, want: Any, got: CaseResult) -> str | None:
        """None when the case passed, else what went wrong (with a diff for a wrong answer)."""
        if not got.finished:
            return got.describe(self.limits) + _stderr_tail(got.stderr)
        if got.output_truncated:
            return f"output over {self.limits.output_kb} KB"
        if kind == "stdio":
            if outputs_match(want, got.stdout, self.compare, self.tolerance):
                return None
            return "wrong answer\n" + output_diff(want, got.stdout)
        value = read_value(got.value)
        if value is not _UNREADABLE and values_match(want, value, self.tolerance):
            return None
        return f"wrong answer: expected {_short(repr(want))}, got {_short(got.value or '')}"

    def _workers(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="kitae-code")
            return self._pool

    def close(self) -> None:
        with self._pool_lock:
            if self._pool is not None:
                self._pool.shutdown()
                self._pool = None
        self.sandbox.close()


# ---- the program -------------------------------------------------------------------------------------
def extract_program(text: str, language: str = "auto", item_language: Any = None) -> tuple[str, str]:
    """(language, source): the last fenced block (or the whole text) and the language it is in.

        extract_program("Here:\\n```cpp\\nint main(){}\\n```")      # ('cpp', 'int main(){}\\n')
    """
    blocks = FENCE.findall(text)
    if blocks:
        tag, source = blocks[-1]
    else:
        opened = OPEN_FENCE.search(text)  # a block cut off at the length limit
        tag, source = opened.groups() if opened else ("", text)
    if language != "auto":
        return language, source
    fallback = TAGS.get(str(item_language or "").lower(), "python")
    return TAGS.get(tag.lower(), fallback), source


# ---- test cases --------------------------------------------------------------------------------------
def parse_tests(raw: Any, where: str) -> tuple[str, list[dict], list[Any]]:
    """(kind, cases for the harness, expected per case); ValueError naming the bad entry."""
    if not isinstance(raw, list) or not raw:
        raise ValueError(f"{where}: expected a non-empty list of test cases, got {_short(repr(raw))}")
    kinds, cases, expected = set(), [], []
    for i, test in enumerate(raw):
        at = f"{where}[{i}]"
        if isinstance(test, str):
            test = parse_assert(test, at)
        if not isinstance(test, dict):
            raise ValueError(f"{at}: expected {{input, output}}, {{call, expected}} or an assert string")
        if "input" in test or "output" in test:
            if not isinstance(test.get("input", ""), str) or not isinstance(test.get("output"), str):
                raise ValueError(f"{at}: `input` and `output` must be strings (output is required)")
            kinds.add("stdio")
            cases.append({"input": test.get("input", "")})
            expected.append(test["output"])
        elif "call" in test and "expected" in test:
            if not isinstance(test["call"], str):
                raise ValueError(f"{at}.call: expected a Python expression as a string")
            kinds.add("call")
            cases.append({"call": test["call"]})
            expected.append(test["expected"])
        else:
            raise ValueError(f"{at}: give `input` and `output`, or `call` and `expected`")
    if len(kinds) > 1:
        raise ValueError(f"{where}: mixes stdin/stdout cases with function calls; use one kind per item")
    return kinds.pop(), cases, expected


def parse_assert(text: str, where: str) -> dict:
    """``"assert add(1, 2) == 3"`` -> {"call": "add(1, 2)", "expected": 3}; other asserts -> bool(...) is True.

        parse_assert("assert not is_prime(4)", "t")   # {'call': 'bool(is_prime(4))', 'expected': False}
    """
    try:
        tree = ast.parse(text.strip())
    except SyntaxError as exc:
        raise ValueError(f"{where}: not valid Python ({exc.msg})") from None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Assert):
        raise ValueError(f"{where}: expected one assert statement, got {_short(text)}")
    test = tree.body[0].test
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq):
        try:
            return {"call": ast.unparse(test.left), "expected": ast.literal_eval(test.comparators[0])}
        except ValueError:
            pass  # the right-hand side is not a literal: evaluated inside, below
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return {"call": f"bool({ast.unparse(test.operand)})", "expected": False}
    return {"call": f"bool({ast.unparse(test)})", "expected": True}


# ---- comparing ---------------------------------------------------------------------------------------
def outputs_match(expected: str, got: str, compare: str = "tokens", tolerance: float | None = None) -> bool:
    """Whether stdout matches: ``tokens`` (whitespace-separated), ``lines`` (trailing spaces ignored), ``exact``.

        outputs_match("3\\n", "3")                      # True
        outputs_match("1 2\\n", "1\\n2")                 # True (tokens); False with compare="lines"
        outputs_match("0.333333", "0.3333333", tolerance=1e-6)   # True
    """
    if compare == "exact":
        return expected == got
    if compare == "lines":
        want, have = _lines(expected), _lines(got)
        return len(want) == len(have) and all(_tokens_match(w.split(), h.split(), tolerance) if tolerance
                                              else w == h for w, h in zip(want, have))
    return _tokens_match(expected.split(), got.split(), tolerance)


def _lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.rstrip().splitlines()]


def _tokens_match(want: list[str], have: list[str], tolerance: float | None) -> bool:
    return len(want) == len(have) and all(w == h or (tolerance is not None and _close(w, h, tolerance))
                                          for w, h in zip(want, have))


def _close(a: str, b: str, tolerance: float) -> bool:
    try:
        x, y = float(a), float(b)
    except ValueError:
        return False
    return math.isclose(x, y, rel_tol=tolerance, abs_tol=tolerance)


_UNREADABLE = object()


def read_value(text: str | None) -> Any:
    """A returned value's repr back as plain data; _UNREADABLE for anything else (an object, a cut-off repr)."""
    try:
        return ast.literal_eval(text) if text else _UNREADABLE
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return _UNREADABLE


def values_match(expected: Any, got: Any, tolerance: float | None = None) -> bool:
    """Plain-data equality; tuples equal lists (JSON has no tuples); floats within ``tolerance`` when given."""
    if isinstance(expected, (list, tuple)) and isinstance(got, (list, tuple)):
        return len(expected) == len(got) and all(values_match(e, g, tolerance) for e, g in zip(expected, got))
    if isinstance(expected, dict) and isinstance(got, dict):
        return expected.keys() == got.keys() and all(values_match(v, got[k], tolerance) for k, v in expected.items())
    if isinstance(expected, bool) or isinstance(got, bool):
        return type(expected) is type(got) and expected == got
    if tolerance is not None and isinstance(expected, (int, float)) and isinstance(got, (int, float)):
        return math.isclose(expected, got, rel_tol=tolerance, abs_tol=tolerance)
    return expected == got


def output_diff(expected: str, got: str, max_lines: int = 12) -> str:
    """A short unified diff of expected vs got stdout."""
    diff = list(difflib.unified_diff(expected.splitlines(), got.splitlines(), "expected", "got", lineterm="", n=1))
    if not diff:
        return "(differs only in whitespace)"
    lines = [_short(line, 200) for line in diff[:2 + max_lines]]  # the --- expected / +++ got legend first
    if len(diff) > 2 + max_lines:
        lines.append(f"... {len(diff) - 2 - max_lines} more diff lines")
    return "\n".join(lines)


def _case_text(case: dict) -> str:
    if "input" in case:
        return f"\ninput:\n{_short(case['input'], 300)}" if case["input"] else "\ninput: (empty)"
    return f"\ncall: {_short(case['call'], 300)}"


def _stderr_tail(stderr: str) -> str:
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    return f"\n{_short(lines[-1], 300)}" if lines else ""


def _short(text: str, width: int = 120) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"

