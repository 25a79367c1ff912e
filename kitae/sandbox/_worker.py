"""A grading worker process: JSON lines in, JSON lines out, one request at a time.

Started by kitae.sandbox.worker as ``python -I _worker.py REQUESTS REPLIES`` (a standalone script: it imports
nothing from kitae), the two channels as fds of their own: its stdin and stdout, which bubblewrap's init also
holds, are not used (stdout is the log, as stderr). The first line configures it; it answers {"ok": true} once ready, then one line per request:
{"ok": true, "value": ...} or {"ok": false, "error": "..."}.

Modes: "python" runs a user's ``grade(sample, item)`` (OpenAI's python grader), each request in a child forked
for it ("fork_per_request": the source is loaded once, every grade starts from that state, and the child holds
neither protocol channel), with a CPU budget per request and an audit hook that refuses sockets and new
processes (a courtesy error for honest mistakes: the security boundary is the sandbox around this process,
which ctypes cannot talk its way out of); "math" answers math-verify comparisons with its signal-based
timeouts disabled (the parent enforces the wall-clock limit by killing this process). Inside a sandbox
("reap_strays") every other process of the sandbox is killed after each request, so nothing a grade started
outlives it.
"""

import json
import os
import resource
import select
import sys
import time
import traceback

SCRATCH = ("/tmp", "/dev/shm")  # the sandbox's writable places: $HOME and $TMPDIR are /tmp, the rest read-only
BLOCKED_EVENTS = {
    "socket.__new__", "socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg", "socket.getaddrinfo",
    "socket.gethostbyname", "socket.gethostbyaddr", "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn",
    "os.spawn", "os.fork", "os.forkpty", "pty.spawn",
}


def _audit_hook(permitted):
    def audit(event, args):
        if event in BLOCKED_EVENTS and event not in permitted:
            raise PermissionError(f"blocked in the grader sandbox: {event} (no network, no subprocesses)")

    return audit


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
    """Kill every process of the sandbox but this one and its init (a grade's daemons, setsid children), and
    return once they are gone (bubblewrap's init reaps them), so nothing of the grade writes after it.

    kill(-1) reaches every process this one may signal: only ever sent inside a pid namespace, where pid 1 is
    bubblewrap's init (started as /usr/bin/bwrap); anywhere else it would hit the whole machine, so it checks.
    """
    if not _pid1_is_bwrap():
        return
    try:
        os.kill(-1, 9)
    except OSError:  # nothing left to kill
        pass
    deadline = time.monotonic() + 5
    while _others() and time.monotonic() < deadline:
        time.sleep(0.002)


def _pid1_is_bwrap():
    try:
        with open("/proc/1/cmdline", "rb") as f:
            return os.path.basename(f.read().split(b"\0")[0]) == b"bwrap"
    except OSError:  # no /proc
        return False


def _others():
    """Processes in the sandbox besides its init and this one (dying ones included until reaped)."""
    own = {1, os.getpid()}
    return [p for p in os.listdir("/proc") if p.isdigit() and int(p) not in own]


def _wipe_scratch():
    """Empty the sandbox's /tmp (also $HOME and $TMPDIR) and /dev/shm: the next grade finds nothing of this one."""
    for root in SCRATCH:
        try:
            entries = os.listdir(root)
        except OSError:
            continue
        for name in entries:
            _remove(os.path.join(root, name))


def _remove(path):
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            os.chmod(path, 0o700)  # a grade may have taken its own folder's permissions away
            for name in os.listdir(path):
                _remove(os.path.join(path, name))
            os.rmdir(path)
        else:
            os.unlink(path)
    except OSError:
        pass


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
    """PR_SET_DUMPABLE 0: a grade (a child of this process, the same user) cannot open this process's /proc
    files: its memory (where it would rewrite grade() for every later grade), its fds (the reply channel)."""
    import ctypes

    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)


# ---- one grade, in a fork of the worker --------------------------------------------------------------
SIGNAL_CAUSES = {9: "was killed (memory or process limit?)", 24: "exceeded its CPU-time limit",
                 25: "exceeded its file-size limit (too much output?)", 11: "crashed (segmentation fault)",
                 6: "aborted"}
MAX_RESULT = 1 << 20


def _grade_in_fork(handle, request, config, channels, permitted):
    """The reply to one request, computed in a child forked for it: a grade starts from the worker as the
    source left it, and nothing it does (module state, threads, the channels it would inherit) reaches the next.

    The child holds neither the request channel nor the reply channel: it writes its result into a pipe of its
    own, read here once it has exited. It can still choose its own result (it runs in the grade's process), not
    another sample's.
    """
    read_end, write_end = os.pipe()
    permitted.add("os.fork")
    try:
        pid = os.fork()
    finally:
        permitted.discard("os.fork")
    if pid == 0:
        os.close(read_end)
        _child(handle, request, config, channels, write_end)  # never returns
    os.close(write_end)
    try:
        data, status = _collect(pid, read_end)
    finally:
        os.close(read_end)
    return _reply_of(data, status)


