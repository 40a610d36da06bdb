"""Hidden graders of chapter 03, the Transformer."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from autograder.harness.check import (expect, expect_close, expect_unmodified, first_seed, graded,
                                      needs_cuda, reference_cache, seeded)


# ---------------------------------------------------------------- helpers (trusted side only)
def qkv(seed: int, lead=(2, 3), T: int = 4, S: int = 6, d_k: int = 8, d_v: int = 5,
        dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = seeded(seed)
    return (torch.randn(*lead, T, d_k, generator=g, dtype=dtype), torch.randn(*lead, S, d_k, generator=g, dtype=dtype),
            torch.randn(*lead, S, d_v, generator=g, dtype=dtype))


def random_mask(seed: int, shape: tuple, p: float = 0.3) -> torch.Tensor:
    """A boolean mask with about `p` False, and at least one True in every row."""
    g = seeded(seed)
    mask = torch.rand(*shape, generator=g) > p
    mask[..., 0] = True
    return mask


def softmax_then_mask(q, k, v, mask):
    """The mistake: softmax over every key, then zero the masked weights (rows no longer sum to 1)."""
    w = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).softmax(-1).masked_fill(~mask, 0.0)
    return w @ v, w


@reference_cache
def ref_module(ref, cls: str, *args, seed: int = 0, **kwargs):
    """A reference module in eval mode with seeded weights (LayerNorm gains and biases perturbed too)."""
    torch.manual_seed(seed)
    m = getattr(ref, cls)(*args, **kwargs)
    g = seeded(seed + 1000)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if "norm" in name:
                p.add_(0.2 * torch.randn(p.shape, generator=g))
    return m.eval()


def mha_manual(m, query, key, value, mask=None, *, split=None, scale=True, use_w_o=True):
    """The reference module's computation, with known mistakes switchable."""
    H = m.n_heads

    def heads(x):
        B, T, D = x.shape
        return split(x, H) if split else x.reshape(B, T, H, D // H).transpose(1, 2)

    q, k, v = heads(m.w_q(query)), heads(m.w_k(key)), heads(m.w_v(value))
    if not scale:
        q = q * math.sqrt(q.shape[-1])
    B, H_, T, d_k = q.shape
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    out = out.transpose(1, 2).reshape(B, T, H_ * d_k)
    return m.w_o(out) if use_w_o else out


def split_no_transpose(x, n_heads):
    B, T, D = x.shape
    return x.reshape(B, n_heads, T, D // n_heads)


def pe_variant(max_len: int, d: int, *, swap: bool = False, exponent: str = "2k") -> torch.Tensor:
    """Sinusoidal encodings built the wrong way: sin/cos swapped or a wrong exponent."""
    t = torch.arange(max_len, dtype=torch.float64)[:, None]
    i = torch.arange(d, dtype=torch.float64)
    k = torch.div(i, 2, rounding_mode="floor")
    power = {"2k": 2 * k / d, "k": k / d, "i": i / d, "2i": 2 * i / d}[exponent]
    angle = t / 10000 ** power
    even = (i % 2 == 0) != swap  # the dims that get a sin
    return torch.where(even, torch.sin(angle), torch.cos(angle)).float()


def rotation_blocks(offset: int, d: int, exponent: str = "2k") -> torch.Tensor:
    """The block-diagonal rotation matrix, possibly with a wrong exponent in the frequencies."""
    blocks = []
    for k in range(d // 2):
        power = {"2k": 2 * k / d, "k": k / d, "2i": 4 * k / d}[exponent]
        b = offset / 10000 ** power
        blocks.append(torch.tensor([[math.cos(b), math.sin(b)], [-math.sin(b), math.cos(b)]], dtype=torch.float64))
    return torch.block_diag(*blocks).float()


def pre_norm_encoder(layer, x, mask):
    h = layer.norm1(x)
    x = x + layer.self_attn(h, h, h, mask)
    return x + layer.ff(layer.norm2(x))


def pre_norm_decoder(layer, x, memory, tgt_mask, memory_mask):
    h = layer.norm1(x)
    x = x + layer.self_attn(h, h, h, tgt_mask)
    x = x + layer.cross_attn(layer.norm2(x), memory, memory, memory_mask)
    return x + layer.ff(layer.norm3(x))


def decoder_variant(layer, x, memory, tgt_mask, memory_mask, cross=("x", "memory", "memory"), cross_mask="auto"):
    """The reference decoder layer with cross-attention fed (query, key, value) from the named inputs."""
    x = layer.norm1(x + layer.self_attn(x, x, x, tgt_mask))
    q, k, v = (x if c == "x" else memory for c in cross)
    if cross_mask == "auto":
        cross_mask = memory_mask if cross[1] == "memory" else None
    x = layer.norm2(x + layer.cross_attn(q, k, v, cross_mask))
    return layer.norm3(x + layer.ff(x))


# ================================================================ scaled_dot_product_attention
@graded("scaled_dot_product_attention", points=2,
        hint="scores = q @ k.transpose(-2, -1) / sqrt(d_k); softmax over the last dim (the keys); weights @ v.")
def test_sdpa_no_mask(student, ref):
    """scaled_dot_product_attention: does it match the reference without a mask (T != S, d_v != d_k)?"""
    q, k, v = qkv(0)
    got = student.scaled_dot_product_attention(q, k, v)
    expect(isinstance(got, (tuple, list)) and len(got) == 2, "return a tuple (out, weights)")
    want = ref.scaled_dot_product_attention(q, k, v)
    d_k = q.shape[-1]
    expect_close(got[1], want[1], "the weights", mistakes=lambda: {
        "no scaling by 1/sqrt(d_k)": ref.scaled_dot_product_attention(q * math.sqrt(d_k), k, v)[1],
        "scaling by 1/d_k instead of 1/sqrt(d_k)": ref.scaled_dot_product_attention(q / math.sqrt(d_k), k, v)[1],
        "softmax over the queries (dim -2) instead of the keys": (q @ k.transpose(-2, -1) / math.sqrt(d_k)).softmax(-2),
    })
    expect_close(got[0], want[0], "the output", mistakes=lambda: {
        "no scaling by 1/sqrt(d_k)": ref.scaled_dot_product_attention(q * math.sqrt(d_k), k, v)[0],
    })


@graded("scaled_dot_product_attention", points=2,
        hint="Fill the scores where mask is False with -inf BEFORE the softmax (True = may attend).")
def test_sdpa_mask(student, ref):
    """scaled_dot_product_attention: does it apply a boolean mask (True = may attend) broadcast over heads?"""
    q, k, v = qkv(1)
    mask = random_mask(2, (2, 1, 4, 6))
    got = student.scaled_dot_product_attention(q, k, v, mask)
    want = ref.scaled_dot_product_attention(q, k, v, mask)
    mistakes = lambda: {  # noqa: E731 - built only if the answer is wrong
        "mask inverted (True should mean: may attend)": ref.scaled_dot_product_attention(q, k, v, ~mask)[1],
        "masking after softmax (mask the scores, not the weights)": softmax_then_mask(q, k, v, mask)[1],
        "no scaling by 1/sqrt(d_k)": ref.scaled_dot_product_attention(q * math.sqrt(8), k, v, mask)[1],
        "mask ignored": ref.scaled_dot_product_attention(q, k, v)[1],
    }
    expect_close(got[1], want[1], "the weights", mistakes=mistakes)
    expect_close(got[0], want[0], "the output")


@graded("scaled_dot_product_attention", points=1,
        hint="Also a padding mask of shape (B, 1, 1, S) and a causal mask of shape (T, T) must broadcast to (..., T, S).")
def test_sdpa_broadcast_masks(student, ref):
    """scaled_dot_product_attention: does it accept a (T, T) causal mask and a (B, 1, 1, S) padding mask?"""
    q, k, v = qkv(3, T=5, S=5)
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    expect_close(student.scaled_dot_product_attention(q, k, v, causal)[0],
                 ref.scaled_dot_product_attention(q, k, v, causal)[0], "the output with a (T, T) causal mask",
                 mistakes=lambda: {"mask inverted (True should mean: may attend)":
                           ref.scaled_dot_product_attention(q, k, v, ~causal)[0]})
    q, k, v = qkv(4, lead=(2, 3))
    pad = torch.tensor([[True] * 6, [True] * 3 + [False] * 3])[:, None, None, :]
    expect_close(student.scaled_dot_product_attention(q, k, v, pad)[0],
                 ref.scaled_dot_product_attention(q, k, v, pad)[0], "the output with a (B, 1, 1, S) padding mask")


@graded("scaled_dot_product_attention", points=2,
        hint="A query whose keys are all masked must get zero weights and a zero output, not NaN: "
             "softmax of a row of -inf is NaN, so handle such rows (e.g. zero them after the softmax).")
def test_sdpa_fully_masked(student, ref):
    """scaled_dot_product_attention: does a fully masked query get all-zero weights and output, with finite gradients?"""
    q, k, v = qkv(5, lead=(2,))
    mask = random_mask(6, (2, 4, 6))
    mask[0, 1] = False
    mask[1, 3] = False
    call = student.call("scaled_dot_product_attention", args=(q, k, v, mask), grad_wrt=(0, 1, 2))
    out, w = call.value
    expect(not bool(torch.isnan(w).any()) and not bool(torch.isnan(out).any()),
           "a fully masked query gave NaN; it should get all-zero weights and output")
    want = ref.scaled_dot_product_attention(q, k, v, mask)
    expect_close(w, want[1], "the weights")
    expect_close(out, want[0], "the output")
    qr, kr, vr = (t.clone().requires_grad_(True) for t in (q, k, v))
    ref.scaled_dot_product_attention(qr, kr, vr, mask)[0].sum().backward()
    for name, got_g, want_g in zip("qkv", call.grads, (qr.grad, kr.grad, vr.grad)):
        expect(got_g is not None and not bool(torch.isnan(got_g).any()),
               f"the gradient with respect to {name} contains NaN (from the fully masked query)")
        expect_close(got_g, want_g, f"the gradient with respect to {name}")


@graded("scaled_dot_product_attention", points=1,
        hint="Use only torch operations that keep the dtype; never write into q, k, v or mask (no in-place ops on them).")
def test_sdpa_dtype_inplace_noncontiguous(student, ref):
    """scaled_dot_product_attention: does it keep float64, work on non-contiguous inputs and a batch of one, and leave its inputs unchanged?"""
    q, k, v = qkv(7, lead=(1,), dtype=torch.float64)
    k_nc = k.transpose(-2, -1).contiguous().transpose(-2, -1)  # same values, non-contiguous
    mask = random_mask(8, (1, 4, 6))
    before = (q.clone(), k_nc.clone(), v.clone(), mask.clone())
    call = student.call("scaled_dot_product_attention", args=(q, k_nc, v, mask))
    want = ref.scaled_dot_product_attention(q, k, v, mask)
    expect_close(call.value[0], want[0], "the float64 output")
    expect_close(call.value[1], want[1], "the float64 weights")
    expect_unmodified(before, call.inputs, "scaled_dot_product_attention")


@needs_cuda
@graded("scaled_dot_product_attention", points=1, hint="Create every tensor on the inputs' device (e.g. device=q.device).")
def test_sdpa_cuda(student, ref):
    """scaled_dot_product_attention: does it run on a GPU and return tensors on the GPU?"""
    q, k, v = qkv(9)
    mask = random_mask(10, (4, 6))
    call = student.call("scaled_dot_product_attention", args=(q, k, v, mask), device="cuda")
    expect(all(d.startswith("cuda") for d in call.devices), "the outputs should stay on the inputs' device (cuda)")
    expect_close(call.value[0], ref.scaled_dot_product_attention(q, k, v, mask)[0], "the output", atol=1e-4)


# ================================================================ masks
@graded("causal_mask", points=2, hint="torch.ones(T, T, dtype=torch.bool).tril(): query t sees keys 0..t, itself included.")
def test_causal_mask(student, ref):
    """causal_mask: is it a (T, T) bool mask, True on and below the diagonal?"""
    for T in (1, 2, 6):
        got, want = student.causal_mask(T), ref.causal_mask(T)
        ones = torch.ones(T, T, dtype=torch.bool)
        expect_close(got, want, f"causal_mask({T})", mistakes=lambda: {
            "causal mask off by one (a position must see itself, but nothing after it)": ones.tril(-1),
            "causal mask off by one (position t must not see t+1)": ones.tril(1),
            "mask inverted (True should mean: may attend)": ~want,
            "the upper triangle instead of the lower one": ones.triu(),
        })


@needs_cuda
@graded("causal_mask", points=1, hint="Pass device=device when you create the tensor.")
def test_causal_mask_cuda(student, ref):
    """causal_mask: does it create the mask on the requested device?"""
    call = student.call("causal_mask", args=(4,), kwargs={"device": "cuda"})
    expect(all(d.startswith("cuda") for d in call.devices), "causal_mask(T, device='cuda') should be on cuda")


@graded("padding_mask", points=1, hint="(tokens != pad_id)[:, None, None, :]: shape (B, 1, 1, S), True at real tokens.")
def test_padding_mask(student, ref):
    """padding_mask: is it (B, 1, 1, S) bool, True at real tokens?"""
    tokens = torch.tensor([[5, 6, 7, 3], [5, 3, 3, 3], [3, 4, 3, 9]])
    got, want = student.padding_mask(tokens, 3), ref.padding_mask(tokens, 3)
    expect_close(got, want, "padding_mask", mistakes=lambda: {
        "mask inverted (True should mean: a real token)": ~want,
    })


# ================================================================ heads
@graded("split_heads", points=2,
        hint="view as (B, T, H, d_k), then transpose(1, 2): head h takes features [h*d_k, (h+1)*d_k).")
def test_split_heads(student, ref):
    """split_heads: does head h get features [h*d_k, (h+1)*d_k) of every position, as (B, H, T, d_k)?"""
    x = torch.randn(2, 5, 12, generator=seeded(11))
    got, want = student.split_heads(x, 3), ref.split_heads(x, 3)
    expect_close(got, want, "split_heads(x, 3)", mistakes=lambda: {
        "heads split without a transpose (a view straight to (B, H, T, d_k) mixes positions into heads)":
            split_no_transpose(x, 3),
        "heads take interleaved features (view as (B, T, d_k, H))": x.reshape(2, 5, 4, 3).permute(0, 3, 1, 2),
    })


@graded("split_heads", points=1, hint="x may be non-contiguous (the docstring says so; here a permuted tensor): "
                                      "go through its shape (reshape or view, transpose), never its memory layout "
                                      "(as_strided, storage), and do not write into x.")
def test_split_heads_non_contiguous(student, ref):
    """split_heads: does it work on a non-contiguous x, leaving x unchanged?"""
    x_nc = torch.randn(12, 5, 2, generator=seeded(12)).permute(2, 1, 0)  # (2, 5, 12), non-contiguous
    call = student.call("split_heads", args=(x_nc, 3))
    expect_close(call.value, ref.split_heads(x_nc, 3), "split_heads of a non-contiguous x")
    expect_unmodified((x_nc,), call.inputs[:1], "split_heads")


@graded("merge_heads", points=2, hint="transpose(1, 2) back to (B, T, H, d_k), then reshape to (B, T, H*d_k) "
        "(`view` fails after a transpose: use reshape, or .contiguous() first).")
def test_merge_heads(student, ref):
    """merge_heads: does it concatenate the heads of every position, inverting split_heads?"""
    x = torch.randn(2, 3, 5, 4, generator=seeded(13))
    got, want = student.merge_heads(x), ref.merge_heads(x)
    expect_close(got, want, "merge_heads(x)", mistakes=lambda: {
        "heads merged without a transpose": x.reshape(2, 5, 12),
    })
    y = torch.randn(2, 5, 12, generator=seeded(14))
    expect_close(student.merge_heads(ref.split_heads(y, 3)), y, "merge_heads(split_heads(x, 3))")


# ================================================================ MultiHeadAttention
@graded("MultiHeadAttention", points=3,
        hint="Project with w_q, w_k, w_v; split_heads; scaled_dot_product_attention with the mask; merge_heads; w_o.")
def test_mha_self_attention(student, ref):
    """MultiHeadAttention: with the reference weights, does self-attention with a padding mask match?"""
    m = ref_module(ref, "MultiHeadAttention", 16, 4, seed=15)
    x = torch.randn(2, 5, 16, generator=seeded(16))
    mask = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])[:, None, None, :]
    res = student.module("MultiHeadAttention", init_args=(16, 4), state_dict=m.state_dict(),
                         args=(x, x, x, mask), attrs=("attn",), grad=False)
    with torch.no_grad():
        want = m(x, x, x, mask)
        mistakes = lambda: {  # noqa: E731 - built only if the output is wrong
            "heads split without a transpose": mha_manual(m, x, x, x, mask, split=split_no_transpose),
            "no scaling by 1/sqrt(d_k)": mha_manual(m, x, x, x, mask, scale=False),
            "the output projection w_o is not applied": mha_manual(m, x, x, x, mask, use_w_o=False),
            "mask ignored": m(x, x, x),
        }
    expect_close(res.value, want, "the output", mistakes=mistakes)


@graded("MultiHeadAttention", points=2,
        hint="Queries come from `query` (length T), keys and values from `key`/`value` (length S); "
             "store the weights (B, H, T, S) in self.attn.")
def test_mha_cross_attention_and_attn(student, ref):
    """MultiHeadAttention: with T != S (cross-attention), do the output and self.attn (B, H, T, S) match?"""
    m = ref_module(ref, "MultiHeadAttention", 12, 3, seed=17)
    g = seeded(18)
    query, memory = torch.randn(3, 4, 12, generator=g), torch.randn(3, 7, 12, generator=g)
    value = torch.randn(3, 7, 12, generator=g)
    mask = random_mask(19, (3, 1, 1, 7))
    res = student.module("MultiHeadAttention", init_args=(12, 3), state_dict=m.state_dict(),
                         args=(query, memory, value, mask), attrs=("attn",), grad=False)
    with torch.no_grad():
        want = m(query, memory, value, mask)
    expect_close(res.value, want, "the output")
    expect_close(res.attrs["attn"], m.attn, "self.attn (the weights of the last call)")


@graded("MultiHeadAttention", points=1, hint="Do not detach the output or use .data; gradients must reach every projection.")
def test_mha_gradients(student, ref):
    """MultiHeadAttention: do the gradients of all four projections match the reference?"""
    m = ref_module(ref, "MultiHeadAttention", 8, 2, seed=20)
    g = seeded(21)
    x, ct = torch.randn(2, 3, 8, generator=g), torch.randn(2, 3, 8, generator=g)
    causal = torch.ones(3, 3, dtype=torch.bool).tril()
    res = student.module("MultiHeadAttention", init_args=(8, 2), state_dict=m.state_dict(),
                         args=(x, x, x, causal), grad=True, cotangent=ct)
    m.zero_grad()
    (m(x, x, x, causal) * ct).sum().backward()
    for name, p in m.named_parameters():
        expect(name in res.param_grads, f"no gradient reached {name}")
        expect_close(res.param_grads[name], p.grad, f"the gradient of {name}")


@needs_cuda
@graded("MultiHeadAttention", points=1, hint="Create every tensor on the inputs' device.")
def test_mha_cuda(student, ref):
    """MultiHeadAttention: does it run on a GPU with a mask created on the GPU side?"""
    m = ref_module(ref, "MultiHeadAttention", 16, 4, seed=22)
    x = torch.randn(2, 5, 16, generator=seeded(23))
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    res = student.module("MultiHeadAttention", init_args=(16, 4), state_dict=m.state_dict(),
                         args=(x, x, x, causal), grad=False, device="cuda")
    with torch.no_grad():
        expect_close(res.value, m(x, x, x, causal), "the output on cuda", atol=1e-4)


# ================================================================ positional encodings
@graded("sinusoidal_positional_encoding", points=3,
        hint="PE[t, 2k] = sin(t / 10000^(2k/d)), PE[t, 2k+1] = cos(t / 10000^(2k/d)): "
             "the sin and the cos of a pair share the same frequency.")
def test_pe_values(student, ref):
    """sinusoidal_positional_encoding: do sin (even dims) and cos (odd dims) use the frequencies 1/10000^(2k/d)?"""
    got, want = student.sinusoidal_positional_encoding(40, 16), ref.sinusoidal_positional_encoding(40, 16)
    expect_close(got, want, "sinusoidal_positional_encoding(40, 16)", atol=1e-4, mistakes=lambda: {
        "sin and cos swapped (sin on even dims 2k, cos on odd dims 2k+1)": pe_variant(40, 16, swap=True),
        "a wrong exponent in the frequencies (10000^(k/d) instead of 10000^(2k/d))": pe_variant(40, 16, exponent="k"),
        "a wrong exponent in the frequencies (using the dimension index i, 10000^(i/d), "
        "so cos gets another frequency than its sin)": pe_variant(40, 16, exponent="i"),
        "a wrong exponent in the frequencies (10000^(2i/d) with the dimension index i)": pe_variant(40, 16, exponent="2i"),
        "the sin half and the cos half concatenated instead of interleaved":
            torch.cat([want[:, 0::2], want[:, 1::2]], dim=1),
    })


@graded("sinusoidal_positional_encoding", points=1, hint="Return float32, shape (max_len, d_model); position 0 is sin 0 = 0, cos 0 = 1; "
             "max_len = 1 and d_model = 2 work too.")
def test_pe_small(student, ref):
    """sinusoidal_positional_encoding: is it right for max_len 1 and a small d_model?"""
    expect_close(student.sinusoidal_positional_encoding(1, 6), ref.sinusoidal_positional_encoding(1, 6),
                 "sinusoidal_positional_encoding(1, 6)")
    expect_close(student.sinusoidal_positional_encoding(7, 2), ref.sinusoidal_positional_encoding(7, 2),
                 "sinusoidal_positional_encoding(7, 2)", atol=1e-4)


@graded("pe_offset_matrix", points=2,
        hint="Block k (rows and columns 2k, 2k+1) is [[cos b, sin b], [-sin b, cos b]] with b = offset / 10000^(2k/d): "
             "expand sin(a+b) and cos(a+b).")
def test_pe_offset_matrix_values(student, ref):
    """pe_offset_matrix: is it the block-diagonal matrix of 2x2 rotations by offset * omega_k?"""
    got, want = student.pe_offset_matrix(3, 12), ref.pe_offset_matrix(3, 12)
    expect_close(got, want, "pe_offset_matrix(3, 12)", atol=1e-5, mistakes=lambda: {
        "the rotation goes the wrong way (the transpose: it maps PE[t] to PE[t - offset])": want.T.contiguous(),
        "a wrong exponent in the frequencies (10000^(k/d) instead of 10000^(2k/d))": rotation_blocks(3, 12, "k"),
        "a wrong exponent in the frequencies (using the dimension index: 10000^(2i/d) with i = 2k)":
            rotation_blocks(3, 12, "2i"),
    })


@graded("pe_offset_matrix", points=1, hint="Check your matrix: M @ PE[t] must equal PE[t + offset] for every t.")
def test_pe_offset_matrix_shifts(student, ref):
    """pe_offset_matrix: does M @ PE[t] equal PE[t + offset] for every t (offsets 0, 1 and 10)?"""
    pe = ref.sinusoidal_positional_encoding(60, 20).double()
    for offset in (0, 1, 10):
        M = student.pe_offset_matrix(offset, 20)
        expect(isinstance(M, torch.Tensor) and M.shape == (20, 20), "pe_offset_matrix should return a (d, d) tensor")
        wrong_way = rotation_blocks(offset, 20).double().T
        expect_close((M.double() @ pe[: 60 - offset].T).T, pe[offset:], f"M @ PE[t] for offset {offset}",
                     atol=1e-4, dtype=False, mistakes=lambda: {
                         "the rotation goes the wrong way (M maps PE[t] to PE[t - offset])":
                             (wrong_way @ pe[: 60 - offset].T).T})


# ================================================================ layer norm
@graded("layer_norm", points=2,
        hint="mean and BIASED variance over the last dim; (x - mean) / sqrt(var + eps) * gamma + beta.")
def test_layer_norm(student, ref):
    """layer_norm: does it normalise over the last dim with the biased variance and eps inside the sqrt?"""
    g = seeded(30)
    x = torch.randn(3, 4, 6, generator=g) * 3 + 1
    gamma, beta = torch.rand(6, generator=g) + 0.5, torch.randn(6, generator=g)
    eps = 0.1  # large, so that eps outside the sqrt shows
    got, want = student.layer_norm(x, gamma, beta, eps), ref.layer_norm(x, gamma, beta, eps)
    mu = x.mean(-1, keepdim=True)
    expect_close(got, want, "layer_norm", mistakes=lambda: {
        "the unbiased variance (divide by D, not D - 1: use unbiased=False)":
            (x - mu) / torch.sqrt(x.var(-1, keepdim=True) + eps) * gamma + beta,
        "eps outside the square root": (x - mu) / (x.var(-1, unbiased=False, keepdim=True).sqrt() + eps) * gamma + beta,
        "normalising with the standard deviation but no eps": (x - mu) / x.std(-1, unbiased=False, keepdim=True) * gamma + beta,
        "gamma and beta swapped": ref.layer_norm(x, beta, gamma, eps),
    })


@graded("layer_norm", points=1, hint="Keep the input dtype, do not modify x in place, and let gradients flow to x, gamma and beta.")
def test_layer_norm_float64_grads(student, ref):
    """layer_norm: does it keep float64, leave x unchanged and give the reference gradients?"""
    g = seeded(31)
    x = torch.randn(2, 5, dtype=torch.float64, generator=g)
    gamma, beta = torch.rand(5, dtype=torch.float64, generator=g), torch.randn(5, dtype=torch.float64, generator=g)
    ct = torch.randn(2, 5, dtype=torch.float64, generator=g)
    before = (x.clone(), gamma.clone(), beta.clone())
    call = student.call("layer_norm", args=(x, gamma, beta), grad_wrt=(0, 1, 2), cotangent=ct)
    xr, gr, br = (t.clone().requires_grad_(True) for t in (x, gamma, beta))
    want = ref.layer_norm(xr, gr, br)
    (want * ct).sum().backward()
    expect_close(call.value, want.detach(), "layer_norm in float64")
    expect_unmodified(before, call.inputs, "layer_norm")
    for name, got_g, want_g in zip(("x", "gamma", "beta"), call.grads, (xr.grad, gr.grad, br.grad)):
        expect_close(got_g, want_g, f"the gradient with respect to {name}")


# ================================================================ loss and schedule
@graded("label_smoothed_nll", points=2,
        hint="Per position: (1-eps) * (-log p_target) + eps * mean over the whole vocabulary of (-log p_v); "
             "average over positions whose target is not pad_id.")
def test_label_smoothed_nll(student, ref):
    """label_smoothed_nll: does it match F.cross_entropy(label_smoothing=eps, ignore_index=pad_id)?"""
    g = seeded(32)
    logits = torch.randn(3, 5, 7, generator=g) * 2
    target = torch.randint(1, 7, (3, 5), generator=g)
    target[0, 3:] = 0
    target[2, 1:] = 0
    got, want = student.label_smoothed_nll(logits, target, 0.2, 0), ref.label_smoothed_nll(logits, target, 0.2, 0)
    flat, tflat = logits.reshape(-1, 7), target.reshape(-1)
    logp = flat.log_softmax(-1)
    nll = -logp.gather(1, tflat[:, None]).squeeze(1)
    keep = tflat != 0
    V = 7
    others = (-logp.sum(-1) - nll) / (V - 1)  # mean of -log p_v over the V-1 wrong tokens
    expect_close(got, want, "the loss", mistakes=lambda: {
        "pad positions not excluded": F.cross_entropy(flat, tflat, label_smoothing=0.2),
        "no label smoothing (eps ignored)": F.cross_entropy(flat, tflat, ignore_index=0),
        "eps spread over the V-1 wrong tokens only": ((0.8 * nll + 0.2 * others)[keep]).mean(),
        "a sum over positions instead of a mean": ((0.8 * nll - 0.2 * logp.mean(-1))[keep]).sum(),
        "eps*sum_v instead of eps*mean_v": ((0.8 * nll - 0.2 * logp.sum(-1))[keep]).mean(),
    })


@graded("label_smoothed_nll", points=1,
        hint="Work on logits of any leading shape; keep float64; a pad_id that is not 0 must work too.")
def test_label_smoothed_nll_float64_grads(student, ref):
    """label_smoothed_nll: with float64 logits of shape (T, V), pad_id 2 and eps 0, does it match, with gradients?"""
    g = seeded(33)
    logits = torch.randn(6, 5, dtype=torch.float64, generator=g)
    target = torch.tensor([0, 1, 2, 3, 2, 4])
    call = student.call("label_smoothed_nll", args=(logits, target, 0.0, 2), grad_wrt=(0,))
    lr = logits.clone().requires_grad_(True)
    want = ref.label_smoothed_nll(lr, target, 0.0, 2)
    want.backward()
    expect_close(call.value, want.detach(), "the loss")
    expect_close(call.grads[0], lr.grad, "the gradient with respect to the logits")
    expect_unmodified((logits,), call.inputs[:1], "label_smoothed_nll")


@graded("noam_lr", points=1, hint="d_model**-0.5 * min(step**-0.5, step * warmup**-1.5), with step = max(step, 1).")
def test_noam_lr(student, ref):
    """noam_lr: does it warm up linearly, peak at `warmup` and decay as step^-0.5 (step 0 treated as 1)?"""
    for step, d, w in [(0, 512, 4000), (1, 512, 4000), (100, 512, 4000), (4000, 512, 4000), (10000, 256, 1000)]:
        got, want = student.noam_lr(step, d, w), ref.noam_lr(step, d, w)
        expect(isinstance(got, (int, float)) or (isinstance(got, torch.Tensor) and got.numel() == 1),
               "noam_lr should return a number")
        got = float(got)
        s = max(step, 1)
        expect_close(got, want, f"noam_lr({step}, {d}, {w})", rtol=1e-6, atol=0, mistakes=lambda: {
            "warmup^-0.5 instead of warmup^-1.5": d ** -0.5 * min(s ** -0.5, s * w ** -0.5),
            "the d_model^-0.5 factor is missing": min(s ** -0.5, s * w ** -1.5),
            "max instead of min": d ** -0.5 * max(s ** -0.5, s * w ** -1.5),
        })


# ================================================================ feed-forward and layers
@graded("FeedForward", points=1, hint="linear2(relu(linear1(x))) with attributes linear1 (d_model -> d_ff) and linear2.")
def test_feed_forward(student, ref):
    """FeedForward: with the reference weights, does linear2(relu(linear1(x))) match?"""
    m = ref_module(ref, "FeedForward", 8, 20, seed=40)
    x = torch.randn(2, 3, 8, generator=seeded(41))
    res = student.module("FeedForward", init_args=(8, 20), state_dict=m.state_dict(), args=(x,), grad=False)
    with torch.no_grad():
        expect_close(res.value, m(x), "the output", mistakes=lambda: {"no ReLU between the layers": m.linear2(m.linear1(x))})


@graded("EncoderLayer", points=3,
        hint="Post-norm, as in the paper: x = norm1(x + self_attn(x, x, x, mask)); x = norm2(x + ff(x)).")
def test_encoder_layer(student, ref):
    """EncoderLayer: with the reference weights, is it post-norm self-attention + feed-forward with the mask?"""
    m = ref_module(ref, "EncoderLayer", 16, 4, 32, seed=42)
    x = torch.randn(2, 5, 16, generator=seeded(43))
    mask = torch.tensor([[True] * 5, [True] * 2 + [False] * 3])[:, None, None, :]
    res = student.module("EncoderLayer", init_args=(16, 4, 32), state_dict=m.state_dict(), args=(x, mask), grad=False)
    with torch.no_grad():
        h = m.norm1(x + m.self_attn(x, x, x, mask))
        expect_close(res.value, m(x, mask), "the output", mistakes=lambda: {
            "pre-norm instead of post-norm (the paper normalises after the residual addition)": pre_norm_encoder(m, x, mask),
            "no residual connection": m.norm2(m.ff(m.norm1(m.self_attn(x, x, x, mask)))),
            "mask ignored": m(x),
            "norm1 and norm2 swapped": m.norm1(m.norm2(x + m.self_attn(x, x, x, mask))
                                               + m.ff(m.norm2(x + m.self_attn(x, x, x, mask)))),
            "no LayerNorm after the feed-forward": h + m.ff(h),
        })


@graded("EncoderLayer", points=1, hint="Gradients must reach every parameter (attention, feed-forward and both norms).")
def test_encoder_layer_gradients(student, ref):
    """EncoderLayer: do the gradients of every parameter match the reference?"""
    m = ref_module(ref, "EncoderLayer", 8, 2, 16, seed=44)
    g = seeded(45)
    x, ct = torch.randn(1, 4, 8, generator=g), torch.randn(1, 4, 8, generator=g)
    res = student.module("EncoderLayer", init_args=(8, 2, 16), state_dict=m.state_dict(), args=(x,), grad=True, cotangent=ct)
    m.zero_grad()
    (m(x) * ct).sum().backward()
    for name, p in m.named_parameters():
        expect(name in res.param_grads, f"no gradient reached {name}")
        expect_close(res.param_grads[name], p.grad, f"the gradient of {name}", atol=1e-4)


@graded("DecoderLayer", points=3,
        hint="Post-norm: masked self-attention (tgt_mask), then cross-attention with queries from x and "
             "keys/values from memory (memory_mask), then feed-forward, each with residual + its own LayerNorm.")
def test_decoder_layer(student, ref):
    """DecoderLayer: with the reference weights, does it match with T != S, a causal mask and a memory mask?"""
    m = ref_module(ref, "DecoderLayer", 16, 4, 32, seed=46)
    g = seeded(47)
    x, memory = torch.randn(2, 4, 16, generator=g), torch.randn(2, 6, 16, generator=g)
    tgt_mask = torch.ones(4, 4, dtype=torch.bool).tril()
    memory_mask = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])[:, None, None, :]
    res = student.module("DecoderLayer", init_args=(16, 4, 32), state_dict=m.state_dict(),
                         args=(x, memory, tgt_mask, memory_mask), grad=False)
    with torch.no_grad():
        expect_close(res.value, m(x, memory, tgt_mask, memory_mask), "the output", mistakes=lambda: {
            "pre-norm instead of post-norm (the paper normalises after the residual addition)":
                pre_norm_decoder(m, x, memory, tgt_mask, memory_mask),
            "cross-attention on the wrong input (it attends to x, not to the encoder's memory)":
                decoder_variant(m, x, memory, tgt_mask, memory_mask, cross=("x", "x", "x")),
            "cross-attention on the wrong input (it attends to x with tgt_mask, not to the encoder's memory)":
                decoder_variant(m, x, memory, tgt_mask, memory_mask, cross=("x", "x", "x"), cross_mask=tgt_mask),
            "tgt_mask ignored (the decoder sees the future)": m(x, memory, None, memory_mask),
            "memory_mask ignored": m(x, memory, tgt_mask, None),
        })


