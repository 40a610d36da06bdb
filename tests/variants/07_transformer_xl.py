"""Known-correct variants of chapter 07's graded functions (see tests/variants/__init__.py)."""
from tests.variants import Variant

VARIANTS = [
    Variant("rel_shift", "Transformer-XL's _rel_shift (pad a zero column, reshape, drop a row)", '''
def rel_shift(x):
    *lead, qlen, klen = x.shape
    zero_pad = x.new_zeros(*lead, qlen, 1)
    x_padded = torch.cat([zero_pad, x], dim=-1).view(*lead, klen + 1, qlen)
    return x_padded[..., 1:, :].reshape(x.shape)
'''),
]
