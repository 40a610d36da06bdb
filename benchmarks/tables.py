"""Print benchmarks/README.md's tables from benchmarks/measurements.json (ratios are computed here).

    .venv/bin/python benchmarks/tables.py            # print every table
    .venv/bin/python benchmarks/tables.py --write    # put them into benchmarks/README.md
    .venv/bin/python benchmarks/tables.py --check    # exit 1 if the README holds other tables

In the README, each table sits between `<!-- table: NAME -->` and `<!-- end table -->`.
The figures themselves come from the benchmark scripts (each table's source says which);
they are copied into measurements.json after a run.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "measurements.json"
README = HERE / "README.md"
BLOCK = re.compile(r"(<!-- table: (\w+) -->\n)(.*?)(<!-- end table -->)", re.S)


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def seconds(x) -> str:
    return x if isinstance(x, str) else f"{x:.3f} s"


def batch_round_one(d: dict) -> str:
    n, rows = d["n"], []
    for r in d["rows"]:
        ours, bare, nbg = r["ours_s"], r["import_s"], r["nbgrader_s"]
        bold = "**" if r["chapter"] == "02_attention" else ""
        rows.append([f"{r['chapter']} ({r['tests']} tests)", r["load"],
                     f"{bold}{ours:g} s{bold} ({r['each_s']:.2f} s each)", f"{bare:g} s", f"{ours / bare:.2f}",
                     f"{nbg:g} s", f"{ours / nbg:.3f} ({nbg / ours:.1f}x faster)"])
    return table(["chapter", "load", f"ours, {n} with `--jobs 2`", f"(a) bare `import torch` x {n}, 2 at a time",
                  "ours / (a)", f"(b) nbgrader `autograde` x {n}", "ours / (b)"], rows)


def round_two(d: dict) -> str:
    one, warm = d["one_notebook"], d["warm_worker"]
    rows = [["one 03 submission, `python -m autograder grade NB`, vs bare `import torch` (median of 5)",
             f"{one['round_one_s']} s = **{one['round_one_s'] / one['import_s']:.2f}x**",
             f"{one['round_two_s']} s = **{one['round_two_s'] / one['import_s']:.2f}x**", f"{one['goal_x']}x"]]
    for b in d["batch"]:
        rows.append([f"200 submissions of {b['chapter'][:2]}, `--jobs 2`", f"{b['round_one_s']} s",
                     f"**{b['round_two_s']} s**", f"{b['goal_s']} s" if b["goal_s"] else ""])
    rows.append(["one 03 submission in a warm worker (mean of 20)", f"{warm['round_one_s']:.3f} s",
                 f"{warm['round_two_s']:.3f} s", ""])
    return table(["", "round one (80486ad)", "round two", "goal"], rows)


def breakdown(d: dict) -> str:
    return table(["part", "round one", "round two"], [[p, seconds(a), seconds(b)] for p, a, b in d["breakdown"]])


def cluster(d: dict) -> str:
    rows = []
    for r in d["rows"]:
        local, dask, start = r["local_s"], r["dask_s"], r["start_s"]
        over = dask / local - 1
        if start is None:
            dask_cell, over_cell = f"{dask} s", f"{over:+.0%}"
        else:
            dask_cell = f"{dask} s (+{start} s workers' start)"
            over_cell = f"**{over:+.1%}** ({(dask + start) / local - 1:+.1%} with the start)"
        local_cell = f"{local} s" + (f" ({local / r['n']:.2f} s each)" if start is not None else "")
        rows.append([r["what"], r["order"], r["load"], local_cell, dask_cell, over_cell])
    return table(["submissions of 03_transformer", "order", "load (before / between / after)",
                  "local pool, `--jobs 2`", "Dask, 2 one-thread workers", "overhead"], rows)


def summary(m: dict) -> str:
    one, b = m["round_two"]["one_notebook"], m["round_two"]["batch"]
    c = m["cluster"]["rows"]
    ratio = lambda s: s / one["import_s"]  # noqa: E731
    return table(["what", "script", "figure"], [
        ["grading one 03_transformer submission vs a bare `python -c \"import torch\"`",
         "`benchmarks/bench_grade_one.py`",
         f"{one['round_two_s']} s vs {one['import_s']} s: **{ratio(one['round_two_s']):.2f}x** (goal "
         f"{one['goal_x']}x; {ratio(one['round_one_s']):.2f}x before round two, same run; idle machine)"],
        ["200 submissions with `--jobs 2`", "`benchmarks/bench_batch.py`",
         f"{b[0]['chapter']} **{b[0]['round_two_s']} s** ({b[0]['round_one_s']} s before round two), "
         f"{b[1]['chapter']} {b[1]['round_two_s']} s ({b[1]['round_one_s']} s); idle machine"],
        ["where one submission's time goes", "`benchmarks/bench_grade_breakdown.py`", "see \"Round two\""],
        ["200 submissions of 03 through Dask (scheduler + 2 workers on 127.0.0.1) vs `--jobs 2`",
         "`benchmarks/bench_cluster.py`",
         f"{c[0]['dask_s']:.0f} s vs {c[0]['local_s']:.0f} s: **{c[0]['dask_s'] / c[0]['local_s'] - 1:+.1%}**; "
         f"{c[1]['n']} in the other order: {c[1]['dask_s'] / c[1]['local_s'] - 1:+.1%} (goal at most "
         f"+{m['cluster']['goal_overhead']:.0%})"],
        ["our attention and multi-head attention vs PyTorch's", "`benchmarks/bench_03_attention.py`",
         "numerical agreement and speed over several lengths (printed, not recorded here)"],
    ])


TABLES = {"summary": summary, "batch_round_one": lambda m: batch_round_one(m["batch_round_one"]),
          "round_two": lambda m: round_two(m["round_two"]), "breakdown": lambda m: breakdown(m["round_two"]),
          "cluster": lambda m: cluster(m["cluster"])}


def tables() -> dict[str, str]:
    m = json.loads(DATA.read_text())
    return {name: make(m) for name, make in TABLES.items()}


def filled(text: str, made: dict[str, str]) -> str:
    """`text` with every table block replaced by the table this script prints."""
    return BLOCK.sub(lambda b: b.group(1) + made[b.group(2)] + b.group(4), text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="write the tables into benchmarks/README.md")
    parser.add_argument("--check", action="store_true", help="exit 1 unless the README holds these tables")
    args = parser.parse_args(argv)
    made = tables()
    if not (args.write or args.check):
        for name, md in made.items():
            print(f"{name}:\n{md}")
        return 0
    text = README.read_text()
    named = [b.group(2) for b in BLOCK.finditer(text)]
    if sorted(named) != sorted(made):
        print(f"README.md's table blocks {sorted(named)} are not the tables {sorted(made)}", file=sys.stderr)
        return 1
    if args.write:
        README.write_text(filled(text, made))
    elif filled(text, made) != text:
        print("benchmarks/README.md's tables differ from `python benchmarks/tables.py`: run it with --write",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