@graded("DecoderLayer", points=1,
        hint="In cross-attention the QUERIES come from the decoder (x) and the KEYS and VALUES from memory.")
def test_decoder_layer_cross_inputs(student, ref):
    """DecoderLayer: with T == S, does cross-attention take queries from x and keys/values from memory?"""
    m = ref_module(ref, "DecoderLayer", 8, 2, 16, seed=48)
    g = seeded(49)
    x, memory = torch.randn(2, 5, 8, generator=g), torch.randn(2, 5, 8, generator=g)
    tgt_mask = torch.ones(5, 5, dtype=torch.bool).tril()
    res = student.module("DecoderLayer", init_args=(8, 2, 16), state_dict=m.state_dict(),
                         args=(x, memory, tgt_mask, None), grad=False)
    with torch.no_grad():
        expect_close(res.value, m(x, memory, tgt_mask), "the output", mistakes=lambda: {
            "cross-attention on the wrong input (queries from memory, keys/values from x)":
                decoder_variant(m, x, memory, tgt_mask, None, cross=("memory", "x", "x")),
            "cross-attention on the wrong input (it attends to x, not to the encoder's memory)":
                decoder_variant(m, x, memory, tgt_mask, None, cross=("x", "x", "x")),
            "cross-attention on the wrong input (it attends to x with tgt_mask, not to the encoder's memory)":
                decoder_variant(m, x, memory, tgt_mask, None, cross=("x", "x", "x"), cross_mask=tgt_mask),
            "cross-attention on the wrong input (values from x, not from memory)":
                decoder_variant(m, x, memory, tgt_mask, None, cross=("x", "memory", "x")),
            "cross-attention on the wrong input (keys from x, not from memory)":
                decoder_variant(m, x, memory, tgt_mask, None, cross=("x", "x", "memory")),
            "pre-norm instead of post-norm (the paper normalises after the residual addition)":
                pre_norm_decoder(m, x, memory, tgt_mask, None),
        })


