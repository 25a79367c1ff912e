"""Built-in environments, in TRL's ``environment_factory`` contract, and the registry that names them.

An environment is a class; one instance per episode (the class is the factory: called with no arguments).
Its public methods with type hints and a Google-style docstring are the tools the model may call; ``reset(**row)``
starts an episode from the row's fields and returns None or text appended to the last user message; an optional
``get_reward()`` scores the finished episode (one more reward component, named after the class).

    environment: {factory: calculator}          # a built-in, by name
    environment: {factory: {type: python, cpu_seconds: 8}}   # a built-in with its settings
    environment: {factory: my_envs:Wordle}      # a user's class, "module:Class"

A built-in's settings are a dataclass beside it (an ``EnvironmentSettings``, e.g. :class:`PythonSettings`),
registered with it. A user's class takes none: TRL's contract calls it with no arguments, so its options are its
own defaults (or a subclass per variant, named as "module:Class").

Built-ins (``ENVIRONMENTS``, in kitae.agents.tools, where these are registered by name):

``calculator``  ``calculator(expression)``: arithmetic on numbers with + - * / and parentheses, read by a parser
                of its own (no ``eval``): anything else is refused with a message the model reads.
``python``      ``python(code)``: runs the code as a program in kitae's sandbox, the code grader's isolation,
                limits and probes (:mod:`kitae.sandbox`): no network, no view of the machine's files, processes or
                environment, a private /tmp, CPU, memory, process and output limits; every call a fresh process.
                Returns its stdout, stderr and exit status as text.
"""

from __future__ import annotations

import ast
import math
import operator
from dataclasses import dataclass
from typing import Any

from kitae.agents.tools import ENVIRONMENTS, EnvironmentSettings, ToolError
from kitae.config import setting

__all__ = ["ENVIRONMENTS", "Calculator", "EnvironmentSettings", "PythonSandbox", "PythonSettings", "evaluate"]


# ---- calculator ---------------------------------------------------------------------------------------------
MAX_EXPRESSION_CHARS = 200
_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
_SIGNS = {ast.UAdd: operator.pos, ast.USub: operator.neg}


def evaluate(expression: str) -> int | float:
    """The value of an arithmetic expression: numbers, + - * /, unary signs and parentheses; ToolError on anything
    else (names, calls, powers, attributes never run: the expression is read as a syntax tree, never ``eval``-ed).

    >>> evaluate("(12 + 30) * 2 / 4"), evaluate("-3*-3")
    (21, 9)
    """
    if not isinstance(expression, str) or not expression.strip():
        raise ToolError("give an arithmetic expression, e.g. '12 * (3 + 4)'")
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ToolError(f"the expression is over {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        raise ToolError(f"cannot read {expression!r}: use numbers, + - * / and parentheses") from None
    value = _value(tree.body)
    if isinstance(value, float) and not math.isfinite(value):
        raise ToolError(f"the result of {expression!r} is too large for a number")
    return int(value) if isinstance(value, float) and value.is_integer() and abs(value) < 2**53 else value


def _value(node: ast.AST) -> int | float:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _SIGNS:
        return _SIGNS[type(node.op)](_value(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = _value(node.left), _value(node.right)
        try:
            return _OPERATORS[type(node.op)](left, right)
        except ZeroDivisionError:
            raise ToolError("division by zero") from None
    raise ToolError(f"only numbers, + - * / and parentheses are allowed, not {ast.unparse(node)!r}")


@ENVIRONMENTS.register("calculator")
class Calculator:
    """Arithmetic for the model (the tool of examples/tools.yaml)."""

    def reset(self, **kwargs) -> str | None:
        return None

    def calculator(self, expression: str) -> str:
        """Evaluate an arithmetic expression with numbers, +, -, *, / and parentheses.

        Args:
            expression: The expression to evaluate, e.g. "12 * (3 + 4)".

        Returns:
            The value of the expression.
        """
        return str(evaluate(expression))


# ---- python -------------------------------------------------------------------------------------------------
@dataclass
class PythonSettings(EnvironmentSettings):
    """The limits of each program the python tool runs."""

    cpu_seconds: float = setting(4.0, above=0)  # CPU seconds per program (its wall clock: 2 x this + 1 s)
    memory_mb: int = setting(1024, minimum=1)  # address space
    output_kb: int = setting(64, minimum=1)  # stdout and stderr kept


@ENVIRONMENTS.register("python", settings=PythonSettings)
class PythonSandbox:
    """A code interpreter: each call runs the code as a fresh program in kitae's sandbox (the code grader's
    :func:`kitae.sandbox.programs.run_program`, stdio mode, one case with empty stdin). ``limits``: its
    :class:`PythonSettings` (cpu_seconds, memory_mb, output_kb)."""

    def __init__(self, sandbox: Any = None, **limits: Any):
        from kitae.sandbox import open_sandbox
        from kitae.sandbox.programs import CaseLimits

        s = PythonSettings(type="python", **limits)
        self.sandbox = sandbox if sandbox is not None else open_sandbox("bwrap", "environment.python")
        # Wall clock 2 x cpu + 1 s (9 s): within the default tool_timeout_s of 10 s, so the sandbox, which kills
        # the whole process tree, stops a runaway program before the tool call gives up on it.
        self.limits = CaseLimits(seconds=s.cpu_seconds, memory_mb=s.memory_mb, output_kb=s.output_kb,
                                 total_seconds=2 * s.cpu_seconds + 5)

    def reset(self, **kwargs) -> str | None:
        return None

    def python(self, code: str) -> str:
        """Run Python code in a sandbox (no network, no files outside it) and return what it printed.

        Args:
            code: A Python program; print what you want to see.

        Returns:
            The program's stdout, its stderr and its exit status.
        """
        from kitae.sandbox.programs import run_program

        run = run_program(self.sandbox, "python", code, [{"input": ""}], "stdio", self.limits)
        if run.error:
            raise ToolError(f"the sandbox failed: {run.error}")
        if run.compile_error:
            return f"exit status 1\nstderr:\n{run.compile_error}"
        return describe_run(run.results[0], self.limits)


def describe_run(result: Any, limits: Any) -> str:
    """A program's run as the model reads it: the exit status (or why it was stopped), stdout and stderr."""
    parts = ["exit status 0" if result.finished else result.describe(limits)]
    if result.stdout:
        parts.append("stdout:\n" + result.stdout.removesuffix("\n"))
    if result.stderr:
        parts.append("stderr:\n" + own_traceback(result.stderr).removesuffix("\n"))
    if result.output_truncated:
        parts.append(f"[output over {limits.output_kb} KB was cut]")
    return "\n".join(parts) + "\n"


def own_traceback(stderr: str) -> str:
    """stderr without the frames of kitae's harness (the ``exec`` that ran the code), so a traceback shows the
    model its own code only.

    >>> own_traceback('Traceback:\\n  File "/w/_harness.py", line 208, in _run_python\\n    exec(code, namespace)\\n'
    ...               '  File "p0/main.py", line 1, in <module>\\nNameError: x\\n')
    'Traceback:\\n  File "p0/main.py", line 1, in <module>\\nNameError: x\\n'
    """
    lines, kept, skip_source = stderr.splitlines(keepends=True), [], False
    for line in lines:
        if line.startswith("  File ") and "_harness.py" in line:
            skip_source = True
            continue
        if skip_source and line.startswith("    "):
            continue
        skip_source = False
        kept.append(line)
    return "".join(kept)
