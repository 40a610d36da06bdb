"""Chapter 05: generation speed with and without the KV cache, and the cache's memory.

Runs the chapter's own GPT (solutions/05_gpt.py, its definitions only) greedily from a 10-token
prompt for 50, 200 and 500 new tokens, with and without the cache, in the same run, and prints
the times, their ratio, the ratio predicted by counting the positions run through the model
(sum of 10 + t over the steps, against 10 + N - 1), whether the tokens are identical, and the
cache's size. Asserts nothing.

    .venv/bin/python benchmarks/bench_05_kv_cache.py [--device cpu] [--d-model 128] [--layers 2]
        [--threads 1]

The defaults are the notebook's timing cell (2 layers, d_model 128, one CPU thread).
"""
from __future__ import annotations

import argparse
import ast
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent


def chapter_definitions() -> dict:
    """The solution's imports, functions and classes before its Experiment, and gpt_init_."""
    tree = ast.parse((ROOT / "solutions" / "05_gpt.py").read_text())
    source = (ROOT / "solutions" / "05_gpt.py").read_text()
    experiment = source[:source.index("# ## Experiment")].count("\n") + 1   # its first line
    kinds = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef)
    keep = [n for n in tree.body if isinstance(n, kinds)
            and (n.lineno < experiment or getattr(n, "name", "") == "gpt_init_")
            and not (isinstance(n, ast.ImportFrom) and n.module == "attnkit.train")]
    ns: dict = {"__name__": "bench_05"}
    exec(compile(ast.Module(body=keep, type_ignores=[]), "05_gpt", "exec"), ns)
    return ns


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    ns = chapter_definitions()
    GPT, generate, gpt_init_ = ns["GPT"], ns["generate"], ns["gpt_init_"]
    torch.manual_seed(0)
    device = torch.device(args.device)
    model = gpt_init_(GPT(12, d_model=args.d_model, n_heads=4, d_ff=4 * args.d_model,
                          n_layers=args.layers, max_len=520)).to(device).eval()
    prompt = torch.randint(0, 8, (1, 10), generator=torch.Generator().manual_seed(0)).to(device)

    def timed(n: int, use_cache: bool) -> tuple[float, torch.Tensor]:
        best, out = float("inf"), None
        for _ in range(args.repeat):
            if device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = generate(model, prompt, n, temperature=0, use_cache=use_cache)
            if device.type == "cuda":
                torch.cuda.synchronize()
            best = min(best, time.perf_counter() - t0)
        return best, out

    print(f"device {device}, d_model {args.d_model}, {args.layers} layers, prompt 10 tokens, "
          f"best of {args.repeat}, torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"{'new tokens':>10s} {'no cache (s)':>13s} {'cache (s)':>10s} {'speed-up':>9s} "
          f"{'predicted':>10s} {'identical':>10s} {'cache MiB':>10s}")
    for n in (50, 200, 500):
        slow_t, slow = timed(n, False)
        fast_t, fast = timed(n, True)
        with torch.no_grad():
            _, caches = model(fast[:, :-1])
        mib = sum(k.numel() * k.element_size() + v.numel() * v.element_size()
                  for k, v in caches) / 2**20
        predicted = sum(10 + t for t in range(n)) / (10 + n - 1)    # positions run, no cache/cache
        print(f"{n:10d} {slow_t:13.3f} {fast_t:10.3f} {slow_t / fast_t:8.1f}x "
              f"{predicted:9.1f}x {str(torch.equal(slow, fast)):>10s} {mib:10.2f}")


if __name__ == "__main__":
    main()
