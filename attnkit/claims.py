"""Claims as code: what a chapter's text concludes from its experiment, checked on every run.

A chapter exposes its experiment as a function of the seed and the thread count,
decorated with `@experiment(chapter)`. It returns a dict of figures (name -> number,
the names the text glues); other values (a model, a curve to plot) pass through to
the page but are not figures. Calling it in the notebook glues every figure.

A sentence that concludes something from those figures is a `claim`: a name, the
sentence's wording, and a predicate over the figures of one run. The page shows
whether it holds on this run and on every run of the claims check
(`python -m course claims NN`: 5 seeds x the reference and the alternative
solution x 1 and 2 threads, recorded in tests/claims/NN_name.json), and whether it
is confirmed on held-out seeds that its wording never saw (the record's "confirmation").

    @experiment("07_transformer_xl")
    def recall(seed: int = 0, threads: int = 1) -> dict:
        torch.set_num_threads(threads)
        ...
        return {"ch07_acc_xl_far": ..., "ch07_acc_ctrl_far": ...}

    figures = recall(seed=0, threads=1)      # the page's run: one of the check's runs
    claim("xl_far_beats_control", "XL's far band beats the control by at least 0.1",
          lambda g: g["ch07_acc_xl_far"] - g["ch07_acc_ctrl_far"] >= 0.1)
    spread(["ch07_acc_xl_far", "ch07_acc_ctrl_far"])   # this run, mean and range over runs
"""
from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from attnkit.glue import glue

RECORDS = Path(os.environ.get("ATTNKIT_CLAIMS_DIR", Path(__file__).resolve().parent.parent / "tests" / "claims"))
EXPERIMENTS: dict[str, "Experiment"] = {}   # name -> experiment, in the order the notebook defines them
CLAIMS: dict[str, "Claim"] = {}             # name -> claim, in the order the notebook states them
THIS_RUN: dict[str, float] = {}             # the figures of the experiments called in this process
CHAPTER: list[str] = []                     # the chapter whose record the page reads (set by @experiment)


@dataclass
class Experiment:
    """A chapter's experiment: `fn(seed=, threads=)` returns its figures."""

    chapter: str
    name: str
    fn: Callable[..., dict]
    seeds: int = 5
    threads: tuple[int, ...] = (1, 2)


@dataclass
class Claim:
    """A sentence of the text, as a predicate over one run's figures."""

    name: str
    text: str
    holds: Callable[[dict], bool]
    at_least: float = 1.0      # the fraction of each implementation's runs in which it must hold

    def check(self, figures: dict) -> bool | str:
        """True or False on these figures; a message when the predicate cannot be evaluated."""
        try:
            return bool(self.holds(figures))
        except KeyError as exc:
            return f"figure {exc} not measured"


def figures_of(result: Any) -> dict[str, float]:
    """The numbers among an experiment's returned values (0-d tensors as floats)."""
    out = {}
    for name, value in (result or {}).items():
        if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
            value = value.item()
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[name] = value
    return out


def experiment(chapter: str, seeds: int = 5, threads: tuple[int, ...] = (1, 2)):
    """Register `fn(seed=, threads=) -> dict` as `chapter`'s experiment; calling it glues its figures."""
    def register(fn):
        @functools.wraps(fn)
        def run(*, seed: int, threads: int) -> dict:
            result = fn(seed=seed, threads=threads)
            figures = figures_of(result)
            THIS_RUN.update(figures)
            for name, value in figures.items():
                glue(name, value)
            return result
        EXPERIMENTS[fn.__name__] = Experiment(chapter, fn.__name__, run, seeds, tuple(threads))
        CHAPTER[:] = [chapter]
        return run
    return register


# ---------------------------------------------------------------- the record of the claims check
def load_record(chapter: str) -> dict | None:
    """tests/claims/<chapter>.json, or None (a student's copy has no record)."""
    path = RECORDS / f"{chapter}.json"
    return json.loads(path.read_text()) if path.exists() else None


def record_runs(record: dict | None) -> list[dict]:
    """Every run of a record: {implementation, seed, threads, figures}, all experiments merged."""
    runs: dict[tuple, dict] = {}
    parts = (record or {}).get("implementations", {})
    for impl, part in sorted(parts.items(), key=lambda kv: kv[0] != "reference"):
        for r in part.get("runs", []):
            key = (impl, r["seed"], r["threads"])
            runs.setdefault(key, {"implementation": impl, "seed": r["seed"], "threads": r["threads"],
                                  "figures": {}})["figures"].update(r["figures"])
    return list(runs.values())


