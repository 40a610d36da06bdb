"""The claims check: every chapter's experiment over seeds, threads and solutions, every claim on every run.

`python -m course claims [NN ...] [--force]`. For each chapter that declares an
experiment (`attnkit.claims.experiment`):

1. For the reference solution and for the alternative one (tests/alternatives/NN_name.py
   spliced into the exercise notebook), a fresh process runs the notebook's *experiment
   cells*: the cells the autograder runs (not tagged skip-grading) and the skip-grading
   cells that define an `@experiment` function. It then calls each experiment for
   seeds 0..n-1 at 1 and 2 threads. The page's own run is one of these calls.
2. The figures go to tests/claims/NN_name.json, one file per chapter, keyed per
   implementation by a hash of what changes the numbers: the code of those cells with
   docstrings and comments stripped, the attnkit modules they reach, the runtime pins
   and the call plan. Prose and claim edits re-run nothing; a fresh clone re-runs only
   what changed.
3. The claims (the cells holding only `claim(...)` calls) are checked on every recorded
   run: each must hold in at least its `at_least` fraction of each implementation's runs.
"""
from __future__ import annotations

import ast
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

from course.exercises import ROOT, read_solution

RECORDS = ROOT / "tests" / "claims"
IMPLEMENTATIONS = ("reference", "alternative")
PRESENTATION = {"claims.py", "glue.py"}   # attnkit modules that show figures, never compute them


# ---------------------------------------------------------------- which cells
def _calls(node: ast.stmt, name: str) -> bool:
    call = node.value if isinstance(node, ast.Expr) else None
    return isinstance(call, ast.Call) and getattr(call.func, "id", None) == name


def is_claim_cell(source: str) -> bool:
    """A cell of only imports and `claim(...)` calls, with at least one call."""
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return False
    return any(_calls(n, "claim") for n in body) and all(
        _calls(n, "claim") or isinstance(n, (ast.Import, ast.ImportFrom)) for n in body)


def defines_experiment(source: str) -> bool:
    """A cell that defines a function decorated with `@experiment(...)`."""
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return False
    return any(isinstance(n, ast.FunctionDef) and any(
        isinstance(d, ast.Call) and getattr(d.func, "id", None) == "experiment" for d in n.decorator_list)
        for n in body)


def experiment_cells(nb: nbformat.NotebookNode) -> list[str]:
    """The sources the claims check runs: the graded path plus the experiment definitions."""
    out = []
    for cell in nb.cells:
        if cell.cell_type != "code" or is_claim_cell(cell.source):
            continue
        if "skip-grading" not in cell.metadata.get("tags", []) or defines_experiment(cell.source):
            out.append(cell.source)
    return out


def claim_sources(nb: nbformat.NotebookNode) -> list[str]:
    return [c.source for c in nb.cells if c.cell_type == "code" and is_claim_cell(c.source)]


def has_experiment(chapter: str) -> bool:
    return any(defines_experiment(c.source) for c in read_solution(chapter).cells if c.cell_type == "code")


# ---------------------------------------------------------------- the hash
def strip_code(source: str) -> str:
    """`source` without comments, docstrings or formatting: what executes."""
    from autograder.harness.worker import to_python
    try:
        tree = ast.parse(to_python(source))
    except SyntaxError:
        return source
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return ast.unparse(tree)


def notebook_for(chapter: str, implementation: str) -> nbformat.NotebookNode:
    if implementation == "reference":
        return read_solution(chapter)
    from course.alternatives import alternative_notebook
    return alternative_notebook(chapter)


def code_hash(chapter: str, implementation: str) -> str:
    """A hash of what this implementation's figures depend on (not the prose, not the claims)."""
    from course.book import runtime_pins
    from course.deps import attnkit_files
    code = "\n\n".join(strip_code(s) for s in experiment_cells(notebook_for(chapter, implementation)))
    h = hashlib.sha256(code.encode())
    for path in attnkit_files(code):
        if path.name in PRESENTATION:
            continue
        h.update(path.name.encode() + b"\0" + strip_code(path.read_text()).encode())
    h.update(runtime_pins().encode())
    return h.hexdigest()[:16]


