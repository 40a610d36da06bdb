"""Chapter 03's attention against PyTorch's: the same numbers, and how much slower?

Compares, over a few sequence lengths,
  * the reference `scaled_dot_product_attention` (a readable softmax(QK^T/sqrt(d)) V that
    also returns the weights) with `torch.nn.functional.scaled_dot_product_attention`
    (a fused kernel: FlashAttention / memory-efficient attention on a GPU);
  * the reference `MultiHeadAttention` with `torch.nn.MultiheadAttention`, after copying
    the weights (w_q, w_k, w_v stacked into in_proj_weight, w_o into out_proj),
numerically (largest absolute difference, with a causal mask) and in speed (median
forward time, and forward + backward).

    python benchmarks/bench_03_attention.py [--device cuda] [--lengths 128 512 2048] [--dtype float32]

Prints a table; timings are for information only (nothing is asserted).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from attnkit.timing import time_call  # noqa: E402


def load():
    """The chapter's reference namespace (the solution notebook, skip-grading cells skipped)."""
    from autograder.reference import load_reference
    return load_reference("03_transformer")


def torch_mha_like(ref_mha, d_model: int, n_heads: int) -> torch.nn.MultiheadAttention:
    """A torch.nn.MultiheadAttention with the reference module's weights."""
    m = torch.nn.MultiheadAttention(d_model, n_heads, batch_first=True)
    with torch.no_grad():
        m.in_proj_weight.copy_(torch.cat([ref_mha.w_q.weight, ref_mha.w_k.weight, ref_mha.w_v.weight]))
        m.in_proj_bias.copy_(torch.cat([ref_mha.w_q.bias, ref_mha.w_k.bias, ref_mha.w_v.bias]))
        m.out_proj.weight.copy_(ref_mha.w_o.weight)
        m.out_proj.bias.copy_(ref_mha.w_o.bias)
    return m


def fwd_bwd(fn, *inputs):
    """A closure timing forward + backward of `fn(*inputs)`."""
    def run():
        for t in inputs:
            t.grad = None
        out = fn(*inputs)
        (out[0] if isinstance(out, tuple) else out).sum().backward()
    return run


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--lengths", type=int, nargs="+", default=[64, 256, 1024])
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--dtype", default="float32", choices=["float32", "float64", "float16", "bfloat16"])
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    ref = load()
    dev, dtype = torch.device(args.device), getattr(torch, args.dtype)
    B, D, H = args.batch, args.d_model, args.heads
    torch.manual_seed(0)
    mha = ref.MultiHeadAttention(D, H).to(dev, dtype).eval()
    tmha = torch_mha_like(mha, D, H).to(dev, dtype).eval()
    print(f"device {dev}, {dtype}, batch {B}, d_model {D}, {H} heads, torch {torch.__version__}, "
          f"{torch.get_num_threads()} CPU threads")
    header = (f"{'T':>6} | {'what':<38} | {'max |diff|':>10} | {'ours fwd':>9} | {'torch fwd':>9} | "
              f"{'ours f+b':>9} | {'torch f+b':>9} | {'f+b ratio':>9}")
    print(header)
    print("-" * len(header))
    for T in args.lengths:
        causal = torch.ones(T, T, dtype=torch.bool, device=dev).tril()
        ms = lambda fn: time_call(fn, repeat=args.repeat, device=dev) * 1e3  # noqa: E731

        # -- scaled dot-product attention, per head: (B, H, T, d_k)
        q, k, v = (torch.randn(B, H, T, D // H, device=dev, dtype=dtype, requires_grad=True) for _ in range(3))
        with torch.no_grad():
            ours = ref.scaled_dot_product_attention(q, k, v, causal)[0]
            theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=causal)
        diff = (ours.double() - theirs.double()).abs().max().item()
        with torch.no_grad():
            f_ours = ms(lambda: ref.scaled_dot_product_attention(q, k, v, causal))
            f_theirs = ms(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=causal))
        b_ours = ms(fwd_bwd(lambda a, b_, c: ref.scaled_dot_product_attention(a, b_, c, causal), q, k, v))
        b_theirs = ms(fwd_bwd(lambda a, b_, c: F.scaled_dot_product_attention(a, b_, c, attn_mask=causal), q, k, v))
        print(f"{T:6d} | {'scaled_dot_product_attention vs F.sdpa':<38} | {diff:10.2e} | {f_ours:9.3f} | "
              f"{f_theirs:9.3f} | {b_ours:9.3f} | {b_theirs:9.3f} | {b_ours / b_theirs:8.2f}x")

        # -- multi-head attention modules: (B, T, D); torch's attn_mask uses True = NOT allowed
        x = torch.randn(B, T, D, device=dev, dtype=dtype, requires_grad=True)
        with torch.no_grad():
            ours = mha(x, x, x, causal)
            theirs = tmha(x, x, x, attn_mask=~causal, need_weights=False)[0]
            diff = (ours.double() - theirs.double()).abs().max().item()
            f_ours = ms(lambda: mha(x, x, x, causal))
            f_theirs = ms(lambda: tmha(x, x, x, attn_mask=~causal, need_weights=False))
        b_ours = ms(fwd_bwd(lambda a: mha(a, a, a, causal), x))
        b_theirs = ms(fwd_bwd(lambda a: tmha(a, a, a, attn_mask=~causal, need_weights=False)[0], x))
        print(f"{T:6d} | {'MultiHeadAttention vs nn.MultiheadAttn':<38} | {diff:10.2e} | {f_ours:9.3f} | "
              f"{f_theirs:9.3f} | {b_ours:9.3f} | {b_theirs:9.3f} | {b_ours / b_theirs:8.2f}x")
    print("times in ms (median); f+b = forward and backward; ratio > 1: ours is slower")


if __name__ == "__main__":
    main()
