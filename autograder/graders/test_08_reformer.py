"""Hidden graders of chapter 08, the Reformer: LSH attention, reversible layers, chunking."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from autograder.harness.check import (expect, expect_close, expect_unmodified, graded, needs_cuda,
                                      reference_cache, seeded)


# ---------------------------------------------------------------- helpers (trusted side only)
@reference_cache
def window_attention(sq, sv, spos, m, causal=False, look="prev", mask_self=True, normalise=True,
                     causal_sorted=False):
    """Brute force, query by query: the keys of the query's chunk and of the chunk before it
    (chunk 0: the last chunk). The variants build the known mistakes."""
    B, T, D = sq.shape
    C = T // m
    k = F.normalize(sq, dim=-1) if normalise else sq
    out = torch.zeros(B, T, sv.shape[-1], dtype=sq.dtype)
    lse = torch.zeros(B, T, dtype=sq.dtype)
    for b in range(B):
        for i in range(T):
            c = i // m
            keys = list(range(c * m, (c + 1) * m))
            if look != "none":
                other = (c - 1) % C if look == "prev" else (c + 1) % C
                keys += list(range(other * m, (other + 1) * m))
            scores, values = [], []
            for j in keys:
                if causal and (j > i if causal_sorted else spos[b, j] > spos[b, i]):
                    continue
                same = bool(spos[b, j] == spos[b, i])
                s = sq[b, i] @ k[b, j] / math.sqrt(D)
                scores.append(torch.tensor(-1e5, dtype=sq.dtype) if same and mask_self else s)
                values.append(sv[b, j])
            s = torch.stack(scores)
            out[b, i] = s.softmax(0) @ torch.stack(values)
            lse[b, i] = s.logsumexp(0)
    return out, lse


def sorted_inputs(seed, B=2, T=12, D=6, Dv=5, n_buckets=4, dtype=torch.float32):
    """Inputs of chunked_lsh_attention in a real sorted order (sorted by bucket, then position)."""
    g = seeded(seed)
    qk = torch.randn(B, T, D, generator=g, dtype=dtype)
    v = torch.randn(B, T, Dv, generator=g, dtype=dtype)
    bk = torch.randint(0, n_buckets, (B, T), generator=g)
    sidx = (bk * T + torch.arange(T)).argsort(-1)
    sq = qk.gather(1, sidx[..., None].expand(B, T, D))
    sv = v.gather(1, sidx[..., None].expand(B, T, Dv))
    return sq, sv, sidx


FLOAT32_NEAR_1E5 = (" A query that sees only its own key (with causal=True, the first position) has its scores and lse "
                    "near -1e5: weights formed as exp(scores - lse) lose their float32 digits there; use softmax, or "
                    "subtract the max first.")


def full_shared_qk(qk, v, causal=False):
    """Full shared-QK attention (own key -1e5, later keys masked if causal)."""
    B, T, D = qk.shape
    scores = qk @ F.normalize(qk, dim=-1).transpose(1, 2) / math.sqrt(D)
    eye = torch.eye(T, dtype=torch.bool)
    scores = scores.masked_fill(eye, -1e5)
    if causal:
        scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    return scores.softmax(-1) @ v


@reference_cache
def lsh_reference(qk, v, rot, m, causal=False, combine="lse", undo=True):
    """LSH attention from the brute-force pieces; `combine`/`undo` variants build mistakes."""
    B, T, D = qk.shape
    proj = torch.einsum("btd,ndr->nbtr", qk, rot)
    buckets = torch.cat([proj, -proj], -1).argmax(-1)
    outs, lses = [], []
    for bk in buckets:
        sidx = (bk * T + torch.arange(T)).argsort(-1)
        inv = sidx.argsort(-1)
        sq = qk.gather(1, sidx[..., None].expand(B, T, D))
        sv = v.gather(1, sidx[..., None].expand(B, T, v.shape[-1]))
        o, l = window_attention(sq, sv, sidx, m, causal)
        if undo:
            o, l = o.gather(1, inv[..., None].expand_as(o)), l.gather(1, inv)
        outs.append(o)
        lses.append(l)
    outs, lses = torch.stack(outs), torch.stack(lses)
    if combine == "mean":
        return outs.mean(0)
    return (lses.softmax(0)[..., None] * outs).sum(0)


@reference_cache
def toy_block(ref, d, seed, dtype=torch.float32):
    torch.manual_seed(seed)
    return ref.ToyReversibleBlock(d).to(dtype)


def block_forward(block, x1, x2, swap=False):
    f, g = (block.g, block.f) if swap else (block.f, block.g)
    y1 = x1 + f(x2)
    return y1, x2 + g(y1)


def block_inverse(block, y1, y2, swap=False):
    f, g = (block.g, block.f) if swap else (block.f, block.g)
    x2 = y2 - g(y1)
    return y1 - f(x2), x2


# ---------------------------------------------------------------- lsh_hash
@graded("lsh_hash", points=2, hint="Project with einsum('btd,ndr->nbtr'), concatenate [xR, -xR] on the "
        "last axis, argmax: (n_hashes, B, T) long.")
def test_lsh_hash_matches(student, ref):
    """lsh_hash: does it give argmax([xR ; -xR]) for every round?"""
    g = seeded(0)
    x = torch.randn(3, 7, 5, generator=g)
    rot = torch.randn(4, 5, 3, generator=g)
    call = student.call("lsh_hash", args=(x, rot))
    proj = torch.einsum("btd,ndr->nbtr", x, rot)
    expect_close(call.value, ref.lsh_hash(x, rot), "the buckets", mistakes={
        "the buckets of -xR come first ([-xR ; xR])": torch.cat([-proj, proj], -1).argmax(-1),
        "argmax of xR alone (only n_buckets / 2 buckets)": proj.argmax(-1),
        "argmax of |xR| (a vector and its opposite share a bucket)": proj.abs().argmax(-1),
    })
    expect_unmodified((x, rot), call.inputs, "lsh_hash")


@graded("lsh_hash", points=1, hint="Return a long tensor of shape (n_hashes, B, T); it must work in float64 "
        "and for a batch of one.")
def test_lsh_hash_float64_batch1(student, ref):
    """lsh_hash: float64 input, batch of one, one round: right shape, dtype and buckets?"""
    g = seeded(1)
    x = torch.randn(1, 9, 4, generator=g, dtype=torch.float64)
    rot = torch.randn(1, 4, 4, generator=g, dtype=torch.float64)
    expect_close(student.lsh_hash(x, rot), ref.lsh_hash(x, rot), "the buckets")


# ---------------------------------------------------------------- sort_by_bucket
@graded("sort_by_bucket", points=2, hint="Sort by bucket * T + position (an argsort of a unique key), "
        "so ties keep increasing position.")
def test_sort_by_bucket_order(student, ref):
    """sort_by_bucket: sorted by bucket, and within a bucket by increasing position?"""
    g = seeded(2)
    buckets = torch.randint(0, 3, (2, 300), generator=g)
    sidx, undo = student.sort_by_bucket(buckets)
    want, _ = ref.sort_by_bucket(buckets)
    expect(isinstance(sidx, torch.Tensor) and sidx.shape == buckets.shape,
           "sorted_idx should have the shape of buckets")
    got_b = buckets.gather(-1, sidx.long())
    expect(bool((got_b[:, 1:] >= got_b[:, :-1]).all()), "the positions are not sorted by bucket")
    if not torch.equal(sidx.long(), want):
        reversed_ties = (buckets * 300 - torch.arange(300)).argsort(-1)
        if torch.equal(sidx.long(), reversed_ties):
            expect(False, "a sort by bucket alone, ties in decreasing position: sort by bucket, "
                          "then by increasing position")
        expect(False, "a sort by bucket alone: within a bucket the positions must be in increasing "
                      "order (sort by bucket, then by position, e.g. a stable sort)")
    expect_close(sidx, want, "sorted_idx")


@graded("sort_by_bucket", points=2, hint="undo_idx = sorted_idx.argsort(-1): the inverse permutation, so that "
        "sorted_idx.gather(-1, undo_idx) is arange(T).")
def test_sort_by_bucket_undo(student, ref):
    """sort_by_bucket: is undo_idx the inverse permutation of sorted_idx?"""
    g = seeded(3)
    buckets = torch.randint(0, 5, (3, 17), generator=g)
    call = student.call("sort_by_bucket", args=(buckets,))
    sidx, undo = call.value
    want_s, want_u = ref.sort_by_bucket(buckets)
    expect_close(undo, want_u, "undo_idx", mistakes={
        "undo_idx not the inverse permutation (it is sorted_idx itself)": want_s,
        "undo_idx not the inverse permutation (it is arange(T))": torch.arange(17).expand(3, 17),
        "undo_idx not the inverse permutation (it is sorted_idx reversed)": want_s.flip(-1),
    })
    expect_unmodified((buckets,), call.inputs, "sort_by_bucket")


@graded("sort_by_bucket", points=1, hint="Work on any leading shape (..., T) and on int32 or long buckets.")
def test_sort_by_bucket_leading_dims(student, ref):
    """sort_by_bucket: (n, B, T) buckets of dtype int32?"""
    buckets = torch.randint(0, 4, (2, 3, 10), generator=seeded(4)).int()
    sidx, undo = student.sort_by_bucket(buckets)
    want_s, want_u = ref.sort_by_bucket(buckets)
    expect_close(sidx, want_s, "sorted_idx")
    expect_close(undo, want_u, "undo_idx")


# ---------------------------------------------------------------- chunked_lsh_attention
@graded("chunked_lsh_attention", points=4, hint="Reshape into chunks (B, C, m, ...), append the previous chunk "
        "(roll by 1 on the chunk axis) to the keys, mask a key at the query's own position with -1e5.")
def test_chunked_matches_brute_force(student, ref):
    """chunked_lsh_attention: does it match a brute-force window attention, query by query?"""
    sq, sv, spos = sorted_inputs(5)
    call = student.call("chunked_lsh_attention", args=(sq, sv, spos, 3))
    out, lse = window_attention(sq, sv, spos, 3)
    mistakes = {
        "no look-back to the previous chunk": window_attention(sq, sv, spos, 3, look="none"),
        "look-back to the next chunk instead of the previous one":
            window_attention(sq, sv, spos, 3, look="next"),
        "self-attention not masked in shared-QK (own key should score -1e5)":
            window_attention(sq, sv, spos, 3, mask_self=False),
        "keys not unit-normalised": window_attention(sq, sv, spos, 3, normalise=False),
    }
    expect(isinstance(call.value, (tuple, list)) and len(call.value) == 2,
           "chunked_lsh_attention should return (out, lse)")
    expect_close(call.value[0], out, "the output", atol=1e-5,
                 mistakes={k: v[0] for k, v in mistakes.items()})
    expect_close(call.value[1], lse, "lse", atol=1e-4, mistakes={k: v[1] for k, v in mistakes.items()})
    expect_unmodified((sq, sv, spos), call.inputs, "chunked_lsh_attention")


@graded("chunked_lsh_attention", points=3, hint="With causal=True mask keys whose ORIGINAL position (spos) "
        "is later than the query's; the query's own key stays (at -1e5)." + FLOAT32_NEAR_1E5)
def test_chunked_causal(student, ref):
    """chunked_lsh_attention: causal, masked by original position, not by sorted position?"""
    sq, sv, spos = sorted_inputs(6, T=16)
    got = student.chunked_lsh_attention(sq, sv, spos, 4, causal=True)
    out, lse = window_attention(sq, sv, spos, 4, causal=True)
    expect_close(got[0], out, "the causal output", atol=1e-5, mistakes={
        "causal mask ignored": window_attention(sq, sv, spos, 4)[0],
        "causal mask by sorted position instead of original position":
            window_attention(sq, sv, spos, 4, causal=True, causal_sorted=True)[0],
        "no look-back to the previous chunk": window_attention(sq, sv, spos, 4, True, look="none")[0],
    })
    expect_close(got[1], lse, "lse", atol=1e-4)


@graded("chunked_lsh_attention", points=1, hint="Create masks on the inputs' device and in the scores' dtype; "
        "float64 in, float64 out.")
def test_chunked_float64_batch1(student, ref):
    """chunked_lsh_attention: float64, batch of one, two chunks?"""
    sq, sv, spos = sorted_inputs(7, B=1, T=8, dtype=torch.float64)
    got = student.chunked_lsh_attention(sq, sv, spos, 4)
    out, lse = window_attention(sq, sv, spos, 4)
    expect_close(got[0], out, "the output (float64)", atol=1e-8, rtol=1e-7)
    expect_close(got[1], lse, "lse (float64)", atol=1e-8, rtol=1e-7)


@graded("chunked_lsh_attention", points=1, hint="Gradients must flow to sq and sv (no detach, no in-place "
        "writes into the inputs).")
def test_chunked_grad(student, ref):
    """chunked_lsh_attention: do gradients reach sq and sv as in the reference?"""
    sq, sv, spos = sorted_inputs(8, T=8)
    ct = torch.randn(2, 8, 5, generator=seeded(9))
    call = student.call("chunked_lsh_attention", args=(sq, sv, spos, 2), grad_wrt=(0, 1), cotangent=ct)
    a, b = sq.clone().requires_grad_(), sv.clone().requires_grad_()
    (ref.chunked_lsh_attention(a, b, spos, 2)[0] * ct).sum().backward()
    expect_close(call.grads[0], a.grad, "the gradient w.r.t. sq", atol=1e-4)
    expect_close(call.grads[1], b.grad, "the gradient w.r.t. sv", atol=1e-4)


@needs_cuda
@graded("chunked_lsh_attention", points=1, hint="Create every tensor (positions, masks) on the inputs' device.")
def test_chunked_cuda(student, ref):
    """chunked_lsh_attention: does it run on a GPU, causal, with outputs on the GPU?"""
    sq, sv, spos = sorted_inputs(10, T=16)
    call = student.call("chunked_lsh_attention", args=(sq, sv, spos, 4), kwargs={"causal": True},
                        device="cuda")
    expect(all(d.startswith("cuda") for d in call.devices), "the outputs should stay on cuda")
    expect_close(call.value[0], window_attention(sq, sv, spos, 4, causal=True)[0], "the output",
                 atol=1e-4)


# ---------------------------------------------------------------- combine_hash_rounds
@graded("combine_hash_rounds", points=2, hint="weights = softmax(lses, dim=0) (over rounds), then "
        "sum_r weights[r, ..., None] * outs[r].")
def test_combine_matches(student, ref):
    """combine_hash_rounds: are the rounds weighted by the softmax over rounds of their lse?"""
    g = seeded(11)
    outs = torch.randn(3, 2, 5, 4, generator=g)
    lses = 3 * torch.randn(3, 2, 5, generator=g)
    call = student.call("combine_hash_rounds", args=(outs, lses))
    expect_close(call.value, ref.combine_hash_rounds(outs, lses), "the combined output", mistakes={
        "hash rounds averaged, not logsumexp-weighted": outs.mean(0),
        "softmax over the wrong axis (positions, not rounds)":
            (lses.softmax(-1)[..., None] * outs).sum(0),
        "weights exp(lse) without normalising": (lses.exp()[..., None] * outs).sum(0),
        "only the round with the largest lse": outs.gather(
            0, lses.argmax(0)[None, ..., None].expand(1, 2, 5, 4))[0],
    })
    expect_unmodified((outs, lses), call.inputs, "combine_hash_rounds")


@graded("combine_hash_rounds", points=1, hint="Subtract the max over rounds before exp (torch.softmax does): "
        "lse near -1e5 (a query that sees only itself) loses its digits in float32 otherwise.")
def test_combine_large_lse(student, ref):
    """combine_hash_rounds: lse near -1e5 in float32, huge lse in float64, a single round?"""
    g = seeded(12)
    outs = torch.randn(2, 1, 3, 2, generator=g)
    lses = torch.full((2, 1, 3), -1e5) + math.log(2)
    expect_close(student.combine_hash_rounds(outs, lses), outs.mean(0),
                 "the combined output of two rounds with equal lse near -1e5")
    outs = torch.randn(2, 1, 3, 2, generator=g, dtype=torch.float64)
    lses = 1e4 + torch.randn(2, 1, 3, generator=g, dtype=torch.float64)
    expect_close(student.combine_hash_rounds(outs, lses), ref.combine_hash_rounds(outs, lses),
                 "the combined output")
    expect_close(student.combine_hash_rounds(outs[:1], lses[:1]), outs[0], "one round's output")


# ---------------------------------------------------------------- lsh_attention
@graded("lsh_attention", points=3, hint="Per round: sort_by_bucket, gather qk and v, chunked_lsh_attention "
        "with spos = sorted_idx, gather back with undo_idx; then combine_hash_rounds.")
def test_lsh_attention_matches(student, ref):
    """lsh_attention: does it match LSH attention built from the brute-force pieces?"""
    g = seeded(13)
    qk = torch.randn(2, 12, 6, generator=g)
    v = torch.randn(2, 12, 5, generator=g)
    rot = torch.randn(3, 6, 2, generator=g)
    call = student.call("lsh_attention", args=(qk, v, rot, 3))
    expect_close(call.value, lsh_reference(qk, v, rot, 3), "the output", atol=1e-5, mistakes={
        "hash rounds averaged, not logsumexp-weighted": lsh_reference(qk, v, rot, 3, combine="mean"),
        "output left in sorted order (undo_idx not applied)": lsh_reference(qk, v, rot, 3, undo=False),
    })
    expect_unmodified((qk, v, rot), call.inputs, "lsh_attention")


@graded("lsh_attention", points=3, hint="With one bucket and one chunk every query sees every key: check "
        "that your masks (own position -1e5, causal by original position) match full attention." + FLOAT32_NEAR_1E5)
def test_lsh_attention_one_bucket_is_full(student, ref):
    """lsh_attention: with one bucket and one chunk, is it full shared-QK attention (causal or not)?"""
    g = seeded(14)
    qk = torch.randn(2, 10, 8, generator=g)
    v = torch.randn(2, 10, 4, generator=g)
    one_bucket = torch.zeros(2, 8, 1)
    for causal in (False, True):
        got = student.lsh_attention(qk, v, one_bucket, 10, causal=causal)
        expect_close(got, full_shared_qk(qk, v, causal), f"the output (causal={causal})", atol=1e-5,
                     mistakes={"self-attention not masked in shared-QK":
                               (qk @ F.normalize(qk, dim=-1).transpose(1, 2) / math.sqrt(8)).masked_fill(
                                   torch.ones(10, 10, dtype=torch.bool).triu(1) & causal,
                                   float("-inf")).softmax(-1) @ v})


@graded("lsh_attention", points=1, hint="Everything must work in float64 and with causal=True.")
def test_lsh_attention_causal_float64(student, ref):
    """lsh_attention: causal, float64, two rounds, several chunks?"""
    g = seeded(15)
    qk = torch.randn(1, 16, 4, generator=g, dtype=torch.float64)
    v = torch.randn(1, 16, 3, generator=g, dtype=torch.float64)
    rot = torch.randn(2, 4, 2, generator=g, dtype=torch.float64)
    expect_close(student.lsh_attention(qk, v, rot, 4, causal=True),
                 lsh_reference(qk, v, rot, 4, causal=True), "the output", atol=1e-8, rtol=1e-7)


@needs_cuda
@graded("lsh_attention", points=1, hint="Create every index and mask on the inputs' device.")
def test_lsh_attention_cuda(student, ref):
    """lsh_attention: does it run on a GPU, with the output on the GPU?"""
    g = seeded(16)
    qk, v, rot = torch.randn(2, 16, 6, generator=g), torch.randn(2, 16, 5, generator=g), \
        torch.randn(2, 6, 2, generator=g)
    call = student.call("lsh_attention", args=(qk, v, rot, 4), kwargs={"causal": True}, device="cuda")
    expect(all(d.startswith("cuda") for d in call.devices), "the output should stay on cuda")
    expect_close(call.value, lsh_reference(qk, v, rot, 4, causal=True), "the output", atol=1e-4)


# ---------------------------------------------------------------- LSHSelfAttention
@graded("LSHSelfAttention", points=3, hint="Project with qk and v, split the heads into the batch "
        "(B*H, T, d_k), lsh_attention with the given rotations, merge the heads, apply out.")
def test_lsh_self_attention(student, ref):
    """LSHSelfAttention: does it match the reference with given rotations, causal, 2 heads?"""
    torch.manual_seed(17)
    m = ref.LSHSelfAttention(8, 2, 4, 4, 2, True)
    g = seeded(18)
    x = torch.randn(2, 12, 8, generator=g)
    rot = torch.randn(2, 4, 2, generator=g)
    res = student.module("LSHSelfAttention", init_args=(8, 2, 4, 4, 2, True), state_dict=m.state_dict(),
                         args=(x, rot), grad=True)
    want = m(x, rot)
    expect_close(res.value, want.detach(), "the output", atol=1e-5)
    want.sum().backward()
    for name, p in m.named_parameters():
        expect_close(res.param_grads.get(name), p.grad, f"the gradient of {name}", atol=1e-4)


@graded("LSHSelfAttention", points=1, hint="Without rotations, draw n_hashes random ones of shape "
        "(n_hashes, d_k, n_buckets // 2) on x's device; the output keeps x's shape.")
def test_lsh_self_attention_random_rotations(student, ref):
    """LSHSelfAttention: without rotations, does it run and keep the shape (B, T, D)?"""
    torch.manual_seed(19)
    m = ref.LSHSelfAttention(12, 3, 8, 4, 3)
    x = torch.randn(1, 16, 12, generator=seeded(20))
    res = student.module("LSHSelfAttention", init_args=(12, 3, 8, 4, 3), state_dict=m.state_dict(),
                         args=(x,))
    expect(isinstance(res.value, torch.Tensor) and tuple(res.value.shape) == (1, 16, 12),
           "the output should have shape (B, T, D)")


# ---------------------------------------------------------------- ReversibleBlock
@graded("ReversibleBlock", points=2, hint="y1 = x1 + f(x2), then y2 = x2 + g(y1) (g sees the NEW y1).")
def test_reversible_forward(student, ref):
    """ReversibleBlock: y1 = x1 + f(x2) and y2 = x2 + g(y1)?"""
    block = toy_block(ref, 6, 21)
    g = seeded(22)
    x1, x2 = torch.randn(2, 4, 6, generator=g), torch.randn(2, 4, 6, generator=g)
    res = student.module("ToyReversibleBlock", init_args=(6,), state_dict=block.state_dict(),
                         method="forward", args=(x1, x2))
    with torch.no_grad():
        want = block_forward(block, x1, x2)
        y1w = x1 + block.f(x2)
        expect_close(res.value, want, "(y1, y2)", mistakes={
            "f and g swapped": block_forward(block, x1, x2, swap=True),
            "g applied to x1 instead of y1": (y1w, x2 + block.g(x1)),
        })


@graded("ReversibleBlock", points=3, hint="Invert in the reverse order: x2 = y2 - g(y1) first, then "
        "x1 = y1 - f(x2).")
def test_reversible_inverse(student, ref):
    """ReversibleBlock.inverse: does it rebuild (x1, x2) exactly?"""
    block = toy_block(ref, 6, 23)
    g = seeded(24)
    x1, x2 = torch.randn(2, 4, 6, generator=g), torch.randn(2, 4, 6, generator=g)
    with torch.no_grad():
        y1, y2 = block_forward(block, x1, x2)
        swapped = block_inverse(block, y1, y2, swap=True)
    res = student.module("ToyReversibleBlock", init_args=(6,), state_dict=block.state_dict(),
                         method="inverse", args=(y1, y2))
    expect_close(res.value, (x1, x2), "the rebuilt inputs", atol=1e-5, mistakes={
        "F and G swapped in the inversion": swapped,
    })


@needs_cuda
@graded("ReversibleBlock", points=1, hint="Nothing device-specific should be needed: use f and g.")
def test_reversible_cuda(student, ref):
    """ReversibleBlock: forward on a GPU?"""
    block = toy_block(ref, 6, 25)
    g = seeded(26)
    x1, x2 = torch.randn(2, 4, 6, generator=g), torch.randn(2, 4, 6, generator=g)
    res = student.module("ToyReversibleBlock", init_args=(6,), state_dict=block.state_dict(),
                         method="forward", args=(x1, x2), device="cuda")
    expect(all(d.startswith("cuda") for d in res.devices), "the outputs should stay on cuda")
    with torch.no_grad():
        expect_close(res.value, block_forward(block, x1, x2), "(y1, y2)", atol=1e-5)


# ---------------------------------------------------------------- reversible_block_backward
def backward_case(ref, seed, dtype=torch.float32):
    block = toy_block(ref, 5, seed, dtype)
    g = seeded(seed + 1)
    x1 = torch.randn(3, 4, 5, generator=g, dtype=dtype, requires_grad=True)
    x2 = torch.randn(3, 4, 5, generator=g, dtype=dtype, requires_grad=True)
    y1, y2 = block_forward(block, x1, x2)
    dy1, dy2 = torch.randn_like(y1), torch.randn_like(y2)
    torch.autograd.backward((y1, y2), (dy1, dy2))
    grads = {n: p.grad.clone() for n, p in block.named_parameters()}
    return block, (x1.detach(), x2.detach(), x1.grad, x2.grad), grads, (y1.detach(), y2.detach(), dy1, dy2)


@graded("reversible_block_backward", points=4, hint="With autograd on: g(y1) backward with dy2 gives the extra "
        "dy1; x2 = y2 - g(y1); f(x2) backward with the total dy1 gives dx2 = dy2 + that gradient; x1 = y1 - f(x2).")
def test_block_backward_inputs(student, ref):
    """reversible_block_backward: are (x1, x2, dx1, dx2) those autograd gives?"""
    block, want, _, outs = backward_case(ref, 27)
    call = student.call("toy_block_backward", args=(block.state_dict(),) + outs)
    expect(isinstance(call.value, (tuple, list)) and len(call.value) == 5,
           "reversible_block_backward should return (x1, x2, dx1, dx2)")
    with torch.no_grad():
        swapped = block_inverse(block, outs[0], outs[1], swap=True)
    expect_close(tuple(call.value[:2]), want[:2], "the rebuilt (x1, x2)", atol=1e-5, mistakes={
        "F and G swapped in the inversion": swapped})
    expect_close(tuple(call.value[2:4]), want[2:], "(dx1, dx2)", atol=1e-5, mistakes={
        "the gradients passed through unchanged (dx1 = dy1, dx2 = dy2)": outs[2:],
    })
    expect_unmodified(outs, call.inputs[1:], "reversible_block_backward")


@graded("reversible_block_backward", points=3, hint="Call .backward() on g(y1) and f(x2) recomputed with "
        "autograd on, so the parameters' .grad accumulate.")
def test_block_backward_params(student, ref):
    """reversible_block_backward: do the parameter gradients of f and g match autograd's?"""
    block, _, grads, outs = backward_case(ref, 29)
    call = student.call("toy_block_backward", args=(block.state_dict(),) + outs)
    got = call.value[4] if isinstance(call.value, (tuple, list)) and len(call.value) == 5 else {}
    for name, want in grads.items():
        expect(got.get(name) is not None, f"no gradient was accumulated into {name}")
        expect_close(got[name], want, f"the gradient of {name}", atol=1e-5)


