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
    Variant("TwoStreamAttention", "PyTorch's scaled_dot_product_attention with a bool mask, NaN rows zeroed", '''
class TwoStreamAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.w_q, self.w_k, self.w_v, self.w_o = (nn.Linear(d_model, d_model, bias=False) for _ in range(4))

    def forward(self, h, g, perm):
        content, query = permutation_masks(perm.to(h.device))
        split = lambda x: x.unflatten(-1, (self.n_heads, -1)).transpose(1, 2)
        k, v = split(self.w_k(h)), split(self.w_v(h))
        def attend(x, mask):
            out = F.scaled_dot_product_attention(split(self.w_q(x)), k, v, attn_mask=mask)
            out = torch.where(mask.any(-1)[:, None], out, torch.zeros_like(out))
            return self.w_o(out.transpose(1, 2).flatten(2))
        return attend(h, content), attend(g, query)
'''),
    Variant("partial_prediction_targets", "a cut point on the ranks (XLNet's `cut_idx`)", '''
def partial_prediction_targets(perm, k):
    T = perm.numel()
    if k < 1 or k > T:
        raise ValueError(f"k must be in 1..{T}")
    cut = T - T // k
    rank = torch.empty_like(perm)
    rank[perm] = torch.arange(T, device=perm.device)
    return rank >= cut, (perm[cut:, None] == torch.arange(T, device=perm.device)).float()
'''),
]
