"""Hidden graders of chapter 05, GPT.

Sampling is checked statistically: many draws in one call (a batch of identical rows), whose
empirical frequencies must lie within 5 binomial standard deviations of the filtered
distribution. The student process seeds torch's global generator before every call, so each
test is deterministic for a given submission; 5 sigma makes a correct one fail with
probability below 1e-5 per frequency.
"""
from __future__ import annotations

import math

import torch

from autograder.harness.check import (expect, expect_close, expect_raises, expect_unmodified, first_seed, graded,
                                      needs_cuda, reference_cache, seeded)

N_DRAWS = 40000


# ---------------------------------------------------------------- helpers (trusted side only)
def frequencies(draws, V: int) -> torch.Tensor:
    expect(isinstance(draws, torch.Tensor) and draws.dim() == 1,
           "sample_next_token should return a (B,) long tensor")
    expect(draws.dtype == torch.long, f"sample_next_token should return dtype torch.long, got {draws.dtype}")
    expect(int(draws.min()) >= 0 and int(draws.max()) < V, "a sampled id lies outside [0, V)")
    return torch.bincount(draws, minlength=V).double() / draws.numel()


def expect_distribution(freq: torch.Tensor, want: torch.Tensor, what: str, mistakes: dict | None = None) -> None:
    """Frequencies within 5 binomial sigmas of `want`; tokens of probability 0 never drawn."""
    n = N_DRAWS
    want = want.double()

    def fits(p: torch.Tensor) -> bool:
        p = p.double()
        tol = 5 * torch.sqrt(p * (1 - p) / n) + 1.0 / n
        return bool(((freq - p).abs() <= tol).all()) and not bool((freq[p == 0] > 0).any())

    if fits(want):
        return
    for name, p in (mistakes or {}).items():
        if fits(p):
            raise AssertionError_(f"{what} look like the result of a known mistake: {name}")
    bad = (want == 0) & (freq > 0)
    if bool(bad.any()):
        raise AssertionError_(f"{what}: a token that should have been filtered out was drawn "
                              f"(ids {bad.nonzero().flatten().tolist()[:5]})")
    err = float((freq - want).abs().max())
    raise AssertionError_(f"{what} differ from the expected probabilities by up to {err:.3f}")


def AssertionError_(message: str):
    from autograder.harness.check import GradingFailure
    return GradingFailure(message)