def verdict(c: Claim, runs: list[dict]) -> dict:
    """How often `c` holds in each implementation's runs, and whether that is often enough."""
    by_impl: dict[str, list] = {}
    for r in runs:
        by_impl.setdefault(r["implementation"], []).append(c.check(r["figures"]))
    held = {impl: sum(v is True for v in vs) for impl, vs in by_impl.items()}
    total = {impl: len(vs) for impl, vs in by_impl.items()}
    errors = sorted({v for vs in by_impl.values() for v in vs if isinstance(v, str)})
    ok = bool(runs) and not errors and all(held[i] >= c.at_least * total[i] - 1e-9 for i in total)
    return {"ok": ok, "held": held, "total": total, "errors": errors}


def confirmation_runs(record: dict | None) -> list[dict]:
    """The runs on held-out seeds, which no claim's wording has seen, in the shape of `record_runs`."""
    part = (record or {}).get("confirmation") or {}
    held = part.get("held_out")
    return [r for r in record_runs(part) if held is None or r["seed"] in held]


def seen_runs(record: dict | None) -> list[dict]:
    """The runs of earlier confirmation rounds: read before a claim was reworded, so no longer held out."""
    part = (record or {}).get("confirmation") or {}
    held = part.get("held_out")
    return [r for r in record_runs(part) if held is not None and r["seed"] not in held]


def confirmed(c: Claim, runs: list[dict], worded: list[dict] = ()) -> dict:
    """How often `c` holds in the held-out runs, all solutions pooled (each runs only some seeds).

    A claim about a rate below one run in len(runs) ("in some runs, at least 1 in 10") cannot be
    tested on those runs alone: it is tested on them pooled with the `worded` runs ("pooled")."""
    pooled = bool(runs) and bool(worded) and c.at_least * len(runs) < 1
    every = list(runs) + (list(worded) if pooled else [])
    checks = [c.check(r["figures"]) for r in every]
    held, errors = sum(v is True for v in checks), sorted({v for v in checks if isinstance(v, str)})
    ok = bool(runs) and not errors and held >= c.at_least * len(every) - 1e-9
    return {"ok": ok, "held": held, "total": len(every), "errors": errors, "pooled": pooled}


class _Reads(dict):
    """A run's figures that note which names a predicate reads."""

    def __init__(self, figures: dict):
        super().__init__(figures)
        self.read: set[str] = set()

    def __getitem__(self, name):
        self.read.add(name)
        return super().__getitem__(name)


def figures_read(c: Claim, runs: list[dict]) -> set[str]:
    """The names of the figures `c`'s predicate reads (on the runs where it can be evaluated)."""
    names: set[str] = set()
    for r in runs:
        g = _Reads(r["figures"])
        c.check(g)
        names |= g.read
    return names


def identical_alternative(names: set[str], runs: list[dict]) -> bool:
    """Whether the alternative solution gives the reference's bits for every figure in `names`
    in every run (seed, threads) both have: then it is no independent check of those figures."""
    ref = {(r["seed"], r["threads"]): r["figures"] for r in runs if r["implementation"] == "reference"}
    pairs = [(ref[k], r["figures"]) for r in runs if r["implementation"] == "alternative"
             and (k := (r["seed"], r["threads"])) in ref]
    return bool(names and pairs) and all(a.get(n) == b.get(n) for a, b in pairs for n in names)


def _runs_phrase(runs: list[dict]) -> str:
    seeds = sorted({r["seed"] for r in runs})
    impls = sorted({r["implementation"] for r in runs}, key=lambda i: i != "reference")
    threads = sorted({r["threads"] for r in runs})
    return (f"{len(seeds)} seeds × {' and '.join(impls)} solution × "
            f"{' and '.join(map(str, threads))} thread{'s' if threads != [1] else ''}")


# ---------------------------------------------------------------- on the page
def _show_markdown(text: str) -> None:
    try:
        from IPython import get_ipython
        from IPython.display import Markdown, display
    except ImportError:
        print(text)
        return
    if get_ipython() is None:
        return
    display(Markdown(text))


def claim(name: str, text: str, holds: Callable[[dict], bool], at_least: float = 1.0) -> None:
    """State a claim of the text; on the page, show whether it holds here and over the recorded runs.

    `holds(g)` reads figures by name (`g["ch07_acc_xl_far"]`) from one run. `at_least` is the
    fraction of each implementation's runs that must satisfy it: 1.0 for a sentence that says
    so without qualification, 0.8 for "in 4 of 5 seeds" (and the text must say that).
    """
    c = CLAIMS[name] = Claim(name, text, holds, at_least)
    here = c.check(THIS_RUN) if THIS_RUN else None
    line = f"**Claim** `{name}`: {text}"
    if isinstance(here, str):
        line += f" This run: ✗ {here}."
    elif here is not None and at_least < 1:   # "in some runs ...": this run is one of them or not
        line += f" This run: {'one of them' if here else 'not one of them'}."
    elif here is not None:
        line += f" This run: {'✓ holds' if here else '✗ does not hold'}."
    record = load_record(CHAPTER[0]) if CHAPTER else None
    line += badge(c, record_runs(record), confirmation_runs(record), seen_runs(record))
    _show_markdown(line)


