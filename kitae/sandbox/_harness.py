"""Runs programs on many test cases inside the sandbox, each case in a fresh child process.

Started by kitae.sandbox.programs as ``python -I -S _harness.py`` in the work folder (a standalone script: it
imports nothing from kitae). The job comes as JSON on stdin:

    {"programs": [{"kind": "python", "path": "main0.py"},      python: run the source in a forked child
                  {"kind": "exec", "path": "./main1"}],        exec: run a compiled binary
     "mode": "stdio" | "call",           stdin -> stdout; or evaluate an expression after the program ran
     "cases": [{"input": "1 2\\n"} | {"call": "add(1, 2)"}, ...],
     "cpu_seconds": 2, "wall_seconds": 5, "memory_mb": 512, "output_bytes": 1048576,
     "program_seconds": 60,              wall-clock budget per program: its cases past it are not run
     "sys_path": [...], "preload": [...]}    site-packages to import from; modules imported once, up front

and to stdout ``{"ready": true}`` once it has started, then one JSON line per program and case as each case
ends:

    {"program": 0, "case": 3, "status": "ok" | "exit" | "signal" | "timeout" | "not run", "returncode": 0,
     "signal": null, "seconds": 0.01, "cpu_seconds": 0.01, "stdout": "...", "stderr": "...",
     "output_truncated": false, "value": "3"}

(``value``: call mode, the repr of what the expression returned). A Python program that does not compile
gives one line {"program": 0, "compile_error": "..."} instead; a failure of the harness itself, one line
{"harness_error": "..."} (then it exits with status 3). A child gets the case's limits (RLIMIT_CPU,
RLIMIT_AS, RLIMIT_FSIZE on its output) and its own process group; when it ends, every other process in the
sandbox is killed (daemons it left), so one case cannot reach into the next.
"""

import ctypes  # imported once here, not in every case's child (which loads its seccomp filter through it)
import importlib
import json
import math
import os
import resource
import select
import signal
import sys
import time
import traceback

TMP = os.environ.get("TMPDIR") or "/tmp"
IN_SANDBOX = False


def main():
    global IN_SANDBOX
    results = os.fdopen(os.dup(1), "w", encoding="utf-8")

    def send(row):
        results.write(json.dumps(row) + "\n")
        results.flush()

    try:
        job = json.loads(sys.stdin.buffer.read())
        IN_SANDBOX = bool(job.get("in_sandbox")) and _pid1_is_bwrap()
        if IN_SANDBOX:
            _not_dumpable()
        sys.path.extend(job.get("sys_path", []))
        for module in job.get("preload", []):
            importlib.import_module(module)
        send({"ready": True})
        for k, program in enumerate(job["programs"]):
            for row in run_program(job, k, program):
                send(row)
    except Exception as exc:  # the harness's own failure: the caller abstains, it does not score
        send({"harness_error": f"{type(exc).__name__}: {exc}"})
        sys.exit(3)


def run_program(job, k, program):
    code = None
    if program["kind"] == "python":
        try:
            with open(program["path"], encoding="utf-8") as f:
                code = compile(f.read(), program["path"], "exec")
        except (SyntaxError, ValueError) as exc:
            yield {"program": k, "compile_error": _syntax_error(exc)}
            return
    deadline = time.monotonic() + job["program_seconds"]
    out_of_time = {"status": "not run", "detail": f"the {job['program_seconds']:g}s total time limit ran out"}
    for i, case in enumerate(job["cases"]):
        left = deadline - time.monotonic()
        row = out_of_time if left <= 0 else run_case(job, program, case, code, min(job["wall_seconds"], left))
        if row["status"] == "timeout" and left < job["wall_seconds"]:
            row = out_of_time  # stopped by the program's budget, not by its own limit
        yield {"program": k, "case": i, **row}


def run_case(job, program, case, code, wall_seconds):
    paths = {name: os.path.join(TMP, f".case-{os.getpid()}-{name}") for name in ("in", "out", "err", "value")}
    with open(paths["in"], "w", encoding="utf-8") as f:
        f.write(case.get("input", ""))
    for name in ("out", "err", "value"):
        open(paths[name], "wb").close()
    sys.stdout.flush()
    sys.stderr.flush()
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        _child(job, program, case, code, paths)  # never returns
    status, usage, timed_out = _wait(pid, wall_seconds)
    seconds = time.monotonic() - start
    _reap_strays(pid)
    result = _result(job, status, usage, timed_out, seconds, paths)
    if IN_SANDBOX:
        _wipe_tmp()
    return result


def _wait(pid, wall_seconds):
    """(wait status, rusage, timed out): the child killed with its group past the wall clock."""
    fd = os.pidfd_open(pid)
    try:
        timed_out = not select.select([fd], [], [], wall_seconds)[0]
    finally:
        os.close(fd)
    if timed_out:
        for target in (-pid, pid):
            try:
                os.kill(target, signal.SIGKILL)
            except OSError:
                pass
    _, status, usage = os.wait4(pid, 0)
    return status, usage, timed_out


def _result(job, status, usage, timed_out, seconds, paths):
    out, truncated = _read(paths["out"], job["output_bytes"])
    err, _ = _read(paths["err"], 4096)
    value, _ = _read(paths["value"], job["output_bytes"])
    result = {"seconds": round(seconds, 4), "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 4),
              "stdout": out, "stderr": err, "output_truncated": truncated, "returncode": None, "signal": None}
    if job["mode"] == "call":
        result["value"] = value
    if timed_out:
        result["status"] = "timeout"
    elif os.WIFSIGNALED(status):
        result.update(status="signal", signal=os.WTERMSIG(status))
    else:
        code = os.WEXITSTATUS(status)
        result.update(status="ok" if code == 0 else "exit", returncode=code)
    return result


