"""Chapter 08, written another way: rounds batched together, index-built windows, a stable
torch.sort, autograd.grad with manual accumulation, functional projections."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def _window(x: torch.Tensor, m: int) -> torch.Tensor:
    """(N, T, ...) -> (N, C, 2m, ...): chunk c's entries followed by chunk c-1's, by indexing."""
    T = x.shape[1]
    C = T // m
    c = torch.arange(C, device=x.device)
    own = c[:, None] * m + torch.arange(m, device=x.device)          # (C, m)
    prev = ((c[:, None] - 1) % C) * m + torch.arange(m, device=x.device)
    idx = torch.cat([own, prev], dim=1)                               # (C, 2m)
    return x[:, idx]


class _RevFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b, module_list, *weights):
        with torch.no_grad():
            for blk in module_list:
                a, b = blk(a, b)
        ctx.module_list = module_list
        ctx.save_for_backward(a, b)
        return a, b

    @staticmethod
    def backward(ctx, ga, gb):
        a, b = ctx.saved_tensors
        for blk in ctx.module_list[::-1]:
            a, b, ga, gb = reversible_block_backward(blk, a, b, ga, gb)
        return (ga, gb, None) + tuple(None for _ in ctx.module_list.parameters())


def lsh_hash(x, rotations):
    n, D, half = rotations.shape
    proj = (x.unsqueeze(0) @ rotations.unsqueeze(1))                  # (n, B, T, half)
    both = torch.cat([proj, proj.neg()], dim=-1)
    return torch.max(both, dim=-1).indices


def sort_by_bucket(buckets):
    order = torch.sort(buckets, dim=-1, stable=True).indices
    inverse = torch.empty_like(order)
    inverse.scatter_(-1, order, torch.arange(order.shape[-1], device=order.device).expand_as(order))
    return order, inverse


def chunked_lsh_attention(sq, sv, spos, chunk_len, causal=False):
    N, L, D = sq.shape
    C, m = L // chunk_len, chunk_len
    keys = _window(sq / sq.norm(dim=-1, keepdim=True).clamp_min(1e-12), m)   # (N, C, 2m, D)
    vals = _window(sv, m)                                             # (N, C, 2m, Dv)
    kp = _window(spos, m)                                             # (N, C, 2m)
    qp = spos.view(N, C, m, 1)
    s = torch.einsum("ncid,ncjd->ncij", sq.view(N, C, m, D), keys) * D ** -0.5
    s = torch.where(kp.unsqueeze(2) == qp, torch.full_like(s, -1e5), s)
    if causal:
        s = torch.where(kp.unsqueeze(2) > qp, torch.full_like(s, -1e30 if s.dtype != torch.float16
                                                              else -6e4), s)
    m_ = s.amax(-1, keepdim=True)
    e = torch.exp(s - m_)
    z = e.sum(-1, keepdim=True)
    out = torch.einsum("ncij,ncjd->ncid", e / z, vals)
    return out.reshape(N, L, -1), (m_ + z.log()).reshape(N, L)


def combine_hash_rounds(outs, lses):
    w = torch.exp(lses - lses.amax(dim=0, keepdim=True))             # (n, B, T), max 1
    return torch.einsum("nbt,nbtd->btd", w / w.sum(dim=0, keepdim=True), outs)


def lsh_attention(qk, v, rotations, chunk_len, causal=False):
    n = rotations.shape[0]
    B, T, D = qk.shape
    order, inverse = sort_by_bucket(lsh_hash(qk, rotations))          # (n, B, T)
    flat = order.reshape(n * B, T)
    q_rep = qk.repeat(n, 1, 1)                                        # (n*B, T, D)
    v_rep = v.repeat(n, 1, 1)
    sq = torch.take_along_dim(q_rep, flat.unsqueeze(-1), dim=1)
    sv = torch.take_along_dim(v_rep, flat.unsqueeze(-1), dim=1)
    o, l = chunked_lsh_attention(sq, sv, flat, chunk_len, causal)
    inv = inverse.reshape(n * B, T)
    o = torch.take_along_dim(o, inv.unsqueeze(-1), dim=1).view(n, B, T, -1)
    l = torch.take_along_dim(l, inv, dim=1).view(n, B, T)
    return combine_hash_rounds(o, l)


class LSHSelfAttention(nn.Module):
    def __init__(self, d_model, n_heads, n_buckets, chunk_len, n_hashes=1, causal=False):
        super().__init__()
        self.qk, self.v, self.out = (nn.Linear(d_model, d_model) for _ in range(3))
        self.n_heads, self.n_buckets, self.chunk_len = n_heads, n_buckets, chunk_len
        self.n_hashes, self.causal = n_hashes, causal

    def forward(self, x, rotations=None):
        B, T, D = x.shape
        H = self.n_heads
        dk = D // H
        if rotations is None:
            rotations = torch.randn(self.n_hashes, dk, self.n_buckets // 2, device=x.device,
                                    dtype=x.dtype)
        heads = lambda t: t.view(B, T, H, dk).permute(0, 2, 1, 3).reshape(B * H, T, dk)  # noqa: E731
        qk = heads(F.linear(x, self.qk.weight, self.qk.bias))
        v = heads(F.linear(x, self.v.weight, self.v.bias))
        o = lsh_attention(qk, v, rotations, self.chunk_len, self.causal)
        o = o.view(B, H, T, dk).permute(0, 2, 1, 3).reshape(B, T, D)
        return F.linear(o, self.out.weight, self.out.bias)


class ReversibleBlock(nn.Module):
    def __init__(self, f, g):
        super().__init__()
        self.f = f
        self.g = g

    def forward(self, x1, x2):
        y1 = torch.add(x1, self.f(x2))
        return y1, torch.add(x2, self.g(y1))

    def inverse(self, y1, y2):
        with torch.no_grad():
            x2 = torch.sub(y2, self.g(y1))
            return torch.sub(y1, self.f(x2)), x2


def reversible_block_backward(block, y1, y2, dy1, dy2):
    g_params = [p for p in block.g.parameters() if p.requires_grad]
    f_params = [p for p in block.f.parameters() if p.requires_grad]
    with torch.enable_grad():
        a = y1.detach().requires_grad_()
        out_g = block.g(a)
        grads = torch.autograd.grad(out_g, [a] + g_params, dy2, allow_unused=True)
    total_dy1 = dy1 + grads[0]
    x2 = (y2 - out_g).detach()
    with torch.enable_grad():
        b = x2.clone().requires_grad_()
        out_f = block.f(b)
        grads_f = torch.autograd.grad(out_f, [b] + f_params, total_dy1, allow_unused=True)
    for p, gr in list(zip(g_params, grads[1:])) + list(zip(f_params, grads_f[1:])):
        if gr is not None:
            p.grad = gr.detach() if p.grad is None else p.grad + gr
    x1 = (y1 - out_f).detach()
    return x1, x2, total_dy1.detach(), (dy2 + grads_f[0]).detach()


class ReversibleStack(nn.Module):
    def __init__(self, blocks):
        super().__init__()
        self.blocks = nn.ModuleList(list(blocks))

    def forward(self, x1, x2):
        return _RevFn.apply(x1, x2, self.blocks, *list(self.parameters()))


def chunked_feed_forward(ff, x, n_chunks):
    size = -(-x.shape[1] // n_chunks)
    return torch.cat(tuple(map(ff, torch.split(x, size, dim=1))), dim=1)