def badge(c: Claim, runs: list[dict], held_out: list[dict], seen: list[dict] = ()) -> str:
    """What the claims check says of `c`: on the runs it was worded on, on the held-out seeds, and
    whether the alternative solution checked it independently."""
    if not runs:
        return ""
    v = verdict(c, runs)
    counts = ", ".join(f"{v['held'][i]} of {v['total'][i]} {i} runs" for i in v["total"])
    need = "" if c.at_least >= 1 else f" (needed: {c.at_least:.0%} of each)"
    line = f" Claims check ({_runs_phrase(runs)}): {'✓' if v['ok'] else '✗'} {counts}{need}."
    if seen:
        s = confirmed(c, list(seen), runs)
        line += (f" Its wording also saw seeds {min(r['seed'] for r in seen)}-{max(r['seed'] for r in seen)}:"
                 f" {'✓' if s['ok'] else '✗'} {s['held']} of {s['total']} runs.")
    if held_out:
        h = confirmed(c, held_out, list(runs) + list(seen))
        seeds = len({r["seed"] for r in held_out})
        these = "runs, with the worded ones: a rate this low needs more runs" if h["pooled"] else "runs"
        line += (f" ✓ Confirmed on {seeds} held-out seeds ({h['held']} of {h['total']} {these})." if h["ok"] else
                 f" ✗ Not confirmed on {seeds} held-out seeds: holds in {h['held']} of {h['total']} {these}.")
    else:
        line += " Not yet confirmed on held-out seeds."
    if identical_alternative(figures_read(c, runs), runs):
        line += (" The alternative solution gives the reference's figures bit for bit here, so it is"
                 " not an independent check.")
    return line


def _moves_with(name: str, runs: list[dict]) -> str:
    """Which of seed, threads, implementation change figure `name` (bit for bit) in the record."""
    def value(impl, seed, threads):
        return next((r["figures"].get(name) for r in runs if (r["implementation"], r["seed"], r["threads"])
                     == (impl, seed, threads)), None)
    seeds = sorted({r["seed"] for r in runs})
    threads = sorted({r["threads"] for r in runs})
    moves = []
    if len({value("reference", s, threads[0]) for s in seeds}) > 1:
        moves.append("seed")
    if any(len({value("reference", s, t) for t in threads}) > 1 for s in seeds):
        moves.append("threads")
    if any(value("alternative", s, threads[0]) not in (None, value("reference", s, threads[0])) for s in seeds):
        moves.append("implementation")
    return ", ".join(moves) or "nothing (bit-identical in every run)"


def spread(names: dict[str, str] | list[str], digits: int = 2) -> None:
    """A table of this run's figures with their mean and range over the recorded runs (the worded
    runs and the held-out ones).

    `names` maps figure names to row labels (a list uses the names). The last column says
    which of seed, thread count and implementation change the figure in the worded runs.
    """
    labels = names if isinstance(names, dict) else {n: n for n in names}
    record = load_record(CHAPTER[0]) if CHAPTER else None
    runs, later = record_runs(record), seen_runs(record) + confirmation_runs(record)
    head = "| figure | this run |" + (" mean | min - max | changes with |" if runs else "")
    rows = [head, "|" + "---|" * (head.count("|") - 1)]
    for name, label in labels.items():
        here = THIS_RUN.get(name)
        row = f"| {label} | {'-' if here is None else f'{here:.{digits}f}'} |"
        vals = [r["figures"][name] for r in runs + later if name in r["figures"]]
        if runs and vals:
            row += (f" {sum(vals) / len(vals):.{digits}f} | {min(vals):.{digits}f} - {max(vals):.{digits}f} |"
                    f" {_moves_with(name, runs)} |")
        elif runs:
            row += " - | - | not recorded |"
        rows.append(row)
    seeds = sorted({r["seed"] for r in later})
    also = f" and {len(later)} runs on the later seeds {seeds[0]}-{seeds[-1]}, one each" if later else ""
    note = (f"Over {len(runs)} runs of the claims check ({_runs_phrase(runs)}){also}; the last column"
            f" reads the first {len(runs)}." if runs else
            "No record of the claims check in this copy: this run's figures only.")
    _show_markdown("\n".join(rows) + "\n\n" + note)
