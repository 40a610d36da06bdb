"""Known-correct variants of chapter 05's graded functions (see tests/variants/__init__.py)."""
from tests.variants import Variant

VARIANTS = [
    Variant("filter_logits", "nanoGPT's top-k and the shifted-mask top-p of Hugging Face's old "
            "top_k_top_p_filtering (stable sort, >= top_p)", '''
def filter_logits(logits, top_k=None, top_p=None):
    if top_k is not None and top_k < 1:
        raise ValueError("top_k must be >= 1")
    logits = logits.clone()
    if top_k is not None:
        v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
        logits[logits < v[:, [-1]]] = -float("Inf")
    if top_p is not None and top_p < 1.0:
        sorted_logits, sorted_indices = torch.sort(logits, descending=True, stable=True)
        cumulative_probs = torch.cumsum(torch.softmax(sorted_logits, dim=-1), dim=-1)
        sorted_indices_to_remove = cumulative_probs >= top_p
        sorted_indices_to_remove[..., 1:] = sorted_indices_to_remove[..., :-1].clone()
        sorted_indices_to_remove[..., 0] = False
        indices_to_remove = sorted_indices_to_remove.scatter(1, sorted_indices, sorted_indices_to_remove)
        logits = logits.masked_fill(indices_to_remove, -float("Inf"))
    return logits
'''),
]