def _child(handle, request, config, channels, write_end):
    try:
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        for fd in channels:
            os.close(fd)
        if config.get("cpu_seconds"):
            seconds = max(1, round(config["cpu_seconds"]))
            resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds + 1))
        if config.get("one_process"):
            _one_process(config["one_process"])
        try:
            message = {"ok": True, "value": _plain(handle(request))}
        except BaseException as exc:
            message = {"ok": False, "error": _error(exc)}
        try:
            data = json.dumps(message).encode()
        except (TypeError, ValueError):
            data = json.dumps({"ok": True, "value": repr(message.get("value"))[:300]}).encode()
        view = memoryview(b"\n" + data + b"\n")
        while view:
            view = view[os.write(write_end, view):]
        os._exit(0)
    finally:
        os._exit(1)


def _collect(pid, read_end):
    """(what the child wrote, its wait status), once it has exited."""
    chunks, size = [], 0
    pidfd = os.pidfd_open(pid)
    try:
        watched = [read_end, pidfd]
        while pidfd in watched:
            ready = select.select(watched, [], [])[0]
            if read_end in ready:
                chunk = os.read(read_end, 65536)
                if not chunk:
                    watched.remove(read_end)
                elif size < MAX_RESULT:  # past it, read on (so the child does not block) but keep nothing
                    chunks.append(chunk)
                    size += len(chunk)
            if pidfd in ready:
                watched.remove(pidfd)
    finally:
        os.close(pidfd)
    _, status = os.waitpid(pid, 0)
    os.set_blocking(read_end, False)
    try:
        while size < MAX_RESULT:
            chunk = os.read(read_end, 65536)
            if not chunk:
                break
            size += len(chunk)
            chunks.append(chunk)
    except BlockingIOError:
        pass  # a stray holds the pipe open: what it writes later is not read
    return b"".join(chunks), status


def _reply_of(data, status):
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        return {"ok": False, "error": f"grade() {SIGNAL_CAUSES.get(sig, f'was killed by signal {sig}')}"}
    if os.WEXITSTATUS(status) != 0:
        return {"ok": False, "error": f"grade() exited with status {os.WEXITSTATUS(status)}"}
    lines = [line for line in data.splitlines() if line.strip()]
    try:
        message = json.loads(lines[-1])
        if isinstance(message, dict) and "ok" in message:
            return message
    except (IndexError, ValueError):
        pass
    return {"ok": False, "error": "grade() ended without a result"}


def _plain(value):
    """numpy scalars and other number-likes as floats, so the reply is JSON."""
    if not isinstance(value, (int, float, str, bool, list, dict, type(None))) and hasattr(value, "__float__"):
        return float(value)
    return value


HANDLERS = {"python": _python_handler, "math": _math_handler}


def main():
    _not_dumpable()
    requests = os.fdopen(int(sys.argv[1]), "r", encoding="utf-8")  # the channels, fds of their own
    out = os.fdopen(int(sys.argv[2]), "w", encoding="utf-8")
    config = json.loads(requests.readline())
    permitted = set()  # audit events let through for the worker's own use (its fork per grade)

    def reply(message):
        out.write(json.dumps(message) + "\n")
        out.flush()

    try:
        if config.get("block_network"):
            sys.addaudithook(_audit_hook(permitted))
        _limit(config.get("memory_mb"), None if config.get("fork_per_request") else config.get("cpu_seconds"))
        handle = HANDLERS[config["mode"]](config)
    except BaseException as exc:  # a broken source is reported, not raised
        reply({"ok": False, "error": _error(exc)})
        return
    isolated = config.get("reap_strays") and _pid1_is_bwrap()
    if isolated:
        _wipe_scratch()  # every grade starts with an empty /tmp, the first too
    reply({"ok": True})
    for line in requests:
        request = json.loads(line)
        if config.get("fork_per_request"):
            message = _grade_in_fork(handle, request, config, (requests.fileno(), out.fileno()), permitted)
        else:
            message = _answer(handle, request, config)
        if isolated:
            _reap_strays()
            _wipe_scratch()
        reply(message)


def _answer(handle, request, config):
    """The reply to one request, computed in this process (math-verify: trusted code, no fork)."""
    if config.get("cpu_seconds"):
        _cpu_budget(config["cpu_seconds"])
    try:
        return {"ok": True, "value": _plain(handle(request))}
    except BaseException as exc:
        return {"ok": False, "error": _error(exc)}


if __name__ == "__main__":
    main()