@graded("reversible_block_backward", points=1, hint="Works in float64 too: create nothing in float32.")
def test_block_backward_float64(student, ref):
    """reversible_block_backward: float64, inputs and gradients to 1e-10?"""
    block, want, grads, outs = backward_case(ref, 31, torch.float64)
    got = student.call("toy_block_backward", args=(block.state_dict(),) + outs).value
    expect_close(tuple(got[:4]), want, "(x1, x2, dx1, dx2) in float64", atol=1e-10, rtol=1e-9)


# ---------------------------------------------------------------- ReversibleStack
def stack_case(ref, n, d, seed):
    torch.manual_seed(seed)
    stack = ref.ToyReversibleStack(n, d)
    g = seeded(seed + 1)
    x1, x2 = torch.randn(2, 3, d, generator=g), torch.randn(2, 3, d, generator=g)
    return stack, x1, x2


def check_param_grads(got: dict, stack) -> None:
    """The student's parameter gradients against the reference's (None read as zeros: the last
    block's g does not reach y1, the output the gradient flows back from)."""
    for name, p in stack.named_parameters():
        want = p.grad if p.grad is not None else torch.zeros_like(p)
        have = got.get(name)
        if have is None and not bool(want.any()):
            continue
        expect(have is not None, f"no gradient reached {name}")
        expect_close(have, want, f"the gradient of {name}", atol=1e-4)