@graded("DecoderLayer", points=1, hint="Gradients must reach every parameter, and the memory too.")
def test_decoder_layer_gradients(student, ref):
    """DecoderLayer: do the parameter gradients match the reference?"""
    m = ref_module(ref, "DecoderLayer", 8, 2, 16, seed=50)
    g = seeded(51)
    x, memory, ct = torch.randn(1, 3, 8, generator=g), torch.randn(1, 4, 8, generator=g), torch.randn(1, 3, 8, generator=g)
    tgt_mask = torch.ones(3, 3, dtype=torch.bool).tril()
    res = student.module("DecoderLayer", init_args=(8, 2, 16), state_dict=m.state_dict(),
                         args=(x, memory, tgt_mask), grad=True, cotangent=ct)
    m.zero_grad()
    (m(x, memory, tgt_mask) * ct).sum().backward()
    for name, p in m.named_parameters():
        expect(name in res.param_grads, f"no gradient reached {name}")
        expect_close(res.param_grads[name], p.grad, f"the gradient of {name}", atol=1e-4)


# ================================================================ stacks and the full model
@graded("Encoder", points=1, hint="`layers` is an nn.ModuleList of n_layers EncoderLayer; apply them in order with the same mask.")
def test_encoder(student, ref):
    """Encoder: with the reference weights, does the stack of 3 layers match?"""
    m = ref_module(ref, "Encoder", 3, 8, 2, 16, seed=52)
    x = torch.randn(2, 4, 8, generator=seeded(53))
    mask = torch.tensor([[True] * 4, [True, True, False, False]])[:, None, None, :]
    res = student.module("Encoder", init_args=(3, 8, 2, 16), state_dict=m.state_dict(), args=(x, mask), grad=False)
    with torch.no_grad():
        expect_close(res.value, m(x, mask), "the output", mistakes=lambda: {"only the last layer applied": m.layers[2](x, mask)})


