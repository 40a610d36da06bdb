"""Known-wrong versions of chapter 03's graded functions (appended to the solution notebook)."""
from tests.mistakes import Mistake

MISTAKES = [
    # ------------------------------------------------------------ scaled_dot_product_attention
    Mistake("scaled_dot_product_attention", "no scaling", '''
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf")).masked_fill(~mask.any(-1, keepdim=True), 0.0)
    w = scores.softmax(-1)
    if mask is not None:
        w = w.masked_fill(~mask, 0.0)
    return w @ v, w
''', feedback="no scaling"),
    Mistake("scaled_dot_product_attention", "mask inverted", '''
_sdpa_ok = scaled_dot_product_attention
def scaled_dot_product_attention(q, k, v, mask=None):
    return _sdpa_ok(q, k, v, None if mask is None else ~mask)
''', feedback="mask inverted"),
    Mistake("scaled_dot_product_attention", "masking after softmax", '''
def scaled_dot_product_attention(q, k, v, mask=None):
    w = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).softmax(-1)
    if mask is not None:
        w = w.masked_fill(~mask, 0.0)
    return w @ v, w
''', feedback="masking after softmax"),
    Mistake("scaled_dot_product_attention", "NaN for a fully masked query", '''
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = scores.softmax(-1)
    return w @ v, w
''', feedback="NaN"),
    Mistake("scaled_dot_product_attention", "additive -inf mask, NaN fixed after the softmax", '''
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores + torch.zeros_like(scores).masked_fill(~mask, float("-inf"))
    w = torch.nan_to_num(scores.softmax(-1), nan=0.0)
    return w @ v, w
''', feedback="contains NaN"),
    Mistake("scaled_dot_product_attention", "modifies q in place", '''
_sdpa_ok = scaled_dot_product_attention
def scaled_dot_product_attention(q, k, v, mask=None):
    out = _sdpa_ok(q, k, v, mask)
    q.zero_()
    return out
''', feedback="in place"),
    # ------------------------------------------------------------ masks
    Mistake("causal_mask", "off by one: a position cannot see itself", '''
def causal_mask(T, device=None):
    return torch.ones(T, T, dtype=torch.bool, device=device).tril(-1)
''', feedback="off by one"),
    Mistake("causal_mask", "off by one: a position sees the next one", '''
def causal_mask(T, device=None):
    return torch.ones(T, T, dtype=torch.bool, device=device).tril(1)
''', feedback="off by one"),
    Mistake("causal_mask", "upper triangle", '''
def causal_mask(T, device=None):
    return torch.ones(T, T, dtype=torch.bool, device=device).triu()
''', feedback="upper triangle"),
    Mistake("padding_mask", "shape (B, S)", '''
def padding_mask(tokens, pad_id):
    return tokens != pad_id
''', feedback="should have shape (3, 1, 1, 4)"),
    # ------------------------------------------------------------ heads
    Mistake("split_heads", "as_strided with a contiguous x's strides", '''
def split_heads(x, n_heads):
    B, T, D = x.shape
    d_k = D // n_heads
    return x.as_strided((B, n_heads, T, d_k), (T * D, d_k, D, 1))
''', feedback="non-contiguous"),
    Mistake("split_heads", "heads split without a transpose", '''
def split_heads(x, n_heads):
    B, T, D = x.shape
    return x.reshape(B, n_heads, T, D // n_heads)
''', feedback="without a transpose"),
    Mistake("merge_heads", "heads merged without a transpose", '''
def merge_heads(x):
    B, H, T, d_k = x.shape
    return x.reshape(B, T, H * d_k)
''', feedback="without a transpose"),
    Mistake("merge_heads", "view after the transpose", '''
def merge_heads(x):
    B, H, T, d_k = x.shape
    return x.transpose(1, 2).view(B, T, H * d_k)
''', feedback="view"),
    Mistake("MultiHeadAttention", "no output projection", '''
class MultiHeadAttention(MultiHeadAttention):
    def forward(self, query, key, value, mask=None):
        q = split_heads(self.w_q(query), self.n_heads)
        k = split_heads(self.w_k(key), self.n_heads)
        v = split_heads(self.w_v(value), self.n_heads)
        out, self.attn = scaled_dot_product_attention(q, k, v, mask)
        return merge_heads(out)
''', feedback="w_o is not applied"),
    Mistake("MultiHeadAttention", "keys projected with w_q", '''
class MultiHeadAttention(MultiHeadAttention):
    def forward(self, query, key, value, mask=None):
        q = split_heads(self.w_q(query), self.n_heads)
        k = split_heads(self.w_q(key), self.n_heads)
        v = split_heads(self.w_v(value), self.n_heads)
        out, self.attn = scaled_dot_product_attention(q, k, v, mask)
        return self.w_o(merge_heads(out))
'''),
    # ------------------------------------------------------------ positional encodings
    Mistake("sinusoidal_positional_encoding", "sin and cos swapped", '''
_pe_ok = sinusoidal_positional_encoding
def sinusoidal_positional_encoding(max_len, d_model):
    pe = _pe_ok(max_len, d_model)
    out = pe.clone()
    out[:, 0::2], out[:, 1::2] = pe[:, 1::2], pe[:, 0::2]
    return out
''', feedback="sin and cos swapped"),
    Mistake("sinusoidal_positional_encoding", "a wrong exponent (k/d)", '''
def sinusoidal_positional_encoding(max_len, d_model):
    t = torch.arange(max_len, dtype=torch.float32)[:, None]
    k = torch.arange(d_model // 2, dtype=torch.float32)
    angle = t / 10000 ** (k / d_model)
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(angle), torch.cos(angle)
    return pe
''', feedback="a wrong exponent in the frequencies"),
    Mistake("sinusoidal_positional_encoding", "a wrong exponent (dimension index i)", '''
def sinusoidal_positional_encoding(max_len, d_model):
    t = torch.arange(max_len, dtype=torch.float32)[:, None]
    i = torch.arange(d_model, dtype=torch.float32)
    angle = t / 10000 ** (i / d_model)
    pe = torch.where(i.long() % 2 == 0, torch.sin(angle), torch.cos(angle))
    return pe
''', feedback="a wrong exponent in the frequencies"),
    Mistake("pe_offset_matrix", "rotation the wrong way", '''
_pe_offset_ok = pe_offset_matrix
def pe_offset_matrix(offset, d_model):
    return _pe_offset_ok(offset, d_model).T.contiguous()
''', feedback="the wrong way"),
    # ------------------------------------------------------------ layer norm
    Mistake("layer_norm", "unbiased variance", '''
def layer_norm(x, gamma, beta, eps=1e-5):
    mu = x.mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(x.var(-1, keepdim=True) + eps) * gamma + beta
''', feedback="unbiased variance"),
    Mistake("layer_norm", "eps outside the square root", '''
def layer_norm(x, gamma, beta, eps=1e-5):
    mu = x.mean(-1, keepdim=True)
    return (x - mu) / (x.var(-1, unbiased=False, keepdim=True).sqrt() + eps) * gamma + beta
''', feedback="eps outside"),
    # ------------------------------------------------------------ loss and schedule
    Mistake("label_smoothed_nll", "pads not excluded", '''
def label_smoothed_nll(logits, target, eps, pad_id):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1), label_smoothing=eps)
''', feedback="pad positions not excluded"),
    Mistake("label_smoothed_nll", "eps spread over the wrong tokens only", '''
def label_smoothed_nll(logits, target, eps, pad_id):
    logp = logits.log_softmax(-1)
    keep = target != pad_id
    nll = -logp.gather(-1, target.masked_fill(~keep, 0).unsqueeze(-1)).squeeze(-1)
    others = (-logp.sum(-1) - nll) / (logits.shape[-1] - 1)
    return ((1 - eps) * nll + eps * others)[keep].mean()
''', feedback="V-1 wrong tokens"),
    Mistake("noam_lr", "warmup^-0.5", '''
def noam_lr(step, d_model, warmup):
    step = max(step, 1)
    return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -0.5)
''', feedback="warmup^-0.5"),
    Mistake("noam_lr", "step 0 not handled", '''
def noam_lr(step, d_model, warmup):
    return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)
'''),
    # ------------------------------------------------------------ layers
    Mistake("FeedForward", "no ReLU", '''
class FeedForward(FeedForward):
    def forward(self, x):
        return self.linear2(self.linear1(x))
''', feedback="no ReLU"),
    Mistake("EncoderLayer", "pre-norm instead of post-norm", '''
class EncoderLayer(EncoderLayer):
    def forward(self, x, mask=None):
        h = self.norm1(x)
        x = x + self.dropout(self.self_attn(h, h, h, mask))
        return x + self.dropout(self.ff(self.norm2(x)))
''', feedback="pre-norm instead of post-norm"),
    Mistake("EncoderLayer", "mask ignored", '''
class EncoderLayer(EncoderLayer):
    def forward(self, x, mask=None):
        x = self.norm1(x + self.self_attn(x, x, x))
        return self.norm2(x + self.ff(x))
''', feedback="mask ignored"),
    Mistake("DecoderLayer", "cross-attention to x instead of memory", '''
class DecoderLayer(DecoderLayer):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        x = self.norm1(x + self.self_attn(x, x, x, tgt_mask))
        x = self.norm2(x + self.cross_attn(x, x, x, tgt_mask))
        return self.norm3(x + self.ff(x))
''', feedback="cross-attention on the wrong input"),
    Mistake("DecoderLayer", "cross-attention queries from memory", '''
class DecoderLayer(DecoderLayer):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        x = self.norm1(x + self.self_attn(x, x, x, tgt_mask))
        x = self.norm2(x + self.cross_attn(memory, x, x))
        return self.norm3(x + self.ff(x))
''', feedback="cross-attention on the wrong input"),
    Mistake("DecoderLayer", "pre-norm instead of post-norm", '''
class DecoderLayer(DecoderLayer):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        h = self.norm1(x)
        x = x + self.self_attn(h, h, h, tgt_mask)
        x = x + self.cross_attn(self.norm2(x), memory, memory, memory_mask)
        return x + self.ff(self.norm3(x))
''', feedback="pre-norm instead of post-norm"),
    # ------------------------------------------------------------ stacks and model
    Mistake("Encoder", "only the last layer applied", '''
class Encoder(Encoder):
    def forward(self, x, mask=None):
        return self.layers[-1](x, mask)
''', feedback="only the last layer"),
    Mistake("Decoder", "layers chained as memory", '''
class Decoder(Decoder):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        for layer in self.layers:
            x = layer(x, memory if layer is self.layers[0] else x, tgt_mask, memory_mask if layer is self.layers[0] else None)
        return x
''', feedback="instead of the encoder's memory"),
    Mistake("Transformer", "embeddings not scaled", '''
class Transformer(Transformer):
    def embed(self, tokens, table):
        e = table(tokens)
        return self.dropout(e + sinusoidal_positional_encoding(tokens.shape[1], self.d_model).to(e))
''', feedback="not multiplied by sqrt(d_model)"),
    Mistake("Transformer", "no causal mask", '''
class Transformer(Transformer):
    def decode(self, tgt, memory, src_mask):
        x = self.decoder(self.embed(tgt, self.tgt_embed), memory, padding_mask(tgt, self.pad_id), src_mask)
        return self.out(x)
''', feedback="no causal mask"),
    Mistake("Transformer", "causal mask off by one", '''
class Transformer(Transformer):
    def decode(self, tgt, memory, src_mask):
        T = tgt.shape[1]
        mask = torch.ones(T, T, dtype=torch.bool).tril(1) & padding_mask(tgt, self.pad_id)
        return self.out(self.decoder(self.embed(tgt, self.tgt_embed), memory, mask, src_mask))
''', feedback="causal mask off by one"),
    Mistake("Transformer", "source padding not masked", '''
class Transformer(Transformer):
    def forward(self, src, tgt):
        return self.decode(tgt, self.encode(src, None), None)
'''),
    Mistake("Transformer", "embeddings keep nn.Embedding's default N(0, 1) init", """
class Transformer(Transformer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for table in (self.src_embed, self.tgt_embed):
            nn.init.normal_(table.weight, std=1.0)
""", feedback="nn.Embedding's default"),
    Mistake("Transformer", "embedding std 1/d_model instead of d_model**-0.5", """
class Transformer(Transformer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for table in (self.src_embed, self.tgt_embed):
            nn.init.normal_(table.weight, std=1.0 / self.d_model)
""", feedback="N(0, 1/d_model)"),
    # ------------------------------------------------------------ decoding
    Mistake("transformer_greedy_decode", "argmax of the first position", '''
@torch.no_grad()
def transformer_greedy_decode(model, src, bos_id, eos_id, max_len):
    src_mask = padding_mask(src, model.pad_id)
    memory = model.encode(src, src_mask)
    ys = torch.full((src.shape[0], 1), bos_id, dtype=torch.long)
    done = torch.zeros(src.shape[0], dtype=torch.bool)
    for _ in range(max_len):
        nxt = model.decode(ys, memory, src_mask)[:, 0].argmax(-1).masked_fill(done, eos_id)
        ys = torch.cat([ys, nxt[:, None]], 1)
        done |= nxt == eos_id
        if done.all():
            break
    return ys
'''),
    Mistake("transformer_greedy_decode", "no early stop", '''
@torch.no_grad()
def transformer_greedy_decode(model, src, bos_id, eos_id, max_len):
    src_mask = padding_mask(src, model.pad_id)
    memory = model.encode(src, src_mask)
    ys = torch.full((src.shape[0], 1), bos_id, dtype=torch.long)
    done = torch.zeros(src.shape[0], dtype=torch.bool)
    for _ in range(max_len):
        nxt = model.decode(ys, memory, src_mask)[:, -1].argmax(-1).masked_fill(done, eos_id)
        ys = torch.cat([ys, nxt[:, None]], 1)
        done |= nxt == eos_id
    return ys
'''),
    Mistake("transformer_beam_search", "no length normalisation", '''
_beam_ok = transformer_beam_search
def transformer_beam_search(model, src, bos_id, eos_id, beam_size, max_len, n_best=1, length_norm=True):
    return _beam_ok(model, src, bos_id, eos_id, beam_size, max_len, n_best, False)
'''),
    Mistake("transformer_beam_search", "BOS kept in the tokens", '''
_beam_ok = transformer_beam_search
def transformer_beam_search(model, src, bos_id, eos_id, beam_size, max_len, n_best=1, length_norm=True):
    return [([bos_id] + t, s) for t, s in _beam_ok(model, src, bos_id, eos_id, beam_size, max_len, n_best, length_norm)]
'''),
    # ------------------------------------------------------------ beam_search_until_done
    Mistake("beam_search_until_done", "an EOS below the first beam_size finishes", '''
@torch.no_grad()
def beam_search_until_done(model, src, bos_id, eos_id, beam_size=4, max_len=12, alpha=0.6):
    src_mask = padding_mask(src, model.pad_id)
    memory = model.encode(src, src_mask)
    live, logp, finished = [[bos_id]], [0.0], []
    for step in range(1, max_len + 1):
        N = len(live)
        out = model.decode(torch.tensor(live), memory.expand(N, -1, -1), src_mask.expand(N, -1, -1, -1))
        cand = torch.tensor(logp, dtype=torch.float64)[:, None] + out[:, -1].double().log_softmax(-1)
        V = cand.shape[1]
        top, idx = cand.flatten().topk(min(2 * beam_size, N * V))
        prefixes, live, logp = live, [], []
        for rank, (score, j) in enumerate(zip(top.tolist(), idx.tolist())):
            hyp = prefixes[j // V] + [j % V]
            if j % V == eos_id:
                if True:
                    finished.append((hyp[1:], score / length_penalty(step, alpha)))
            elif len(live) < beam_size:
                live.append(hyp)
                logp.append(score)
        best = max((sc for _, sc in finished), default=-math.inf)
        if len(finished) >= beam_size or not (live and max(logp) / length_penalty(max_len, alpha) > best):
            break
    else:
        finished += [(h[1:], sc / length_penalty(max_len, alpha)) for h, sc in zip(live, logp)]
    return max(finished, key=lambda r: r[1])
''', feedback="ranked below the first beam_size"),
    Mistake("beam_search_until_done", "stops at the first finished hypothesis", '''
@torch.no_grad()
def beam_search_until_done(model, src, bos_id, eos_id, beam_size=4, max_len=12, alpha=0.6):
    src_mask = padding_mask(src, model.pad_id)
    memory = model.encode(src, src_mask)
    live, logp, finished = [[bos_id]], [0.0], []
    for step in range(1, max_len + 1):
        N = len(live)
        out = model.decode(torch.tensor(live), memory.expand(N, -1, -1), src_mask.expand(N, -1, -1, -1))
        cand = torch.tensor(logp, dtype=torch.float64)[:, None] + out[:, -1].double().log_softmax(-1)
        V = cand.shape[1]
        top, idx = cand.flatten().topk(min(2 * beam_size, N * V))
        prefixes, live, logp = live, [], []
        for rank, (score, j) in enumerate(zip(top.tolist(), idx.tolist())):
            hyp = prefixes[j // V] + [j % V]
            if j % V == eos_id:
                if rank < beam_size:
                    finished.append((hyp[1:], score / length_penalty(step, alpha)))
            elif len(live) < beam_size:
                live.append(hyp)
                logp.append(score)
        best = max((sc for _, sc in finished), default=-math.inf)
        if finished or len(finished) >= beam_size or not (live and max(logp) / length_penalty(max_len, alpha) > best):
            break
    else:
        finished += [(h[1:], sc / length_penalty(max_len, alpha)) for h, sc in zip(live, logp)]
    return max(finished, key=lambda r: r[1])
''', feedback="first finished hypothesis"),
    Mistake("beam_search_until_done", "no length penalty in the stopping bound", '''
@torch.no_grad()
def beam_search_until_done(model, src, bos_id, eos_id, beam_size=4, max_len=12, alpha=0.6):
    src_mask = padding_mask(src, model.pad_id)
    memory = model.encode(src, src_mask)
    live, logp, finished = [[bos_id]], [0.0], []
    for step in range(1, max_len + 1):
        N = len(live)
        out = model.decode(torch.tensor(live), memory.expand(N, -1, -1), src_mask.expand(N, -1, -1, -1))
        cand = torch.tensor(logp, dtype=torch.float64)[:, None] + out[:, -1].double().log_softmax(-1)
        V = cand.shape[1]
        top, idx = cand.flatten().topk(min(2 * beam_size, N * V))
        prefixes, live, logp = live, [], []
        for rank, (score, j) in enumerate(zip(top.tolist(), idx.tolist())):
            hyp = prefixes[j // V] + [j % V]
            if j % V == eos_id:
                if rank < beam_size:
                    finished.append((hyp[1:], score / length_penalty(step, alpha)))
            elif len(live) < beam_size:
                live.append(hyp)
                logp.append(score)
        best = max((sc for _, sc in finished), default=-math.inf)
        if len(finished) >= beam_size or not (live and max(logp) > best):
            break
    else:
        finished += [(h[1:], sc / length_penalty(max_len, alpha)) for h, sc in zip(live, logp)]
    return max(finished, key=lambda r: r[1])
'''),
]
