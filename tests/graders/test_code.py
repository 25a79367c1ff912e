"""The `code` grader against hand-computed scores: right and wrong answers, timeouts, crashes, compile errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kitae.errors import ConfigError
from kitae.graders import build_grader
from kitae.graders.code import extract_program, outputs_match, parse_assert, values_match
from tests.sandbox.venv import venv_under_tmp

# a + b, four cases; the second and fourth are where the broken programs below go wrong
SUM = {"tests": [{"input": "1 2\n", "output": "3\n"}, {"input": "5 5\n", "output": "10\n"},
                 {"input": "-4 4\n", "output": "0\n"}, {"input": "7 1\n", "output": "8\n"}]}
CALLS = {"tests": ["assert add(1, 2) == 3", "assert add(-1, 1) == 0", "assert is_even(4)", "assert not is_even(3)",
                   "assert pair(2) == (2, 2)"]}


ADD = "def add(a, b):\n    return a + b\n"
EVEN = "def is_even(n):\n    return n % 2 == 0\n"


def py(body: str) -> str:
    return f"Here is my solution.\n```python\n{body}\n```\n"


def cpp(body: str) -> str:
    return f"```cpp\n{body}\n```"


READ = "a, b = map(int, input().split())\n"
CPP_READ = "#include <cstdio>\nint main(){ long long a, b; scanf(\"%lld %lld\", &a, &b); "


def grade(text: str, item: dict = SUM, **spec):
    grader = build_grader({"type": "code", "time_limit": 1, **spec})
    try:
        return grader.grade_group(item, [{"output_text": text}])[0]
    finally:
        grader.close()


@pytest.mark.parametrize(
    "completion, spec, score, reason",
    [
        (py(READ + "print(a + b)"), {}, 1.0, "4/4 cases passed"),                       # right
        (READ + "print(a + b)", {}, 1.0, "4/4 cases passed"),                           # no fence: the whole text
        (py(READ + "print(a + b if a != 5 else 11)"), {}, 0.75, "case 2: wrong answer"),  # wrong once
        (py(READ + "print(a + b if a != 5 else 11)"), {"mode": "all"}, 0.0, "3/4 cases passed; case 2"),
        (py(READ + "print(max(a, b) * 2)"), {}, 0.25, "case 1: wrong answer\n--- expected"),  # right for 5 5 only
        (py(READ + "while a == 7:\n    pass\nprint(a + b)"), {}, 0.75, "case 4: time limit exceeded"),
        (py(READ + "import time\nif a == 7:\n    time.sleep(60)\nprint(a + b)"), {}, 0.75,
         "case 4: time limit exceeded (stopped after 3s of wall-clock time)"),
        (py(READ + "assert a > 0, 'negative'\nprint(a + b)"), {}, 0.75,
         "case 3: runtime error: exit status 1\nAssertionError: negative"),
        (py(READ + "print(a + b)\nexit(0 if a != 1 else 4)"), {}, 0.75, "case 1: runtime error: exit status 4"),
        (py("print(int(input().split()[0]) +"), {}, 0.0, "compile error (python):\nSyntaxError"),
        (py(READ + "print(a + b, end='   \\n\\n\\n')"), {}, 1.0, "4/4"),              # trailing whitespace
        (py(READ + "print(a + b, end='   \\n\\n\\n')"), {"compare": "exact"}, 0.0, "case 1: wrong answer"),
        (cpp(CPP_READ + "printf(\"%lld\\n\", a + b); }"), {}, 1.0, "4/4 cases passed"),
        (cpp(CPP_READ + "if (a == 5) { int *p = 0; *p = 1; } printf(\"%lld\\n\", a + b); }"), {}, 0.75,
         "case 2: runtime error: crashed (segmentation fault)"),
        (cpp(CPP_READ + "printf(\"%lld\\n\", a + c); }"), {}, 0.0, "compile error (cpp):\nmain.cpp: In function"),
        ("", {}, 0.0, "no program in the completion"),
    ],
)
def test_stdin_stdout_scores(completion, spec, score, reason):
    g = grade(completion, **spec)
    assert g.error is None
    assert g.score == score, g.reason
    assert reason in g.reason


def test_wrong_answer_reason_shows_the_case_and_a_diff():
    g = grade(py(READ + "print(a + b if a != 5 else 11)"))
    assert g.reason == ("3/4 cases passed; case 2: wrong answer\n--- expected\n+++ got\n@@ -1 +1 @@\n-10\n+11"
                        "\ninput:\n5 5\n")


@pytest.mark.parametrize(
    "program, score",
    [
        (ADD + EVEN + "def pair(x):\n    return (x, x)", 1.0),
        ("def add(a, b):\n    return a + b + 1\n" + EVEN + "def pair(x):\n    return [x, x]", 0.6),
        (ADD + "def is_even(n):\n    return True\ndef pair(x):\n    return x", 0.6),
        # an object that equals everything: its repr is not plain data, so it never matches
        ("class Any:\n    def __eq__(self, other):\n        return True\n"
         "def add(a, b):\n    return Any()\n" + EVEN + "def pair(x):\n    return Any()", 0.4),
        # printing the expected values changes nothing: the calls' values are compared outside
        ("print(3, 0, True, False, (2, 2))\nimport sys\nsys.exit(0)", 0.0),
    ],
)
def test_function_call_scores(program, score):
    g = grade(py(program), CALLS)
    assert g.score == score, g.reason


@pytest.mark.parametrize(
    "item, error",
    [
        ({}, "item.tests: expected a non-empty list of test cases, got None"),
        ({"tests": [{"input": "1"}]}, "item.tests[0]: `input` and `output` must be strings"),
        ({"tests": ["assert f(1) == 2", {"input": "", "output": "1"}]}, "mixes stdin/stdout cases with function calls"),
        ({"tests": ["print(1)"]}, "item.tests[0]: expected one assert statement"),
    ],
)
def test_bad_tests_abstain_with_the_field(item, error):
    g = grade(py("print(1)"), item)
    assert g.score is None and error in g.error


def test_total_time_limit_leaves_the_rest_not_run():
    tests = {"tests": [{"input": "", "output": "1"}] * 3}
    g = grade(py("while True:\n    pass"), tests, time_limit=5, total_time_limit=2, workers=1)
    assert g.score == 0.0 and "case 1: not run: the 2s total time limit ran out" in g.reason


def test_workers_split_cases_and_keep_their_order():
    tests = {"tests": [{"input": f"{i} {i}\n", "output": f"{2 * i}\n"} for i in range(9)]}
    program = py(READ + "print(a + b if a % 3 else -1)")  # wrong for 0, 3, 6
    serial, parallel = grade(program, tests, workers=1), grade(program, tests, workers=3)
    assert serial.score == parallel.score == 6 / 9
    assert serial.reason == parallel.reason and "case 1: wrong answer" in serial.reason


def test_language_from_the_item_when_the_fence_has_no_tag():
    program = "```\n" + CPP_READ + "printf(\"%lld\\n\", a + b); }\n```"
    assert grade(program, {**SUM, "language": "cpp"}).score == 1.0


@pytest.mark.parametrize(
    "text, language, expected",
    [
        ("```python\nprint(1)\n```\nthen\n```cpp\nint main(){}\n```", "auto", ("cpp", "int main(){}\n")),  # last block
        ("```py\nprint(1)\n```", "auto", ("python", "print(1)\n")),
        ("```\nprint(1)\n```", "auto", ("python", "print(1)\n")),
        ("print(2)", "auto", ("python", "print(2)")),
        ("```python\nprint(1)\n", "auto", ("python", "print(1)\n")),                 # cut off at the length limit
        ("```text\nx\n```", "cpp", ("cpp", "x\n")),
    ],
)
def test_extract_program(text, language, expected):
    assert extract_program(text, language) == expected


@pytest.mark.parametrize(
    "expected, got, compare, tolerance, match",
    [
        ("3\n", "3", "tokens", None, True),
        ("1 2\n", "1\n2\n", "tokens", None, True),
        ("1 2\n", "1\n2\n", "lines", None, False),
        ("1 2  \n\n", "1 2\n", "lines", None, True),
        ("0.333333", "0.3333333", "tokens", None, False),
        ("0.333333", "0.3333333", "tokens", 1e-6, True),
        ("yes", "Yes", "tokens", None, False),
    ],
)
def test_outputs_match(expected, got, compare, tolerance, match):
    assert outputs_match(expected, got, compare, tolerance) is match


@pytest.mark.parametrize(
    "text, parsed",
    [
        ("assert add(1, 2) == 3", {"call": "add(1, 2)", "expected": 3}),
        ("assert f('a') == [1, (2, 3)]", {"call": "f('a')", "expected": [1, (2, 3)]}),
        ("assert f(2) == f(1) + 1", {"call": "bool(f(2) == f(1) + 1)", "expected": True}),
        ("assert not is_prime(4)", {"call": "bool(is_prime(4))", "expected": False}),
    ],
)
def test_parse_assert(text, parsed):
    assert parse_assert(text, "t") == parsed


def test_values_match_treats_tuples_as_lists_but_not_bools_as_ints():
    assert values_match([1, 2], (1, 2)) and values_match({"a": (1,)}, {"a": [1]})
    assert not values_match(1, True) and not values_match(True, 1)
    assert values_match(0.1 + 0.2, 0.3, tolerance=1e-9) and not values_match(0.1 + 0.2, 0.3)


@pytest.mark.parametrize(
    "spec, message",
    [
        ({"mode": "most"}, "grader.mode: got 'most'; expected one of fraction, all"),
        ({"language": "java"}, "grader.language: got 'java'; expected one of auto, python, cpp"),
        ({"time_limit": 0}, "grader.time_limit: must be >= 0.1"),
        ({"sandbox": "docker"}, "grader.sandbox: got 'docker'; expected one of bwrap, none"),
        ({"timeout": 3}, "grader.timeout: unknown key; did you mean 'time_limit'?"),
    ],
)
def test_spec_errors(spec, message):
    with pytest.raises(ConfigError) as err:
        build_grader({"type": "code", **spec})
    assert message in str(err.value)


# ---- a grader that cannot run abstains, it never scores ------------------------------------------------
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def python_under_tmp(tmp_path_factory):
    return venv_under_tmp(tmp_path_factory.mktemp("venv"))


@pytest.mark.parametrize("interpreter", ["usual", "under /tmp"])
def test_the_readme_example_scores_as_documented(interpreter, python_under_tmp, tmp_path):
    python = sys.executable if interpreter == "usual" else python_under_tmp
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([python, "-m", "kitae", "grade", "-g", "examples/graders/code.yaml", "-d",
                           "examples/graders/code.jsonl", "-o", str(tmp_path / "graded.jsonl")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert "samples: 7  scored: 7  abstained: 0  errors: 0" in done.stdout, done.stdout[-3000:] + done.stderr[-2000:]
    assert "mean: 0.7500" in done.stdout


def test_a_harness_that_cannot_start_is_an_error_not_a_score(monkeypatch):
    import kitae.sandbox.programs as programs

    monkeypatch.setattr(programs.sys, "executable", "/nonexistent/python3")  # the interpreter is not there inside
    g = grade(py(READ + "print(a + b)"))
    assert g.score is None, g.reason
    assert "code grader: the sandbox failed to start" in g.error and "/nonexistent/python3" in g.error
