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
   These runs are the ones the claims are *worded* on: their bounds are chosen by looking
   at them.
4. Each claim is then *confirmed* on held-out seeds its wording never saw: a round of 5
   seeds after the worded ones, one run a seed, the implementation and thread count
   rotating (`ROTATION`: about a quarter of the cost of the worded runs). They go to the
   record's "confirmation" part, keyed by the same hash; a claim must hold in its
   `at_least` fraction of them, all solutions pooled. A claim reworded after a round was
   read has seen that round: the chapter moves to the next round (`ROUNDS`), whose seeds
   are new, and the rounds before it join the runs the claims are worded on.
5. The check also reports each claim's margin (how far the run that decides it is from
   the bound) against the spread of its runs (the range of the compared quantity), and
   the claims whose figures the alternative solution gives bit for bit like the
   reference (then it is no independent check).
6. A *timing claim* (one that reads a figure named with the word `time`, `speedup` or
   `seconds`, e.g. `ch08_time_sdpa_over_lsh_8192`) FAILS when it is fragile: when its
   margin is smaller than the run-to-run spread of its compared quantity (`margins`, over
   the worded runs and the earlier rounds). Times scatter by factors, not by amounts, so a
   timing claim's inequality `a > b` is measured on the log scale: its slack is log(a / b)
   when a and b are both positive (a - b otherwise), its spread the range of that slack.
   A timing whose runs scatter more than its effect's distance from the bound is decided by
   the machine's load, not by the effect. Other claims only report FRAGILE.
