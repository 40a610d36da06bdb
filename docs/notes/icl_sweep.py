"""Sweep for issue 31: cheap in-context learning on a CPU (only torch needed).

A minimal GPT, **pre-norm** (LayerNorm before attention and MLP, final LayerNorm), learned
positions, N(0, 0.02^2) init (GPT-1), AdamW wd 0.01, linear warm-up, clip 1.0, one thread.

Tasks (vocabulary: NK letters then NY labels):
  fs   : each sequence has its own injective f: letters -> NY labels, P pairs `x y x y ...`,
         loss on every label (as in the chapter's draft).
  mix  : a fraction REP of each batch is Olsson et al.'s repeated random tokens: 2P random
         tokens (over all NK + NY) in which a segment of random length 3..P at a random place
         is written twice in a row; loss on the second copy (from its 2nd token); the rest is fs.
         (A first version repeated a whole half at a fixed offset P: the model learned a
         positional copy, 'attend to t - P', and nothing transferred: run G in i31.md.)
Measured: the ICL score (loss on the last pair's label minus the second pair's, on 256 held-out
fs sequences) every EV steps, the switch (first eval where it reaches half its final value),
training CPU seconds (time.process_time, evals excluded), and 0/1/2/4/8-shot accuracy on 1000
fresh prompts (n shots then a query letter; argmax over the labels; chance 1/NY); per head,
prefix matching, previous-token score and the 8-shot accuracy with that head zeroed.
Results and the recommended configuration: docs/notes/i31.md (session of 2026-11-24 night).

Usage: python icl_sweep.py "dict(task='mix', MLP=0, steps=500, seed=0)" \
                           "dict(task='mix', MLP=0, L=1, steps=500, seed=0)" ...
"""
import math
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

torch.set_num_threads(1)


def make_gpt(V, D, H, L, mlp, tied, T):
    class Block(nn.Module):
        def __init__(s):
            super().__init__()
            s.ln1, s.qkv, s.o = nn.LayerNorm(D), nn.Linear(D, 3 * D), nn.Linear(D, D)
            s.mlp = nn.Sequential(nn.LayerNorm(D), nn.Linear(D, 4 * D), nn.GELU(),
                                  nn.Linear(4 * D, D)) if mlp else None
            s.keep_maps, s.head_mask = False, torch.ones(H)

        def forward(s, x):
            b, t, _ = x.shape
            q, k, v = s.qkv(s.ln1(x)).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
            if s.keep_maps:                         # the same, written out, keeping the weights
                sc = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
                s.w = sc.masked_fill(~torch.ones(t, t, dtype=torch.bool).tril(), -math.inf).softmax(-1)
                a = s.w @ v
            else:
                a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            a = a * s.head_mask[:, None, None]       # (H,) 0 zeroes a head (ablation)
            x = x + s.o(a.transpose(1, 2).reshape(b, t, D))
            return x + s.mlp(x) if s.mlp is not None else x

    class GPT(nn.Module):
        def __init__(s):
            super().__init__()
            s.tok, s.pos = nn.Embedding(V, D), nn.Embedding(T, D)
            s.blocks = nn.ModuleList(Block() for _ in range(L))
            s.ln = nn.LayerNorm(D)
            s.head = nn.Linear(D, V, bias=False)
            if tied:
                s.head.weight = s.tok.weight

        def forward(s, x):
            h = s.tok(x) + s.pos(torch.arange(x.shape[1]))
            for b in s.blocks:
                h = b(h)
            return s.head(s.ln(h))

    m = GPT()
    for mm in m.modules():
        if isinstance(mm, (nn.Linear, nn.Embedding)):
            nn.init.normal_(mm.weight, std=0.02)
        if isinstance(mm, nn.Linear) and mm.bias is not None:
            nn.init.zeros_(mm.bias)
    return m


