"""The trusted side's handle on a student's notebook: the `student` fixture.

`StudentProcess` runs the submission's cells in a sandboxed process and
forwards the graders' calls to it. Replies are decoded by `wire` (JSON and
raw tensor bytes, never pickle) and rebuilt field by field: the student
process may send anything. If the process dies or runs too long, the
call raises `StudentError` with a message that says what happened and where,
and the next call starts a fresh process (the notebook runs again).
"""
from __future__ import annotations

import re
import signal
import socket
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from autograder.harness import wire
from autograder.harness.check import GradingFailure
from autograder.harness.sandbox import Sandbox
from autograder.harness.worker import cell_number, first_line

SKIP_TAGS = ("skip-grading",)
MAX_BAD_CELLS = 3  # cells that may hang or kill the process before the notebook counts as unrunnable


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
    param_keys: list = field(default_factory=list)


def revive(obj: Any) -> Any:
    """Replace the worker's `__unsupported__` markers with `Unsupported` objects."""
    if isinstance(obj, dict) and all(isinstance(k, str) for k in obj):
        if "__unsupported__" in obj:
            return Unsupported(str(obj["__unsupported__"]), str(obj.get("repr", "")))
        return {k: revive(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [revive(x) for x in obj]
    if isinstance(obj, tuple):
        return tuple(revive(x) for x in obj)
    return obj


CONTROL_CHARS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")  # all but tab and newline
MEMORY_WORDS = ("MemoryError", "can't allocate memory", "out of memory", "std::bad_alloc")


def text(value: Any, limit: int) -> str:
    """A string the student process sent, cut to `limit` characters and without control characters."""
    if not isinstance(value, str):
        return ""
    value = CONTROL_CHARS.sub("", value)
    return value if len(value) <= limit else value[:limit] + " [...]"


def clean_report(reply: Any) -> dict:
    """The load report, rebuilt from checked parts: the student process may send anything."""
    if not isinstance(reply, dict):
        raise wire.WireError("the load report is not a dict")
    cells = reply.get("cells") if isinstance(reply.get("cells"), list) else []
    names = reply.get("names") if isinstance(reply.get("names"), list) else []
    return {"cells": [{"cell": c["cell"] if type(c.get("cell")) is int else -1, "line": text(c.get("line"), 80),
                       "error": text(c.get("error"), 100), "message": text(c.get("message"), 500),
                       "traceback": text(c.get("traceback"), 2000), "output": text(c.get("output"), 2000)}
                      for c in cells[:50] if isinstance(c, dict)],
            "names": [n[:200] for n in names[:10000] if isinstance(n, str)],
            "cuda": reply.get("cuda") is True}


def clean_reply(reply: Any) -> dict:
    """A call's reply, rebuilt from checked parts; values come back as they are (tensors, numbers, ...)."""
    if not isinstance(reply, dict):
        raise wire.WireError("the reply is not a dict")
    out = {"ok": reply.get("ok") is True, "kind": text(reply.get("kind"), 20),
           "type": text(reply.get("type"), 100), "message": text(reply.get("message"), 1000),
           "traceback": text(reply.get("traceback"), 2000), "stdout": text(reply.get("stdout"), 4000)}
    for key in ("value", "inputs", "grads", "attrs", "param_grads"):
        out[key] = revive(reply.get(key))
    for key in ("devices", "state_keys", "param_keys"):
        items = reply.get(key)
        out[key] = [x for x in items if isinstance(x, str)] if isinstance(items, list) else []
    busy = reply.get("busy")  # the student process's own account of the call: for benchmarks only
    out["busy"] = float(busy) if type(busy) in (int, float) and 0 <= busy < 1e6 else 0.0
    out["inputs"] = out["inputs"] if isinstance(out["inputs"], list) else []
    out["grads"] = out["grads"] if isinstance(out["grads"], list) else []
    for key in ("attrs", "param_grads"):
        out[key] = out[key] if isinstance(out[key], dict) else {}
    return out


def how_it_ended(status: dict, limits) -> str:
    """Words for a process's end, e.g. 'crashed (SIGSEGV, a segmentation fault)'."""
    if status.get("killed"):
        return "stopped answering (it closed its connection to the grader) and was stopped"
    if status.get("sandbox_died"):
        return "stopped because the sandbox around it died (did your code kill its parent process?)"
    if "signal" in status:
        sig = status["signal"]
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else f"signal {sig}"
        return {"SIGSEGV": "crashed (SIGSEGV, a segmentation fault)",
                "SIGBUS": "crashed (SIGBUS, a bad memory access)",
                "SIGABRT": "aborted (SIGABRT; often a failed memory allocation)",
                "SIGXCPU": f"was stopped after {limits.cpu_seconds} s of CPU time (SIGXCPU)",
                "SIGXFSZ": f"was stopped for writing a file over {limits.file_bytes >> 20} MiB (SIGXFSZ)",
                "SIGKILL": "was killed (SIGKILL: it ran out of memory, or your code killed it)",
                }.get(name, f"was killed by {name}")
    if "code" in status:
        return f"exited with code {status['code']} (os._exit(), or a library that ended the process)"
    return "stopped answering"


class StudentProcess:
    """A submission's notebook, running in a sandbox, callable from graders.

    Every call has a wall-clock limit (`Limits.call_seconds`), and all calls
    and restarts of one submission together share `Limits.submission_seconds`.
    """

    def __init__(self, sandbox: Sandbox, cells: list[dict], seed: int = 0) -> None:
        self.sandbox, self.cells, self.seed = sandbox, cells, seed
        self.limits = sandbox.limits
        self.deadline = time.monotonic() + self.limits.submission_seconds
        self.sock: socket.socket | None = None
        self.pid: int | None = None
        self.report: dict | None = None  # the first load's cell errors and names
        self.load_failure: str | None = None
        self.bad_cells: dict[int, str] = {}  # cells that hung or ended the process, skipped in later runs
        self.restarts = 0
        self.printed: list[str] = []  # what the student's code printed during calls

    # ------------------------------------------------------------ lifecycle
    def _time_left(self, want: float, what: str) -> float:
        """`want` seconds, or what is left of the submission's budget if less; fail if none is left."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise StudentError(self._out_of_time(what))
        return min(want, left)

    def _out_of_time(self, what: str) -> str:
        return (f"grading stopped at `{what}`: your submission used up its "
                f"{self.limits.submission_seconds:g} s of grading time")

    def _start(self) -> None:
        """Start a student process and run the notebook's cells in it.

        A cell that hangs past the per-cell limit and ignores the interrupt, or
        that ends its process (os._exit, a segfault, the memory limit), costs
        only itself: the notebook is run again in a fresh process without it
        (at most MAX_BAD_CELLS times). The normal path forks once.
        """
        if self.load_failure:
            raise StudentError(self.load_failure)
        budget = self._time_left(self.limits.load_seconds, "loading your notebook")
        spent = [0.0]  # the cells' running time over all runs (not the sandbox's start)
        while True:
            bad = self._load_once(budget, spent)
            if bad is None:
                return
            cell, how = bad
            self.bad_cells[cell] = how
            if len(self.bad_cells) > MAX_BAD_CELLS:
                self.load_failure = f"{len(self.bad_cells)} cells of your notebook stopped its process ({how})"
                raise StudentError(self.load_failure)

    def _load_once(self, budget: float, spent: list[float]) -> tuple[int, str] | None:
        """One run of the cells; None when it loaded, else (the fatal cell, what happened)."""
        cell_limit = self.limits.cell_seconds + self.limits.cell_grace_seconds if self.limits.cell_seconds else None
        self.sock, self.pid = self.sandbox.spawn()
        started = time.monotonic()
        deadline = min(started + budget - spent[0], self.deadline)
        current, since = None, started
        try:
            wire.send(self.sock, {"cells": self.cells, "skip_tags": list(SKIP_TAGS), "seed": self.seed,
                                 "gpu_memory_bytes": self.limits.gpu_memory_bytes,
                                 "cell_seconds": self.limits.cell_seconds, "skip_cells": sorted(self.bad_cells)})
            while True:
                wait = deadline - time.monotonic()
                if current is not None and cell_limit:
                    wait = min(wait, since + cell_limit - time.monotonic())
                self.sock.settimeout(max(wait, 0.001))
                message = wire.recv(self.sock)
                if isinstance(message, dict) and type(message.get("progress")) is int and "cells" not in message:
                    current, since = message["progress"], time.monotonic()
                    continue
                report = clean_report(message)
                break
        except socket.timeout:
            self._end(0.0)
            spent[0] += time.monotonic() - started
            if current is None or time.monotonic() >= deadline - 0.01:
                self.load_failure = f"running your notebook's cells took longer than {budget:g} s"
                raise StudentError(self.load_failure) from None
            return current, (f"ran longer than {self.limits.cell_seconds:g} s and did not stop when "
                             "interrupted; its process was killed")
        except (wire.WireError, OSError) as exc:
            ended = self._end(1.0 if _closed(exc) else 0.0)
            spent[0] += time.monotonic() - started
            how = how_it_ended(ended, self.limits) if _closed(exc) else f"sent back something unreadable ({exc})"
            if current is None or not _closed(exc):
                self.load_failure = f"your notebook's process {how} while its cells ran"
                raise StudentError(self.load_failure) from None
            return current, f"its process {how}"
        if self.report is None:
            skipped = [{"cell": cell_number(self.cells[i], i), "line": first_line(self.cells[i].get("source", "")),
                        "error": "Skipped", "message": f"this cell {how}; the notebook was run again without it",
                        "traceback": "", "output": ""} for i, how in self.bad_cells.items()]
            report["cells"] = sorted(report["cells"] + skipped, key=lambda c: c["cell"])
            self.report = report
        return None

    def _end(self, grace: float) -> dict:
        """End the student process (waiting `grace` s for it to exit by itself); how it ended."""
        status: dict = {}
        if self.pid is not None:
            try:
                status = self.sandbox.end(self.pid, grace)
            except (RuntimeError, OSError):
                pass
        if self.sock is not None:
            self.sock.close()
        self.sock, self.pid = None, None
        return status

    def _kill(self) -> dict:
        return self._end(0.0)

    def close(self) -> None:
        """End the student process, and everything it started."""
        grace = 0.0
        if self.sock is not None:
            try:
                wire.send(self.sock, {"op": "bye"})
                grace = 1.0
            except OSError:
                pass
        self._end(grace)

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
        want = req.pop("timeout", None) or self.limits.call_seconds
        timeout = self._time_left(want, what)
        message = wire.frame(req)  # an argument that cannot be sent is the grader's error, raised here
        started = time.monotonic()
        try:
            self.sock.settimeout(timeout)
            self.sock.sendall(message)
            reply = clean_reply(wire.recv(self.sock))
        except socket.timeout:
            self._end(0.0)
            self.restarts += 1
            if timeout < want:
                raise StudentError(self._out_of_time(what)) from None
            raise StudentError(f"ran longer than {timeout:g} s in `{what}` and was stopped; "
                               "the next tests run in a fresh process") from None
        except (wire.WireError, OSError) as exc:
            ended = self._end(1.0 if _closed(exc) else 0.0)
            self.restarts += 1
            how = how_it_ended(ended, self.limits) if _closed(exc) else f"sent back something unreadable ({exc})"
            raise StudentError(f"your process {how} in `{what}`; the next tests run in a fresh process") from None
        reply["seconds"] = time.monotonic() - started
        if reply["stdout"] and sum(map(len, self.printed)) < 8000:
            self.printed.append(f"[during `{what}`]\n{reply['stdout']}")
        if not reply["ok"]:
            raise StudentError(self._error_text(reply, what))
        return reply

    def _error_text(self, reply: dict, what: str) -> str:
        if reply.get("kind") == "missing":
            return (f"`{what}` is not defined in your notebook (check the cell that defines it ran "
                    f"without an error, and its name)")
        if reply.get("type") == "NotImplementedError":
            return f"`{what}` raised NotImplementedError: it is not implemented yet"
        text = f"`{what}` raised {reply.get('type')}: {reply.get('message')}"
        if any(word in text for word in MEMORY_WORDS):
            gpu = "CUDA" in text
            limit = self.limits.gpu_memory_bytes if gpu else self.limits.memory_bytes
            where = "of GPU memory" if gpu else "beyond the loaded libraries"
            text = (f"`{what}` ran out of {'GPU ' if gpu else ''}memory: the grader allows "
                    f"{'no limit' if limit is None else f'{limit / 2**30:g} GiB'} {where}\n{text}")
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
                          reply.get("devices", []), reply.get("state_keys", []), reply.get("stdout", ""),
                          reply.get("param_keys", []))

    def replay(self, request: dict) -> dict:
        """Send a recorded request (a public check's `call` or `module` request) as it is; the checked
        reply: value, inputs, grads, attrs, param_grads, devices, state_keys, param_keys, stdout."""
        if request.get("op") not in ("call", "module"):
            raise ValueError(f"not a call or module request: {request.get('op')!r}")
        return self._request(dict(request), str(request.get("name")))

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda *args, **kwargs: self.call(name, args, kwargs).value


def _closed(exc: BaseException) -> bool:
    """Whether a socket error means the student process went away (rather than sent garbage)."""
    return isinstance(exc, OSError) or "connection closed" in str(exc)


def cuda_usable(sandbox: Sandbox) -> bool:
    """Whether a student process of `sandbox` can really use CUDA (probed once, in a fresh child, and kept
    as `sandbox.cuda`).

    False without a GPU, without asking the sandbox. Where it is False, the CUDA tests run on the
    simulated CUDA device (`simulated_cuda`), so they count on every machine.
    """
    if sandbox.cuda is None:
        sandbox.cuda = False
        if torch.cuda.is_available():
            probe = StudentProcess(sandbox, [])
            try:
                sandbox.cuda = bool(probe.loaded().get("cuda"))
            finally:
                probe.close()
    return sandbox.cuda
