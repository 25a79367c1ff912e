"""How untrusted code is started: inside bubblewrap, or (only when a spec says ``sandbox: none``) as a plain process.

A :class:`Sandbox` turns a command into one that runs isolated (``bwrap``):

- new user, pid, network, IPC, UTS and cgroup namespaces: no network at all (only its own loopback), no view of
  other processes (its /proc shows the sandbox alone), no signal reaches anything outside;
- a new root holding only the system (``/usr`` and its links, the dynamic linker's files) and the Python
  installation, read-only; the work folder at ``/work`` (``/sandbox-work`` when the Python installation lives
  under /work), read-only unless the caller asks to write (e.g. to compile); a private, size-limited ``/tmp``
  and ``/dev/shm``; the root itself read-only;
- a clean, explicit environment (``PATH``, ``HOME=/tmp``, ``LANG``, one BLAS thread): nothing of the parent's;
- rlimits set inside (``prlimit``): CPU seconds, address space, file size, no core files, and processes
  (RLIMIT_NPROC). The kernel counts processes per user namespace, so the cap holds per sandbox, and a fork
  bomb stops there. It exempts uid 0, so when kitae runs as root the code runs as ``nobody`` (65534): bwrap
  joins a user namespace made for this one run that maps both uids, and ``setpriv`` switches to nobody;
- a seccomp filter (:mod:`kitae.sandbox.seccomp`, loaded by bwrap before the command starts): the keyring,
  ptrace and its kin, io_uring, mounting, new namespaces, bpf, perf_event_open and the like fail with EPERM;
- a session keyring of its own, new and empty (the trainer's keys are not in it): bwrap is started from a
  thread that joins a new one before each start;
- ``--die-with-parent`` and a new session; when its first process ends, the pid namespace ends, and with it
  every process the code started (daemons, ``setsid`` children). Callers kill the whole tree by killing bwrap.
  The kernel ties the parent-death signal to the *thread* that started bwrap, so every sandbox is started from
  one long-lived thread (:func:`_spawn`): a worker started from a pool thread would otherwise die when that
  thread ends (at the end of an ``asyncio.run``), losing its state, or in the middle of another thread's grade.

``none`` runs the same command with the same rlimits and a clean environment, in the work folder, without
namespaces: the code sees the machine (files, network, other processes) and a process that calls ``setsid``
escapes the kill. It exists for code you trust on machines without user namespaces, and says so wherever
the run is shown (``kitae runs show``, the run page).

Where bwrap cannot run (not installed, user namespaces disabled, too old), building a sandbox raises
:class:`SandboxUnavailable` saying why and how to fix it; nothing falls back to ``none`` silently.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import os
import shutil
import subprocess
import sys
import threading
import typing
from dataclasses import dataclass
from pathlib import Path

from kitae.errors import KitaeError
from kitae.sandbox.seccomp import SeccompUnavailable, filter_program, machine, numbers

SandboxKind = typing.Literal["bwrap", "none"]  # a grader spec's `sandbox`
KINDS = typing.get_args(SandboxKind)
NOBODY = 65534
# Where the work folder appears inside; the second when the Python installation lives under the first (a venv
# at /work/venv), which a work folder mounted there would cover
INSIDE_WORKDIRS = ("/work", "/sandbox-work")
INSIDE_PATH = "/usr/local/bin:/usr/bin:/bin"
# The dynamic linker's configuration; the rest of /etc stays outside.
ETC_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives", "/etc/localtime")
SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# As root: become nobody (no capabilities, no new privileges), then a user namespace of its own, in which the
# kernel counts this sandbox's processes apart from every other sandbox's.
DROP_ROOT = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--inh-caps=-all",
             "--no-new-privs", "--"]

FIX = ("Install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; 0.8 or newer) and allow user namespaces "
       "(Debian: sysctl kernel.unprivileged_userns_clone=1; Ubuntu 24.04: sysctl "
       "kernel.apparmor_restrict_unprivileged_userns=0; Docker: --security-opt seccomp=unconfined "
       "--security-opt apparmor=unconfined). Only for code you trust: set `sandbox: none` in the spec to run it "
       "without isolation.")


class SandboxUnavailable(KitaeError):
    """bubblewrap cannot isolate code on this machine; the message says why and how to fix it."""


@dataclass(frozen=True)
class Limits:
    """Resource limits of one sandboxed command. Per process (rlimits) except ``processes`` and the wall clock.

    ``cpu_seconds`` None leaves CPU time to the caller (a long-lived worker sets its own budget per request).
    A sandbox can use at most ``processes`` x ``memory_mb`` of memory: rlimits bound each process, not their sum.
    """

    wall_seconds: float = 10.0
    cpu_seconds: float | None = 10.0
    memory_mb: int = 1024
    processes: int = 32
    file_mb: int = 64

    def prlimit(self) -> list[str]:
        """The ``prlimit`` command that applies these limits to what follows it."""
        mb = 1024 * 1024
        args = ["prlimit", f"--as={self.memory_mb * mb}", f"--fsize={self.file_mb * mb}",
                f"--nproc={self.processes}", "--core=0"]
        if self.cpu_seconds is not None:
            soft = max(1, round(self.cpu_seconds))  # whole seconds; SIGXCPU at soft, SIGKILL a second later
            args.append(f"--cpu={soft}:{soft + 1}")
        return args + ["--"]


class Sandbox:
    """Starts commands isolated (``kind="bwrap"``) or, when asked for by name, unisolated (``kind="none"``).

        sandbox = Sandbox()                                   # SandboxUnavailable if bwrap cannot run here
        proc = sandbox.spawn([sys.executable, "main.py"], workdir, Limits(wall_seconds=2), stdout=PIPE)
        ...
        kitae.sandbox.process.kill(proc)                      # the whole sandbox, and waits until it is gone

    :func:`kitae.sandbox.process.run` does this with a wall clock and capped output. Paths in the command are
    relative to the work folder (the current directory inside) or absolute system paths (``sys.executable``,
    ``/usr/bin/g++``): what is visible inside is the system, the Python installation and ``extra_paths``.
    """

    def __init__(self, kind: str = "bwrap", extra_paths: tuple[str, ...] = (), check: bool = True):
        if kind not in KINDS:
            raise ValueError(f"sandbox kind {kind!r}: one of {', '.join(KINDS)}")
        self.kind = kind
        self.extra_paths = tuple(extra_paths)
        if kind == "bwrap" and check:
            problem = bwrap_problem()
            if problem:
                raise SandboxUnavailable(f"bubblewrap cannot isolate code on this machine: {problem}. {FIX}")

    @property
    def isolated(self) -> bool:
        return self.kind == "bwrap"

    @property
    def drops_root(self) -> bool:
        """As root the code runs as nobody, so the kernel counts (and caps) its processes."""
        return self.isolated and os.geteuid() == 0

    @property
    def inside_workdir(self) -> str:
        """The work folder's path inside the sandbox (its current directory)."""
        bound = _outside_usr(python_roots() + list(self.extra_paths))
        return next(path for path in INSIDE_WORKDIRS if not any(_overlaps(path, root) for root in bound))

    # ---- commands --------------------------------------------------------------------------------------
    def spawn(self, argv: list[str], workdir: Path, limits: Limits, writable: bool = False,
              **pipes) -> subprocess.Popen:
        """Start ``argv`` in ``workdir`` under ``limits`` (``pipes``: stdin/stdout/stderr, pass_fds for Popen).

        Under bwrap the process carries ``sandbox_init``, a pidfd of the sandbox's pid 1: it becomes readable only
        once every process of the namespace is gone, so :func:`kitae.sandbox.process.kill` can wait for that.
        """
        self.prepare(workdir)
        inner = limits.prlimit() + list(argv)
        if not self.isolated:
            tmp = Path(workdir) / ".tmp"
            tmp.mkdir(exist_ok=True)
            return subprocess.Popen(inner, env=clean_env(home=str(tmp)), cwd=str(workdir), start_new_session=True,
                                    **pipes)
        with contextlib.ExitStack() as fds:  # the ends bwrap inherits, closed here once it has started
            info_read, info_write = os.pipe()
            seccomp = seccomp_fd()
            userns = root_userns() if self.drops_root else None
            passed = [fd for fd in (info_write, seccomp, userns) if fd is not None]
            for fd in passed:
                fds.callback(os.close, fd)
            cmd = self._bwrap_args(workdir, limits, writable, userns)
            cmd += ["--info-fd", str(info_write), "--seccomp", str(seccomp), "--"]
            cmd += (DROP_ROOT if self.drops_root else []) + inner
            pass_fds = tuple(passed) + tuple(pipes.pop("pass_fds", ()))  # the caller's go through to the command
            proc = _spawn(cmd, {"env": {"PATH": INSIDE_PATH}, "cwd": "/", "start_new_session": True,
                                "pass_fds": pass_fds, **pipes})
        proc.sandbox_init = _init_pidfd(info_read)
        return proc

    def prepare(self, workdir: Path) -> None:
        """Let the code reach the work folder: as root, hand it to nobody (it stays deletable by root)."""
        if self.drops_root:
            for path in [workdir, *Path(workdir).rglob("*")]:
                os.chown(path, NOBODY, NOBODY, follow_symlinks=False)

    def close(self) -> None:
        """Nothing is held between commands (each has its own namespaces); kept for the graders' close()."""

    # ---- bubblewrap ------------------------------------------------------------------------------------
    def _bwrap_args(self, workdir: Path, limits: Limits, writable: bool, userns: int | None) -> list[str]:
        tmp_bytes = str(limits.file_mb * 1024 * 1024)
        args = [shutil.which("bwrap") or "bwrap"]
        if userns is not None:  # set up as root of `root_userns()`, then DROP_ROOT switches to nobody
            args += ["--userns", str(userns), "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        else:
            args += ["--unshare-user"]
        args += ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
                 "--die-with-parent", "--new-session", "--hostname", "sandbox"]
        args += system_binds()
        args += ["--proc", "/proc", "--dev", "/dev",
                 "--perms", "1777", "--size", tmp_bytes, "--tmpfs", "/dev/shm", "--remount-ro", "/dev",
                 "--perms", "1777", "--size", tmp_bytes, "--tmpfs", "/tmp"]
        # After the private /tmp, which would hide a Python installed under it (a venv in a Docker build)
        args += install_binds(self.extra_paths)
        inside = self.inside_workdir
        args += ["--bind" if writable else "--ro-bind", str(Path(workdir).resolve()), inside,
                 "--remount-ro", "/", "--chdir", inside, "--clearenv"]
        for key, value in clean_env(home="/tmp").items():
            args += ["--setenv", key, value]
        return args


