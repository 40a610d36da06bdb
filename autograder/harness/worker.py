"""The student side: run a submission's cells, then answer the grader's calls.

This file runs inside the sandbox (it is copied there with `wire.py` and
`simulated_cuda.py`): it imports only the standard library, torch and those two. It never sees the
graders or the reference solution; it receives inputs, calls the student's
code and sends back plain tensors, numbers and strings.
"""
from __future__ import annotations

import __future__
import contextlib
import io
import linecache
import os
import random
import re
import signal
import socket
import sys
import time
import traceback
from typing import Any, Callable

import torch

try:
    import wire
    from simulated_cuda import is_cuda, simulated_cuda
except ImportError:  # imported as part of the autograder package (the reference)
    from autograder.harness import wire
    from autograder.harness.simulated_cuda import is_cuda, simulated_cuda

STDOUT_LIMIT = 4000  # characters of the student's printed output kept per call
MAGIC_RUN = {"time", "timeit", "capture", "prun"}  # cell magics whose body still runs


FUTURE_FLAGS = 0
for _feature in __future__.all_feature_names:
    FUTURE_FLAGS |= getattr(__future__, _feature).compiler_flag


class CellCompiler:
    """Compiles cells as IPython does: without this file's own `from __future__ import annotations`
    (`dont_inherit=True`: a `def` whose annotations name an undefined name fails here as it fails
    under Restart & Run All), but with the `__future__` imports of the notebook's earlier cells."""

    def __init__(self) -> None:
        self.flags = 0

    def __call__(self, source: str, name: str):
        code = compile(source, name, "exec", self.flags, dont_inherit=True)
        self.flags |= code.co_flags & FUTURE_FLAGS
        return code


# ---------------------------------------------------------------- output capture
class BoundedText(io.TextIOBase):
    """A text sink that keeps the first `limit` characters and counts the rest."""

    def __init__(self, limit: int = STDOUT_LIMIT) -> None:
        self.limit, self.parts, self.size = limit, [], 0

    def write(self, s: str) -> int:
        if self.size < self.limit:
            self.parts.append(s[: self.limit - self.size])
        self.size += len(s)
        return len(s)

    def text(self) -> str:
        out = "".join(self.parts)
        return out + (f"\n... [{self.size - self.limit} more characters cut]" if self.size > self.limit else "")


@contextlib.contextmanager
def captured():
    """Route the student's stdout and stderr into one bounded buffer."""
    sink = BoundedText()
    old = sys.stdout, sys.stderr
    sys.stdout = sys.stderr = sink
    try:
        yield sink
    finally:
        sys.stdout, sys.stderr = old


# ---------------------------------------------------------------- IPython syntax
class ShellShim:
    """Stands in for `get_ipython()`: magics are ignored, timing magics run their code, `!` does nothing."""

    def __init__(self, ns: dict, compile_cell: Callable | None = None) -> None:
        self.ns, self.compile_cell = ns, compile_cell or CellCompiler()

    def run_line_magic(self, name: str, line: str) -> None:
        if name in MAGIC_RUN and line.strip():
            exec(self.compile_cell(line, "<magic>"), self.ns)

    def run_cell_magic(self, name: str, line: str, cell: str) -> None:
        if name in MAGIC_RUN:
            exec(self.compile_cell(cell, "<magic>"), self.ns)

    def system(self, cmd: str) -> None:
        return None

    def getoutput(self, cmd: str) -> list:
        return []

    def __getattr__(self, name: str) -> Callable:
        return lambda *a, **k: None


def to_python(source: str) -> str:
    """Cell source with IPython syntax (%magics, !shell, ?help) turned into plain Python."""
    if not re.search(r"^\s*[%!?]|\?\s*$", source, re.M):
        return source
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:  # no IPython: drop the lines that are not Python
        return "\n".join("pass" if re.match(r"\s*[%!]", ln) else ln for ln in source.splitlines())
    return TransformerManager().transform_cell(source)


# ---------------------------------------------------------------- running a notebook
def seed_all(seed: int) -> None:
    """The harness's seeds, set before the notebook and before every call."""
    random.seed(seed)
    if torch.cuda.is_available():
        torch.manual_seed(seed)  # the CPU generator and every GPU's
    else:  # the CPU generator alone: the same state as torch.manual_seed, without its lazy GPU, XPU and MTIA
        torch.default_generator.manual_seed(seed)  # seeding, which formats a stack trace each time (~0.3 ms)
    try:
        import numpy as np
        np.random.seed(seed)
    except ImportError:
        pass