def _read(path, limit):
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    return data[:limit].decode("utf-8", errors="replace"), len(data) > limit


# ---- the child ---------------------------------------------------------------------------------------
def _child(job, program, case, code, paths):
    status = 1
    try:
        os.setpgid(0, 0)
        _limit(job)
        if job.get("one_process"):
            _one_process(job["one_process"])
        _redirect(paths)
        if program["kind"] == "exec":
            os.execv(program["path"], [program["path"]])
        status = _run_python(job, program, case, code, paths["value"])
    except BaseException:
        try:
            traceback.print_exc()
        except BaseException:
            pass
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
        os._exit(status)


def _limit(job):
    cpu = max(1, math.ceil(job["cpu_seconds"]))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    size = int(job["output_bytes"])
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
    if job.get("memory_mb"):
        limit = int(job["memory_mb"]) * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _redirect(paths):
    fds = {0: os.open(paths["in"], os.O_RDONLY), 1: os.open(paths["out"], os.O_WRONLY),
           2: os.open(paths["err"], os.O_WRONLY)}
    for target, fd in fds.items():
        os.dup2(fd, target)
        os.close(fd)
    os.closerange(3, min(resource.getrlimit(resource.RLIMIT_NOFILE)[1], 1 << 20))  # the result channel among them
    sys.stdin = open(0, "r", encoding="utf-8", closefd=False)
    sys.stdout = open(1, "w", encoding="utf-8", closefd=False)
    sys.stderr = open(2, "w", encoding="utf-8", closefd=False)
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)  # past the output limit: killed, as a C program would be


def _run_python(job, program, case, code, value_path):
    """Run the program as __main__ (and, in call mode, the case's expression); the exit status."""
    import builtins

    write, open_file = os.write, os.open  # taken before the program runs and can rebind them
    builtins.exit = builtins.quit = _exit  # `python -S` leaves them out; programs call them
    sys.argv = [program["path"]]
    namespace = {"__name__": "__main__", "__file__": program["path"], "__builtins__": builtins}
    try:
        exec(code, namespace)
        if job["mode"] == "call":
            text = repr(eval(case["call"], namespace))
            fd = open_file(value_path, os.O_WRONLY)
            write(fd, text.encode("utf-8", errors="replace"))
    except SystemExit as exc:
        return _exit_status(exc.code)
    except BaseException:
        traceback.print_exc()
        return 1
    return 0


def _exit(code=None):
    raise SystemExit(code)


def _exit_status(code):
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


# ---- between cases -----------------------------------------------------------------------------------
def _reap_strays(pid):
    """Kill what the case left: inside bwrap every process but this one (kill -1), else the case's group.

    Inside bwrap it returns once they are gone (the daemons among them are bwrap's init's to reap), so the next
    case starts with nothing of this one running.
    """
    try:
        os.kill(-1 if IN_SANDBOX else -pid, signal.SIGKILL)
    except OSError:
        pass
    _reap_children()
    deadline = time.monotonic() + 5
    while IN_SANDBOX and _others() and time.monotonic() < deadline:
        time.sleep(0.002)
        _reap_children()


def _reap_children():
    while True:  # reap this process's own children that died
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                break
        except ChildProcessError:
            break


def _others():
    """Processes in the sandbox besides its init and this one (dying ones included until reaped)."""
    own = {1, os.getpid()}
    return [p for p in os.listdir("/proc") if p.isdigit() and int(p) not in own]


def _wipe_tmp():
    """Empty the sandbox's own /tmp and /dev/shm, so a case finds nothing an earlier case left there."""
    for root in ("/tmp", "/dev/shm"):
        try:
            entries = os.listdir(root)
        except OSError:
            continue
        for name in entries:
            _remove(os.path.join(root, name))


def _remove(path):
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            os.chmod(path, 0o700)  # a case may have taken its own folder's permissions away
            for name in os.listdir(path):
                _remove(os.path.join(path, name))
            os.rmdir(path)
        else:
            os.unlink(path)
    except OSError:
        pass


def _pid1_is_bwrap():
    """kill(-1) is sent only where pid 1 is bubblewrap's init (started as /usr/bin/bwrap), that is inside a
    sandbox's pid namespace: anywhere else it would hit the whole machine."""
    try:
        with open("/proc/1/cmdline", "rb") as f:
            return os.path.basename(f.read().split(b"\0")[0]) == b"bwrap"
    except OSError:
        return False


def _one_process(program_hex):
    """Load the filter of one grade's process (kitae.sandbox.seccomp.one_process_program): from here on it may
    start threads but no processes, so its address-space limit is the memory of the whole grade."""
    import ctypes

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]

    program = bytes.fromhex(program_hex)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS, which a filter needs (bwrap has set it already)
    if libc.prctl(22, 2, ctypes.byref(SockFprog(len(program) // 8, program)), 0, 0) != 0:  # SECCOMP_MODE_FILTER
        raise OSError(ctypes.get_errno(), "loading the one-process seccomp filter failed")


def _not_dumpable():
    """PR_SET_DUMPABLE 0: a case (this process's child, the same user) cannot open this process's /proc files
    (its result channel among its fds, its memory), nor ptrace it."""
    import ctypes

    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)


def _syntax_error(exc):
    where = f" (line {exc.lineno})" if getattr(exc, "lineno", None) else ""
    return f"{type(exc).__name__}: {getattr(exc, 'msg', exc)}{where}"


if __name__ == "__main__":
    main()
