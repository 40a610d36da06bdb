"""A warm process that forks one isolated child per submission.

It runs inside the sandbox (copied there with `worker.py`), imports torch
once, then waits on its control socket. For each `spawn` request it forks a
child that isolates itself and serves one submission on the socket passed
with the request:

- "namespaces" (inside bubblewrap): the child gets its own mount, PID,
  network, IPC and UTS namespaces, a fresh /tmp, /dev/shm and /proc, no way
  to create user namespaces, and gives up every capability for good
  (bounding set, locked securebits, no_new_privs), after switching to the
  sandbox's unprivileged uid when there is one (the grader runs as root).
  The child's parent, the "waiter", stays outside the new PID namespace: on
  `end` it kills the namespace's PID 1, which takes every process of the
  namespace with it, and it exits the way PID 1 did.
- "process" (the fallback): the child gets its own session, a private
  temporary folder and, when the grader runs as root, its own unprivileged
  uid (keeping only the right to read files). The zygote is a child
  subreaper, so whatever the child detaches (double fork, setsid) is
  re-parented to it and killed on `end`: by uid when there is one, else by
  walking the process tree.

In both, rlimits bound memory, CPU time, processes and file sizes.
"""
from __future__ import annotations

import ctypes
import gc
import json
import os
import resource
import select
import shutil
import signal
import socket
import sys
import tempfile
import time
from typing import Callable

try:
    from scratch import owned_tempdir
except ImportError:  # imported as part of the autograder package
    from autograder.harness.scratch import owned_tempdir

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWPID, CLONE_NEWNET = 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND = 1, 2, 4, 8, 32, 4096
MS_REC, MS_PRIVATE = 16384, 1 << 18
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_SECUREBITS, PR_SET_CHILD_SUBREAPER = 1, 24, 28, 36
PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 38, 47, 4
CAP_DAC_READ_SEARCH, CAP_SETPCAP = 2, 8
SECURE_LOCKED_NOROOT = 0x2F  # NOROOT, NO_SETUID_FIXUP and KEEP_CAPS, each locked
LIMITS = {"as": resource.RLIMIT_AS, "data": resource.RLIMIT_DATA, "cpu": resource.RLIMIT_CPU, "fsize": resource.RLIMIT_FSIZE,
          "nproc": resource.RLIMIT_NPROC, "nofile": resource.RLIMIT_NOFILE, "core": resource.RLIMIT_CORE}

libc = ctypes.CDLL(None, use_errno=True)
libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


