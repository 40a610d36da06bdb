"""Hidden graders of chapter 06, BERT and its family (with subword tokenizers)."""
from __future__ import annotations

import itertools
import math
import re
from collections import Counter

import torch
import torch.nn.functional as F

from autograder.harness.check import (expect, expect_close, expect_raises, expect_unmodified, graded, needs_cuda,
                                      reference_cache, seeded)

CLS, SEP, MASK = 1, 2, 3


# ---------------------------------------------------------------- helpers (trusted side only)
def segments_variant(n_a: int, n_b: int | None, first_sep: int, last_sep: int, cls: int = 0) -> torch.Tensor:
    """Segment ids with chosen segments for [CLS] and the two [SEP]s (the off-by-one mistakes)."""
    seg = [cls] + [0] * n_a + [first_sep]
    if n_b is not None:
        seg += [1] * n_b + [last_sep]
    return torch.tensor(seg)


@reference_cache
def mlm_batch(seed: int, B: int, T: int, vocab: int = 1000, pad_from: float = 0.8):
    """Ids in [5, vocab), [CLS] first, [SEP] last real token, padding (id 0) after a random length."""
    g = seeded(seed)
    x = torch.randint(5, vocab, (B, T), generator=g)
    lengths = torch.randint(int(pad_from * T), T + 1, (B,), generator=g)
    pos = torch.arange(T)[None, :]
    x[:, 0] = CLS
    x = torch.where(pos == (lengths - 1)[:, None], torch.full_like(x, SEP), x)
    x = torch.where(pos >= lengths[:, None], torch.zeros_like(x), x)
    special = (x == 0) | (x == CLS) | (x == SEP)
    return x, special


def split_fractions(x, inputs, labels):
    """(selected, [MASK], changed to another token, unchanged) fractions of the selected tokens."""
    sel = labels != -100
    n = int(sel.sum())
    got, orig = inputs[sel], x[sel]
    masked = (got == MASK).double().mean().item()
    same = (got == orig).double().mean().item()
    return n, masked, 1.0 - masked - same, same


def nsp_docs(seed: int, n_docs: int = 300):
    """Documents of unique sentences "d{doc}s{i}" (some empty or with one sentence)."""
    g = seeded(seed)
    sizes = torch.randint(0, 8, (n_docs,), generator=g).tolist()
    sizes[0] = max(sizes[0], 2)
    return [[f"d{d}s{i}" for i in range(k)] for d, k in enumerate(sizes)]


def doc_of(sentence: str) -> int:
    return int(re.match(r"d(\d+)s", sentence).group(1))


def wp_variant(word, vocab, unk="[UNK]", max_chars=100, shortest=False, hashes=True, unk_piece=False):
    """WordPiece with switchable mistakes."""
    if len(word) > max_chars:
        return [unk]
    out, start = [], 0
    while start < len(word):
        ends = range(start + 1, len(word) + 1) if shortest else range(len(word), start, -1)
        piece = None
        for end in ends:
            cand = ("##" if start > 0 and hashes else "") + word[start:end]
            if cand in vocab:
                piece = cand
                break
        if piece is None:
            if unk_piece:
                out.append(unk)
                break
            return [unk]
        out.append(piece)
        start = end
    return out


def merge(symbols, pair):
    out, i = [], 0
    while i < len(symbols):
        if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == pair:
            out.append(symbols[i] + symbols[i + 1])
            i += 2
        else:
            out.append(symbols[i])
            i += 1
    return tuple(out)


def bpe_train_variant(word_freqs, n, end=("</w>",), weighted=True, largest_tie=False, once_per_word=False):
    words = {tuple(w) + end: f for w, f in word_freqs.items()}
    merges = []
    for _ in range(n):
        counts = Counter()
        for s, f in words.items():
            pairs = list(zip(s, s[1:]))
            for p in (set(pairs) if once_per_word else pairs):
                counts[p] += f if weighted else 1
        if not counts:
            break
        top = max(counts.values())
        tied = sorted(p for p, c in counts.items() if c == top)
        best = tied[-1] if largest_tie else tied[0]
        merges.append(best)
        words = {merge(s, best): f for s, f in words.items()}
    return merges


def bpe_encode_variant(word, merges, how):
    symbols = tuple(word) + ("</w>",)
    if how == "reversed":
        for p in reversed(merges):
            symbols = merge(symbols, tuple(p))
        return list(symbols)
    rank = {tuple(p): r for r, p in enumerate(merges)}
    while True:  # "leftmost": merge the first pair (left to right) that is a merge at all
        pairs = [p for p in zip(symbols, symbols[1:]) if p in rank]
        if not pairs:
            return list(symbols)
        symbols = merge(symbols, pairs[0])


def hidden(seed: int, L: int = 6, B: int = 2, T: int = 3, D: int = 4, dtype=torch.float32):
    g = seeded(seed)
    return [torch.randn(B, T, D, generator=g, dtype=dtype) for _ in range(L + 1)]


def ref_embeddings(ref, seed: int, V: int = 30, D: int = 16, max_len: int = 20):
    torch.manual_seed(seed)
    m = ref.BertEmbeddings(V, D, max_len)
    g = seeded(seed + 1000)
    with torch.no_grad():
        m.norm.weight.add_(0.3 * torch.randn(D, generator=g))
        m.norm.bias.add_(0.3 * torch.randn(D, generator=g))
    return m.eval()


def emb_manual(m, ids, seg, *, norm=True, pos_offset=0, use_seg=True, norm_before_pos=False):
    T = ids.shape[1]
    pos = m.position(torch.arange(T) + pos_offset)
    x = m.token(ids) + (m.segment(seg) if use_seg else 0)
    if norm_before_pos:
        return m.norm(x) + pos
    x = x + pos
    return m.norm(x) if norm else x


