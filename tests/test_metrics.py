"""attnkit.metrics: BLEU and chrF are sacreBLEU's, BLEU agrees with its formula worked by hand, and each
score carries a bootstrap interval that holds it."""
from __future__ import annotations

import math
from collections import Counter

import pytest

sacrebleu = pytest.importorskip("sacrebleu")
from attnkit import corpora  # noqa: E402
from attnkit.metrics import Score, bleu, chrf  # noqa: E402


def test_bleu_is_the_formula_worked_by_hand():
    """Is BLEU the geometric mean of clipped 1-4-gram precisions times the brevity penalty?"""
    hyps = ["the cat sat on the mat today", "a quick brown fox jumps over the dog"]
    refs = ["the cat sat on a mat today", "the quick brown fox jumps over the lazy dog"]
    matches, totals = [0] * 4, [0] * 4
    for h, r in zip(hyps, refs):
        h, r = h.split(), r.split()
        for n in range(1, 5):
            hn = Counter(tuple(h[i:i + n]) for i in range(len(h) - n + 1))
            rn = Counter(tuple(r[i:i + n]) for i in range(len(r) - n + 1))
            matches[n - 1] += sum(min(c, rn[g]) for g, c in hn.items())
            totals[n - 1] += sum(hn.values())
    hyp_len, ref_len = sum(len(h.split()) for h in hyps), sum(len(r.split()) for r in refs)
    bp = min(1.0, math.exp(1 - ref_len / hyp_len))
    expected = 100 * bp * math.exp(sum(math.log(m / t) for m, t in zip(matches, totals)) / 4)
    assert bleu(hyps, refs).score == pytest.approx(expected, abs=1e-9)


def test_scores_are_sacrebleus_on_real_pairs():
    """On the test pairs, do bleu and chrf give sacreBLEU's corpus scores, with intervals around them?"""
    pairs = corpora.parallel("ru", "test")
    hyps, refs = [p.src for p in pairs], [p.tgt for p in pairs]  # copying the source: a baseline
    b, c = bleu(hyps, refs), chrf(hyps, refs)
    assert isinstance(b, Score) and b.n == len(pairs)
    assert b.score == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score)
    assert c.score == pytest.approx(sacrebleu.corpus_chrf(hyps, [refs]).score)
    assert chrf(hyps, refs, word_order=2).score == pytest.approx(
        sacrebleu.corpus_chrf(hyps, [refs], word_order=2).score)
    for s in (b, c):
        assert s.low < s.score < s.high and s.high - s.low > 0.5, s
        assert "version:2.6.0" in s.signature
    print(f"copy baseline on {len(pairs)} test pairs: {b}; {c}")
    assert bleu(hyps, refs) == b  # the bootstrap's seed is fixed


def test_perfect_and_empty_translations():
    """Does a perfect translation score 100 and an empty one 0?"""
    refs = [p.tgt for p in corpora.parallel("ru", "valid")][:50]
    assert bleu(refs, refs).score == pytest.approx(100) and chrf(refs, refs).score == pytest.approx(100)
    assert bleu([""] * len(refs), refs).score == 0


def test_bad_inputs_are_refused_clearly():
    """Are a length mismatch, a bare string and token ids refused with a message that says what to do?"""
    with pytest.raises(ValueError, match="one reference per hypothesis"):
        bleu(["a", "b"], ["a"])
    with pytest.raises(TypeError, match="not one string"):
        chrf("a b", "a b")
    with pytest.raises(TypeError, match="decode"):
        bleu([[1, 2, 3]], ["a"])
    with pytest.raises(ValueError, match="no sentences"):
        bleu([], [])
