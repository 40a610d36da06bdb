"""Sweeps: each chapter's declared series of short runs (a scaling study), cached by code and config.

`python -m course sweeps [NN ...] [--force] [--check]`. For each chapter that declares a sweep
(`attnkit.sweeps.sweep`), a fresh process runs the chapter's graded cells, its checkpoint cells and
its sweep cells, then runs each config whose record is missing or stale (every config, with
--force), on the CPU, and writes its record into `attnkit/sweeps_data/NN_name/<name>.json` at once.
On a shared machine, run it through the machine's queue for heavy work. `--check` runs nothing: it
lists how many stored records of each sweep the current code made (the page warns about the rest).

The code hash covers those cells (docstrings, comments and formatting stripped; the `configs=`
argument of each `@sweep(...)` left out, so that adding a config re-runs only that one) and the
attnkit modules they reach.
"""
from __future__ import annotations

import ast
import hashlib
import os
import platform
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import nbformat

from course.exercises import ROOT, read_solution

IGNORED = {"claims.py", "glue.py", "checkpoints.py", "sweeps.py"}   # modules that show or store


def _is_sweep(d: ast.expr) -> bool:
    return isinstance(d, ast.Call) and getattr(d.func, "id", None) == "sweep"


def _sweep_names(source: str) -> list[str]:
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return []
    return [n.name for n in body if isinstance(n, ast.FunctionDef) and any(map(_is_sweep, n.decorator_list))]


def sweep_cells(nb: nbformat.NotebookNode) -> list[str]:
    """The sources the command runs: the graded path, the checkpoint definitions, the sweeps."""
    from course.checkpoints import is_checkpoint_cell
    from course.claims import is_claim_cell
    return [c.source for c in nb.cells if c.cell_type == "code" and not is_claim_cell(c.source)
            and (is_checkpoint_cell(c) or _sweep_names(c.source))]


def declared_names(chapter: str) -> list[str]:
    return [n for c in read_solution(chapter).cells if c.cell_type == "code" for n in _sweep_names(c.source)]


def sweep_chapters() -> list[str]:
    from course.exercises import chapters
    return [ch for ch in chapters() if declared_names(ch)]


def _without_configs(source: str) -> str:
    """`source` with the `configs=` keyword of every `@sweep(...)` removed."""
    if not _sweep_names(source):
        return source
    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            for d in filter(_is_sweep, node.decorator_list):
                d.keywords = [k for k in d.keywords if k.arg != "configs"]
    return ast.unparse(tree)


def code_hash(chapter: str) -> str:
    """A hash of the code the chapter's sweeps run (not its prose, not the list of configs)."""
    from course.claims import strip_code
    from course.deps import attnkit_files
    code = "\n\n".join(strip_code(_without_configs(s)) for s in sweep_cells(read_solution(chapter)))
    h = hashlib.sha256(code.encode())
    for path in attnkit_files(code):
        if path.name not in IGNORED:
            h.update(path.name.encode() + b"\0" + strip_code(path.read_text()).encode())
    return h.hexdigest()[:16]


def declare(chapter: str) -> dict:
    """Run the chapter's sweep cells in this process; its sweeps by name."""
    from attnkit import sweeps as registry
    from autograder.harness.worker import run_cells, seed_all
    registry.SWEEPS.clear()
    ns: dict = {"__name__": f"sweeps_{chapter}"}
    seed_all(0)
    cells = sweep_cells(read_solution(chapter))
    errors = run_cells([{"cell_type": "code", "source": s} for s in cells], set(), ns)
    if errors:
        e = errors[0]
        raise RuntimeError(f"{chapter}: a sweep cell fails: {e['error']}: {e['message']}\n{e['traceback']}\n"
                           f"{e['output'][-2000:]}")
    return {s.name: s for s in registry.SWEEPS.values() if s.chapter == chapter}


def todo(s, code: str, force: bool) -> list[dict]:
    """The configs of sweep `s` to run: missing or stale records (all with force)."""
    from attnkit.sweeps import config_key
    runs = s.stored()
    return [c for c in s.configs if force or runs.get(config_key(c), {}).get("code_hash") != code]


def work(chapter: str, force: bool, solutions: str, data: str) -> None:
    """In a fresh process: declare the chapter's sweeps, run what is missing or stale."""
    import matplotlib
    matplotlib.use("Agg")
    import torch
    import attnkit.sweeps
    import course.exercises
    course.exercises.SOLUTIONS, attnkit.sweeps.DATA = Path(solutions), Path(data)
    code = code_hash(chapter)
    for name, s in declare(chapter).items():
        configs = todo(s, code, force)
        print(f"{chapter}/{name}: {len(configs)} of {len(s.configs)} runs to do", flush=True)
        for i, config in enumerate(configs, 1):
            wall, cpu = time.monotonic(), time.process_time()
            record = dict(s(**config))
            record.update(code_hash=code, wall_s=round(time.monotonic() - wall, 1),
                          process_cpu_s=round(time.process_time() - cpu, 1), torch=torch.__version__,
                          machine=platform.processor() or platform.machine(),
                          made_at=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
            s.store(config, record)
            print(f"  [{i}/{len(configs)}] {config}: {record['wall_s']:.0f} s wall, "
                  f"{record['process_cpu_s']:.0f} s CPU", flush=True)


def main(args: list[str]) -> int:
    if "--help" in args or "-h" in args:
        print(__doc__)
        return 0
    unknown = [a for a in args if a.startswith("--") and a not in ("--force", "--check")]
    if unknown:
        print(f"unknown option {unknown[0]}\n{__doc__}")
        return 2
    wanted = [a for a in args if not a.startswith("--")]
    chapters = [ch for ch in sweep_chapters() if not wanted or any(ch.startswith(w) for w in wanted)]
    if "--check" in args:
        from attnkit.sweeps import DATA
        import json
        for ch in chapters:
            code = code_hash(ch)
            for name in declared_names(ch):
                path = DATA / ch / f"{name}.json"
                runs = json.loads(path.read_text())["runs"] if path.exists() else {}
                current = sum(r.get("code_hash") == code for r in runs.values())
                print(f"{ch}/{name}: {current} of {len(runs)} stored records made by the current code ({code})")
        return 0
    import attnkit.sweeps
    import course.exercises
    where = (str(course.exercises.SOLUTIONS), str(attnkit.sweeps.DATA))
    env = dict(os.environ, MPLBACKEND="Agg", OMP_WAIT_POLICY="PASSIVE")
    for ch in chapters:
        code = f"from course.sweeps import work; work({ch!r}, {'--force' in args!r}, *{where!r})"
        if subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env).returncode:
            print(f"the sweeps of {ch} failed (the output is above)")
            return 1
    return 0