def infill_spans(original: list[int], out: list[int], mask_id: int):
    """Align BART's output with distinct original tokens: the span length behind every mask,
    or a message saying why the output is not a text-infilled version of the original."""
    where = {t: i for i, t in enumerate(original)}
    spans, pos, prev_mask = [], 0, False
    for t in out:
        if t == mask_id:
            if prev_mask:
                return None, "two masks are adjacent: each span (even of length 0) should be one mask " \
                             "in its own gap between kept tokens"
            spans.append(None)
            prev_mask = True
            continue
        if t not in where or where[t] < pos:
            return None, "the kept tokens are not the original tokens in their original order"
        gap = where[t] - pos
        if prev_mask:
            spans[-1] = gap
        elif gap:
            return None, "tokens are missing where there is no mask"
        pos, prev_mask = where[t] + 1, False
    gap = len(original) - pos
    if prev_mask:
        spans[-1] = gap
    elif gap:
        return None, "tokens are missing at the end where there is no mask"
    return spans, ""


def t5_restore(inputs, targets, sentinels):
    spans, cur = {}, None
    for t in targets:
        if t in sentinels:
            cur = t
            spans[cur] = []
        elif cur is None:
            return None
        else:
            spans[cur].append(t)
    out = []
    for t in inputs:
        out += spans.get(t, []) if t in sentinels else [t]
    return out


# ================================================================ bert_input
@graded("bert_input", points=2, hint="[CLS] A [SEP] B [SEP]; segment 0 up to and including the first [SEP], "
                                     "segment 1 for B and the final [SEP].")
def test_bert_input_pair(student, ref):
    """bert_input: for a pair of segments, do the ids and the segment ids match?"""
    a, b = [11, 12, 13, 14], [21, 22, 23]
    ids, seg = student.bert_input(a, b, cls_id=CLS, sep_id=SEP)
    want_ids, want_seg = ref.bert_input(a, b, cls_id=CLS, sep_id=SEP)
    expect(not (isinstance(ids, torch.Tensor) and torch.equal(ids, want_ids[:-1])),
           "input_ids looks like the result of a known mistake: the final [SEP] is missing")
    expect_close(ids, want_ids, "input_ids")
    expect_close(seg, want_seg, "token_type_ids", mistakes={
        "segment ids off by one: the first [SEP] is put in segment 1": segments_variant(4, 3, 1, 1),
        "segment ids off by one: the final [SEP] is put in segment 0": segments_variant(4, 3, 0, 0),
        "segment ids off by one around [SEP]: first [SEP] in segment 1, last in 0": segments_variant(4, 3, 1, 0),
        "[CLS] is put in segment 1": segments_variant(4, 3, 0, 1, cls=1),
    })


@graded("bert_input", points=1, hint="With no B, the input is [CLS] A [SEP], all segment 0.")
def test_bert_input_single(student, ref):
    """bert_input: for one segment (and for an empty B), do the ids and segment ids match?"""
    for a, b in [([5, 6, 7], None), ([9], []), ([], [8])]:
        got = student.bert_input(a, b, cls_id=CLS, sep_id=SEP)
        want = ref.bert_input(a, b, cls_id=CLS, sep_id=SEP)
        expect_close(got, want, f"(input_ids, token_type_ids) for A={a}, B={b}")


@graded("bert_input", points=1, hint="Accept 1-D long tensors too; return long tensors.")
def test_bert_input_tensors(student, ref):
    """bert_input: with tensor inputs, are the outputs long tensors that match?"""
    a, b = torch.tensor([40, 41]), torch.tensor([50, 51, 52])
    call = student.call("bert_input", args=(a, b), kwargs={"cls_id": 101, "sep_id": 102})
    expect_close(call.value, ref.bert_input(a, b, cls_id=101, sep_id=102), "(input_ids, token_type_ids)")
    expect_unmodified((a, b), call.inputs, "bert_input")


@needs_cuda
@graded("bert_input", points=1, hint="Create the [CLS]/[SEP] ids and the segment ids on tokens_a's device.")
def test_bert_input_cuda(student, ref):
    """bert_input: with CUDA tensors, are the outputs on the GPU?"""
    a, b = torch.tensor([40, 41]), torch.tensor([50])
    call = student.call("bert_input", args=(a, b), kwargs={"cls_id": 1, "sep_id": 2}, device="cuda")
    expect(all(d.startswith("cuda") for d in call.devices), "the outputs should stay on the inputs' device")
    expect_close(call.value, ref.bert_input(a, b, cls_id=1, sep_id=2), "(input_ids, token_type_ids)")


# ================================================================ BertEmbeddings
@graded("BertEmbeddings", points=3, hint="norm(token(ids) + segment(types) + position(arange(T))), then dropout; "
                                         "attributes token, segment, position, norm, dropout: the reference's "
                                         "parameters load into them by name (a buffer of your own, such as "
                                         "position_ids, is allowed and not loaded).")
def test_embeddings_values(student, ref):
    """BertEmbeddings: with the reference weights, does the output match for two segments?"""
    m = ref_embeddings(ref, seed=1)
    g = seeded(2)
    ids = torch.randint(0, 30, (3, 7), generator=g)
    seg = (torch.arange(7) >= 4).long().expand(3, 7).contiguous()
    res = student.module("BertEmbeddings", init_args=(30, 16, 20), state_dict=m.state_dict(),
                         args=(ids, seg))
    with torch.no_grad():
        expect_close(res.value, m(ids, seg), "the embeddings", mistakes={
            "no LayerNorm": emb_manual(m, ids, seg, norm=False),
            "positions start at 1 instead of 0": emb_manual(m, ids, seg, pos_offset=1),
            "the segment embedding is not added": emb_manual(m, ids, seg, use_seg=False),
            "LayerNorm applied before the position embedding is added": emb_manual(m, ids, seg, norm_before_pos=True),
        })