# ---------------------------------------------------------------- running
def work(chapter: str, implementation: str, out: str, solutions: str, alternatives: str,
         seeds: list[int] | None = None) -> None:
    """In a fresh process: run the experiment cells, call every experiment on its seeds (or
    those of `seeds` it has) and threads."""
    import matplotlib
    matplotlib.use("Agg")
    import course.alternatives
    import course.exercises
    course.exercises.SOLUTIONS, course.alternatives.ALTERNATIVES = Path(solutions), Path(alternatives)
    from attnkit import claims as registry
    from autograder.harness.worker import run_cells, seed_all
    nb = notebook_for(chapter, implementation)
    ns: dict = {"__name__": f"claims_{chapter}"}
    seed_all(0)
    errors = run_cells([{"cell_type": "code", "source": s} for s in experiment_cells(nb)], set(), ns)
    if errors:
        e = errors[0]
        raise RuntimeError(f"{chapter} ({implementation}): an experiment cell fails: {e['error']}: "
                           f"{e['message']}\n{e['traceback']}\n{e['output'][-2000:]}")
    runs = []
    for exp in registry.EXPERIMENTS.values():
        for seed in (s for s in range(exp.seeds) if seeds is None or s in seeds):
            for threads in exp.threads:
                started = time.monotonic()
                figures = registry.figures_of(exp.fn(seed=seed, threads=threads))
                seconds = round(time.monotonic() - started, 1)
                runs.append({"experiment": exp.name, "seed": seed, "threads": threads,
                             "figures": figures, "seconds": seconds})
                print(f"{chapter} {implementation} {exp.name}: seed {seed}, {threads} thread(s), "
                      f"{seconds:.0f} s", file=sys.__stderr__, flush=True)
    Path(out).write_text(json.dumps(runs))


