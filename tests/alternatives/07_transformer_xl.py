"""Chapter 07 written a second time, in another style: does every correct solution work?

rel_shift with a gather over an explicit distance index instead of the pad-and-reshape trick;
masks from arange comparisons; the permutation's ranks by argsort; einsum everywhere; both
streams of two-stream attention in one stacked pass, empty rows zeroed with torch.where;
other internal names (`heads_`, `ff_in`/`ff_out` through F.linear), functional softmax and
layer norm through the named nn.LayerNorm parameters, PyTorch's default initialisation
(u and v zeros, as the docstring says).
"""
import math

import torch
import torch.nn.functional as F
from torch import nn


def _heads(x: torch.Tensor, n: int) -> torch.Tensor:
    return x.unflatten(-1, (n, -1)).permute(0, 2, 1, 3)


def _ln(norm: nn.LayerNorm, x: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, norm.normalized_shape, norm.weight, norm.bias, norm.eps)


def update_memory(memory, hidden, mem_len):
    if mem_len <= 0:
        return None
    seq = hidden.detach() if memory is None else torch.cat((memory.detach(), hidden.detach()), 1)
    keep = min(mem_len, seq.size(1))
    return seq.narrow(1, seq.size(1) - keep, keep)


def xl_attention_mask(qlen, mlen, device=None):
    rows = torch.arange(qlen, device=device).unsqueeze(1)
    cols = torch.arange(mlen + qlen, device=device).unsqueeze(0)
    return cols <= rows + mlen


def relative_positional_encoding(klen, d_model, device=None):
    dist = torch.arange(klen, device=device, dtype=torch.float64).flip(0)
    freq = torch.pow(10000.0, -torch.arange(0, d_model, 2, device=device, dtype=torch.float64) / d_model)
    phase = torch.outer(dist, freq)
    return torch.concat((torch.sin(phase), torch.cos(phase)), dim=1).to(torch.float32)


def rel_shift(x):
    qlen, klen = x.shape[-2], x.shape[-1]
    i = torch.arange(qlen, device=x.device).unsqueeze(1)
    j = torch.arange(klen, device=x.device).unsqueeze(0)
    col = (j + qlen - 1 - i).clamp(max=klen - 1)                # (qlen, klen)
    return torch.gather(x, -1, col.expand(x.shape))


def rel_attention_scores(q, k, r, u, v):
    content = torch.einsum("bhid,bhjd->bhij", q + u.unsqueeze(1), k)
    position = torch.einsum("bhid,hjd->bhij", q + v.unsqueeze(1), r)
    return (content + rel_shift(position)) * q.size(-1) ** -0.5


def permutation_masks(perm):
    order = torch.argsort(perm)                                  # order[p] = step of position p
    before = order.unsqueeze(0) < order.unsqueeze(1)
    return before | torch.eye(perm.numel(), dtype=torch.bool, device=perm.device), before


class TwoStreamAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        for name in ("w_q", "w_k", "w_v", "w_o"):
            setattr(self, name, nn.Linear(d_model, d_model, bias=False))

    def forward(self, h, g, perm):
        content, query = permutation_masks(perm.to(h.device))
        allowed = torch.stack((content, query))                  # (2, T, T): stream, query, key
        heads = self.n_heads
        q = _heads(self.w_q(torch.stack((h, g))).flatten(0, 1), heads).unflatten(0, (2, -1))
        k, val = _heads(self.w_k(h), heads), _heads(self.w_v(h), heads)
        logits = torch.einsum("sbhid,bhjd->sbhij", q, k) / math.sqrt(q.size(-1))
        allowed = allowed[:, None, None]                         # (2, 1, 1, T, T)
        w = F.softmax(torch.where(allowed, logits, torch.full_like(logits, -math.inf)), dim=-1)
        w = torch.where(allowed, w, torch.zeros_like(w))         # no key at all: zeros, not NaN
        out = self.w_o(torch.einsum("sbhij,bhjd->sbihd", w, val).flatten(3))
        return out[0], out[1]


def partial_prediction_targets(perm, k):
    n = perm.numel()
    if k < 1 or k > n:
        raise ValueError(f"k = {k} is outside 1..{n}")
    step = torch.argsort(perm)                                   # step[p] = step of position p
    count = n // k
    mapping = torch.zeros(count, n, device=perm.device)
    mapping[torch.arange(count, device=perm.device), perm[n - count:]] = 1.0
    return step >= n - count, mapping


class RelMultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.heads_ = n_heads
        self.w_q = nn.Linear(d_model, d_model)
        self.w_k = nn.Linear(d_model, d_model)
        self.w_v = nn.Linear(d_model, d_model)
        self.w_o = nn.Linear(d_model, d_model)
        self.r_net = nn.Linear(d_model, d_model, bias=False)
        self.u = nn.Parameter(torch.zeros(n_heads, d_model // n_heads))
        self.v = nn.Parameter(torch.zeros(n_heads, d_model // n_heads))
        self.attn = None

    def forward(self, x, memory=None):
        mlen = 0 if memory is None else memory.size(1)
        kv = x if memory is None else torch.cat((memory, x), 1)
        q, k, val = _heads(self.w_q(x), self.heads_), _heads(self.w_k(kv), self.heads_), \
            _heads(self.w_v(kv), self.heads_)
        pos = relative_positional_encoding(kv.size(1), x.size(-1), device=x.device).to(x.dtype)
        r = self.r_net(pos).unflatten(-1, (self.heads_, -1)).transpose(0, 1)
        logits = rel_attention_scores(q, k, r, self.u, self.v)
        allowed = xl_attention_mask(x.size(1), mlen, device=x.device)
        logits = torch.where(allowed, logits, torch.full_like(logits, -math.inf))
        w = F.softmax(logits, dim=-1)
        self.attn = w.detach()
        out = torch.einsum("bhij,bhjd->bihd", w, val).flatten(2)
        return self.w_o(out)


class XLLayer(nn.Module):
    def __init__(self, d_model, n_heads, d_ff):
        super().__init__()
        self.attn = RelMultiHeadAttention(d_model, n_heads)
        self.norm1 = nn.LayerNorm(d_model)
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.norm2 = nn.LayerNorm(d_model)

    def forward(self, x, memory=None, mem_len=0):
        mid = _ln(self.norm1, x + self.attn(x, memory))
        ff = F.linear(F.relu(F.linear(mid, self.linear1.weight, self.linear1.bias)),
                      self.linear2.weight, self.linear2.bias)
        return _ln(self.norm2, mid + ff), update_memory(memory, x, mem_len)
