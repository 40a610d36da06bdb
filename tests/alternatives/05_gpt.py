"""Chapter 05 written a second time, in another style: does every correct solution work?

Other internal names (`heads_`, `_D`), functional calls (F.linear, F.layer_norm, F.gelu through
the named submodules' weights), einsum and explicit index comparisons instead of tril,
unflatten/permute instead of reshape/transpose, a top-p via a sorted threshold, inverse-CDF
sampling instead of torch.multinomial, and PyTorch's default initialisation everywhere.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn


def _lin(layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    return F.linear(x, layer.weight, layer.bias)


def _heads(x: torch.Tensor, h: int) -> torch.Tensor:
    return x.unflatten(-1, (h, -1)).permute(0, 2, 1, 3)


def _unheads(x: torch.Tensor) -> torch.Tensor:
    return x.permute(0, 2, 1, 3).flatten(start_dim=2)


def _ln(norm: nn.LayerNorm, x: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, norm.normalized_shape, norm.weight, norm.bias, norm.eps)


def gpt_classification_input(text, start_id, extract_id):
    out = [start_id]
    out.extend(text)
    out.append(extract_id)
    return out


def gpt_entailment_input(premise, hypothesis, start_id, delim_id, extract_id):
    return [start_id, *premise, delim_id, *hypothesis, extract_id]


def gpt_similarity_inputs(a, b, start_id, delim_id, extract_id):
    return [[start_id, *x, delim_id, *y, extract_id] for x, y in ((a, b), (b, a))]


def gpt_multiple_choice_inputs(context, answers, start_id, delim_id, extract_id):
    seqs = []
    for ans in answers:
        seqs.append([start_id, *context, delim_id, *ans, extract_id])
    return seqs


def attend_with_cache(q, k, v, cache=None):
    if cache is not None:
        k_cache, v_cache = cache
        k, v = torch.cat((k_cache, k), dim=-2), torch.cat((v_cache, v), dim=-2)
    n_new, n_all = q.size(-2), k.size(-2)
    rows = torch.arange(n_new, device=q.device).unsqueeze(1) + (n_all - n_new)
    cols = torch.arange(n_all, device=q.device).unsqueeze(0)
    logits = torch.einsum("bhtd,bhsd->bhts", q, k) * q.size(-1) ** -0.5
    logits = torch.where(cols <= rows, logits, torch.full((), float("-inf"), dtype=q.dtype, device=q.device))
    return torch.einsum("bhts,bhsd->bhtd", torch.softmax(logits, -1), v), (k, v)


def filter_logits(logits, top_k=None, top_p=None):
    neg = torch.full((), float("-inf"), dtype=logits.dtype, device=logits.device)
    out = logits.clone()
    if top_k is not None and top_k <= 0:
        raise ValueError("top_k must be a positive int")
    if top_k is not None and top_k < logits.size(-1):
        kth = torch.sort(logits, dim=-1, descending=True).values[..., top_k - 1:top_k]
        out = torch.where(logits >= kth, out, neg)
    if top_p is not None and top_p < 1.0:
        p = torch.softmax(out, dim=-1)
        ps, idx = torch.sort(p, dim=-1, descending=True, stable=True)
        keep_sorted = torch.cumsum(ps, -1) - ps < top_p
        keep_sorted[..., 0] = True
        keep = torch.zeros_like(keep_sorted).scatter(-1, idx, keep_sorted)
        out = torch.where(keep, out, neg)
    return out


def sample_next_token(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
    if temperature == 0:
        return torch.max(logits, dim=-1).indices
    p = torch.softmax(filter_logits(logits / temperature, top_k, top_p), dim=-1)
    cdf = torch.cumsum(p, dim=-1)
    u = torch.rand(p.shape[:-1] + (1,), generator=generator, dtype=p.dtype).to(p.device) * cdf[..., -1:]
    idx = torch.searchsorted(cdf, u, right=True).squeeze(-1)
    # never land on a zero-probability token (u == a cdf step in floating point)
    idx = idx.clamp(max=p.size(-1) - 1)
    bad = p.gather(-1, idx[:, None]).squeeze(-1) == 0
    if bool(bad.any()):
        idx = torch.where(bad, torch.max(p, -1).indices, idx)
    return idx


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.heads_ = n_heads
        self.w_q, self.w_k, self.w_v, self.w_o = (nn.Linear(d_model, d_model) for _ in range(4))

    def forward(self, x, cache=None):
        q, k, v = (_heads(_lin(w, x), self.heads_) for w in (self.w_q, self.w_k, self.w_v))
        y, cache = attend_with_cache(q, k, v, cache)
        return _lin(self.w_o, _unheads(y)), cache


class GPTBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads)
        self.mlp = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))

    def forward(self, x, cache=None):
        attn_out, cache = self.attn(_ln(self.ln1, x), cache)
        h = x + attn_out
        up, down = self.mlp[0], self.mlp[2]
        return h + _lin(down, F.gelu(_lin(up, _ln(self.ln2, h)))), cache


class GPT(nn.Module):
    def __init__(self, vocab_size, d_model=64, n_heads=4, d_ff=256, n_layers=2, max_len=128):
        super().__init__()
        self.max_len, self._D = max_len, d_model
        self.tok_embed = nn.Embedding(vocab_size, d_model)
        self.pos_embed = nn.Embedding(max_len, d_model)
        self.blocks = nn.ModuleList(GPTBlock(d_model, n_heads, d_ff) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)

    def forward(self, tokens, caches=None):
        past = caches[0][0].size(2) if caches else 0
        pos = torch.arange(past, past + tokens.size(1), device=tokens.device)
        x = F.embedding(tokens, self.tok_embed.weight) + F.embedding(pos, self.pos_embed.weight)[None]
        out_caches = []
        for layer, c in zip(self.blocks, caches if caches else [None] * len(self.blocks)):
            x, c = layer(x, c)
            out_caches.append(c)
        return F.linear(_ln(self.ln_f, x), self.head.weight), out_caches

    def generate(self, prompt, max_new_tokens, **kwargs):
        return generate(self, prompt, max_new_tokens, **kwargs)


@torch.no_grad()
def generate(model, prompt, max_new_tokens, temperature=1.0, top_k=None, top_p=None, use_cache=True,
             generator=None):
    out = [prompt]
    caches = None
    feed = prompt
    for _ in range(max_new_tokens):
        if use_cache:
            logits, caches = model(feed, caches)
        else:
            logits = model(torch.cat(out, dim=1))[0]
        feed = sample_next_token(logits[:, -1, :], temperature, top_k, top_p, generator).unsqueeze(1)
        out.append(feed)
    return torch.cat(out, dim=1)


def prefix_matching_score(attn, tokens):
    # key k is a match for query i when the token BEFORE k equals token i and k - 1 < i
    T = tokens.shape[-1]
    before_key = F.pad(tokens, (1, 0), value=-1)[:, :-1]                 # token at k - 1
    idx = torch.arange(T, device=tokens.device)
    match = torch.eq(tokens.unsqueeze(2), before_key.unsqueeze(1))       # [i, k]
    match = match & (idx.view(1, -1) <= idx.view(-1, 1)) & (idx.view(1, -1) >= 1)
    repeating = match.any(dim=2).to(attn.dtype)                          # (B, T)
    per_query = torch.einsum("bhik,bik->bhi", attn, match.to(attn.dtype))
    total = torch.einsum("bhi,bi->h", per_query, repeating)
    count = repeating.sum()
    return total / count if count > 0 else torch.zeros_like(total)


HEADLINES = {}   # the chapter's claims test this solution (tests/claims/05_gpt.json)
