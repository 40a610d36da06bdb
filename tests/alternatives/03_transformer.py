"""Chapter 03 written a second time, in another style: does every correct solution work?

Other internal names (`n_head_`, `p_drop`, no dropout modules), functional calls
(F.dropout, F.relu, F.linear through the named nn.Linear weights), einsum instead of
matmul, unflatten/permute instead of reshape/transpose, PyTorch's default initialisation
everywhere the docstrings allow (only the embedding tables follow the docstring's
N(0, 1/d_model)).
"""
import math

import torch
import torch.nn.functional as F
from torch import nn


def _neg_inf(x: torch.Tensor) -> torch.Tensor:
    return torch.full((), float("-inf"), dtype=x.dtype, device=x.device)


def _drop(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    return F.dropout(x, p, training) if p > 0 else x


def _lin(layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    return F.linear(x, layer.weight, layer.bias)


def scaled_dot_product_attention(q, k, v, mask=None):
    scale = q.size(-1) ** -0.5
    logits = torch.einsum("...td,...sd->...ts", q, k) * scale
    if mask is None:
        w = torch.softmax(logits, dim=-1)
        return torch.einsum("...ts,...sd->...td", w, v), w
    allowed = mask.bool().expand_as(logits)
    logits = torch.where(allowed, logits, _neg_inf(logits))
    row_has_key = allowed.any(dim=-1, keepdim=True)
    logits = torch.where(row_has_key, logits, torch.zeros_like(logits))
    w = torch.softmax(logits, dim=-1) * allowed.to(logits.dtype)
    return torch.einsum("...ts,...sd->...td", w, v), w


def causal_mask(T, device=None):
    idx = torch.arange(T, device=device)
    return idx.unsqueeze(1) >= idx.unsqueeze(0)


def padding_mask(tokens, pad_id):
    return tokens.ne(pad_id).view(tokens.size(0), 1, 1, tokens.size(1))


def split_heads(x, n_heads):
    return x.unflatten(-1, (n_heads, -1)).permute(0, 2, 1, 3)


def merge_heads(x):
    return x.permute(0, 2, 1, 3).flatten(start_dim=2)


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_head_ = n_heads
        self.w_q, self.w_k = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
        self.w_v, self.w_o = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
        self.attn = None

    def forward(self, query, key, value, mask=None):
        q, k, v = (split_heads(_lin(w, x), self.n_head_)
                   for w, x in ((self.w_q, query), (self.w_k, key), (self.w_v, value)))
        ctx, self.attn = scaled_dot_product_attention(q, k, v, mask)
        self.attn = self.attn.detach()
        return _lin(self.w_o, merge_heads(ctx))


def sinusoidal_positional_encoding(max_len, d_model):
    pos = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)
    two_k = torch.arange(0, d_model, 2, dtype=torch.float64)
    inv_freq = torch.exp(-math.log(10000.0) * two_k / d_model)
    ang = pos * inv_freq
    pe = torch.stack([ang.sin(), ang.cos()], dim=-1).flatten(1)
    return pe[:, :d_model].to(torch.float32)


def pe_offset_matrix(offset, d_model):
    blocks = []
    for k in range(d_model // 2):
        b = offset * 10000.0 ** (-2 * k / d_model)
        c, s = math.cos(b), math.sin(b)
        blocks.append(torch.tensor([[c, s], [-s, c]], dtype=torch.float64))
    return torch.block_diag(*blocks).to(torch.float32)


def layer_norm(x, gamma, beta, eps=1e-5):
    var, mean = torch.var_mean(x, dim=-1, unbiased=False, keepdim=True)
    return torch.addcmul(beta, (x - mean) * torch.rsqrt(var + eps), gamma)


class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.linear1, self.linear2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x):
        return _lin(self.linear2, F.relu(_lin(self.linear1, x)))


class EncoderLayer(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn, self.ff = MultiHeadAttention(d_model, n_heads), FeedForward(d_model, d_ff)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.p_drop = dropout

    def forward(self, x, mask=None):
        a = self.self_attn(x, x, x, mask)
        x = self.norm1(x + _drop(a, self.p_drop, self.training))
        return self.norm2(x + _drop(self.ff(x), self.p_drop, self.training))


class DecoderLayer(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads)
        self.cross_attn = MultiHeadAttention(d_model, n_heads)
        self.ff = FeedForward(d_model, d_ff)
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.p_drop = dropout

    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        p, tr = self.p_drop, self.training
        x = self.norm1(x + _drop(self.self_attn(x, x, x, tgt_mask), p, tr))
        x = self.norm2(x + _drop(self.cross_attn(x, memory, memory, memory_mask), p, tr))
        return self.norm3(x + _drop(self.ff(x), p, tr))


class Encoder(nn.Module):
    def __init__(self, n_layers, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayer(d_model, n_heads, d_ff, dropout)
                                    for _ in range(n_layers))

    def forward(self, x, mask=None):
        for blk in self.layers:
            x = blk(x, mask)
        return x


class Decoder(nn.Module):
    def __init__(self, n_layers, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.layers = nn.ModuleList(DecoderLayer(d_model, n_heads, d_ff, dropout)
                                    for _ in range(n_layers))

    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        for blk in self.layers:
            x = blk(x, memory, tgt_mask, memory_mask)
        return x


class Transformer(nn.Module):
    def __init__(self, src_vocab, tgt_vocab, d_model=64, n_heads=4, d_ff=256, n_layers=2,
                 dropout=0.1, pad_id=0):
        super().__init__()
        self.d_model, self.pad_id, self.p_drop = d_model, pad_id, dropout
        self.encoder = Encoder(n_layers, d_model, n_heads, d_ff, dropout)
        self.decoder = Decoder(n_layers, d_model, n_heads, d_ff, dropout)
        self.out = nn.Linear(d_model, tgt_vocab)
        self.src_embed = nn.Embedding(src_vocab, d_model)
        self.tgt_embed = nn.Embedding(tgt_vocab, d_model)
        with torch.no_grad():  # the docstring's N(0, 1/d_model)
            self.src_embed.weight.normal_(0.0, d_model ** -0.5)
            self.tgt_embed.weight.normal_(0.0, d_model ** -0.5)

    def embed(self, tokens, table):
        e = table.weight[tokens] * self.d_model ** 0.5
        e = e + sinusoidal_positional_encoding(tokens.size(1), self.d_model).to(e)
        return _drop(e, self.p_drop, self.training)

    def encode(self, src, src_mask):
        return self.encoder(self.embed(src, self.src_embed), src_mask)

    def decode(self, tgt, memory, src_mask):
        self_mask = padding_mask(tgt, self.pad_id) & causal_mask(tgt.size(1), tgt.device)
        h = self.decoder(self.embed(tgt, self.tgt_embed), memory, self_mask, src_mask)
        return _lin(self.out, h)

    def forward(self, src, tgt):
        m = padding_mask(src, self.pad_id)
        return self.decode(tgt, self.encode(src, m), m)

    def greedy_decode(self, src, bos_id, eos_id, max_len):
        return transformer_greedy_decode(self, src, bos_id, eos_id, max_len)

    def beam_search(self, src, bos_id, eos_id, beam_size, max_len, n_best=1, length_norm=True):
        return transformer_beam_search(self, src, bos_id, eos_id, beam_size, max_len, n_best,
                                       length_norm)

    def beam_search_until_done(self, src, bos_id, eos_id, beam_size=4, max_len=12, alpha=0.6):
        return beam_search_until_done(self, src, bos_id, eos_id, beam_size, max_len, alpha)


def label_smoothed_nll(logits, target, eps, pad_id):
    V = logits.size(-1)
    lse = torch.logsumexp(logits, dim=-1)
    real = target != pad_id
    safe = torch.where(real, target, torch.zeros_like(target))
    picked = torch.gather(logits, -1, safe.unsqueeze(-1))
    nll = lse - picked.squeeze(-1)
    uniform = lse - logits.sum(-1) / V
    per_pos = (1.0 - eps) * nll + eps * uniform
    n = real.sum()
    total = torch.where(real, per_pos, torch.zeros_like(per_pos)).sum()
    return total / n if n > 0 else total * 0.0


def noam_lr(step, d_model, warmup):
    s = 1 if step < 1 else step
    return min(1.0 / math.sqrt(s), s / warmup ** 1.5) / math.sqrt(d_model)


@torch.no_grad()
def transformer_greedy_decode(model, src, bos_id, eos_id, max_len):
    smask = padding_mask(src, model.pad_id)
    mem = model.encode(src, smask)
    out = src.new_full((src.size(0), 1), bos_id)
    for _ in range(max_len):
        ended = (out[:, 1:] == eos_id).any(dim=1)
        if out.size(1) > 1 and bool(ended.all()):
            break
        nxt = model.decode(out, mem, smask)[:, -1, :].argmax(dim=-1)
        nxt = torch.where(ended, torch.full_like(nxt, eos_id), nxt)
        out = torch.cat((out, nxt.unsqueeze(1)), dim=1)
    return out


@torch.no_grad()
def transformer_beam_search(model, src, bos_id, eos_id, beam_size, max_len, n_best=1,
                            length_norm=True):
    smask = padding_mask(src, model.pad_id)
    mem = model.encode(src, smask)
    beams = [((bos_id,), 0.0)]
    done = []
    steps = 0
    while beams and len(done) < n_best and steps < max_len:
        steps += 1
        prefix = torch.tensor([b for b, _ in beams], device=src.device)
        n = prefix.size(0)
        lp = model.decode(prefix, mem.expand(n, -1, -1), smask.expand(n, -1, -1, -1))[:, -1]
        total = torch.tensor([s for _, s in beams], dtype=torch.float64).unsqueeze(1) \
            + torch.log_softmax(lp.double(), dim=-1).cpu()
        vals, flat = torch.topk(total.reshape(-1), min(beam_size, total.numel()))
        nxt = []
        for val, f in zip(vals.tolist(), flat.tolist()):
            seq = beams[f // total.size(1)][0] + (f % total.size(1),)
            (done if seq[-1] == eos_id else nxt).append((seq, val))
        beams = nxt
    if len(done) < n_best and beams and steps >= max_len:
        done.extend(beams)
    scored = []
    for seq, val in done:
        toks = list(seq[1:])
        scored.append((toks, val / max(len(toks), 1) if length_norm else val))
    scored.sort(key=lambda r: r[1], reverse=True)
    return scored[:n_best]


@torch.no_grad()
def beam_search_until_done(model, src, bos_id, eos_id, beam_size=4, max_len=12, alpha=0.6):
    smask = padding_mask(src, model.pad_id)
    mem = model.encode(src, smask)
    beams = [((bos_id,), 0.0)]
    done = []
    for t in range(1, max_len + 1):
        prefix = torch.tensor([b for b, _ in beams], device=src.device)
        n = prefix.size(0)
        lp = model.decode(prefix, mem.expand(n, -1, -1), smask.expand(n, -1, -1, -1))[:, -1]
        total = torch.tensor([s for _, s in beams], dtype=torch.float64).unsqueeze(1) \
            + torch.log_softmax(lp.double(), dim=-1).cpu()
        vals, flat = torch.topk(total.reshape(-1), min(2 * beam_size, total.numel()))
        nxt = []
        for r, (val, f) in enumerate(zip(vals.tolist(), flat.tolist())):
            seq = beams[f // total.size(1)][0] + (f % total.size(1),)
            if seq[-1] == eos_id:
                if r < beam_size:
                    done.append((list(seq[1:]), val / length_penalty(t, alpha)))
            elif len(nxt) < beam_size:
                nxt.append((seq, val))
        beams = nxt
        best_done = max([s for _, s in done], default=float("-inf"))
        hope = max([s for _, s in beams], default=float("-inf")) / length_penalty(max_len, alpha)
        if len(done) >= beam_size or not beams or hope <= best_done:
            return max(done, key=lambda d: d[1])
    done.extend((list(seq[1:]), val / length_penalty(max_len, alpha)) for seq, val in beams)
    return max(done, key=lambda d: d[1])


HEADLINES = {}   # the chapter's claims test this solution (tests/claims/03_transformer.json)
