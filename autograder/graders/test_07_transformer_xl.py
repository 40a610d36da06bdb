"""Hidden graders of chapter 07, Transformer-XL and XLNet."""
from __future__ import annotations

import math

import torch

from autograder.harness.check import (expect, expect_close, expect_raises, expect_unmodified, graded,
                                      needs_cuda, reference_cache, seeded)

# (qlen, klen) pairs: without memory (qlen == klen) and with memory (klen > qlen)
SHAPES = [(3, 7), (5, 9), (4, 4), (1, 5), (2, 2), (6, 6), (7, 20), (8, 11), (12, 12), (3, 16), (1, 1)]


# ---------------------------------------------------------------- helpers (trusted side only)
def keep_mask(qlen: int, klen: int) -> torch.Tensor:
    """The entries the XL mask keeps (query i sees keys j <= i + klen - qlen)."""
    return torch.ones(qlen, klen, dtype=torch.bool).tril(klen - qlen)


def kept(x, qlen: int, klen: int):
    """x with the unspecified entries set to 0 (non-tensors pass through to fail the shape check)."""
    if not isinstance(x, torch.Tensor) or tuple(x.shape[-2:]) != (qlen, klen):
        return x
    return x.masked_fill(~keep_mask(qlen, klen), 0)


def shift_loop(x: torch.Tensor) -> torch.Tensor:
    """The definition of rel_shift, entry by entry (0 where unspecified)."""
    *_, qlen, klen = x.shape
    out = torch.zeros_like(x)
    for i in range(qlen):
        for j in range(i + klen - qlen + 1):
            out[..., i, j] = x[..., i, j + qlen - 1 - i]
    return out


def shift_labml(x: torch.Tensor) -> torch.Tensor:
    """labml #185: the padded view with its LAST row dropped ([:-1]) instead of the first."""
    *lead, qlen, klen = x.shape
    padded = torch.cat([x.new_zeros(*lead, qlen, 1), x], dim=-1).reshape(*lead, klen + 1, qlen)
    return padded[..., :-1, :].reshape(*lead, qlen, klen)


def shift_pad_right(x: torch.Tensor) -> torch.Tensor:
    """The zero column padded on the right instead of the left."""
    *lead, qlen, klen = x.shape
    padded = torch.cat([x, x.new_zeros(*lead, qlen, 1)], dim=-1).reshape(*lead, klen + 1, qlen)
    return padded[..., 1:, :].reshape(*lead, qlen, klen)


def shift_other_way(x: torch.Tensor) -> torch.Tensor:
    """Row i moved right instead of left (distance read as j - i)."""
    *_, qlen, klen = x.shape
    out = torch.zeros_like(x)
    for i in range(qlen):
        for j in range(klen):
            c = j - (qlen - 1 - i)
            if 0 <= c < klen:
                out[..., i, j] = x[..., i, c]
    return out


@reference_cache
def scores_loop(q, k, r, u, v, terms="abcd"):
    """The four terms, pair by pair, with the distance mlen + i - j written out (0 where masked)."""
    B, H, qlen, d = q.shape
    klen = k.shape[2]
    mlen = klen - qlen
    out = torch.zeros(B, H, qlen, klen, dtype=q.dtype)
    for i in range(qlen):
        for j in range(mlen + i + 1):
            r_ij = r[:, klen - 1 - (mlen + i - j)]
            total = torch.zeros(B, H, dtype=q.dtype)
            if "a" in terms:
                total = total + (q[:, :, i] * k[:, :, j]).sum(-1)
            if "b" in terms:
                total = total + (q[:, :, i] * r_ij).sum(-1)
            if "c" in terms:
                total = total + (u * k[:, :, j]).sum(-1)
            if "d" in terms:
                total = total + (v * r_ij).sum(-1)
            out[:, :, i, j] = total / math.sqrt(d)
    return out


def scores_inputs(seed: int, qlen: int, klen: int, B: int = 2, H: int = 3, d: int = 4,
                  dtype=torch.float32):
    g = seeded(seed)
    return (torch.randn(B, H, qlen, d, generator=g, dtype=dtype),
            torch.randn(B, H, klen, d, generator=g, dtype=dtype),
            torch.randn(H, klen, d, generator=g, dtype=dtype),
            torch.randn(H, d, generator=g, dtype=dtype), torch.randn(H, d, generator=g, dtype=dtype))