def run(task="fs", NK=8, NY=16, P=16, LR=3e-3, L=2, D=64, H=4, MLP=1, TIED=0, B=64, WU=100,
        steps=1000, REP=0.5, seed=0, EV=25, tag=""):
    V = NK + NY
    torch.manual_seed(seed)
    m = make_gpt(V, D, H, L, MLP, TIED, 2 * P)
    opt = torch.optim.AdamW(m.parameters(), lr=LR, weight_decay=0.01)
    gen = torch.Generator().manual_seed(seed + 1000)

    def fs(n, pairs, g):
        f = NK + torch.argsort(torch.rand(n, NY, generator=g), -1)[:, :NK]
        xs = torch.randint(0, NK, (n, pairs), generator=g)
        return torch.stack([xs, f.gather(1, xs)], -1).reshape(n, 2 * pairs)

    def loss_fn(s):
        lg = m(s[:, :-1])
        return F.cross_entropy(lg[:, 0::2].flatten(0, 1), s[:, 1::2].flatten())

    ev = fs(256, P, torch.Generator().manual_seed(99))

    @torch.no_grad()
    def score():
        lg = m(ev[:, :-1])[:, 0::2]
        pl = F.cross_entropy(lg.transpose(1, 2), ev[:, 1::2], reduction="none").mean(0)
        return float(pl[-1] - pl[1]), float(pl.mean())

    @torch.no_grad()
    def acc(shots, n=1000):
        s = fs(n, shots + 1, torch.Generator().manual_seed(7 + shots))
        lg = m(s[:, :-1])[:, -1, NK:]
        return float(((lg.argmax(-1) + NK) == s[:, -1]).float().mean())

    cpu, curve = 0.0, []
    m.train()
    for step in range(1, steps + 1):
        t0 = time.process_time()
        for gr in opt.param_groups:
            gr["lr"] = LR * min(1, step / WU)
        if task == "fs":
            loss = loss_fn(fs(B, P, gen))
        else:                                       # mix
            nr = int(round(B * REP))
            T = 2 * P                               # a random segment of length ml at a,
            ml = torch.randint(3, P + 1, (nr, 1), generator=gen)   # repeated right after it
            a = (torch.rand(nr, 1, generator=gen) * (T - 2 * ml + 1)).long()
            idx = torch.arange(T)[None]
            second = (idx >= a + ml) & (idx < a + 2 * ml)
            r = torch.randint(0, V, (nr, T), generator=gen).gather(1, torch.where(second, idx - ml, idx))
            tgt = r[:, 1:].masked_fill(~(second & (idx > a + ml))[:, 1:], -100)
            lrep = F.cross_entropy(m(r[:, :-1]).flatten(0, 1), tgt.flatten())
            loss = REP * lrep + (1 - REP) * loss_fn(fs(B - nr, P, gen))
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        cpu += time.process_time() - t0
        if step % EV == 0:
            curve.append((step, round(cpu, 1), *score(), acc(8, 200)))
    final = curve[-1][2]
    sw = next(((s, c) for s, c, sc, _, _ in curve if sc <= final / 2), (None, None)) \
        if final < -0.1 else (None, None)
    accs = [round(acc(k), 3) for k in (0, 1, 2, 4, 8)]
    m.eval()
    # heads: prefix matching on the held-out fs sequences (attention from a repeated letter to the
    # positions right after its earlier occurrences, summed), previous-token score, and the 8-shot
    # accuracy with each head zeroed in turn (its output before the projection o)
    for b in m.blocks:
        b.keep_maps = True
    with torch.no_grad():
        m(ev)
    tok = ev
    T = tok.shape[1]
    same = (tok[:, :, None] == tok[:, None, :]) & torch.ones(T, T, dtype=torch.bool).tril(-1)
    after = torch.zeros_like(same)
    after[:, :, 1:] = same[:, :, :-1]
    rep = same.any(-1)
    prefix = [[round(float(((b.w * after[:, None]).sum(-1) * rep[:, None]).sum((0, 2))[h]
                             / rep.sum()), 2) for h in range(H)] for b in m.blocks]
    prev = [[round(float(b.w.diagonal(-1, -2, -1).mean((0, 2))[h]), 2) for h in range(H)]
            for b in m.blocks]
    for b in m.blocks:
        b.keep_maps = False
    abl = []
    for b in m.blocks:
        abl.append([])
        for h in range(H):
            b.head_mask = torch.ones(H).index_fill(0, torch.tensor(h), 0.0)
            abl[-1].append(round(acc(8), 2))
        b.head_mask = torch.ones(H)
    ind = [h for h in range(H) if prefix[-1][h] > 0.5]     # every induction head of the last layer
    if ind and L > 1:
        m.blocks[-1].head_mask = torch.ones(H).index_fill(0, torch.tensor(ind), 0.0)
        abl.append((ind, round(acc(8), 2)))
        m.blocks[-1].head_mask = torch.ones(H)
    cfg = dict(task=task, NK=NK, NY=NY, P=P, LR=LR, L=L, D=D, H=H, MLP=MLP, TIED=TIED, B=B,
               WU=WU, steps=steps, seed=seed, **({"REP": REP} if task == "mix" else {}))
    print(f"RESULT {tag} {cfg} cpu={cpu:.1f}s ms/step={1000 * cpu / steps:.1f} "
          f"switch_step={sw[0]} switch_cpu={sw[1]} icl_score={final:.2f} acc0/1/2/4/8={accs}",
          flush=True)
    print(f"   prefix matching per layer/head {prefix}; previous-token {prev}; "
          f"8-shot acc with one head zeroed, per layer, then with all last-layer heads of "
          f"prefix matching > 0.5 zeroed {abl}", flush=True)
    print("   curve (step, cpu, ICL score, 8-shot acc on 200):",
          [(s, c, round(sc, 2), round(a8, 2)) for s, c, sc, _, a8 in curve[::2]], flush=True)
    return cpu, sw, accs


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        run(**eval(arg))