def student_traceback(exc: BaseException) -> str:
    """The traceback's frames from the student's cells only."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.startswith("<cell")]
    lines = traceback.format_list(frames[-6:])
    return "".join(lines) + "".join(traceback.format_exception_only(type(exc), exc))[-1500:]


class CellTimeout(KeyboardInterrupt):
    """A top-level cell ran past the grader's per-cell limit (delivered like Ctrl-C, as Jupyter does)."""


@contextlib.contextmanager
def cell_timer(seconds: float | None):
    """Interrupt the code inside after `seconds` with CellTimeout (SIGALRM, in this process)."""
    if not seconds:
        yield
        return

    def interrupt(signum, frame):
        raise CellTimeout(f"stopped after {seconds:g} s, the grader's limit for one cell")

    old = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def cell_number(cell: dict, position: int) -> int:
    """The number a student sees: Jupyter users count every cell (markdown too) from 1. `index` is
    the cell's place in the notebook (`notebook.read_submission`); without it, its place in `cells`."""
    index = cell.get("index")
    return (index if type(index) is int else position) + 1


def first_line(source: str, limit: int = 60) -> str:
    """A cell's first non-blank line, cut to `limit` characters (to quote it in feedback)."""
    line = next((ln.strip() for ln in source.splitlines() if ln.strip()), "")
    return line if len(line) <= limit else line[: limit - 3] + "..."


def run_cells(cells: list, skip_tags: set, ns: dict, skip_cells: frozenset = frozenset(),
              cell_seconds: float | None = None, progress: Callable[[int], None] | None = None) -> list[dict]:
    """Execute code cells in order like "Restart & Run All"; a failing cell is recorded and skipped.

    Each error names its cell as a student counts it (`cell_number`: 1-based, markdown cells included)
    and quotes its first line; tracebacks name the cell's code `<cell N>` with that number.

    `progress(index)` is told before each cell runs (so the grader knows which cell a hang or a
    crash belongs to); a cell running past `cell_seconds` is interrupted and the next one runs;
    `skip_cells` are cells a previous run found fatal.
    """
    report = []
    compile_cell = CellCompiler()
    shell = ShellShim(ns, compile_cell)
    ns["get_ipython"] = lambda: shell
    for index, cell in enumerate(cells):
        if cell.get("cell_type") != "code" or skip_tags & set(cell.get("tags", ())) or index in skip_cells:
            continue
        if progress:
            progress(index)
        number = cell_number(cell, index)
        name = f"<cell {number}>"
        source = cell.get("source", "")
        linecache.cache[name] = (len(source), None, source.splitlines(True), name)
        with captured() as out:
            try:
                with cell_timer(cell_seconds):
                    exec(compile_cell(to_python(source), name), ns)
            except BaseException as exc:  # noqa: BLE001 - SystemExit too: the notebook goes on
                stopped = isinstance(exc, CellTimeout)
                report.append({"cell": number, "line": first_line(source), "error": "Interrupted" if stopped else type(exc).__name__,
                               "message": str(exc)[:500], "traceback": "" if stopped else student_traceback(exc),
                               "output": out.text()})
    return report


# ---------------------------------------------------------------- calls
def build_arg(obj: Any) -> Any:
    """Turn the grader's callable descriptions into callables; move nothing else."""
    if isinstance(obj, dict) and "__callable__" in obj:
        return CALLABLES[obj["__callable__"]](obj)
    if isinstance(obj, list):
        return [build_arg(x) for x in obj]
    if isinstance(obj, tuple):
        return tuple(build_arg(x) for x in obj)
    if isinstance(obj, dict):
        return {k: build_arg(v) for k, v in obj.items()}
    return obj


def table_lm(spec: dict) -> Callable:
    """step_fn(prefixes (N,t)) -> log-probs (N,V) read from a (V,V) table by the last token."""
    table = spec["logp"]
    return lambda prefixes: table[prefixes[:, -1]]


CALLABLES = {"table_lm": table_lm}


def to_device(obj: Any, device: str | None) -> Any:
    """Move every tensor in `obj` to `device` (None: leave where it is)."""
    if device is None:
        return obj
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_device(x, device) for x in obj)
    if isinstance(obj, dict):
        return {k: to_device(v, device) for k, v in obj.items()}
    return obj


