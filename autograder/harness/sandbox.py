"""Start the sandboxed zygote and spawn one isolated student process per submission.

With bubblewrap (`bwrap`) the zygote runs in new user, PID, network, IPC and
UTS namespaces that see only the Python installation, the system libraries
and a read-only copy of the worker and the provided `attnkit` package: not
the repository, the graders, the solutions or the output folder. Each
student child then gets its own mount, PID, network and IPC namespaces and
no capabilities (see `zygote.py`). When the grader runs as root, the user
namespace is built here with two uids: 0 (the zygote, which needs it to set
up each child) and `SANDBOX_UID`, an unprivileged host uid the student
child switches to, so that RLIMIT_NPROC applies to it (the kernel never
applies it to host root). Without bwrap the zygote is a plain subprocess and
each child only gets rlimits, its own session and temporary folder, and,
under root, its own uid; see book/instructors/sandbox.md.
"""
from __future__ import annotations

import json
import os
import random
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

from autograder.harness.scratch import sweep

HERE = Path(__file__).resolve().parent
SANDBOX_FILES = ("worker.py", "wire.py", "zygote.py", "simulated_cuda.py", "scratch.py")
GiB, MiB = 1 << 30, 1 << 20
SANDBOX_UID = 1000  # the student's uid inside the namespaces when the grader runs as root
CAP_DAC_READ_SEARCH = 2
USERNS_HELPER = ("import ctypes, sys\n"
                 "if ctypes.CDLL(None).unshare(0x10000000): sys.exit(3)\n"  # CLONE_NEWUSER
                 "sys.stdout.write('ok'); sys.stdout.flush(); sys.stdin.read()")


@dataclass
class Limits:
    """What one submission may use."""

    call_seconds: float = 10.0  # wall clock for one call of a student function
    load_seconds: float = 120.0  # wall clock for running the notebook's cells, replays included
    cell_seconds: float = 30.0  # one top-level cell; then it is interrupted (KeyboardInterrupt) and the next runs
    cell_grace_seconds: float = 5.0  # how long an interrupted cell may take to stop before its process is killed
    submission_seconds: float = 600.0  # wall clock for the whole submission, all its tests and restarts
    memory_bytes: int | None = 4 * GiB  # host memory (RLIMIT_DATA) beyond what the warm process already uses
    gpu_memory_bytes: int | None = 8 * GiB  # GPU memory of each student process (torch's allocator cap)
    cpu_seconds: int = 600  # CPU time of each student process
    processes: int = 64  # processes and threads the submission may run at once
    file_bytes: int = 64 * MiB  # largest file it may write
    tmp_bytes: int = 256 * MiB  # its private /tmp (and /dev/shm), in memory
    open_files: int = 256
    threads: int | None = None  # torch intra-op threads (None: torch's default)


class ReducedIsolationWarning(UserWarning):
    """bubblewrap is missing: student code runs with rlimits only."""


class SandboxDied(RuntimeError):
    """The zygote is gone (crashed, or killed by a submission); the next spawn starts a new one."""


def is_root() -> bool:
    return os.geteuid() == 0


