"""A warm process that forks one isolated child per submission.

It runs inside the sandbox (copied there with `worker.py`), imports torch
once, then waits on its control socket. For each `spawn` request it forks a
child that isolates itself and serves one submission on the socket passed
with the request:

- "namespaces" (inside bubblewrap): the child gets its own mount and PID
  namespaces, a fresh /tmp and /proc, and drops every capability for good
  (bounding set, securebits, no_new_privs), so nothing it starts can
  outlive it or undo the sandbox. Killing it kills its PID namespace.
- "process" (the fallback): the child gets its own session and process
  group, and is killed by group.

In both, rlimits bound memory, CPU time, processes and file sizes.
"""
from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import socket
import sys
from typing import Callable

CLONE_NEWNS, CLONE_NEWPID = 0x00020000, 0x20000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 2, 4, 8, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_SECUREBITS, PR_SET_NO_NEW_PRIVS = 1, 24, 28, 38
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
SECURE_LOCKED_NOROOT = 0x2F  # NOROOT, NO_SETUID_FIXUP and KEEP_CAPS, each locked
LIMITS = {"as": resource.RLIMIT_AS, "cpu": resource.RLIMIT_CPU, "fsize": resource.RLIMIT_FSIZE,
          "nproc": resource.RLIMIT_NPROC, "nofile": resource.RLIMIT_NOFILE, "core": resource.RLIMIT_CORE}

libc = ctypes.CDLL(None, use_errno=True)


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def drop_capabilities() -> None:
    """Give up every capability, including the power to get them back through exec."""
    for cap in range(64):
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)  # EINVAL past the last cap: ignored
    _check(libc.prctl(PR_SET_SECUREBITS, SECURE_LOCKED_NOROOT, 0, 0, 0), "securebits")
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                    ("inheritable", ctypes.c_uint32)]

    _check(libc.capset(ctypes.byref(Header(0x20080522, 0)), ctypes.byref((Data * 2)())), "capset")


def fresh_filesystem() -> None:
    """A private mount table with an empty /tmp and this PID namespace's /proc."""
    _check(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "make / private")
    _check(libc.mount(b"tmpfs", b"/tmp", b"tmpfs", MS_NOSUID | MS_NODEV, b"size=256m,mode=1777"), "mount /tmp")
    _check(libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None), "mount /proc")


def address_space() -> int:
    """This process's mapped address space, in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def set_limits(limits: dict) -> None:
    """Apply the rlimits named in `limits` (bytes, seconds or counts); `as_extra` is on top of what is mapped now."""
    limits = dict(limits)
    if limits.get("as_extra"):
        limits["as"] = address_space() + limits.pop("as_extra")
    for name, value in limits.items():
        if value is not None and name in LIMITS:
            resource.setrlimit(LIMITS[name], (int(value), int(value)))


def enter_namespaces() -> None:
    """Become PID 1 of a new PID namespace; the parent stays behind only to wait."""
    _check(libc.unshare(CLONE_NEWNS | CLONE_NEWPID), "unshare")
    parent = os.getpid()
    pid = os.fork()
    if pid:
        pass_on(os.waitpid(pid, 0)[1])
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent and os.getppid() != 0:
        os._exit(1)
    fresh_filesystem()
    drop_capabilities()


def pass_on(status: int) -> None:
    """Exit the way the waited-for process did (same code, or same signal)."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status) & 0xFF)


def child(sock: socket.socket, spec: dict, serve: Callable) -> None:
    """Isolate this freshly forked process, then serve one submission."""
    try:
        os.setsid()
        if spec.get("isolation") == "namespaces":
            enter_namespaces()
        os.chdir("/tmp")
        set_limits(spec.get("limits", {}))
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        serve(sock)
    except BaseException as exc:  # noqa: BLE001 - report, never return into the zygote loop
        try:
            sys.__stderr__.write(f"sandbox child failed: {type(exc).__name__}: {exc}\n")
        except Exception:
            pass
        os._exit(70)
    os._exit(0)


STATUS: dict[int, int] = {}  # exit statuses of reaped children, by pid


def reap() -> None:
    """Collect finished children so they do not linger as zombies."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        STATUS[pid] = status


def status_of(pid: int, wait: float = 0.5) -> dict:
    """How child `pid` ended: {"code": n} or {"signal": n}, or {} if it still runs."""
    import time
    deadline = time.monotonic() + wait
    while pid not in STATUS and time.monotonic() < deadline:
        reap()
        time.sleep(0.01)
    status = STATUS.pop(pid, None)
    if status is None:
        return {}
    if os.WIFSIGNALED(status):
        return {"signal": os.WTERMSIG(status)}
    return {"code": os.waitstatus_to_exitcode(status)}


def preload() -> None:
    """Import what most notebooks import, once, before any fork."""
    import torch  # noqa: F401
    for name in ("numpy", "matplotlib.pyplot", "IPython.core.inputtransformer2", "attnkit",
                 "attnkit.data", "attnkit.train", "attnkit.plot"):
        try:
            __import__(name)
        except Exception:
            pass


def run(control: socket.socket, serve: Callable) -> None:
    """Answer `spawn` (fork a child for the passed socket) and `kill` until told to exit."""
    preload()
    control.sendall(b'{"ready": true}')
    while True:
        msg, fds, _, _ = socket.recv_fds(control, 65536, 1)
        if not msg:
            return
        req = json.loads(msg)
        reap()
        if req["op"] == "spawn":
            sock = socket.socket(fileno=fds[0])
            pid = os.fork()
            if pid == 0:
                control.close()
                child(sock, req, serve)
            sock.close()
            control.sendall(json.dumps({"pid": pid}).encode())
        elif req["op"] == "kill":
            kill(req["pid"], req.get("isolation"))
            control.sendall(b'{"killed": true}')
        elif req["op"] == "status":
            control.sendall(json.dumps(status_of(req["pid"])).encode())
        elif req["op"] == "exit":
            return


def kill(pid: int, isolation: str | None) -> None:
    """Kill a child and everything it started."""
    try:
        if isolation == "namespaces":
            os.kill(pid, signal.SIGKILL)  # its PID 1 dies by PDEATHSIG, and the namespace with it
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    reap()