@graded("ReversibleStack", points=2, hint="Run the blocks in order; in the Function's backward walk them in "
        "reverse with reversible_block_backward.")
def test_stack_matches_autograd(student, ref):
    """ReversibleStack: same outputs and parameter gradients as the blocks run by autograd?"""
    stack, x1, x2 = stack_case(ref, 3, 6, 33)
    ct = torch.randn(2, 3, 6, generator=seeded(35))
    res = student.module("ToyReversibleStack", init_args=(3, 6), state_dict=stack.state_dict(),
                         args=(x1, x2), grad=True, cotangent=ct)
    y1, y2 = x1, x2
    for block in stack.blocks:
        y1, y2 = block_forward(block, y1, y2)
    (y1 * ct).sum().backward()
    expect_close(res.value, (y1.detach(), y2.detach()), "(y1, y2)", atol=1e-5)
    check_param_grads(res.param_grads, stack)


@graded("ReversibleStack", points=3, hint="Use a torch.autograd.Function: run the blocks under torch.no_grad() "
        "and save only the final outputs.")
def test_stack_memory_flat(student, ref):
    """ReversibleStack: does autograd save as much for 8 blocks as for 1 (no stored activations)?"""
    g = seeded(36)
    x1, x2 = torch.randn(4, 16, 8, generator=g), torch.randn(4, 16, 8, generator=g)
    one = student.stack_saved_bytes(1, x1, x2)
    eight = student.stack_saved_bytes(8, x1, x2)
    expect(isinstance(one, int) and isinstance(eight, int), "stack_saved_bytes should return an int")
    one_layer = x1.numel() * 4 * 2
    expect(eight <= one + one_layer // 2,
           f"autograd saves {eight} bytes for 8 blocks against {one} for 1: the activations of "
           f"every block are stored (run the blocks under no_grad inside an autograd.Function)")


