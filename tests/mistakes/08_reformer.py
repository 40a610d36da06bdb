"""Known-wrong versions of chapter 08's graded functions (appended to the solution notebook)."""
from tests.mistakes import Mistake

MISTAKES = [
    # ------------------------------------------------------------ lsh_hash
    Mistake("lsh_hash", "[-xR ; xR] instead of [xR ; -xR]", '''
def lsh_hash(x, rotations):
    r = torch.einsum("btd,ndr->nbtr", x, rotations)
    return torch.cat([-r, r], dim=-1).argmax(dim=-1)
''', feedback="-xR come first"),
    Mistake("lsh_hash", "argmax of |xR|", '''
def lsh_hash(x, rotations):
    r = torch.einsum("btd,ndr->nbtr", x, rotations)
    return r.abs().argmax(dim=-1)
''', feedback="argmax of |xR|"),
    # ------------------------------------------------------------ sort_by_bucket
    Mistake("sort_by_bucket", "a sort by bucket alone (not stable by position)", '''
def sort_by_bucket(buckets):
    sorted_idx = buckets.argsort(dim=-1)
    return sorted_idx, sorted_idx.argsort(dim=-1)
''', feedback="a sort by bucket alone"),
    Mistake("sort_by_bucket", "ties in decreasing position", '''
def sort_by_bucket(buckets):
    T = buckets.shape[-1]
    sorted_idx = (buckets.long() * T + (T - 1 - torch.arange(T))).argsort(dim=-1)
    return sorted_idx, sorted_idx.argsort(dim=-1)
''', feedback="decreasing position"),
    Mistake("sort_by_bucket", "undo_idx not the inverse permutation", '''
_sort_by_bucket_ok = sort_by_bucket
def sort_by_bucket(buckets):
    sorted_idx, _ = _sort_by_bucket_ok(buckets)
    return sorted_idx, sorted_idx
''', feedback="undo_idx not the inverse permutation"),
    # ------------------------------------------------------------ chunked_lsh_attention
    Mistake("chunked_lsh_attention", "no look-back to the previous chunk", '''
def look_back(x):
    return x
''', feedback="no look-back"),
    Mistake("chunked_lsh_attention", "look-back to the next chunk", '''
def look_back(x):
    return torch.cat([x, x.roll(-1, dims=1)], dim=2)
''', feedback="next chunk"),
    Mistake("chunked_lsh_attention", "self-attention not masked in shared-QK", '''
def chunked_lsh_attention(sq, sv, spos, chunk_len, causal=False):
    B, T, D = sq.shape
    C = T // chunk_len
    q = sq.reshape(B, C, chunk_len, D)
    k = look_back(F.normalize(sq, dim=-1).reshape(B, C, chunk_len, D))
    v = look_back(sv.reshape(B, C, chunk_len, -1))
    qpos = spos.reshape(B, C, chunk_len)
    kpos = look_back(qpos)
    scores = q @ k.transpose(-1, -2) / math.sqrt(D)
    if causal:
        scores = scores.masked_fill(kpos[:, :, None, :] > qpos[..., None], -1e9)
    return (scores.softmax(-1) @ v).reshape(B, T, -1), scores.logsumexp(-1).reshape(B, T)
''', feedback="self-attention not masked"),
    Mistake("chunked_lsh_attention", "causal mask by sorted position", '''
_chunked_ok = chunked_lsh_attention
def chunked_lsh_attention(sq, sv, spos, chunk_len, causal=False):
    B, T, D = sq.shape
    return _chunked_ok(sq, sv, torch.arange(T).expand(B, T) if causal else spos, chunk_len, causal)
''', feedback="sorted position"),
    Mistake("chunked_lsh_attention", "keys not normalised", '''
def chunked_lsh_attention(sq, sv, spos, chunk_len, causal=False):
    B, T, D = sq.shape
    C = T // chunk_len
    q = sq.reshape(B, C, chunk_len, D)
    k = look_back(q)
    v = look_back(sv.reshape(B, C, chunk_len, -1))
    qpos = spos.reshape(B, C, chunk_len)
    kpos = look_back(qpos)
    scores = q @ k.transpose(-1, -2) / math.sqrt(D)
    if causal:
        scores = scores.masked_fill(kpos[:, :, None, :] > qpos[..., None], -1e9)
    scores = scores.masked_fill(kpos[:, :, None, :] == qpos[..., None], -1e5)
    return (scores.softmax(-1) @ v).reshape(B, T, -1), scores.logsumexp(-1).reshape(B, T)
''', feedback="not unit-normalised"),
    Mistake("lsh_attention", "chunked attention weights exp(s - lse) in float32 (Hugging Face's Reformer)", '''
def chunked_lsh_attention(sq, sv, spos, chunk_len, causal=False):
    B, T, D = sq.shape
    Dv = sv.shape[-1]
    C = T // chunk_len
    q = sq.reshape(B, C, chunk_len, D)
    k = look_back(F.normalize(sq, dim=-1).reshape(B, C, chunk_len, D))
    v = look_back(sv.reshape(B, C, chunk_len, Dv))
    qpos = spos.reshape(B, C, chunk_len)
    kpos = look_back(qpos)
    scores = q @ k.transpose(-1, -2) / math.sqrt(D)
    if causal:
        scores = scores.masked_fill(kpos[:, :, None, :] > qpos[..., None], -1e9)
    scores = scores.masked_fill(kpos[:, :, None, :] == qpos[..., None], -1e5)
    lse = scores.logsumexp(dim=-1, keepdim=True)
    out = torch.exp(scores - lse) @ v
    return out.reshape(B, T, Dv), lse.reshape(B, T)
''', feedback="float32"),
    # ------------------------------------------------------------ combine_hash_rounds
    Mistake("combine_hash_rounds", "hash rounds averaged, not logsumexp-weighted", '''
def combine_hash_rounds(outs, lses):
    return outs.mean(dim=0)
''', feedback="averaged"),
    Mistake("combine_hash_rounds", "softmax over positions", '''
def combine_hash_rounds(outs, lses):
    return (torch.softmax(lses, dim=-1).unsqueeze(-1) * outs).sum(dim=0)
''', feedback="wrong axis"),
    Mistake("combine_hash_rounds", "unnormalised exp weights", '''
def combine_hash_rounds(outs, lses):
    return (lses.exp().unsqueeze(-1) * outs).sum(dim=0)
''', feedback="without normalising"),
    # ------------------------------------------------------------ lsh_attention
    Mistake("lsh_attention", "output left in sorted order", '''
_sort_ok = sort_by_bucket
def lsh_attention(qk, v, rotations, chunk_len, causal=False):
    B, T, D = qk.shape
    outs, lses = [], []
    for bk in lsh_hash(qk, rotations):
        sidx, _ = _sort_ok(bk)
        sq = qk.gather(1, sidx[..., None].expand(B, T, D))
        sv = v.gather(1, sidx[..., None].expand(B, T, v.shape[-1]))
        out, lse = chunked_lsh_attention(sq, sv, sidx, chunk_len, causal)
        outs.append(out)
        lses.append(lse)
    return combine_hash_rounds(torch.stack(outs), torch.stack(lses))
''', feedback="sorted order"),
    Mistake("lsh_attention", "rounds averaged inside lsh_attention", '''
_lsh_ok = lsh_attention
def lsh_attention(qk, v, rotations, chunk_len, causal=False):
    outs = [_lsh_ok(qk, v, rotations[r:r + 1], chunk_len, causal) for r in range(len(rotations))]
    return torch.stack(outs).mean(0)
''', feedback="averaged"),
    Mistake("lsh_attention", "causal flag ignored", '''
_lsh_ok = lsh_attention
def lsh_attention(qk, v, rotations, chunk_len, causal=False):
    return _lsh_ok(qk, v, rotations, chunk_len, False)
'''),
    # ------------------------------------------------------------ LSHSelfAttention
    Mistake("LSHSelfAttention", "heads split by a bare reshape", '''
_LSH_ok = LSHSelfAttention
class LSHSelfAttention(_LSH_ok):
    def split(self, x):
        B, T, D = x.shape
        return x.reshape(B * self.n_heads, T, -1)
'''),
    Mistake("LSHSelfAttention", "no output projection", '''
_LSH_ok = LSHSelfAttention
class LSHSelfAttention(_LSH_ok):
    def forward(self, x, rotations=None):
        out = self.out
        self.out = nn.Identity()
        try:
            return super().forward(x, rotations)
        finally:
            self.out = out
'''),
    # ------------------------------------------------------------ ReversibleBlock
    Mistake("ReversibleBlock", "F and G swapped in the inversion", '''
_RB_ok = ReversibleBlock
class ReversibleBlock(_RB_ok):
    def inverse(self, y1, y2):
        x2 = y2 - self.f(y1)
        x1 = y1 - self.g(x2)
        return x1, x2

class ToyReversibleBlock(ReversibleBlock):
    def __init__(self, d):
        super().__init__(toy_sublayer(d), toy_sublayer(d))
''', feedback="F and G swapped"),
    Mistake("ReversibleBlock", "g applied to x1 instead of y1", '''
_RB_ok = ReversibleBlock
class ReversibleBlock(_RB_ok):
    def forward(self, x1, x2):
        return x1 + self.f(x2), x2 + self.g(x1)

class ToyReversibleBlock(ReversibleBlock):
    def __init__(self, d):
        super().__init__(toy_sublayer(d), toy_sublayer(d))
''', feedback="g applied to x1"),
    # ------------------------------------------------------------ reversible_block_backward
    Mistake("reversible_block_backward", "F and G swapped in the inversion", '''
def reversible_block_backward(block, y1, y2, dy1, dy2):
    class _Swapped:
        f, g = block.g, block.f
    with torch.enable_grad():
        y1 = y1.detach().requires_grad_(True)
        gy1 = _Swapped.g(y1)
        gy1.backward(dy2)
        dy1 = dy1 + y1.grad
        x2 = (y2 - gy1).detach().requires_grad_(True)
        fx2 = _Swapped.f(x2)
        fx2.backward(dy1)
        x1 = y1 - fx2
    return x1.detach(), x2.detach(), dy1.detach(), (dy2 + x2.grad).detach()
''', feedback="F and G swapped"),
    Mistake("reversible_block_backward", "parameter gradients not accumulated", '''
def reversible_block_backward(block, y1, y2, dy1, dy2):
    with torch.enable_grad():
        y1 = y1.detach().requires_grad_(True)
        gy1 = block.g(y1)
        (d,) = torch.autograd.grad(gy1, y1, dy2)
        dy1 = dy1 + d
        x2 = (y2 - gy1).detach().requires_grad_(True)
        fx2 = block.f(x2)
        (d2,) = torch.autograd.grad(fx2, x2, dy1)
    return (y1 - fx2).detach(), x2.detach(), dy1.detach(), (dy2 + d2).detach()
''', feedback="no gradient was accumulated"),
    Mistake("reversible_block_backward", "gradients passed through unchanged", '''
_rbb_ok = reversible_block_backward
def reversible_block_backward(block, y1, y2, dy1, dy2):
    x1, x2, _, _ = _rbb_ok(block, y1, y2, dy1, dy2)
    return x1, x2, dy1, dy2
''', feedback="passed through unchanged"),
    # ------------------------------------------------------------ ReversibleStack
    Mistake("ReversibleStack", "blocks run by autograd (activations stored)", '''
_RS_ok = ReversibleStack
class ReversibleStack(_RS_ok):
    def forward(self, x1, x2):
        for block in self.blocks:
            x1, x2 = block(x1, x2)
        return x1, x2

class ToyReversibleStack(ReversibleStack):
    def __init__(self, n_layers, d):
        super().__init__([ToyReversibleBlock(d) for _ in range(n_layers)])
''', feedback="activations of every block are stored"),
    Mistake("ReversibleStack", "blocks walked forward in the backward", '''
class ReversibleFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x1, x2, blocks, *params):
        with torch.no_grad():
            for block in blocks:
                x1, x2 = block(x1, x2)
        ctx.blocks = blocks
        ctx.save_for_backward(x1, x2)
        return x1, x2

    @staticmethod
    def backward(ctx, dy1, dy2):
        y1, y2 = ctx.saved_tensors
        for block in ctx.blocks:
            y1, y2, dy1, dy2 = reversible_block_backward(block, y1, y2, dy1, dy2)
        return (dy1, dy2, None) + (None,) * len(list(ctx.blocks.parameters()))
'''),
    # ------------------------------------------------------------ chunked_feed_forward
    Mistake("chunked_feed_forward", "chunks split along the wrong axis", '''
def chunked_feed_forward(ff, x, n_chunks):
    return torch.cat([ff(p) for p in x.chunk(n_chunks, dim=0)], dim=0)
''', feedback="wrong axis"),
    Mistake("chunked_feed_forward", "not chunked at all", '''
def chunked_feed_forward(ff, x, n_chunks):
    return ff(x)
''', feedback="nothing was chunked"),
]
