"""The built-in environments: the calculator's safe arithmetic and the python tool in kitae's sandbox."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import uuid
from pathlib import Path

import pytest

import kitae
from kitae.agents.environments import ENVIRONMENTS, Calculator, PythonSandbox, evaluate
from kitae.agents.tools import ToolError, Tools
from kitae.rollout.trajectory import ToolCall
from kitae.sandbox.isolation import bwrap_problem
from tests.sandbox.probes import program_source


@pytest.mark.parametrize("expression, value", [
    ("2 + 3", 5),
    ("47 * 38", 1786),                   # the two-digit products of examples/tools.yaml
    ("(12 + 30) * 2 / 4", 21),           # an exact division is shown as a whole number
    ("7 / 2", 3.5),
    ("-3 * -3", 9),
    ("1.5 + 1", 2.5),
    ("  ((1))  ", 1),
])
def test_calculator_arithmetic(expression, value):
    assert evaluate(expression) == value
    assert Calculator().calculator(expression) == str(value)


@pytest.mark.parametrize("expression, says", [
    ("__import__('os').system('id')", "only numbers, + - * / and parentheses are allowed"),  # never eval-ed
    ("2 ** 100000000", "not '2 ** 100000000'"),                    # a power could eat the machine: refused
    ("x + 1", "not 'x'"),
    ("'a' * 3", "not \"'a'\""),
    ("True + 1", "not 'True'"),
    ("1 / 0", "division by zero"),
    ("1e200 * 1e200", "too large for a number"),              # not 'inf'
    ("1e308 * 10 - 1e308 * 10", "too large for a number"),    # not 'nan'
    ("1 +", "cannot read '1 +'"),
    ("", "give an arithmetic expression"),
    ("1+" * 150 + "1", "over 200 characters"),
])
def test_calculator_refuses_everything_else_with_a_message(expression, says):
    with pytest.raises(ToolError, match=None) as err:
        evaluate(expression)
    assert says in str(err.value)


def test_calculator_errors_reach_the_model_as_the_calls_error():
    async def episode():
        box = Tools.from_config({"factory": "calculator"}).toolbox("r")
        assert await box.reset({"prompt": "What is 47 * 38?"}) is None
        return [await box.call(ToolCall("calculator", {"expression": e})) for e in ("47 * 38", "47 x 38")]

    ok, bad = asyncio.run(episode())
    assert ok.result == "1786" and ok.ok
    assert bad.result is None and bad.error == "cannot read '47 x 38': use numbers, + - * / and parentheses"


def test_the_built_ins_are_registered():
    assert {"calculator", "python"} <= set(ENVIRONMENTS.names())
    assert ENVIRONMENTS.get("calculator") is Calculator and ENVIRONMENTS.get("python") is PythonSandbox


# ---- python in the sandbox --------------------------------------------------------------------------------------
needs_bwrap = pytest.mark.skipif(bwrap_problem() is not None, reason=f"no sandbox here: {bwrap_problem()}")


def python(code: str, max_result_chars: int = 4000, **limits) -> ToolCall:
    async def one():
        tools = Tools(tools=[_python_tool(**limits)], tool_timeout_s=30, max_result_chars=max_result_chars)
        return await tools.toolbox("r").call(
            ToolCall("python", {"code": code}))

    return asyncio.run(one())


def _python_tool(**limits):
    from kitae.agents.tools import environment_tools

    return environment_tools(PythonSandbox(**limits))[0]


@needs_bwrap
def test_python_runs_code_and_reports_stdout_stderr_and_exit_status():
    done = python("import sys\nprint(6 * 7)\nprint('warn', file=sys.stderr)\nsys.exit(2)")
    assert done.ok
    assert done.result == "runtime error: exit status 2\nstdout:\n42\nstderr:\nwarn\n"
    assert python("print('hi')").result == "exit status 0\nstdout:\nhi\n"
    assert python("x = 1").result == "exit status 0\n"


@needs_bwrap
@pytest.mark.slow  # waits out a runaway program's limit: the full suite runs it
def test_python_syntax_errors_and_runaway_programs_come_back_as_text():
    assert "SyntaxError" in python("def f(:\n").result
    looped = python("while True:\n    pass", cpu_seconds=1)
    assert looped.ok and looped.result.startswith("time limit exceeded")


@needs_bwrap
def test_python_output_is_capped_by_the_sandbox():
    done = python("print('y' * 200_000)", output_kb=4, max_result_chars=1_000_000)  # the tool's cap out of the way
    assert done.result.startswith("runtime error: exceeded its file-size limit")  # stopped at 4 KB of output
    assert 0 < done.result.count("y") <= 4096


@needs_bwrap
def test_python_cannot_read_files_outside_the_sandbox(tmp_path):
    """The code grader's probe (tests/sandbox/probes.py, read_outside) as the model's code, plus kitae's own
    source (the grader's files)."""
    secret = "sk-tool-" + uuid.uuid4().hex
    (tmp_path / "secret.txt").write_text(secret)
    ctx = {"secret_file": str(tmp_path / "secret.txt"), "secret": secret, "marker": "kitae-tool-probe"}
    attack = program_source("read_outside", ctx).replace("__VICTIM_PID__", str(os.getpid()))
    done = python(attack)
    assert secret not in done.result and "stdout:\n1" not in done.result
    assert "No such file or directory" in done.result or "Permission denied" in done.result
    grader = Path(kitae.__file__).parent / "graders" / "code.py"
    peek = python(f"print(open({str(grader)!r}).read()[:80])")
    assert "The ``code`` grader" not in peek.result and "No such file or directory" in peek.result


@needs_bwrap
def test_python_has_no_network(tmp_path):
    """The tcp probe: nothing reaches a server listening on 127.0.0.1."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    reached = []

    def accept():
        while not stop.is_set():
            try:
                reached.append(server.accept())
            except OSError:
                pass

    stop = threading.Event()
    listener = threading.Thread(target=accept, daemon=True)
    listener.start()
    try:
        ctx = {"tcp_port": server.getsockname()[1], "marker": "kitae-tool-probe"}
        done = python(program_source("tcp", ctx).replace("__VICTIM_PID__", str(os.getpid())))
    finally:
        stop.set()
        listener.join(5)
        server.close()
    assert reached == [] and "stdout:\n1" not in done.result
    assert "runtime error" in done.result  # the attack raised: what stopped it is in stderr


@needs_bwrap
def test_python_tool_from_config_is_shared_and_stateless_between_calls():
    async def two_calls():
        box = Tools.from_config({"python": True}).toolbox("r")
        first = await box.call(ToolCall("python", {"code": "open('/tmp/note', 'w').write('x'); print('wrote')"}))
        second = await box.call(ToolCall("python", {"code": "import os; print(os.path.exists('/tmp/note'))"}))
        return first, second

    first, second = asyncio.run(two_calls())
    assert first.result.endswith("stdout:\nwrote\n")
    assert second.result.endswith("stdout:\nFalse\n")  # every call a fresh process with a private /tmp


@needs_bwrap
def test_a_traceback_shows_the_models_code_not_kitaes_harness():
    done = python("x = 1\nprint(y)")
    assert "NameError: name 'y' is not defined" in done.result and "line 2" in done.result
    assert "_harness.py" not in done.result and "exec(code" not in done.result
