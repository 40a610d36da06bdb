"""Hidden graders of chapter 02_attention (scoring functions, masked softmax, local-p attention).

Inputs are built from seeds and compared with the reference solution; known
mistakes are computed here, on the same inputs, and named when a student's
output matches one. The "non-contiguous" tests build transposed and sliced
inputs; they reach the student's function with those strides only where the
harness's wire keeps strides (it may send every tensor contiguous).
"""
from __future__ import annotations

import math

import torch

from autograder.harness.check import expect, expect_close, expect_unmodified, graded, needs_cuda, seeded

F64 = torch.float64


# ---------------------------------------------------------------- helpers
def rand(g: torch.Generator, *shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Standard normal values (drawn in float64, so every dtype sees the same numbers)."""
    return torch.randn(*shape, generator=g, dtype=F64).to(dtype)


def lengths_mask(lengths: list[int], S: int) -> torch.Tensor:
    """(B, S) bool, True at the first `lengths[b]` positions."""
    return torch.arange(S) < torch.tensor(lengths).unsqueeze(-1)


def compare(student, ref, name: str, args: tuple, kwargs: dict | None = None, what: str = "the scores",
            mistakes: dict | None = None):
    """The student's output on `args` equals the reference's, and the inputs are left as they were."""
    kwargs = kwargs or {}
    call = student.call(name, args=args, kwargs=kwargs)
    expect_close(call.value, getattr(ref, name)(*args, **kwargs), what, mistakes=mistakes)
    expect_unmodified(list(args), call.inputs, name)
    return call


def reference_grads(fn, args: tuple, kwargs: dict, wrt: tuple, cotangent: torch.Tensor) -> list:
    """Gradients of (output * cotangent).sum() w.r.t. args[i], i in wrt (output 0 of a tuple)."""
    args = list(args)
    for i in wrt:
        args[i] = args[i].detach().clone().requires_grad_(True)
    out = fn(*args, **kwargs)
    out = out[0] if isinstance(out, tuple) else out
    return list(torch.autograd.grad((out * cotangent).sum(), [args[i] for i in wrt], allow_unused=True))


def compare_grads(student, ref, name: str, args: tuple, wrt: tuple, kwargs: dict | None = None,
                  mistakes: dict | None = None) -> None:
    """The student's gradients (by autograd, through their own code) equal the reference's."""
    kwargs = kwargs or {}
    out = getattr(ref, name)(*args, **kwargs)
    out = out[0] if isinstance(out, tuple) else out
    cotangent = torch.randn(out.shape, generator=seeded(99), dtype=F64).to(out.dtype)
    call = student.call(name, args=args, kwargs=kwargs, grad_wrt=wrt, cotangent=cotangent)
    want = reference_grads(getattr(ref, name), args, kwargs, wrt, cotangent)
    expect(all(g is not None and not bool(torch.isnan(g).any()) for g in call.grads),
           f"some gradients of {name} are missing or NaN")
    expect_close(list(call.grads), want, f"the gradients of {name}", mistakes=mistakes)


def compare_on_cuda(student, ref, name: str, args: tuple, kwargs: dict | None = None) -> None:
    """On CUDA inputs, the output lives on CUDA and matches the reference."""
    kwargs = kwargs or {}
    call = student.call(name, args=args, kwargs=kwargs, device="cuda")
    expect(bool(call.devices) and all(str(d).startswith("cuda") for d in call.devices),
           f"{name} should return its output on the inputs' device (cuda), got {call.devices}")
    expect_close(call.value, getattr(ref, name)(*args, **kwargs), "the output on CUDA")


# ---------------------------------------------------------------- additive_score
def additive_inputs(g, B=3, S=5, Ds=4, Dh=6, A=7, dtype=torch.float32):
    return rand(g, B, Ds, dtype=dtype), rand(g, B, S, Dh, dtype=dtype), rand(g, A, Ds + Dh, dtype=dtype), \
        rand(g, A, dtype=dtype)


@graded("additive_score", points=2, hint="Split W into the columns that multiply s and those that multiply h_j "
        "(s first), add W_s s to every W_h h_j, apply tanh, then take the dot product with v.")
def test_additive_score_matches_reference(student, ref):
    """additive_score: does it match the reference (Ds != Dh)?"""
    s, h, W, v = additive_inputs(seeded(0))
    S = h.shape[1]
    pairs = lambda first, second: torch.cat([first, second], -1)  # noqa: E731
    swapped = torch.stack([torch.tanh(pairs(h[:, j], s) @ W.T) @ v for j in range(S)], -1)
    no_tanh = torch.stack([(pairs(s, h[:, j]) @ W.T) @ v for j in range(S)], -1)
    expect_close(student.additive_score(s, h, W, v), ref.additive_score(s, h, W, v), "the scores", mistakes={
        "concatenation order [h_j; s] instead of [s; h_j]": swapped,
        "tanh missing": no_tanh,
    })


@graded("additive_score", points=1, hint="Derive every width from the inputs' shapes and keep their dtype: "
        "no hard-coded sizes, no .float().")
def test_additive_score_dtype_and_batch_of_one(student, ref):
    """additive_score: does it keep float64 and work for a batch of one with a single position?"""
    compare(student, ref, "additive_score", additive_inputs(seeded(1), B=3, dtype=F64))
    compare(student, ref, "additive_score", additive_inputs(seeded(2), B=1, S=1))


@graded("additive_score", points=1, hint="Use operations that accept any strides (matmul, broadcasting; "
        "reshape rather than view) and never modify the inputs in place.")
def test_additive_score_noncontiguous_inputs(student, ref):
    """additive_score: does it handle non-contiguous inputs and leave them unmodified?"""
    g = seeded(3)
    s, h = rand(g, 4, 3).T, rand(g, 5, 3, 6).transpose(0, 1)   # (3, 4), (3, 5, 6)
    W, v = rand(g, 10, 7).T, rand(g, 14)[::2]                   # (7, 10), (7,)
    compare(student, ref, "additive_score", (s, h, W, v))


@graded("additive_score", points=2, hint="Build the scores from differentiable torch operations only "
        "(no .item(), numpy or .detach()).")
def test_additive_score_gradients(student, ref):
    """additive_score: are the gradients w.r.t. s, h, W and v right?"""
    compare_grads(student, ref, "additive_score", additive_inputs(seeded(4), dtype=F64), wrt=(0, 1, 2, 3))


@needs_cuda
@graded("additive_score", points=1, hint="Create no tensors on the CPU: everything should follow the inputs' device.")
def test_additive_score_cuda(student, ref):
    """additive_score: does it run on CUDA inputs and return a CUDA tensor?"""
    compare_on_cuda(student, ref, "additive_score", additive_inputs(seeded(5), dtype=F64))


# ---------------------------------------------------------------- dot_score, scaled_dot_score
def dot_inputs(g, B=3, S=5, D=8, dtype=torch.float32):
    return rand(g, B, D, dtype=dtype), rand(g, B, S, D, dtype=dtype)


@graded("dot_score", points=2, hint="Score s against every h_j with one batched product: h (B, S, D) times s as a "
        "column (B, D, 1); no scaling.")
def test_dot_score_matches_reference(student, ref):
    """dot_score: does it match the reference?"""
    s, h = dot_inputs(seeded(10))
    plain = (h * s.unsqueeze(1)).sum(-1)
    expect_close(student.dot_score(s, h), ref.dot_score(s, h), "the scores", mistakes={
        "scaled by 1/sqrt(D) (that is scaled_dot_score)": plain / math.sqrt(h.shape[-1]),
    })


@graded("dot_score", points=1, hint="Keep the inputs' dtype and take no size for granted (B or S may be 1).")
def test_dot_score_dtype_and_batch_of_one(student, ref):
    """dot_score: does it keep float64 and work for a batch of one with a single position?"""
    compare(student, ref, "dot_score", dot_inputs(seeded(11), dtype=F64))
    compare(student, ref, "dot_score", dot_inputs(seeded(12), B=1, S=1))


@graded("dot_score", points=1, hint="Use operations that accept any strides and never modify inputs in place.")
def test_dot_score_noncontiguous_inputs(student, ref):
    """dot_score: does it handle non-contiguous inputs and leave them unmodified?"""
    g = seeded(13)
    compare(student, ref, "dot_score", (rand(g, 8, 3).T, rand(g, 3, 8, 5).mT))


@graded("dot_score", points=1, hint="Build the scores from differentiable torch operations only.")
def test_dot_score_gradients(student, ref):
    """dot_score: are the gradients w.r.t. s and h right?"""
    compare_grads(student, ref, "dot_score", dot_inputs(seeded(14), dtype=F64), wrt=(0, 1))


@needs_cuda
@graded("dot_score", points=1, hint="Create no tensors on the CPU: everything should follow the inputs' device.")
def test_dot_score_cuda(student, ref):
    """dot_score: does it run on CUDA inputs and return a CUDA tensor?"""
    compare_on_cuda(student, ref, "dot_score", dot_inputs(seeded(15), dtype=F64))


@graded("scaled_dot_score", points=2, hint="Divide the dot products by the square root of the vectors' width D "
        "(the last dimension), not of the number of positions.")
def test_scaled_dot_score_matches_reference(student, ref):
    """scaled_dot_score: does it match the reference, 1/sqrt(D) included?"""
    s, h = dot_inputs(seeded(20), S=5, D=16)
    plain = (h * s.unsqueeze(1)).sum(-1)
    expect_close(student.scaled_dot_score(s, h), ref.scaled_dot_score(s, h), "the scores", mistakes={
        "missing the 1/sqrt(D) scaling": plain,
        "divided by D instead of sqrt(D)": plain / 16,
        "scaled by 1/sqrt(S), the number of positions, instead of 1/sqrt(D)": plain / math.sqrt(5),
    })


@graded("scaled_dot_score", points=1, hint="Keep the inputs' dtype and take no size for granted (B or S may be 1).")
def test_scaled_dot_score_dtype_and_batch_of_one(student, ref):
    """scaled_dot_score: does it keep float64 and work for a batch of one with a single position?"""
    compare(student, ref, "scaled_dot_score", dot_inputs(seeded(21), dtype=F64))
    compare(student, ref, "scaled_dot_score", dot_inputs(seeded(22), B=1, S=1))


@graded("scaled_dot_score", points=1, hint="Use operations that accept any strides and never modify inputs in place.")
def test_scaled_dot_score_noncontiguous_inputs(student, ref):
    """scaled_dot_score: does it handle non-contiguous inputs and leave them unmodified?"""
    g = seeded(23)
    compare(student, ref, "scaled_dot_score", (rand(g, 8, 3).T, rand(g, 5, 3, 8).transpose(0, 1)))


@graded("scaled_dot_score", points=1, hint="Build the scores from differentiable torch operations only.")
def test_scaled_dot_score_gradients(student, ref):
    """scaled_dot_score: are the gradients w.r.t. s and h right?"""
    compare_grads(student, ref, "scaled_dot_score", dot_inputs(seeded(24), dtype=F64), wrt=(0, 1))


@needs_cuda
@graded("scaled_dot_score", points=1, hint="Create no tensors on the CPU: everything should follow the inputs' device.")
def test_scaled_dot_score_cuda(student, ref):
    """scaled_dot_score: does it run on CUDA inputs and return a CUDA tensor?"""
    compare_on_cuda(student, ref, "scaled_dot_score", dot_inputs(seeded(25), dtype=F64))


# ---------------------------------------------------------------- general_score
def general_inputs(g, B=3, S=5, Ds=4, Dh=6, dtype=torch.float32):
    return rand(g, B, Ds, dtype=dtype), rand(g, B, S, Dh, dtype=dtype), rand(g, Ds, Dh, dtype=dtype)


@graded("general_score", points=2, hint="W has shape (Ds, Dh): s^T W is a vector of width Dh; score it against "
        "every h_j.")
def test_general_score_matches_reference(student, ref):
    """general_score: does it match the reference (Ds != Dh)?"""
    args = general_inputs(seeded(30))
    expect_close(student.general_score(*args), ref.general_score(*args), "the scores")


@graded("general_score", points=1, hint="The score is s^T W h_j, with s on the side of W's rows: check which side "
        "of W each vector multiplies.")
def test_general_score_not_transposed(student, ref):
    """general_score: with a square, non-symmetric W, is W used the right way round?"""
    s, h, W = general_inputs(seeded(31), Ds=5, Dh=5)
    expect_close(student.general_score(s, h, W), ref.general_score(s, h, W), "the scores", mistakes={
        "W transposed (s^T W^T h_j)": ref.general_score(s, h, W.T),
    })


@graded("general_score", points=1, hint="Keep the inputs' dtype, take no size for granted and accept any strides.")
def test_general_score_dtype_batch_of_one_noncontiguous(student, ref):
    """general_score: does it keep float64, handle a batch of one and non-contiguous inputs?"""
    compare(student, ref, "general_score", general_inputs(seeded(32), dtype=F64))
    compare(student, ref, "general_score", general_inputs(seeded(33), B=1, S=1))
    g = seeded(34)
    compare(student, ref, "general_score", (rand(g, 4, 3).T, rand(g, 3, 6, 5).mT, rand(g, 6, 4).T))


@graded("general_score", points=1, hint="Build the scores from differentiable torch operations only.")
def test_general_score_gradients(student, ref):
    """general_score: are the gradients w.r.t. s, h and W right?"""
    compare_grads(student, ref, "general_score", general_inputs(seeded(35), dtype=F64), wrt=(0, 1, 2))


@needs_cuda
@graded("general_score", points=1, hint="Create no tensors on the CPU: everything should follow the inputs' device.")
def test_general_score_cuda(student, ref):
    """general_score: does it run on CUDA inputs and return a CUDA tensor?"""
    compare_on_cuda(student, ref, "general_score", general_inputs(seeded(36), dtype=F64))


# ---------------------------------------------------------------- cosine_score
@graded("cosine_score", points=2, hint="Divide each dot product s . h_j by the product of the two vectors' "
        "Euclidean norms (clamped below at eps).")
def test_cosine_score_matches_reference(student, ref):
    """cosine_score: does it match the reference?"""
    s, h = dot_inputs(seeded(40))
    dots = (h * s.unsqueeze(1)).sum(-1)
    ns, nh = s.norm(dim=-1, keepdim=True), h.norm(dim=-1)
    expect_close(student.cosine_score(s, h), ref.cosine_score(s, h), "the scores", mistakes={
        "plain dot product, not normalised": dots,
        "normalised by |s| only": dots / ns,
        "normalised by |h_j| only": dots / nh,
    })


@graded("cosine_score", points=1, hint="Clamp the denominator below at eps, so that a zero vector scores 0/eps = 0.")
def test_cosine_score_zero_vectors(student, ref):
    """cosine_score: does a zero query or a zero key score 0, not NaN?"""
    s, h = dot_inputs(seeded(41), B=2, S=4)
    s[1] = 0.0
    h[0, 2] = 0.0
    got = student.cosine_score(s, h)
    expect(isinstance(got, torch.Tensor) and not bool(torch.isnan(got).any()),
           "a zero vector gives NaN: this looks like the result of a known mistake: cosine without the eps clamp")
    expect_close(got, ref.cosine_score(s, h), "the scores")


@graded("cosine_score", points=1, hint="The contract clamps the product of the norms, max(|s| |h_j|, eps), "
        "not each norm on its own; and use the eps argument.")
def test_cosine_score_clamps_the_product(student, ref):
    """cosine_score: for tiny vectors, is max(|s| |h_j|, eps) the denominator, with the given eps?"""
    g = seeded(42)
    s, h = 1e-5 * rand(g, 2, 3, dtype=F64), 1e-5 * rand(g, 2, 4, 3, dtype=F64)   # |s| |h_j| ~ 1e-10 < eps
    dots = (h * s.unsqueeze(1)).sum(-1)
    separately = dots / (s.norm(dim=-1, keepdim=True).clamp_min(1e-8) * h.norm(dim=-1).clamp_min(1e-8))
    expect_close(student.cosine_score(s, h), ref.cosine_score(s, h), "the scores of tiny vectors", mistakes={
        "each norm clamped separately (as F.cosine_similarity does) instead of their product": separately,
    })
    s, h = dot_inputs(seeded(43), dtype=F64)
    expect_close(student.cosine_score(s, h, eps=100.0), ref.cosine_score(s, h, eps=100.0),
                 "the scores with eps=100", mistakes={"the eps argument ignored": ref.cosine_score(s, h)})


@graded("cosine_score", points=1, hint="Keep the inputs' dtype, take no size for granted, accept any strides, "
        "and modify nothing in place.")
def test_cosine_score_dtype_batch_of_one_noncontiguous(student, ref):
    """cosine_score: does it keep float64, handle a batch of one and non-contiguous inputs?"""
    compare(student, ref, "cosine_score", dot_inputs(seeded(44), dtype=F64))
    compare(student, ref, "cosine_score", dot_inputs(seeded(45), B=1, S=1))
    g = seeded(46)
    compare(student, ref, "cosine_score", (rand(g, 8, 3).T, rand(g, 3, 8, 5).mT))


@graded("cosine_score", points=1, hint="Build the scores from differentiable torch operations only.")
def test_cosine_score_gradients(student, ref):
    """cosine_score: are the gradients w.r.t. s and h right?"""
    compare_grads(student, ref, "cosine_score", dot_inputs(seeded(47), dtype=F64), wrt=(0, 1))


@needs_cuda
@graded("cosine_score", points=1, hint="Create no tensors on the CPU: everything should follow the inputs' device.")
def test_cosine_score_cuda(student, ref):
    """cosine_score: does it run on CUDA inputs and return a CUDA tensor?"""
    compare_on_cuda(student, ref, "cosine_score", dot_inputs(seeded(48), dtype=F64))


# ---------------------------------------------------------------- location_score
def location_inputs(g, B=3, S=5, Ds=4, dtype=torch.float32):
    return rand(g, B, Ds, dtype=dtype), rand(g, S, Ds, dtype=dtype)


@graded("location_score", points=2, hint="W has one row per source position: the score of position j is the dot "
        "product of row j of W with s.")
def test_location_score_matches_reference(student, ref):
    """location_score: does it match the reference (S != Ds)?"""
    s, W = location_inputs(seeded(50))
    expect_close(student.location_score(s, W), ref.location_score(s, W), "the scores")


@graded("location_score", points=1, hint="e = W s for each batch element: W's rows are positions, its columns "
        "state features.")
def test_location_score_not_transposed(student, ref):
    """location_score: with a square W, is W used the right way round?"""
    s, W = location_inputs(seeded(51), S=4, Ds=4)
    expect_close(student.location_score(s, W), ref.location_score(s, W), "the scores", mistakes={
        "W transposed (s^T W instead of W s)": s @ W,
    })


@graded("location_score", points=1, hint="Keep the inputs' dtype, take no size for granted, accept any strides.")
def test_location_score_dtype_batch_of_one_noncontiguous(student, ref):
    """location_score: does it keep float64, handle a batch of one and non-contiguous inputs?"""
    compare(student, ref, "location_score", location_inputs(seeded(52), dtype=F64))
    compare(student, ref, "location_score", location_inputs(seeded(53), B=1, S=1))
    g = seeded(54)
    compare(student, ref, "location_score", (rand(g, 4, 3).T, rand(g, 4, 5).T))


@graded("location_score", points=1, hint="Build the scores from differentiable torch operations only.")
def test_location_score_gradients(student, ref):
    """location_score: are the gradients w.r.t. s and W right?"""
    compare_grads(student, ref, "location_score", location_inputs(seeded(55), dtype=F64), wrt=(0, 1))


@needs_cuda
@graded("location_score", points=1, hint="Create no tensors on the CPU: everything should follow the inputs' device.")
def test_location_score_cuda(student, ref):
    """location_score: does it run on CUDA inputs and return a CUDA tensor?"""
    compare_on_cuda(student, ref, "location_score", location_inputs(seeded(56), dtype=F64))


# ---------------------------------------------------------------- masked_softmax
def softmax_mistakes(scores: torch.Tensor, mask: torch.Tensor, dim: int = -1) -> dict:
    """Outputs of the usual wrong masked softmaxes on these inputs."""
    keep = mask.expand_as(scores)
    full = torch.softmax(scores, dim)
    return {
        "softmax over the wrong axis": torch.softmax(scores.masked_fill(~keep, float("-inf")), 0)
        .nan_to_num(0.0).masked_fill(~keep, 0.0) if dim != 0 else full,
        "mask inverted (True should mean: may attend)": torch.softmax(
            scores.masked_fill(keep, float("-inf")), dim).nan_to_num(0.0).masked_fill(keep, 0.0),
        "masking after the softmax (the weights no longer sum to 1)": full.masked_fill(~keep, 0.0),
        "mask ignored": full,
    }


@graded("masked_softmax", points=2, hint="Set the masked scores (mask False) to -inf, take the softmax along dim, "
        "then set the masked weights to exactly 0.")
def test_masked_softmax_matches_reference(student, ref):
    """masked_softmax: does it match the reference on random scores and masks?"""
    g = seeded(60)
    scores = rand(g, 4, 6)
    mask = torch.rand(4, 6, generator=g) > 0.4
    mask[:, 0] = True                                   # no fully masked row here
    expect_close(student.masked_softmax(scores, mask), ref.masked_softmax(scores, mask), "the weights",
                 mistakes=softmax_mistakes(scores, mask))


@graded("masked_softmax", points=2, hint="A row whose entries are all masked must come out as all zeros: the "
        "softmax of a row of -inf is NaN, so replace the weights of masked entries by 0 after the softmax.")
def test_masked_softmax_fully_masked_rows(student, ref):
    """masked_softmax: are fully masked rows all zero, not NaN?"""
    g = seeded(61)
    scores = rand(g, 3, 5)
    mask = torch.tensor([[True, True, False, True, False], [False] * 5, [True] * 5])
    got = student.masked_softmax(scores, mask)
    expect(isinstance(got, torch.Tensor) and not bool(torch.isnan(got).any()),
           "a fully masked row gives NaN; it should give all-zero weights")
    expect_close(got, ref.masked_softmax(scores, mask), "the weights", mistakes={
        "fully masked rows left uniform instead of all zero": torch.where(
            mask.any(-1, keepdim=True), ref.masked_softmax(scores, mask), torch.full_like(scores, 1 / 5)),
    })


@graded("masked_softmax", points=1, hint="With mask=None, nothing is masked: return the plain softmax along dim.")
def test_masked_softmax_without_mask(student, ref):
    """masked_softmax: with mask=None, is it the plain softmax?"""
    scores = rand(seeded(62), 3, 4, 5)
    expect_close(student.masked_softmax(scores), ref.masked_softmax(scores), "the weights")
    expect_close(student.masked_softmax(scores, None, 1), ref.masked_softmax(scores, None, 1),
                 "the weights along dim=1")


@graded("masked_softmax", points=1, hint="Use the dim argument everywhere (no hard-coded -1), and let the mask "
        "broadcast against the scores, e.g. (B, 1, S) against (B, T, S).")
def test_masked_softmax_dim_and_broadcast_mask(student, ref):
    """masked_softmax: does it honour dim and a broadcast mask on (B, T, S) scores?"""
    g = seeded(63)
    scores = rand(g, 2, 3, 5)
    mask = lengths_mask([4, 2], 5).unsqueeze(1)          # (B, 1, S): padding of the keys
    expect_close(student.masked_softmax(scores, mask), ref.masked_softmax(scores, mask),
                 "the weights with a (B, 1, S) mask", mistakes=softmax_mistakes(scores, mask))
    col_mask = torch.rand(2, 3, 1, generator=g) > 0.3     # (B, T, 1), softmax along T
    col_mask[:, 0] = True
    expect_close(student.masked_softmax(scores, col_mask, 1), ref.masked_softmax(scores, col_mask, 1),
                 "the weights along dim=1", mistakes={
                     "dim ignored (softmax along the last axis)": ref.masked_softmax(scores, col_mask, -1)})


@graded("masked_softmax", points=1, hint="Keep the scores' dtype: no .float() and no dtype=torch.float32.")
def test_masked_softmax_keeps_dtype(student, ref):
    """masked_softmax: are float32 and float64 scores kept in their dtype?"""
    g = seeded(64)
    mask = lengths_mask([5, 3, 0], 5)
    for dtype in (torch.float32, F64):
        scores = rand(g, 3, 5, dtype=dtype)
        expect_close(student.masked_softmax(scores, mask), ref.masked_softmax(scores, mask),
                     f"the weights of {dtype} scores")


@graded("masked_softmax", points=1, hint="Use masked_fill or torch.where, which return new tensors; "
        "masked_fill_ (with the underscore) changes the caller's scores.")
def test_masked_softmax_leaves_inputs_unmodified(student, ref):
    """masked_softmax: does it leave the scores and the mask unmodified?"""
    g = seeded(65)
    scores, mask = rand(g, 3, 6), lengths_mask([6, 2, 0], 6)
    call = student.call("masked_softmax", args=(scores, mask))
    expect_unmodified([scores, mask], call.inputs, "masked_softmax")


@graded("masked_softmax", points=1, hint="Fill with -inf (or a very negative number) rather than multiplying "
        "exp() by the mask, and zero masked weights afterwards so no NaN flows backwards.")
def test_masked_softmax_gradients(student, ref):
    """masked_softmax: are the gradients right, and zero (not NaN) for a fully masked row?"""
    g = seeded(66)
    scores, mask = rand(g, 3, 6, dtype=F64), lengths_mask([6, 3, 0], 6)
    compare_grads(student, ref, "masked_softmax", (scores, mask), wrt=(0,))


@graded("masked_softmax", points=1, hint="The batch may be one row, and a row may have a single entry.")
def test_masked_softmax_batch_of_one(student, ref):
    """masked_softmax: does it work for a batch of one and for a single position?"""
    g = seeded(67)
    compare(student, ref, "masked_softmax", (rand(g, 1, 4), lengths_mask([3], 4)), what="the weights")
    compare(student, ref, "masked_softmax", (rand(g, 3, 1), lengths_mask([1, 0, 1], 1)), what="the weights")


@needs_cuda
@graded("masked_softmax", points=1, hint="Create no tensors on the CPU: everything should follow the inputs' device.")
def test_masked_softmax_cuda(student, ref):
    """masked_softmax: does it run on CUDA inputs and return a CUDA tensor?"""
    compare_on_cuda(student, ref, "masked_softmax", (rand(seeded(68), 3, 5, dtype=F64), lengths_mask([5, 2, 0], 5)))


# ---------------------------------------------------------------- attention_context
def context_inputs(g, B=3, S=5, D=4, dtype=torch.float32):
    weights = torch.softmax(rand(g, B, S, dtype=F64), -1).to(dtype)
    return weights, rand(g, B, S, D, dtype=dtype)


@graded("attention_context", points=2, hint="Weight each value vector by its weight and sum over the positions S: "
        "a batched (1, S) @ (S, D) product.")
def test_attention_context_matches_reference(student, ref):
    """attention_context: does it match the reference?"""
    weights, values = context_inputs(seeded(70))
    expect_close(student.attention_context(weights, values), ref.attention_context(weights, values),
                 "the context", mistakes={
                     "a plain mean over the positions (weights ignored)": values.mean(1),
                     "a plain sum over the positions (weights ignored)": values.sum(1),
                 })


@graded("attention_context", points=1, hint="Keep the inputs' dtype, take no size for granted, accept any strides.")
def test_attention_context_dtype_batch_of_one_noncontiguous(student, ref):
    """attention_context: does it keep float64, handle a batch of one and non-contiguous inputs?"""
    compare(student, ref, "attention_context", context_inputs(seeded(71), dtype=F64), what="the context")
    compare(student, ref, "attention_context", context_inputs(seeded(72), B=1, S=1), what="the context")
    g = seeded(73)
    compare(student, ref, "attention_context", (rand(g, 5, 3).T, rand(g, 4, 5, 3).permute(2, 1, 0)),
            what="the context")


@graded("attention_context", points=1, hint="Build the context from differentiable torch operations only.")
def test_attention_context_gradients(student, ref):
    """attention_context: are the gradients w.r.t. the weights and the values right?"""
    compare_grads(student, ref, "attention_context", context_inputs(seeded(74), dtype=F64), wrt=(0, 1))


@needs_cuda
@graded("attention_context", points=1, hint="Create no tensors on the CPU: everything should follow the inputs' device.")
def test_attention_context_cuda(student, ref):
    """attention_context: does it run on CUDA inputs and return a CUDA tensor?"""
    compare_on_cuda(student, ref, "attention_context", context_inputs(seeded(75), dtype=F64))


# ---------------------------------------------------------------- additive_attention
def attention_inputs(g, B=3, S=5, Ds=4, Dh=6, A=7, lengths=(5, 3, 1), dtype=torch.float32):
    return (*additive_inputs(g, B, S, Ds, Dh, A, dtype), lengths_mask(list(lengths), S))


def expect_pair(student, ref, args: tuple, mistakes_weights: dict | None = None) -> None:
    """The student's (context, weights) pair equals the reference's, and the inputs are untouched."""
    call = student.call("additive_attention", args=args)
    got = call.value
    expect(isinstance(got, (tuple, list)) and len(got) == 2,
           "additive_attention should return a pair (context, weights)")
    want_context, want_weights = ref.additive_attention(*args)
    expect_close(got[1], want_weights, "the weights (second output)", mistakes=mistakes_weights)
    expect_close(got[0], want_context, "the context (first output)")
    expect_unmodified(list(args), call.inputs, "additive_attention")


@graded("additive_attention", points=2, hint="Compose your functions: additive_score, then masked_softmax with the "
        "mask, then attention_context with h as the values; return (context, weights).")
def test_additive_attention_matches_reference(student, ref):
    """additive_attention: do the context and the weights match the reference on a padded batch?"""
    args = attention_inputs(seeded(80))
    s, h, W, v, mask = args
    expect_pair(student, ref, args, mistakes_weights={
        "mask ignored": ref.masked_softmax(ref.additive_score(s, h, W, v)),
    })
    expect_pair(student, ref, args[:4] + (None,))


@graded("additive_attention", points=1, hint="A batch element with no real token gets zero weights and a zero "
        "context; masked_softmax already does this if you pass the mask.")
def test_additive_attention_fully_masked(student, ref):
    """additive_attention: does an element with nothing to attend to get zero weights and context, not NaN?"""
    expect_pair(student, ref, attention_inputs(seeded(81), lengths=(0, 2, 5)))


@graded("additive_attention", points=1, hint="Keep the inputs' dtype and take no size for granted.")
def test_additive_attention_dtype_and_batch_of_one(student, ref):
    """additive_attention: does it keep float64 and work for a batch of one?"""
    expect_pair(student, ref, attention_inputs(seeded(82), dtype=F64))
    expect_pair(student, ref, attention_inputs(seeded(83), B=1, lengths=(4,)))


@graded("additive_attention", points=1, hint="Build everything from differentiable torch operations; the gradient "
        "flows back through the context into s, h, W and v.")
def test_additive_attention_gradients(student, ref):
    """additive_attention: are the context's gradients w.r.t. s, h, W and v right?"""
    compare_grads(student, ref, "additive_attention", attention_inputs(seeded(84), dtype=F64), wrt=(0, 1, 2, 3))


@needs_cuda
@graded("additive_attention", points=1, hint="Create no tensors on the CPU: everything should follow the inputs' "
        "device.")
def test_additive_attention_cuda(student, ref):
    """additive_attention: does it run on CUDA inputs and return CUDA tensors?"""
    compare_on_cuda(student, ref, "additive_attention", attention_inputs(seeded(85), dtype=F64))


# ---------------------------------------------------------------- local_p_position
def position_inputs(g, B=4, Ds=5, A=3, dtype=torch.float32):
    return rand(g, B, Ds, dtype=dtype), rand(g, A, Ds, dtype=dtype), rand(g, A, dtype=dtype), \
        torch.tensor([7, 1, 12, 4][:B])


@graded("local_p_position", points=2, hint="p = (length - 1) * sigmoid(v_p . tanh(W_p s)): positions are 0-based, "
        "so the last real position is length - 1.")
def test_local_p_position_matches_reference(student, ref):
    """local_p_position: does it match the reference?"""
    s, W_p, v_p, lengths = position_inputs(seeded(90))
    gate = torch.sigmoid(torch.tanh(s @ W_p.T) @ v_p)
    expect_close(student.local_p_position(s, W_p, v_p, lengths), ref.local_p_position(s, W_p, v_p, lengths),
                 "the positions", mistakes={
                     "scaled by the length instead of length - 1": lengths * gate,
                     "tanh missing": (lengths - 1) * torch.sigmoid(s @ W_p.T @ v_p),
                 })


@graded("local_p_position", points=1, hint="Convert the (integer) lengths to the decoder state's dtype, and take "
        "no size for granted.")
def test_local_p_position_dtype_and_batch_of_one(student, ref):
    """local_p_position: with integer lengths, does it return s's float dtype (float64 too), also for a batch of one?"""
    compare(student, ref, "local_p_position", position_inputs(seeded(91), dtype=F64), what="the positions")
    compare(student, ref, "local_p_position", position_inputs(seeded(92), B=1), what="the positions")


@graded("local_p_position", points=1, hint="Build p from differentiable torch operations only.")
def test_local_p_position_gradients(student, ref):
    """local_p_position: are the gradients w.r.t. s, W_p and v_p right?"""
    compare_grads(student, ref, "local_p_position", position_inputs(seeded(93), dtype=F64), wrt=(0, 1, 2))


@needs_cuda
@graded("local_p_position", points=1, hint="Create no tensors on the CPU: everything should follow the inputs' device.")
def test_local_p_position_cuda(student, ref):
    """local_p_position: does it run on CUDA inputs and return a CUDA tensor?"""
    compare_on_cuda(student, ref, "local_p_position", position_inputs(seeded(94), dtype=F64))


# ---------------------------------------------------------------- local_p_weights
def local_inputs(g, dtype=torch.float32):
    scores = rand(g, 4, 12, dtype=dtype)
    p = torch.tensor([5.0, 0.0, 10.6, 3.25], dtype=dtype)   # integral p: positions exactly D away sit on the edge
    return scores, p


def local_reference_variant(scores, p, D, sigma, window_le=True, window=True, mask=None):
    """Luong's local-p weights with a chosen sigma and window rule (for naming mistakes)."""
    offset = torch.arange(scores.shape[-1], dtype=scores.dtype) - p.unsqueeze(-1)
    keep = (offset.abs() <= D if window_le else offset.abs() < D) if window else torch.ones_like(scores, dtype=torch.bool)
    if mask is not None:
        keep = keep & mask
    weights = torch.softmax(scores.masked_fill(~keep, float("-inf")), -1).nan_to_num(0.0).masked_fill(~keep, 0.0)
    return weights * torch.exp(-offset ** 2 / (2 * sigma ** 2))


@graded("local_p_weights", points=2, hint="Mask every position with |j - p| > D, take the masked softmax of the "
        "scores, then multiply by exp(-(j - p)^2 / (2 sigma^2)) with sigma = D / 2.")
def test_local_p_weights_matches_reference(student, ref):
    """local_p_weights: does it match the reference (window, softmax, Gaussian with sigma = D/2)?"""
    scores, p = local_inputs(seeded(100))
    D = 2
    expect_close(student.local_p_weights(scores, p, D), ref.local_p_weights(scores, p, D), "the weights", mistakes={
        "sigma = D instead of D/2": local_reference_variant(scores, p, D, sigma=D),
        "no window (softmax over the whole source)": local_reference_variant(scores, p, D, D / 2, window=False),
        "window |j - p| < D instead of |j - p| <= D": local_reference_variant(scores, p, D, D / 2, window_le=False),
        "Gaussian missing": local_reference_variant(scores, p, D, sigma=float("inf")),
    })


@graded("local_p_weights", points=1, hint="Combine the window with the mask (both True = may attend) before the "
        "softmax; a row with no allowed position is all zeros.")
def test_local_p_weights_with_mask(student, ref):
    """local_p_weights: does it respect the padding mask, with zeros (not NaN) where nothing is allowed?"""
    scores, p = local_inputs(seeded(101))
    mask = lengths_mask([12, 5, 3, 0], 12)       # row 2: the window around 10.6 lies in the padding
    got = student.local_p_weights(scores, p, 3, mask)
    expect(isinstance(got, torch.Tensor) and not bool(torch.isnan(got).any()),
           "a row with no position allowed gives NaN; it should give all-zero weights")
    expect_close(got, ref.local_p_weights(scores, p, 3, mask), "the weights", mistakes={
        "mask ignored": ref.local_p_weights(scores, p, 3),
    })


@graded("local_p_weights", points=1, hint="Build the positions with the scores' dtype and device "
        "(torch.arange(..., dtype=..., device=...)).")
def test_local_p_weights_dtype_and_batch_of_one(student, ref):
    """local_p_weights: does it keep float64 and work for a batch of one?"""
    scores, p = local_inputs(seeded(102), dtype=F64)
    compare(student, ref, "local_p_weights", (scores, p, 4), what="the weights")
    compare(student, ref, "local_p_weights", (scores[:1], p[:1], 1), what="the weights")


@graded("local_p_weights", points=1, hint="Keep the Gaussian differentiable in p (compute it with torch from p), "
        "so that the predicted position can be trained.")
def test_local_p_weights_gradients(student, ref):
    """local_p_weights: are the gradients w.r.t. the scores and w.r.t. p right?"""
    scores, p = local_inputs(seeded(103), dtype=F64)
    compare_grads(student, ref, "local_p_weights", (scores, p + 0.1, 2), wrt=(0, 1))


@needs_cuda
@graded("local_p_weights", points=1, hint="Create the positions on the scores' device.")
def test_local_p_weights_cuda(student, ref):
    """local_p_weights: does it run on CUDA inputs and return a CUDA tensor?"""
    scores, p = local_inputs(seeded(104), dtype=F64)
    compare_on_cuda(student, ref, "local_p_weights", (scores, p, 2, lengths_mask([12, 5, 3, 0], 12)))
