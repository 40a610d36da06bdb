"""Known-correct variants of chapter 03's graded functions (see tests/variants/__init__.py)."""
from tests.variants import Variant

VARIANTS = [
    Variant("sinusoidal_positional_encoding", "PyTorch's tutorial (float32, div_term; even d_model only)", '''
def sinusoidal_positional_encoding(max_len, d_model):
    position = torch.arange(max_len).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe
'''),
    Variant("causal_mask", "the Annotated Transformer's subsequent_mask", '''
def causal_mask(T, device=None):
    return torch.triu(torch.ones(T, T, device=device), diagonal=1) == 0
'''),
    Variant("split_heads", "the features cut into heads and stacked (chunk, stack)", '''
def split_heads(x, n_heads):
    return torch.stack(x.chunk(n_heads, dim=-1), dim=1)
'''),
    Variant("split_heads", "the Annotated Transformer (view, transpose)", '''
def split_heads(x, n_heads):
    B, T, D = x.shape
    return x.view(B, -1, n_heads, D // n_heads).transpose(1, 2)
'''),
    Variant("merge_heads", "the Annotated Transformer (transpose, contiguous, view)", '''
def merge_heads(x):
    B, H, T, d_k = x.shape
    return x.transpose(1, 2).contiguous().view(B, -1, H * d_k)
'''),
    Variant("noam_lr", "the Annotated Transformer's rate()", '''
def noam_lr(step, d_model, warmup):
    if step == 0:
        step = 1
    return d_model ** (-0.5) * min(step ** (-0.5), step * warmup ** (-1.5))
'''),
]