@graded("BertEmbeddings", points=1, hint="token_type_ids=None means every token is in segment 0.")
def test_embeddings_default_segments(student, ref):
    """BertEmbeddings: without token_type_ids, is every token in segment 0?"""
    m = ref_embeddings(ref, seed=3)
    ids = torch.randint(0, 30, (2, 5), generator=seeded(4))
    res = student.module("BertEmbeddings", init_args=(30, 16, 20), state_dict=m.state_dict(), args=(ids,))
    with torch.no_grad():
        expect_close(res.value, m(ids, torch.zeros_like(ids)), "the embeddings")


@graded("BertEmbeddings", points=1, hint="Keep every operation differentiable.")
def test_embeddings_gradients(student, ref):
    """BertEmbeddings: do the gradients of all five parameters match?"""
    m = ref_embeddings(ref, seed=5)
    g = seeded(6)
    ids = torch.randint(0, 30, (2, 6), generator=g)
    seg = torch.randint(0, 2, (2, 6), generator=g)
    ct = torch.randn(2, 6, 16, generator=g)
    res = student.module("BertEmbeddings", init_args=(30, 16, 20), state_dict=m.state_dict(),
                         args=(ids, seg), grad=True, cotangent=ct)
    m.zero_grad()
    (m(ids, seg) * ct).sum().backward()
    for name, p in m.named_parameters():
        expect(name in res.param_grads, f"no gradient reached {name}")
        expect_close(res.param_grads[name], p.grad, f"the gradient of {name}")


@needs_cuda
@graded("BertEmbeddings", points=1, hint="Build the positions on input_ids' device.")
def test_embeddings_cuda(student, ref):
    """BertEmbeddings: does it run on a GPU?"""
    m = ref_embeddings(ref, seed=7)
    ids = torch.randint(0, 30, (2, 5), generator=seeded(8))
    res = student.module("BertEmbeddings", init_args=(30, 16, 20), state_dict=m.state_dict(),
                         args=(ids,), device="cuda")
    with torch.no_grad():
        expect_close(res.value, m(ids), "the embeddings on cuda", atol=1e-4)


# ================================================================ mlm_mask
@graded("mlm_mask", points=2, hint="Labels: the original id at selected positions, -100 elsewhere; inputs equal "
                                   "input_ids wherever a token is not selected.")
def test_mlm_mask_labels(student, ref):
    """mlm_mask: are labels the original ids exactly at the changed/selected positions and -100 elsewhere?"""
    x, special = mlm_batch(10, 64, 40)
    call = student.call("mlm_mask", args=(x, MASK, 1000, special))
    inputs, labels = call.value
    expect_unmodified((x, special), (call.inputs[0], call.inputs[3]), "mlm_mask")
    expect(isinstance(inputs, torch.Tensor) and inputs.shape == x.shape and inputs.dtype == torch.long,
           f"inputs should be a long tensor of shape {tuple(x.shape)}")
    expect(isinstance(labels, torch.Tensor) and labels.shape == x.shape and labels.dtype == torch.long,
           f"labels should be a long tensor of shape {tuple(x.shape)}")
    sel = labels != -100
    expect(not bool((labels == x).all()), "labels set at unselected positions: labels should be -100 wherever "
                                          "the token was not selected")
    expect(bool((labels[sel] == x[sel]).all()), "labels at selected positions should be the original ids")
    expect(bool((inputs[~sel] == x[~sel]).all()), "a token that is not selected (label -100) was changed")
    expect(bool(sel.any()), "no token was selected")


@graded("mlm_mask", points=2, hint="Never select a position where special_mask is True ([CLS], [SEP], padding); "
                                    "with mlm_prob=1 every other position is selected.")
def test_mlm_mask_specials(student, ref):
    """mlm_mask: are special tokens and padding never selected, even with mlm_prob=1?"""
    x, special = mlm_batch(11, 32, 30)
    inputs, labels = student.mlm_mask(x, MASK, 1000, special, 1.0)
    expect(not bool((labels[special] != -100).any()), "special tokens masked: a position with special_mask "
                                                      "True was selected")
    expect(bool(torch.equal(inputs[special], x[special])), "special tokens masked: a special token or padding "
                                                           "was changed")
    expect(bool((labels[~special] != -100).all()), "with mlm_prob=1 every non-special token should be selected")
    inputs, labels = student.mlm_mask(x, MASK, 1000, torch.ones_like(special))
    expect(bool((labels == -100).all()) and torch.equal(inputs, x), "with every position special, nothing "
                                                                    "should change")


@graded("mlm_mask", points=3, hint="Select each non-special token independently with probability mlm_prob.")
def test_mlm_mask_rate(student, ref):
    """mlm_mask: on about 400,000 tokens, is the selected fraction 15% (and 40% with mlm_prob=0.4)?"""
    x, special = mlm_batch(12, 500, 900)
    N = int((~special).sum())
    for p, args in [(0.15, ()), (0.4, (0.4,))]:
        inputs, labels = student.mlm_mask(x, MASK, 1000, special, *args)
        rate = (labels != -100).sum().item() / N
        tol = 5 * math.sqrt(p * (1 - p) / N)
        expect(abs(rate - p) <= tol, f"with mlm_prob={p} you selected {100 * rate:.2f}% of the non-special "
                                     f"tokens; expected {100 * p:.0f}% (within {100 * tol:.2f})")


@graded("mlm_mask", points=4, hint="One draw per selected token: [MASK] if u < 0.8, random if 0.8 <= u < 0.9, "
                                   "unchanged otherwise. Separate draws for the parts overlap.")