def seccomp_fd() -> int:
    """The read end of a pipe holding the seccomp filter, for bwrap's --seccomp (it reads to the end)."""
    program = filter_program()
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, program)  # a few hundred bytes: within a pipe's buffer
    finally:
        os.close(write_end)
    return read_end


_SPAWNER: tuple[int, concurrent.futures.ThreadPoolExecutor] | None = None  # (pid, executor)
_SPAWNER_LOCK = threading.Lock()


def _spawn(argv: list[str], kwargs: dict) -> subprocess.Popen:
    """``subprocess.Popen(argv, **kwargs)`` from the one thread that starts every sandbox and lives as long as
    the process: bwrap's ``--die-with-parent`` (PR_SET_PDEATHSIG) fires when the thread that forked it ends."""
    global _SPAWNER
    with _SPAWNER_LOCK:
        if _SPAWNER is None or _SPAWNER[0] != os.getpid():  # a forked child has the executor but not its thread
            _SPAWNER = os.getpid(), concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="kitae-sandbox")
        spawner = _SPAWNER[1]
    return spawner.submit(_start, argv, kwargs).result()


def _start(argv: list[str], kwargs: dict) -> subprocess.Popen:
    """Popen, from the spawner thread, after it joined a new, empty session keyring: session keyrings belong to
    threads, so the sandbox inherits that one and the rest of the process keeps its own (a trainer's keys)."""
    _join_new_session_keyring()
    return subprocess.Popen(argv, **kwargs)