@graded("Decoder", points=1, hint="`layers` is an nn.ModuleList of DecoderLayer; every layer attends to the same memory.")
def test_decoder(student, ref):
    """Decoder: with the reference weights, does the stack of 2 layers match?"""
    m = ref_module(ref, "Decoder", 2, 8, 2, 16, seed=54)
    g = seeded(55)
    x, memory = torch.randn(2, 3, 8, generator=g), torch.randn(2, 5, 8, generator=g)
    tgt_mask = torch.ones(3, 3, dtype=torch.bool).tril()
    mmask = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])[:, None, None, :]
    res = student.module("Decoder", init_args=(2, 8, 2, 16), state_dict=m.state_dict(),
                         args=(x, memory, tgt_mask, mmask), grad=False)
    with torch.no_grad():
        h = m.layers[0](x, memory, tgt_mask, mmask)
        expect_close(res.value, m(x, memory, tgt_mask, mmask), "the output", mistakes=lambda: {
            "layer 2 attends to layer 1's output instead of the encoder's memory": m.layers[1](h, h, tgt_mask, None),
        })


@reference_cache
def tiny_transformer(ref, seed: int, eos_boost: float = 0.0):
    """A small reference Transformer with larger embeddings and output weights (so that outputs depend on the tokens);
    `eos_boost` is added to the EOS logit (id 2) to make hypotheses end sooner or later."""
    m = ref_module(ref, "Transformer", 11, 9, 16, 2, 32, 2, seed=seed)
    g = seeded(seed + 2000)
    with torch.no_grad():
        for w in (m.src_embed.weight, m.tgt_embed.weight, m.out.weight):
            w.copy_(torch.randn(w.shape, generator=g) * 0.5)
        m.out.bias[2] += eos_boost
    return m


