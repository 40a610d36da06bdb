"""Chapter 03: post-norm against pre-norm, with and without warm-up, with and without clipping.

The chapter's notebook trains a 6-layer encoder-only tagger (digit reversal, position by
position; Adam at lr 1e-2, betas (0.9, 0.98)) once per setting, with attnkit's TrainConfig
default of clipping the gradient norm at 1.0. This script runs the whole grid over several
seeds, so that the text claims only what holds:

    norm {post, pre} x warm-up {0, 100 steps} x clip {1.0, none} x seeds

and prints, per setting, the mean loss of the last 20 steps for every seed. A uniform
guess has loss ln 10 = 2.30.

    python benchmarks/bench_03_norm_clip.py [--seeds 0 1 2] [--steps 300] [--device cpu]
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from attnkit.train import TrainConfig, train  # noqa: E402


def load():
    """The chapter's reference namespace (the solution notebook, skip-grading cells skipped)."""
    from autograder.reference import load_reference
    return load_reference("03_transformer")


class Tagger(nn.Module):
    """Embedding + PE -> n_layers encoder layers -> per-position logits (as in the notebook)."""

    def __init__(self, ref, layer_cls: type, vocab: int, d_model: int = 64, n_layers: int = 6) -> None:
        super().__init__()
        self.d_model, self.pe = d_model, ref.sinusoidal_positional_encoding
        self.embed = nn.Embedding(vocab, d_model)
        nn.init.normal_(self.embed.weight, std=d_model ** -0.5)
        self.layers = nn.ModuleList([layer_cls(d_model, 4, 4 * d_model, dropout=0.0) for _ in range(n_layers)])
        pre = layer_cls is ref.PreNormEncoderLayer
        self.final_norm = nn.LayerNorm(d_model) if pre else nn.Identity()
        self.out = nn.Linear(d_model, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        B, T = tokens.shape
        x = self.embed(tokens) * math.sqrt(self.d_model) + self.pe(T, self.d_model).to(tokens.device)
        for layer in self.layers:
            x = layer(x)                                                        # (B, T, D)
        return self.out(self.final_norm(x))                                     # (B, T, V)


def run(ref, layer_cls, warmup: int, clip: float | None, seed: int, steps: int, device: str) -> float:
    torch.manual_seed(seed)
    model = Tagger(ref, layer_cls, 10).to(device)
    gen = torch.Generator().manual_seed(seed + 1)
    lr = 1e-2
    opt = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.98), eps=1e-9)

    def loss_fn(step: int) -> torch.Tensor:
        x = torch.randint(10, (32, 10), generator=gen).to(device)
        return F.cross_entropy(model(x).flatten(0, 1), x.flip(1).flatten())

    schedule = (lambda s: lr * min(1.0, s / warmup)) if warmup else None
    losses = train(model, loss_fn, TrainConfig(steps=steps, clip=clip, desc="tagger"), optimizer=opt,
                   schedule=schedule)
    return sum(losses[-20:]) / 20


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--device", default="cpu")
    a = p.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    ref = load()
    start = time.perf_counter()
    print(f"final loss (mean of the last 20 of {a.steps} steps), seeds {a.seeds}, device {a.device}")
    for name in ("EncoderLayer", "PreNormEncoderLayer"):
        for warmup in (0, 100):
            for clip in (1.0, None):
                finals = [run(ref, getattr(ref, name), warmup, clip, s, a.steps, a.device) for s in a.seeds]
                label = f"{'post' if name == 'EncoderLayer' else 'pre'}-norm, warm-up {warmup:3d}, clip {clip}"
                print(f"{label:40s} " + " ".join(f"{f:6.3f}" for f in finals), flush=True)
    print(f"({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