def plain(obj: Any, devices: list | None = None, depth: int = 0) -> Any:
    """A copy of `obj` made only of CPU tensors, numbers, strings, lists, tuples and dicts."""
    if depth > 20:
        return {"__unsupported__": "nesting", "repr": "structure nested too deeply"}
    if isinstance(obj, torch.Tensor):
        if devices is not None:
            devices.append(str(obj.device))
        if obj.layout is not torch.strided or str(obj.dtype).removeprefix("torch.") not in wire.DTYPES:
            return {"__unsupported__": "torch.Tensor", "repr": f"a {obj.layout} tensor of dtype {obj.dtype}"}
        try:
            return obj.detach().to("cpu").as_subclass(torch.Tensor).clone()
        except Exception as exc:  # sparse, nested, meta ...
            return {"__unsupported__": "torch.Tensor", "repr": f"{type(exc).__name__}: {exc}"[:200]}
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, float):
        return float(obj)
    if isinstance(obj, (list, tuple)):
        items = [plain(x, devices, depth + 1) for x in obj]
        return tuple(items) if isinstance(obj, tuple) else items
    if isinstance(obj, dict):
        return {str(k): plain(v, devices, depth + 1) for k, v in obj.items()}
    kind = f"{type(obj).__module__}.{type(obj).__qualname__}"
    try:
        text = repr(obj)[:200]
    except Exception:
        text = "<repr failed>"
    return {"__unsupported__": kind, "repr": text}


def first_output(value: Any) -> Any:
    """The tensor a gradient flows back from: the output, or output 0 of a tuple."""
    return value[0] if isinstance(value, (tuple, list)) else value


def backward(value: Any, cotangent: torch.Tensor | None) -> None:
    """Backpropagate `(output * cotangent).sum()` (or `output.sum()`)."""
    out = first_output(value)
    if not isinstance(out, torch.Tensor) or not out.requires_grad:
        raise TypeError("the output does not depend on the inputs through autograd "
                        "(was it detached, or computed with numpy or .item()?)")
    ct = torch.ones_like(out) if cotangent is None else cotangent.to(out.device, out.dtype)
    (out * ct).sum().backward()


def do_call(ns: dict, req: dict) -> dict:
    """Call a student function on the grader's inputs."""
    fn = lookup(ns, req["name"])
    device = req.get("device")
    args = list(to_device(build_arg(req.get("args", ())), device))
    kwargs = to_device(build_arg(req.get("kwargs", {})), device)
    wrt = req.get("grad_wrt", ())
    for i in wrt:
        args[i] = args[i].detach().requires_grad_(True)
    value = fn(*args, **kwargs)
    grads = []
    if wrt:
        backward(value, req.get("cotangent"))
        grads = [args[i].grad for i in wrt]
    devices: list = []
    out = plain(value, devices)
    return {"value": out, "devices": devices, "inputs": plain(args), "grads": plain(grads)}


def do_module(ns: dict, req: dict) -> dict:
    """Build a student module, load the reference weights, call a method."""
    cls = lookup(ns, req["name"])
    device = req.get("device")
    seed_all(req.get("seed", 0))
    module = cls(*req.get("init_args", ()), **req.get("init_kwargs", {}))
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"{req['name']}(...) should build a torch.nn.Module, got {type(module).__name__}")
    if req.get("state_dict") is not None:
        load_weights(module, req["state_dict"])
    module.to(device or "cpu").train(bool(req.get("train", False)))
    args = to_device(build_arg(req.get("args", ())), device)
    kwargs = to_device(build_arg(req.get("kwargs", {})), device)
    value = getattr(module, req.get("method", "forward"))(*args, **kwargs) if req.get("method") != "__call__" \
        else module(*args, **kwargs)
    param_grads = {}
    if req.get("grad"):
        backward(value, req.get("cotangent"))
        param_grads = {n: p.grad for n, p in module.named_parameters() if p.grad is not None}
    attrs = {a: plain(getattr(module, a, {"__unsupported__": "missing", "repr": f"no attribute {a}"}))
             for a in req.get("attrs", ())}
    devices: list = []
    return {"value": plain(value, devices), "devices": devices, "attrs": attrs,
            "param_grads": plain(param_grads),
            "state_keys": sorted(module.state_dict().keys()),
            "param_keys": sorted(name for name, _ in module.named_parameters())}


def load_weights(module: torch.nn.Module, state_dict: dict) -> None:
    """The graders' one rule for loading the reference's weights (docs/AUTHORING.md): strict on
    parameters, non-strict on buffers. `state_dict` holds the reference's parameters (its modules keep no
    persistent buffers); each must fit a parameter of the module of the same name and shape, and each
    parameter of the module must get one. A buffer the module registers itself (`position_ids`) keeps
    its own value."""
    missing, unexpected = module.load_state_dict(state_dict, strict=False)
    params = {name for name, _ in module.named_parameters()}
    missing = [k for k in missing if k in params]
    if missing or unexpected:
        raise RuntimeError("the reference's weights do not fit this module (parameters must have the names "
                           "the docstring gives): "
                           + "; ".join(filter(None, [
                               missing and f"no reference weight for the parameters {', '.join(missing[:8])}",
                               unexpected and f"no parameter for the reference weights {', '.join(unexpected[:8])}"])))


