"""Hidden graders of chapter 01: autoregressive models, the RNN encoder-decoder and beam search."""
from __future__ import annotations

import itertools
import math
from collections import Counter

import torch
from sacrebleu.metrics import BLEU

from autograder.harness.check import (expect, expect_close, expect_raises, expect_unmodified, first_seed, graded,
                                      needs_cuda, seeded)

PAD, BOS, EOS = 0, 1, 2
A, B_, C, D = 3, 4, 5, 6  # letters of the hand-built toy models (V = 7)


# ---------------------------------------------------------------- helpers (trusted side only)
def table(rules: dict, V: int = 7, T: int = 5, seed: int = 0, flat: bool = False) -> torch.Tensor:
    """ToyLM logits (1, T, V, V) from {(step, last): {token: probability}}.

    Rows not named emit <eos> with probability about 1. The rest of every row's mass is spread
    over the other tokens in tiny amounts, distinct (random) unless `flat`, so that no tie below
    the tokens a test names can change a result.
    """
    g = seeded(seed)
    tiny = torch.full((1, T, V, V), 1e-5) if flat else 1e-5 * (1 + torch.rand(1, T, V, V, generator=g))
    probs = tiny.clone()
    probs[..., EOS] = 1.0
    for (step, last), dist in rules.items():
        probs[0, step, last] = tiny[0, step, last]
        for token, p in dist.items():
            probs[0, step, last, token] = p
    return probs.log()


def random_table(seed: int, R: int = 1, T: int = 6, V: int = 7, eos_shift: float = 0.0) -> torch.Tensor:
    """Random ToyLM logits (R, T, V, V); `eos_shift` makes <eos> likelier (or, negative, never)."""
    logits = 1.5 * torch.randn(R, T, V, V, generator=seeded(seed))
    logits[..., EOS] += eos_shift
    logits[..., PAD] -= 4.0
    logits[..., BOS] -= 4.0
    return logits


# The greedy counterexample: greedy says a c <eos> (p = .24), the best is b <eos> (p = .36).
COUNTER = {(0, BOS): {A: 0.6, B_: 0.4}, (1, A): {C: 0.4, EOS: 0.32, B_: 0.28},
           (1, B_): {EOS: 0.9, C: 0.1}, (2, C): {EOS: 1.0}}
# Raw sums prefer a <eos> (p = .539); per token, b c c <eos> (p = .346, 4 tokens) wins.
LENGTH = {(0, BOS): {A: 0.55, B_: 0.45}, (1, A): {EOS: 0.98}, (1, B_): {C: 0.9, D: 0.09},
          (2, C): {C: 0.9, D: 0.09}, (3, C): {EOS: 0.95}}


def expect_tokens(got, want, what: str, mistakes: dict | None = None) -> None:
    """Token tensors: a known mistake is named even when its shape differs from the reference's."""
    for name, value in (mistakes or {}).items():
        if isinstance(got, torch.Tensor) and got.shape == value.shape and torch.equal(got, value) \
                and not (got.shape == want.shape and torch.equal(got, want)):
            expect(False, f"{what} looks like the result of a known mistake: {name}")
    expect_close(got, want, what)


def toy(ref, logits: torch.Tensor):
    return ref.ToyLM(logits)


def beam(student, logits, beam_size, max_len, n_best=1, length_norm=True, device=None):
    """The student's beam_search on ToyLM(logits), through the given ToyLM.beam."""
    return student.module("ToyLM", init_args=(logits,), method="beam", device=device,
                          args=(beam_size, max_len), kwargs={"n_best": n_best, "length_norm": length_norm}).value


def ref_beam(ref, logits, beam_size, max_len, n_best=1, length_norm=True):
    return toy(ref, logits).beam(beam_size, max_len, n_best, length_norm)


def brute_force(ref, logits: torch.Tensor, max_len: int, length_norm: bool) -> list:
    """Every sequence a search can return, (tokens, score), best first."""
    model, V = toy(ref, logits), logits.shape[-1]
    out = []
    for n in range(1, max_len + 1):
        for seq in itertools.product(range(V), repeat=n):
            if EOS in seq[:-1] or (n < max_len and seq[-1] != EOS):
                continue
            lp = sum(float(model.step_fn(torch.tensor([[BOS, *seq[:t]]]))[0, seq[t]]) for t in range(n))
            out.append((list(seq), lp / n if length_norm else lp))
    return sorted(out, key=lambda r: -r[1])


def expect_hyps(got, want, what: str, mistakes=None) -> None:
    """A beam_search result: a list of (list of ints, float) equal to `want`."""
    expect(isinstance(got, (list, tuple)), f"{what} should be a list of (tokens, score) pairs, got {type(got).__name__}")
    expect(len(got) == len(want), f"{what} should hold {len(want)} hypotheses, got {len(got)}")
    for item in got:
        expect(isinstance(item, (list, tuple)) and len(item) == 2
               and isinstance(item[0], (list, tuple)) and all(type(t) is int for t in item[0])
               and isinstance(item[1], (int, float)),
               f"each entry of {what} should be (list of int token ids, float score), got {item!r}"[:300])
    got = [(list(t), float(s)) for t, s in got]
    want = [(list(t), float(s)) for t, s in want]
    expect_close(got, want, what, rtol=1e-4, atol=1e-4, mistakes=mistakes)


