"""Trained checkpoints: each chapter's declared longer runs, trained with the chapter's own code.

`python -m course checkpoints [NN ...] [--force] [--check]`. For each chapter that declares a
checkpoint (`attnkit.checkpoints.checkpoint`), a fresh process runs the chapter's *checkpoint
cells* (the cells the autograder runs, the skip-grading cells that define a `@checkpoint`
function, and those tagged `checkpoint-code`: page cells whose definitions they need), then trains each checkpoint whose record is missing or stale (or all, with --force) on a
GPU when there is one, else on the CPU. It writes `attnkit/checkpoints_data/NN_name/<name>.pt` (the
weights, float16) and `<name>.json` (the log, the metrics measured on the committed weights on the
CPU, seconds, device, versions, the checksum of the weights and the hash of the code that made them).

A record is stale when the hash of the chapter's checkpoint cells (docstrings, comments and
formatting stripped) and of the attnkit modules they reach differs from the one it recorded.
`--check` trains nothing: it lists each checkpoint's state and fails on a stale, missing or
orphaned one, or on a total over the size budget.
"""
from __future__ import annotations

import ast
import hashlib
import json
import os
import platform
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import nbformat

from course.exercises import ROOT, read_solution

IGNORED = {"claims.py", "glue.py", "checkpoints.py"}   # attnkit modules that show or store, never compute


# ---------------------------------------------------------------- which cells
def _checkpoint_names(source: str) -> list[str]:
    """The functions decorated with `@checkpoint(...)` in a cell."""
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return []
    return [n.name for n in body if isinstance(n, ast.FunctionDef) and any(
        isinstance(d, ast.Call) and getattr(d.func, "id", None) == "checkpoint" for d in n.decorator_list)]


NEEDED = "checkpoint-code"   # the tag of a page cell whose definitions a checkpoint cell needs


def is_checkpoint_cell(cell: nbformat.NotebookNode) -> bool:
    """A graded cell, a cell that defines a `@checkpoint` function, or a page cell tagged NEEDED."""
    tags = cell.metadata.get("tags", [])
    return "skip-grading" not in tags or NEEDED in tags or bool(_checkpoint_names(cell.source))


def checkpoint_cells(nb: nbformat.NotebookNode) -> list[str]:
    """The sources the command runs: the graded path, the page cells tagged NEEDED (classes the
    checkpoint's model is built from, taught earlier on the page) and the checkpoint definitions."""
    from course.claims import is_claim_cell
    return [c.source for c in nb.cells if c.cell_type == "code" and not is_claim_cell(c.source)
            and is_checkpoint_cell(c)]


def declared_names(chapter: str) -> list[str]:
    """The chapter's checkpoints, by name, read from its source (nothing executed)."""
    return [n for c in read_solution(chapter).cells if c.cell_type == "code" for n in _checkpoint_names(c.source)]


def checkpoint_chapters() -> list[str]:
    from course.exercises import chapters
    return [ch for ch in chapters() if declared_names(ch)]


def code_hash(chapter: str) -> str:
    """A hash of the code the chapter's checkpoints are trained by (not its prose)."""
    from course.claims import strip_code
    from course.deps import attnkit_files
    code = "\n\n".join(strip_code(s) for s in checkpoint_cells(read_solution(chapter)))
    h = hashlib.sha256(code.encode())
    for path in attnkit_files(code):
        if path.name not in IGNORED:
            h.update(path.name.encode() + b"\0" + strip_code(path.read_text()).encode())
    return h.hexdigest()[:16]


# ---------------------------------------------------------------- running the chapter's code
def declare(chapter: str, implementation: str = "reference") -> dict:
    """Run the chapter's checkpoint cells (the reference's, or the alternative spliced in) in this
    process; its checkpoints by name."""
    from attnkit import checkpoints as registry
    from autograder.harness.worker import run_cells, seed_all
    from course.claims import notebook_for
    registry.CHECKPOINTS.clear()
    ns: dict = {"__name__": f"checkpoints_{chapter}"}
    seed_all(0)
    cells = checkpoint_cells(notebook_for(chapter, implementation))
    errors = run_cells([{"cell_type": "code", "source": s} for s in cells], set(), ns)
    if errors:
        e = errors[0]
        raise RuntimeError(f"{chapter} ({implementation}): a checkpoint cell fails: {e['error']}: "
                           f"{e['message']}\n{e['traceback']}\n{e['output'][-2000:]}")
    return {ck.name: ck for ck in registry.CHECKPOINTS.values() if ck.chapter == chapter}


def _versions() -> dict:
    import numpy
    import torch
    return {"python": platform.python_version(), "torch": torch.__version__, "numpy": numpy.__version__,
            "cuda": torch.version.cuda}