class Missing(Exception):
    """The notebook did not define a name the grader asked for."""


def lookup(ns: dict, name: str) -> Any:
    if name not in ns:
        raise Missing(name)
    return ns[name]


OPS = {"call": do_call, "module": do_module}


def names_cuda(obj: Any) -> bool:
    """Whether a request's value is, or holds, a CUDA device ("cuda", torch.device("cuda:0"), ...)."""
    if isinstance(obj, (list, tuple)):
        return any(names_cuda(x) for x in obj)
    if isinstance(obj, dict):
        return any(names_cuda(x) for x in obj.values())
    return is_cuda(obj)


def on_device(req: dict, cuda: bool) -> contextlib.AbstractContextManager:
    """A request on "cuda" (its inputs moved there, or a device argument naming it) runs on the real
    GPU where this process can use one (`cuda`), else on the simulated CUDA device (`simulated_cuda`),
    so that the CUDA tests count on every machine."""
    asks = names_cuda([req.get(k) for k in ("device", "args", "kwargs", "init_args", "init_kwargs")])
    return simulated_cuda() if asks and not cuda else contextlib.nullcontext()


def answer(ns: dict, req: dict, cuda: bool = False) -> dict:
    """Run one request; any exception of the student's becomes an error reply.

    `cuda`: whether this process can use a real GPU (else "cuda" requests run on the simulated one).
    """
    seed_all(req.get("seed", 0))
    started = time.perf_counter()
    with captured() as out, on_device(req, cuda):
        try:
            reply = OPS[req["op"]](ns, req)
            reply["ok"] = True
        except Missing as exc:
            reply = {"ok": False, "kind": "missing", "type": "NameError", "message": str(exc)}
        except BaseException as exc:  # noqa: BLE001 - SystemExit and KeyboardInterrupt too
            reply = {"ok": False, "kind": "exception", "type": type(exc).__name__,
                     "message": str(exc)[:1000], "traceback": student_traceback(exc)}
    reply["stdout"] = out.text()
    reply["busy"] = time.perf_counter() - started  # the call's own time here (benchmarks/bench_grade_breakdown.py)
    return reply


def defined_names(ns: dict) -> list[str]:
    return sorted(k for k, v in ns.items() if not k.startswith("_") and callable(v))


def cuda_ready(gpu_bytes: int | None) -> bool:
    """Whether CUDA really works in this process, after capping torch's GPU memory at `gpu_bytes`.

    The cap is torch's caching-allocator fraction of device 0: it bounds what torch allocates, and
    code that calls set_per_process_memory_fraction again can lift it (see "Grading on a GPU" in
    book/instructors/sandbox.md).
    """
    if not torch.cuda.is_available():
        return False
    try:
        if gpu_bytes:
            total = torch.cuda.get_device_properties(0).total_memory
            torch.cuda.set_per_process_memory_fraction(min(1.0, gpu_bytes / total), 0)
        torch.empty(1, device="cuda")
        return True
    except Exception:  # noqa: BLE001 - any failure means: no CUDA here
        return False


def serve(sock: socket.socket) -> None:
    """Load the notebook from the first message, then answer calls until the grader hangs up."""
    hello = wire.recv(sock)
    seed_all(hello.get("seed", 0))
    cuda = cuda_ready(hello.get("gpu_memory_bytes"))
    ns: dict = {"__name__": "__main__", "__builtins__": __builtins__}
    report = run_cells(hello["cells"], set(hello.get("skip_tags", ())), ns,
                       skip_cells=frozenset(hello.get("skip_cells", ())), cell_seconds=hello.get("cell_seconds"),
                       progress=lambda index: wire.send(sock, {"progress": index}))
    wire.send(sock, {"ok": True, "cells": report, "names": defined_names(ns), "cuda": cuda})
    while True:
        try:
            req = wire.recv(sock)
        except wire.WireError:
            return
        if req.get("op") == "bye":
            return
        try:
            wire.send(sock, answer(ns, req, cuda))
        except (wire.WireError, OSError):
            return
        except Exception as exc:  # the reply itself could not be encoded
            wire.send(sock, {"ok": False, "kind": "exception", "type": type(exc).__name__,
                             "message": f"the result could not be sent back: {exc}"[:500], "stdout": ""})


def main(argv: list[str]) -> None:
    """`worker.py serve FD` (one submission) or `worker.py zygote FD` (fork one child per submission)."""
    os.environ.setdefault("MPLBACKEND", "Agg")
    mode, fd = argv[1], int(argv[2])
    sock = socket.socket(fileno=fd)
    if mode == "serve":
        serve(sock)
    elif mode == "zygote":
        import zygote
        zygote.run(sock, serve)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv)
