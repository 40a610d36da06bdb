"""Known-correct variants of chapter 01's graded functions (see tests/variants/__init__.py)."""
from tests.variants import Variant

VARIANTS = [
    Variant("sequence_log_prob", "F.cross_entropy with ignore_index (PyTorch's loss)", '''
def sequence_log_prob(logits, targets, pad_id):
    nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), targets, ignore_index=pad_id,
                                            reduction="none")
    return -nll.sum(1)
'''),
]
