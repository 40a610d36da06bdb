"""Grading through Dask against the local pool: the same submissions, the same machine, one run.

  local     `python -m autograder grade DIR --jobs J`, wall clock (start-up included)
  dask      `python -m autograder grade DIR --scheduler ADDRESS` on a `dask scheduler` and
            J `dask worker` processes of one thread each on 127.0.0.1, wall clock of the
            client (its connection, the workers' sandbox start-up, every submission);
            the workers' own Python start (before the client runs) is printed apart.
overhead = dask / local - 1 (goal: at most 10%). Submissions: as benchmarks/bench_batch.py
(copies of the solution, every tenth the unsolved exercise). The two runs' results are
compared (score, status and every test's score). Asserts nothing.

    .venv/bin/python benchmarks/bench_cluster.py [CHAPTER] [-n 200] [--jobs 2] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_batch import make_submissions, timed  # noqa: E402


def start_dask(folder: Path, workers: int) -> tuple[str, list[subprocess.Popen], float]:
    """A scheduler and `workers` one-thread workers; (address, processes, seconds until all joined)."""
    from distributed import Client
    started = time.perf_counter()
    file, procs = folder / "scheduler.json", []
    quiet = dict(cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    procs.append(subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                                   "--port", "0", "--no-dashboard", "--scheduler-file", str(file)], **quiet))
    while not file.exists():
        time.sleep(0.1)
    address = json.loads(file.read_text())["address"]
    for i in range(workers):
        procs.append(subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", address, "--host",
                                       "127.0.0.1", "--nthreads", "1", "--no-dashboard", "--name", f"w{i}"],
                                      **quiet))
    with Client(address, timeout=30, set_as_default=False) as client:
        client.wait_for_workers(workers, timeout=300)
    return address, procs, time.perf_counter() - started


def stop(procs: list[subprocess.Popen]) -> None:
    for proc in reversed(procs):
        os.killpg(proc.pid, signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def profile(out: Path, started: float) -> dict:
    """Mean grading time per submission (execution_time) and the first result's time after the start."""
    from datetime import datetime
    rs = [json.loads(p.read_text()) for p in out.glob("*/results.json")]
    times = [r["extra_data"].get("execution_time") or 0.0 for r in rs]
    stamps = [datetime.fromisoformat(r["extra_data"]["graded_at"]).timestamp() for r in rs]
    return {"mean_execution_s": round(sum(times) / max(1, len(times)), 2),
            "first_result_after_s": round(min(stamps) - started, 1) if stamps else None}


def essence(out: Path) -> dict:
    found = {}
    for p in sorted(out.glob("*/results.json")):
        r = json.loads(p.read_text())
        found[p.parent.name] = (r["score"], r["extra_data"]["status"], [(t["name"], t["score"]) for t in r["tests"]])
    return found


def grade(subs: Path, out: Path, *extra: str) -> float:
    return timed([sys.executable, "-m", "autograder", "grade", str(subs), "--out", str(out), "--no-progress",
                  *extra], cwd=ROOT)


def main() -> None:
    from autograder.paths import chapters
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("chapter", nargs="?", default="03_transformer" if "03_transformer" in chapters()
                        else chapters()[0])
    parser.add_argument("-n", type=int, default=200, help="submissions")
    parser.add_argument("--jobs", type=int, default=2, help="local jobs, and Dask workers")
    parser.add_argument("--dask-first", action="store_true", help="run the Dask side first")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    n, jobs = args.n, args.jobs
    tmp = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    procs: list[subprocess.Popen] = []
    load = [os.getloadavg()[0]]
    try:
        make_submissions(args.chapter, n, tmp / "subs")
        figures: dict[str, float] = {}

        def run_local() -> None:
            t0 = time.time()
            figures["local_s"] = grade(tmp / "subs", tmp / "local", "--jobs", str(jobs))
            figures["local_profile"] = profile(tmp / "local", t0)

        def run_dask() -> None:
            address, started, figures["dask_workers_start_s"] = start_dask(tmp, jobs)
            procs.extend(started)
            try:
                t0 = time.time()
                figures["dask_s"] = grade(tmp / "subs", tmp / "dask", "--scheduler", address)
                figures["dask_profile"] = profile(tmp / "dask", t0)
            finally:
                stop(procs)
                procs.clear()

        for step in (run_dask, run_local) if args.dask_first else (run_local, run_dask):
            step()
            load.append(os.getloadavg()[0])
        same = essence(tmp / "local") == essence(tmp / "dask")
        count = len(essence(tmp / "dask"))
    finally:
        stop(procs)
        shutil.rmtree(tmp, ignore_errors=True)
    local, dask = figures["local_s"], figures["dask_s"]
    overhead = dask / local - 1
    result = {"chapter": args.chapter, "n": n, "jobs": jobs, "cpus": os.cpu_count(),
              "load_average_1min": [round(x, 1) for x in load], "local_s": round(local, 1),
              "dask_s": round(dask, 1), "dask_workers_start_s": round(figures["dask_workers_start_s"], 1),
              "overhead": round(overhead, 3),
              "local_profile": figures["local_profile"], "dask_profile": figures["dask_profile"],
              "same_results": same, "dask_results": count}
    print(f"chapter {args.chapter}: {n} submissions, {jobs} jobs/workers, {os.cpu_count()} CPUs "
          f"(1-min load average before/between/after: {', '.join(f'{x:.1f}' for x in load)})")
    print(f"  local pool, --jobs {jobs}                  {local:7.1f} s  ({local / n:.2f} s per submission)")
    print(f"  Dask, scheduler + {jobs} workers on 127.0.0.1  {dask:7.1f} s  ({dask / n:.2f} s per submission; "
          f"workers' own start {figures['dask_workers_start_s']:.1f} s before)")
    for side in ("local", "dask"):
        prof = figures[f"{side}_profile"]
        print(f"  {side}: first result after {prof['first_result_after_s']} s; grading {prof['mean_execution_s']} s "
              "per submission (its execution_time)")
    print(f"  overhead {overhead:+.1%} (goal <= +10%); same results: {same} ({count} results)")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
