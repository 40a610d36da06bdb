"""The submission service under a class's load: upload-to-feedback time, p50 and p95.

A real `python -m autograder serve` on 127.0.0.1 (graders in the server process, the batch's warm
workers), a plain async client (httpx) playing the students. Half the uploads are the chapter's
reference solution, half the solution with a known mistake (the first of tests/mistakes/NN.py);
each is checked: full marks, or the mistake named. Two phases, bounded in count and time:

  class rate  uploads arrive at random (Poisson) at --rate per minute for --minutes: 200 students x 3
              attempts in the last hour before a deadline is 600 an hour, 10 a minute on average;
  burst       --burst uploads at the same moment (the minute before the deadline).

Upload-to-feedback: from just before the upload request to the first poll (every 0.25 s) that sees
the result. "Drained": seconds from the last upload of a phase to its last result. Goal: p95 <= 10 s
at the class rate, and the queue drained within a minute of the last upload. Asserts nothing.

    .venv/bin/python benchmarks/bench_service.py [--chapter 02_attention] [--db sqlite|postgresql]
        [--graders 2 | --dask 2] [--rate 10] [--minutes 3] [--burst 20] [--json FILE]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import jupytext
import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def notebooks(chapter: str, folder: Path) -> tuple[bytes, bytes, str]:
    """(correct notebook, notebook with a known mistake, the phrase its feedback must hold)."""
    import importlib
    nb = jupytext.read(ROOT / "solutions" / f"{chapter}.py")
    correct = nbformat.writes(nb).encode()
    mistake = importlib.import_module(f"tests.mistakes.{chapter}").MISTAKES[0]
    nb.cells.append(nbformat.v4.new_code_cell(mistake.code))
    return correct, nbformat.writes(nb).encode(), mistake.feedback or "does not match"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


async def one(client: httpx.AsyncClient, token: str, chapter: str, raw: bytes, want: str,
              limit: float) -> tuple[float, bool, float]:
    """(upload-to-feedback seconds, feedback as expected, when the result was seen)."""
    headers = {"Authorization": f"Bearer {token}"}
    started = time.monotonic()
    r = await client.post("/api/submit", headers=headers, data={"chapter": chapter},
                          files={"notebook": (f"{chapter}.ipynb", raw)})
    r.raise_for_status()
    sub_id = r.json()["id"]
    while time.monotonic() - started < limit:
        v = (await client.get(f"/api/submissions/{sub_id}", headers=headers)).json()
        if v["status"] == "done":
            seen = time.monotonic()
            ok = (want == "full" and v["score"].split(" / ")[0] == v["score"].split(" / ")[1]) or \
                 (want != "full" and want in v["feedback"])
            return seen - started, ok, seen
        await asyncio.sleep(0.25)
    return float("inf"), False, time.monotonic()


async def phase(url: str, tokens: list[str], chapter: str, arrivals: list[float], pair, limit: float) -> dict:
    """Send uploads at `arrivals` (seconds from now), alternating correct / with the mistake."""
    correct, wrong, phrase = pair
    async with httpx.AsyncClient(base_url=url, timeout=60, trust_env=False) as client:
        t0 = time.monotonic()

        async def at(i: int, delay: float):
            await asyncio.sleep(delay)
            sent = time.monotonic()
            result = await one(client, tokens[i % len(tokens)], chapter, correct if i % 2 == 0 else wrong,
                               "full" if i % 2 == 0 else phrase, limit)
            return result, sent

        done = await asyncio.gather(*(at(i, d) for i, d in enumerate(arrivals)))
    times = [r[0] for r, _ in done]
    last_upload, last_result = max(s for _, s in done), max(r[2] for r, _ in done)
    finite = [t for t in times if t != float("inf")]
    return {"n": len(times), "p50_s": round(statistics.median(finite), 2) if finite else None,
            "p95_s": round(percentile(finite, 95), 2) if finite else None, "max_s": round(max(times), 2),
            "wrong_feedback": sum(not r[1] for r, _ in done), "not_graded": len(times) - len(finite),
            "drained_s": round(last_result - last_upload, 1), "span_s": round(last_upload - t0, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chapter", default="02_attention")
    parser.add_argument("--db", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--graders", type=int, default=2)
    parser.add_argument("--rate", type=float, default=10.0, help="uploads per minute in the class-rate phase")
    parser.add_argument("--minutes", type=float, default=3.0, help="length of the class-rate phase")
    parser.add_argument("--burst", type=int, default=20, help="uploads at once in the burst phase (0: none)")
    parser.add_argument("--limit", type=float, default=300.0, help="seconds after which an upload counts as lost")
    parser.add_argument("--dask", type=int, default=0, metavar="N",
                        help="grade on a Dask scheduler with N one-thread workers on 127.0.0.1 (serve --scheduler)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    from autograder.service import tokens
    from autograder.service.store import open_db
    from tests.service.live import Live
    folder = Path(tempfile.mkdtemp(prefix="bench-service-"))
    server = None
    if args.db == "postgresql":
        from tests.service.postgres import Server
        server = Server()
        why = server.start()
        if why:
            print(f"no PostgreSQL: {why}")
            return 2
        url = server.create()
    else:
        url = f"sqlite:///{folder / 'service.sqlite'}"
    db = open_db(url)
    toks = [t for _, _, t in tokens.issue(db, [(f"s{i:03d}", "") for i in range(200)])]
    pair = notebooks(args.chapter, folder)
    procs, engine = [], ["--graders", str(args.graders)]
    if args.dask:
        from bench_cluster import start_dask
        address, procs, seconds = start_dask(folder, args.dask)
        print(f"Dask: a scheduler and {args.dask} workers joined in {seconds:.1f} s")
        engine = ["--scheduler", address]
    live = Live(folder, url, [args.chapter], *engine, "--rate", "100/60")
    rng = random.Random(args.seed)
    arrivals, t = [], rng.expovariate(args.rate / 60)
    while t < args.minutes * 60:
        arrivals.append(t)
        t += rng.expovariate(args.rate / 60)
    try:
        started = time.monotonic()
        live.start()
        warm = asyncio.run(phase(live.url, toks, args.chapter, [0.0, 0.0], pair, args.limit))
        print(f"service up and graders warm in {time.monotonic() - started:.1f} s (first two: {warm['max_s']} s)")
        figures = {"chapter": args.chapter, "db": args.db,
                   "graders": f"dask:{args.dask}" if args.dask else args.graders}
        figures["class_rate"] = asyncio.run(phase(live.url, toks, args.chapter, arrivals, pair, args.limit))
        figures["class_rate"]["per_minute"] = args.rate
        if args.burst:
            figures["burst"] = asyncio.run(phase(live.url, toks, args.chapter, [0.0] * args.burst, pair, args.limit))
    finally:
        live.stop()
        if procs:
            from bench_cluster import stop
            stop(procs)
        if server is not None:
            server.stop()
    for name in ("class_rate", "burst"):
        if name in figures:
            f = figures[name]
            print(f"{name:10s} n={f['n']:3d}  upload-to-feedback p50 {f['p50_s']} s, p95 {f['p95_s']} s, max "
                  f"{f['max_s']} s; drained {f['drained_s']} s after the last upload; wrong feedback "
                  f"{f['wrong_feedback']}, not graded {f['not_graded']}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
