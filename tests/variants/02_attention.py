"""Known-correct variants of chapter 02's graded functions (see tests/variants/__init__.py)."""
from tests.variants import Variant

VARIANTS = [
    Variant("dot_score", "batched matrix product (bmm)", '''
def dot_score(s, h):
    return torch.bmm(h, s.unsqueeze(2)).squeeze(2)
'''),
    Variant("attention_context", "batched matrix product (bmm)", '''
def attention_context(weights, values):
    return torch.bmm(weights.unsqueeze(1), values).squeeze(1)
'''),
]
