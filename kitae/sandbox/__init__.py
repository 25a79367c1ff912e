"""The sandbox: where every piece of untrusted code runs (python graders, code graders, test generators).

    isolation.py   Sandbox: bubblewrap namespaces, read-only system, private /tmp, clean environment, rlimits,
                   an empty session keyring; or, only when a spec says ``sandbox: none``, the same command
                   unisolated
    seccomp.py     the seccomp filter bwrap loads: the calls untrusted code has no use for fail with EPERM
    process.py     run(): one command to completion under a wall clock, output capped, process tree killed
    worker.py      Worker: a long-lived JSON-lines process (the python grader inside a sandbox; math-verify)
    programs.py    run_program(): a program (Python or C++) on many test cases, compiled once, cases in a
                   fresh process each, in parallel chunks
    _worker.py, _harness.py   the scripts that run inside (standalone: they import nothing from kitae)

The security boundary is the operating system's (namespaces, seccomp and rlimits), not Python's: code that calls
libc through ctypes meets the same walls. tests/sandbox/test_probes.py tries the attacks; docs/code.md
lists them.

From a grader spec, ``sandbox: bwrap`` (the default) or ``sandbox: none``; :func:`open_sandbox` turns that
into a :class:`Sandbox`, or a ConfigError that says why bwrap cannot run here and how to fix it.
"""

from __future__ import annotations

from typing import Any

from kitae.errors import ConfigError
from kitae.sandbox.isolation import KINDS, Limits, Sandbox, SandboxKind, SandboxUnavailable

__all__ = ["KINDS", "Limits", "Sandbox", "SandboxKind", "SandboxUnavailable", "open_sandbox", "unsandboxed"]


def open_sandbox(kind: str, path: str) -> Sandbox:
    """The sandbox a spec asks for (``path`` is where ``sandbox`` sits in it, for the error)."""
    try:
        return Sandbox(kind)
    except SandboxUnavailable as exc:
        raise ConfigError(path, str(exc)) from None


def unsandboxed(config: Any, path: str = "") -> list[str]:
    """Where a config asks to run code without isolation: the key paths of every ``sandbox: none``.

    ``kitae runs show`` and the run page show these, so a run that ran untrusted code unisolated says so.

        unsandboxed({"rewards": [{"grader": {"type": "code", "sandbox": "none"}}]})  # ['rewards[0].grader']
    """
    found = []
    if isinstance(config, dict):
        if config.get("sandbox") == "none":
            found.append(path or "(top level)")
        for key, value in config.items():
            found += unsandboxed(value, f"{path}.{key}" if path else str(key))
    elif isinstance(config, list):
        for i, value in enumerate(config):
            found += unsandboxed(value, f"{path}[{i}]")
    return found
