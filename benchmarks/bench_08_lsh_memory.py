"""Chapter 08: peak memory and time of full shared-QK attention against LSH attention, by length.

Each (method, L) runs in a fresh child process: one attention head, batch 1, D=64, forward and
backward (training). On CPU the peak is the child's peak resident set size (ru_maxrss) above
what it held just before the call, with glibc's MALLOC_MMAP_THRESHOLD_=65536 set in the child's
environment so that every large tensor is its own mmap, returned to the system when freed
(without it, freed memory is reused and peaks hide each other). On CUDA the peak is
torch.cuda.max_memory_allocated above the memory held before the call. Time is the median of
3 forward+backward runs after the memory run. LSH attention is the chapter's reference
`lsh_attention` (rounds hashed one at a time), full attention `full_shared_qk_attention`.

    python benchmarks/bench_08_lsh_memory.py [--device cuda] [--lengths 1024 2048 ...]
        [--chunk 64] [--hashes 4] [--buckets 0 (= L / chunk)] [--threads N]

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


def child(method: str, L: int, args) -> dict:
    import torch
    from attnkit.timing import time_call
    from autograder.reference import load_reference
    if args.threads:
        torch.set_num_threads(args.threads)
    ns = load_reference("08_reformer")
    device = torch.device(args.device)
    g = torch.Generator().manual_seed(0)
    qk = torch.randn(1, L, 64, generator=g).to(device).requires_grad_()
    v = torch.randn(1, L, 64, generator=g).to(device).requires_grad_()
    n_buckets = args.buckets or max(2, L // args.chunk)
    rot = torch.randn(args.hashes, 64, n_buckets // 2, generator=g).to(device)
    ct = torch.randn(1, L, 64, generator=g).to(device)

    def step():
        out = (ns.full_shared_qk_attention(qk, v) if method == "full"
               else ns.lsh_attention(qk, v, rot, args.chunk))
        (out * ct).sum().backward()
        qk.grad = v.grad = None

    if device.type == "cuda":
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        step()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - before
    else:
        qk.grad = torch.zeros_like(qk)   # touch what step() allocates besides its peak
        qk.grad = None
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        step()
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    seconds = time_call(step, repeat=3, warmup=0, device=device)
    return {"peak": peak, "seconds": seconds}


def run_child(method: str, L: int, argv: list[str]) -> dict | None:
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    proc = subprocess.run([sys.executable, __file__, "--child", method, str(L)] + argv,
                          env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096, 8192, 16384])
    parser.add_argument("--chunk", type=int, default=64)
    parser.add_argument("--hashes", type=int, default=4)
    parser.add_argument("--buckets", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--child", nargs=2, default=None)
    args, _ = parser.parse_known_args()
    if args.child:
        print(json.dumps(child(args.child[0], int(args.child[1]), args)))
        return
    argv = [a for a in sys.argv[1:]]
    print(f"device {args.device}, load {os.getloadavg()[0]:.1f} (1 min); one head, batch 1, D=64, "
          f"forward+backward; LSH: chunks of {args.chunk}, {args.hashes} rounds, "
          f"{'L/chunk' if not args.buckets else args.buckets} buckets")
    print(f"{'L':>6s} {'full MiB':>9s} {'LSH MiB':>8s} {'mem ratio':>9s} "
          f"{'full s':>8s} {'LSH s':>7s} {'speed-up':>8s}")
    for L in args.lengths:
        full = run_child("full", L, argv)
        lsh = run_child("lsh", L, argv)
        f_mem = f"{full['peak'] / 2**20:9.1f}" if full else f"{'failed':>9s}"
        l_mem = f"{lsh['peak'] / 2**20:8.1f}" if lsh else f"{'failed':>8s}"
        ratio = f"{full['peak'] / lsh['peak']:9.1f}" if full and lsh else f"{'-':>9s}"
        f_s = f"{full['seconds']:8.3f}" if full else f"{'-':>8s}"
        l_s = f"{lsh['seconds']:7.3f}" if lsh else f"{'-':>7s}"
        speed = f"{full['seconds'] / lsh['seconds']:8.1f}" if full and lsh else f"{'-':>8s}"
        print(f"{L:6d} {f_mem} {l_mem} {ratio} {f_s} {l_s} {speed}", flush=True)


if __name__ == "__main__":
    main()
