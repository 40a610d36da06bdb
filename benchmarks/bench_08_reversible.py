"""Chapter 08: peak training memory against depth, standard residual layers against reversible ones.

Each (kind, depth) runs in a fresh child process: a stack of `depth` layers, each a pair of
feed-forward sub-layers F, G (d -> 4d -> d, ReLU), on a batch of B x T positions; one
forward and backward pass (parameters and their gradients included in the peak).
  * standard: x = x1 + x2; x = x + F(x); x = x + G(x), run by autograd (every layer's
    activations stored);
  * reversible: the same F and G in the chapter's `ReversibleStack` of `ReversibleBlock`s
    (a custom autograd.Function that keeps only the last outputs and recomputes in backward).
On CPU the peak is the child's peak resident set size (ru_maxrss) above what it held before
building the model, with glibc's MALLOC_MMAP_THRESHOLD_=65536 set in the child's environment
(large tensors are their own mmaps, returned when freed); on CUDA, torch.cuda.max_memory_allocated.
Time: in another fresh child with the default allocator, the median of 3 forward+backward
steps after one warm-up, in CPU seconds of the process (time.process_time: robust to other
processes on a shared machine; wall seconds on CUDA). One thread by default (--threads).

    python benchmarks/bench_08_reversible.py [--device cuda] [--depths 2 4 8 12 24]
        [--d 64] [--batch 16] [--length 1024] [--threads 1]

Prints a table; the ratios are measured in the same run. Nothing is asserted.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def child(kind: str, depth: int, what: str, args) -> dict:
    import torch
    import torch.nn as nn
    from autograder.reference import load_reference
    torch.set_num_threads(args.threads)
    ns = load_reference("08_reformer")
    device = torch.device(args.device)
    d = args.d
    g = torch.Generator().manual_seed(0)
    x1 = torch.randn(args.batch, args.length, d, generator=g).to(device).requires_grad_()
    x2 = torch.randn(args.batch, args.length, d, generator=g).to(device).requires_grad_()

    def ff():
        return nn.Sequential(nn.Linear(d, 4 * d), nn.ReLU(), nn.Linear(4 * d, d))

    if device.type == "cuda":
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    else:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    torch.manual_seed(0)
    layers = [(ff().to(device), ff().to(device)) for _ in range(depth)]
    if kind == "reversible":
        stack = ns.ReversibleStack([ns.ReversibleBlock(f, g_) for f, g_ in layers])

        def step():
            y1, y2 = stack(x1, x2)
            (y1.sum() + y2.sum()).backward()
    else:
        def step():
            x = x1 + x2
            for f, g_ in layers:
                x = x + f(x)
                x = x + g_(x)
            (2 * x.sum()).backward()
    step()
    if device.type == "cuda":
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - before
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    if what == "memory":
        return {"peak": peak}
    times = []
    for _ in range(3):
        if device.type == "cuda":
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            step()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        else:
            t0 = time.process_time()
            step()
            times.append(time.process_time() - t0)
    return {"seconds": statistics.median(times)}


def run_child(kind: str, depth: int, argv: list[str]) -> dict | None:
    """Peak memory (allocator returning large blocks) and time (default allocator)."""
    result = {}
    for what in ("memory", "time"):
        env = dict(os.environ)
        if what == "memory":
            env["MALLOC_MMAP_THRESHOLD_"] = "65536"
        proc = subprocess.run([sys.executable, __file__, "--child", kind, str(depth), what] + argv,
                              env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.stderr.write(proc.stderr[-2000:])
            return None
        result.update(json.loads(proc.stdout.strip().splitlines()[-1]))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--depths", type=int, nargs="+", default=[2, 4, 8, 12, 24])
    parser.add_argument("--d", type=int, default=64)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=1024)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--child", nargs=3, default=None)
    args, _ = parser.parse_known_args()
    if args.child:
        print(json.dumps(child(args.child[0], int(args.child[1]), args.child[2], args)))
        return
    argv = list(sys.argv[1:])
    import torch
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.node()}, "
          f"{os.cpu_count()} cores, torch {torch.__version__}, device {args.device}, "
          f"{args.threads} thread(s), load {os.getloadavg()[0]:.1f} (1 min)")
    print(f"layers of two "
          f"feed-forwards {args.d} -> {4 * args.d} -> {args.d}; batch {args.batch} x {args.length}; "
          f"forward+backward, parameters and gradients included")
    unit = "s" if args.device == "cuda" else "CPU s"
    print(f"{'layers':>6s} {'standard MiB':>12s} {'reversible MiB':>14s} {'ratio':>6s} "
          f"{'standard ' + unit:>15s} {'reversible ' + unit:>17s}")
    base = {}
    for n in args.depths:
        std = run_child("standard", n, argv)
        rev = run_child("reversible", n, argv)
        base.setdefault("std", std)
        base.setdefault("rev", rev)
        cells = []
        cells.append(f"{std['peak'] / 2**20:12.1f}" if std else f"{'failed':>12s}")
        cells.append(f"{rev['peak'] / 2**20:14.1f}" if rev else f"{'failed':>14s}")
        cells.append(f"{std['peak'] / rev['peak']:6.1f}" if std and rev else f"{'-':>6s}")
        cells.append(f"{std['seconds']:15.3f}" if std else f"{'-':>15s}")
        cells.append(f"{rev['seconds']:17.3f}" if rev else f"{'-':>17s}")
        print(f"{n:6d} " + " ".join(cells), flush=True)
    first, last = args.depths[0], args.depths[-1]
    if base.get("std") and base.get("rev") and std and rev:
        print(f"memory at {last} layers over memory at {first}: standard "
              f"{std['peak'] / base['std']['peak']:.2f}x, reversible "
              f"{rev['peak'] / base['rev']['peak']:.2f}x; per extra layer: standard "
              f"{(std['peak'] - base['std']['peak']) / (last - first) / 2**20:.2f} MiB, reversible "
              f"{(rev['peak'] - base['rev']['peak']) / (last - first) / 2**20:.2f} MiB; "
              f"time at {last} layers, reversible over standard {rev['seconds'] / std['seconds']:.2f}x")


if __name__ == "__main__":
    main()
