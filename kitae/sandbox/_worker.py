"""A grading worker process: JSON lines in on stdin, JSON lines out, one request at a time.

Started by kitae.sandbox.worker as ``python -I _worker.py`` (a standalone script: it imports nothing
from kitae). The first line configures it; it answers {"ok": true} once ready, then one line per request:
{"ok": true, "value": ...} or {"ok": false, "error": "..."}.

Modes: "python" runs a user's ``grade(sample, item)`` (OpenAI's python grader) with a CPU budget per request
and an audit hook that refuses sockets and new processes (a courtesy error for honest mistakes: the
security boundary is the sandbox around this process, which ctypes cannot talk its way out of); "math"
answers math-verify comparisons with its signal-based timeouts disabled (the parent enforces the wall-clock
limit by killing this process). Inside a sandbox ("reap_strays") every other process of the sandbox is
killed after each request, so nothing a grade started outlives it.
"""

import json
import os
import resource
import sys
import traceback

BLOCKED_EVENTS = {
    "socket.__new__", "socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg", "socket.getaddrinfo",
    "socket.gethostbyname", "socket.gethostbyaddr", "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn",
    "os.spawn", "os.fork", "os.forkpty", "pty.spawn",
}


def _audit(event, args):
    if event in BLOCKED_EVENTS:
        raise PermissionError(f"blocked in the grader sandbox: {event} (no network, no subprocesses)")


def _limit(memory_mb, cpu_seconds):
    if memory_mb:
        size = int(memory_mb) * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (size, size))
    if cpu_seconds:
        _cpu_budget(cpu_seconds)


def _cpu_budget(cpu_seconds):
    """Allow `cpu_seconds` more CPU time from now (SIGXCPU ends the process past it)."""
    used = resource.getrusage(resource.RUSAGE_SELF)
    now = used.ru_utime + used.ru_stime
    soft = max(int(now) + 1, round(now + cpu_seconds))  # the limit has whole-second resolution
    resource.setrlimit(resource.RLIMIT_CPU, (soft, resource.RLIM_INFINITY))


def _error(exc):
    frames = traceback.extract_tb(exc.__traceback__)
    user = [f for f in frames if f.filename == "<grader>"]
    where = f" (line {user[-1].lineno})" if user else ""
    return f"{type(exc).__name__}: {exc}{where}"


def _python_handler(config):
    namespace = {"__name__": "grader"}
    exec(compile(config["source"], "<grader>", "exec"), namespace)
    grade = namespace.get("grade")
    if not callable(grade):
        raise NameError("the source defines no function grade(sample, item)")
    return lambda request: grade(request["sample"], request["item"])


def _math_handler(config):
    import logging

    from math_verify import parse, verify

    logging.getLogger("math_verify").setLevel(logging.ERROR)  # "timeout disabled" notices: we time out here

    def compare(request):
        text = request["gold"]
        bare = "$" not in text and "\\boxed" not in text  # a bare reference such as 1+2x reads as LaTeX math
        gold = parse(f"${text}$", parsing_timeout=None) if bare else []
        gold = gold or parse(text, parsing_timeout=None)
        answer = parse(request["answer"], parsing_timeout=None)
        ok = bool(gold) and bool(answer) and verify(gold, answer, timeout_seconds=None)
        return {"match": ok, "gold": str(gold[0]) if gold else None, "answer": str(answer[0]) if answer else None}

    return compare


def _reap_strays():
    """Kill every process of the sandbox but this one and its init (a grade's daemons, setsid children).

    kill(-1) reaches every process this one may signal: only ever sent inside a pid namespace, where pid 1 is
    bubblewrap's init; anywhere else it would hit the whole machine, so it checks first.
    """
    try:
        with open("/proc/1/cmdline", "rb") as f:
            if not f.read().startswith(b"bwrap"):
                return
        os.kill(-1, 9)
    except OSError:  # nothing left to kill, or no /proc
        pass


def _plain(value):
    """numpy scalars and other number-likes as floats, so the reply is JSON."""
    if not isinstance(value, (int, float, str, bool, list, dict, type(None))) and hasattr(value, "__float__"):
        return float(value)
    return value


HANDLERS = {"python": _python_handler, "math": _math_handler}


def main():
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")  # the protocol; user prints go to stderr
    os.dup2(2, 1)
    config = json.loads(sys.stdin.readline())

    def reply(message):
        out.write(json.dumps(message) + "\n")
        out.flush()

    try:
        if config.get("block_network"):
            sys.addaudithook(_audit)
        _limit(config.get("memory_mb"), config.get("cpu_seconds"))
        handle = HANDLERS[config["mode"]](config)
    except BaseException as exc:  # a broken source is reported, not raised
        reply({"ok": False, "error": _error(exc)})
        return
    reply({"ok": True})
    for line in sys.stdin:
        request = json.loads(line)
        if config.get("cpu_seconds"):
            _cpu_budget(config["cpu_seconds"])
        try:
            message = {"ok": True, "value": _plain(handle(request))}
        except BaseException as exc:
            message = {"ok": False, "error": _error(exc)}
        if config.get("reap_strays"):
            _reap_strays()
        reply(message)


if __name__ == "__main__":
    main()
