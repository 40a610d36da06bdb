"""Translation metrics from the field's reference implementation, sacreBLEU, with confidence intervals.

    from attnkit.metrics import bleu, chrf
    s = bleu(hypotheses, references)   # Score(name='BLEU', score=15.1, low=9.3, high=21.0, n=274, ...)
    print(s)                           # BLEU 15.1 (95% bootstrap interval 9.3 to 21.0, 274 sentences)

Both take detokenised strings (what a reader sees: decode your subwords first), one reference per
hypothesis, and score the corpus as a whole. Test sets here hold a few hundred sentences, so a score
moves by several points from one sample of sentences to another: each Score carries sacreBLEU's
paired bootstrap interval (`--confidence`: 1,000 resamples of the sentences, 95%, its fixed seed
12345 unless the environment sets SACREBLEU_SEED), read as mean +- half the 2.5-97.5 percentile width,
exactly as sacreBLEU prints it. Compare two systems by whether their intervals overlap, not by the
point scores alone.
"""
from __future__ import annotations

from typing import NamedTuple, Sequence


class Score(NamedTuple):
    """A corpus score (0-100), its 95% bootstrap interval (`low`, `high`), the number of sentences
    and sacreBLEU's signature (which says how it was computed: tokenizer, smoothing, version)."""
    name: str
    score: float
    low: float
    high: float
    n: int
    signature: str

    def __str__(self) -> str:
        return (f"{self.name} {self.score:.1f} (95% bootstrap interval {self.low:.1f} to {self.high:.1f}, "
                f"{self.n} sentences)")


def bleu(hyps: Sequence[str], refs: Sequence[str], tokenize: str = "13a", n_bootstrap: int = 1000) -> Score:
    """Corpus BLEU (Papineni et al., 2002) as sacreBLEU computes it: 4-grams, brevity penalty,
    its `13a` tokenizer (WMT's standard; "intl" splits more Unicode punctuation), case kept."""
    from sacrebleu.metrics import BLEU
    return _score("BLEU", BLEU(tokenize=tokenize), hyps, refs, n_bootstrap)


def chrf(hyps: Sequence[str], refs: Sequence[str], word_order: int = 0, n_bootstrap: int = 1000) -> Score:
    """Corpus chrF (Popovic, 2015): F-score (beta 2) of character n-grams up to 6, white space ignored;
    `word_order=2` gives chrF++. Steadier than BLEU on short sentences and small test sets."""
    from sacrebleu.metrics import CHRF
    return _score("chrF++" if word_order else "chrF", CHRF(word_order=word_order), hyps, refs, n_bootstrap)


def _score(name: str, metric, hyps: Sequence[str], refs: Sequence[str], n_bootstrap: int) -> Score:
    hyps, refs = _checked(hyps, refs)
    full = metric.corpus_score(hyps, [refs])
    if n_bootstrap > 1 and len(hyps) > 1:
        boot = metric.corpus_score(hyps, [refs], n_bootstrap=n_bootstrap)
        low, high = boot._mean - boot._ci, boot._mean + boot._ci  # what sacreBLEU prints as "mu = m +- ci"
    else:
        low = high = full.score
    return Score(name, float(full.score), float(low), float(high), len(hyps), str(metric.get_signature()))


def _checked(hyps: Sequence[str], refs: Sequence[str]) -> tuple[list[str], list[str]]:
    if isinstance(hyps, str) or isinstance(refs, str):
        raise TypeError("hyps and refs are lists of sentences (one string each), not one string")
    hyps, refs = list(hyps), list(refs)
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses but {len(refs)} references: give one reference per hypothesis")
    if not hyps:
        raise ValueError("no sentences to score")
    bad = next((x for x in hyps + refs if not isinstance(x, str)), None)
    if bad is not None:
        raise TypeError(f"sentences must be strings (decode token ids first), not {type(bad).__name__}")
    return hyps, refs
