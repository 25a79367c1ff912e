"""Safe arithmetic for OpenAI's ``multi`` grader: ``calculate_output`` parsed by hand, never ``eval``.

Grammar (usual precedence; ``^`` is power and binds right; unary minus binds looser than ``^``)::

    expr   := term (("+" | "-") term)*
    term   := unary (("*" | "/") unary)*
    unary  := ("+" | "-") unary | power
    power  := atom ("^" unary)?
    atom   := NUMBER | NAME | FUNC "(" expr ("," expr)* ")" | "(" expr ")"

Functions: min, max (one or more arguments), abs, floor, ceil, exp, sqrt, log (natural; ``log(x, base)``).
Names are the sub-graders' names. :func:`parse_formula` raises ConfigError with a caret under the problem;
:meth:`Formula.evaluate` raises :class:`FormulaError` for math errors (division by zero, log of 0, ...).

    >>> parse_formula("0.5 * sim + 0.5 * max(num, 0)", {"sim", "num"}).evaluate({"sim": 0.8, "num": 0.4})
    0.6
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Callable

from kitae.errors import ConfigError, KitaeError
from kitae.registry import closest

FUNCTIONS: dict[str, tuple[Callable[..., float], int, int | None]] = {  # name -> (fn, min args, max args)
    "min": (lambda *xs: min(xs), 1, None),
    "max": (lambda *xs: max(xs), 1, None),
    "abs": (abs, 1, 1),
    "floor": (math.floor, 1, 1),
    "ceil": (math.ceil, 1, 1),
    "exp": (math.exp, 1, 1),
    "sqrt": (math.sqrt, 1, 1),
    "log": (math.log, 1, 2),
}
_TOKEN = re.compile(
    r"\s*(?:(?P<num>\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+)"
    r"|(?P<name>[A-Za-z_][A-Za-z0-9_.]*)"
    r"|(?P<op>[-+*/^(),]))"
)
_BINARY = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
           "/": lambda a, b: a / b, "^": lambda a, b: a ** b}


class FormulaError(KitaeError):
    """A formula failed on these values (division by zero, log of a negative number, overflow)."""


@dataclass
class Formula:
    text: str
    tree: Any  # ("num", x) | ("var", name) | ("neg", t) | (op, a, b) | ("call", name, [args])
    names: set[str]

    def evaluate(self, values: dict[str, float]) -> float:
        try:
            result = _eval(self.tree, values)
        except (ZeroDivisionError, ValueError, OverflowError, TypeError) as exc:
            raise FormulaError(f"formula {self.text!r}: {exc}") from None
        if isinstance(result, complex) or math.isnan(result) or math.isinf(result):
            raise FormulaError(f"formula {self.text!r} gave {result}, not a real number")
        return float(result)


def _eval(node: Any, values: dict[str, float]) -> float:
    kind = node[0]
    if kind == "num":
        return node[1]
    if kind == "var":
        return values[node[1]]
    if kind == "neg":
        return -_eval(node[1], values)
    if kind == "call":
        return float(FUNCTIONS[node[1]][0](*(_eval(a, values) for a in node[2])))
    return _BINARY[kind](_eval(node[1], values), _eval(node[2], values))


def parse_formula(text: str, names: set[str], path: str = "calculate_output") -> Formula:
    """Parse ``text``; every name must be in ``names`` (the sub-graders), with a did-you-mean if not."""
    parser = _Parser(text, names, path)
    tree = parser.expr()
    if parser.peek() is not None:
        parser.fail(f"unexpected {parser.peek()[1]!r}")
    return Formula(text, tree, parser.used)


class _Parser:
    def __init__(self, text: str, names: set[str], path: str):
        self.text, self.names, self.path = text, names, path
        self.tokens = self._tokenize()
        self.i = 0
        self.used: set[str] = set()

    def _tokenize(self) -> list[tuple[str, str, int]]:
        tokens, pos = [], 0
        while self.text[pos:].strip():
            m = _TOKEN.match(self.text, pos)
            if not m:
                at = len(self.text) - len(self.text[pos:].lstrip())
                self.fail(f"unexpected character {self.text[at]!r}", at)
            kind = m.lastgroup
            tokens.append((kind, m.group(kind), m.start(kind)))
            pos = m.end()
        return tokens

    def fail(self, message: str, at: int | None = None):
        if at is None:
            at = self.tokens[self.i][2] if self.i < len(self.tokens) else len(self.text)
        raise ConfigError(self.path, f"{message} in formula\n    {self.text}\n    {' ' * at}^")

    def peek(self) -> tuple[str, str, int] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, value: str | None = None) -> tuple[str, str, int]:
        tok = self.peek()
        if tok is None:
            self.fail("unexpected end" + (f", expected {value!r}" if value else ""))
        if value is not None and tok[1] != value:
            self.fail(f"expected {value!r}, got {tok[1]!r}")
        self.i += 1
        return tok

    def at_op(self, *ops: str) -> bool:
        tok = self.peek()
        return tok is not None and tok[0] == "op" and tok[1] in ops

    def expr(self) -> Any:
        node = self.term()
        while self.at_op("+", "-"):
            node = (self.take()[1], node, self.term())
        return node

    def term(self) -> Any:
        node = self.unary()
        while self.at_op("*", "/"):
            node = (self.take()[1], node, self.unary())
        return node

    def unary(self) -> Any:
        if self.at_op("-", "+"):
            sign = self.take()[1]
            inner = self.unary()
            return ("neg", inner) if sign == "-" else inner
        return self.power()

    def power(self) -> Any:
        base = self.atom()
        if self.at_op("^"):
            self.take()
            return ("^", base, self.unary())
        return base

    def atom(self) -> Any:
        kind, value, pos = self.take()
        if kind == "num":
            return ("num", float(value))
        if kind == "op" and value == "(":
            node = self.expr()
            self.take(")")
            return node
        if kind == "name" and self.at_op("(") and value in FUNCTIONS:
            return self.call(value, pos)
        if kind == "name":
            return self.variable(value, pos)
        self.i -= 1
        self.fail(f"unexpected {value!r}")

    def call(self, name: str, pos: int) -> Any:
        self.take("(")
        args = [self.expr()]
        while self.at_op(","):
            self.take()
            args.append(self.expr())
        self.take(")")
        _, low, high = FUNCTIONS[name]
        if len(args) < low or (high is not None and len(args) > high):
            wanted = str(low) if high == low else f"{low} or more" if high is None else f"{low} to {high}"
            self.fail(f"{name}() takes {wanted} argument(s), got {len(args)}", pos)
        return ("call", name, args)

    def variable(self, name: str, pos: int) -> Any:
        if name not in self.names:
            hint = closest(name, sorted(self.names | set(FUNCTIONS)))
            where = f"; did you mean '{hint}'?" if hint else ""
            self.fail(f"unknown name '{name}'{where} (graders: {', '.join(sorted(self.names)) or 'none'})", pos)
        self.used.add(name)
        return ("var", name)