def test_mlm_mask_split(student, ref):
    """mlm_mask: on about 500,000 selected tokens, is the split 80% [MASK], 10% random, 10% unchanged?"""
    x, special = mlm_batch(13, 1000, 1100)
    inputs, labels = student.mlm_mask(x, MASK, 1000, special, 0.5)
    n, masked, changed, same = split_fractions(x, inputs, labels)
    expect(n > 1000, "hardly any token was selected")
    V = 1000  # a random token equals the original or [MASK] with probability 1/V each
    want = (0.8 + 0.1 / V, 0.1 * (1 - 2 / V), 0.1 + 0.1 / V)
    tol = [5 * math.sqrt(p * (1 - p) / n) for p in want]
    report = (f"of the selected tokens {100 * masked:.2f}% became [MASK], {100 * changed:.2f}% another token, "
              f"{100 * same:.2f}% stayed")
    if abs(masked - 0.81) <= tol[0] and abs(same - 0.09) <= tol[2]:
        expect(False, report + ": the random and unchanged parts look like separate draws that overlap "
                               "(81/10/9 instead of 80/10/10)")
    if masked > 0.99:
        expect(False, report + ": every selected token became [MASK] (no random, no unchanged part)")
    for got, w, t, what in zip((masked, changed, same), want, tol, ("[MASK]", "random", "unchanged")):
        expect(abs(got - w) <= t, report + f"; expected 80/10/10 (the {what} part is off)")


@graded("mlm_mask", points=1, hint="Random replacements are uniform ids in [0, vocab_size).")
def test_mlm_mask_random_ids(student, ref):
    """mlm_mask: are the random replacements spread over the whole range [0, vocab_size)?"""
    x, special = mlm_batch(14, 800, 500, vocab=200)
    inputs, labels = student.mlm_mask(x, MASK, 200, special, 0.9)
    sel = labels != -100
    rand = inputs[sel & (inputs != MASK) & (inputs != x)]
    expect(rand.numel() > 1000, "hardly any token was replaced by a random token")
    expect(int(rand.min()) >= 0 and int(rand.max()) < 200, "a random id falls outside [0, vocab_size)")
    expect(len(rand.unique()) >= 198, "the random ids do not cover [0, vocab_size) uniformly")


@graded("mlm_mask", points=1, hint="Keep dtype long and the same shape for any batch size; with mlm_prob=0 "
                                    "nothing is selected (inputs unchanged, labels all -100).")
def test_mlm_mask_batch_of_one(student, ref):
    """mlm_mask: for a batch of one and mlm_prob=0, is nothing selected?"""
    x, special = mlm_batch(15, 1, 12)
    inputs, labels = student.mlm_mask(x, MASK, 1000, special, 0.0)
    expect_close(inputs, x, "inputs with mlm_prob=0")
    expect_close(labels, torch.full_like(x, -100), "labels with mlm_prob=0")


@needs_cuda
@graded("mlm_mask", points=1, hint="Draw on (or move the draws to) input_ids' device.")
def test_mlm_mask_cuda(student, ref):
    """mlm_mask: with CUDA inputs, are both outputs on the GPU and consistent?"""
    x, special = mlm_batch(16, 8, 20)
    call = student.call("mlm_mask", args=(x, MASK, 1000, special), device="cuda")
    expect(all(d.startswith("cuda") for d in call.devices), "the outputs should stay on the inputs' device")
    inputs, labels = call.value
    sel = labels != -100
    expect(bool((labels[sel] == x[sel]).all()) and bool((inputs[~sel] == x[~sel]).all()),
           "labels and inputs are inconsistent on cuda")


# ================================================================ mlm_loss
@graded("mlm_loss", points=2, hint="F.cross_entropy over the selected positions only (labels != -100), "
                                   "averaged over those positions.")
def test_mlm_loss_values(student, ref):
    """mlm_loss: does the loss match the mean cross-entropy over the selected positions?"""
    g = seeded(20)
    logits = torch.randn(3, 6, 11, generator=g)
    labels = torch.randint(0, 11, (3, 6), generator=g)
    labels[torch.rand(3, 6, generator=g) > 0.3] = -100
    labels[0, 0] = 4
    sel = labels != -100
    ce = F.cross_entropy(logits[sel], labels[sel], reduction="sum")
    expect_close(student.mlm_loss(logits, labels), ref.mlm_loss(logits, labels), "the loss", mistakes={
        "averaged over all positions, not only the selected ones": ce / labels.numel(),
        "summed instead of averaged": ce,
    })


@graded("mlm_loss", points=1, hint="Gradients only flow to the logits of selected positions.")
def test_mlm_loss_grads_float64(student, ref):
    """mlm_loss: in float64, do the dtype and the gradient w.r.t. the logits match?"""
    g = seeded(21)
    logits = torch.randn(2, 5, 7, generator=g, dtype=torch.float64)
    labels = torch.tensor([[-100, 3, -100, 6, -100], [0, -100, -100, -100, 2]])
    call = student.call("mlm_loss", args=(logits, labels), grad_wrt=(0,))
    x = logits.clone().requires_grad_(True)
    want = ref.mlm_loss(x, labels)
    want.backward()
    expect_close(call.value, want.detach(), "the loss")
    expect_close(call.grads[0], x.grad, "the gradient w.r.t. logits")


@graded("mlm_loss", points=1, hint="With no selected position, return 0 (for example logits.sum() * 0), not NaN.")
def test_mlm_loss_nothing_selected(student, ref):
    """mlm_loss: with no selected position, is the loss 0 rather than NaN?"""
    logits = torch.randn(2, 3, 5, generator=seeded(22))
    got = student.mlm_loss(logits, torch.full((2, 3), -100))
    expect(isinstance(got, torch.Tensor) and got.dim() == 0, "the loss should be a 0-d tensor")
    expect(not bool(torch.isnan(got)), "the loss is NaN when no position is selected")
    expect(abs(float(got)) < 1e-12, "the loss should be 0 when no position is selected")


# ================================================================ nsp_pairs
@graded("nsp_pairs", points=2, hint="One pair per consecutive position of every document, in order: "
                                    "(doc[i], b, is_next) for i < len(doc) - 1.")