# ---------------------------------------------------------------- privileges
def capabilities() -> int:
    """This process's effective capabilities, as a bit mask."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    return 0


def capset(keep: tuple = ()) -> None:
    """Set the effective and permitted capabilities to exactly `keep` (the inheritable set to none)."""
    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                    ("inheritable", ctypes.c_uint32)]

    data = (Data * 2)()
    for cap in keep:
        data[cap // 32].effective |= 1 << (cap % 32)
        data[cap // 32].permitted |= 1 << (cap % 32)
    _check(libc.capset(ctypes.byref(Header(0x20080522, 0)), data), "capset")


def drop_privileges(uid: int | None = None, gid: int | None = None, keep: tuple = ()) -> None:
    """Give up every capability but `keep`, for good; switch to `uid`/`gid` on the way when given.

    The bounding set and the locked securebits make sure nothing exec'd later
    gets a capability back; no_new_privs disables setuid binaries.
    """
    have = capabilities()
    keep = tuple(cap for cap in keep if have >> cap & 1)  # e.g. Docker does not grant CAP_DAC_READ_SEARCH
    if have & (1 << CAP_SETPCAP):
        for cap in range(64):
            if cap not in keep:
                libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)  # EINVAL past the last cap: ignored
        _check(libc.prctl(PR_SET_SECUREBITS, SECURE_LOCKED_NOROOT, 0, 0, 0), "securebits")
    if uid is not None:
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    capset(keep)
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")


# ---------------------------------------------------------------- the child's world
def fresh_filesystem(tmp_bytes: int) -> None:
    """A private, read-only mount table with an empty /tmp and /dev/shm, and this PID namespace's /proc.

    / and /dev (bubblewrap's own tmpfs) become read-only, so that nothing one
    submission writes there can reach the next one.
    """
    _check(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "make / private")
    for path in (b"/", b"/dev"):
        _check(libc.mount(b"none", path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, None),
               f"make {path.decode()} read-only")
    opts = f"size={tmp_bytes},mode=1777".encode()
    _check(libc.mount(b"tmpfs", b"/tmp", b"tmpfs", MS_NOSUID | MS_NODEV, opts), "mount /tmp")
    if os.path.isdir("/dev/shm"):
        _check(libc.mount(b"tmpfs", b"/dev/shm", b"tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, opts),
               "mount /dev/shm")
    _check(libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None), "mount /proc")


def block_user_namespaces() -> None:
    """No new user namespaces (where a process would get capabilities back) in this sandbox."""
    try:
        with open("/proc/sys/user/max_user_namespaces", "w") as f:
            f.write("0")
    except OSError:
        pass


def enter_namespaces(sock: socket.socket, tmp_bytes: int) -> None:
    """Become PID 1 of new mount, PID, network, IPC and UTS namespaces; the parent stays as the waiter."""
    _check(libc.unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS), "unshare")
    pid = os.fork()
    if pid:
        sock.close()
        wait_and_pass_on(pid)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # die with the waiter (set again after a uid change)
    fresh_filesystem(tmp_bytes)
    block_user_namespaces()


def wait_and_pass_on(pid: int) -> None:
    """The waiter: kill PID 1 on SIGTERM; once it is gone (and its namespace with it), exit the same way."""
    def stop(*_):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass

    signal.signal(signal.SIGTERM, stop)
    quiet()
    _, status = os.waitpid(pid, 0)
    pass_on(status)


def pass_on(status: int) -> None:
    """Exit the way the waited-for process did (same code, or same signal)."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status) & 0xFF)


def tasks_of(uid: int) -> int:
    """Processes and threads of `uid` in this PID namespace (what RLIMIT_NPROC counts)."""
    count = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.stat(f"/proc/{name}").st_uid == uid:
                    count += len(os.listdir(f"/proc/{name}/task"))
            except OSError:
                pass
    return count


def vm_size(field: str = "VmData") -> int:
    """This process's `field` of /proc/self/status (VmData: heap and private writable mappings), in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def set_limits(limits: dict) -> None:
    """Apply the rlimits named in `limits` (bytes, seconds or counts).

    `data_extra` is host memory on top of what the warm process uses now,
    enforced as RLIMIT_DATA: it bounds heap and private writable mappings
    (every tensor on the CPU) but not the address space CUDA reserves at start
    (which RLIMIT_AS would refuse). `as_extra` does the same with RLIMIT_AS.
    """
    limits = dict(limits)
    if limits.get("data_extra"):
        limits["data"] = vm_size("VmData") + limits.pop("data_extra")
    if limits.get("as_extra"):
        limits["as"] = vm_size("VmSize") + limits.pop("as_extra")
    for name, value in limits.items():
        if value is not None and name in LIMITS:
            resource.setrlimit(LIMITS[name], (int(value), int(value)))


def quiet() -> None:
    """Point stdin, stdout and stderr at /dev/null: nothing the student writes reaches the zygote's log."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)


def isolate(sock: socket.socket, spec: dict) -> str:
    """Apply spawn request `spec`'s isolation to this freshly forked process; return its home folder."""
    os.setsid()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    limits = dict(spec.get("limits", {}))
    uid = spec.get("uid")
    if limits.get("nproc"):  # RLIMIT_NPROC counts what the uid runs already: add that
        limits["nproc"] += tasks_of(os.getuid() if uid is None else uid)
    if spec.get("isolation") == "namespaces":
        enter_namespaces(sock, spec.get("tmp_bytes", 256 << 20))
        home = "/tmp"
    else:
        home = spec["tmp"]
    parent = os.getppid()
    set_limits(limits)
    drop_privileges(uid, spec.get("gid"), tuple(spec.get("keep", ())))
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # after the uid change, which clears it
    if os.getppid() != parent:  # the parent died before that
        os._exit(71)
    os.chdir(home)
    os.environ.update(HOME=home, TMPDIR=home, MPLCONFIGDIR=home)
    tempfile.tempdir = home  # the zygote may have cached another one
    return home


def child(sock: socket.socket, spec: dict, serve: Callable) -> None:
    """Isolate this freshly forked process, then serve one submission; never return."""
    try:
        isolate(sock, spec)
        quiet()
        serve(sock)
    except BaseException as exc:  # noqa: BLE001 - report, never return into the zygote loop
        try:
            sys.__stderr__.write(f"sandbox child failed: {type(exc).__name__}: {exc}\n")
            sys.__stderr__.flush()
        except Exception:
            pass
        os._exit(70)
    os._exit(0)


# ---------------------------------------------------------------- the zygote's bookkeeping
ACTIVE: dict[int, dict] = {}  # running children: pid -> their spawn request
STATUS: dict[int, int] = {}  # exit statuses of reaped children, by pid


def reap() -> None:
    """Collect finished children (and re-parented orphans) so they do not linger as zombies."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if pid in ACTIVE:
            STATUS[pid] = status


def wait_exit(pid: int, timeout: float) -> int | None:
    """The exit status of child `pid` once it has ended, or None if it still runs after `timeout` s."""
    deadline = time.monotonic() + timeout
    try:
        fd = os.pidfd_open(pid)
    except (OSError, AttributeError):
        fd = None
    try:
        while True:
            reap()
            if pid in STATUS:
                return STATUS.pop(pid)
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            if fd is not None:
                select.select([fd], [], [], left)
            else:
                time.sleep(min(left, 0.005))
    finally:
        if fd is not None:
            os.close(fd)


def describe(status: int | None) -> dict:
    """{"code": n} or {"signal": n}; {} for a process that still runs."""
    if status is None:
        return {}
    if os.WIFSIGNALED(status):
        return {"signal": os.WTERMSIG(status)}
    return {"code": os.waitstatus_to_exitcode(status)}


def process_tree() -> dict[int, list[int]]:
    """Parent pid -> child pids of every live (not zombie) process this namespace shows."""
    tree: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if fields[0] != "Z":
                tree.setdefault(int(fields[1]), []).append(int(name))
    return tree


def descendants(tree: dict[int, list[int]], roots: list[int]) -> list[int]:
    """`roots` and everything below them in `tree`."""
    out, todo = [], list(roots)
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(tree.get(pid, ()))
    return out


def kill_strays(rounds: int = 500) -> None:
    """Kill the processes re-parented to the zygote that belong to no running submission, and their children."""
    for _ in range(rounds):
        reap()
        tree = process_tree()
        victims = descendants(tree, [p for p in tree.get(os.getpid(), ()) if p not in ACTIVE])
        if not victims:
            return
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.002)


def live_processes_of(uid: int) -> list[int]:
    """Pids of the processes of `uid` that are not zombies (this process left out)."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid():
            try:
                if os.stat(f"/proc/{name}").st_uid != uid:
                    continue
                with open(f"/proc/{name}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] != "Z":
                        found.append(int(name))
            except (OSError, IndexError):
                pass
    return found


def kill_uid(uid: int, rounds: int = 1000) -> None:
    """Kill every process of `uid` (a submission's own uid), from a helper that takes that uid and no capability."""
    if not uid:
        raise ValueError("refusing to kill every process of uid 0")
    pid = os.fork()
    if pid == 0:
        try:
            os.setresuid(uid, uid, uid)
            if capabilities() == 0 and os.getuid() == uid:  # without CAP_KILL, kill(-1) reaches only `uid`
                for _ in range(rounds):
                    os.kill(-1, signal.SIGKILL)
                    if not live_processes_of(uid):
                        break
                    time.sleep(0.001)
        except ProcessLookupError:  # none left
            pass
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def private_tmp(uid: int | None) -> str:
    """A fresh temporary folder only the submission's uid may use (process mode)."""
    path = owned_tempdir("autograder-student-")
    if uid is not None:
        os.chown(path, uid, uid)
    return path


def spawn(control: socket.socket, req: dict, fd: int, serve: Callable) -> int:
    """Fork a child for request `req`, serving the socket `fd`; return its pid."""
    sock = socket.socket(fileno=fd)
    spec = dict(req)
    if spec.get("isolation") != "namespaces":
        spec["tmp"] = private_tmp(spec.get("uid"))
    pid = os.fork()
    if pid == 0:
        control.close()
        child(sock, spec, serve)
    sock.close()
    ACTIVE[pid] = spec
    return pid


def end(pid: int, grace: float) -> dict:
    """Let child `pid` exit within `grace` s, else kill it; then kill everything it left. How it ended."""
    spec = ACTIVE.get(pid)
    if spec is None:
        return {"unknown": True}
    status = wait_exit(pid, grace)
    killed = status is None
    if killed:
        if spec.get("isolation") == "namespaces":
            os.kill(pid, signal.SIGTERM)  # the waiter kills PID 1 and waits for the namespace to empty
        else:
            for kill in (os.killpg, os.kill):
                try:
                    kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        status = wait_exit(pid, 10.0)
        if status is None:
            os.kill(pid, signal.SIGKILL)
            status = wait_exit(pid, 10.0)
    ACTIVE.pop(pid, None)
    if spec.get("isolation") != "namespaces":
        clean_up(spec)
    return {**describe(status), "killed": killed}


def clean_up(spec: dict) -> None:
    """Process mode: kill what a finished child left running, remove its temporary folder."""
    if spec.get("uid"):
        kill_uid(spec["uid"])
    kill_strays()
    shutil.rmtree(spec["tmp"], ignore_errors=True)


def preload() -> None:
    """Import what most notebooks import, once, before any fork."""
    import torch  # noqa: F401
    for name in ("numpy", "matplotlib.pyplot", "IPython.core.inputtransformer2", "attnkit",
                 "attnkit.data", "attnkit.train", "attnkit.plot"):
        try:
            __import__(name)
        except Exception:
            pass


def handle(control: socket.socket, req: dict, fds: list, serve: Callable) -> dict:
    """Answer one request of the trusted side."""
    op = req.get("op")
    if op == "spawn":
        return {"pid": spawn(control, req, fds[0], serve)}
    if op == "end":
        return end(req["pid"], float(req.get("grace", 0)))
    if op == "kill":
        return end(req["pid"], 0.0)
    if op == "status":
        reap()
        return describe(STATUS.get(req["pid"])) if req["pid"] in STATUS else {}
    raise ValueError(f"unknown request {op!r}")


def run(control: socket.socket, serve: Callable) -> None:
    """Answer `spawn`, `end` and `status` requests until the trusted side hangs up or says `exit`."""
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    preload()
    gc.collect()
    gc.freeze()  # what was imported stays out of every child's collections: no copy-on-write of its pages
    control.sendall(b'{"ready": true}')
    while True:
        msg, fds, _, _ = socket.recv_fds(control, 65536, 1)
        if not msg:
            return
        req = json.loads(msg)
        if req.get("op") == "exit":
            return
        try:
            reply = handle(control, req, fds, serve)
        except Exception as exc:  # noqa: BLE001 - the zygote outlives a bad request
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        control.sendall(json.dumps(reply).encode())
