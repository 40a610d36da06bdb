"""Hidden graders of chapter 01: autoregressive models, the RNN encoder-decoder and beam search."""
from __future__ import annotations

import itertools
import math

import torch

from autograder.harness.check import expect, expect_close, expect_unmodified, graded, needs_cuda, seeded

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