def kept_probs(logits_row: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    return logits_row.double().masked_fill(~keep, float("-inf")).softmax(-1)


def top_p_drop_crossing(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """The mistake: keep only tokens whose cumulative probability (themselves included) is <= top_p
    (the crossing token dropped), but at least the top token."""
    probs, order = logits.softmax(-1).sort(-1, descending=True)
    drop_sorted = probs.cumsum(-1) > top_p
    drop_sorted[..., 0] = False
    drop = drop_sorted.scatter(-1, order, drop_sorted)
    return logits.masked_fill(drop, float("-inf"))


def top_p_on_original(logits: torch.Tensor, top_k: int, top_p: float, ref) -> torch.Tensor:
    """The mistake: top-p computed on the unfiltered distribution, then combined with top-k."""
    a = ref.filter_logits(logits, top_k=top_k)
    b = ref.filter_logits(logits, top_p=top_p)
    return a.masked_fill(b == float("-inf"), float("-inf"))


def top_k_exactly_k(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Top-k keeping exactly k (topk indices scattered), ties broken by torch.topk."""
    idx = logits.topk(k, -1).indices
    keep = torch.zeros_like(logits, dtype=torch.bool).scatter(-1, idx, True)
    return logits.masked_fill(~keep, float("-inf"))


def mask_attention(q, k, v, mask):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return scores.masked_fill(~mask, float("-inf")).softmax(-1) @ v


def cache_offset_variants(q, k_all, v_all, S: int, T: int) -> dict:
    """Outputs of attention with a wrongly placed causal mask in the cached step."""
    ones = torch.ones(T, S + T, dtype=torch.bool)
    return {
        "causal mask off by one in the cached step (a new position does not see itself)":
            mask_attention(q, k_all, v_all, ones.tril(S - 1)),
        "causal mask off by one in the cached step (a new position sees the next new one)":
            mask_attention(q, k_all, v_all, ones.tril(S + 1)),
        "the causal mask ignores the cache (new position i should see cached positions and new ones <= i)":
            mask_attention(q, k_all, v_all, ones.tril(0)),
        "no causal mask among the new positions": mask_attention(q, k_all, v_all, ones),
    }


def expect_close_named(got, want, what: str, mistakes: dict) -> None:
    """expect_close, but a known mistake whose output has another shape than `want` is named too."""
    if isinstance(got, torch.Tensor):
        for name, value in mistakes.items():
            if tuple(got.shape) == tuple(value.shape) != tuple(want.shape) and got.dtype == value.dtype \
                    and torch.allclose(got.double(), value.double(), rtol=1e-4, atol=1e-5):
                raise AssertionError_(f"{what} looks like the result of a known mistake: {name}")
    expect_close(got, want, what, mistakes=mistakes)


def expect_cache_cat(got, cached, new, what: str, mistakes: dict) -> None:
    """expect_close against cat([cached, new], 2), naming a known mistake even when its shape differs."""
    if isinstance(got, torch.Tensor):
        for name, value in mistakes.items():
            if tuple(got.shape) == tuple(value.shape) and tuple(value.shape) != (
                    *cached.shape[:2], cached.shape[2] + new.shape[2], cached.shape[3]) \
                    and torch.allclose(got.double(), value.double(), rtol=1e-4, atol=1e-5):
                raise AssertionError_(f"{what} looks like the result of a known mistake: {name}")
    expect_close(got, torch.cat([cached, new], 2), what, mistakes=mistakes)


def qkv_cache(seed: int, B=2, H=3, S=4, T=3, d=8, dtype=torch.float32):
    g = seeded(seed)
    r = lambda n: torch.randn(B, H, n, d, generator=g, dtype=dtype)  # noqa: E731
    return r(T), r(T), r(T), (r(S), r(S))


@reference_cache
def ref_module(ref, cls: str, *args, seed: int = 0):
    """A reference module in eval mode with seeded weights (LayerNorms perturbed, larger embeddings)."""
    torch.manual_seed(seed)
    m = getattr(ref, cls)(*args)
    g = seeded(seed + 1000)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if "ln" in name:
                p.add_(0.2 * torch.randn(p.shape, generator=g))
            if "embed" in name:
                p.mul_(0.5)
    return m.eval()


GPT_ARGS = (11, 16, 2, 32, 2, 24)  # vocab, d_model, n_heads, d_ff, n_layers, max_len


# ================================================================ input transformations
@graded("gpt_classification_input", points=1, hint="Return [start_id] + text + [extract_id] as a new list "
                                                    "(an empty text gives [start_id, extract_id]).")
def test_classification_input(student, ref):
    """gpt_classification_input: is it [start] text [extract], with the input list unchanged?"""
    text = [5, 6, 7, 8]
    call = student.call("gpt_classification_input", args=(text, 1, 2))
    want = ref.gpt_classification_input(text, 1, 2)
    expect_close(call.value, want, "the sequence", mistakes={
        "the extract token is missing": [1] + text, "the start token is missing": text + [2],
        "start and extract swapped": [2] + text + [1]})
    expect(call.inputs[0] == text, "gpt_classification_input modified its input list")
    expect_close(student.gpt_classification_input([], 3, 4), [3, 4], "the sequence of an empty text")


@graded("gpt_entailment_input", points=1, hint="[start_id] + premise + [delim_id] + hypothesis + [extract_id].")
def test_entailment_input(student, ref):
    """gpt_entailment_input: is it [start] premise [delim] hypothesis [extract]?"""
    p, h = [5, 6, 7], [8, 9]
    got = student.gpt_entailment_input(p, h, 1, 3, 2)
    expect_close(got, ref.gpt_entailment_input(p, h, 1, 3, 2), "the sequence", mistakes={
        "premise and hypothesis swapped": [1] + h + [3] + p + [2],
        "the delimiter is missing": [1] + p + h + [2],
        "the extract token is missing": [1] + p + [3] + h})


@graded("gpt_similarity_inputs", points=2,
        hint="Similarity has no order: return BOTH sequences, [start] a [delim] b [extract] first, then b before a.")
def test_similarity_inputs(student, ref):
    """gpt_similarity_inputs: are both orders returned, (a; b) then (b; a)?"""
    a, b = [5, 6], [7, 8, 9]
    call = student.call("gpt_similarity_inputs", args=(a, b, 1, 3, 2))
    want = ref.gpt_similarity_inputs(a, b, 1, 3, 2)
    ab, ba = want
    expect_close(call.value, want, "the two sequences", mistakes={
        "the similarity input built in one order only": [ab],
        "the similarity input built in one order only (a sequence, not a list of two)": ab,
        "the similarity input built in one order only (twice the same order)": [ab, ab],
        "the two orders swapped: (a; b) comes first": [ba, ab],
    })
    expect(call.inputs[0] == a and call.inputs[1] == b, "gpt_similarity_inputs modified its inputs")


@graded("gpt_multiple_choice_inputs", points=2,
        hint="One sequence per answer, in the answers' order: [start] context [delim] answer [extract].")
def test_multiple_choice_inputs(student, ref):
    """gpt_multiple_choice_inputs: is there one [start] context [delim] answer [extract] per answer, in order?"""
    ctx, answers = [5, 6, 7], [[8], [9, 10], [11]]
    got = student.gpt_multiple_choice_inputs(ctx, answers, 1, 3, 2)
    want = ref.gpt_multiple_choice_inputs(ctx, answers, 1, 3, 2)
    expect_close(got, want, "the sequences", mistakes={
        "all answers in one sequence": [[1] + ctx + [3] + [t for a in answers for t in a] + [2]],
        "answer before the context": [[1] + a + [3] + ctx + [2] for a in answers],
        "the delimiter is missing": [[1] + ctx + a + [2] for a in answers]})
    expect_close(student.gpt_multiple_choice_inputs(ctx, [[4]], 1, 3, 2), [[1, 5, 6, 7, 3, 4, 2]],
                 "the sequences for a single answer")


# ================================================================ filter_logits
@graded("filter_logits", points=2,
        hint="Top-k: set every logit below the k-th largest of its row to -inf (logits < topk(...).values[..., -1:]).")
def test_filter_top_k(student, ref):
    """filter_logits: does top-k keep the k largest logits of every row and set the rest to -inf?"""
    logits = torch.randn(4, 10, generator=seeded(0)) * 2
    call = student.call("filter_logits", args=(logits,), kwargs={"top_k": 3})
    want = ref.filter_logits(logits, top_k=3)
    expect_close(call.value, want, "filter_logits(logits, top_k=3)", mistakes={
        "top-k keeps the k smallest logits": (-ref.filter_logits(-logits, top_k=3)).masked_fill(
            ref.filter_logits(-logits, top_k=3) == float("-inf"), float("-inf")),
        "top-k over the batch dimension instead of the vocabulary": ref.filter_logits(logits.T, top_k=3).T,
        "top-k keeps k-1 tokens": ref.filter_logits(logits, top_k=2),
        "top-k keeps k+1 tokens": ref.filter_logits(logits, top_k=4),
        "removed entries set to 0 instead of -inf": want.masked_fill(want == float("-inf"), 0.0),
    })
    expect_unmodified((logits,), call.inputs[:1], "filter_logits")


@graded("filter_logits", points=1,
        hint="None, top_k >= V and top_p >= 1 keep every logit: skip top-p when top_p >= 1, even where the "
             "cumulative probability rounds to 1 before the last tokens.")
def test_filter_keeps_all(student, ref):
    """filter_logits: do no filter, top_k >= V and top_p >= 1 keep every logit?"""
    logits = torch.randn(4, 10, generator=seeded(5)) * 2
    logits[0] = torch.tensor([12.0, -9.0, -10.0, -11.0, -12.0, -13.0, -14.0, -15.0, -16.0, -17.0])  # p0 = 1.0 in float32
    for kwargs in ({}, {"top_k": 10}, {"top_k": 15}, {"top_p": 1.0}, {"top_p": 1.5}, {"top_k": 10, "top_p": 1.0}):
        what = f"filter_logits(logits{''.join(f', {k}={v}' for k, v in kwargs.items())})"
        expect_close(student.filter_logits(logits, **kwargs), logits, what + ", which should keep every logit")


@graded("filter_logits", points=1, hint="top_k must be >= 1 (or None, no top-k): raise ValueError for top_k = 0 "
                                        "or below, as the docstring says.")
def test_filter_top_k_below_one_raises(student, ref):
    """filter_logits: does top_k = 0 (or -1) raise ValueError?"""
    logits = torch.randn(2, 6, generator=seeded(6))
    for k in (0, -1):
        expect_raises(lambda: student.filter_logits(logits, top_k=k), "ValueError", f"filter_logits(logits, top_k={k})")


@graded("filter_logits", points=1,
        hint="Ties at the k-th largest logit all stay: compare with the k-th value (>=), do not scatter topk's indices.")
def test_filter_top_k_ties(student, ref):
    """filter_logits: with ties at the k-th largest logit, do all tied tokens stay?"""
    logits = torch.tensor([[3.0, 1.0, 2.0, 2.0, 0.5, 2.0], [0.0, 0.0, 0.0, 0.0, 0.0, 1.0]])
    want = ref.filter_logits(logits, top_k=2)
    expect_close(student.filter_logits(logits, top_k=2), want, "filter_logits with ties at the k-th logit",
                 mistakes={"top-k keeps exactly k tokens and drops some tied at the k-th logit":
                           top_k_exactly_k(logits, 2)})


@graded("filter_logits", points=3,
        hint="Sort the probabilities in decreasing order; keep token i while the mass BEFORE it is < top_p: "
             "the token that crosses top_p stays.")
def test_filter_top_p(student, ref):
    """filter_logits: does top-p keep the smallest set of most probable tokens with mass >= top_p, crossing token included?"""
    g = seeded(1)
    logits = torch.randn(5, 12, generator=g) * 1.5
    for p in (0.5, 0.8, 0.95):
        want = ref.filter_logits(logits, top_p=p)
        call = student.call("filter_logits", args=(logits,), kwargs={"top_p": p})
        expect_close(call.value, want, f"filter_logits(logits, top_p={p})", mistakes={
            "top-p drops the token which crosses the threshold": top_p_drop_crossing(logits, p),
            "top-p keeps the least probable tokens (sorted ascending)": torch.where(
                want == float("-inf"), logits, torch.full_like(logits, float("-inf"))),
            "top-p applied to the logits instead of the probabilities": logits.masked_fill(
                (logits.sort(-1, descending=True).values.cumsum(-1) - logits.sort(-1, descending=True).values
                 >= p).scatter(-1, logits.sort(-1, descending=True).indices,
                               logits.sort(-1, descending=True).values.cumsum(-1)
                               - logits.sort(-1, descending=True).values >= p), float("-inf")),
        })
        expect_unmodified((logits,), call.inputs[:1], "filter_logits")


@graded("filter_logits", points=1, hint="The most probable token always stays, however small top_p is.")
def test_filter_top_p_tiny(student, ref):
    """filter_logits: with top_p so small that only the top token stays, is exactly that token kept?"""
    logits = torch.randn(3, 9, generator=seeded(2))
    got = student.filter_logits(logits, top_p=1e-4)
    want = ref.filter_logits(logits, top_p=1e-4)
    expect_close(got, want, "filter_logits(logits, top_p=1e-4)", mistakes={
        "every token removed (the most probable token must always stay)": torch.full_like(logits, float("-inf"))})
    top = logits.argmax(-1, keepdim=True)                                  # (3, 1)
    want0 = torch.full_like(logits, float("-inf")).scatter(-1, top, logits.gather(-1, top))
    expect_close(student.filter_logits(logits, top_p=0.0), want0, "filter_logits(logits, top_p=0.0)", mistakes={
        "every token removed at top_p=0 (the most probable token must always stay)":
            torch.full_like(logits, float("-inf"))})


@graded("filter_logits", points=2,
        hint="Top-k first; then top-p on the renormalised distribution of the kept tokens (softmax of the filtered logits).")
def test_filter_top_k_then_top_p(student, ref):
    """filter_logits: with both, is top-p applied after top-k, on the remaining distribution?"""
    logits = torch.tensor([[2.0, 1.6, 1.5, 1.4, 1.3, 1.2, 1.1, 1.0]]).repeat(2, 1)
    logits[1] = logits[1].flip(0)
    want = ref.filter_logits(logits, top_k=4, top_p=0.6)
    expect_close(student.filter_logits(logits, top_k=4, top_p=0.6), want, "filter_logits(top_k=4, top_p=0.6)",
                 mistakes={"top-p computed on the full distribution, not on what top-k kept":
                           top_p_on_original(logits, 4, 0.6, ref)})


@graded("filter_logits", points=1, hint="Keep the dtype; use only operations on the logits' device.")
def test_filter_float64(student, ref):
    """filter_logits: does it keep float64 and work for a batch of one?"""
    logits = torch.randn(1, 7, generator=seeded(3), dtype=torch.float64)
    expect_close(student.filter_logits(logits, top_k=5, top_p=0.7), ref.filter_logits(logits, top_k=5, top_p=0.7),
                 "filter_logits of float64 logits")


@needs_cuda
@graded("filter_logits", points=1, hint="Create every tensor on the logits' device.")
def test_filter_cuda(student, ref):
    """filter_logits: does it run on a GPU and return a tensor on the GPU?"""
    logits = torch.randn(3, 11, generator=seeded(4))
    call = student.call("filter_logits", args=(logits,), kwargs={"top_k": 6, "top_p": 0.8}, device="cuda")
    expect(all(d.startswith("cuda") for d in call.devices), "the output should stay on the input's device (cuda)")
    expect_close(call.value, ref.filter_logits(logits, top_k=6, top_p=0.8), "the output")


# ================================================================ sample_next_token
def row(seed: int, V: int = 8, scale: float = 1.0) -> torch.Tensor:
    return torch.randn(1, V, generator=seeded(seed)) * scale


@graded("sample_next_token", points=3,
        hint="Divide the LOGITS by the temperature, before the softmax; then sample with torch.multinomial.")
def test_sample_temperature(student, ref):
    """sample_next_token: over 40,000 draws, do the frequencies match softmax(logits / temperature)?"""
    z = row(10)
    for tau in (1.0, 0.5, 2.0):
        draws = student.sample_next_token(z.expand(N_DRAWS, -1), tau)
        freq = frequencies(draws, z.shape[-1])
        expect_distribution(freq, (z[0].double() / tau).softmax(-1), f"the frequencies with temperature {tau}",
                            mistakes={
                                "temperature applied after the softmax (it must divide the logits)":
                                    z[0].double().softmax(-1),
                                "multiplied by the temperature instead of divided": (z[0].double() * tau).softmax(-1),
                            } if tau != 1.0 else {"the argmax instead of a sample": torch.nn.functional.one_hot(
                                z[0].argmax(), z.shape[-1]).double()})


@graded("sample_next_token", points=2,
        hint="Filter with filter_logits(logits / temperature, top_k, top_p) before the softmax: "
             "a token outside the top-k must never be drawn.")
def test_sample_top_k(student, ref):
    """sample_next_token: with top_k=3, is nothing outside the top 3 ever drawn, and are the 3 in proportion?"""
    z = row(11, V=10, scale=1.5)
    draws = student.sample_next_token(z.expand(N_DRAWS, -1), 1.0, 3)
    keep = ref.filter_logits(z, top_k=3)[0] > float("-inf")
    expect_distribution(frequencies(draws, 10), kept_probs(z[0], keep), "the frequencies with top_k=3",
                        mistakes={"top_k ignored": z[0].double().softmax(-1)})


def nucleus_moves(ref, z: torch.Tensor) -> bool:
    """Whether top_p=0.7 keeps other tokens at temperature 0.8 than at 1 (filtering before the temperature shows)."""
    return not torch.equal(ref.filter_logits(z / 0.8, top_p=0.7) > float("-inf"),
                           ref.filter_logits(z, top_p=0.7) > float("-inf"))


@graded("sample_next_token", points=2,
        hint="Top-p: never draw outside the nucleus; the kept tokens are renormalised.")
def test_sample_top_p(student, ref):
    """sample_next_token: with top_p=0.7 and temperature 0.8, do draws stay in the nucleus in proportion?"""
    z = row(first_seed(12, lambda seed: nucleus_moves(ref, row(seed, V=10, scale=1.5))), V=10, scale=1.5)
    zt = z / 0.8
    draws = student.sample_next_token(z.expand(N_DRAWS, -1), 0.8, None, 0.7)
    keep = ref.filter_logits(zt, top_p=0.7)[0] > float("-inf")
    crossing = top_p_drop_crossing(zt, 0.7)[0] > float("-inf")
    expect_distribution(frequencies(draws, 10), kept_probs(zt[0], keep), "the frequencies with top_p=0.7", mistakes={
        "top-p drops the token which crosses the threshold": kept_probs(zt[0], crossing),
        "top_p ignored": zt[0].double().softmax(-1),
        "top-p computed before the temperature": kept_probs(zt[0], ref.filter_logits(z, top_p=0.7)[0] > float("-inf")),
    })


@graded("sample_next_token", points=1,
        hint="temperature == 0 means greedy: return logits.argmax(-1) (do not divide by 0).")
def test_sample_greedy(student, ref):
    """sample_next_token: is temperature 0 the argmax of every row, as a (B,) long tensor?"""
    z = torch.randn(6, 9, generator=seeded(13))
    got = student.sample_next_token(z, 0.0)
    expect_close(got, z.argmax(-1), "the tokens at temperature 0")
    got = student.sample_next_token(z, 0)
    expect_close(got, z.argmax(-1), "the tokens at temperature 0 (an int)")


@graded("sample_next_token", points=1, hint="A temperature near 0 must give the argmax, without NaN or overflow.")
def test_sample_temperature_near_zero(student, ref):
    """sample_next_token: with temperature 1e-6 and a batch of rows, is every draw the argmax?"""
    z = torch.randn(500, 9, generator=seeded(14))
    got = student.sample_next_token(z, 1e-6)
    expect_close(got, z.argmax(-1), "the tokens at temperature 1e-6")


@graded("sample_next_token", points=1, hint="Keep the logits unchanged; return a long tensor of shape (B,).")
def test_sample_shape_float64(student, ref):
    """sample_next_token: float64 logits and a batch of one: a (1,) long, inputs unchanged?"""
    z = torch.randn(1, 5, generator=seeded(15), dtype=torch.float64)
    call = student.call("sample_next_token", args=(z, 0.7, 2, 0.9))
    expect(isinstance(call.value, torch.Tensor) and call.value.shape == (1,) and call.value.dtype == torch.long,
           "sample_next_token should return a (B,) long tensor")
    expect(int(call.value[0]) in z[0].topk(2).indices.tolist(), "a token outside the top-k was drawn")
    expect_unmodified((z,), call.inputs[:1], "sample_next_token")


@graded("sample_next_token", points=1,
        hint="Use the `generator` argument in torch.multinomial(..., generator=generator): seeded draws repeat.")
def test_sample_generator_used(student, ref):
    """sample_next_token: do two calls draw the same tokens under the same global seed (no hidden randomness)?"""
    z = row(16, V=6).expand(300, -1)
    a = student.sample_next_token(z, 1.0)
    b = student.sample_next_token(z, 1.0)
    expect_close(a, b, "two calls made with the same seed (the draws should repeat)")


# ================================================================ attend_with_cache
@graded("attend_with_cache", points=2,
        hint="Without a cache it is causal attention: mask[i, j] = j <= i, scores q.k / sqrt(d).")
def test_attend_no_cache(student, ref):
    """attend_with_cache: without a cache, is it causal scaled dot-product attention returning (out, (k, v))?"""
    q, k, v, _ = qkv_cache(20, T=5)
    got = student.attend_with_cache(q, k, v)
    expect(isinstance(got, (tuple, list)) and len(got) == 2, "return (out, (k_all, v_all))")
    want = ref.attend_with_cache(q, k, v)
    ones = torch.ones(5, 5, dtype=torch.bool)
    expect_close(got[0], want[0], "the output", mistakes={
        "no causal mask": mask_attention(q, k, v, ones),
        "causal mask off by one (a position must see itself)": torch.nan_to_num(mask_attention(q, k, v, ones.tril(-1))),
        "no scaling by 1/sqrt(d)": mask_attention(q * math.sqrt(8), k, v, ones.tril()),
    })
    expect_close(got[1], want[1], "the returned (k_all, v_all)")


@graded("attend_with_cache", points=2,
        hint="Concatenate the cache and the new keys/values along the POSITION axis, dim 2 of (B, H, S, d): "
             "torch.cat([k_cache, k], dim=2).")
def test_attend_cache_layout(student, ref):
    """attend_with_cache: is the returned cache the cached keys then the new ones along the positions, (B, H, S+T, d)?"""
    q, k, v, cache = qkv_cache(21, B=1, H=1, S=3, T=3)
    got = student.attend_with_cache(q, k, v, cache)
    expect(isinstance(got, (tuple, list)) and len(got) == 2 and isinstance(got[1], (tuple, list))
           and len(got[1]) == 2, "return (out, (k_all, v_all))")
    kc, vc = cache
    expect_cache_cat(got[1][0], kc, k, "k_all", mistakes={
        "the cache concatenated on the wrong axis (heads, dim 1; positions are dim 2)": torch.cat([kc, k], 1),
        "the cache concatenated on the wrong axis (features, dim -1; positions are dim 2)": torch.cat([kc, k], -1),
        "the cache concatenated on the wrong axis (batch, dim 0; positions are dim 2)": torch.cat([kc, k], 0),
        "new keys before the cached ones (the cache comes first)": torch.cat([k, kc], 2),
    })
    expect_cache_cat(got[1][1], vc, v, "v_all", mistakes={
        "the cache concatenated on the wrong axis (heads, dim 1; positions are dim 2)": torch.cat([vc, v], 1),
        "the cache concatenated on the wrong axis (features, dim -1; positions are dim 2)": torch.cat([vc, v], -1),
        "keys and values swapped": torch.cat([kc, k], 2)})


@graded("attend_with_cache", points=3,
        hint="New position i sits at S + i: it sees every cached position and new positions <= i, "
             "i.e. mask = ones(T, S+T).tril(S).")
def test_attend_cached_step(student, ref):
    """attend_with_cache: with S=4 cached and T=3 new positions, does each new one see the cache and new ones <= itself?"""
    q, k, v, cache = qkv_cache(22, S=4, T=3)
    got = student.attend_with_cache(q, k, v, cache)
    want = ref.attend_with_cache(q, k, v, cache)
    k_all, v_all = want[1]
    expect(isinstance(got, (tuple, list)) and len(got) == 2, "return (out, (k_all, v_all))")
    expect_close(got[0], want[0], "the output of the cached step",
                 mistakes=cache_offset_variants(q, k_all, v_all, 4, 3))
    expect_close(got[1], want[1], "the returned (k_all, v_all)")


@graded("attend_with_cache", points=2,
        hint="Token by token with the cache must equal all positions at once: each step's output and cache.")
def test_attend_incremental(student, ref):
    """attend_with_cache: fed one position at a time (T=1 steps), does it reproduce full causal attention?"""
    q, k, v, _ = qkv_cache(23, B=2, H=2, T=6, d=4, dtype=torch.float64)
    full = ref.attend_with_cache(q, k, v)[0]
    cache, outs = None, []
    for t in range(6):
        out, cache = student.attend_with_cache(q[:, :, t:t + 1], k[:, :, t:t + 1], v[:, :, t:t + 1], cache)
        expect(isinstance(cache, (tuple, list)) and len(cache) == 2, "return (out, (k_all, v_all))")
        outs.append(out)
    expect(all(isinstance(o, torch.Tensor) and o.shape == (2, 2, 1, 4) for o in outs),
           "each one-position step should give an output of shape (B, H, 1, d)")
    expect_close(torch.cat(outs, 2), full, "the outputs of six one-position steps (float64)", mistakes={
        "causal mask off by one in the cached step (a new position does not see itself)":
            torch.nan_to_num(mask_attention(q, k, v, torch.ones(6, 6, dtype=torch.bool).tril(-1)))})


@graded("attend_with_cache", points=1, hint="Never modify q, k, v or the cache tensors in place; gradients must flow.")
def test_attend_unmodified_grads(student, ref):
    """attend_with_cache: are the inputs left unchanged, with the reference gradients?"""
    q, k, v, cache = qkv_cache(24, S=2, T=2)
    ct = torch.randn(2, 3, 2, 8, generator=seeded(25))
    before = (q.clone(), k.clone(), v.clone())
    call = student.call("attend_with_cache", args=(q, k, v, cache), grad_wrt=(0, 1, 2), cotangent=ct)
    expect_unmodified(before, call.inputs[:3], "attend_with_cache")
    expect_unmodified(cache, call.inputs[3], "attend_with_cache")
    qr, kr, vr = (t.clone().requires_grad_(True) for t in (q, k, v))
    (ref.attend_with_cache(qr, kr, vr, cache)[0] * ct).sum().backward()
    for name, got_g, want_g in zip("qkv", call.grads, (qr.grad, kr.grad, vr.grad)):
        expect_close(got_g, want_g, f"the gradient with respect to {name}")


@needs_cuda
@graded("attend_with_cache", points=1, hint="Create the mask on the inputs' device (device=q.device).")
def test_attend_cuda(student, ref):
    """attend_with_cache: does it run on a GPU with a cache and keep everything there?"""
    q, k, v, cache = qkv_cache(26)
    call = student.call("attend_with_cache", args=(q, k, v, cache), device="cuda")
    expect(all(d.startswith("cuda") for d in call.devices), "the outputs should stay on the inputs' device (cuda)")
    expect_close(call.value[0], ref.attend_with_cache(q, k, v, cache)[0], "the output", atol=1e-4)


# ================================================================ modules
@graded("CausalSelfAttention", points=3,
        hint="Project with w_q, w_k, w_v; split into heads (B, H, T, d_k); attend_with_cache; merge; w_o. "
             "Return (out, cache).")
def test_causal_self_attention(student, ref):
    """CausalSelfAttention: with the reference weights, do the output and the cache match, with and without a cache?"""
    m = ref_module(ref, "CausalSelfAttention", 16, 4, seed=30)
    g = seeded(31)
    x, x_new = torch.randn(2, 5, 16, generator=g), torch.randn(2, 2, 16, generator=g)
    res = student.module("CausalSelfAttention", init_args=(16, 4), state_dict=m.state_dict(), args=(x,))
    with torch.no_grad():
        want, cache = m(x)
        expect(isinstance(res.value, (tuple, list)) and len(res.value) == 2, "forward should return (out, (k, v))")
        H = 4
        no_transpose = m.w_o((torch.nn.functional.scaled_dot_product_attention(
            m.w_q(x).reshape(2, H, 5, 4), m.w_k(x).reshape(2, H, 5, 4), m.w_v(x).reshape(2, H, 5, 4),
            is_causal=True)).reshape(2, 5, 16))
        split = lambda t: t.reshape(2, 5, H, 4).transpose(1, 2)  # noqa: E731
        no_w_o = torch.nn.functional.scaled_dot_product_attention(
            split(m.w_q(x)), split(m.w_k(x)), split(m.w_v(x)), is_causal=True).transpose(1, 2).reshape(2, 5, 16)
        expect_close(res.value[0], want, "the output", mistakes={
            "heads split without a transpose": no_transpose,
            "no output projection w_o": no_w_o})
        expect_close(res.value[1], cache, "the returned cache (k, v), each (B, H, T, d_k)")
        res2 = student.module("CausalSelfAttention", init_args=(16, 4), state_dict=m.state_dict(),
                              args=(x_new, cache))
        want2 = m(x_new, cache)
        expect_close(res2.value[0], want2[0], "the output of a cached step")
        expect_close(res2.value[1], want2[1], "the cache after a cached step")


@graded("GPTBlock", points=3,
        hint="Pre-norm: a, cache = attn(ln1(x), cache); x = x + a; x = x + mlp(ln2(x)); return (x, cache).")
def test_gpt_block(student, ref):
    """GPTBlock: with the reference weights, is it the pre-norm block, returning (x, cache)?"""
    m = ref_module(ref, "GPTBlock", 16, 4, 32, seed=32)
    x = torch.randn(2, 5, 16, generator=seeded(33))
    res = student.module("GPTBlock", init_args=(16, 4, 32), state_dict=m.state_dict(), args=(x,))
    with torch.no_grad():
        want, cache = m(x)
        a = m.attn(x)[0]
        post1 = m.ln1(x + a)
        expect(isinstance(res.value, (tuple, list)) and len(res.value) == 2, "forward should return (x, cache)")
        expect_close(res.value[0], want, "the output", mistakes={
            "post-norm instead of pre-norm (GPT-2 normalises the input of each sub-layer)":
                m.ln2(post1 + m.mlp(post1)),
            "no residual connection around the attention": m.attn(m.ln1(x))[0] + m.mlp(m.ln2(m.attn(m.ln1(x))[0])),
            "ln1 and ln2 swapped": (lambda h: h + m.mlp(m.ln1(h)))(x + m.attn(m.ln2(x))[0]),
            "the MLP reads x before the attention was added":
                x + m.attn(m.ln1(x))[0] + m.mlp(m.ln2(x)),
        })
        expect_close(res.value[1], cache, "the returned cache")


@graded("GPTBlock", points=1, hint="Gradients must reach every parameter: both norms, attention and the MLP.")
def test_gpt_block_gradients(student, ref):
    """GPTBlock: do the gradients of every parameter match the reference?"""
    m = ref_module(ref, "GPTBlock", 8, 2, 16, seed=34)
    g = seeded(35)
    x, ct = torch.randn(1, 4, 8, generator=g), torch.randn(1, 4, 8, generator=g)
    res = student.module("GPTBlock", init_args=(8, 2, 16), state_dict=m.state_dict(), args=(x,), grad=True,
                         cotangent=ct)
    m.zero_grad()
    (m(x)[0] * ct).sum().backward()
    for name, p in m.named_parameters():
        expect(name in res.param_grads, f"no gradient reached {name}")
        expect_close(res.param_grads[name], p.grad, f"the gradient of {name}", atol=1e-4)


def gpt_no_pos(m, tokens):
    h = m.tok_embed(tokens)
    for b in m.blocks:
        h = b(h)[0]
    return m.head(m.ln_f(h))


def gpt_no_final_norm(m, tokens):
    h = m.tok_embed(tokens) + m.pos_embed(torch.arange(tokens.shape[1]))
    for b in m.blocks:
        h = b(h)[0]
    return m.head(h)


@graded("GPT", points=3,
        hint="h = tok_embed(tokens) + pos_embed(arange(S, S+T)); every block; ln_f; head. Return (logits, caches).")
def test_gpt_logits(student, ref):
    """GPT: with the reference weights, do the logits and the per-layer caches match?"""
    m = ref_module(ref, "GPT", *GPT_ARGS, seed=40)
    tokens = torch.randint(0, 11, (2, 7), generator=seeded(41))
    res = student.module("GPT", init_args=GPT_ARGS, state_dict=m.state_dict(), args=(tokens,))
    with torch.no_grad():
        want, caches = m(tokens)
        expect(isinstance(res.value, (tuple, list)) and len(res.value) == 2, "forward should return (logits, caches)")
        expect_close(res.value[0], want, "the logits", atol=1e-4, mistakes={
            "no position embeddings": gpt_no_pos(m, tokens),
            "no final LayerNorm ln_f (pre-norm needs one after the last block)": gpt_no_final_norm(m, tokens),
        })
        expect_close(res.value[1], caches, "the caches (one (k, v) pair per block)", atol=1e-4)


@graded("GPT", points=2,
        hint="With caches, the new tokens sit at positions S..S+T-1 (S = caches[0][0].shape[2]): offset the position "
             "embeddings, and pass each block its own cache.")
def test_gpt_cached(student, ref):
    """GPT: does a call with caches give the logits of the last positions of one full call?"""
    m = ref_module(ref, "GPT", *GPT_ARGS, seed=42)
    tokens = torch.randint(0, 11, (2, 9), generator=seeded(43))
    with torch.no_grad():
        _, caches = m(tokens[:, :6])
        full, _ = m(tokens)
        no_offset = m.head(m.ln_f((lambda h: [h := b(h, c)[0] for b, c in zip(m.blocks, caches)][-1])(
            m.tok_embed(tokens[:, 6:]) + m.pos_embed(torch.arange(3)))))
    res = student.module("GPT", init_args=GPT_ARGS, state_dict=m.state_dict(), args=(tokens[:, 6:], caches))
    expect(isinstance(res.value, (tuple, list)) and len(res.value) == 2, "forward should return (logits, caches)")
    expect_close(res.value[0], full[:, 6:], "the logits of 3 new tokens after 6 cached ones", atol=1e-4, mistakes={
        "position embeddings not offset by the number of cached positions": no_offset})


@graded("GPT", points=1, hint="The logits at position t must not depend on later tokens.")
def test_gpt_causal(student, ref):
    """GPT: are the logits at positions 0..3 unchanged when later tokens change?"""
    m = ref_module(ref, "GPT", *GPT_ARGS, seed=44)
    a = torch.tensor([[1, 2, 3, 4, 5, 6]])
    b = torch.tensor([[1, 2, 3, 4, 9, 10]])
    ra = student.module("GPT", init_args=GPT_ARGS, state_dict=m.state_dict(), args=(a,)).value
    rb = student.module("GPT", init_args=GPT_ARGS, state_dict=m.state_dict(), args=(b,)).value
    expect(isinstance(ra, (tuple, list)) and isinstance(rb, (tuple, list)), "forward should return (logits, caches)")
    expect_close(ra[0][:, :4], rb[0][:, :4], "the logits at positions 0..3 when tokens 4, 5 change "
                 "(they changed: the causal mask is missing or off by one)")


@needs_cuda
@graded("GPT", points=1, hint="Create the positions on the tokens' device.")
def test_gpt_cuda(student, ref):
    """GPT: does it run on a GPU, with and without caches?"""
    m = ref_module(ref, "GPT", *GPT_ARGS, seed=45)
    tokens = torch.randint(0, 11, (2, 5), generator=seeded(46))
    res = student.module("GPT", init_args=GPT_ARGS, state_dict=m.state_dict(), method="generate",
                         args=(tokens, 4), kwargs={"temperature": 0.0}, device="cuda")
    expect(all(d.startswith("cuda") for d in res.devices), "the output should be on cuda")
    expect_close(res.value, ref.generate(m, tokens, 4, temperature=0.0), "the greedy tokens generated on cuda")


# ================================================================ generate
DEPENDS = " (These tests run your generate on your own GPT with reference weights: make GPT pass first.)"


@graded("generate", points=2,
        hint="Append sample_next_token(logits of the LAST position) max_new_tokens times; return prompt + new tokens."
             + DEPENDS)
def test_generate_greedy(student, ref):
    """generate: at temperature 0, are the generated tokens the reference's, with and without the cache?"""
    m = ref_module(ref, "GPT", *GPT_ARGS, seed=50)
    prompt = torch.randint(0, 11, (3, 4), generator=seeded(51))
    want = ref.generate(m, prompt, 10, temperature=0.0)
    for use_cache in (False, True):
        res = student.module("GPT", init_args=GPT_ARGS, state_dict=m.state_dict(), method="generate",
                             args=(prompt, 10), kwargs={"temperature": 0.0, "use_cache": use_cache})
        expect_close_named(res.value, want, f"the greedy tokens with use_cache={use_cache}", mistakes={
            "only the new tokens returned (return the prompt followed by them)": want[:, 4:],
            "one token too few": want[:, :-1]})


@graded("generate", points=2,
        hint="With the cache, feed the prompt once, then only the newest token together with the caches the model "
             "returned." + DEPENDS)
def test_generate_cache_identical_sampling(student, ref):
    """generate: when sampling (top-k 5, temperature 1.3) under the same seed, are the tokens identical with and without the cache?"""
    m = ref_module(ref, "GPT", *GPT_ARGS, seed=52)
    prompt = torch.randint(0, 11, (4, 3), generator=seeded(53))
    kw = {"temperature": 1.3, "top_k": 5}
    a = student.module("GPT", init_args=GPT_ARGS, state_dict=m.state_dict(), method="generate",
                       args=(prompt, 12), kwargs={**kw, "use_cache": False}).value
    b = student.module("GPT", init_args=GPT_ARGS, state_dict=m.state_dict(), method="generate",
                       args=(prompt, 12), kwargs={**kw, "use_cache": True}).value
    expect(isinstance(a, torch.Tensor) and a.shape == (4, 15), "generate should return (B, T0 + max_new_tokens)")
    expect(torch.equal(a[:, :3], prompt), "the output should start with the prompt")
    expect_close(b, a, "the tokens sampled with the cache against those without it")
    # every sampled token lies in the top 5 of the reference logits of its prefix
    with torch.no_grad():
        logits, _ = m(a[:, :-1])
    top = logits[:, 2:].topk(5, -1).indices
    expect(bool((top == a[:, 3:, None]).any(-1).all()), "a token outside the top-k was generated")


@graded("generate", points=1, hint="max_new_tokens=0 returns the prompt; a batch of one works." + DEPENDS)
def test_generate_edges(student, ref):
    """generate: with max_new_tokens 0 and 1, and up to max_len, is the output right?"""
    m = ref_module(ref, "GPT", *GPT_ARGS, seed=54)
    prompt = torch.randint(0, 11, (1, 5), generator=seeded(55))
    for n in (0, 1, 19):
        res = student.module("GPT", init_args=GPT_ARGS, state_dict=m.state_dict(), method="generate",
                             args=(prompt, n), kwargs={"temperature": 0.0, "use_cache": True})
        expect_close(res.value, ref.generate(m, prompt, n, temperature=0.0), f"generate with max_new_tokens={n}")


# ---------------------------------------------------------------- prefix matching (induction heads)
def causal_weights(B: int, H: int, T: int, g: torch.Generator) -> torch.Tensor:
    """Random causal attention weights (B, H, T, T), rows summing to 1."""
    scores = torch.randn(B, H, T, T, generator=g)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    return scores.masked_fill(~mask, float("-inf")).softmax(-1)


def prefix_variant(attn: torch.Tensor, tokens: torch.Tensor, shift: int = 1, strict: bool = True,
                   last_only: bool = False, pool: str = "all") -> torch.Tensor:
    """prefix_matching_score and its known-wrong variants (trusted side only)."""
    B, H, T, _ = attn.shape
    same = tokens[:, :, None] == tokens[:, None, :]                                   # [i, j]
    earlier = same & torch.ones(T, T, dtype=torch.bool).tril(-1 if strict else 0)
    if last_only:                                                       # only the latest j
        idx = torch.arange(T)
        last = torch.where(earlier, idx, -1).max(-1).values                            # (B, T)
        earlier = (idx[None, None, :] == last[:, :, None]) & (last[:, :, None] >= 0)
    target = torch.zeros_like(earlier)
    if shift >= 0:
        target[:, :, shift:] = earlier[:, :, :T - shift]
    repeats = earlier.any(-1) if pool != "every" else torch.ones(B, T, dtype=torch.bool)
    mass = (attn * target[:, None]).sum(-1) * repeats[:, None]                          # (B, H, T)
    if pool == "per_sequence":
        return (mass.sum(2) / repeats.sum(1, keepdim=True).clamp(min=1)).mean(0)
    return mass.sum((0, 2)) / repeats.sum().clamp(min=1)


@graded("prefix_matching_score", points=2,
        hint="For query i, find the earlier positions j < i with the same token and sum the attention "
             "from i to j + 1 (the token AFTER the earlier occurrence); average over the positions that "
             "repeat, pooled over the batch.")
def test_prefix_matching_matches_reference(student, ref):
    """prefix_matching_score: does it match the reference on random causal weights and tokens with repeats?"""
    g = seeded(70)
    attn = causal_weights(3, 4, 14, g)
    tokens = torch.randint(0, 5, (3, 14), generator=g)
    call = student.call("prefix_matching_score", args=(attn, tokens))
    want = ref.prefix_matching_score(attn, tokens)
    expect_close(call.value, want, "the scores", mistakes={
        "attends to the earlier occurrence itself (j), not the token after it (j + 1)":
            prefix_variant(attn, tokens, shift=0),
        "the token two after the earlier occurrence (j + 2), not j + 1": prefix_variant(attn, tokens, shift=2),
        "only the latest earlier occurrence counted": prefix_variant(attn, tokens, last_only=True),
        "averaged over every position, not only the repeating ones (or a position counted as its own "
        "earlier occurrence, j <= i)": prefix_variant(attn, tokens, pool="every"),
        "the mean of per-sequence means, not one mean over all repeating positions":
            prefix_variant(attn, tokens, pool="per_sequence"),
    })
    expect_unmodified(attn, call.inputs[0], "prefix_matching_score")
    expect_unmodified(tokens, call.inputs[1], "prefix_matching_score")


@graded("prefix_matching_score", points=1,
        hint="A head that always attends to the token right after the earlier occurrence scores 1; one "
             "that attends to the occurrence itself scores 0.")
def test_prefix_matching_known_heads(student, ref):
    """prefix_matching_score: does an ideal induction head score 1 and a duplicate-token head 0?"""
    g = seeded(71)
    half = torch.randperm(7, generator=g)[:6]
    tokens = torch.cat([half, half])[None]                               # (1, 12): repeated once
    T = 12
    attn = torch.zeros(1, 3, T, T)
    attn[0, :, torch.arange(T), torch.arange(T)] = 1.0                   # default: attend to self
    for i in range(6, T):
        attn[0, 0, i] = 0
        attn[0, 0, i, i - 5] = 1.0                                       # induction: after the earlier copy
        attn[0, 1, i] = 0
        attn[0, 1, i, i - 6] = 1.0                                       # duplicate token: the copy itself
    got = student.prefix_matching_score(attn, tokens)
    expect_close(got, torch.tensor([1.0, 0.0, 0.0]), "the scores of an induction head, a duplicate-token "
                 "head and a head that attends to itself", mistakes={
                     "attends to the earlier occurrence itself (j), not the token after it (j + 1)":
                         torch.tensor([0.0, 1.0, 0.0])})


@graded("prefix_matching_score", points=1,
        hint="Sequences with no repeated token give 0 for every head, not NaN.")
def test_prefix_matching_no_repeats(student, ref):
    """prefix_matching_score: with no repeated token, is every head's score 0 (not NaN)?"""
    attn = causal_weights(2, 3, 6, seeded(72))
    tokens = torch.arange(12).reshape(2, 6)
    got = student.prefix_matching_score(attn, tokens)
    expect_close(got, torch.zeros(3), "the scores when no token repeats")
