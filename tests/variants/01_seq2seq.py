"""Known-correct variants of chapter 01's graded functions (see tests/variants/__init__.py)."""
from tests.variants import Variant

VARIANTS = [
    Variant("sequence_log_prob", "F.cross_entropy with ignore_index (PyTorch's loss)", '''
def sequence_log_prob(logits, targets, pad_id):
    nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), targets, ignore_index=pad_id,
                                            reduction="none")
    return -nll.sum(1)
'''),
    Variant("corpus_bleu", "sacreBLEU itself, on the tokens joined by spaces (tokenize='none', no smoothing)", '''
def corpus_bleu(hypotheses, references, max_n=4):
    from sacrebleu.metrics import BLEU
    if len(hypotheses) != len(references):
        raise ValueError("one reference per hypothesis")
    bleu = BLEU(tokenize="none", smooth_method="none", max_ngram_order=max_n)
    return bleu.corpus_score([" ".join(h) for h in hypotheses], [[" ".join(r) for r in references]]).score
'''),
]