@needs_cuda
@graded("ReversibleStack", points=1, hint="Keep everything on the inputs' device.")
def test_stack_cuda(student, ref):
    """ReversibleStack: forward and backward on a GPU?"""
    stack, x1, x2 = stack_case(ref, 2, 6, 37)
    res = student.module("ToyReversibleStack", init_args=(2, 6), state_dict=stack.state_dict(),
                         args=(x1, x2), grad=True, device="cuda")
    expect(all(d.startswith("cuda") for d in res.devices), "the outputs should stay on cuda")
    y1, y2 = x1, x2
    for block in stack.blocks:
        y1, y2 = block_forward(block, y1, y2)
    y1.sum().backward()
    check_param_grads(res.param_grads, stack)


# ---------------------------------------------------------------- chunked_feed_forward
def recorder_ff(weight, x):
    return torch.tanh(x @ weight.T) + x.mean(dim=0, keepdim=True)


@graded("chunked_feed_forward", points=2, hint="x.chunk(n_chunks, dim=1): cut along T (axis 1), never along "
        "the batch or the features; concatenate along T.")
def test_chunked_ff(student, ref):
    """chunked_feed_forward: the pieces cut along T, and the output equal to ff(x)?"""
    g = seeded(38)
    w = torch.randn(6, 6, generator=g)
    x = torch.randn(4, 10, 6, generator=g)
    got = student.probe_chunked_feed_forward(w, x, 4)
    expect(isinstance(got, (tuple, list)) and len(got) == 2, "chunked_feed_forward failed")
    out, lengths = got
    expect_close(out, recorder_ff(w, x), "the output", mistakes={
        "chunks split along the wrong axis (batch)":
            torch.cat([recorder_ff(w, p) for p in x.chunk(4, dim=0)], dim=0),
    })
    expect(len(lengths) > 1, "ff was called once on the whole sequence: nothing was chunked")
    expect(len(lengths) <= 4 and int(lengths.sum()) == 10,
           f"ff was called on pieces of lengths {lengths.tolist()}: expected at most 4 pieces "
           "covering the 10 positions")


@graded("chunked_feed_forward", points=1, hint="n_chunks = 1 is ff(x); n_chunks larger than T gives one "
        "position per piece (torch.chunk handles both).")
def test_chunked_ff_edges(student, ref):
    """chunked_feed_forward: one chunk, and more chunks than positions?"""
    g = seeded(39)
    w = torch.randn(3, 3, generator=g, dtype=torch.float64)
    x = torch.randn(2, 5, 3, generator=g, dtype=torch.float64)
    expect_close(student.probe_chunked_feed_forward(w, x, 1)[0], recorder_ff(w, x), "one chunk")
    expect_close(student.probe_chunked_feed_forward(w, x, 8)[0], recorder_ff(w, x), "8 chunks of T=5")
    call = student.call("probe_chunked_feed_forward", args=(w, x, 2))
    expect_unmodified((w, x), call.inputs, "chunked_feed_forward")