def train_one(ck, code: str) -> dict:
    """Train `ck` on the best device, store its float16 weights, measure them on the CPU; its record."""
    import torch
    from attnkit.checkpoints import file_sha256, half_state, read_weights, load_strict
    from attnkit.device import pick_device, seed_everything
    device = pick_device()
    seed_everything(0)
    model = ck.build().to(device)
    started = time.monotonic()
    log = ck.train(model, device=device, **ck.kwargs)
    seconds = round(time.monotonic() - started, 1)
    ck.weights_path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(half_state(model), ck.weights_path)
    fresh = ck.build()                                  # the committed weights, as the page loads them
    load_strict(fresh, read_weights(ck.weights_path), ck.key)
    with torch.no_grad():
        metrics = {k: float(v) for k, v in ck.evaluate(fresh.eval()).items()}
    record = {"chapter": ck.chapter, "name": ck.name, "code_hash": code, "kwargs": ck.kwargs,
              "metrics": metrics, "log": log, "seconds": seconds, "device": str(device),
              "device_name": (torch.cuda.get_device_name(device) if device.type == "cuda"
                              else platform.processor() or platform.machine()),
              "versions": _versions(), "dtype": "float16", "bytes": ck.weights_path.stat().st_size,
              "sha256": file_sha256(ck.weights_path), "seed": 0,
              "trained_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    ck.record_path.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    return record


def work(chapter: str, names: list[str], solutions: str, data: str) -> None:
    """In a fresh process: declare the chapter's checkpoints, train those named."""
    import matplotlib
    matplotlib.use("Agg")
    import attnkit.checkpoints
    import course.exercises
    course.exercises.SOLUTIONS, attnkit.checkpoints.DATA = Path(solutions), Path(data)
    code = code_hash(chapter)
    for name, ck in declare(chapter).items():
        if name in names:
            print(f"{chapter}: training {name} ({ck.kwargs})", flush=True)
            record = train_one(ck, code)
            print(f"{chapter}: {name} took {record['seconds']:.0f} s on {record['device']}, "
                  f"{record['bytes'] / 2**20:.2f} MB: {record['metrics']}", flush=True)


def _train(chapter: str, names: list[str]) -> None:
    """Run `work` in a fresh Python process (its own namespace, registry and device)."""
    import attnkit.checkpoints
    import course.exercises
    where = (str(course.exercises.SOLUTIONS), str(attnkit.checkpoints.DATA))
    code = f"from course.checkpoints import work; work({chapter!r}, {names!r}, *{where!r})"
    env = dict(os.environ, MPLBACKEND="Agg", OMP_WAIT_POLICY="PASSIVE")
    if subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env).returncode:
        raise RuntimeError(f"training the checkpoints of {chapter} failed (its output is above)")


# ---------------------------------------------------------------- states and checks
def states(chapter: str) -> dict[str, str]:
    """Each declared or committed checkpoint of the chapter: "current", "stale", "missing" or "orphan"."""
    from attnkit.checkpoints import DATA
    code, out = code_hash(chapter), {}
    for name in declared_names(chapter):
        path = DATA / chapter / f"{name}.json"
        if not path.exists() or not (DATA / chapter / f"{name}.pt").exists():
            out[name] = "missing"
        else:
            out[name] = "current" if json.loads(path.read_text()).get("code_hash") == code else "stale"
    for path in sorted((DATA / chapter).glob("*.json")):
        out.setdefault(path.stem, "orphan")
    return out


def reproduce(chapter: str, implementation: str = "reference") -> list[str]:
    """Each committed checkpoint loaded strictly into this implementation's classes, its metrics
    measured again; the problems, as sentences."""
    import torch
    problems = []
    declared = declare(chapter, implementation)
    for name, ck in declared.items():
        if not ck.record_path.exists():
            continue
        recorded = ck.record()["metrics"]
        try:
            model = ck.load(check_code=False)
        except Exception as exc:  # noqa: BLE001 - the message is the finding
            problems.append(f"{ck.key} ({implementation}): {exc}")
            continue
        with torch.no_grad():
            got = {k: float(v) for k, v in ck.evaluate(model).items()}
        for metric, value in recorded.items():
            if metric not in got:
                problems.append(f"{ck.key} ({implementation}): {metric} is no longer measured")
            elif abs(got[metric] - value) > ck.tolerance * max(1.0, abs(value)):
                problems.append(f"{ck.key} ({implementation}): {metric} is {got[metric]:.6g} on the committed "
                                f"weights, the record says {value:.6g}")
    return problems


USAGE = """usage: python -m course checkpoints [NN ...] [--force] [--check]
  trains each chapter's declared longer runs (@checkpoint) whose record is missing or stale
  --force  train them all again
  --check  train nothing; fail on a stale, missing or orphaned record, or over the size budget"""


def main(args: list[str]) -> int:
    """`python -m course checkpoints [NN_name|NN ...] [--force] [--check]`."""
    if {"-h", "--help"} & set(args):
        print(USAGE)
        return 0
    unknown = [a for a in args if a.startswith("-") and a not in ("--force", "--check")]
    if unknown:
        print(f"checkpoints: unknown option {unknown[0]}\n{USAGE}", file=sys.stderr)
        return 2
    from attnkit.checkpoints import BUDGET_BYTES, committed_bytes
    from course.exercises import chapters
    started = time.monotonic()
    wanted = [a for a in args if not a.startswith("--")]
    names = [ch for ch in chapters() if any(ch == w or ch.startswith(f"{w}_") for w in wanted)] \
        if wanted else checkpoint_chapters()
    problems = []
    for ch in names:
        state = states(ch)
        if not state:
            print(f"{ch}: declares no checkpoint (attnkit.checkpoints.checkpoint): nothing to train")
            continue
        if "--check" in args:
            for name, s in state.items():
                print(f"  {ch}/{name}: {s}")
                if s != "current":
                    problems.append(f"{ch}/{name} is {s}: run `python -m course checkpoints {ch[:2]}`"
                                    + (" (or delete its files)" if s == "orphan" else ""))
            continue
        todo = [n for n, s in state.items() if s in ("missing", "stale") or ("--force" in args and s != "orphan")]
        if todo:
            _train(ch, todo)
        else:
            print(f"{ch}: every checkpoint is current ({', '.join(state)})")
    size = committed_bytes()
    print(f"checkpoints: {size / 2**20:.2f} MB committed of {BUDGET_BYTES / 2**20:.0f} MB, "
          f"{time.monotonic() - started:.0f} s")
    if size > BUDGET_BYTES:
        problems.append(f"the committed checkpoints take {size / 2**20:.1f} MB, "
                        f"over the {BUDGET_BYTES / 2**20:.0f} MB budget")
    for p in problems:
        print(f"- {p}")
    return 1 if problems else 0