def _run(chapter: str, implementation: str, seeds: list[int] | None = None) -> list[dict]:
    """Run `work` in a fresh Python process (its own namespace, registry and thread pool)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "runs.json"
        # OpenMP threads that spin while they wait make a 2-thread run 20-50x slower on a loaded machine;
        # passive waiting gives the same numbers (it changes no reduction order).
        # The check's runs are CPU runs on every machine (pick_device() gives the CPU): a GPU changes the
        # figures, and CPU-time figures would count only kernel launches.
        env = dict(os.environ, ATTNKIT_PROGRESS="off", MPLBACKEND="Agg", OMP_WAIT_POLICY="PASSIVE",
                   ATTNKIT_DEVICE="cpu")
        import course.alternatives
        import course.exercises
        where = (str(out), str(course.exercises.SOLUTIONS), str(course.alternatives.ALTERNATIVES), seeds)
        code = f"from course.claims import work; work({chapter!r}, {implementation!r}, *{where!r})"
        proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        tail = ""
        for line in proc.stderr:       # each run's line as it ends: a long refresh shows progress
            if line.startswith(f"{chapter} {implementation} "):
                print(line.rstrip(), flush=True)
            tail = (tail + line)[-4000:]
        if proc.wait():
            raise RuntimeError(f"the claims run of {chapter} ({implementation}) failed:\n{tail}")
        return json.loads(out.read_text())


def load(chapter: str) -> dict:
    path = RECORDS / f"{chapter}.json"
    return json.loads(path.read_text()) if path.exists() else {"chapter": chapter, "implementations": {}}


def save(chapter: str, record: dict) -> None:
    RECORDS.mkdir(parents=True, exist_ok=True)
    (RECORDS / f"{chapter}.json").write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")


def implementations(chapter: str) -> list[str]:
    """The reference, and the alternative where the chapter has one."""
    from course.alternatives import ALTERNATIVES
    return [i for i in IMPLEMENTATIONS if i == "reference" or (ALTERNATIVES / f"{chapter}.py").exists()]


def stale(chapter: str, record: dict | None = None) -> list[str]:
    """The implementations whose recorded runs do not match the current code."""
    record = record or load(chapter)
    parts = record.get("implementations", {})
    return [i for i in implementations(chapter) if parts.get(i, {}).get("hash") != code_hash(chapter, i)]


def refresh(chapter: str, force: bool = False, jobs: int = 1) -> dict:
    """The chapter's record, re-running the implementations whose code changed (or all, forced).

    With `jobs` > 1, that many processes run at once, each for one implementation and a share
    of the seeds (each process runs the notebook's cells once, then its calls)."""
    from concurrent.futures import ThreadPoolExecutor
    record = load(chapter)
    todo = implementations(chapter) if force else stale(chapter, record)
    hashes = {impl: code_hash(chapter, impl) for impl in todo}   # of the code the runs execute
    per = max(1, -(-jobs // max(1, len(todo))))                 # processes per implementation
    tasks = [(impl, [s for s in range(64) if s % per == k]) for impl in todo for k in range(per)]
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        results = list(pool.map(lambda t: (t[0], _run(chapter, t[0], t[1] if per > 1 else None)), tasks))
    for impl in todo:
        runs = sorted((r for i, rs in results if i == impl for r in rs),
                      key=lambda r: (r["experiment"], r["seed"], r["threads"]))
        record["implementations"][impl] = {"hash": hashes[impl], "runs": runs,
                                           "seconds": round(sum(r["seconds"] for r in runs), 1)}
        print(f"{chapter}: {impl} ran {len(runs)} experiment runs")
    if todo:
        save(chapter, record)
        print(f"{chapter}: claims runs took {time.monotonic() - started:.0f} s ({jobs} job(s))")
    return record


# ---------------------------------------------------------------- checking
def claims_of(chapter: str) -> dict:
    """The chapter's claims: its claim cells executed with a fresh registry."""
    from attnkit import claims as registry
    registry.CLAIMS.clear()
    for source in claim_sources(read_solution(chapter)):
        exec(compile(source, f"<claims of {chapter}>", "exec"), {"claim": registry.claim})
    return dict(registry.CLAIMS)


def check(chapter: str, record: dict) -> list[str]:
    """Every claim on every recorded run; the failures, as sentences."""
    from attnkit.claims import record_runs, verdict
    runs = record_runs(record)
    problems = []
    for name, c in claims_of(chapter).items():
        v = verdict(c, runs)
        counts = ", ".join(f"{v['held'][i]}/{v['total'][i]} {i}" for i in v["total"]) or "no runs"
        print(f"  {'ok  ' if v['ok'] else 'FAIL'} {name}: {counts} (needed {c.at_least:.0%}) - {c.text}")
        if not v["ok"]:
            problems.append(f"{chapter}: claim {name!r} holds in {counts} runs, needed {c.at_least:.0%}"
                            + (f" ({'; '.join(v['errors'])})" if v["errors"] else "") + f": {c.text}")
    return problems


def alternative_problems(chapter: str) -> list[str]:
    """Why the alternative's recorded runs do not support every claim ([] when they do)."""
    from attnkit.claims import record_runs, verdict
    record = load(chapter)
    if "alternative" in stale(chapter, record):
        return [f"the claims record of the alternative is missing or stale: run `python -m course claims {chapter}`"]
    runs = [r for r in record_runs(record) if r["implementation"] == "alternative"]
    return [f"claim {name!r} holds in {verdict(c, runs)['held'].get('alternative', 0)} of {len(runs)} of the "
            f"alternative's runs: {c.text}" for name, c in claims_of(chapter).items() if not verdict(c, runs)["ok"]]


def claims_chapters() -> list[str]:
    from course.book import book_chapters
    return [ch for ch in book_chapters() if has_experiment(ch)]


def main(args: list[str]) -> int:
    """`python -m course claims [NN_name|NN ...] [--force] [--jobs=N]`: refresh the records (N
    processes at once), check the claims."""
    started = time.monotonic()
    from course.exercises import chapters
    jobs = next((int(a.split("=", 1)[1]) for a in args if a.startswith("--jobs=")), 1)
    wanted = [a for a in args if not a.startswith("--")]
    names = [ch for ch in chapters() if any(ch == w or ch.startswith(f"{w}_") for w in wanted)] \
        if wanted else claims_chapters()
    problems = []
    for ch in names:
        if not has_experiment(ch):
            print(f"{ch}: declares no experiment (attnkit.claims.experiment): nothing to check")
            continue
        try:
            record = refresh(ch, force="--force" in args, jobs=jobs)
        except RuntimeError as exc:
            problems.append(str(exc))
            continue
        print(f"{ch}: {len(claims_of(ch))} claims on {sum(len(p['runs']) for p in record['implementations'].values())}"
              " recorded runs")
        problems += check(ch, record)
    for p in problems:
        print(f"- {p}")
    print(f"claims: {len(names)} chapters, {len(problems)} problems, {time.monotonic() - started:.0f} s")
    return 1 if problems else 0