def no_cumulative(ref, logits, beam_size, max_len, n_best=1, length_norm=True):
    """The mistake: rank and score by the last step's log-prob only."""
    model = toy(ref, logits)
    live, scores, finished = [[BOS]], [0.0], []
    for _ in range(max_len):
        lp = model.step_fn(torch.tensor(live)).double()
        V = lp.shape[1]
        top, idx = lp.flatten().topk(min(beam_size, lp.numel()))
        ext = [(live[j // V] + [j % V], s) for s, j in zip(top.tolist(), idx.tolist())]
        finished += [e for e in ext if e[0][-1] == EOS]
        live = [h for h, _ in ext if h[-1] != EOS]
        scores = [s for h, s in ext if h[-1] != EOS]
        if len(finished) >= n_best or not live:
            break
    else:
        finished += list(zip(live, scores))
    res = [(h[1:], s / (len(h) - 1) if length_norm else s) for h, s in finished]
    return sorted(res, key=lambda r: -r[1])[:n_best]


def bos_counted(ref, logits, beam_size, max_len, n_best=1):
    """The mistake: normalise by the length with <bos> counted."""
    raw = ref_beam(ref, logits, beam_size, max_len, n_best=100, length_norm=False)
    return sorted([(t, s / (len(t) + 1)) for t, s in raw], key=lambda r: -r[1])[:n_best]


# ================================================================ sequence_log_prob
def lp_inputs(seed: int, dtype=torch.float32):
    g = seeded(seed)
    logits = torch.randn(3, 5, 7, generator=g, dtype=dtype)
    targets = torch.randint(3, 7, (3, 5), generator=g)
    targets[1, 3:] = PAD
    targets[2, 1:] = PAD
    return logits, targets


def lp_mistakes(logits, targets):
    picked = lambda lp: lp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # noqa: E731
    return {"pad positions counted (mask the positions where targets == pad_id)":
                picked(logits.log_softmax(-1)).sum(-1),
            "log-softmax over the wrong axis (normalise over the vocabulary, the last axis)":
                picked(logits.log_softmax(1)).masked_fill(targets == PAD, 0).sum(-1),
            "no log-softmax (raw logits summed)": picked(logits).masked_fill(targets == PAD, 0).sum(-1),
            "a mean over positions instead of a sum":
                picked(logits.log_softmax(-1)).masked_fill(targets == PAD, 0).sum(-1)
                / (targets != PAD).sum(-1)}


@graded("sequence_log_prob", points=2,
        hint="log_softmax over the last axis, gather the target's entry, zero the pad positions, sum over t.")
def test_sequence_log_prob(student, ref):
    """sequence_log_prob: does it match the reference on a padded batch?"""
    logits, targets = lp_inputs(0)
    got = student.sequence_log_prob(logits, targets, PAD)
    expect_close(got, ref.sequence_log_prob(logits, targets, PAD), "log p(y)", mistakes=lp_mistakes(logits, targets))


@graded("sequence_log_prob", points=1, hint="Pad positions must not count, whatever the logits there say.")
def test_sequence_log_prob_ignores_pads(student, ref):
    """sequence_log_prob: does changing the logits at pad positions change nothing?"""
    logits, targets = lp_inputs(1)
    other = logits.clone()
    other[targets == PAD] = 100 * torch.randn(int((targets == PAD).sum()), 7, generator=seeded(2))
    a, b = student.sequence_log_prob(logits, targets, PAD), student.sequence_log_prob(other, targets, PAD)
    expect_close(b, a, "log p(y) with other logits at the pad positions", mistakes=lp_mistakes(other, targets))


@graded("sequence_log_prob", points=1, hint="Keep the logits' dtype; never modify the inputs in place; "
        "pad_id is an argument (here it is 5, not 0); keep it differentiable; a batch of one works too.")
def test_sequence_log_prob_edges(student, ref):
    """sequence_log_prob: float64 kept, another pad_id, a batch of one, inputs unmodified, gradients right?"""
    logits, targets = lp_inputs(3, torch.float64)
    targets = targets.masked_fill(targets == PAD, 5)
    res = student.call("sequence_log_prob", args=(logits, targets, 5), grad_wrt=(0,))
    want = ref.sequence_log_prob(logits.clone().requires_grad_(True), targets, 5)
    expect_close(res.value, want.detach(), "log p(y) in float64 with pad_id=5")
    expect_unmodified([logits, targets], res.inputs, "sequence_log_prob")
    leaf = logits.clone().requires_grad_(True)
    ref.sequence_log_prob(leaf, targets, 5).sum().backward()
    expect_close(res.grads[0], leaf.grad, "the gradient w.r.t. the logits")
    one = student.sequence_log_prob(logits[:1, :2].float(), targets[:1, :2], 5)
    expect_close(one, ref.sequence_log_prob(logits[:1, :2].float(), targets[:1, :2], 5), "log p(y) for a batch of one")


@needs_cuda
@graded("sequence_log_prob", points=1, hint="Build any new tensor on the inputs' device.")
def test_sequence_log_prob_cuda(student, ref):
    """sequence_log_prob: does it run on CUDA and return a CUDA tensor?"""
    logits, targets = lp_inputs(4)
    res = student.call("sequence_log_prob", args=(logits, targets, PAD), device="cuda")
    expect(res.devices and all(d.startswith("cuda") for d in res.devices), "the output should live on the GPU")
    expect_close(res.value, ref.sequence_log_prob(logits, targets, PAD), "log p(y) on CUDA", atol=1e-4)


# ================================================================ perplexity
@graded("perplexity", points=2,
        hint="exp(-(sum of log p over all non-pad targets of the batch) / (number of non-pad targets)).")
def test_perplexity(student, ref):
    """perplexity: does it match the reference on a padded batch?"""
    logits, targets = lp_inputs(5)
    real = targets != PAD
    per_seq = ref.sequence_log_prob(logits, targets, PAD)
    got = student.perplexity(logits, targets, PAD)
    expect_close(got, ref.perplexity(logits, targets, PAD), "the perplexity", mistakes={
        "pad positions counted in the number of tokens": torch.exp(-per_seq.sum() / targets.numel()),
        "a mean of the sentences' perplexities": torch.exp(-per_seq / real.sum(-1)).mean(),
        "no division by the number of tokens": torch.exp(-per_seq.sum()),
        "a mean over sentences, not tokens": torch.exp(-(per_seq / real.sum(-1)).mean()),
    })


@graded("perplexity", points=1, hint="A uniform model over V tokens has perplexity V; keep the dtype (0-d tensor).")
def test_perplexity_uniform_float64(student, ref):
    """perplexity: is a uniform model's perplexity V, as a 0-d tensor of the logits' dtype?"""
    targets = torch.tensor([[4, 5, 6, PAD], [3, PAD, PAD, PAD]])
    got = student.perplexity(torch.zeros(2, 4, 11, dtype=torch.float64), targets, PAD)
    expect_close(got, torch.tensor(11.0, dtype=torch.float64), "the perplexity of a uniform model over 11 tokens")


# ================================================================ GRULanguageModel
def ref_lm(ref, seed: int, V: int = 11, emb: int = 8, hid: int = 16):
    torch.manual_seed(seed)
    return ref.GRULanguageModel(V, emb, hid).eval()


@graded("GRULanguageModel", points=2,
        hint="embed -> nn.GRU(emb, hid, batch_first=True) -> out on every position; return logits, not probabilities.")
def test_gru_lm_forward(student, ref):
    """GRULanguageModel: with the reference weights, are its logits the reference's?"""
    m = ref_lm(ref, 0)
    tokens = torch.randint(0, 11, (3, 6), generator=seeded(1))
    res = student.module("GRULanguageModel", init_args=(11, 8, 16), state_dict=m.state_dict(), args=(tokens,))
    with torch.no_grad():
        want = m(tokens)
        time_first = m.out(m.gru(m.embed(tokens).transpose(0, 1))[0].transpose(0, 1))
    expect_close(res.value, want, "the logits", atol=1e-5, mistakes={
        "probabilities instead of logits (no softmax in forward)": want.softmax(-1),
        "log-probabilities instead of logits": want.log_softmax(-1),
        "GRU without batch_first=True (the batch was read as time)": time_first,
    })


@graded("GRULanguageModel", points=1, hint="The GRU must start from a zero state and read left to right only; "
        "gradients reach every parameter, and a batch of one works too.")
def test_gru_lm_grads_and_batch_of_one(student, ref):
    """GRULanguageModel: are the parameter gradients right, and a batch of one the same as in a batch?"""
    m = ref_lm(ref, 2, V=9, emb=6, hid=10)
    tokens = torch.randint(0, 9, (2, 5), generator=seeded(3))
    ct = torch.randn(2, 5, 9, generator=seeded(4))
    res = student.module("GRULanguageModel", init_args=(9, 6, 10), state_dict=m.state_dict(), args=(tokens,),
                         grad=True, cotangent=ct)
    m.zero_grad()
    (m(tokens) * ct).sum().backward()
    for name, p in m.named_parameters():
        expect(name in res.param_grads, f"no gradient reached the parameter {name}")
        expect_close(res.param_grads[name], p.grad, f"the gradient of {name}", atol=1e-4)
    one = student.module("GRULanguageModel", init_args=(9, 6, 10), state_dict=m.state_dict(), args=(tokens[1:],))
    with torch.no_grad():
        expect_close(one.value, m(tokens[1:]), "the logits of a batch of one", atol=1e-5)


# ================================================================ sample_decode
def sample(student, logits, max_len, batch_size, temperature, seed, device=None):
    return student.module("ToyLM", init_args=(logits,), method="sample", device=device,
                          args=(max_len, batch_size, temperature, seed)).value


def sample_running_rows_only(ref, logits, max_len, batch_size, temperature, seed):
    """The mistake: draw only for the rows still running, which shifts the generator's random stream."""
    m, g = toy(ref, logits), torch.Generator().manual_seed(seed)
    ys, done = torch.full((batch_size, 1), BOS), torch.zeros(batch_size, dtype=torch.bool)
    for _ in range(max_len):
        probs = (m.step_fn(ys) / temperature).softmax(-1)                       # (B, V)
        nxt = torch.full((batch_size,), EOS)
        nxt[~done] = torch.multinomial(probs[~done], 1, generator=g).squeeze(1)
        ys, done = torch.cat([ys, nxt[:, None]], 1), done | (nxt == EOS)
        if bool(done.all()):
            break
    return ys


@graded("sample_decode", points=2,
        hint="probs = softmax(log_probs / temperature); ONE torch.multinomial(probs, 1, generator=generator) per step "
             "for all B rows, finished rows included (their draw is replaced by EOS): drawing only for the rows "
             "still running shifts the random stream. Rows that emitted EOS keep EOS; stop when all rows have.")
def test_sample_decode_matches_reference(student, ref):
    """sample_decode: with the same seed, are its samples the reference's, at temperatures 0.5, 1 and 2?"""
    logits = random_table(10, R=4, eos_shift=0.5)
    m = toy(ref, logits)
    for temperature in (1.0, 0.5, 2.0):
        got = sample(student, logits, 7, 4, temperature, 3)
        want = m.sample(7, 4, temperature, 3)
        expect_tokens(got, want, f"the samples at temperature {temperature}", mistakes={
            "the temperature multiplies the log-probs instead of dividing them": m.sample(7, 4, 1 / temperature, 3),
            "the temperature is ignored": m.sample(7, 4, 1.0, 3),
            "a draw only for the rows still running (draw for all B rows at every step: the random stream is "
            "graded)": sample_running_rows_only(ref, logits, 7, 4, temperature, 3),
        })


@graded("sample_decode", points=1, hint="Temperature 0 is the argmax (greedy decoding), with no sampling.")
def test_sample_decode_temperature_zero(student, ref):
    """sample_decode: is temperature 0 the same as greedy decoding?"""
    logits = random_table(11, R=3, eos_shift=0.5)
    expect_close(sample(student, logits, 6, 3, 0.0, 0), toy(ref, logits).greedy(6, 3), "the tokens at temperature 0")


@graded("sample_decode", points=1, hint="After a row emits EOS it must keep emitting EOS; stop once every row has. "
                                        "Draw for all B rows at every step, finished rows included.")
def test_sample_decode_eos_padding(student, ref):
    """sample_decode: are finished rows padded with EOS, and does sampling stop when all rows are done?"""
    logits = random_table(12, R=5, eos_shift=2.0)
    got = sample(student, logits, 12, 5, 1.0, 7)
    want = toy(ref, logits).sample(12, 5, 1.0, 7)
    expect_close(got, want, "the samples (several rows finish early)")


# ================================================================ greedy_decode
def greedy(student, logits, max_len, batch_size=1, device=None):
    return student.module("ToyLM", init_args=(logits,), method="greedy", device=device,
                          args=(max_len, batch_size)).value


def greedy_no_padding(ref, logits, max_len, batch_size):
    """The mistake: rows that emitted EOS go on with their argmax."""
    m = toy(ref, logits)
    ys = torch.full((batch_size, 1), BOS)
    for _ in range(max_len):
        ys = torch.cat([ys, m.step_fn(ys).argmax(-1, keepdim=True)], 1)
        if bool((ys == EOS).any(1).all()):
            break
    return ys


@graded("greedy_decode", points=2,
        hint="Append the argmax of step_fn(prefixes) each step; rows that emitted EOS keep EOS; "
             "stop once every row has emitted EOS.")
def test_greedy_decode_batch(student, ref):
    """greedy_decode: on a batch whose rows end at different steps, is the output the reference's?"""
    # row 0 ends at step 1, row 1 at step 3, row 2 runs to max_len
    logits = random_table(20, R=3, T=6, eos_shift=-30.0)
    logits[0, 0, BOS, EOS] = 30.0
    logits[1, 2, :, EOS] = 30.0
    logits[:2, :, EOS, 3:] += 5.0  # after EOS the argmax is a letter: padding must come from the decoder
    want = toy(ref, logits).greedy(5, 3)
    expect_tokens(greedy(student, logits, 5, 3), want, "the decoded tokens", mistakes={
        "finished rows not padded with EOS": greedy_no_padding(ref, logits, 5, 3),
    })


@graded("greedy_decode", points=1, hint="Stop as soon as every row has emitted EOS (the output can be shorter "
        "than 1 + max_len); rows start with BOS.")
def test_greedy_decode_early_stop(student, ref):
    """greedy_decode: does it stop once every row has ended, and end right after an EOS at step 1?"""
    logits = random_table(21, R=2, eos_shift=-30.0)
    logits[0, 1, :, EOS] = 30.0
    logits[1, 2, :, EOS] = 30.0
    expect_close(greedy(student, logits, 8, 2), toy(ref, logits).greedy(8, 2), "the tokens (rows end at steps 2, 3)")
    first = ref.toy_table({(0, BOS): {EOS: 0.7, A: 0.2, B_: 0.1}}, V=7)
    expect_close(greedy(student, first, 5, 1), torch.tensor([[BOS, EOS]]), "the tokens when EOS comes first")


@graded("greedy_decode", points=1, hint="Without EOS, stop after exactly max_len new tokens: (B, 1 + max_len).")
def test_greedy_decode_max_len(student, ref):
    """greedy_decode: when nothing emits EOS, is the output (B, 1 + max_len), and is greedy not beam search?"""
    logits = random_table(22, R=2, eos_shift=-30.0)
    expect_close(greedy(student, logits, 4, 2), toy(ref, logits).greedy(4, 2), "the tokens (no EOS, max_len=4)")
    counter = table(COUNTER)
    expect_close(greedy(student, counter, 6), torch.tensor([[BOS, A, C, EOS]]),
                 "the greedy tokens of the counterexample (a, then c, then EOS)")


@needs_cuda
@graded("greedy_decode", points=1, hint="After the first step, keep the prefixes on the device of the log-probs.")
def test_greedy_decode_cuda(student, ref):
    """greedy_decode: with a step_fn on CUDA, does it work and return a CUDA tensor?"""
    logits = random_table(23, R=3, eos_shift=1.0)
    got = student.module("ToyLM", init_args=(logits,), method="greedy", device="cuda", args=(6, 3))
    expect(got.devices and all(d.startswith("cuda") for d in got.devices), "the tokens should live on the GPU")
    expect_close(got.value, toy(ref, logits).greedy(6, 3), "the tokens on CUDA")


@needs_cuda
@graded("sample_decode", points=1, hint="After the first step, keep the prefixes on the device of the log-probs.")
def test_sample_decode_cuda(student, ref):
    """sample_decode: with a step_fn on CUDA, does it work and return a CUDA tensor?"""
    logits = random_table(24, R=3, eos_shift=1.0)
    got = student.module("ToyLM", init_args=(logits,), method="sample", device="cuda", args=(6, 3, 0.0, 0))
    expect(got.devices and all(d.startswith("cuda") for d in got.devices), "the tokens should live on the GPU")
    expect_close(got.value, toy(ref, logits).greedy(6, 3), "the tokens at temperature 0 on CUDA")


# ================================================================ beam_search
BEAM_HINT = ("Score extensions by CUMULATIVE log-prob; keep the best beam_size of all N*V; those ending in EOS "
             "leave the beam for the finished list; stop after a step once n_best are finished or none is live.")


@graded("beam_search", points=2, hint=BEAM_HINT)
def test_beam_beats_greedy(student, ref):
    """beam_search: on the counterexample, does beam 1 return greedy's a c, and beam 2 the better b?"""
    logits = table(COUNTER)
    for k, tokens in ((1, [A, C, EOS]), (2, [B_, EOS])):
        want = ref_beam(ref, logits, k, 6, length_norm=False)
        assert want[0][0] == tokens, "reference disagrees with the hand-computed answer"
        expect_hyps(beam(student, logits, k, 6, length_norm=False), want, f"the result with beam_size={k}",
                    mistakes={"scores not cumulative (only the last token's log-prob)":
                              no_cumulative(ref, logits, k, 6, length_norm=False)})


@graded("beam_search", points=2,
        hint="With length_norm, divide each finished hypothesis's log-prob by len(tokens): BOS not counted, "
             "EOS counted. Return the n_best best, best first.")
def test_beam_length_normalisation(student, ref):
    """beam_search: does length normalisation make the long, likelier-per-token hypothesis win?"""
    logits = table(LENGTH)
    for norm, first in ((False, [A, EOS]), (True, [B_, C, C, EOS])):
        want = ref_beam(ref, logits, 2, 6, n_best=2, length_norm=norm)
        assert want[0][0] == first, "reference disagrees with the hand-computed answer"
        mistakes = {"BOS counted in the length": bos_counted(ref, logits, 2, 6, n_best=2)} if norm else {}
        mistakes["the raw sum with length_norm=True" if norm else "normalised without length_norm"] = \
            ref_beam(ref, logits, 2, 6, n_best=2, length_norm=not norm)
        expect_hyps(beam(student, logits, 2, 6, n_best=2, length_norm=norm), want,
                    f"the 2 best with length_norm={norm}", mistakes=mistakes)


@graded("beam_search", points=1, hint="An EOS at the first step finishes a hypothesis [EOS]; with n_best=1 the "
        "search stops after that step.")
def test_beam_eos_first(student, ref):
    """beam_search: when EOS is likeliest at step 1, is ([EOS], log p) returned at once?"""
    logits = table({(0, BOS): {EOS: 0.7, A: 0.2, B_: 0.1}})
    want = ref_beam(ref, logits, 2, 5)
    assert want[0][0] == [EOS]
    expect_hyps(beam(student, logits, 2, 5), want, "the result (EOS first, beam_size=2)", mistakes={
        "BOS counted in the length": bos_counted(ref, logits, 2, 5)})


@graded("beam_search", points=1, hint="After max_len steps the live hypotheses count as finished (tokens without EOS).")
def test_beam_no_eos(student, ref):
    """beam_search: when nothing ever emits EOS, are the live hypotheses returned after max_len steps?"""
    logits = random_table(30, eos_shift=-40.0)
    for norm in (True, False):
        want = ref_beam(ref, logits, 3, 4, n_best=3, length_norm=norm)
        expect_hyps(beam(student, logits, 3, 4, n_best=3, length_norm=norm), want,
                    f"the 3 best after max_len=4 steps (length_norm={norm})", mistakes={
                        "scores not cumulative (only the last token's log-prob)":
                            no_cumulative(ref, logits, 3, 4, 3, norm)})


@graded("beam_search", points=1, hint="Keep min(beam_size, N*V) extensions: the beam can be wider than the "
        "vocabulary.")
def test_beam_wider_than_vocab(student, ref):
    """beam_search: with beam_size larger than the vocabulary, is the result the reference's (and exact)?"""
    logits = random_table(31, V=5, T=4, eos_shift=0.5)
    want = ref_beam(ref, logits, 30, 2, n_best=6, length_norm=False)
    assert [t for t, _ in want] == [t for t, _ in brute_force(ref, logits, 2, False)[:6]]
    expect_hyps(beam(student, logits, 30, 2, n_best=6, length_norm=False), want,
                "the 6 best with beam_size=30, V=5, max_len=2 (every sequence fits in the beam)")
    want = ref_beam(ref, logits, 30, 3, n_best=2, length_norm=True)
    expect_hyps(beam(student, logits, 30, 3, n_best=2, length_norm=True), want,
                "the 2 best with beam_size=30, V=5, max_len=3")


@graded("beam_search", points=2, hint=BEAM_HINT + " Sort the finished by score, best first.")
def test_beam_n_best(student, ref):
    """beam_search: with n_best=3, are the three best finished hypotheses and their scores the reference's?"""
    logits = random_table(32, eos_shift=1.0)
    for k, norm in ((4, True), (5, False), (2, True)):
        want = ref_beam(ref, logits, k, 6, n_best=3, length_norm=norm)
        expect_hyps(beam(student, logits, k, 6, n_best=3, length_norm=norm), want,
                    f"the 3 best with beam_size={k}, length_norm={norm}", mistakes={
                        "scores not cumulative (only the last token's log-prob)":
                            no_cumulative(ref, logits, k, 6, 3, norm)})


@graded("beam_search", points=1, hint="Finished hypotheses (ending in EOS) leave the beam: never extend them. "
                                       "Returned tokens exclude BOS.")
def test_beam_finished_leave(student, ref):
    """beam_search: are finished hypotheses never extended (no token after EOS)?"""
    logits = random_table(33, eos_shift=2.0)
    logits[..., BOS] = -30.0  # never generated, so a hypothesis starting with BOS kept it (whatever the seed)
    logits[..., EOS, :] = -5.0
    logits[..., EOS, EOS] = 8.0   # after EOS, EOS again is very likely: a hypothesis left in the beam shows
    for k in (3, 4):
        got = beam(student, logits, k, 5, n_best=3, length_norm=True)
        for item in got if isinstance(got, (list, tuple)) else []:
            tokens = list(item[0]) if isinstance(item, (list, tuple)) and item else []
            expect(EOS not in tokens[:-1], "a returned hypothesis goes on after EOS: finished hypotheses were "
                   "left in the beam (known mistake: finished hypotheses left in the beam)")
            expect(not tokens or tokens[0] != BOS, "the tokens should not include BOS")
        expect_hyps(got, ref_beam(ref, logits, k, 5, n_best=3, length_norm=True), f"the 3 best with beam_size={k}")


@graded("beam_search", points=1, hint="Ties may be broken either way, but tied hypotheses have equal scores and "
        "both belong in the n_best.")
def test_beam_ties(student, ref):
    """beam_search: with two equally likely answers, is one (beam 1) or both (n_best=2) returned?"""
    logits = table({(0, BOS): {A: 0.4, B_: 0.4, C: 0.19}, (1, A): {EOS: 0.99}, (1, B_): {EOS: 0.99}}, flat=True)
    score = ref_beam(ref, logits, 2, 4, n_best=2)[0][1]
    got = beam(student, logits, 1, 4)
    expect(isinstance(got, (list, tuple)) and len(got) == 1 and list(got[0][0]) in ([A, EOS], [B_, EOS]),
           f"with beam_size=1 the result should be a [EOS] or b [EOS] (tied), got {got!r}"[:300])
    expect(abs(float(got[0][1]) - score) < 1e-4, "the score of the tied answer does not match the reference")
    got = beam(student, logits, 2, 4, n_best=2)
    expect(isinstance(got, (list, tuple)) and len(got) == 2
           and sorted(list(t) for t, _ in got) == [[A, EOS], [B_, EOS]],
           f"with beam_size=2, n_best=2 the result should hold both tied answers, got {got!r}"[:300])
    expect(all(abs(float(s) - score) < 1e-4 for _, s in got), "the tied scores do not match the reference")


@graded("beam_search", points=1, hint="The step_fn receives prefixes (N, t) starting with BOS; its log-probs may "
        "live on the GPU: bring the scores to the CPU (e.g. .tolist()).")
def test_beam_cpu_step_fn_float64(student, ref):
    """beam_search: does it work with a float64 step_fn and return plain Python ints and floats?"""
    logits = random_table(34, eos_shift=1.0).double()
    want = ref_beam(ref, logits, 3, 5, n_best=2)
    expect_hyps(beam(student, logits, 3, 5, n_best=2), want, "the result with float64 log-probs")


@needs_cuda
@graded("beam_search", points=1, hint="Bring the log-probs to the CPU (or keep your scores on their device).")
def test_beam_cuda(student, ref):
    """beam_search: with a step_fn on CUDA, is the result the reference's?"""
    logits = random_table(35, eos_shift=1.0)
    want = ref_beam(ref, logits, 3, 5, n_best=2)
    expect_hyps(beam(student, logits, 3, 5, n_best=2, device="cuda"), want, "the result on CUDA")


# ================================================================ corpus_bleu
# (reference, system output) pairs: English references with outputs of varied quality, written for
# these tests (perfect, near misses, paraphrases, too short, too long, repeated words, word salad).
# Tokenised: lower case, punctuation split off.
PAIRS = [
    ("the cat is sleeping on the sofa .", "the cat is sleeping on the sofa ."),
    ("we will meet at the station at noon .", "we meet at the station at midday ."),
    ("she has lived in this city for ten years .", "she lives in this city since ten years ."),
    ("the meeting was postponed until next week .", "the meeting was delayed to next week ."),
    ("i do not know where he put the keys .", "i don't know where he has put the keys ."),
    ("the children are playing in the garden .", "the children play in garden ."),
    ("could you please close the window ?", "can you close the window please ?"),
    ("the train to london leaves in five minutes .", "the train for london leaves in five minutes ."),
    ("he apologised for arriving late .", "he excused himself for the late arrival ."),
    ("this book was written by a famous scientist .", "a famous scientist wrote this book ."),
    ("the weather will be cold and rainy tomorrow .", "tomorrow the weather is cold and rainy ."),
    ("my brother works as a doctor in a small hospital .", "my brother is a doctor ."),
    ("they decided to sell the old house .", "they decided decided to sell the the old house house ."),
    ("the price of bread has risen again .", "the bread price went up once more ."),
    ("please send me the report before friday .", "send the report before friday ."),
    ("the museum is closed on mondays .", "the museum is closed on mondays ."),
    ("we need more time to finish the project .", "we need more time for finishing the project ."),
    ("she forgot her umbrella at the restaurant .", "she has forgotten her umbrella in the restaurant ."),
    ("the river flooded the whole valley last spring .", "last spring the river flooded all the valley ."),
    ("i would like a cup of coffee with milk .", "i want coffee with milk ."),
    ("the company hired twenty new employees this year .",
     "this year the company has employed twenty new workers ."),
    ("he reads the newspaper every morning .", "every morning he reads the newspaper ."),
    ("the road was blocked by a fallen tree .", "a tree fell and the road was blocked ."),
    ("our neighbours are very friendly .", "the neighbours of us are very friendly ."),
    ("the doctor told him to rest for a week .", "the doctor said him to rest one week ."),
    ("it is too late to change the plan now .", "now it is too late for changing the plan ."),
    ("the students asked many questions after the lecture .",
     "after the lecture the students asked a lot of questions ."),
    ("the bridge will be repaired next summer .", "the bridge the bridge will repair next summer ."),
    ("she speaks three languages fluently .", "she speaks fluently three languages ."),
    ("the shop around the corner sells fresh fish .", "the shop at the corner sells fresh fish ."),
    ("nobody answered the phone .", "no one answered the telephone ."),
    ("the film was longer than we expected .", "the movie was more long than we expected ."),
    ("he lost his wallet on the bus .", "he lost the wallet in the bus ."),
    ("the garden needs water every day in summer .", "in summer the garden needs water each day ."),
    ("we watched the sunset from the hill .", "from the hill we looked at the sun going down ."),
    ("the letter arrived two days late .", "the letter came with two days of delay ."),
    ("i have never seen so much snow .", "never i have seen so many snow ."),
    ("the children were tired after the long walk .", "after the long walk the children were tired ."),
    ("the teacher explained the rule again .", "the teacher explained again the rule ."),
    ("there is a small cafe near the harbour .", "near the port there is a little cafe ."),
]
VOCAB = sorted({w for pair in PAIRS for text in pair for w in text.split()})


def draw(g: torch.Generator, n: int) -> int:
    return int(torch.randint(n, (1,), generator=g))


def corrupt(tokens: list[str], g: torch.Generator) -> list[str]:
    """One seeded edit of a system output: a word dropped, repeated, swapped with the next, or replaced."""
    tokens, kind, i = list(tokens), draw(g, 4), draw(g, len(tokens))
    if kind == 0 and len(tokens) > 1:
        del tokens[i]
    elif kind == 1:
        tokens.insert(i, tokens[i])
    elif kind == 2 and i + 1 < len(tokens):
        tokens[i], tokens[i + 1] = tokens[i + 1], tokens[i]
    else:
        tokens[i] = VOCAB[draw(g, len(VOCAB))]
    return tokens


def bleu_corpus(seed: int, size: int = 24) -> tuple[list[list[str]], list[list[str]]]:
    """(hypotheses, references): `size` of PAIRS in a seeded order, about half of the outputs edited once or twice."""
    g = seeded(seed)
    hyps, refs = [], []
    for i in torch.randperm(len(PAIRS), generator=g)[:size].tolist():
        ref, out = PAIRS[i]
        hyp = out.split()
        for _ in range(draw(g, 4) // 2 + draw(g, 2) * (draw(g, 4) // 3)):
            hyp = corrupt(hyp, g)
        hyps.append(hyp)
        refs.append(ref.split())
    return hyps, refs


def sacre(hyps, refs, max_n: int = 4, smooth: str = "none") -> float:
    """sacreBLEU's corpus BLEU on the same tokens (joined by spaces, tokenize="none")."""
    bleu = BLEU(tokenize="none", smooth_method=smooth, max_ngram_order=max_n)
    return float(bleu.corpus_score([" ".join(h) for h in hyps], [[" ".join(r) for r in refs]]).score)


def grams(tokens, n):
    return Counter(tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1))


def bleu_variant(hyps, refs, max_n=4, clip=True, brevity="short", mean="geometric", drop_zeros=False) -> float:
    """BLEU computed with one known mistake: `clip=False`, `brevity` in short/none/always/swapped,
    `mean="arithmetic"`, `drop_zeros` (zero precisions left out of the mean)."""
    matches, totals = [0] * max_n, [0] * max_n
    for h, r in zip(hyps, refs):
        for n in range(1, max_n + 1):
            hg, rg = grams(h, n), grams(r, n)
            matches[n - 1] += sum((hg & rg).values()) if clip else sum(k for g, k in hg.items() if g in rg)
            totals[n - 1] += sum(hg.values())
    c, r = sum(map(len, hyps)), sum(map(len, refs))
    p = [m / t for m, t in zip(matches, totals) if t and (m or not drop_zeros)]
    if c == 0 or not p or (min(p) == 0 and mean == "geometric") or (len(p) < max_n and not drop_zeros):
        return 0.0
    bp = {"short": math.exp(1 - r / c) if c < r else 1.0, "none": 1.0, "always": math.exp(1 - r / c),
          "swapped": math.exp(1 - c / r) if c < r else 1.0}[brevity]
    avg = math.exp(sum(map(math.log, p)) / len(p)) if mean == "geometric" else sum(p) / max_n
    return 100 * bp * avg


def bleu_mistakes(hyps, refs, max_n=4) -> dict:
    """Known mistakes -> what each gives on these inputs."""
    right = sacre(hyps, refs, max_n)
    return {  # the first that matches is named: this one only differs from the right score if some are empty
        "empty hypotheses left out (an empty hypothesis still adds its reference's length to r)":
            sacre(*zip(*kept), max_n) if (kept := [(h, r) for h, r in zip(hyps, refs) if h]) else 0.0,
        "no clipping (a hypothesis n-gram matches at most as often as it occurs in the reference)":
            bleu_variant(hyps, refs, max_n, clip=False),
        "no brevity penalty (BP = exp(1 - r/c) when c < r)": bleu_variant(hyps, refs, max_n, brevity="none"),
        "the brevity penalty applied when c > r too (BP = 1 unless c < r)":
            bleu_variant(hyps, refs, max_n, brevity="always"),
        "the brevity penalty with r and c swapped (BP = exp(1 - r/c))":
            bleu_variant(hyps, refs, max_n, brevity="swapped"),
        "a mean of sentence-level BLEU scores (corpus BLEU sums the counts over the corpus, then divides)":
            sum(sacre([h], [r], max_n) for h, r in zip(hyps, refs)) / len(hyps),
        "an arithmetic mean of the precisions (BLEU takes their geometric mean)":
            bleu_variant(hyps, refs, max_n, mean="arithmetic"),
        "n-grams counted across sentence boundaries (count each sentence's n-grams separately)":
            sacre([sum(hyps, [])], [sum(refs, [])], max_n),
        "smoothing (sacreBLEU's default 'exp'; the contract has none)": sacre(hyps, refs, max_n, "exp"),
        "smoothing (add-one on n > 1; the contract has none)": sacre(hyps, refs, max_n, "add-k"),
        "zero precisions left out of the mean (no smoothing: a zero precision makes BLEU 0)":
            bleu_variant(hyps, refs, max_n, drop_zeros=True),
        "BLEU on a 0-1 scale (the contract's is 0-100)": right / 100,
        "max_n ignored (n runs from 1 to max_n)": sacre(hyps, refs, 4),
    }


def shows(hyps, refs, max_n, names) -> bool:
    """Whether each named mistake (a prefix of its description) gives another score than the right one."""
    right, wrong = sacre(hyps, refs, max_n), bleu_mistakes(hyps, refs, max_n)
    return all(abs(v - right) > 1e-3 for k, v in wrong.items() if any(k.startswith(n) for n in names))


def expect_bleu(student, ref, hyps, refs, max_n, what):
    """The student's corpus_bleu equals sacreBLEU's (to 1e-6), or names the known mistake it made."""
    want = sacre(hyps, refs, max_n)
    assert abs(ref.corpus_bleu(hyps, refs, max_n) - want) < 1e-6, "the reference disagrees with sacreBLEU"
    got = student.corpus_bleu(hyps, refs, max_n)
    expect_close(got, want, what, rtol=0, atol=1e-6, mistakes=lambda: bleu_mistakes(hyps, refs, max_n))


BLEU_HINT = ("For each n from 1 to max_n, count each sentence's n-grams, clip each count by the same n-gram's count "
             "in that sentence's reference (Counter & Counter), and sum the matches and the hypothesis n-grams over "
             "the corpus before dividing; BLEU = 100 * BP * exp(mean of log p_n).")


@graded("corpus_bleu", points=3, hint=BLEU_HINT)
def test_bleu_matches_sacrebleu(student, ref):
    """corpus_bleu: on 24 system outputs of varied quality, does it equal sacreBLEU's corpus BLEU?"""
    names = ("no clipping", "a mean of sentence", "an arithmetic", "n-grams counted across", "smoothing (add")
    seed = first_seed(40, lambda s: shows(*bleu_corpus(s), 4, names))
    hyps, refs = bleu_corpus(seed)
    expect_bleu(student, ref, hyps, refs, 4, "BLEU of 24 system outputs")


@graded("corpus_bleu", points=1, hint="Clipping: a hypothesis n-gram is a match at most as many times as it occurs "
        "in its reference (the minimum of the two counts: Counter & Counter), so repeating a right word gains "
        "nothing.")
def test_bleu_clipping(student, ref):
    """corpus_bleu: do repeated words count only as often as the reference has them (clipping)?"""
    g = seeded(41)
    hyps, refs = bleu_corpus(42, size=8)
    for h, r in zip(hyps, refs):
        word = r[draw(g, len(r))]
        h += [word] * (r.count(word) + 1)   # more copies of `word` than the reference holds
    for max_n in (1, 2):
        expect_bleu(student, ref, hyps, refs, max_n, f"BLEU with max_n={max_n} of outputs that repeat a word")
    expect_bleu(student, ref, [["the"] * 7], [["the", "cat", "is", "on", "the", "mat"]], 1,
                "the unigram BLEU of 'the the the the the the the' against 'the cat is on the mat'")


@graded("corpus_bleu", points=2, hint="The brevity penalty: BP = exp(1 - r/c) only when the total hypothesis length c "
        "is below the total reference length r (corpus totals, not per sentence); else BP = 1: long outputs are "
        "not penalised.")
def test_bleu_brevity_penalty(student, ref):
    """corpus_bleu: is the brevity penalty exp(1 - r/c) on short outputs (c < r), and 1 on long ones (c > r)?"""
    g = seeded(43)
    hyps, refs = bleu_corpus(44, size=12)
    short = [h[:max(1, (2 * len(h)) // 3)] for h in hyps]          # c < r
    long = [h + [VOCAB[draw(g, len(VOCAB))] for _ in range(3)] for h in hyps]   # c > r
    expect(sum(map(len, short)) < sum(map(len, refs)) < sum(map(len, long)), "the test's inputs are wrong")
    expect_bleu(student, ref, short, refs, 4, "BLEU of outputs cut short (c < r)")
    expect_bleu(student, ref, long, refs, 4, "BLEU of outputs with extra words (c > r)")


@graded("corpus_bleu", points=2, hint="Corpus level: sum the clipped matches and the n-gram counts over all "
        "sentences, then divide; never average sentence scores. Count each sentence's n-grams separately: none "
        "spans two sentences.")
def test_bleu_corpus_level(student, ref):
    """corpus_bleu: are the counts summed over the sentences (not a mean of sentence BLEU, no n-gram across two)?"""
    names = ("a mean of sentence", "n-grams counted across")
    seed = first_seed(45, lambda s: shows(*bleu_corpus(s, 16), 4, names))
    hyps, refs = bleu_corpus(seed, size=16)
    expect_bleu(student, ref, hyps, refs, 4, "BLEU of 16 system outputs")
    hyps, refs = [h[:3] for h in hyps[:6]], [r[:4] for r in refs[:6]]
    expect_bleu(student, ref, hyps, refs, 3, "BLEU (max_n=3) of six 3-token outputs (sentence BLEU is 0 for most)")


@graded("corpus_bleu", points=1, hint="max_n sets the orders: n = 1, ..., max_n, and the geometric mean is over "
        "those max_n precisions (weights 1/max_n).")
def test_bleu_max_n(student, ref):
    """corpus_bleu: with max_n = 1, 2 and 3, does it equal sacreBLEU's BLEU of that order?"""
    hyps, refs = bleu_corpus(46, size=12)
    for max_n in (1, 2, 3):
        expect_bleu(student, ref, hyps, refs, max_n, f"BLEU with max_n={max_n}")


@graded("corpus_bleu", points=1, hint="No smoothing: when any precision is 0 (no 4-gram matches anywhere) BLEU is "
        "0.0; do not smooth, and do not leave the zero precision out of the mean.")
def test_bleu_no_smoothing(student, ref):
    """corpus_bleu: when no 4-gram matches, is BLEU exactly 0 (no smoothing)?"""
    hyps, refs = bleu_corpus(47, size=8)
    hyps = [["<unk>" if i % 4 == 3 else w for i, w in enumerate(r)] for r in refs]   # every 4-gram has an <unk>
    expect_bleu(student, ref, hyps, refs, 4, "BLEU when no 4-gram matches")
    expect_bleu(student, ref, hyps, refs, 3, "BLEU with max_n=3 of the same outputs")


@graded("corpus_bleu", points=1, hint="Empty outputs: c = 0 (every hypothesis empty) gives 0.0, and so does a "
        "precision with no n-grams at all (every hypothesis shorter than n); an empty hypothesis still adds its "
        "reference's length to r.")
def test_bleu_empty_hypotheses(student, ref):
    """corpus_bleu: empty outputs: all empty (0.0), all shorter than n (0.0), and some empty among others?"""
    hyps, refs = bleu_corpus(48, size=10)
    expect_close(student.corpus_bleu([[] for _ in refs], refs), 0.0, "BLEU when every hypothesis is empty",
                 rtol=0, atol=1e-6)
    expect_bleu(student, ref, [h[:2] for h in hyps], refs, 4, "BLEU when every hypothesis has 2 tokens (max_n=4)")
    g = seeded(49)
    some = [[] if draw(g, 3) == 0 else h for h in hyps]
    some[0] = []
    expect_bleu(student, ref, some, refs, 2, "BLEU (max_n=2) when some hypotheses are empty")


@graded("corpus_bleu", points=1, hint="Return a Python float; raise ValueError if hypotheses and references "
        "differ in their lengths (equally long lists of token lists); never modify the lists you are given.")
def test_bleu_float_inputs_unmodified_and_lengths(student, ref):
    """corpus_bleu: a Python float, inputs unmodified, and a ValueError when the lengths differ?"""
    hyps, refs = bleu_corpus(50, size=6)
    res = student.call("corpus_bleu", args=(hyps, refs))
    expect(isinstance(res.value, float), f"corpus_bleu should return a Python float, got {type(res.value).__name__}")
    expect(list(res.inputs) == [hyps, refs], "corpus_bleu modified the lists it was given")
    expect_close(res.value, sacre(hyps, refs), "BLEU of 6 system outputs", rtol=0, atol=1e-6)
    expect_raises(lambda: student.corpus_bleu(hyps, refs[:-1]), "ValueError",
                  "corpus_bleu with 6 hypotheses and 5 references")