def test_nsp_structure(student, ref):
    """nsp_pairs: one pair per consecutive position, in order, with is_next = 1 exactly when b is the next sentence?"""
    docs = nsp_docs(30)
    pairs = student.nsp_pairs(docs)
    want_a = [doc[i] for doc in docs for i in range(len(doc) - 1)]
    expect(isinstance(pairs, (list, tuple)) and len(pairs) == len(want_a),
           f"expected {len(want_a)} pairs (one per consecutive position), got "
           f"{len(pairs) if isinstance(pairs, (list, tuple)) else type(pairs).__name__}")
    expect(all(isinstance(p, (list, tuple)) and len(p) == 3 for p in pairs), "each pair should be (a, b, is_next)")
    expect([p[0] for p in pairs] == want_a, "the first sentences are not every doc[i], i < len(doc) - 1, in order")
    nxt = {doc[i]: doc[i + 1] for doc in docs for i in range(len(doc) - 1)}
    for a, b, is_next in pairs:
        expect(is_next in (0, 1), "is_next should be 0 or 1")
        if is_next == 1:
            expect(b == nxt[a], "is_next is 1 but b is not the next sentence (labels inverted?)")
        else:
            expect(b != nxt[a], "is_next is 0 but b is the true next sentence (labels inverted?)")


@graded("nsp_pairs", points=2, hint="A NotNext sentence comes from a different document, drawn at random.")
def test_nsp_negatives(student, ref):
    """nsp_pairs: are the random sentences from other documents, spread over many documents?"""
    docs = nsp_docs(31)
    pairs = student.nsp_pairs(docs)
    negatives = [(doc_of(a), b) for a, b, n in pairs if n == 0]
    expect(len(negatives) > 100, "too few NotNext pairs")
    expect(all(isinstance(b, str) and b.startswith("d") for _, b in negatives), "b should be one of the sentences")
    expect(all(doc_of(b) != d for d, b in negatives), "a NotNext sentence came from the same document")
    sources = {doc_of(b) for _, b in negatives}
    non_empty = sum(1 for d in docs if d)
    expect(len(sources) > 0.6 * non_empty, f"the NotNext sentences come from only {len(sources)} of "
                                           f"{non_empty} documents; draw the document at random")
    later = sum(doc_of(b) > d for d, b in negatives) / len(negatives)
    expect(0.2 < later < 0.8, "the NotNext sentences come mostly from later (or earlier) documents")


@graded("nsp_pairs", points=2, hint="is_next = 1 with probability 0.5 for each pair.")
def test_nsp_rate(student, ref):
    """nsp_pairs: is about half of the pairs IsNext (on 3,000 pairs)?"""
    docs = nsp_docs(32, n_docs=900)
    pairs = student.nsp_pairs(docs)
    n = len(pairs)
    rate = sum(p[2] for p in pairs) / n
    tol = 5 * math.sqrt(0.25 / n)
    expect(abs(rate - 0.5) <= tol, f"{100 * rate:.1f}% of the pairs are IsNext; expected 50% (within "
                                   f"{100 * tol:.1f})")


@graded("nsp_pairs", points=1, hint="A sentence can be any object (here a list of ids); keep it as it is.")
def test_nsp_token_lists(student, ref):
    """nsp_pairs: with sentences that are lists of ids, are a and b sentences of the documents?"""
    docs = [[[1, 2], [3], [4, 5, 6]], [[7, 8]], [[9], [10, 11]]]
    pairs = student.nsp_pairs(docs)
    every = [s for d in docs for s in d]
    expect(len(pairs) == 3, "expected 3 pairs")
    expect([list(p[0]) for p in pairs] == [[1, 2], [3], [9]], "the first sentences are wrong")
    expect(all(list(p[1]) in every for p in pairs), "b is not one of the sentences")


# ================================================================ combine_layers
STRATEGIES = ["embedding", "last", "second_to_last", "sum_all", "sum_last_four", "concat_last_four"]


@graded("combine_layers", points=3, hint="Index 0 is the embeddings; sum_all is layers 1..L; the last four are "
                                         "L-3..L, concatenated in that order along the last dim.")
def test_combine_layers(student, ref):
    """combine_layers: does every strategy match on 6 layers?"""
    hs = hidden(40)
    stack = torch.stack(hs)
    for s in STRATEGIES:
        call = student.call("combine_layers", args=(hs, s))
        expect_unmodified(hs, call.inputs[0], "combine_layers")
        expect_close(call.value, ref.combine_layers(hs, s), f'combine_layers(..., "{s}")', mistakes={
            "sum_all includes the embedding output (index 0)": stack.sum(0),
            "the last four are layers L-4..L-1 (off by one)": stack[-5:-1].sum(0),
            "the last four concatenated in reverse order": torch.cat(hs[-4:][::-1], -1),
            "the second-to-last is index L-2": hs[-3],
            "embedding is layer 1, not index 0": hs[1],
        })


@graded("combine_layers", points=1, hint="Use negative indices or len(hidden_states): L is not fixed to 12.")
def test_combine_layers_float64_four_layers(student, ref):
    """combine_layers: with L = 4 layers in float64, do the strategies match?"""
    hs = hidden(41, L=4, B=1, T=2, D=3, dtype=torch.float64)
    for s in STRATEGIES:
        expect_close(student.combine_layers(hs, s), ref.combine_layers(hs, s), f'combine_layers(..., "{s}")')


@graded("combine_layers", points=1, hint="Raise ValueError for another strategy than the six the docstring names.")
def test_combine_layers_unknown_strategy(student, ref):
    """combine_layers: does an unknown strategy raise ValueError?"""
    hs = hidden(42, L=4, B=1, T=2, D=3)
    expect_raises(lambda: student.combine_layers(hs, "mean_all"), "ValueError", 'combine_layers(..., "mean_all")')


