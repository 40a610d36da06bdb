"""Known-wrong versions of chapter 07's graded functions (appended to the solution notebook)."""
from tests.mistakes import Mistake

MISTAKES = [
    # ------------------------------------------------------------ update_memory
    Mistake("update_memory", "memory keeps its gradient", '''
def update_memory(memory, hidden, mem_len):
    if mem_len == 0:
        return None
    states = hidden if memory is None else torch.cat([memory, hidden], dim=1)
    return states[:, -mem_len:]
''', feedback="keeps its gradient"),
    Mistake("update_memory", "memory truncated from the wrong end", '''
def update_memory(memory, hidden, mem_len):
    if mem_len == 0:
        return None
    states = hidden if memory is None else torch.cat([memory, hidden], dim=1)
    return states[:, :mem_len].detach()
''', feedback="wrong end"),
    Mistake("update_memory", "hidden before memory", '''
def update_memory(memory, hidden, mem_len):
    if mem_len == 0:
        return None
    states = hidden if memory is None else torch.cat([hidden, memory], dim=1)
    return states[:, -mem_len:].detach()
''', feedback="put before the memory"),
    Mistake("update_memory", "mem_len 0 keeps everything", '''
def update_memory(memory, hidden, mem_len):
    states = hidden if memory is None else torch.cat([memory, hidden], dim=1)
    return states[:, -mem_len:].detach()
''', feedback="should be None"),
    Mistake("update_memory", "modifies hidden in place", '''
_update_memory_ok = update_memory
def update_memory(memory, hidden, mem_len):
    out = None if mem_len == 0 else _update_memory_ok(memory, hidden, mem_len).clone()
    hidden.mul_(0)
    return out
''', feedback="in place"),
    # ------------------------------------------------------------ xl_attention_mask
    Mistake("xl_attention_mask", "the mask hides the memory", '''
def xl_attention_mask(qlen, mlen, device=None):
    mask = torch.ones(qlen, mlen + qlen, dtype=torch.bool, device=device).tril(mlen)
    mask[:, :mlen] = False
    return mask
''', feedback="hides the memory"),
    Mistake("xl_attention_mask", "plain causal mask over all keys", '''
def xl_attention_mask(qlen, mlen, device=None):
    return torch.ones(qlen, mlen + qlen, dtype=torch.bool, device=device).tril()
''', feedback="causal mask over all"),
    Mistake("xl_attention_mask", "off by one", '''
def xl_attention_mask(qlen, mlen, device=None):
    return torch.ones(qlen, mlen + qlen, dtype=torch.bool, device=device).tril(mlen - 1)
''', feedback="off by one"),
    Mistake("xl_attention_mask", "inverted", '''
def xl_attention_mask(qlen, mlen, device=None):
    return ~torch.ones(qlen, mlen + qlen, dtype=torch.bool, device=device).tril(mlen)
''', feedback="inverted"),
    # ------------------------------------------------------------ relative_positional_encoding
    Mistake("relative_positional_encoding", "ascending positions", '''
_rpe_ok = relative_positional_encoding
def relative_positional_encoding(klen, d_model, device=None):
    return _rpe_ok(klen, d_model, device).flip(0)
''', feedback="ascending"),
    Mistake("relative_positional_encoding", "sin and cos interleaved", '''
def relative_positional_encoding(klen, d_model, device=None):
    pos = torch.arange(klen - 1, -1, -1, dtype=torch.float64, device=device)
    angle = pos[:, None] / 10000 ** (torch.arange(0, d_model, 2, dtype=torch.float64, device=device) / d_model)
    return torch.stack([angle.sin(), angle.cos()], dim=-1).reshape(klen, d_model).float()
''', feedback="interleaved"),
    Mistake("relative_positional_encoding", "cos half first", '''
def relative_positional_encoding(klen, d_model, device=None):
    pos = torch.arange(klen - 1, -1, -1, dtype=torch.float64, device=device)
    angle = pos[:, None] / 10000 ** (torch.arange(0, d_model, 2, dtype=torch.float64, device=device) / d_model)
    return torch.cat([angle.cos(), angle.sin()], dim=-1).float()
''', feedback="cos half first"),
    Mistake("relative_positional_encoding", "exponent k/d", '''
def relative_positional_encoding(klen, d_model, device=None):
    pos = torch.arange(klen - 1, -1, -1, dtype=torch.float64, device=device)
    angle = pos[:, None] / 10000 ** (torch.arange(d_model // 2, dtype=torch.float64, device=device) / d_model)
    return torch.cat([angle.sin(), angle.cos()], dim=-1).float()
''', feedback="2k/d"),
    # ------------------------------------------------------------ rel_shift
    Mistake("rel_shift", "labml #185: [:-1] instead of [1:]", '''
def rel_shift(x):
    *lead, qlen, klen = x.shape
    padded = torch.cat([x.new_zeros(*lead, qlen, 1), x], dim=-1).reshape(*lead, klen + 1, qlen)
    return padded[..., :-1, :].reshape(*lead, qlen, klen)
''', feedback="labml #185"),
    Mistake("rel_shift", "zero column on the right", '''
def rel_shift(x):
    *lead, qlen, klen = x.shape
    padded = torch.cat([x, x.new_zeros(*lead, qlen, 1)], dim=-1).reshape(*lead, klen + 1, qlen)
    return padded[..., 1:, :].reshape(*lead, qlen, klen)
''', feedback="padded on the right"),
    Mistake("rel_shift", "no shift", '''
def rel_shift(x):
    return x.clone()
''', feedback="no shift at all"),
    Mistake("rel_shift", "rows shifted the wrong way", '''
def rel_shift(x):
    *_, qlen, klen = x.shape
    out = torch.zeros_like(x)
    for i in range(qlen):
        s = qlen - 1 - i
        out[..., i, s:] = x[..., i, :klen - s]
    return out
''', feedback="wrong way"),
    Mistake("rel_shift", "only works without memory (square)", '''
def rel_shift(x):
    *lead, qlen, klen = x.shape
    padded = torch.cat([x.new_zeros(*lead, qlen, 1), x], dim=-1).reshape(*lead, klen + 1, qlen)
    out = padded[..., 1:, :].reshape(*lead, qlen, klen)
    return out if qlen == klen else x.clone()
'''),
    Mistake("rel_shift", "float32 padding", '''
def rel_shift(x):
    *lead, qlen, klen = x.shape
    padded = torch.cat([torch.zeros(*lead, qlen, 1, device=x.device), x.float()], dim=-1)
    padded = padded.reshape(*lead, klen + 1, qlen)
    return padded[..., 1:, :].reshape(*lead, qlen, klen)
''', feedback="dtype"),
    # ------------------------------------------------------------ rel_attention_scores
    Mistake("rel_attention_scores", "u and v swapped", '''
def rel_attention_scores(q, k, r, u, v):
    ac = (q + v[:, None, :]) @ k.transpose(-2, -1)
    bd = torch.einsum("bhid,hcd->bhic", q + u[:, None, :], r)
    return (ac + rel_shift(bd)) / math.sqrt(q.shape[-1])
''', feedback="u and v swapped"),
    Mistake("rel_attention_scores", "no rel_shift", '''
def rel_attention_scores(q, k, r, u, v):
    ac = (q + u[:, None, :]) @ k.transpose(-2, -1)
    bd = torch.einsum("bhid,hcd->bhic", q + v[:, None, :], r)
    return (ac + bd) / math.sqrt(q.shape[-1])
''', feedback="not rel-shifted"),
    Mistake("rel_attention_scores", "no scaling", '''
def rel_attention_scores(q, k, r, u, v):
    ac = (q + u[:, None, :]) @ k.transpose(-2, -1)
    bd = torch.einsum("bhid,hcd->bhic", q + v[:, None, :], r)
    return ac + rel_shift(bd)
''', feedback="no scaling"),
    Mistake("rel_attention_scores", "biases ignored", '''
def rel_attention_scores(q, k, r, u, v):
    ac = q @ k.transpose(-2, -1)
    bd = torch.einsum("bhid,hcd->bhic", q, r)
    return (ac + rel_shift(bd)) / math.sqrt(q.shape[-1])
''', feedback="u and v are missing"),
    Mistake("rel_attention_scores", "term (b) missing", '''
def rel_attention_scores(q, k, r, u, v):
    ac = (q + u[:, None, :]) @ k.transpose(-2, -1)
    bd = torch.einsum("hd,hcd->hc", v, r)[None, :, None, :].expand(q.shape[0], -1, q.shape[2], -1)
    return (ac + rel_shift(bd)) / math.sqrt(q.shape[-1])
''', feedback="term (b) is missing"),
    Mistake("rel_attention_scores", "adds u into q in place", '''
def rel_attention_scores(q, k, r, u, v):
    q0 = q.clone()
    q += u[:, None, :]
    ac = q @ k.transpose(-2, -1)
    bd = torch.einsum("bhid,hcd->bhic", q0 + v[:, None, :], r)
    return (ac + rel_shift(bd)) / math.sqrt(q.shape[-1])
''', feedback="in place"),
    # ------------------------------------------------------------ permutation_masks
    Mistake("permutation_masks", "query stream sees its own content", '''
_permutation_masks_ok = permutation_masks
def permutation_masks(perm):
    content, _ = _permutation_masks_ok(perm)
    return content, content.clone()
''', feedback="sees its own content"),
    Mistake("permutation_masks", "perm instead of rank", '''
def permutation_masks(perm):
    return perm[None, :] <= perm[:, None], perm[None, :] < perm[:, None]
''', feedback="instead of rank"),
    Mistake("permutation_masks", "transposed", '''
_permutation_masks_ok = permutation_masks
def permutation_masks(perm):
    content, query = _permutation_masks_ok(perm)
    return content.T, query.T
''', feedback="transposed"),
    Mistake("permutation_masks", "content stream strict", '''
_permutation_masks_ok = permutation_masks
def permutation_masks(perm):
    content, query = _permutation_masks_ok(perm)
    return query, query.clone()
''', feedback="does not see itself"),
    # ------------------------------------------------------------ TwoStreamAttention
    Mistake("TwoStreamAttention", "query stream reads its own token", '''
class TwoStreamAttention(TwoStreamAttention):
    def forward(self, h, g, perm):
        global permutation_masks
        ok = permutation_masks
        permutation_masks = lambda p: (ok(p)[0], ok(p)[0].clone())
        try:
            return super().forward(h, g, perm)
        finally:
            permutation_masks = ok
''', feedback="reads its own token"),
    Mistake("TwoStreamAttention", "keys and values from the query stream", '''
class TwoStreamAttention(TwoStreamAttention):
    def forward(self, h, g, perm):
        new_h = super().forward(h, h, perm)[0]
        return new_h, super().forward(g, g, perm)[1]
''', feedback="taken from the query stream g"),
    Mistake("TwoStreamAttention", "query stream queries from h", '''
class TwoStreamAttention(TwoStreamAttention):
    def forward(self, h, g, perm):
        return super().forward(h, h, perm)
''', feedback="queries built from h"),
    Mistake("TwoStreamAttention", "content stream without the diagonal", '''
class TwoStreamAttention(TwoStreamAttention):
    def forward(self, h, g, perm):
        global permutation_masks
        ok = permutation_masks
        permutation_masks = lambda p: (ok(p)[1], ok(p)[1].clone())
        try:
            return super().forward(h, g, perm)
        finally:
            permutation_masks = ok
''', feedback="does not see its own token"),
    Mistake("TwoStreamAttention", "NaN for a row with no key", '''
class TwoStreamAttention(TwoStreamAttention):
    def forward(self, h, g, perm):
        B, T, D = h.shape
        H = self.n_heads
        content, query = permutation_masks(perm)
        k = self.w_k(h).reshape(B, T, H, D // H).transpose(1, 2)
        v = self.w_v(h).reshape(B, T, H, D // H).transpose(1, 2)
        def attend(x, mask):
            q = self.w_q(x).reshape(B, T, H, D // H).transpose(1, 2)
            scores = (q @ k.transpose(-2, -1) / math.sqrt(D // H)).masked_fill(~mask, float("-inf"))
            return self.w_o((scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, D))
        return attend(h, content), attend(g, query)
''', feedback="NaN"),
    Mistake("TwoStreamAttention", "-1e30 instead of -inf: a row with no key averages", '''
class TwoStreamAttention(TwoStreamAttention):
    def forward(self, h, g, perm):
        B, T, D = h.shape
        H = self.n_heads
        content, query = permutation_masks(perm)
        k = self.w_k(h).reshape(B, T, H, D // H).transpose(1, 2)
        v = self.w_v(h).reshape(B, T, H, D // H).transpose(1, 2)
        def attend(x, mask):
            q = self.w_q(x).reshape(B, T, H, D // H).transpose(1, 2)
            scores = q @ k.transpose(-2, -1) / math.sqrt(D // H) - 1e30 * (~mask).float()
            return self.w_o((scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, D))
        return attend(h, content), attend(g, query)
''', feedback="-1e30"),
    Mistake("TwoStreamAttention", "projections with bias", '''
class TwoStreamAttention(TwoStreamAttention):
    def __init__(self, d_model, n_heads):
        super().__init__(d_model, n_heads)
        self.w_o = nn.Linear(d_model, d_model)
''', feedback="the parameters should be"),
    Mistake("TwoStreamAttention", "content stream detached", '''
class TwoStreamAttention(TwoStreamAttention):
    def forward(self, h, g, perm):
        new_h, new_g = super().forward(h, g, perm)
        return new_h.detach(), new_g
'''),
    # ------------------------------------------------------------ partial_prediction_targets
    Mistake("partial_prediction_targets", "the first steps of the order", '''
_ppt_ok = partial_prediction_targets
def partial_prediction_targets(perm, k):
    return _ppt_ok(perm.flip(0), k)
''', feedback="the first T // k steps"),
    Mistake("partial_prediction_targets", "steps instead of positions", '''
def partial_prediction_targets(perm, k):
    T = len(perm)
    if not 1 <= k <= T:
        raise ValueError("k")
    is_target = torch.zeros(T, dtype=torch.bool)
    is_target[T - T // k:] = True
    return is_target, F.one_hot(torch.arange(T - T // k, T), T).float()
''', feedback="not the positions"),
    Mistake("partial_prediction_targets", "targets sorted by position", '''
_ppt_ok = partial_prediction_targets
def partial_prediction_targets(perm, k):
    is_target, _ = _ppt_ok(perm, k)
    return is_target, F.one_hot(is_target.nonzero()[:, 0], len(perm)).float()
''', feedback="sorted by position"),
    Mistake("partial_prediction_targets", "no error for k = 0", '''
_ppt_ok = partial_prediction_targets
def partial_prediction_targets(perm, k):
    return _ppt_ok(perm, max(k, 1)) if k < 1 else _ppt_ok(perm, min(k, len(perm)))
''', feedback="should raise ValueError"),
    # ------------------------------------------------------------ RelMultiHeadAttention
    Mistake("RelMultiHeadAttention", "u and v swapped in the module", '''
class RelMultiHeadAttention(RelMultiHeadAttention):
    def forward(self, x, memory=None):
        u, v = self.u, self.v
        self.u, self.v = v, u
        try:
            return super().forward(x, memory)
        finally:
            self.u, self.v = u, v
''', feedback="u and v swapped"),
    Mistake("RelMultiHeadAttention", "the mask hides the memory (module)", '''
_xl_mask_ok = xl_attention_mask
class RelMultiHeadAttention(RelMultiHeadAttention):
    def forward(self, x, memory=None):
        global xl_attention_mask
        def hiding(qlen, mlen, device=None):
            m = _xl_mask_ok(qlen, mlen, device).clone()
            m[:, :mlen] = False
            return m
        xl_attention_mask = hiding
        try:
            return super().forward(x, memory)
        finally:
            xl_attention_mask = _xl_mask_ok
''', feedback="hides the memory"),
    Mistake("RelMultiHeadAttention", "u and v initialised randomly", '''
class RelMultiHeadAttention(RelMultiHeadAttention):
    def __init__(self, d_model, n_heads):
        super().__init__(d_model, n_heads)
        with torch.no_grad():
            self.u.normal_()
            self.v.normal_()
''', feedback="zeros"),
    Mistake("RelMultiHeadAttention", "r_net with bias", '''
class RelMultiHeadAttention(RelMultiHeadAttention):
    def __init__(self, d_model, n_heads):
        super().__init__(d_model, n_heads)
        self.r_net = nn.Linear(d_model, d_model)
''', feedback="the parameters should be"),
    Mistake("RelMultiHeadAttention", "output detached", '''
class RelMultiHeadAttention(RelMultiHeadAttention):
    def forward(self, x, memory=None):
        return super().forward(x, memory).detach()
'''),
    # ------------------------------------------------------------ XLLayer
    Mistake("XLLayer", "memory caches the output", '''
class XLLayer(XLLayer):
    def forward(self, x, memory=None, mem_len=0):
        out, _ = super().forward(x, memory, mem_len)
        return out, update_memory(memory, out, mem_len)
''', feedback="caches the layer's output"),
    Mistake("XLLayer", "pre-norm", '''
class XLLayer(XLLayer):
    def forward(self, x, memory=None, mem_len=0):
        h = x + self.attn(self.norm1(x), memory)
        out = h + self.linear2(torch.relu(self.linear1(self.norm2(h))))
        return out, update_memory(memory, x, mem_len)
''', feedback="pre-norm"),
    Mistake("XLLayer", "memory ignored", '''
class XLLayer(XLLayer):
    def forward(self, x, memory=None, mem_len=0):
        out, _ = super().forward(x, None, mem_len)
        return out, update_memory(memory, x, mem_len)
'''),
    Mistake("XLLayer", "returns only the output", '''
class XLLayer(XLLayer):
    def forward(self, x, memory=None, mem_len=0):
        return super().forward(x, memory, mem_len)[0]
''', feedback="tuple (out, new_memory)"),
]