T_ARGS = (11, 9, 16, 2, 32, 2)  # src_vocab, tgt_vocab, d_model, n_heads, d_ff, n_layers


@reference_cache
def tiny_weights(ref, seed: int) -> dict:
    """The state_dict of tiny_transformer(ref, seed), for tests that need only the weights."""
    return tiny_transformer(ref, seed).state_dict()


@reference_cache
def decoded(ref, seed: int, eos_boost: float, method: str, src: torch.Tensor, args: tuple, kwargs: dict):
    """(state_dict, the reference's `method` output) of tiny_transformer(ref, seed, eos_boost): what a
    decoding test sends the student and expects back, computed once per grading process."""
    m = tiny_transformer(ref, seed, eos_boost)
    fn = {"greedy_decode": ref.transformer_greedy_decode, "beam_search": ref.transformer_beam_search,
          "beam_search_until_done": ref.beam_search_until_done}[method]
    return m.state_dict(), fn(m, src, *args, **kwargs)


def transformer_variant(m, src, tgt, *, scale=True, pe=True, causal=True):
    """The reference model's logits with a known mistake."""
    ref_pe = m.embed.__globals__["sinusoidal_positional_encoding"]
    src_mask = (src != m.pad_id)[:, None, None, :]

    def embed(tokens, table):
        e = table(tokens) * (math.sqrt(m.d_model) if scale else 1.0)
        return e + ref_pe(tokens.shape[1], m.d_model) if pe else e

    memory = m.encoder(embed(src, m.src_embed), src_mask)
    T = tgt.shape[1]
    tgt_mask = (tgt != m.pad_id)[:, None, None, :]
    if causal:
        tgt_mask = tgt_mask & torch.ones(T, T, dtype=torch.bool).tril()
    return m.out(m.decoder(embed(tgt, m.tgt_embed), memory, tgt_mask, src_mask))