def _join_new_session_keyring() -> None:
    """keyctl(KEYCTL_JOIN_SESSION_KEYRING, NULL). Where keyctl is refused (a container's own seccomp filter), the
    keyring is out of reach anyway, and kitae's filter refuses keyctl inside the sandbox either way."""
    import ctypes

    nr = numbers(machine()).get("keyctl")
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    libc.syscall(ctypes.c_long(nr), ctypes.c_long(1), None)


def _init_pidfd(info_read: int) -> int | None:
    """A pidfd of the sandbox's init, from what bwrap writes to --info-fd ({"child-pid": N, ...})."""
    import json

    with os.fdopen(info_read, "rb") as info:
        text = info.read()
    try:
        return os.pidfd_open(int(json.loads(text)["child-pid"]))
    except (ValueError, KeyError, TypeError, ProcessLookupError, OSError):
        return None  # bwrap failed before it started one; its stderr says why


def clean_env(home: str) -> dict[str, str]:
    """The whole environment the code gets: nothing inherited from the parent."""
    return {"PATH": INSIDE_PATH, "HOME": home, "TMPDIR": home, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1", "PYTHONIOENCODING": "utf-8", "OMP_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def system_binds() -> list[str]:
    """Read-only binds: /usr with the top-level links into it, the linker's /etc files."""
    args = ["--ro-bind", "/usr", "/usr"]
    for link in SYSTEM_LINKS:
        if os.path.islink(link):
            args += ["--symlink", os.readlink(link), link]
        elif os.path.isdir(link):
            args += ["--ro-bind", link, link]
    args += ["--perms", "0755", "--dir", "/etc"]
    for path in ETC_FILES:
        args += ["--ro-bind-try", path, path]
    return args


def install_binds(extra_paths: tuple[str, ...] = ()) -> list[str]:
    """Read-only binds of the Python installation and ``extra_paths``, wherever they live (/root, /opt, /tmp).

    They come after the sandbox's own /tmp and /dev/shm in the command line: bwrap mounts in order, and a
    tmpfs mounted later would cover an installation bound beneath it.
    """
    args = []
    for root in _outside_usr(python_roots() + [str(p) for p in extra_paths]):
        for parent in reversed(Path(root).parents[:-1]):  # else bwrap makes parents 0700: nobody could enter
            args += ["--perms", "0755", "--dir", str(parent)]
        args += ["--ro-bind", root, root]
    return args


def interpreter() -> str:
    """This Python as an absolute path, for commands run in the sandbox, whose current directory is the work folder.

    ``sys.executable`` can be relative (``../venv/bin/python``), meaningless there. Its folder is resolved but
    not the file itself: a venv's ``python`` is a link to the base interpreter, and run by the link it finds its
    ``pyvenv.cfg``, and with it the venv's site-packages.
    """
    path = os.path.abspath(sys.executable)
    return os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))


