"""Chapter 02 written a second time, in another style: does every correct solution work?

einsum instead of matmul, torch.where instead of masked_fill, an explicit concatenation
for the additive score (the definition, not the split of W), F.normalize-free cosine with
clamp on the product, a window built from floor/ceil bounds.
"""
import math

import torch


def _dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.einsum("bd,bsd->bs", a, b)


def additive_score(s, h, W, v):
    n = h.size(1)
    pairs = torch.cat([s[:, None, :].expand(-1, n, -1), h], dim=-1)
    return torch.einsum("bsa,a->bs", torch.tanh(torch.einsum("bsk,ak->bsa", pairs, W)), v)


def dot_score(s, h):
    return _dot(s, h)


def scaled_dot_score(s, h):
    return _dot(s, h) * h.size(-1) ** -0.5


def general_score(s, h, W):
    return torch.einsum("bi,ij,bsj->bs", s, W, h)


def cosine_score(s, h, eps=1e-8):
    prod = s.norm(dim=-1)[:, None] * h.norm(dim=-1)
    return _dot(s, h) / torch.clamp(prod, min=eps)


def location_score(s, W):
    return torch.einsum("sd,bd->bs", W, s)


def masked_softmax(scores, mask=None, dim=-1):
    if mask is None:
        return scores.softmax(dim)
    neg = torch.full_like(scores, -math.inf)
    w = torch.where(mask, scores, neg).softmax(dim)
    return torch.where(mask, w, torch.zeros_like(w))


def attention_context(weights, values):
    return torch.einsum("bs,bsd->bd", weights, values)


def additive_attention(s, h, W, v, mask=None):
    w = masked_softmax(additive_score(s, h, W, v), mask)
    return attention_context(w, h), w


def local_p_position(s, W_p, v_p, lengths):
    z = torch.einsum("ad,bd->ba", W_p, s).tanh()
    return torch.sigmoid(torch.einsum("ba,a->b", z, v_p)) * (lengths.to(s.dtype) - 1)


def local_p_weights(scores, p, D, mask=None):
    j = torch.arange(scores.size(-1), device=scores.device).to(scores.dtype)[None, :]
    c = p.to(scores.dtype)[:, None]
    inside = (j >= c - D) & (j <= c + D)
    if mask is not None:
        inside = inside & mask
    gauss = torch.exp(-0.5 * ((j - c) / (D / 2)) ** 2)
    return masked_softmax(scores, inside) * gauss


HEADLINES = {}   # the chapter's claims test this solution (tests/claims/02_attention.json)