@graded("Transformer", points=3,
        hint="Embed as table(tokens) * sqrt(d_model) + PE[:length] (then dropout); encoder with the source padding mask; "
             "decoder with causal & target padding mask and the source mask for cross-attention; then `out`.")
def test_transformer_logits(student, ref):
    """Transformer: with the reference weights, do the logits of a padded batch match?"""
    m = tiny_transformer(ref, 56)
    src = torch.tensor([[4, 5, 6, 7, 8], [9, 10, 4, 0, 0]])
    tgt = torch.tensor([[1, 3, 4, 5], [1, 6, 0, 0]])
    res = student.module("Transformer", init_args=T_ARGS, state_dict=m.state_dict(), args=(src, tgt), grad=False)
    with torch.no_grad():
        expect_close(res.value, m(src, tgt), "the logits", atol=1e-4, mistakes=lambda: {
            "embeddings not multiplied by sqrt(d_model)": transformer_variant(m, src, tgt, scale=False),
            "no positional encoding": transformer_variant(m, src, tgt, pe=False),
            "no causal mask in the decoder": transformer_variant(m, src, tgt, causal=False),
        })


@graded("Transformer", points=1,
        hint="Draw both embedding tables from N(0, 1/d_model): nn.init.normal_(table.weight, std=d_model ** -0.5), "
             "so that embed * sqrt(d_model) has entries of size ~1 like the positional encoding.")
