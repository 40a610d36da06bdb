"""Chapter 03: does the embedding initialisation matter for the date translator?

The chapter's `Transformer` multiplies embeddings by sqrt(d_model) and (its docstring says)
draws the embedding tables from N(0, 1/d_model), so that embed * sqrt(d_model) has entries of
size about 1, like the positional encodings. This script trains the notebook's date model
(d_model 64, 4 heads, 2+2 layers, d_ff 128, dropout 0.1, label smoothing 0.1, Adam with the
warm-up schedule with 200 warm-up steps, 800 steps of batch 64, gradient clipping at 1.0) once with that init and
once with nn.Embedding's default N(0, 1), for a few seeds, and prints greedy exact match on
the chapter's 2000 test dates (none of them in training), on --threads threads (1).

    python benchmarks/bench_03_embed_scale.py [--seeds 0 1] [--steps 800] [--device cpu] [--threads 1]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from attnkit.data import Vocab, date_pairs  # noqa: E402
from attnkit.train import TrainConfig, exact_match, train  # noqa: E402


def run(ref, std: float | None, seed: int, steps: int, device: str) -> float:
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    pairs = date_pairs(14000, generator=torch.Generator().manual_seed(1))
    train_pairs = pairs[:10000]
    seen, test_pairs = {s for s, _ in train_pairs}, []      # the chapter's split: no test date in train
    for s, t in pairs[10000:]:
        if s not in seen and len(test_pairs) < 2000:
            seen.add(s)
            test_pairs.append((s, t))
    sv, tv = Vocab.from_texts([s for s, _ in pairs]), Vocab.from_texts([t for _, t in pairs])
    SRC = sv.encode_batch([s for s, _ in train_pairs]).to(device)
    TGT = tv.encode_batch([t for _, t in train_pairs], bos=True, eos=True).to(device)
    net = ref.Transformer(len(sv), len(tv), d_model=64, n_heads=4, d_ff=128, n_layers=2, dropout=0.1,
                          pad_id=sv.pad_id).to(device)
    if std is not None:
        for table in (net.src_embed, net.tgt_embed):
            nn.init.normal_(table.weight, std=std)

    def loss_fn(step: int) -> torch.Tensor:
        idx = torch.randint(len(SRC), (64,), generator=g).to(device)
        logits = net(SRC[idx], TGT[idx][:, :-1])
        return ref.label_smoothed_nll(logits, TGT[idx][:, 1:], eps=0.1, pad_id=tv.pad_id)

    opt = torch.optim.Adam(net.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    train(net, loss_fn, TrainConfig(steps=steps, desc="dates"), optimizer=opt,
          schedule=lambda s: ref.noam_lr(s, 64, 200))
    net.eval()
    src = sv.encode_batch([s for s, _ in test_pairs]).to(device)
    out = ref.transformer_greedy_decode(net, src, tv.bos_id, tv.eos_id, max_len=12)
    return exact_match([tv.decode(r) for r in out], [t for _, t in test_pairs])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--steps", type=int, default=800)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    from autograder.reference import load_reference
    ref = load_reference("03_transformer")
    start = time.perf_counter()
    for label, std in (("N(0, 1/d_model) (the docstring's)", None), ("N(0, 1) (nn.Embedding's default)", 1.0)):
        accs = [run(ref, std, s, a.steps, a.device) for s in a.seeds]
        print(f"{label:36s} greedy exact match, seeds {a.seeds}: " + " ".join(f"{x:.1%}" for x in accs),
              flush=True)
    print(f"({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
