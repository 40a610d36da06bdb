"""Chapter 08: peak memory and time of full shared-QK attention against LSH attention, by length.

One attention head, batch 1, D=64, a forward and backward pass (training), three methods:
  * full: the chapter's `full_shared_qk_attention` (the L x L scores, plain autograd);
  * lsh: the chapter's reference `lsh_attention` (chunks, rounds hashed one at a time, every
    round's graph kept by autograd for the backward pass);
  * lsh-recompute: the same graded pieces (`lsh_hash`, `sort_by_bucket`,
    `chunked_lsh_attention`, `combine_hash_rounds`), each round wrapped in
    `torch.utils.checkpoint`: autograd keeps only a round's output and lse, and the round is
    recomputed in the backward pass (the Reformer's trade of compute for memory).

Memory: each (method, L) runs in a fresh child process. On CPU the peak is the child's peak
resident set size (ru_maxrss) above what it held just before the call, with glibc's
MALLOC_MMAP_THRESHOLD_=65536 in the child's environment so that every large tensor is its own
mmap, returned to the system when freed (without it, freed memory is reused and peaks hide
each other). On CUDA, torch.cuda.max_memory_allocated above the memory held before the call.
Time: in another fresh child with the default allocator, the median of 3 forward+backward
steps after one warm-up, as CPU seconds of the process (time.process_time: robust to other
processes on a shared machine) and as wall seconds; on CUDA, wall seconds only. One thread by
default (--threads), so CPU time is the time of one core.

    python benchmarks/bench_08_lsh_memory.py [--device cuda] [--lengths 1024 2048 ...]
        [--chunk 64] [--hashes 4] [--buckets 0 (= L / chunk)] [--threads 1]

Prints a table; the ratios are against full attention measured in the same run. Nothing is
asserted.
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
METHODS = ("full", "lsh", "lsh-recompute")


def lsh_recompute(ns, qk, v, rotations, chunk_len: int):
    """lsh_attention from the chapter's graded pieces, each round recomputed in backward."""
    import torch
    from torch.utils.checkpoint import checkpoint
    B, T, D = qk.shape
    Dv = v.shape[-1]

    def one_round(qk, v, bk):
        sidx, undo = ns.sort_by_bucket(bk)                            # (B, T)
        sq = qk.gather(1, sidx[..., None].expand(B, T, D))            # (B, T, D)
        sv = v.gather(1, sidx[..., None].expand(B, T, Dv))            # (B, T, Dv)
        out, lse = ns.chunked_lsh_attention(sq, sv, sidx, chunk_len)
        return out.gather(1, undo[..., None].expand(B, T, Dv)), lse.gather(1, undo)

    buckets = ns.lsh_hash(qk.detach(), rotations)                     # (n, B, T)
    rounds = [checkpoint(one_round, qk, v, bk, use_reentrant=False) for bk in buckets]
    outs, lses = zip(*rounds)
    return ns.combine_hash_rounds(torch.stack(outs), torch.stack(lses))


def child(method: str, L: int, what: str, args) -> dict:
    import torch
    import torch.utils.checkpoint  # noqa: F401  (imported before any measurement)
    from autograder.reference import load_reference
    torch.set_num_threads(args.threads)
    ns = load_reference("08_reformer")
    device = torch.device(args.device)

    def make_step(L: int):
        g = torch.Generator().manual_seed(0)
        qk = torch.randn(1, L, 64, generator=g).to(device).requires_grad_()
        v = torch.randn(1, L, 64, generator=g).to(device).requires_grad_()
        n_buckets = args.buckets or max(2, L // args.chunk)
        rot = torch.randn(args.hashes, 64, n_buckets // 2, generator=g).to(device)
        ct = torch.randn(1, L, 64, generator=g).to(device)
        attend = {"full": lambda: ns.full_shared_qk_attention(qk, v),
                  "lsh": lambda: ns.lsh_attention(qk, v, rot, args.chunk),
                  "lsh-recompute": lambda: lsh_recompute(ns, qk, v, rot, args.chunk)}[method]

        def step():
            (attend() * ct).sum().backward()
            qk.grad = v.grad = None
        return step, qk

    warm, _ = make_step(4 * args.chunk)
    warm()  # load the code paths on a small input, so that their memory is not counted
    step, qk = make_step(L)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    if what == "time":
        step()
        cpu, wall = [], []
        for _ in range(3):
            sync()
            c0, w0 = time.process_time(), time.perf_counter()
            step()
            sync()
            cpu.append(time.process_time() - c0)
            wall.append(time.perf_counter() - w0)
        return {"cpu": statistics.median(cpu), "wall": statistics.median(wall)}
    if device.type == "cuda":
        sync()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        step()
        sync()
        return {"peak": torch.cuda.max_memory_allocated() - before}
    qk.grad = torch.zeros_like(qk)   # touch what step() allocates besides its peak
    qk.grad = None
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    step()
    return {"peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before}


def run_child(method: str, L: int, what: str, argv: list[str]) -> dict | None:
    env = dict(os.environ)
    if what == "memory":
        env["MALLOC_MMAP_THRESHOLD_"] = "65536"
    proc = subprocess.run([sys.executable, __file__, "--child", method, str(L), what] + argv,
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
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--child", nargs=3, default=None)
    args, _ = parser.parse_known_args()
    if args.child:
        method, L, what = args.child
        print(json.dumps(child(method, int(L), what, args)))
        return
    argv = list(sys.argv[1:])
    import torch
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.node()}, "
          f"{os.cpu_count()} cores, torch {torch.__version__}, device {args.device}, "
          f"{args.threads} thread(s), load {os.getloadavg()[0]:.1f} (1 min)")
    print(f"one head, batch 1, D=64, forward+backward; LSH: chunks of {args.chunk}, "
          f"{args.hashes} rounds, {'L/chunk' if not args.buckets else args.buckets} buckets")
    unit = "s" if args.device == "cuda" else "CPU s"
    print(f"{'L':>6s} {'method':>14s} {'peak MiB':>9s} {'x less':>7s} "
          f"{unit:>8s} {'x faster':>8s} {'wall s':>8s}")
    for L in args.lengths:
        base = None
        for method in METHODS:
            mem = run_child(method, L, "memory", argv)
            tim = run_child(method, L, "time", argv)
            secs = None if tim is None else tim["wall" if args.device == "cuda" else "cpu"]
            if method == "full":
                base = (mem and mem["peak"], secs)
            cells = [f"{L:6d}", f"{method:>14s}"]
            cells.append(f"{mem['peak'] / 2**20:9.1f}" if mem else f"{'failed':>9s}")
            cells.append(f"{base[0] / mem['peak']:7.1f}" if mem and base[0] else f"{'-':>7s}")
            cells.append(f"{secs:8.3f}" if tim else f"{'failed':>8s}")
            cells.append(f"{base[1] / secs:8.1f}" if tim and base[1] else f"{'-':>8s}")
            cells.append(f"{tim['wall']:8.3f}" if tim else f"{'-':>8s}")
            print(" ".join(cells), flush=True)


if __name__ == "__main__":
    main()
