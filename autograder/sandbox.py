"""Start the sandboxed zygote and spawn one isolated student process per submission.

With bubblewrap (`bwrap`) the zygote runs in new user, PID, network, IPC and
UTS namespaces that see only the Python installation, the system libraries
and a read-only copy of the worker and the provided `attnkit` package: not
the repository, the graders, the solutions or the output folder. Each
student child then gets its own mount and PID namespaces and no
capabilities (see `zygote.py`). Without bwrap the zygote is a plain
subprocess and each child only gets rlimits and its own process group.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SANDBOX_FILES = ("worker.py", "wire.py", "zygote.py")
GiB, MiB = 1 << 30, 1 << 20


@dataclass
class Limits:
    """What one submission may use."""

    call_seconds: float = 10.0  # wall clock for one call of a student function
    load_seconds: float = 60.0  # wall clock for running the notebook's cells
    memory_bytes: int | None = 4 * GiB  # address space beyond what the warm process (torch) already maps
    cpu_seconds: int = 600  # CPU time of the whole student process
    processes: int = 64  # processes and threads
    file_bytes: int = 64 * MiB  # largest file it may write (in its private /tmp)
    open_files: int = 256
    threads: int | None = None  # torch intra-op threads (None: torch's default)


class ReducedIsolationWarning(UserWarning):
    """bubblewrap is missing: student code runs with rlimits only."""


def bwrap_works() -> bool:
    """Whether bubblewrap is installed and can create the namespaces we use."""
    exe = shutil.which("bwrap")
    if not exe:
        return False
    probe = [exe, "--unshare-user", "--uid", "0", "--gid", "0", "--unshare-pid", "--unshare-net",
             "--ro-bind", "/", "/", "--proc", "/proc", "true"]
    try:
        return subprocess.run(probe, capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def choose_isolation(mode: str = "auto") -> str:
    """'namespaces' (bwrap) or 'process' (fallback); `mode` is auto, bwrap or process."""
    if mode == "process":
        return "process"
    if bwrap_works():
        return "namespaces"
    if mode == "bwrap":
        raise RuntimeError("--isolation bwrap was asked for, but bubblewrap (bwrap) is missing or "
                           "cannot create namespaces here (apt-get install bubblewrap)")
    warnings.warn("bubblewrap (bwrap) is not available: student code runs as a plain subprocess with "
                  "rlimits only. It can read every file this user can read and reach the network. "
                  "Install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap) for full isolation.",
                  ReducedIsolationWarning, stacklevel=2)
    return "process"


def stage(dest: Path) -> Path:
    """Copy the worker files and the provided `attnkit` package into `dest`."""
    for name in SANDBOX_FILES:
        shutil.copy2(HERE / name, dest / name)
    shutil.copytree(ROOT / "attnkit", dest / "attnkit", ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def _system_binds() -> list[str]:
    """Read-only views of /usr, the Python installation(s) and the library symlinks."""
    args = ["--ro-bind", "/usr", "/usr"]
    for top in ("lib", "lib64", "lib32", "bin", "sbin"):
        p = Path("/" + top)
        if p.is_symlink():
            args += ["--symlink", os.readlink(p), str(p)]
        elif p.is_dir():
            args += ["--ro-bind", str(p), str(p)]
    prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    prefixes |= {os.path.dirname(os.path.dirname(os.path.realpath(sys.executable)))}
    for p in sorted(prefixes):
        if not p.startswith("/usr"):
            args += ["--ro-bind", p, p]
    if os.path.realpath(sys.prefix) != sys.prefix:
        args += ["--ro-bind", os.path.realpath(sys.prefix), sys.prefix]
    for extra in ("/etc/ld.so.cache", "/etc/localtime", "/etc/alternatives"):
        args += ["--ro-bind-try", extra, extra]
    for dev in sorted(Path("/dev").glob("nvidia*")):  # a GPU, when the grading machine has one
        args += ["--dev-bind", str(dev), str(dev)]
    return args


def _env(limits: Limits, staging: str) -> dict[str, str]:
    env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "PYTHONPATH": staging, "MPLBACKEND": "Agg",
           "MPLCONFIGDIR": "/tmp", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0",
           "ATTNKIT_PROGRESS": "off", "LANG": "C.UTF-8"}
    if limits.threads:
        env.update(OMP_NUM_THREADS=str(limits.threads), MKL_NUM_THREADS=str(limits.threads))
    return env


class Sandbox:
    """A running zygote; `spawn()` gives a connected socket to a fresh, isolated student process."""

    def __init__(self, limits: Limits | None = None, isolation: str = "auto") -> None:
        self.limits = limits or Limits()
        self.isolation = choose_isolation(isolation)
        self._tmp = tempfile.TemporaryDirectory(prefix="autograder-sandbox-")
        self._lock = threading.Lock()
        self._ready = False
        self.control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.proc = self._launch(theirs)
        theirs.close()

    def _launch(self, theirs: socket.socket) -> subprocess.Popen:
        staging = stage(Path(self._tmp.name))
        fd = theirs.fileno()
        if self.isolation == "namespaces":
            inner = "/grader"
            cmd = [shutil.which("bwrap"), "--unshare-user", "--uid", "0", "--gid", "0",
                   "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
                   "--unshare-cgroup-try", "--die-with-parent", "--new-session",
                   *_system_binds(), "--ro-bind", str(staging), inner,
                   "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--chdir", "/tmp",
                   "--clearenv"]
            for key, value in _env(self.limits, inner).items():
                cmd += ["--setenv", key, value]
            cmd += [sys.executable, "-B", f"{inner}/worker.py", "zygote", str(fd)]
            env = None
        else:
            inner = str(staging)
            cmd = [sys.executable, "-B", f"{inner}/worker.py", "zygote", str(fd)]
            env = _env(self.limits, inner)
            env["HOME"] = env["MPLCONFIGDIR"] = tempfile.mkdtemp(dir=self._tmp.name)
        return subprocess.Popen(cmd, pass_fds=(fd,), env=env, cwd=self._tmp.name,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE if os.environ.get("AUTOGRADER_DEBUG") is None else None,
                                start_new_session=True)

    def _ask(self, req: dict, fds: tuple = ()) -> dict:
        with self._lock:
            if not self._ready:
                self._wait_ready()
            socket.send_fds(self.control, [json.dumps(req).encode()], list(fds))
            data = self.control.recv(65536)
        if not data:
            raise RuntimeError(self._died())
        return json.loads(data)

    def _wait_ready(self) -> None:
        self.control.settimeout(120)
        try:
            data = self.control.recv(65536)
        except socket.timeout:
            data = b""
        self.control.settimeout(None)
        if not data:
            raise RuntimeError(self._died())
        self._ready = True

    def _died(self) -> str:
        err = b""
        if self.proc.poll() is not None and self.proc.stderr:
            err = self.proc.stderr.read()[-2000:]
        return f"the sandbox could not start ({self.isolation}): {err.decode(errors='replace').strip()}"

    def spawn(self) -> tuple[socket.socket, int]:
        """A socket connected to a new student process, and that process's id (for `kill`)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            limits = {"as_extra": self.limits.memory_bytes, "cpu": self.limits.cpu_seconds,
                      "fsize": self.limits.file_bytes, "nproc": self.limits.processes,
                      "nofile": self.limits.open_files, "core": 0}
            reply = self._ask({"op": "spawn", "isolation": self.isolation, "limits": limits},
                              (theirs.fileno(),))
        finally:
            theirs.close()
        return ours, reply["pid"]

    def kill(self, pid: int) -> dict:
        """Kill a student process and all it started; return how it ended."""
        self._ask({"op": "kill", "pid": pid, "isolation": self.isolation})
        return self._ask({"op": "status", "pid": pid})

    def status(self, pid: int) -> dict:
        """How a student process ended ({"code": n} / {"signal": n}), {} if still running."""
        return self._ask({"op": "status", "pid": pid})

    def close(self) -> None:
        """Stop the zygote and remove the staging folder."""
        try:
            self.control.close()
        finally:
            if self.proc.poll() is None:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                self.proc.wait()
            self._tmp.cleanup()

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def describe_limits(limits: Limits) -> dict:
    """The limits as a plain dict (for the README and results metadata)."""
    return asdict(limits)
