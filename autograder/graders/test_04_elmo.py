"""Hidden graders of chapter 04, ELMo."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from autograder.harness.check import (expect, expect_close, expect_unmodified, graded, needs_cuda,
                                      reference_cache, seeded)

BILM_ARGS = (12, 15)
BILM_KW = {"d": 6, "n_layers": 2, "n_highway": 2, "char_dim": 5, "widths": (1, 2, 3), "n_filters": 4}


@reference_cache
def ref_bilm(ref, seed: int):
    torch.manual_seed(seed)
    return ref.BiLM(*BILM_ARGS, **BILM_KW).eval()


def chars_batch(seed: int) -> torch.Tensor:
    g = seeded(seed)
    chars = torch.randint(1, 12, (3, 5, 6), generator=g)
    chars[1, 3:] = 0
    chars[2, 4:] = 0
    chars[:, :, 5] = 0
    return chars


def mask_of(chars):
    return (chars != 0).any(-1)


def nll(logits, targets, pad_id, pooled_pads=False):
    V = logits.shape[-1]
    return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1),
                           ignore_index=-100 if pooled_pads else pad_id)


# ================================================================ scalar_mix
@graded("scalar_mix", points=3, hint="w = softmax(s_logits); return gamma * sum_j w[j] * layers[j].")
def test_scalar_mix(student, ref):
    """scalar_mix: does it match gamma * sum_j softmax(s)_j layers[j]?"""
    g = seeded(0)
    layers, s, gamma = torch.randn(3, 2, 4, 5, generator=g), torch.randn(3, generator=g), torch.tensor(1.7)
    want = ref.scalar_mix(layers, s, gamma)
    expect_close(student.scalar_mix(layers, s, gamma), want, "the mix", mistakes={
        "mixing weights not softmaxed": gamma * torch.einsum("l,lbtd->btd", s, layers),
        "gamma left out": want / gamma,
        "a plain mean of the layers": gamma * layers.mean(0),
    })


@graded("scalar_mix", points=1, hint="Keep the dtype, do not modify inputs, let gradients reach s and gamma.")
def test_scalar_mix_grads(student, ref):
    """scalar_mix: float64, inputs unchanged, gradients with respect to layers, s and gamma?"""
    g = seeded(1)
    layers = torch.randn(2, 1, 3, 4, dtype=torch.float64, generator=g)
    s, gamma = torch.randn(2, dtype=torch.float64, generator=g), torch.tensor(0.5, dtype=torch.float64)
    before = (layers.clone(), s.clone(), gamma.clone())
    call = student.call("scalar_mix", args=(layers, s, gamma), grad_wrt=(0, 1, 2))
    lr, sr, gr = (t.clone().requires_grad_(True) for t in (layers, s, gamma))
    want = ref.scalar_mix(lr, sr, gr)
    want.sum().backward()
    expect_close(call.value, want.detach(), "the float64 mix")
    expect_unmodified(before, call.inputs, "scalar_mix")
    for name, got_g, want_g in zip(("layers", "s_logits", "gamma"), call.grads, (lr.grad, sr.grad, gr.grad)):
        expect_close(got_g, want_g, f"the gradient with respect to {name}")


@needs_cuda
@graded("scalar_mix", points=1, hint="Create nothing on the CPU: work on the inputs' device.")
def test_scalar_mix_cuda(student, ref):
    """scalar_mix: does it run on a GPU?"""
    g = seeded(2)
    layers, s, gamma = torch.randn(3, 2, 4, 5, generator=g), torch.randn(3, generator=g), torch.tensor(1.2)
    call = student.call("scalar_mix", args=(layers, s, gamma), device="cuda")
    expect(all(d.startswith("cuda") for d in call.devices), "the output should stay on cuda")
    expect_close(call.value, ref.scalar_mix(layers, s, gamma), "the mix on cuda", atol=1e-4)


# ================================================================ highway
@graded("highway", points=3, hint="g = sigmoid(x W_g^T + b_g); g * relu(x W_h^T + b_h) + (1 - g) * x.")
def test_highway(student, ref):
    """highway: does the gate weigh the transformed branch (g) and the carried input (1 - g)?"""
    g = seeded(3)
    x = torch.randn(2, 3, 5, generator=g)
    W_h, b_h, W_g, b_g = (torch.randn(5, 5, generator=g), torch.randn(5, generator=g),
                          torch.randn(5, 5, generator=g), torch.randn(5, generator=g))
    gate = torch.sigmoid(x @ W_g.T + b_g)
    h = torch.relu(x @ W_h.T + b_h)
    expect_close(student.highway(x, W_h, b_h, W_g, b_g), ref.highway(x, W_h, b_h, W_g, b_g), "the output",
                 mistakes={
                     "the highway gate applied to the wrong branch (g must multiply the transform)":
                         (1 - gate) * h + gate * x,
                     "the weights not transposed (use x @ W.T, nn.Linear layout)":
                         torch.sigmoid(x @ W_g + b_g) * torch.relu(x @ W_h + b_h)
                         + (1 - torch.sigmoid(x @ W_g + b_g)) * x,
                     "no ReLU on the transform": gate * (x @ W_h.T + b_h) + (1 - gate) * x,
                 })


@graded("highway", points=1, hint="Do not modify x in place; keep float64.")
def test_highway_float64(student, ref):
    """highway: float64 and inputs unchanged?"""
    g = seeded(4)
    args = (torch.randn(4, 3, dtype=torch.float64, generator=g), torch.randn(3, 3, dtype=torch.float64, generator=g),
            torch.randn(3, dtype=torch.float64, generator=g), torch.randn(3, 3, dtype=torch.float64, generator=g),
            torch.randn(3, dtype=torch.float64, generator=g))
    before = tuple(a.clone() for a in args)
    call = student.call("highway", args=args)
    expect_close(call.value, ref.highway(*args), "the float64 output")
    expect_unmodified(before, call.inputs, "highway")


# ================================================================ bilm_loss
@graded("bilm_loss", points=3,
        hint="Forward: logits[:, :-1] against tokens[:, 1:]; backward: logits[:, 1:] against tokens[:, :-1]; "
             "ignore pad targets; mean of the two directions' means.")
def test_bilm_loss(student, ref):
    """bilm_loss: do the shifts, the pad handling and the averaging match?"""
    g = seeded(5)
    fl, bl = torch.randn(3, 6, 9, generator=g), torch.randn(3, 6, 9, generator=g)
    tokens = torch.randint(1, 9, (3, 6), generator=g)
    tokens[1, 4:] = 0
    tokens[2, 2:] = 0
    want = ref.bilm_loss(fl, bl, tokens, 0)
    f_ok = nll(fl[:, :-1], tokens[:, 1:], 0)
    b_ok = nll(bl[:, 1:], tokens[:, :-1], 0)
    V = 9
    tf, tb = tokens[:, 1:].reshape(-1), tokens[:, :-1].reshape(-1)
    pooled = torch.cat([F.cross_entropy(fl[:, :-1].reshape(-1, V), tf, reduction="none")[tf != 0],
                        F.cross_entropy(bl[:, 1:].reshape(-1, V), tb, reduction="none")[tb != 0]]).mean()
    expect_close(student.bilm_loss(fl, bl, tokens, 0), want, "the loss", mistakes={
        "the backward LM predicting the wrong neighbour (off by one: logits at i predict tokens[i-1])":
            (f_ok + nll(bl[:, :-1], tokens[:, 1:], 0)) / 2,
        "the backward LM predicting the wrong neighbour (off by one: it predicts its own token)":
            (f_ok + nll(bl, tokens, 0)) / 2,
        "the forward LM predicting the wrong neighbour (off by one: logits at i predict tokens[i+1])":
            (nll(fl, tokens, 0) + b_ok) / 2,
        "pads counted in the loss": (nll(fl[:, :-1], tokens[:, 1:], 0, True) + nll(bl[:, 1:], tokens[:, :-1], 0, True)) / 2,
        "the sum of the two directions instead of their mean": f_ok + b_ok,
        "one mean over both directions' targets pooled (average each direction first)": pooled,
    })


@graded("bilm_loss", points=1, hint="Use pad_id, not a fixed 0; keep float64.")
def test_bilm_loss_pad_id(student, ref):
    """bilm_loss: does it use pad_id and keep float64?"""
    g = seeded(6)
    fl, bl = torch.randn(2, 5, 7, dtype=torch.float64, generator=g), torch.randn(2, 5, 7, dtype=torch.float64, generator=g)
    tokens = torch.randint(0, 6, (2, 5), generator=g)
    tokens[0, 3:] = 6
    expect_close(student.bilm_loss(fl, bl, tokens, 6), ref.bilm_loss(fl, bl, tokens, 6), "the loss with pad_id=6",
                 mistakes={"pads counted in the loss (use pad_id)": ref.bilm_loss(fl, bl, tokens, 99)})


# ================================================================ reverse_padded
@graded("reverse_padded", points=2, hint="Reverse only the first mask.sum() entries of each row; pads stay in place.")
def test_reverse_padded(student, ref):
    """reverse_padded: are only the real positions of each row reversed?"""
    g = seeded(7)
    x = torch.randn(3, 5, 2, generator=g)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0]], dtype=torch.bool)
    before = (x.clone(), mask.clone())
    call = student.call("reverse_padded", args=(x, mask))
    expect_close(call.value, ref.reverse_padded(x, mask), "the reversed rows", mistakes={
        "the whole row flipped, padding included (x.flip(1))": x.flip(1),
    })
    expect_unmodified(before, call.inputs, "reverse_padded")


# ================================================================ CharCNN
@graded("CharCNN", points=3, hint="Embed (B*T, C) -> transpose to (B*T, char_dim, C); each conv; max over positions; "
        "relu; concatenate in the order of widths; reshape to (B, T, F).")
def test_char_cnn(student, ref):
    """CharCNN: with the reference weights, do the word vectors match?"""
    torch.manual_seed(8)
    m = ref.CharCNN(12, 5, (1, 2, 3), 4).eval()
    chars = chars_batch(9)
    res = student.module("CharCNN", init_args=(12, 5, (1, 2, 3), 4), state_dict=m.state_dict(), args=(chars,))
    with torch.no_grad():
        e = m.char_embed(chars.reshape(15, 6)).transpose(1, 2)
        mean = torch.relu(torch.cat([c(e).mean(-1) for c in m.convs], -1)).reshape(3, 5, -1)
        noact = torch.cat([c(e).max(-1).values for c in m.convs], -1).reshape(3, 5, -1)
        expect_close(res.value, m(chars), "the word vectors", mistakes={
            "mean-pooling over positions instead of max-pooling": mean,
            "no ReLU after the max-pooling": noact,
        })


# ================================================================ BiLM
@graded("BiLM", points=3, hint="states[0] = [x; x]; states[j] = [fwd_j; bwd_j]; the backward LSTMs read "
        "reverse_padded(x, mask) and their outputs are reversed back.")
def test_bilm_states(student, ref):
    """BiLM: with the reference weights, do the per-layer states match at the real positions?"""
    m = ref_bilm(ref, 10)
    chars = chars_batch(11)
    mask = mask_of(chars)
    res = student.module("BiLM", init_args=BILM_ARGS, init_kwargs=BILM_KW, state_dict=m.state_dict(), args=(chars,))
    with torch.no_grad():
        want = m(chars)
        x = m.token_repr(chars)
        swapped = torch.cat([want[..., 6:], want[..., :6]], -1)
        fl = x.flip(1)
        states, f, b = [torch.cat([x, x], -1)], x, fl
        for lf, lb in zip(m.fwd_lstms, m.bwd_lstms):
            f, b = lf(f)[0], lb(b)[0]
            states.append(torch.cat([f, b.flip(1)], -1))
        flipped = torch.stack(states)
    got = res.value
    expect(isinstance(got, torch.Tensor) and got.shape == want.shape,
           f"forward should return the stacked states of shape {tuple(want.shape)}")
    keep = mask[None, :, :, None].expand_as(want)
    expect_close(got[keep], want[keep], "the states at real positions", atol=1e-5, mistakes={
        "forward and backward halves swapped (concatenate [forward; backward])": swapped[keep],
        "the backward LSTM reads the flipped padded row (use reverse_padded)": flipped[keep],
    })


@graded("BiLM", points=1, hint="Run every LSTM over all T positions, padding included (no packing, no zeroing "
        "of the padding states): the backward LSTMs read the pads after the reversed sentence.")
def test_bilm_states_at_padding(student, ref):
    """BiLM: do the states at padding positions match (each LSTM runs on over the padding)?"""
    m = ref_bilm(ref, 18)
    chars = chars_batch(19)
    pads = ~mask_of(chars)
    res = student.module("BiLM", init_args=BILM_ARGS, init_kwargs=BILM_KW, state_dict=m.state_dict(), args=(chars,))
    with torch.no_grad():
        want = m(chars)
    zeroed = torch.cat([want[:1], want[1:] * ~pads[None, :, :, None]])  # LSTM states zero at the pads
    got = res.value
    expect(isinstance(got, torch.Tensor) and got.shape == want.shape,
           f"forward should return the stacked states of shape {tuple(want.shape)}")
    at_pads = pads[None, :, :, None].expand_as(want)
    expect_close(got[at_pads], want[at_pads], "the states at padding positions", atol=1e-5, mistakes={
        "the LSTM states at padding positions are zero (packed sequences, or a mask): every LSTM should run on "
        "over the padding": zeroed[at_pads]})


@graded("BiLM", points=2, hint="The forward states at t must not depend on tokens after t, the backward ones "
        "not on tokens before t.")
def test_bilm_causal(student, ref):
    """BiLM.contextualize: does the forward half ignore the future and the backward half the past?"""
    m = ref_bilm(ref, 12)
    g = seeded(13)
    x = torch.randn(1, 6, 6, generator=g)
    y = x.clone()
    y[:, 4:] = torch.randn(1, 2, 6, generator=g)
    z = x.clone()
    z[:, :2] = torch.randn(1, 2, 6, generator=g)
    mask = torch.ones(1, 6, dtype=torch.bool)
    run = lambda inp: student.module("BiLM", init_args=BILM_ARGS, init_kwargs=BILM_KW, state_dict=m.state_dict(),  # noqa
                                     method="contextualize", args=(inp, mask)).value
    a, b, c = run(x), run(y), run(z)
    expect(isinstance(a, torch.Tensor) and a.shape == (3, 1, 6, 12), "contextualize should return (L+1, B, T, 2d)")
    expect_close(b[1:, :, :4, :6], a[1:, :, :4, :6], "the forward states at t < 4 when tokens 4, 5 change "
                 "(they changed: the forward model sees the future)")
    expect_close(c[1:, :, 2:, 6:], a[1:, :, 2:, 6:], "the backward states at t >= 2 when tokens 0, 1 change "
                 "(they changed: the backward model sees the past)")
    expect(not torch.allclose(c[1:, :, 2:, :6], a[1:, :, 2:, :6]), "the forward states ignore earlier tokens")


@graded("BiLM", points=2, hint="lm_logits applies the shared softmax layer to states[-1][..., :d] and [..., d:].")
def test_bilm_logits(student, ref):
    """BiLM.lm_logits: are both directions' logits the shared softmax of the top layer's halves?"""
    m = ref_bilm(ref, 14)
    states = torch.randn(3, 2, 4, 12, generator=seeded(15))
    res = student.module("BiLM", init_args=BILM_ARGS, init_kwargs=BILM_KW, state_dict=m.state_dict(),
                         method="lm_logits", args=(states,))
    with torch.no_grad():
        want = m.lm_logits(states)
        expect(isinstance(res.value, (tuple, list)) and len(res.value) == 2, "return (fwd_logits, bwd_logits)")
        expect_close(res.value[0], want[0], "the forward logits", mistakes={
            "logits from layer 0 instead of the top layer": m.softmax(states[0, ..., :6])})
        expect_close(res.value[1], want[1], "the backward logits")


# ================================================================ ELMo
@graded("ELMo", points=2, hint="forward: scalar_mix(self.bilm(chars), self.s, self.gamma).")
def test_elmo(student, ref):
    """ELMo: with the reference weights (s and gamma changed), does it match?"""
    torch.manual_seed(16)
    m = ref.ELMo(*BILM_ARGS, **BILM_KW).eval()
    with torch.no_grad():
        m.s.copy_(torch.tensor([0.5, -1.0, 1.5]))
        m.gamma.fill_(2.5)
    chars = chars_batch(17)
    mask = mask_of(chars)
    res = student.module("ELMo", init_args=BILM_ARGS, init_kwargs=BILM_KW, state_dict=m.state_dict(), args=(chars,))
    with torch.no_grad():
        states = m.bilm(chars)
        want = m(chars)
        keep = mask[:, :, None].expand_as(want)
        expect(isinstance(res.value, torch.Tensor) and res.value.shape == want.shape,
               f"the output should have shape {tuple(want.shape)}")
        expect_close(res.value[keep], want[keep], "the ELMo vectors", atol=1e-5, mistakes={
            "mixing weights not softmaxed": (2.5 * torch.einsum("l,lbtd->btd", m.s, states))[keep],
            "gamma left out": (want / 2.5)[keep],
        })


@graded("ELMo", points=1, hint="s: nn.Parameter(torch.zeros(n_layers + 1)); gamma: nn.Parameter(torch.tensor(1.0)).")
def test_elmo_init(student, ref):
    """ELMo: are s initialised to zeros (one per layer) and gamma to 1?"""
    res = student.module("ELMo", init_args=BILM_ARGS, init_kwargs=BILM_KW, method="state_dict", attrs=("s", "gamma"))
    expect_close(res.attrs.get("s"), torch.zeros(3), "s")
    expect_close(res.attrs.get("gamma"), torch.tensor(1.0), "gamma")
