"""The trusted side's handle on a student's notebook: the `student` fixture.

`StudentProcess` runs the submission's cells in a sandboxed process and
forwards the graders' calls to it. Replies are read with
`torch.load(weights_only=True)`. If the process dies or runs too long, the
call raises `StudentError` with a message that says what happened and where,
and the next call starts a fresh process (the notebook runs again).
"""
from __future__ import annotations

import signal
import socket
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from autograder import wire
from autograder.check import GradingFailure
from autograder.sandbox import Sandbox

SKIP_TAGS = ("skip-grading",)


class StudentError(GradingFailure):
    """The student's code raised, was missing, ran too long or killed its process."""


@dataclass
class Unsupported:
    """A value the student returned that cannot cross the boundary (e.g. a numpy array)."""

    kind: str
    text: str

    def __repr__(self) -> str:
        return f"<{self.kind}: {self.text}>"


@dataclass
class Call:
    """What a call of a student function gave back."""

    value: Any
    inputs: list = field(default_factory=list)
    grads: list = field(default_factory=list)
    devices: list = field(default_factory=list)
    stdout: str = ""


@dataclass
class ModuleCall:
    """What building and calling a student module gave back."""

    value: Any
    attrs: dict = field(default_factory=dict)
    param_grads: dict = field(default_factory=dict)
    devices: list = field(default_factory=list)
    state_keys: list = field(default_factory=list)
    stdout: str = ""


