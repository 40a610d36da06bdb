"""Chapter 05: generation speed with and without the KV cache, on the page's trained model.

Builds the model the page times: the committed longer run `char_gpt` (3 layers, d_model 128, a
character vocabulary; attnkit/checkpoints_data/05_gpt/char_gpt.pt) in the chapter's own `GPT`,
with its 64 trained positions extended to 520 by the page's `extend_positions` (position p uses the
trained embedding of p mod 64), prompted with the page's 10 validation characters. Then, with the
page's own functions (`time_generation`, `call_seconds`), it prints for 50, 200 and 500 new
characters the median wall time of greedy generation without and with the cache (the two paths
alternating), their ratio, the ratio predicted by counting positions, whether the tokens are
equal, and where a cached step's time goes: one step after 10 and after 500 cached positions,
whole passes of 1, 100 and 500 positions, and the number of PyTorch operators a step calls.
Asserts nothing.

    .venv/bin/python benchmarks/bench_05_kv_cache.py [--threads 1] [--repeat 5]
"""
from __future__ import annotations

import argparse
import ast
import statistics
import time
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode

ROOT = Path(__file__).resolve().parent.parent
PAGE_NAMES = {"gpt_init_", "encode", "decode", "extend_positions", "time_generation", "call_seconds",
              "CHARS", "CHAR_ID", "CountCalls"}


def chapter_definitions() -> dict:
    """The solution's imports, functions and classes before its Experiment, and the page's
    functions the timing uses (PAGE_NAMES), executed in one namespace."""
    source = (ROOT / "solutions" / "05_gpt.py").read_text()
    tree = ast.parse(source)
    experiment = source[:source.index("# ## Experiment")].count("\n") + 1   # its first line

    def named(n: ast.stmt) -> bool:
        if isinstance(n, (ast.FunctionDef, ast.ClassDef)):
            return n.name in PAGE_NAMES
        return isinstance(n, ast.Assign) and any(getattr(t, "id", "") in PAGE_NAMES for t in n.targets)
    kinds = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef)
    keep = [n for n in tree.body if (isinstance(n, kinds) and n.lineno < experiment
                                     and not (isinstance(n, ast.ImportFrom) and n.module == "attnkit.train"))
            or named(n)]
    from attnkit import corpora
    ns: dict = {"__name__": "bench_05", "TRAIN_TEXT": corpora.prose_text("train"), "time": time,
                "statistics": statistics,
          "TorchFunctionMode": TorchFunctionMode}
    exec(compile(ast.Module(body=keep, type_ignores=[]), "05_gpt", "exec"), ns)
    return ns


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    ns = chapter_definitions()
    from attnkit import corpora
    from attnkit.checkpoints import DATA, load_strict, read_weights
    state = read_weights(DATA / "05_gpt" / "char_gpt.pt")
    V, D = state["tok_embed.weight"].shape
    trained = ns["gpt_init_"](ns["GPT"](V, d_model=D, n_heads=4, d_ff=4 * D, n_layers=3, max_len=64))
    load_strict(trained, state, "05_gpt/char_gpt")
    trained.eval()
    model = ns["extend_positions"](trained, 520)
    prompt = ns["encode"](corpora.prose_text("valid")[990:1000])[None]              # (1, 10)
    print(f"char_gpt (3 layers, d_model {D}, {V} characters), prompt 10 characters, median of "
          f"{args.repeat}, wall time, torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"{'new chars':>9s} {'no cache (s)':>13s} {'cache (s)':>10s} {'speed-up':>9s} "
          f"{'positions ratio':>16s} {'equal tokens':>13s}")
    for n in (50, 200, 500):
        r = ns["time_generation"](trained if n <= 54 else model, prompt, n, repeats=args.repeat)
        ratio = sum(10 + t for t in range(n)) / (10 + n - 1)
        print(f"{n:9d} {r['no_cache']:13.3f} {r['cache']:10.3f} {r['no_cache'] / r['cache']:8.1f}x "
              f"{ratio:15.0f}x {str(r['equal']):>13s}", flush=True)
    tokens = r["tokens"]
    with torch.no_grad():
        _, caches = model(tokens[:, :500])
    one, call = tokens[:, 500:501], ns["call_seconds"]
    step_10 = call(model, one, [(k[:, :, :10], v[:, :, :10]) for k, v in caches], repeats=100)
    step_500 = call(model, one, caches, repeats=100)
    print(f"one cached step: {1e3 * step_10:.3f} ms after 10 positions, {1e3 * step_500:.3f} ms after 500")
    for T in (1, 10, 100, 500):
        print(f"a pass of {T:3d} positions, no cache: {1e3 * call(model, tokens[:, :T], repeats=20):8.3f} ms")
    with torch.no_grad(), ns["CountCalls"]() as calls:
        model(one, caches)
    print(f"a cached step calls {calls.n} PyTorch functions from Python (as the page counts them)")


if __name__ == "__main__":
    main()