# ================================================================ wordpiece_tokenize
WP_VOCAB = ["un", "##aff", "##able", "u", "##n", "##a", "##f", "##b", "##l", "##e", "aff", "able",
            "##ab", "##le", "a", "##u", "##z", "x"]


@graded("wordpiece_tokenize", points=2, hint="Greedy longest match first; pieces after the first are looked up "
                                             "with '##'.")
def test_wordpiece_unaffable(student, ref):
    """wordpiece_tokenize: does "unaffable" become un ##aff ##able?"""
    got = student.wordpiece_tokenize("unaffable", WP_VOCAB)
    expect_close(got, ["un", "##aff", "##able"], "the pieces of 'unaffable'", mistakes={
        "shortest match first instead of longest": wp_variant("unaffable", WP_VOCAB, shortest=True),
        "the '##' of continuation pieces is missing": wp_variant("unaffable", WP_VOCAB, hashes=False),
    })


@graded("wordpiece_tokenize", points=2, hint="If any part of the word cannot be matched, the whole word is "
                                             "[unk_token].")
def test_wordpiece_words(student, ref):
    """wordpiece_tokenize: do several words (known, unknown, partly coverable) match?"""
    vocab = {w: i for i, w in enumerate(WP_VOCAB)}  # a dict: look up its keys
    for word in ["unable", "able", "affable", "ua", "unzip", "bun", "x", "xu", "zz"]:
        expect_close(student.wordpiece_tokenize(word, vocab), ref.wordpiece_tokenize(word, vocab),
                     f"the pieces of {word!r}", mistakes={
                         "only the unmatched piece became [UNK], not the whole word":
                             wp_variant(word, vocab, unk_piece=True),
                         "shortest match first instead of longest": wp_variant(word, vocab, shortest=True),
                         "the '##' of continuation pieces is missing": wp_variant(word, vocab, hashes=False),
                     })


@graded("wordpiece_tokenize", points=1, hint="Words longer than max_chars (strictly) are [unk_token]; "
                                             "use the unk_token argument.")
def test_wordpiece_unk_and_max_chars(student, ref):
    """wordpiece_tokenize: are unk_token and max_chars respected?"""
    expect_close(student.wordpiece_tokenize("qq", WP_VOCAB, "<unk>"), ["<unk>"], "an unknown word with unk_token='<unk>'")
    expect_close(student.wordpiece_tokenize("unable", WP_VOCAB, "[UNK]", 5), ["[UNK]"],
                 "a 6-letter word with max_chars=5")
    expect_close(student.wordpiece_tokenize("unable", WP_VOCAB, "[UNK]", 6), ["un", "##able"],
                 "a 6-letter word with max_chars=6")


# ================================================================ bpe_train
SENNRICH = {"low": 5, "lower": 2, "newest": 6, "widest": 3}


@graded("bpe_train", points=3, hint="Words are characters + '</w>'; count adjacent pairs weighted by frequency; "
                                    "merge the most frequent (ties: smallest pair) everywhere.")
def test_bpe_train_sennrich(student, ref):
    """bpe_train: on Sennrich et al.'s example, are the first 10 merges right?"""
    got = student.bpe_train(SENNRICH, 10)
    expect_close([tuple(p) for p in got] if isinstance(got, list) else got, ref.bpe_train(SENNRICH, 10),
                 "the merges", mistakes={
                     "no '</w>' end-of-word symbol": bpe_train_variant(SENNRICH, 10, end=()),
                     "pair counts not weighted by word frequency": bpe_train_variant(SENNRICH, 10, weighted=False),
                     "ties go to the largest pair": bpe_train_variant(SENNRICH, 10, largest_tie=True),
                 })


@graded("bpe_train", points=2, hint="Ties go to the lexicographically smallest pair, as Python compares tuples; "
                                    "stop when no pair is left.")
def test_bpe_train_ties_and_stop(student, ref):
    """bpe_train: are ties broken towards the smallest pair, and does training stop when no pair is left?"""
    for freqs, n in [({"ba": 2, "ab": 2}, 3), ({"cd": 1, "ab": 1}, 2), ({"ab": 3}, 10), ({"a": 1}, 0)]:
        got = student.bpe_train(freqs, n)
        want = ref.bpe_train(freqs, n)
        expect_close([tuple(p) for p in got] if isinstance(got, list) else got, want, f"the merges of {freqs}",
                     mistakes={"ties go to the largest pair": bpe_train_variant(freqs, n, largest_tie=True)})


@graded("bpe_train", points=2, hint="Count every adjacent position (a word 'aaa' has the pair (a, a) twice) and "
                                    "merge left to right.")
def test_bpe_train_random_corpus(student, ref):
    """bpe_train: on a random corpus with repeated letters, do 25 merges match?"""
    g = seeded(50)
    freqs = {}
    for _ in range(40):
        n = int(torch.randint(2, 7, (1,), generator=g))
        word = "".join("abcd"[int(i)] for i in torch.randint(0, 4, (n,), generator=g))
        freqs[word] = int(torch.randint(1, 9, (1,), generator=g))
    got = student.bpe_train(freqs, 25)
    expect_close([tuple(p) for p in got] if isinstance(got, list) else got, ref.bpe_train(freqs, 25), "the merges",
                 mistakes={"a pair counted once per word type": bpe_train_variant(freqs, 25, once_per_word=True),
                           "pair counts not weighted by word frequency": bpe_train_variant(freqs, 25, weighted=False)})


# ================================================================ bpe_encode
@graded("bpe_encode", points=2, hint="Start from characters + '</w>'; repeatedly merge the adjacent pair learned "
                                     "earliest.")
def test_bpe_encode_sennrich(student, ref):
    """bpe_encode: with the merges learned on Sennrich et al.'s example, do several words match?"""
    merges = ref.bpe_train(SENNRICH, 10)
    for word in ["lowest", "newer", "wider", "low", "x", "newest"]:
        expect_close(student.bpe_encode(word, merges), ref.bpe_encode(word, merges), f"the symbols of {word!r}",
                     mistakes={"merges applied out of order (the leftmost mergeable pair first)":
                               bpe_encode_variant(word, merges, "leftmost"),
                               "merges applied in reverse order": bpe_encode_variant(word, merges, "reversed")})