def test_transformer_embedding_init(student, ref):
    """Transformer: are both embedding tables initialised with std d_model**-0.5, as the docstring says?"""
    for d_model in (16, 64):  # 8,000 and 32,000 draws per table: the std is known to about 1%
        res = student.module("Transformer", init_args=(500, 400, d_model, 4, 2 * d_model, 1), method="state_dict",
                             grad=False)
        expect(isinstance(res.value, dict) and "src_embed.weight" in res.value and "tgt_embed.weight" in res.value,
               "the state_dict should hold src_embed.weight and tgt_embed.weight")
        for name in ("src_embed.weight", "tgt_embed.weight"):
            w = res.value[name].double()
            std, want = float(w.std()), d_model ** -0.5
            expect(abs(float(w.mean())) < 0.2 * want and abs(std / want - 1) < 0.1,
                   f"{name} with d_model={d_model} has mean {float(w.mean()):.3g} and std {std:.3g}; "
                   f"the docstring asks for N(0, 1/d_model), std {want:.3g}"
                   + (" (this is nn.Embedding's default N(0, 1))" if abs(std - 1) < 0.1 else ""))


@graded("Transformer", points=1, hint="The logits at position t must not depend on target tokens after t (causal mask).")
def test_transformer_causal(student, ref):
    """Transformer: are the logits at position t unchanged when later target tokens change?"""
    weights = tiny_weights(ref, 57)
    src = torch.tensor([[4, 5, 6, 7]])
    tgt_a, tgt_b = torch.tensor([[1, 3, 4, 5, 6]]), torch.tensor([[1, 3, 4, 7, 8]])
    a = student.module("Transformer", init_args=T_ARGS, state_dict=weights, args=(src, tgt_a), grad=False).value
    b = student.module("Transformer", init_args=T_ARGS, state_dict=weights, args=(src, tgt_b), grad=False).value
    expect(isinstance(a, torch.Tensor) and a.shape == (1, 5, 9), "the logits should have shape (B, T, tgt_vocab)")
    expect_close(a[:, :3], b[:, :3], "the logits at positions 0..2 when tokens 3, 4 change "
                 "(they changed: causal mask off by one, or missing)")


@graded("Transformer", points=1,
        hint="Build the source padding mask from pad_id: pad tokens must not influence any output.")
def test_transformer_ignores_padding(student, ref):
    """Transformer: are the logits of a sentence unchanged by the padding appended to its source?"""
    weights = tiny_weights(ref, 58)
    tgt = torch.tensor([[1, 3, 4]])
    short = student.module("Transformer", init_args=T_ARGS, state_dict=weights,
                           args=(torch.tensor([[4, 5, 6]]), tgt), grad=False).value
    padded = student.module("Transformer", init_args=T_ARGS, state_dict=weights,
                            args=(torch.tensor([[4, 5, 6, 0, 0, 0]]), tgt), grad=False).value
    expect_close(padded, short, "the logits with three pad tokens appended to the source", atol=1e-5)


# ================================================================ decoding
# The decoding functions run through the given methods Transformer.greedy_decode / .beam_search, on the
# student's own Transformer loaded with reference weights: the hints say that Transformer must work first.
DEPENDS = " (These tests run your function on your own Transformer with reference weights: make Transformer pass first.)"

def repeats_one_token(tokens: torch.Tensor, eos: int = 2) -> bool:
    """Whether every row of a greedy decoding repeats one token until its EOS (or is empty)."""
    for row in tokens[:, 1:].tolist():
        body = row[:row.index(eos)] if eos in row else row
        if len(set(body)) > 1:
            return False
    return True


@graded("transformer_greedy_decode", points=2,
        hint="Encode once; then repeatedly decode the prefix, append the argmax of the LAST position's logits; "
             "rows that emitted EOS keep emitting EOS; stop once every row has." + DEPENDS)
def test_greedy_decode(student, ref):
    """transformer_greedy_decode: does it produce the reference translations (EOS padding, early stop)?"""
    src = torch.tensor([[4, 5, 6, 7, 8], [9, 10, 4, 0, 0], [7, 7, 0, 0, 0], [5, 6, 7, 8, 9]])
    # seed 64: rows end after 3, 3, never, 8. With other seeds (per-student inputs) the first whose
    # translations are not one token repeated, so that the argmax of the first position shows.
    case = lambda seed: decoded(ref, seed, 2.0, "greedy_decode", src, (1, 2, 8), {})  # noqa: E731
    weights, want = case(first_seed(64, lambda seed: not repeats_one_token(case(seed)[1])))
    res = student.module("Transformer", init_args=T_ARGS, state_dict=weights, method="greedy_decode",
                         args=(src, 1, 2, 8), grad=False)
    expect_close(res.value, want, "the decoded tokens")


@graded("transformer_greedy_decode", points=1, hint="Stop as soon as every row has emitted EOS, and never go beyond max_len new tokens." + DEPENDS)
def test_greedy_decode_limits(student, ref):
    """transformer_greedy_decode: does it stop early when all rows end, and after max_len tokens otherwise?"""
    for boost, max_len in ((8.0, 6), (-8.0, 3)):
        src = torch.tensor([[4, 5, 6], [9, 10, 0]])
        weights, want = decoded(ref, 60, boost, "greedy_decode", src, (1, 2, max_len), {})
        res = student.module("Transformer", init_args=T_ARGS, state_dict=weights, method="greedy_decode",
                             args=(src, 1, 2, max_len), grad=False)
        expect_close(res.value, want, f"the decoded tokens (max_len={max_len})")


@graded("transformer_beam_search", points=2,
        hint="Keep the best beam_size one-token extensions by cumulative log-prob; those ending in EOS are finished; "
             "stop once n_best are finished; return tokens without BOS and score / len(tokens) when length_norm." + DEPENDS)
def test_beam_search(student, ref):
    """transformer_beam_search: do the n_best hypotheses and scores match the reference?"""
    src = torch.tensor([[4, 5, 6, 7]])
    for beam, n_best, norm in ((3, 2, True), (4, 1, False), (1, 1, True)):
        options = {"n_best": n_best, "length_norm": norm}
        # eos_boost 2.5: length normalisation changes the order of the 2 best
        weights, want = decoded(ref, 65, 2.5, "beam_search", src, (1, 2, beam, 6), options)
        res = student.module("Transformer", init_args=T_ARGS, state_dict=weights, method="beam_search",
                             args=(src, 1, 2, beam, 6), kwargs=options, grad=False)
        expect_close(res.value, want, f"the result with beam_size={beam}, n_best={n_best}, length_norm={norm}",
                     rtol=1e-4, atol=1e-4)


@graded("transformer_beam_search", points=1,
        hint="After max_len steps the live hypotheses count as finished." + DEPENDS)
def test_beam_search_max_len(student, ref):
    """transformer_beam_search: when nothing emits EOS, are the live hypotheses returned after max_len steps?"""
    src = torch.tensor([[4, 5, 6, 7]])
    options = {"n_best": 3, "length_norm": True}
    weights, want = decoded(ref, 62, -10.0, "beam_search", src, (1, 2, 3, 4), options)
    res = student.module("Transformer", init_args=T_ARGS, state_dict=weights, method="beam_search",
                         args=(src, 1, 2, 3, 4), kwargs=options, grad=False)
    expect_close(res.value, want, "the result", rtol=1e-4, atol=1e-4)


