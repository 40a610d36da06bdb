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
Time is the median of 3 forward+backward runs after the memory run.

    python benchmarks/bench_08_reversible.py [--device cuda] [--depths 2 4 8 12 24]
        [--d 64] [--batch 16] [--length 1024] [--threads N]

Prints a table; the ratios are measured in the same run. Nothing is asserted.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def child(kind: str, depth: int, args) -> dict:
    import torch
    import torch.nn as nn
    from attnkit.timing import time_call
    from autograder.reference import load_reference
    if args.threads:
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
    seconds = time_call(step, repeat=3, warmup=0, device=device)
    return {"peak": peak, "seconds": seconds}


def run_child(kind: str, depth: int, argv: list[str]) -> dict | None:
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    proc = subprocess.run([sys.executable, __file__, "--child", kind, str(depth)] + argv,
                          env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-2000:])
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--depths", type=int, nargs="+", default=[2, 4, 8, 12, 24])
    parser.add_argument("--d", type=int, default=64)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=1024)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--child", nargs=2, default=None)
    args, _ = parser.parse_known_args()
    if args.child:
        print(json.dumps(child(args.child[0], int(args.child[1]), args)))
        return
    argv = list(sys.argv[1:])
    print(f"device {args.device}, load {os.getloadavg()[0]:.1f} (1 min); layers of two "
          f"feed-forwards {args.d} -> {4 * args.d} -> {args.d}; batch {args.batch} x {args.length}; "
          f"forward+backward, parameters and gradients included")
    print(f"{'layers':>6s} {'standard MiB':>12s} {'reversible MiB':>14s} {'ratio':>6s} "
          f"{'standard s':>10s} {'reversible s':>12s}")
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
        cells.append(f"{std['seconds']:10.3f}" if std else f"{'-':>10s}")
        cells.append(f"{rev['seconds']:12.3f}" if rev else f"{'-':>12s}")
        print(f"{n:6d} " + " ".join(cells), flush=True)
    first, last = args.depths[0], args.depths[-1]
    if base.get("std") and base.get("rev") and std and rev:
        print(f"memory at {last} layers over memory at {first}: standard "
              f"{std['peak'] / base['std']['peak']:.2f}x, reversible "
              f"{rev['peak'] / base['rev']['peak']:.2f}x")


if __name__ == "__main__":
    main()