@graded("bpe_encode", points=2, hint="The pair of lowest rank goes first, wherever it is in the word; "
                                     "with no merges a word is its characters plus </w>.")
def test_bpe_encode_order(student, ref):
    """bpe_encode: where the order of merges matters, is the lowest-rank pair merged first?"""
    merges = [("s", "t"), ("e", "s"), ("t", "</w>"), ("a", "a"), ("aa", "aa")]
    for word in ["est", "test", "aaaa", "aaa", "best"]:
        expect_close(student.bpe_encode(word, merges), ref.bpe_encode(word, merges), f"the symbols of {word!r}",
                     mistakes={"merges applied out of order (the leftmost mergeable pair first)":
                               bpe_encode_variant(word, merges, "leftmost"),
                               "merges applied in reverse order": bpe_encode_variant(word, merges, "reversed")})
    expect_close(student.bpe_encode("ab", []), ["a", "b", "</w>"], "a word with no merges")


# ================================================================ text_infilling
@graded("text_infilling", points=2, hint="Mask exactly round(mask_ratio * n) tokens in spans; each span becomes "
                                         "ONE mask_id, in its own gap between kept tokens.")
def test_infilling_structure(student, ref):
    """text_infilling: is the output the original with spans (30% of the tokens) each replaced by one mask?"""
    for n in [200, 37, 3]:
        toks = list(range(1000, 1000 + n))
        out = student.text_infilling(toks, 5)
        expect(isinstance(out, (list, tuple)) and all(isinstance(t, int) for t in out),
               "the output should be a list of ints")
        spans, why = infill_spans(toks, list(out), 5)
        expect(spans is not None, f"with {n} tokens: {why}")
        expect(sum(spans) == round(0.3 * n), f"with {n} tokens, {sum(spans)} tokens were masked; expected "
                                             f"round(0.3 * {n}) = {round(0.3 * n)}")


@graded("text_infilling", points=1, hint="With k = round(mask_ratio * n) = 0 (mask_ratio 0, or a text too short) "
                                         "draw no span at all: the tokens come back unchanged, with no mask.")
def test_infilling_nothing_to_mask(student, ref):
    """text_infilling: with nothing to mask (k = 0), does the text come back unchanged?"""
    for toks, ratio in ((list(range(10, 30)), 0.0), ([10], 0.3)):
        out = student.text_infilling(toks, 5, ratio)
        expect(isinstance(out, (list, tuple)) and list(out) == toks,
               f"with k = round({ratio} * {len(toks)}) = 0 the text should come back unchanged, got {out}"
               + (" (a zero-length span was drawn: with k = 0 no span is drawn)" if 5 in list(out) else ""))


@graded("text_infilling", points=3, hint="Span lengths are Poisson(poisson_lambda): mean and variance lambda, "
                                         "and about e^-lambda of them have length 0 (an inserted mask).")
def test_infilling_poisson(student, ref):
    """text_infilling: on 30,000 tokens, are the span lengths Poisson(3) (mean, variance, zero-length share)?"""
    toks = list(range(10, 30010))
    spans, why = infill_spans(toks, list(student.text_infilling(toks, 5)), 5)
    expect(spans is not None, why)
    s = torch.tensor(spans, dtype=torch.float64)
    m, v, z = s.mean().item(), s.var().item(), (s == 0).double().mean().item()
    report = f"span lengths: mean {m:.2f}, variance {v:.2f}, {100 * z:.1f}% of length 0"
    expect(m > 1.05, report + ": every masked token seems to be its own span (token masking, not infilling)")
    expect(z > 0.02, report + ": no zero-length spans; Poisson(3) gives length 0 about 5% of the time")
    expect(abs(m - 3) < 0.2 and abs(v - 3) < 0.6 and abs(z - math.exp(-3)) < 0.02,
           report + "; expected about 3, 3 and 5%")


@graded("text_infilling", points=1, hint="Use poisson_lambda and mask_ratio, not constants.")
def test_infilling_other_lambda(student, ref):
    """text_infilling: with lambda = 5 and 40% masking, are the budget and the mean span length right?"""
    toks = list(range(10, 20010))
    spans, why = infill_spans(toks, list(student.text_infilling(toks, 5, 0.4, 5.0)), 5)
    expect(spans is not None, why)
    expect(sum(spans) == 8000, f"{sum(spans)} tokens were masked; expected 8000")
    m = sum(spans) / len(spans)
    expect(abs(m - 5) < 0.3, f"the mean span length is {m:.2f}; expected about 5")


@graded("text_infilling", points=1, hint="Count the spans drawn: if there are more than the kept tokens' gaps "
                                         "(n - k + 1), raise ValueError, as the docstring says.")
def test_infilling_more_spans_than_gaps(student, ref):
    """text_infilling: with more spans than gaps (every token masked, lambda 0.5), does it raise ValueError?"""
    expect_raises(lambda: student.text_infilling(list(range(10, 30)), 5, 1.0, 0.5), "ValueError",
                  "text_infilling of 20 tokens with mask_ratio=1.0 (one gap) and poisson_lambda=0.5 (many spans)")


# ================================================================ sentence_permutation
def sentences_of(tokens, eos):
    out, cur = [], []
    for t in tokens:
        cur.append(t)
        if t == eos:
            out.append(tuple(cur))
            cur = []
    if cur:
        out.append(tuple(cur))
    return out


@graded("sentence_permutation", points=3, hint="Split after each eos_id, shuffle the sentences (torch.randperm), "
                                               "concatenate; sentences stay intact.")