def python_roots() -> list[str]:
    """The Python installation the sandboxed interpreter needs: its prefixes (stdlib, site-packages)."""
    roots = {sys.base_prefix, sys.prefix, sys.exec_prefix, str(Path(interpreter()).resolve().parent.parent)}
    roots = {os.path.abspath(r) for r in roots}
    return sorted(roots | {str(Path(r).resolve()) for r in roots})  # a symlinked prefix: both paths


def _outside_usr(paths: list[str]) -> list[str]:
    """Paths not already inside /usr or inside one another, outermost first."""
    keep: list[str] = []
    for path in sorted(set(paths), key=len):
        if path == "/" or not os.path.exists(path):
            continue
        if any(path == k or path.startswith(k.rstrip("/") + "/") for k in ["/usr", *keep]):
            continue
        keep.append(path)
    return keep


def _overlaps(a: str, b: str) -> bool:
    """Whether one of two absolute paths is the other or lies inside it."""
    a, b = a.rstrip("/") + "/", b.rstrip("/") + "/"
    return a.startswith(b) or b.startswith(a)


def root_userns() -> int:
    """A user namespace mapping uids and gids 0 and 65534 to themselves (as root only); an fd to it.

    bwrap joins it with --userns and sets the sandbox up as its root, so it may read what root can (to bind
    the Python installation, wherever it lives: a root-only /root does not stop it); DROP_ROOT then switches
    to 65534 for the code.
    """
    holder = subprocess.Popen(["unshare", "--user", "--", "sh", "-c", "echo ready; exec sleep 600"],
                              stdout=subprocess.PIPE)
    try:
        if holder.stdout.readline() != b"ready\n":
            raise SandboxUnavailable(f"unshare --user failed to start. {FIX}")
        for name in ("uid_map", "gid_map"):
            Path(f"/proc/{holder.pid}/{name}").write_text(f"0 0 1\n{NOBODY} {NOBODY} 1\n")
        return os.open(f"/proc/{holder.pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()


@functools.cache
def bwrap_problem() -> str | None:
    """Why bwrap cannot run a sandboxed command here, or None when it can (checked once per process)."""
    for tool in ("bwrap", "prlimit") + (("setpriv", "unshare") if os.geteuid() == 0 else ()):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed"
    import tempfile

    try:
        filter_program()
    except SeccompUnavailable as exc:
        return str(exc)
    with tempfile.TemporaryDirectory(prefix="kitae-sandbox-check-") as tmp:
        try:
            proc = Sandbox("bwrap", check=False).spawn(
                ["/bin/true"], Path(tmp), Limits(wall_seconds=30, cpu_seconds=5), stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        except (OSError, subprocess.SubprocessError, SandboxUnavailable) as exc:
            return f"{type(exc).__name__}: {exc}"
        try:
            _, stderr = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
            return "a sandboxed /bin/true did not finish in 30 s"
        finally:
            if proc.sandbox_init is not None:
                os.close(proc.sandbox_init)
    if proc.returncode != 0:
        return (stderr.decode(errors="replace").strip() or f"exit status {proc.returncode}")[:500]
    return None