"""
from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

from course.exercises import ROOT, read_solution

RECORDS = ROOT / "tests" / "claims"
IMPLEMENTATIONS = ("reference", "alternative")
# The held-out runs of a round: (implementation, threads) for its 5 seeds in turn. Round r uses seeds
# 5r to 5r+4 (round 1: seeds 5-9, after the worded 0-4). Kept here, out of the hashed experiment
# code: a new round re-runs only its own 5 runs.
ROTATION = (("reference", 1), ("alternative", 2), ("reference", 2), ("alternative", 1), ("reference", 1))
# chapter -> its round, where a claim was reworded after reading the rounds before it
ROUNDS: dict[str, int] = {"02_attention": 4, "03_transformer": 3, "04_elmo": 4, "05_gpt": 2, "06_bert": 5,
                          "07_transformer_xl": 4, "01_seq2seq": 3,
                          "08_reformer": 3}
PRESENTATION = {"claims.py", "glue.py"}   # attnkit modules that show figures, never compute them
TIMING_FIGURE = re.compile(r"(^|_)(time|times|speedup|seconds)(_|$)")   # a figure that moves with the load


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
         seeds: list[int] | None = None, plan: list[tuple[int, int]] | None = None) -> None:
    """In a fresh process: run the experiment cells, call every experiment on its seeds (or
    those of `seeds` it has) and threads, or on the (seed, threads) pairs of `plan`."""
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
        calls = plan if plan is not None else [
            (seed, threads) for seed in range(exp.seeds) if seeds is None or seed in seeds for threads in exp.threads]
        if plan is not None and min((s for s, _ in plan), default=exp.seeds) < exp.seeds:
            raise RuntimeError(f"{chapter}: a held-out seed in {plan} is one of {exp.name}'s worded seeds "
                               f"(0-{exp.seeds - 1})")
        for seed, threads in calls:
            started = time.monotonic()
            figures = registry.figures_of(exp.fn(seed=seed, threads=threads))
            seconds = round(time.monotonic() - started, 1)
            runs.append({"experiment": exp.name, "seed": seed, "threads": threads,
                         "figures": figures, "seconds": seconds})
            print(f"{chapter} {implementation} {exp.name}: seed {seed}, {threads} thread(s), "
                  f"{seconds:.0f} s", file=sys.__stderr__, flush=True)
    Path(out).write_text(json.dumps(runs))


def _run(chapter: str, implementation: str, seeds: list[int] | None = None,
         plan: list[tuple[int, int]] | None = None) -> list[dict]:
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
        where = (str(out), str(course.exercises.SOLUTIONS), str(course.alternatives.ALTERNATIVES), seeds, plan)
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
    """The implementations whose recorded (worded) runs do not match the current code."""
    record = record or load(chapter)
    parts = record.get("implementations", {})
    return [i for i in implementations(chapter) if parts.get(i, {}).get("hash") != code_hash(chapter, i)]


def confirmation_round(chapter: str) -> int:
    return ROUNDS.get(chapter, 1)


def confirmation_plan(chapter: str, rounds: int | None = None) -> dict[str, list[tuple[int, int]]]:
    """implementation -> its (seed, threads) runs of rounds 1 to `rounds` (the chapter's round);
    the reference takes the alternative's share in a chapter without one."""
    impls = implementations(chapter)
    plan: dict[str, list[tuple[int, int]]] = {}
    for r in range(1, (rounds or confirmation_round(chapter)) + 1):
        for k, (impl, threads) in enumerate(ROTATION):
            plan.setdefault(impl if impl in impls else "reference", []).append((5 * r + k, threads))
    return plan


def held_out_seeds(chapter: str) -> list[int]:
    """The seeds of the chapter's round: those no claim's wording has seen."""
    r = confirmation_round(chapter)
    return list(range(5 * r, 5 * r + len(ROTATION)))


def missing_confirmation(chapter: str, record: dict | None = None) -> dict[str, list[tuple[int, int]]]:
    """implementation -> the planned held-out runs not in the record (all of them where the code changed)."""
    record = record or load(chapter)
    parts = record.get("confirmation", {}).get("implementations", {})
    out = {}
    for impl, calls in confirmation_plan(chapter).items():
        part = parts.get(impl, {})
        done = {(r["seed"], r["threads"]) for r in part.get("runs", [])} \
            if part.get("hash") == code_hash(chapter, impl) else set()
        if [c for c in calls if c not in done]:
            out[impl] = [c for c in calls if c not in done]
    return out


def stale_confirmation(chapter: str, record: dict | None = None) -> list[str]:
    """The implementations whose held-out runs are missing or of other code (all of them where the
    record names other held-out seeds than the chapter's round)."""
    record = record or load(chapter)
    if record.get("confirmation", {}).get("held_out") != held_out_seeds(chapter):
        return list(confirmation_plan(chapter))
    return list(missing_confirmation(chapter, record))


def refresh(chapter: str, force: bool = False, jobs: int = 1) -> dict:
    """The chapter's record, re-running the implementations whose code changed (or all, forced):
    their worded runs and their held-out runs.

    With `jobs` > 1, that many processes run at once, each for one implementation and a share
    of the seeds (each process runs the notebook's cells once, then its calls)."""
    from concurrent.futures import ThreadPoolExecutor
    record = load(chapter)
    todo = implementations(chapter) if force else stale(chapter, record)
    plan = confirmation_plan(chapter) if force else missing_confirmation(chapter, record)
    held = list(plan)
    hashes = {impl: code_hash(chapter, impl) for impl in {*todo, *held}}   # of the code the runs execute
    per = max(1, -(-jobs // max(1, len(todo))))                 # processes per implementation
    tasks = [("worded", impl, [s for s in range(64) if s % per == k] if per > 1 else None, None)
             for impl in todo for k in range(per)]
    per = max(1, -(-jobs // max(1, len(held))))
    tasks += [("confirmation", impl, None, plan[impl][k::per]) for impl in held for k in range(per)
              if plan[impl][k::per]]
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        results = list(pool.map(lambda t: (t[0], t[1], _run(chapter, t[1], t[2], t[3])), tasks))
    order = lambda r: (r["experiment"], r["seed"], r["threads"])  # noqa: E731
    confirmation = record.setdefault("confirmation", {"implementations": {}})
    for kind, impls in (("worded", todo), ("confirmation", held)):
        part = record["implementations"] if kind == "worded" else confirmation["implementations"]
        for impl in impls:
            runs = [r for k, i, rs in results if (k, i) == (kind, impl) for r in rs]
            old = part.get(impl, {})
            if kind == "confirmation" and not force and old.get("hash") == hashes[impl]:
                runs += old["runs"]                          # earlier rounds, of the same code
            runs.sort(key=order)
            part[impl] = {"hash": hashes[impl], "runs": runs, "seconds": round(sum(r["seconds"] for r in runs), 1)}
            print(f"{chapter}: {impl} ran {sum(len(rs) for k, i, rs in results if (k, i) == (kind, impl))} "
                  f"{'held-out' if kind == 'confirmation' else 'worded'} experiment runs")
    changed = confirmation.get("held_out") != held_out_seeds(chapter)
    confirmation["held_out"] = held_out_seeds(chapter)
    if todo or held or changed:
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


# ---------------------------------------------------------------- margin against spread
def log_slack(a: float, b: float) -> float:
    """The slack of `a > b` on the log scale, log(a / b), where both are positive; a - b otherwise."""
    import math
    return math.log(a / b) if a > 0 and b > 0 else a - b


def _slacks(node: ast.expr, relative: bool = False) -> list[ast.expr]:
    """The predicate's inequalities as expressions of their slack: positive where one holds, by how much.

    `a >= b` gives `a - b`, `a < b` gives `b - a` (`relative`: `log_slack(a, b)`, `log_slack(b, a)`);
    `and` gives each part's; `all(... for ...)` the smallest over its items. Equalities, memberships
    and other forms give none (nothing to measure)."""
    def diff(big: ast.expr, small: ast.expr) -> ast.expr:
        return (ast.Call(ast.Name("log_slack", ast.Load()), [big, small], []) if relative
                else ast.BinOp(big, ast.Sub(), small))
    if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And):
        return [s for v in node.values for s in _slacks(v, relative)]
    if isinstance(node, ast.Compare):
        out, left = [], node.left
        for op, right in zip(node.ops, node.comparators):
            if isinstance(op, (ast.Gt, ast.GtE)):
                out.append(diff(left, right))
            elif isinstance(op, (ast.Lt, ast.LtE)):
                out.append(diff(right, left))
            left = right
        return out
    if (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "all" and len(node.args) == 1
            and isinstance(node.args[0], ast.GeneratorExp)):
        inner = _slacks(node.args[0].elt, relative)
        if inner:
            elt = inner[0] if len(inner) == 1 else ast.Call(ast.Name("min", ast.Load()), inner, [])
            return [ast.Call(ast.Name("min", ast.Load()), [ast.GeneratorExp(elt, node.args[0].generators)], [])]
    return []


def slack_functions(source: str, relative: bool = False) -> dict[str, list[tuple[str, object]]]:
    """claim name -> [(the inequality's slack as text, a function of one run's figures)] for the
    `claim(...)` calls of a claim cell whose predicate is a lambda (`relative`: on the log scale)."""
    namespace: dict = {"log_slack": log_slack}
    tree = ast.parse(source)
    exec(compile(ast.Module([n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))], []),
                 "<claim imports>", "exec"), namespace)
    out: dict[str, list] = {}
    for node in tree.body:
        call = node.value if isinstance(node, ast.Expr) and _calls(node, "claim") else None
        if call is None or not call.args or not isinstance(call.args[0], ast.Constant):
            continue
        holds = call.args[2] if len(call.args) > 2 else next((k.value for k in call.keywords if k.arg == "holds"), None)
        if not isinstance(holds, ast.Lambda):
            continue
        fns = []
        for slack in _slacks(holds.body, relative):
            fn = ast.fix_missing_locations(ast.Expression(ast.Lambda(holds.args, slack)))
            fns.append((ast.unparse(slack), eval(compile(fn, "<claim slack>", "eval"), namespace)))
        out[call.args[0].value] = fns
    return out


def margins(chapter: str, runs: list[dict]) -> dict[str, dict]:
    """claim name -> its tightest inequality: the margin (the slack of the run that decides the
    claim: the smallest, or for a claim about `at_least` of the runs the one at that fraction) against
    the spread (the slack's range over the runs). A margin smaller than the spread is fragile: a run
    as far from the others as they are from each other may break the claim. A timing claim
    (`is_timing`) is measured on the log scale (`log_slack`)."""
    import math
    sources = claim_sources(read_solution(chapter))
    fns = {name: f for source in sources for name, f in slack_functions(source).items()}
    logs = {name: f for source in sources for name, f in slack_functions(source, relative=True).items()}
    claims = claims_of(chapter)
    out = {}
    for name, parts in fns.items():
        timing = name in claims and is_timing(claims[name], runs)
        parts = logs[name] if timing else parts
        at_least = claims[name].at_least if name in claims else 1.0
        rows = []
        for text, fn in parts:
            by_impl: dict[str, list[float]] = {}
            try:
                for r in runs:
                    by_impl.setdefault(r["implementation"], []).append(float(fn(r["figures"])))
            except (KeyError, TypeError, ValueError):
                continue
            values = [v for vs in by_impl.values() for v in vs]
            if not values:
                continue
            margin = min(sorted(vs, reverse=True)[max(0, math.ceil(at_least * len(vs)) - 1)]
                         for vs in by_impl.values())
            rows.append({"slack": text, "margin": margin, "spread": max(values) - min(values)})
        if rows:
            out[name] = min(rows, key=lambda m: m["margin"] / m["spread"] if m["spread"] > 0 else
                            (math.inf if m["margin"] > 0 else -math.inf))
            out[name]["fragile"] = out[name]["margin"] < out[name]["spread"]
            out[name]["timing"] = timing
    return out


def is_timing(c, runs: list[dict]) -> bool:
    """Whether claim `c` reads a timing figure (`TIMING_FIGURE`) on these runs."""
    from attnkit.claims import figures_read
    return any(TIMING_FIGURE.search(name) for name in figures_read(c, runs))


def check(chapter: str, record: dict) -> list[str]:
    """Every claim on every worded run and every held-out run; the failures, as sentences.

    It also prints each claim's margin against its spread, and whether the alternative solution
    gives the reference's figures bit for bit (then it checks nothing independently)."""
    from attnkit.claims import (confirmation_runs, confirmed, figures_read, identical_alternative, record_runs,
                                seen_runs, verdict)
    runs, held_out, seen = record_runs(record), confirmation_runs(record), seen_runs(record)
    problems = []
    if not held_out:
        problems.append(f"{chapter}: no held-out runs in the record: run `python -m course claims {chapter}`")
    edges = margins(chapter, runs + seen)
    for name, c in claims_of(chapter).items():
        v = verdict(c, runs)
        if seen and not confirmed(c, seen + runs)["ok"]:          # every run the wording saw, pooled
            v = {**v, "ok": False, "errors": v["errors"] + [f"fails on the worded runs with the seen seeds {_seeds(seen)}"]}
        counts = ", ".join(f"{v['held'][i]}/{v['total'][i]} {i}" for i in v["total"]) or "no runs"
        h = confirmed(c, held_out, runs + seen)
        m = edges.get(name)
        notes = [f"seen {confirmed(c, seen)['held']}/{len(seen)}"] if seen else []
        notes.append(f"held-out {h['held']}/{h['total']}" + (" (pooled with the worded runs)" if h["pooled"] else "")
                     + ("" if h["ok"] or not held_out else " FAILS"))
        swamped = bool(m and m["fragile"] and m["timing"])   # rule 6: a timing the load decides
        if m:
            notes.append(f"{'log ' if m['timing'] else ''}margin {m['margin']:.3g} vs spread {m['spread']:.3g}"
                         + (" FRAGILE" if m["fragile"] else "")
                         + (" (a timing: fails)" if swamped else ""))
        if identical_alternative(figures_read(c, runs), runs):
            notes.append("alternative bit-identical: not an independent check")
        ok = v["ok"] and (h["ok"] or not held_out) and not swamped
        print(f"  {'ok  ' if ok else 'FAIL'} {name}: {counts} (needed {c.at_least:.0%}); {'; '.join(notes)} - {c.text}")
        if not v["ok"]:
            problems.append(f"{chapter}: claim {name!r} holds in {counts} runs, needed {c.at_least:.0%}"
                            + (f" ({'; '.join(v['errors'])})" if v["errors"] else "") + f": {c.text}")
        if swamped:
            problems.append(f"{chapter}: timing claim {name!r}: its log-scale margin {m['margin']:.3g} ({m['slack']}) is "
                            f"smaller than the run-to-run spread {m['spread']:.3g} of that quantity, so the "
                            f"machine's load, not the effect, decides it: {c.text}")
        if held_out and not h["ok"]:
            problems.append(f"{chapter}: claim {name!r} is not confirmed on the held-out seeds: it holds in "
                            f"{h['held']} of {h['total']} runs{' (pooled)' if h['pooled'] else ''}, needed "
                            f"{c.at_least:.0%}"
                            + (f" ({'; '.join(h['errors'])})" if h["errors"] else "") + f": {c.text}")
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


def _seeds(runs: list[dict]) -> str:
    seeds = sorted({r["seed"] for r in runs})
    return "none" if not seeds else f"{seeds[0]}-{seeds[-1]}" if seeds == list(range(seeds[0], seeds[-1] + 1)) \
        else ", ".join(map(str, seeds))


def main(args: list[str]) -> int:
    """`python -m course claims [NN_name|NN ...] [--force] [--jobs=N] [--check]`: refresh the
    records (N processes at once), check the claims. With --check nothing runs: a stale record is
    a problem."""
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
        if "--check" in args:
            if old := stale(ch):
                problems.append(f"{ch}: the record of {', '.join(old)} is stale: run "
                                f"`python -m course claims {ch}`")
                continue
            record = load(ch)
            if any(missing_confirmation(ch, record).values()):
                problems.append(f"{ch}: held-out runs are missing: run `python -m course claims {ch}`")
                continue
        try:
            record = record if "--check" in args else refresh(ch, force="--force" in args, jobs=jobs)
        except RuntimeError as exc:
            problems.append(str(exc))
            continue
        from attnkit.claims import confirmation_runs, record_runs, seen_runs
        worded, held_out, seen = record_runs(record), confirmation_runs(record), seen_runs(record)
        also = f" and {len(seen)} runs of an earlier round (seeds {_seeds(seen)})" if seen else ""
        print(f"{ch}: {len(claims_of(ch))} claims, worded on {len(worded)} runs (seeds {_seeds(worded)}){also}, "
              f"confirmed on {len(held_out)} held-out runs (seeds {_seeds(held_out)})")
        problems += check(ch, record)
    for p in problems:
        print(f"- {p}")
    print(f"claims: {len(names)} chapters, {len(problems)} problems, {time.monotonic() - started:.0f} s")
    return 1 if problems else 0
