"""Chapter 07: evaluation time per token, Transformer-XL with its cache against the vanilla
sliding window, at several context lengths (the ratios measured in the same run).

To predict every token of a long text with a context of C tokens,
  * the vanilla model slides a window of C tokens one token at a time: one forward pass over
    C positions per predicted token;
  * Transformer-XL reads segments of `--seg` tokens (default: C) with a memory of C states per
    layer: one forward pass per segment, every token seeing at least C tokens of context.
Both use the chapter's reference model (`XLLanguageModel` of the solution notebook; the vanilla
model is the same network with mem_len = 0), untrained: timing does not depend on the weights.

    python benchmarks/bench_07_xl_eval.py [--device cuda] [--contexts 64 128 256 512]
        [--d-model 256] [--layers 4] [--heads 4] [--seg C] [--threads N]

Prints a table; timings are for information only (nothing is asserted).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from attnkit.timing import time_call  # noqa: E402


def load():
    """The chapter's reference namespace (the solution notebook, skip-grading cells skipped)."""
    from autograder.reference import load_reference
    return load_reference("07_transformer_xl")


@torch.no_grad()
def vanilla_per_token(model, text: torch.Tensor, context: int, n_tokens: int, device) -> float:
    """Seconds per predicted token, re-encoding a window of `context` tokens for each."""
    def run():
        for t in range(n_tokens):
            model(text[:, t:t + context])
    return time_call(run, repeat=3, warmup=1, device=device) / n_tokens


@torch.no_grad()
def xl_per_token(model, text: torch.Tensor, context: int, seg: int, device) -> float:
    """Seconds per predicted token, reading segments of `seg` tokens with a memory of `context`."""
    mems = None
    start = 0
    while start < context:                                   # fill the memory first
        _, mems = model(text[:, start:start + seg], mems, context)
        start += seg
    segment = text[:, start:start + seg]
    return time_call(lambda: model(segment, mems, context), repeat=3, warmup=1, device=device) / seg


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--contexts", type=int, nargs="+", default=[32, 64, 128, 256, 512])
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=1000)
    parser.add_argument("--seg", type=int, default=None, help="XL segment length (default: the context)")
    parser.add_argument("--tokens", type=int, default=8, help="windows timed per vanilla measurement")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    ns = load()
    torch.manual_seed(0)
    model = ns.XLLanguageModel(args.vocab, args.d_model, args.heads, 4 * args.d_model,
                                  args.layers).to(device).eval()
    longest = max(args.contexts)
    seg_max = args.seg or longest
    text = torch.randint(args.vocab, (1, 2 * longest + 2 * seg_max + args.tokens),
                         generator=torch.Generator().manual_seed(1)).to(device)
    print(f"device {device}, threads {torch.get_num_threads()}, load {os.getloadavg()[0]:.1f}; "
          f"model d_model={args.d_model}, {args.heads} heads, d_ff={4 * args.d_model}, "
          f"{args.layers} layers; batch 1")
    print(f"{'context':>8s} {'XL segment':>10s} {'vanilla ms/token':>17s} {'XL ms/token':>12s} "
          f"{'speed-up':>9s}")
    for c in args.contexts:
        seg = args.seg or c
        van = vanilla_per_token(model, text, c, args.tokens, device)
        xl = xl_per_token(model, text, c, seg, device)
        print(f"{c:8d} {seg:10d} {1e3 * van:17.3f} {1e3 * xl:12.4f} {van / xl:9.1f}", flush=True)


if __name__ == "__main__":
    main()
