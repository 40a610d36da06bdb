"""Known-correct variants of chapter 08's graded functions (see tests/variants/__init__.py)."""
from tests.variants import Variant

VARIANTS = [
    Variant("sort_by_bucket", "Hugging Face's Reformer (argsort of bucket * T + position)", '''
def sort_by_bucket(buckets):
    T = buckets.shape[-1]
    ticker = torch.arange(T, device=buckets.device).expand(buckets.shape)
    sorted_idx = torch.argsort(buckets.long() * T + ticker, dim=-1)
    undo_idx = torch.argsort(sorted_idx, dim=-1)
    return sorted_idx, undo_idx
'''),
]