def user_namespace(host_uid: int) -> int:
    """(root only) A new user namespace mapping uid 0 to root and SANDBOX_UID to `host_uid`: an fd for bwrap --userns."""
    helper = subprocess.Popen([sys.executable, "-S", "-c", USERNS_HELPER], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        if helper.stdout.read(2) != b"ok":
            raise OSError("cannot create a user namespace")
        for name in ("uid_map", "gid_map"):
            with open(f"/proc/{helper.pid}/{name}", "w") as f:
                f.write(f"0 0 1\n{SANDBOX_UID} {host_uid} 1\n")
        return os.open(f"/proc/{helper.pid}/ns/user", os.O_RDONLY)
    finally:
        helper.stdin.close()
        helper.wait()


def bwrap_prefix(host_uid: int | None) -> tuple[list[str], list[int]]:
    """The bwrap arguments that make the user namespace, and the fds they need passed."""
    exe = shutil.which("bwrap")
    if host_uid is None:
        return [exe, "--unshare-user", "--uid", "0", "--gid", "0"], []
    fd = user_namespace(host_uid)
    return [exe, "--userns", str(fd)], [fd]


def bwrap_works() -> bool:
    """Whether bubblewrap is installed and can create the namespaces we use."""
    if not shutil.which("bwrap"):
        return False
    fds: list[int] = []
    try:
        prefix, fds = bwrap_prefix(random_host_uid() if is_root() else None)
        probe = [*prefix, "--unshare-pid", "--unshare-net", "--ro-bind", "/", "/", "--proc", "/proc", "true"]
        return subprocess.run(probe, capture_output=True, timeout=20, pass_fds=fds).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False
    finally:
        for fd in fds:
            os.close(fd)


def choose_isolation(mode: str = "auto") -> str:
    """'namespaces' (bwrap) or 'process' (fallback); `mode` is auto, bwrap or process."""
    if mode == "process":
        return "process"
    if bwrap_works():
        return "namespaces"
    if mode == "bwrap":
        raise RuntimeError("--isolation bwrap was asked for, but bubblewrap (bwrap) is missing or "
                           "cannot create namespaces here (apt-get install bubblewrap)")
    warnings.warn("bubblewrap (bwrap) is not available: ISOLATION IS REDUCED. Student code runs as a "
                  "plain subprocess with rlimits only: it can read the files this user can read "
                  "(the solutions and the graders included) and reach the network"
                  + ("" if is_root() else ", and signal your processes") + ". Install bubblewrap "
                  "(Debian/Ubuntu: apt-get install bubblewrap) for full isolation.",
                  ReducedIsolationWarning, stacklevel=2)
    return "process"


def random_host_uid() -> int:
    """An unprivileged host uid that no account uses, different for every sandbox."""
    return random.SystemRandom().randrange(1_000_000_000, 2_000_000_000)


def attnkit_dir() -> Path:
    """The provided `attnkit` package that student notebooks import (wherever it is installed)."""
    import importlib.util
    spec = importlib.util.find_spec("attnkit")
    if spec is None or spec.origin is None:
        raise RuntimeError("the attnkit package is not importable; install it (pip install -e .)")
    return Path(spec.origin).resolve().parent


def stage(dest: Path) -> Path:
    """Copy the worker files and the provided `attnkit` package into `dest`, readable by anyone."""
    dest.mkdir(mode=0o755, exist_ok=True)
    for name in SANDBOX_FILES:
        shutil.copy2(HERE / name, dest / name)
    shutil.copytree(attnkit_dir(), dest / "attnkit", ignore=shutil.ignore_patterns("__pycache__"))
    for path in [dest, *dest.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return dest


def _parents(path: str) -> list[str]:
    """bwrap arguments creating the folders above `path` world-readable (bwrap's own are 0700)."""
    args: list[str] = []
    for parent in reversed(Path(path).parents):
        if str(parent) != "/":
            args += ["--perms", "0755", "--dir", str(parent)]
    return args


def inside(path: str) -> str:
    """Where a host path is bound in the sandbox: where it is, except under /tmp (the sandbox's own /tmp
    would hide it, e.g. a checkout and its .venv in /tmp), which moves to /sandbox/tmp/..."""
    return "/sandbox" + path if path == "/tmp" or path.startswith("/tmp/") else path


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
    binds = [(p, p) for p in sorted(prefixes) if not p.startswith("/usr")]
    if os.path.realpath(sys.prefix) != sys.prefix:
        binds.append((os.path.realpath(sys.prefix), sys.prefix))
    for source, dest in binds:
        dest = inside(dest)
        args += _parents(dest) + ["--ro-bind", source, dest]
    for extra in ("/etc/ld.so.cache", "/etc/localtime", "/etc/alternatives"):
        args += ["--ro-bind-try", extra, extra]
    return args


def gpu_devices() -> list[str]:
    """The NVIDIA device nodes of this machine (/dev/nvidia0, /dev/nvidiactl, /dev/nvidia-uvm, ...); [] without a GPU."""
    return sorted(str(p) for p in Path("/dev").glob("nvidia*"))


def gpu_binds(devices: list[str]) -> list[str]:
    """bwrap arguments exposing the GPU's device nodes. They must come after `--dev /dev`, which
    mounts a fresh /dev over anything bound there before. The driver's libraries need no bind:
    they live under /usr or /lib (bound already), and LD_LIBRARY_PATH is passed on (`_env`)."""
    args: list[str] = []
    for dev in devices:
        args += ["--dev-bind", dev, dev]
    return args


def bwrap_command(prefix: list[str], staging: str, inner: str, env: dict[str, str],
                  devices: list[str], fd: int) -> list[str]:
    """The whole bwrap command line that starts the zygote (`devices`: GPU nodes to expose)."""
    cmd = [*prefix, "--cap-add", "ALL", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
           "--unshare-cgroup-try", "--die-with-parent", "--new-session",
           *_system_binds(), "--ro-bind", staging, inner,
           "--proc", "/proc", "--dev", "/dev", *gpu_binds(devices), "--tmpfs", "/tmp", "--chdir", "/tmp",
           "--clearenv"]
    for key, value in env.items():
        cmd += ["--setenv", key, value]
    return cmd + [inside(sys.executable), "-B", f"{inner}/worker.py", "zygote", str(fd)]


GPU_ENV = ("LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES")


def _env(limits: Limits, staging: str) -> dict[str, str]:
    env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "PYTHONPATH": staging, "MPLBACKEND": "Agg",
           "MPLCONFIGDIR": "/tmp", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0",
           "ATTNKIT_PROGRESS": "off", "LANG": "C.UTF-8", "USER": "student", "LOGNAME": "student"}
    # threads count against Limits.processes: never let torch's pool alone reach it
    threads = limits.threads or max(1, min(os.cpu_count() or 1, limits.processes // 2))
    env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    # Idle OpenMP threads sleep instead of spinning: a spinning pool took the cores the trusted side needs
    # between calls (grading one 03 notebook on the loaded 2-core machine: 10-13 s spinning, 5-6 s passive,
    # in one run; benchmarks/README.md, "Round three").
    env["OMP_WAIT_POLICY"] = "PASSIVE"
    if gpu_devices():  # where the driver's libraries and the visible GPUs are
        env.update({k: os.environ[k] for k in GPU_ENV if k in os.environ})
    return env


def python_world_readable() -> bool:
    """Whether any uid can reach the Python installation (then no student keeps CAP_DAC_READ_SEARCH)."""
    for top in {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.executable)}:
        path = Path(top)
        for d in [path, *path.parents]:
            need = 0o005 if d.is_dir() else 0o004
            if d.stat().st_mode & need != need:
                return False
    return True


class Sandbox:
    """A running zygote; `spawn()` gives a connected socket to a fresh, isolated student process.

    If the zygote dies (a submission in process mode can kill it), the next
    `spawn()` starts a new one; `restarts` counts them.
    """

    def __init__(self, limits: Limits | None = None, isolation: str = "auto") -> None:
        self.limits = limits or Limits()
        self.isolation = choose_isolation(isolation)
        self.host_uid = random_host_uid() if is_root() else None  # the students' uid on the host
        self.restarts = 0
        self.cuda: bool | None = None  # whether its student processes can use CUDA: `student.cuda_usable`
        sweep("autograder-sandbox-")  # staging folders of killed processes
        self._tmp = tempfile.TemporaryDirectory(prefix=f"autograder-sandbox-{os.getpid()}-")
        self._lock = threading.Lock()
        self._start()

    # ------------------------------------------------------------ the zygote
    def _start(self) -> None:
        self._ready = False
        self.control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.proc = self._launch(theirs)
        finally:
            theirs.close()

    def _launch(self, theirs: socket.socket) -> subprocess.Popen:
        shutil.rmtree(Path(self._tmp.name) / "grader", ignore_errors=True)  # a restart stages afresh
        staging = stage(Path(self._tmp.name) / "grader")
        fd, fds = theirs.fileno(), []
        if self.isolation == "namespaces":
            inner = "/grader"
            prefix, fds = bwrap_prefix(self.host_uid)
            cmd = bwrap_command(prefix, str(staging), inner, _env(self.limits, inner), gpu_devices(), fd)
            env = None
        else:
            inner = str(staging)
            cmd = [sys.executable, "-B", f"{inner}/worker.py", "zygote", str(fd)]
            env = _env(self.limits, inner)
        log = open(Path(self._tmp.name) / "zygote.log", "ab")
        try:
            return subprocess.Popen(cmd, pass_fds=(fd, *fds), env=env, cwd=self._tmp.name,
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=None if os.environ.get("AUTOGRADER_DEBUG") else log,
                                    start_new_session=True)
        finally:
            log.close()
            for extra in fds:
                os.close(extra)

    def _log_tail(self) -> str:
        try:
            return (Path(self._tmp.name) / "zygote.log").read_bytes()[-2000:].decode(errors="replace").strip()
        except OSError:
            return ""

    def _wait_ready(self) -> None:
        self.control.settimeout(120)
        try:
            data = self.control.recv(65536)
        except (socket.timeout, OSError):
            data = b""
        self.control.settimeout(None)
        if not data:
            raise SandboxDied(f"the sandbox could not start ({self.isolation}): {self._log_tail()}")
        self._ready = True

    def alive(self) -> bool:
        """Whether the zygote still runs."""
        return self.proc.poll() is None

    def _stop_zygote(self) -> None:
        """Kill the zygote (and with it, in bwrap, everything in its namespaces) and what its children left."""
        try:
            self.control.close()
        finally:
            if self.proc.poll() is None:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            self.proc.wait()
            if self.isolation == "process" and self.host_uid:
                from autograder.harness.zygote import kill_uid
                kill_uid(self.host_uid)  # orphans of a killed zygote went to init: they run as our uid

    def _restart(self) -> None:
        self._stop_zygote()
        self.restarts += 1
        self._start()

    def _ask(self, req: dict, fds: tuple = ()) -> dict:
        with self._lock:
            try:
                if not self._ready:
                    self._wait_ready()
                socket.send_fds(self.control, [json.dumps(req).encode()], list(fds))
                data = self.control.recv(65536)
            except OSError:
                data = b""
        if not data:
            raise SandboxDied(f"the sandbox stopped ({self.isolation}) {self._log_tail()}".strip())
        reply = json.loads(data)
        if "error" in reply:
            raise RuntimeError(f"the sandbox could not {req.get('op')}: {reply['error']}")
        return reply

    # ------------------------------------------------------------ student processes
    def _identity(self) -> dict:
        """Who the student process runs as: uid, gid and the capabilities it keeps."""
        if self.host_uid is None:
            return {}
        if self.isolation == "namespaces":
            return {"uid": SANDBOX_UID, "gid": SANDBOX_UID}
        keep = [] if python_world_readable() else [CAP_DAC_READ_SEARCH]
        return {"uid": self.host_uid, "gid": self.host_uid, "keep": keep}

    def spawn(self) -> tuple[socket.socket, int]:
        """A socket connected to a new student process, and that process's id (for `end`)."""
        if self._ready and not self.alive():
            self._restart()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        limits = {"data_extra": self.limits.memory_bytes, "cpu": self.limits.cpu_seconds,
                  "fsize": self.limits.file_bytes, "nproc": self.limits.processes,
                  "nofile": self.limits.open_files, "core": 0}
        req = {"op": "spawn", "isolation": self.isolation, "limits": limits,
               "tmp_bytes": self.limits.tmp_bytes, **self._identity()}
        try:
            try:
                reply = self._ask(req, (theirs.fileno(),))
            except SandboxDied:
                self._restart()
                reply = self._ask(req, (theirs.fileno(),))
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        return ours, reply["pid"]

    def end(self, pid: int, grace: float = 0.0) -> dict:
        """Let student process `pid` exit within `grace` s, else kill it; kill all it started.

        Returns how it ended: {"code": n} or {"signal": n}, with "killed": True
        if it had to be killed, or {"sandbox_died": True} if the zygote is gone.
        """
        try:
            return self._ask({"op": "end", "pid": pid, "grace": grace})
        except SandboxDied:
            return {"sandbox_died": True}

    def kill(self, pid: int) -> dict:
        """Kill a student process and all it started; return how it ended."""
        return self.end(pid, 0.0)

    def status(self, pid: int) -> dict:
        """How a student process ended ({"code": n} / {"signal": n}), {} if still running."""
        return self._ask({"op": "status", "pid": pid})

    def close(self) -> None:
        """Stop the zygote and remove the staging folder."""
        try:
            self._stop_zygote()
        finally:
            self._tmp.cleanup()

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def describe_limits(limits: Limits) -> dict:
    """The limits as a plain dict (for results metadata; book/instructors/sandbox.md lists them)."""
    return asdict(limits)