def test_sentence_permutation_shuffle(student, ref):
    """sentence_permutation: is the output the 600 sentences, intact, in a uniformly shuffled order?"""
    toks, k = [], 10
    for i in range(600):
        n = 1 + i % 4
        toks += list(range(k, k + n)) + [0]
        k += n
    sents = sentences_of(toks, 0)
    out = list(student.sentence_permutation(toks, 0))
    got = sentences_of(out, 0)
    expect(sorted(got) == sorted(sents), "the output is not the same sentences, each intact "
                                         "(are tokens shuffled rather than sentences?)")
    index = {s: i for i, s in enumerate(sents)}
    order = [index[s] for s in got]
    follows = sum(b == a + 1 for a, b in zip(order, order[1:]))
    reverse = sum(b == a - 1 for a, b in zip(order, order[1:]))
    expect(follows < 20, "most sentences still follow their predecessor: a rotation, not a permutation")
    expect(reverse < 20, "the sentences are reversed, not shuffled")
    half = sum(i < 300 for i in order[:300]) / 300
    expect(0.35 < half < 0.65, "the shuffle is not uniform: the first half stays mostly in place")


@graded("sentence_permutation", points=1, hint="A trailing piece without eos_id is a sentence too; one "
                                                   "sentence stays as it is; an empty list gives an empty list.")
def test_sentence_permutation_edges(student, ref):
    """sentence_permutation: are a trailing piece without eos, a single sentence and an empty list handled?"""
    toks = [5, 6, 0, 7, 0, 8, 9]
    out = list(student.sentence_permutation(toks, 0))
    orders = [[t for s in perm for t in s] for perm in itertools.permutations([[5, 6, 0], [7, 0], [8, 9]])]
    expect(out in orders, "the output should be the sentences [5, 6, 0], [7, 0] and the trailing piece [8, 9], "
                          "each intact, in some order")
    expect(sorted(out) == sorted(toks), "tokens were lost or added")
    expect(list(student.sentence_permutation([4, 5, 0], 0)) == [4, 5, 0], "one sentence should stay as it is")
    expect(list(student.sentence_permutation([], 0)) == [], "an empty list should give an empty list")


# ================================================================ t5_span_corruption
SENTINELS = list(range(5000, 5400))


def t5_counts(n, density=0.15, mean=3.0):
    k = min(max(round(density * n), 1), n - 1)
    return k, min(max(1, round(k / mean)), n - k + 1)


@graded("t5_span_corruption", points=4, hint="inputs: kept tokens with span j replaced by sentinel j; targets: "
                                             "sentinel 0, span 0, sentinel 1, ..., then a final sentinel m.")
def test_t5_round_trip(student, ref):
    """t5_span_corruption: do inputs and targets round-trip to the original, with the right sentinels?"""
    for n, density, mean in [(2, 0.15, 3.0), (10, 0.15, 3.0), (57, 0.15, 3.0), (400, 0.15, 3.0), (90, 0.5, 2.0)]:
        toks = list(range(100, 100 + n))
        k, m = t5_counts(n, density, mean)
        res = student.t5_span_corruption(toks, SENTINELS, density, mean)
        expect(isinstance(res, (list, tuple)) and len(res) == 2, "return (inputs, targets)")
        inputs, targets = list(res[0]), list(res[1])
        where = f"(n={n}, noise_density={density}, mean_span_length={mean})"
        expect(targets[-1:] == [SENTINELS[m]], f"targets should end with one more sentinel {where}")
        expect([t for t in inputs if t in SENTINELS] == SENTINELS[:m],
               f"inputs should hold sentinels 0..m-1 in order, m = {m} spans {where}")
        expect([t for t in targets if t in SENTINELS] == SENTINELS[:m + 1],
               f"targets should hold sentinels 0..m in order {where}")
        expect(t5_restore(inputs, targets, SENTINELS) == toks, f"inputs and targets do not round-trip to the "
                                                               f"original {where}")
        expect(len(targets) - (m + 1) == k, f"{len(targets) - m - 1} noise tokens; expected {k} {where}")
        expect(all(not (a in SENTINELS and b in SENTINELS) for a, b in zip(inputs, inputs[1:])),
               f"two spans touch (adjacent sentinels in inputs) {where}")
        expect(all(not (a in SENTINELS and b in SENTINELS) for a, b in zip(targets[:-1], targets[1:-1])),
               f"a span is empty {where}")


@graded("t5_span_corruption", points=2, hint="Split the noise tokens and the kept tokens at random, so span "
                                             "lengths and positions vary.")
def test_t5_random_spans(student, ref):
    """t5_span_corruption: on 3,000 tokens, are span lengths and positions random and spread out?"""
    toks = list(range(100, 3100))
    inputs, targets = student.t5_span_corruption(toks, SENTINELS)
    inputs, targets = list(inputs), list(targets)
    lengths, cur = [], None
    for t in targets[:-1]:
        if t in SENTINELS:
            lengths.append(0)
        else:
            lengths[-1] += 1
    expect(len(set(lengths)) > 3, "all spans have (nearly) the same length; split the noise tokens at random")
    pos = [i for i, t in enumerate(inputs) if t in SENTINELS]
    first_half = sum(p < len(inputs) / 2 for p in pos) / max(len(pos), 1)
    expect(0.35 < first_half < 0.65, "the spans are not spread over the text")


@graded("t5_span_corruption", points=1, hint="m spans need m + 1 sentinel ids: raise ValueError when sentinel_ids "
                                             "has fewer, as the docstring says.")
def test_t5_too_few_sentinels(student, ref):
    """t5_span_corruption: with fewer than m + 1 sentinel ids, does it raise ValueError?"""
    expect_raises(lambda: student.t5_span_corruption(list(range(10, 110)), SENTINELS[:3]), "ValueError",
                  "t5_span_corruption of 100 tokens (5 spans, 6 sentinels needed) with 3 sentinel ids")