def revive(obj: Any) -> Any:
    """Replace the worker's `__unsupported__` markers with `Unsupported` objects."""
    if isinstance(obj, dict):
        if "__unsupported__" in obj:
            return Unsupported(str(obj["__unsupported__"]), str(obj.get("repr", "")))
        return {k: revive(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [revive(x) for x in obj]
    if isinstance(obj, tuple):
        return tuple(revive(x) for x in obj)
    return obj


def how_it_ended(status: dict, limits) -> str:
    """Words for a process's end, e.g. 'was killed by SIGSEGV (a crash)'."""
    if "signal" in status:
        sig = status["signal"]
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else f"signal {sig}"
        why = {"SIGSEGV": " (a crash)", "SIGXCPU": f" (more than {limits.cpu_seconds} s of CPU time)",
               "SIGKILL": " (killed: out of memory, or killed by the grader)",
               "SIGXFSZ": " (wrote a file over the size limit)"}.get(name, "")
        return f"was killed by {name}{why}"
    if "code" in status:
        return f"exited with code {status['code']}"
    return "stopped answering"


class StudentProcess:
    """A submission's notebook, running in a sandbox, callable from graders."""

    def __init__(self, sandbox: Sandbox, cells: list[dict], seed: int = 0) -> None:
        self.sandbox, self.cells, self.seed = sandbox, cells, seed
        self.sock: socket.socket | None = None
        self.pid: int | None = None
        self.report: dict | None = None  # the first load's cell errors and names
        self.load_failure: str | None = None
        self.restarts = 0
        self.printed: list[str] = []  # what the student's code printed during calls

    # ------------------------------------------------------------ lifecycle
    def _start(self) -> None:
        if self.load_failure:
            raise StudentError(self.load_failure)
        self.sock, self.pid = self.sandbox.spawn()
        try:
            self.sock.settimeout(self.sandbox.limits.load_seconds)
            wire.send(self.sock, {"cells": self.cells, "skip_tags": list(SKIP_TAGS), "seed": self.seed})
            reply = wire.recv(self.sock)
        except socket.timeout:
            self.load_failure = (f"running your notebook's cells took longer than "
                                 f"{self.sandbox.limits.load_seconds:g} s")
            self._kill()
            raise StudentError(self.load_failure) from None
        except (wire.WireError, OSError):
            ended = self._kill()
            self.load_failure = f"your notebook's process {how_it_ended(ended, self.sandbox.limits)} while its cells ran"
            raise StudentError(self.load_failure) from None
        if self.report is None:
            self.report = revive(reply)

    def _kill(self) -> dict:
        status: dict = {}
        if self.pid is not None:
            try:
                status = self.sandbox.kill(self.pid)
            except (RuntimeError, OSError):
                pass
        if self.sock is not None:
            self.sock.close()
        self.sock, self.pid = None, None
        return status

    def close(self) -> None:
        """End the student process."""
        if self.sock is not None:
            try:
                wire.send(self.sock, {"op": "bye"})
            except OSError:
                pass
        self._kill()

    def loaded(self) -> dict:
        """The load report: {"cells": [errors...], "names": [...]} (starts the process if needed)."""
        if self.report is None and self.load_failure is None:
            try:
                self._start()
            except StudentError:
                pass
        return self.report or {"cells": [], "names": []}

    # ------------------------------------------------------------ requests
    def _request(self, req: dict, what: str) -> dict:
        if self.sock is None:
            self._start()
        req.setdefault("seed", self.seed)
        timeout = req.pop("timeout", None) or self.sandbox.limits.call_seconds
        started = time.monotonic()
        try:
            self.sock.settimeout(timeout)
            wire.send(self.sock, req)
            reply = wire.recv(self.sock)
        except socket.timeout:
            self._kill()
            self.restarts += 1
            raise StudentError(f"ran longer than {timeout:g} s in `{what}`") from None
        except (wire.WireError, OSError) as exc:
            ended = self._kill()
            self.restarts += 1
            detail = "" if isinstance(exc, wire.WireError) and "closed" in str(exc) else f" ({exc})"
            raise StudentError(f"your process {how_it_ended(ended, self.sandbox.limits)} in `{what}`{detail}") from None
        reply = revive(reply)
        reply["seconds"] = time.monotonic() - started
        if reply.get("stdout") and sum(map(len, self.printed)) < 8000:
            self.printed.append(f"[during `{what}`]\n{reply['stdout']}")
        if not reply.get("ok"):
            raise StudentError(self._error_text(reply, what))
        return reply

    def _error_text(self, reply: dict, what: str) -> str:
        if reply.get("kind") == "missing":
            return (f"`{what}` is not defined in your notebook (check the cell that defines it ran "
                    f"without an error, and its name)")
        if reply.get("type") == "NotImplementedError":
            return f"`{what}` raised NotImplementedError: it is not implemented yet"
        text = f"`{what}` raised {reply.get('type')}: {reply.get('message')}"
        if reply.get("traceback"):
            text += "\n" + reply["traceback"]
        return text

    # ------------------------------------------------------------ the graders' API
    def has(self, name: str) -> bool:
        """Whether the notebook defined `name`."""
        return name in self.loaded().get("names", [])

    def call(self, name: str, args: tuple = (), kwargs: dict | None = None, *, device: str | None = None,
             grad_wrt: tuple = (), cotangent: torch.Tensor | None = None, timeout: float | None = None) -> Call:
        """Call student function `name`; see docs/AUTHORING.md."""
        reply = self._request({"op": "call", "name": name, "args": tuple(args), "kwargs": kwargs or {},
                               "device": device, "grad_wrt": tuple(grad_wrt), "cotangent": cotangent,
                               "timeout": timeout}, name)
        return Call(reply["value"], reply.get("inputs", []), reply.get("grads", []),
                    reply.get("devices", []), reply.get("stdout", ""))

    def module(self, name: str, init_args: tuple = (), init_kwargs: dict | None = None, *,
               state_dict: dict | None = None, method: str = "__call__", args: tuple = (),
               kwargs: dict | None = None, attrs: tuple = (), grad: bool = False,
               cotangent: torch.Tensor | None = None, device: str | None = None, train: bool = False,
               timeout: float | None = None) -> ModuleCall:
        """Build student module `name`, load `state_dict`, call `method`; see docs/AUTHORING.md."""
        reply = self._request({"op": "module", "name": name, "init_args": tuple(init_args),
                               "init_kwargs": init_kwargs or {}, "state_dict": state_dict,
                               "method": method, "args": tuple(args), "kwargs": kwargs or {},
                               "attrs": tuple(attrs), "grad": grad, "cotangent": cotangent,
                               "device": device, "train": train, "timeout": timeout}, name)
        return ModuleCall(reply["value"], reply.get("attrs", {}), reply.get("param_grads", {}),
                          reply.get("devices", []), reply.get("state_keys", []), reply.get("stdout", ""))

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda *args, **kwargs: self.call(name, args, kwargs).value