def rpe_variant(klen: int, d: int, *, ascending=False, interleave=False, cos_first=False,
                exponent="2k") -> torch.Tensor:
    pos = torch.arange(klen, dtype=torch.float64) if ascending else \
        torch.arange(klen - 1, -1, -1, dtype=torch.float64)
    k = torch.arange(d // 2, dtype=torch.float64)
    power = {"2k": 2 * k / d, "k": k / d}[exponent]
    angle = pos[:, None] / 10000 ** power[None, :]
    s, c = angle.sin(), angle.cos()
    if interleave:
        return torch.stack([s, c], dim=-1).reshape(klen, d).float()
    return torch.cat([c, s] if cos_first else [s, c], dim=-1).float()


@reference_cache
def ref_module(ref, cls: str, *args, seed: int = 0):
    """A reference module in eval mode with seeded weights (u, v, LayerNorms perturbed too)."""
    torch.manual_seed(seed)
    m = getattr(ref, cls)(*args)
    g = seeded(seed + 1000)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if "norm" in name or name.endswith("u") or name.endswith("v"):
                p.add_(0.5 * torch.randn(p.shape, generator=g))
    return m.eval()


def rel_attn_manual(ref, m, x, memory, *, swap_uv=False, mask="xl", shift=None):
    """RelMultiHeadAttention's computation with known mistakes switchable."""
    B, T, D = x.shape
    H = m.n_heads
    M = 0 if memory is None else memory.shape[1]
    ctx = x if memory is None else torch.cat([memory, x], 1)
    q = m.w_q(x).reshape(B, T, H, D // H).transpose(1, 2)
    k = m.w_k(ctx).reshape(B, M + T, H, D // H).transpose(1, 2)
    v = m.w_v(ctx).reshape(B, M + T, H, D // H).transpose(1, 2)
    r = m.r_net(ref.relative_positional_encoding(M + T, D)).reshape(M + T, H, D // H).transpose(0, 1)
    u_, v_ = (m.v, m.u) if swap_uv else (m.u, m.v)
    ac = (q + u_[:, None]) @ k.transpose(-2, -1)
    bd = torch.einsum("bhid,hcd->bhic", q + v_[:, None], r)
    scores = (ac + (shift or ref.rel_shift)(bd)) / math.sqrt(D // H)
    if mask == "xl":
        allowed = ref.xl_attention_mask(T, M)
    elif mask == "causal":   # the memory hidden: only the current segment, causally
        allowed = ref.xl_attention_mask(T, M).clone()
        allowed[:, :M] = False
    else:
        allowed = torch.ones(T, M + T, dtype=torch.bool)
    w = scores.masked_fill(~allowed, float("-inf")).softmax(-1)
    return m.w_o((w @ v).transpose(1, 2).reshape(B, T, D))


# ================================================================ update_memory
@graded("update_memory", points=2,
        hint="torch.cat([memory, hidden], dim=1)[:, -mem_len:] (the MOST RECENT mem_len states), "
             "then .detach(); with memory None use hidden alone.")
def test_update_memory_values(student, ref):
    """update_memory: does it keep the last mem_len states of [memory; hidden], with or without memory?"""
    g = seeded(0)
    memory, hidden = torch.randn(2, 5, 3, generator=g), torch.randn(2, 4, 3, generator=g)
    both = torch.cat([memory, hidden], 1)
    for mem_len in (1, 3, 6, 9):
        expect_close(student.update_memory(memory, hidden, mem_len), ref.update_memory(memory, hidden, mem_len),
                     f"update_memory with M=5, T=4, mem_len={mem_len}", mistakes={
                         "memory truncated from the wrong end (keep the most recent states, the last ones)":
                             both[:, :mem_len],
                         "the new states put before the memory (the order is [memory; hidden])":
                             torch.cat([hidden, memory], 1)[:, -mem_len:],
                         "only the new hidden states kept": hidden[:, -mem_len:],
                     })
    for mem_len in (2, 4, 7):
        expect_close(student.update_memory(None, hidden, mem_len), ref.update_memory(None, hidden, mem_len),
                     f"update_memory(None, hidden, {mem_len})", mistakes={
                         "memory truncated from the wrong end (keep the most recent states, the last ones)":
                             hidden[:, :mem_len]})


@graded("update_memory", points=1, hint="Return None when mem_len == 0 (x[:, -0:] would keep everything).")
def test_update_memory_zero(student, ref):
    """update_memory: does mem_len == 0 give None, with and without a memory?"""
    g = seeded(1)
    memory, hidden = torch.randn(1, 3, 2, generator=g), torch.randn(1, 2, 2, generator=g)
    expect(student.update_memory(memory, hidden, 0) is None, "update_memory(memory, hidden, 0) should be None")
    expect(student.update_memory(None, hidden, 0) is None, "update_memory(None, hidden, 0) should be None")


@graded("update_memory", points=2,
        hint="Call .detach() on the returned memory: the gradient must stop at the segment boundary.")
def test_update_memory_detached(student, ref):
    """update_memory: is the memory detached, so that memory keeps no gradient from the hidden states?"""
    g = seeded(2)
    for memory in (None, torch.randn(2, 3, 4, generator=g)):
        keeps = student.memory_keeps_gradient(memory, torch.randn(2, 5, 4, generator=g), 4)
        expect(keeps is False, "the memory keeps its gradient (it still requires grad): "
                               "detach it, the memory keeps no gradient across segments")


@graded("update_memory", points=1, hint="Use only out-of-place operations; keep the dtype of the inputs.")
def test_update_memory_dtype_inplace(student, ref):
    """update_memory: does it keep float64 and a batch of one, and leave memory and hidden unchanged?"""
    g = seeded(3)
    memory = torch.randn(1, 4, 3, generator=g, dtype=torch.float64)
    hidden = torch.randn(1, 2, 3, generator=g, dtype=torch.float64)
    call = student.call("update_memory", args=(memory, hidden, 5))
    expect_close(call.value, ref.update_memory(memory, hidden, 5), "the float64 memory")
    expect_unmodified((memory, hidden), call.inputs[:2], "update_memory")


@needs_cuda
@graded("update_memory", points=1, hint="torch.cat of tensors on the GPU stays on the GPU.")
def test_update_memory_cuda(student, ref):
    """update_memory: does the memory stay on the GPU?"""
    g = seeded(4)
    memory, hidden = torch.randn(2, 3, 4, generator=g), torch.randn(2, 2, 4, generator=g)
    call = student.call("update_memory", args=(memory, hidden, 4), device="cuda")
    expect(all(d.startswith("cuda") for d in call.devices), "the memory should be on cuda")
    expect_close(call.value, ref.update_memory(memory, hidden, 4), "the memory")


# ================================================================ xl_attention_mask
@graded("xl_attention_mask", points=2,
        hint="Shape (qlen, mlen + qlen); True for every memory column and for current positions j <= i: "
             "torch.ones(qlen, mlen + qlen, dtype=torch.bool).tril(mlen).")
def test_xl_attention_mask(student, ref):
    """xl_attention_mask: is every memory slot visible and the current segment causal, for several sizes?"""
    for qlen, mlen in [(3, 2), (4, 0), (2, 5), (5, 5), (1, 3), (1, 0)]:
        want = ref.xl_attention_mask(qlen, mlen)
        ones = torch.ones(qlen, mlen + qlen, dtype=torch.bool)
        hidden_mem = want.clone()
        hidden_mem[:, :mlen] = False
        expect_close(student.xl_attention_mask(qlen, mlen), want, f"xl_attention_mask({qlen}, {mlen})", mistakes={
            "the mask hides the memory (every memory slot must be visible)": hidden_mem,
            "a causal mask over all mlen + qlen keys (query i is at position mlen + i, it sees the whole memory)":
                ones.tril(),
            "off by one: query i must see current position i itself": ones.tril(mlen - 1),
            "off by one: query i must not see current position i + 1": ones.tril(mlen + 1),
            "mask inverted (True should mean: may attend)": ~want,
            "no causal mask on the current segment": ones,
        })


@needs_cuda
@graded("xl_attention_mask", points=1, hint="Pass device=device when you create the tensor.")
def test_xl_attention_mask_cuda(student, ref):
    """xl_attention_mask: does it create the mask on the requested device?"""
    call = student.call("xl_attention_mask", args=(3, 2), kwargs={"device": "cuda"})
    expect(all(d.startswith("cuda") for d in call.devices), "xl_attention_mask(3, 2, device='cuda') should be on cuda")


# ================================================================ relative_positional_encoding
@graded("relative_positional_encoding", points=2,
        hint="Positions klen-1, ..., 0 (descending); angle = pos / 10000^(2k/d) for k < d/2; "
             "torch.cat([sin, cos], dim=-1).")
def test_relative_positional_encoding(student, ref):
    """relative_positional_encoding: does row c encode distance klen-1-c, [sin | cos] halves, frequencies 1/10000^(2k/d)?"""
    for klen, d in [(1, 4), (7, 8), (20, 16), (5, 2)]:
        expect_close(student.relative_positional_encoding(klen, d), ref.relative_positional_encoding(klen, d),
                     f"relative_positional_encoding({klen}, {d})", mistakes={
                         "positions in ascending order (row c must be distance klen-1-c)":
                             rpe_variant(klen, d, ascending=True),
                         "sin and cos interleaved (the paper's code concatenates [sin | cos])":
                             rpe_variant(klen, d, interleave=True),
                         "cos half first (the order is [sin | cos])": rpe_variant(klen, d, cos_first=True),
                         "frequencies 1/10000^(k/d) (the exponent is 2k/d)": rpe_variant(klen, d, exponent="k"),
                     })


@needs_cuda
@graded("relative_positional_encoding", points=1, hint="Create the positions with device=device.")
def test_relative_positional_encoding_cuda(student, ref):
    """relative_positional_encoding: does it create the encoding on the requested device?"""
    call = student.call("relative_positional_encoding", args=(6, 8), kwargs={"device": "cuda"})
    expect(all(d.startswith("cuda") for d in call.devices), "the encoding should be on cuda")
    expect_close(call.value, ref.relative_positional_encoding(6, 8), "the encoding")


# ================================================================ rel_shift
@graded("rel_shift", points=3,
        hint="Pad one zero column on the LEFT -> (..., qlen, klen+1), reshape to (..., klen+1, qlen), "
             "drop the FIRST row ([..., 1:, :]), reshape to (..., qlen, klen).")
def test_rel_shift_brute_force(student, ref):
    """rel_shift: does out[i, j] = x[i, j + qlen - 1 - i] hold (where the mask keeps) for many shapes, with and without memory?"""
    for n, (qlen, klen) in enumerate(SHAPES):
        x = torch.randn(2, 3, qlen, klen, generator=seeded(100 + n))
        got = student.rel_shift(x)
        expect(isinstance(got, torch.Tensor) and tuple(got.shape) == (2, 3, qlen, klen),
               f"rel_shift of a (2, 3, {qlen}, {klen}) tensor should have the same shape")
        expect_close(kept(got, qlen, klen), shift_loop(x), f"rel_shift, qlen={qlen}, klen={klen} (kept entries)",
                     mistakes={
                         "the [:-1] slice (labml #185): drop the FIRST row of the padded view, [1:]":
                             kept(shift_labml(x), qlen, klen),
                         "zero column padded on the right (pad on the left)": kept(shift_pad_right(x), qlen, klen),
                         "rows shifted the wrong way": kept(shift_other_way(x), qlen, klen),
                         "no shift at all": kept(x, qlen, klen),
                     })


@graded("rel_shift", points=1, hint="Work on the last two dimensions only; any leading dimensions pass through.")
def test_rel_shift_leading_dims(student, ref):
    """rel_shift: does it work on a plain (qlen, klen) matrix and on three leading dimensions?"""
    for shape in [(4, 6), (2, 1, 2, 3, 5)]:
        x = torch.randn(*shape, generator=seeded(200 + len(shape)))
        qlen, klen = shape[-2:]
        expect_close(kept(student.rel_shift(x), qlen, klen), shift_loop(x), f"rel_shift of shape {shape}")


@graded("rel_shift", points=1,
        hint="Create the zero column with x.new_zeros (same dtype and device); never write into x.")
def test_rel_shift_dtype_inplace_noncontiguous(student, ref):
    """rel_shift: does it keep float64, work on a non-contiguous input and leave it unchanged?"""
    x = torch.randn(2, 7, 3, generator=seeded(300), dtype=torch.float64).transpose(-2, -1)   # (2, 3, 7)
    before = x.clone()
    call = student.call("rel_shift", args=(x,))
    expect_close(kept(call.value, 3, 7), shift_loop(before), "rel_shift of a non-contiguous float64 x")
    expect_unmodified((before,), call.inputs[:1], "rel_shift")


@needs_cuda
@graded("rel_shift", points=1, hint="Use x.new_zeros for the padding column so that it is on x's device.")
def test_rel_shift_cuda(student, ref):
    """rel_shift: does it run on the GPU and return a GPU tensor?"""
    x = torch.randn(2, 4, 9, generator=seeded(301))
    call = student.call("rel_shift", args=(x,), device="cuda")
    expect(all(d.startswith("cuda") for d in call.devices), "the output should stay on cuda")
    expect_close(kept(call.value, 4, 9), shift_loop(x), "rel_shift on cuda")


# ================================================================ rel_attention_scores
@graded("rel_attention_scores", points=3,
        hint="(q + u[:, None]) @ k^T plus rel_shift((q + v[:, None]) @ r^T), r broadcast over the batch; "
             "all divided by sqrt(d). u goes with the keys k, v with the positions r.")
def test_rel_attention_scores_brute_force(student, ref):
    """rel_attention_scores: do the scores match the four terms, pair by pair, for many shapes, with and without memory?"""
    for n, (qlen, klen) in enumerate(SHAPES[::2]):
        q, k, r, u, v = scores_inputs(400 + n, qlen, klen)
        got = student.rel_attention_scores(q, k, r, u, v)
        expect(isinstance(got, torch.Tensor) and tuple(got.shape) == (2, 3, qlen, klen),
               f"the scores should have shape (2, 3, {qlen}, {klen})")
        s = math.sqrt(q.shape[-1])
        expect_close(kept(got, qlen, klen), scores_loop(q, k, r, u, v),
                     f"the scores, qlen={qlen}, klen={klen} (where the XL mask keeps)", mistakes={
                         "u and v swapped (u is the content bias, added before k; v the position bias, before r)":
                             scores_loop(q, k, r, v, u),
                         "no scaling by 1/sqrt(d)": scores_loop(q, k, r, u, v) * s,
                         "the position terms (b) and (d) are not rel-shifted":
                             kept((((q + u[:, None]) @ k.transpose(-2, -1))
                                   + (q + v[:, None]) @ r.transpose(-2, -1)) / s, qlen, klen),
                         "the [:-1] slice (labml #185) in rel_shift":
                             kept((((q + u[:, None]) @ k.transpose(-2, -1))
                                   + shift_labml((q + v[:, None]) @ r.transpose(-2, -1))) / s, qlen, klen),
                         "the global biases u and v are missing": scores_loop(q, k, r, u, v, terms="ab"),
                         "the content-position term (b) is missing": scores_loop(q, k, r, u, v, terms="acd"),
                     })


@graded("rel_attention_scores", points=1,
        hint="Gradients must reach q, k, r, u and v: build everything from them with differentiable operations.")
def test_rel_attention_scores_gradients(student, ref):
    """rel_attention_scores: do the gradients with respect to q, k, r, u and v match (masked entries excluded)?"""
    q, k, r, u, v = scores_inputs(500, 3, 7)
    ct = torch.randn(2, 3, 3, 7, generator=seeded(501)).masked_fill(~keep_mask(3, 7), 0.0)
    call = student.call("rel_attention_scores", args=(q, k, r, u, v), grad_wrt=(0, 1, 2, 3, 4), cotangent=ct)
    leaves = [t.clone().requires_grad_(True) for t in (q, k, r, u, v)]
    (ref.rel_attention_scores(*leaves) * ct).sum().backward()
    for name, got_g, leaf in zip("qkruv", call.grads, leaves):
        expect_close(got_g, leaf.grad, f"the gradient with respect to {name}")


@graded("rel_attention_scores", points=1, hint="Keep the dtype of q; never modify q, k, r, u or v in place "
                                               "(q + u makes a new tensor, q += u does not).")
def test_rel_attention_scores_dtype_inplace(student, ref):
    """rel_attention_scores: does it keep float64 and a batch of one, and leave its inputs unchanged?"""
    q, k, r, u, v = scores_inputs(600, 4, 6, B=1, dtype=torch.float64)
    before = tuple(t.clone() for t in (q, k, r, u, v))
    call = student.call("rel_attention_scores", args=(q, k, r, u, v))
    expect_close(kept(call.value, 4, 6), scores_loop(*before), "the float64 scores")
    expect_unmodified(before, call.inputs, "rel_attention_scores")


@needs_cuda
@graded("rel_attention_scores", points=1, hint="Create any new tensor on q's device.")
def test_rel_attention_scores_cuda(student, ref):
    """rel_attention_scores: does it run on the GPU?"""
    q, k, r, u, v = scores_inputs(601, 3, 5)
    call = student.call("rel_attention_scores", args=(q, k, r, u, v), device="cuda")
    expect(all(d.startswith("cuda") for d in call.devices), "the scores should stay on cuda")
    expect_close(kept(call.value, 3, 5), scores_loop(q, k, r, u, v), "the scores on cuda", atol=1e-4)


# ================================================================ permutation_masks
@graded("permutation_masks", points=3,
        hint="rank = torch.empty_like(perm); rank[perm] = torch.arange(T); "
             "content = rank[None, :] <= rank[:, None]; query = rank[None, :] < rank[:, None].")
def test_permutation_masks(student, ref):
    """permutation_masks: do the content and query masks follow the ranks of the order, for several permutations?"""
    g = seeded(700)
    perms = [torch.randperm(7, generator=g), torch.randperm(9, generator=g), torch.tensor([2, 0, 3, 1]),
             torch.arange(5), torch.arange(4).flip(0), torch.tensor([0])]
    for perm in perms:
        got = student.permutation_masks(perm)
        expect(isinstance(got, (tuple, list)) and len(got) == 2, "return a tuple (content, query)")
        content, query = ref.permutation_masks(perm)
        p_i, p_j = perm[:, None], perm[None, :]
        expect_close(got[0], content, f"the content mask for perm={perm.tolist()}", mistakes={
            "the content stream does not see itself (content is rank[j] <= rank[i])": query,
            "compared perm instead of rank (rank is the inverse permutation)": p_j <= p_i,
            "mask transposed (row i is the stream at position i, column j what it may read)": content.T,
        })
        expect_close(got[1], query, f"the query mask for perm={perm.tolist()}", mistakes={
            "the query stream sees its own content (query is rank[j] < rank[i], strictly)": content,
            "compared perm instead of rank (rank is the inverse permutation)": p_j < p_i,
            "mask transposed (row i is the stream at position i, column j what it may read)": query.T,
        })


@graded("permutation_masks", points=1, hint="Two bool (T, T) tensors; query == content with the diagonal removed.")
def test_permutation_masks_dtype_inplace(student, ref):
    """permutation_masks: are the masks bool, and is perm left unchanged?"""
    perm = torch.randperm(6, generator=seeded(701))
    call = student.call("permutation_masks", args=(perm.clone(),))
    content, query = ref.permutation_masks(perm)
    expect_close(call.value[0], content, "the content mask")
    expect_close(call.value[1], query, "the query mask")
    expect_unmodified((perm,), call.inputs[:1], "permutation_masks")


@needs_cuda
@graded("permutation_masks", points=1, hint="Create rank and the arange on perm's device.")
def test_permutation_masks_cuda(student, ref):
    """permutation_masks: does it run on the GPU?"""
    perm = torch.randperm(5, generator=seeded(702))
    call = student.call("permutation_masks", args=(perm,), device="cuda")
    expect(all(d.startswith("cuda") for d in call.devices), "the masks should be on cuda")
    expect_close(call.value[1], ref.permutation_masks(perm)[1], "the query mask")


# ================================================================ RelMultiHeadAttention
REL_ARGS = (16, 4)


@graded("RelMultiHeadAttention", points=3,
        hint="Queries from x, keys and values from torch.cat([memory, x], 1); r = r_net(R) split into heads "
             "(H, klen, d_k); rel_attention_scores; mask with xl_attention_mask(T, M); softmax; w_o.")
def test_rel_mha_with_memory(student, ref):
    """RelMultiHeadAttention: with the reference weights and a memory, do the output and self.attn match?"""
    m = ref_module(ref, "RelMultiHeadAttention", *REL_ARGS, seed=800)
    g = seeded(801)
    x, memory = torch.randn(2, 3, 16, generator=g), torch.randn(2, 5, 16, generator=g)
    res = student.module("RelMultiHeadAttention", init_args=REL_ARGS, state_dict=m.state_dict(),
                         args=(x, memory), attrs=("attn",), grad=False)
    with torch.no_grad():
        want = m(x, memory)
        mistakes = {
            "u and v swapped (u is the content bias, v the position bias)": rel_attn_manual(ref, m, x, memory,
                                                                                            swap_uv=True),
            "the XL mask hides the memory": rel_attn_manual(ref, m, x, memory, mask="causal"),
            "no mask (the current segment must be causal)": rel_attn_manual(ref, m, x, memory, mask="none"),
            "the [:-1] slice (labml #185) in rel_shift": rel_attn_manual(ref, m, x, memory, shift=shift_labml),
        }
    expect_close(res.value, want, "the output", mistakes=mistakes)
    expect_close(res.attrs["attn"], m.attn, "self.attn (B, H, T, M + T)")


@graded("RelMultiHeadAttention", points=2,
        hint="With memory=None the keys are x alone (klen = T) and the mask is causal.")
def test_rel_mha_without_memory(student, ref):
    """RelMultiHeadAttention: without memory (memory=None), does the output match, batch of one included?"""
    m = ref_module(ref, "RelMultiHeadAttention", 12, 3, seed=802)
    for B, T in [(2, 5), (1, 1)]:
        x = torch.randn(B, T, 12, generator=seeded(803 + T))
        res = student.module("RelMultiHeadAttention", init_args=(12, 3), state_dict=m.state_dict(),
                             args=(x, None), grad=False)
        with torch.no_grad():
            want = m(x, None)
            wrong = {"u and v swapped (u is the content bias, v the position bias)":
                     rel_attn_manual(ref, m, x, None, swap_uv=True)}
        expect_close(res.value, want, f"the output for B={B}, T={T}", mistakes=wrong)


@graded("RelMultiHeadAttention", points=2,
        hint="Do not detach anything on the way to the output: gradients must reach w_q, w_k, w_v, w_o, "
             "r_net, u and v. Create u and v as nn.Parameter of shape (n_heads, d_k).")
def test_rel_mha_gradients(student, ref):
    """RelMultiHeadAttention: do the gradients of every parameter (projections, r_net, u, v) match?"""
    m = ref_module(ref, "RelMultiHeadAttention", 8, 2, seed=804)
    g = seeded(805)
    x, memory, ct = (torch.randn(2, 3, 8, generator=g), torch.randn(2, 4, 8, generator=g),
                     torch.randn(2, 3, 8, generator=g))
    res = student.module("RelMultiHeadAttention", init_args=(8, 2), state_dict=m.state_dict(),
                         args=(x, memory), grad=True, cotangent=ct)
    m.zero_grad()
    (m(x, memory) * ct).sum().backward()
    for name, p in m.named_parameters():
        expect(name in res.param_grads, f"no gradient reached {name}")
        expect_close(res.param_grads[name], p.grad, f"the gradient of {name}", atol=1e-4)


@graded("RelMultiHeadAttention", points=1,
        hint="Attributes w_q, w_k, w_v, w_o (Linear with bias), r_net (Linear without bias), "
             "u and v (Parameter (H, d_k)); no other parameters; u and v start at zero.")
def test_rel_mha_parameters(student, ref):
    """RelMultiHeadAttention: are the parameters exactly w_q, w_k, w_v, w_o, r_net (no bias), u, v, with u = v = 0 at first?"""
    m = ref.RelMultiHeadAttention(16, 4)
    res = student.module("RelMultiHeadAttention", init_args=(16, 4), method="state_dict")
    want = sorted(name for name, _ in m.named_parameters())
    expect(sorted(res.param_keys) == want, f"the parameters should be {want}, got {sorted(res.param_keys)}")
    state = res.value
    expect(isinstance(state, dict) and tuple(state["u"].shape) == (4, 4) and tuple(state["v"].shape) == (4, 4),
           "u and v should have shape (n_heads, d_k)")
    expect(float(state["u"].abs().sum()) == 0.0 and float(state["v"].abs().sum()) == 0.0,
           "u and v should be initialised to zeros (the docstring says so)")


@needs_cuda
@graded("RelMultiHeadAttention", points=1, hint="Build R and the mask on x.device.")
def test_rel_mha_cuda(student, ref):
    """RelMultiHeadAttention: does it run on the GPU with a memory?"""
    m = ref_module(ref, "RelMultiHeadAttention", *REL_ARGS, seed=806)
    g = seeded(807)
    x, memory = torch.randn(2, 3, 16, generator=g), torch.randn(2, 4, 16, generator=g)
    res = student.module("RelMultiHeadAttention", init_args=REL_ARGS, state_dict=m.state_dict(),
                         args=(x, memory), grad=False, device="cuda")
    expect(all(d.startswith("cuda") for d in res.devices), "the output should be on cuda")
    with torch.no_grad():
        expect_close(res.value, m(x, memory), "the output", atol=1e-4)


# ================================================================ XLLayer
LAYER_ARGS = (16, 4, 32)


def layer_manual(ref, layer, x, memory, mem_len, *, pre_norm=False, cache="input"):
    """The reference layer with known mistakes switchable."""
    if pre_norm:
        h = x + layer.attn(layer.norm1(x), memory)
        out = h + layer.linear2(torch.relu(layer.linear1(layer.norm2(h))))
    else:
        h = layer.norm1(x + layer.attn(x, memory))
        out = layer.norm2(h + layer.linear2(torch.relu(layer.linear1(h))))
    return out, ref.update_memory(memory, out if cache == "output" else x, mem_len)


@graded("XLLayer", points=3,
        hint="h = norm1(x + attn(x, memory)); out = norm2(h + linear2(relu(linear1(h)))); "
             "return (out, update_memory(memory, x, mem_len)): the memory holds the layer's INPUT.")
def test_xl_layer(student, ref):
    """XLLayer: with the reference weights, do the output and the new memory match, with and without memory?"""
    layer = ref_module(ref, "XLLayer", *LAYER_ARGS, seed=900)
    g = seeded(901)
    x, memory = torch.randn(2, 4, 16, generator=g), torch.randn(2, 6, 16, generator=g)
    for mem, mem_len in [(memory, 6), (None, 3), (memory, 8)]:
        res = student.module("XLLayer", init_args=LAYER_ARGS, state_dict=layer.state_dict(),
                             args=(x, mem, mem_len), grad=False)
        expect(isinstance(res.value, (tuple, list)) and len(res.value) == 2,
               "forward should return a tuple (out, new_memory)")
        with torch.no_grad():
            want = layer(x, mem, mem_len)
            wrong_out = {"pre-norm (this layer is post-norm, as in the paper)":
                         layer_manual(ref, layer, x, mem, mem_len, pre_norm=True)[0]}
            wrong_mem = {"the memory caches the layer's output (it caches the layer's input x)":
                         layer_manual(ref, layer, x, mem, mem_len, cache="output")[1]}
        expect_close(res.value[0], want[0], "the output", mistakes=wrong_out)
        expect_close(res.value[1], want[1], f"the new memory (mem_len={mem_len})", mistakes=wrong_mem)


@graded("XLLayer", points=1, hint="forward(x, memory, 0) must return (out, None).")
def test_xl_layer_no_memory(student, ref):
    """XLLayer: with mem_len 0, is the new memory None?"""
    layer = ref_module(ref, "XLLayer", 8, 2, 16, seed=902)
    x = torch.randn(1, 3, 8, generator=seeded(903))
    res = student.module("XLLayer", init_args=(8, 2, 16), state_dict=layer.state_dict(), args=(x, None, 0))
    expect(isinstance(res.value, (tuple, list)) and len(res.value) == 2 and res.value[1] is None,
           "forward(x, None, 0) should return (out, None)")
    with torch.no_grad():
        expect_close(res.value[0], layer(x, None, 0)[0], "the output")


@graded("XLLayer", points=2, hint="Gradients must reach every parameter through the output.")
def test_xl_layer_gradients(student, ref):
    """XLLayer: do the gradients of every parameter match, with a memory?"""
    layer = ref_module(ref, "XLLayer", 8, 2, 16, seed=904)
    g = seeded(905)
    x, memory, ct = (torch.randn(2, 3, 8, generator=g), torch.randn(2, 2, 8, generator=g),
                     torch.randn(2, 3, 8, generator=g))
    res = student.module("XLLayer", init_args=(8, 2, 16), state_dict=layer.state_dict(),
                         args=(x, memory, 4), grad=True, cotangent=ct)
    layer.zero_grad()
    (layer(x, memory, 4)[0] * ct).sum().backward()
    for name, p in layer.named_parameters():
        expect(name in res.param_grads, f"no gradient reached {name}")
        expect_close(res.param_grads[name], p.grad, f"the gradient of {name}", atol=1e-4)


@graded("XLLayer", points=2,
        hint="Reading a sequence in segments with a long enough memory must equal reading it whole.")
def test_xl_layer_segments_equal_whole(student, ref):
    """XLLayer: does layer(second half, memory=first half) equal the second half of layer(whole sequence)?"""
    layer = ref_module(ref, "XLLayer", *LAYER_ARGS, seed=906)
    x = torch.randn(2, 7, 16, generator=seeded(907))
    whole = student.module("XLLayer", init_args=LAYER_ARGS, state_dict=layer.state_dict(),
                           args=(x, None, 7)).value
    first = student.module("XLLayer", init_args=LAYER_ARGS, state_dict=layer.state_dict(),
                           args=(x[:, :3], None, 7)).value
    expect(isinstance(first, (tuple, list)) and isinstance(first[1], torch.Tensor),
           "forward(x, None, mem_len > 0) should return the new memory")
    second = student.module("XLLayer", init_args=LAYER_ARGS, state_dict=layer.state_dict(),
                            args=(x[:, 3:], first[1], 7)).value
    expect_close(second[0], whole[0][:, 3:], "the output of the second segment, read with memory")
    expect_close(second[1], whole[1], "the memory after both segments")


@needs_cuda
@graded("XLLayer", points=1, hint="Everything the layer creates must be on x's device.")
def test_xl_layer_cuda(student, ref):
    """XLLayer: does it run on the GPU with a memory and return GPU tensors?"""
    layer = ref_module(ref, "XLLayer", *LAYER_ARGS, seed=908)
    g = seeded(909)
    x, memory = torch.randn(2, 3, 16, generator=g), torch.randn(2, 2, 16, generator=g)
    res = student.module("XLLayer", init_args=LAYER_ARGS, state_dict=layer.state_dict(),
                         args=(x, memory, 4), device="cuda")
    expect(all(d.startswith("cuda") for d in res.devices), "the output and memory should be on cuda")
    with torch.no_grad():
        want = layer(x, memory, 4)
    expect_close(res.value[0], want[0], "the output", atol=1e-4)


# ================================================================ TwoStreamAttention
TWO_ARGS = (12, 3)


def two_stream_manual(ref, m, h, g, perm, *, content="content", query="query", kv="h", q_from="g",
                      empty="zero"):
    """TwoStreamAttention's computation with known mistakes switchable: the masks of each stream,
    where the query stream's keys and values and queries come from, what a row with no key gets."""
    masks = dict(zip(("content", "query"), ref.permutation_masks(perm)))
    B, T, D = h.shape
    H = m.n_heads

    def heads(x):
        return x.reshape(B, T, H, D // H).transpose(1, 2)

    def attend(x, mask, src):
        scores = heads(m.w_q(x)) @ heads(m.w_k(src)).transpose(-2, -1) / math.sqrt(D // H)
        if empty == "fill":   # -1e30 instead of -inf, as in HF's XLNet: a row with no key averages
            weights = (scores - 1e30 * (~mask).float()).softmax(-1)
        else:
            weights = torch.nan_to_num(scores.masked_fill(~mask, float("-inf")).softmax(-1))
        return m.w_o((weights @ heads(m.w_v(src))).transpose(1, 2).reshape(B, T, D))

    return (attend(h, masks[content], h),
            attend(g if q_from == "g" else h, masks[query], g if kv == "g" else h))


def one_hot_rows(idx: torch.Tensor, T: int) -> torch.Tensor:
    """(n, T) float: row s one-hot at idx[s]."""
    return torch.nn.functional.one_hot(idx, T).float()


def two_stream_inputs(seed: int, B: int, T: int, D: int):
    g = seeded(seed)
    return torch.randn(B, T, D, generator=g), torch.randn(B, T, D, generator=g), torch.randperm(T, generator=g)


@graded("TwoStreamAttention", points=3,
        hint="k = w_k(h), v = w_v(h) for BOTH streams; content stream: queries w_q(h), content mask; "
             "query stream: queries w_q(g), query mask; softmax with masked scores at -inf, "
             "torch.nan_to_num on the weights, heads merged, w_o.")
def test_two_stream_outputs(student, ref):
    """TwoStreamAttention: with the reference weights, do both streams match, for several orders and heads?"""
    cases = [((12, 3), 2, 5, 1100), ((12, 3), 1, 7, 1101), ((8, 1), 2, 4, 1102), ((8, 2), 3, 6, 1103)]
    for args, B, T, seed in cases:
        m = ref_module(ref, "TwoStreamAttention", *args, seed=seed)
        h, g, perm = two_stream_inputs(seed, B, T, args[0])
        res = student.module("TwoStreamAttention", init_args=args, state_dict=m.state_dict(),
                             args=(h, g, perm), grad=False)
        expect(isinstance(res.value, (tuple, list)) and len(res.value) == 2,
               "forward should return a tuple (new h, new g)")
        with torch.no_grad():
            want = m(h, g, perm)
            wrong_h = lambda: {  # noqa: E731
                "the content stream does not see its own token (it takes the content mask, "
                "diagonal included)": two_stream_manual(ref, m, h, g, perm, content="query")[0]}
            wrong_g = lambda: {  # noqa: E731
                "the query stream reads its own token (it takes the query mask, no diagonal)":
                two_stream_manual(ref, m, h, g, perm, query="content")[1],
                "keys and values taken from the query stream g (both streams read keys and values "
                "from the content stream h)": two_stream_manual(ref, m, h, g, perm, kv="g")[1],
                "the query stream's queries built from h (they come from g, which never holds the token)":
                two_stream_manual(ref, m, h, g, perm, q_from="h")[1],
                "a row with no key filled with -1e30: it averages every value (its weights must be 0)":
                two_stream_manual(ref, m, h, g, perm, empty="fill")[1]}
        where = f"for perm={perm.tolist()}, n_heads={args[1]}"
        expect_close(res.value[0], want[0], f"the new content stream h {where}", mistakes=wrong_h)
        expect_close(res.value[1], want[1], f"the new query stream g {where}", mistakes=wrong_g)


@graded("TwoStreamAttention", points=1,
        hint="The query stream of perm[0] may read no key: a softmax over only -inf is NaN. Replace NaN "
             "weights by 0 (torch.nan_to_num): its output is then w_o(0) = 0.")
def test_two_stream_first_position(student, ref):
    """TwoStreamAttention: is the query stream of the first position in the order exactly 0, with no NaN?"""
    m = ref_module(ref, "TwoStreamAttention", *TWO_ARGS, seed=1110)
    h, g, perm = two_stream_inputs(1111, 2, 5, 12)
    res = student.module("TwoStreamAttention", init_args=TWO_ARGS, state_dict=m.state_dict(),
                         args=(h, g, perm), grad=False)
    expect(isinstance(res.value, (tuple, list)) and len(res.value) == 2,
           "forward should return a tuple (new h, new g)")
    new_g = res.value[1]
    expect(not bool(torch.isnan(new_g).any()),
           "the query stream contains NaN: the row with no key (perm[0]) must get weights 0, not NaN")
    first = new_g[:, int(perm[0])]
    expect(float(first.abs().max()) == 0.0,
           f"the query stream of position {int(perm[0])}, first in the order, should be exactly 0 "
           "(no key: weights all zero), got a largest entry of "
           f"{float(first.abs().max()):.3g} (a fill of -1e30 instead of -inf averages every value)")


@graded("TwoStreamAttention", points=2,
        hint="The query stream at position i must not depend on the token at i: its queries come from g, "
             "and the query mask has no diagonal. The content stream at i does read it.")
def test_two_stream_own_token(student, ref):
    """TwoStreamAttention: does changing the token at a position leave that position's query stream alone?"""
    m = ref_module(ref, "TwoStreamAttention", *TWO_ARGS, seed=1120)
    h, g, perm = two_stream_inputs(1121, 1, 6, 12)
    base = student.module("TwoStreamAttention", init_args=TWO_ARGS, state_dict=m.state_dict(),
                          args=(h, g, perm)).value
    for pos in (int(perm[-1]), int(perm[3])):
        other = h.clone()
        other[:, pos] += torch.randn(12, generator=seeded(1122 + pos))
        res = student.module("TwoStreamAttention", init_args=TWO_ARGS, state_dict=m.state_dict(),
                             args=(other, g, perm)).value
        expect(torch.allclose(res[1][:, pos], base[1][:, pos], atol=1e-6),
               f"the query stream at position {pos} changed with the token at {pos}: it must never read "
               "its own token")
        expect(not torch.allclose(res[0][:, pos], base[0][:, pos], atol=1e-6),
               f"the content stream at position {pos} did not change with the token at {pos}: it must "
               "read its own token (the content mask has the diagonal)")


@graded("TwoStreamAttention", points=1,
        hint="Do not detach anything on the way to the output; gradients must reach w_q, w_k, w_v and w_o.")
def test_two_stream_gradients(student, ref):
    """TwoStreamAttention: do the gradients of every projection through the content stream match?"""
    m = ref_module(ref, "TwoStreamAttention", *TWO_ARGS, seed=1130)
    h, g, perm = two_stream_inputs(1131, 2, 5, 12)
    ct = torch.randn(2, 5, 12, generator=seeded(1132))
    res = student.module("TwoStreamAttention", init_args=TWO_ARGS, state_dict=m.state_dict(),
                         args=(h, g, perm), grad=True, cotangent=ct)
    m.zero_grad()
    (m(h, g, perm)[0] * ct).sum().backward()
    for name, p in m.named_parameters():
        expect(name in res.param_grads, f"no gradient reached {name}")
        expect_close(res.param_grads[name], p.grad, f"the gradient of {name}", atol=1e-4)


@graded("TwoStreamAttention", points=1,
        hint="Exactly four projections w_q, w_k, w_v, w_o, each nn.Linear(d_model, d_model, bias=False), "
             "shared by both streams.")
def test_two_stream_parameters(student, ref):
    """TwoStreamAttention: are the parameters exactly w_q, w_k, w_v, w_o, without bias, shared by both streams?"""
    want = sorted(name for name, _ in ref.TwoStreamAttention(*TWO_ARGS).named_parameters())
    res = student.module("TwoStreamAttention", init_args=TWO_ARGS, method="state_dict")
    expect(sorted(res.param_keys) == want, f"the parameters should be {want}, got {sorted(res.param_keys)} "
           "(no bias, as in XLNet; one set of projections for both streams)")


@needs_cuda
@graded("TwoStreamAttention", points=1, hint="Build the masks on h's device.")
def test_two_stream_cuda(student, ref):
    """TwoStreamAttention: does it run on the GPU?"""
    m = ref_module(ref, "TwoStreamAttention", *TWO_ARGS, seed=1140)
    h, g, perm = two_stream_inputs(1141, 2, 5, 12)
    res = student.module("TwoStreamAttention", init_args=TWO_ARGS, state_dict=m.state_dict(),
                         args=(h, g, perm), device="cuda")
    expect(all(d.startswith("cuda") for d in res.devices), "both streams should be on cuda")
    with torch.no_grad():
        expect_close(res.value[1], m(h, g, perm)[1], "the query stream", atol=1e-4)


# ================================================================ partial_prediction_targets
@graded("partial_prediction_targets", points=2,
        hint="n = T // k; the targets are the POSITIONS perm[T - n:], the last n steps of the order; "
             "is_target[perm[T - n:]] = True; target_mapping = F.one_hot(perm[T - n:], T).float().")
def test_partial_prediction_targets(student, ref):
    """partial_prediction_targets: are the targets the positions of the last T // k steps, in the order's sequence?"""
    g = seeded(1200)
    for T, k in [(12, 4), (7, 2), (9, 6), (5, 1), (6, 6), (10, 3)]:
        perm = torch.randperm(T, generator=g)
        got = student.partial_prediction_targets(perm, k)
        expect(isinstance(got, (tuple, list)) and len(got) == 2, "return a tuple (is_target, target_mapping)")
        is_target, mapping = ref.partial_prediction_targets(perm, k)
        n = T // k
        steps = torch.zeros(T, dtype=torch.bool)
        steps[T - n:] = True
        first = torch.zeros(T, dtype=torch.bool)
        first[perm[:n]] = True
        where = f"for perm={perm.tolist()}, k={k}"
        expect_close(got[0], is_target, f"is_target {where}", mistakes={
            "marked the last steps, not the positions at those steps (is_target[perm[T - n:]])": steps,
            "the first T // k steps of the order (the targets are the last ones)": first,
        })
        expect_close(got[1], mapping, f"target_mapping {where}", mistakes={
            "rows one-hot at the step, not at the position perm[t]": one_hot_rows(torch.arange(T - n, T), T),
            "the first T // k steps of the order (the targets are the last ones)": one_hot_rows(perm[:n], T),
            "targets sorted by position (rows follow the order's sequence)": one_hot_rows(perm[T - n:].sort()[0], T),
        })



@graded("partial_prediction_targets", points=1,
        hint="Raise ValueError when k < 1 or k > T (T // k would be 0 or k meaningless); never modify perm.")
def test_partial_prediction_targets_errors(student, ref):
    """partial_prediction_targets: does k outside 1..T raise ValueError, and is perm left unchanged?"""
    perm = torch.randperm(6, generator=seeded(1201))
    for k in (0, 7):
        expect_raises(lambda: student.partial_prediction_targets(perm, k), "ValueError",
                      f"partial_prediction_targets(perm of length 6, k={k})")
    call = student.call("partial_prediction_targets", args=(perm.clone(), 3))
    expect_unmodified((perm,), call.inputs[:1], "partial_prediction_targets")
    expect_close(call.value[0], ref.partial_prediction_targets(perm, 3)[0], "is_target (bool)")


@needs_cuda
@graded("partial_prediction_targets", points=1, hint="Create is_target on perm's device.")
def test_partial_prediction_targets_cuda(student, ref):
    """partial_prediction_targets: does it run on the GPU?"""
    perm = torch.randperm(8, generator=seeded(1202))
    call = student.call("partial_prediction_targets", args=(perm, 4), device="cuda")
    expect(all(d.startswith("cuda") for d in call.devices), "is_target and target_mapping should be on cuda")
    expect_close(call.value[1], ref.partial_prediction_targets(perm, 4)[1], "target_mapping")