@torch.no_grad()
def until_done_mistake(ref, m, src, beam_size, max_len, alpha, *, eos_any_rank=False, stop_at_first=False,
                       raw_bound=False):
    """beam_search_until_done with a known mistake: an EOS below the first beam_size finishes too, the
    search stops at the first finished hypothesis (chapter 1's rule), or the bound leaves out
    length_penalty(max_len)."""
    src_mask = ref.padding_mask(src, m.pad_id)                                  # (1, 1, 1, S)
    memory = m.encode(src, src_mask)                                            # (1, S, D)
    live, logp, finished = [[1]], [0.0], []
    for step in range(1, max_len + 1):
        N = len(live)
        logits = m.decode(torch.tensor(live), memory.expand(N, -1, -1), src_mask.expand(N, -1, -1, -1))
        cand = torch.tensor(logp, dtype=torch.float64)[:, None] + logits[:, -1].double().log_softmax(-1)  # (N, V)
        V = cand.shape[1]
        top, idx = cand.flatten().topk(min(2 * beam_size, N * V))
        prefixes, live, logp = live, [], []
        for rank, (score, j) in enumerate(zip(top.tolist(), idx.tolist())):
            hyp = prefixes[j // V] + [j % V]
            if j % V == 2:
                if rank < beam_size or eos_any_rank:
                    finished.append((hyp[1:], score / ref.length_penalty(step, alpha)))
            elif len(live) < beam_size:
                live.append(hyp)
                logp.append(score)
        best = max((sc for _, sc in finished), default=-math.inf)
        bound = 1.0 if raw_bound else ref.length_penalty(max_len, alpha)
        if (stop_at_first and finished) or len(finished) >= beam_size or not (live and max(logp) / bound > best):
            break
    else:
        finished += [(h[1:], sc / ref.length_penalty(max_len, alpha)) for h, sc in zip(live, logp)]
    return max(finished, key=lambda r: r[1])


def until_done(student, ref, seed: int, boost: float, src, beam_size: int, max_len: int, alpha: float, mistakes=()):
    """The student's beam_search_until_done (through the given Transformer method) against the reference;
    `mistakes` names the known mistakes to recognise."""
    args = (src, 1, 2, beam_size, max_len, alpha)
    weights, want = decoded(ref, seed, boost, "beam_search_until_done", src, args[1:], {})
    res = student.module("Transformer", init_args=T_ARGS, state_dict=weights, method="beam_search_until_done",
                         args=args, grad=False)
    names = {"eos_any_rank": "an EOS ranked below the first beam_size extensions finished a hypothesis "
                             "(only an EOS among the beam_size best may finish)",
             "stop_at_first": "the search stopped at the first finished hypothesis (chapter 1's rule), though "
                              "a live one could still win",
             "raw_bound": "the stopping bound compares the raw live log-prob, without length_penalty(max_len, alpha)"}

    def distinct() -> dict:  # a mistake whose result another one shares is not named: the name could mislead
        m = tiny_transformer(ref, seed, boost)
        found = {names[k]: until_done_mistake(ref, m, src, beam_size, max_len, alpha, **{k: True}) for k in mistakes}
        same = lambda a, b: a[0] == b[0] and abs(a[1] - b[1]) < 1e-9  # noqa: E731
        return {k: v for k, v in found.items() if sum(same(v, w) for w in found.values()) == 1}

    expect_close(res.value, want, f"the result with beam_size={beam_size}, max_len={max_len}, alpha={alpha}",
                 rtol=1e-4, atol=1e-4, mistakes=distinct)


@reference_cache
def until_done_shows(ref, seed: int, boost: float, src, beam_size: int, max_len: int, alpha: float,
                     mistake: str) -> bool:
    """Whether, with tiny_transformer(ref, seed, boost), the known mistake `mistake` gives another result
    than the reference: the inputs show what the test is about (two searches: computed once per grading
    process)."""
    m = tiny_transformer(ref, seed, boost)
    got = until_done_mistake(ref, m, src, beam_size, max_len, alpha, **{mistake: True})
    want = ref.beam_search_until_done(m, src, 1, 2, beam_size, max_len, alpha)
    return got[0] != want[0] or abs(got[1] - want[1]) > 1e-3


UNTIL_DONE_HINT = ("Rank the best 2 * beam_size extensions by cumulative log-prob; an EOS among the first beam_size "
                   "finishes (score log p / length_penalty(step, alpha)), the others fill the live beam up to "
                   "beam_size." + DEPENDS)


@graded("beam_search_until_done", points=2, hint=UNTIL_DONE_HINT)
def test_beam_until_done(student, ref):
    """beam_search_until_done: does it return the reference's best hypothesis and score (beams 2 to 4, alpha 0 to 1)?"""
    src = torch.tensor([[4, 5, 6, 7]])
    # seed 61: (2, 0.0) names an EOS taken below the beam, (4, 1.0) an early stop, (3, 0.6) a raw bound.
    # With other seeds (per-student inputs) each case takes the first seed where its mistake shows; a raw
    # bound shows rarely (1 seed in 10 or 20), so its case may also take another beam and alpha.
    mistakes = ("eos_any_rank", "stop_at_first", "raw_bound")
    for cases, shown in zip((((2, 0.0),), ((4, 1.0),), ((3, 0.6), (4, 1.0), (3, 1.0), (2, 1.0))), mistakes):
        shows = lambda s, c: until_done_shows(ref, s, 0.0, src, c[0], 8, c[1], shown)  # noqa: B023, E731
        shown_by: dict = {}  # seed -> the first case it shows, so that no case is searched twice
        seed = first_seed(61, lambda s: shown_by.setdefault(s, next((c for c in cases if shows(s, c)), None))  # noqa: B023
                          is not None, tries=200)
        beam, alpha = shown_by[seed]
        until_done(student, ref, seed, 0.0, src, beam, 8, alpha, mistakes=mistakes)


@graded("beam_search_until_done", points=1,
        hint="Do not stop at the first finished hypothesis: stop once beam_size are finished, or when no live "
             "log p / length_penalty(max_len, alpha) beats the best finished score." + DEPENDS)
def test_beam_until_done_keeps_searching(student, ref):
    """beam_search_until_done: does it keep searching after the first EOS while a live hypothesis can still win?"""
    src = torch.tensor([[4, 5, 6, 7]])
    cases = ((3, 0.6), (4, 1.0))
    seed = first_seed(61, lambda s: any(until_done_shows(ref, s, 1.0, src, beam, 8, alpha, "stop_at_first")
                                        for beam, alpha in cases))
    for beam, alpha in cases:
        until_done(student, ref, seed, 1.0, src, beam, 8, alpha, mistakes=("stop_at_first",))


@graded("beam_search_until_done", points=1,
        hint="If it has not stopped after max_len steps, the live hypotheses count as finished, with score "
             "log p / length_penalty(max_len, alpha)." + DEPENDS)
def test_beam_until_done_max_len(student, ref):
    """beam_search_until_done: when nothing emits EOS, is the best live hypothesis returned after max_len steps?"""
    src = torch.tensor([[4, 5, 6, 7]])
    for beam, alpha in ((3, 0.6), (2, 1.0)):
        until_done(student, ref, 62, -10.0, src, beam, 4, alpha)
