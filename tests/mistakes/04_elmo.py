"""Known-wrong versions of chapter 04's graded functions (appended to the solution notebook)."""
from tests.mistakes import Mistake

MISTAKES = [
    Mistake("scalar_mix", "mixing weights not softmaxed", '''
def scalar_mix(layers, s_logits, gamma):
    return gamma * torch.einsum("l,lbtd->btd", s_logits, layers)
''', feedback="not softmaxed"),
    Mistake("scalar_mix", "gamma left out", '''
def scalar_mix(layers, s_logits, gamma):
    return torch.einsum("l,lbtd->btd", s_logits.softmax(-1), layers)
''', feedback="gamma left out"),
    Mistake("highway", "gate on the wrong branch", '''
def highway(x, W_h, b_h, W_g, b_g):
    g = torch.sigmoid(x @ W_g.T + b_g)
    return (1 - g) * torch.relu(x @ W_h.T + b_h) + g * x
''', feedback="wrong branch"),
    Mistake("highway", "weights not transposed", '''
def highway(x, W_h, b_h, W_g, b_g):
    g = torch.sigmoid(x @ W_g + b_g)
    return g * torch.relu(x @ W_h + b_h) + (1 - g) * x
''', feedback="not transposed"),
    Mistake("bilm_loss", "backward LM off by one", '''
def bilm_loss(fwd_logits, bwd_logits, tokens, pad_id):
    V = fwd_logits.shape[-1]
    f = F.cross_entropy(fwd_logits[:, :-1].reshape(-1, V), tokens[:, 1:].reshape(-1), ignore_index=pad_id)
    b = F.cross_entropy(bwd_logits[:, :-1].reshape(-1, V), tokens[:, 1:].reshape(-1), ignore_index=pad_id)
    return (f + b) / 2
''', feedback="wrong neighbour"),
    Mistake("bilm_loss", "pads counted", '''
def bilm_loss(fwd_logits, bwd_logits, tokens, pad_id):
    V = fwd_logits.shape[-1]
    f = F.cross_entropy(fwd_logits[:, :-1].reshape(-1, V), tokens[:, 1:].reshape(-1))
    b = F.cross_entropy(bwd_logits[:, 1:].reshape(-1, V), tokens[:, :-1].reshape(-1))
    return (f + b) / 2
''', feedback="pads counted"),
    Mistake("bilm_loss", "sum of the directions", '''
def bilm_loss(fwd_logits, bwd_logits, tokens, pad_id):
    V = fwd_logits.shape[-1]
    f = F.cross_entropy(fwd_logits[:, :-1].reshape(-1, V), tokens[:, 1:].reshape(-1), ignore_index=pad_id)
    b = F.cross_entropy(bwd_logits[:, 1:].reshape(-1, V), tokens[:, :-1].reshape(-1), ignore_index=pad_id)
    return f + b
''', feedback="sum of the two"),
    Mistake("reverse_padded", "flip with the padding", '''
def reverse_padded(x, mask):
    return x.flip(1)
''', feedback="padding included"),
    Mistake("CharCNN", "mean pooling", '''
class CharCNN(CharCNN):
    def forward(self, chars):
        B, T, C = chars.shape
        e = self.char_embed(chars.reshape(B * T, C)).transpose(1, 2)
        return torch.relu(torch.cat([c(e).mean(-1) for c in self.convs], -1)).reshape(B, T, -1)
''', feedback="mean-pooling"),
    Mistake("BiLM", "directions swapped", '''
_ctx_ok = BiLM.contextualize
def _ctx_swapped(self, x, mask):
    s = _ctx_ok(self, x, mask)
    d = s.shape[-1] // 2
    return torch.cat([s[..., d:], s[..., :d]], -1)
BiLM.contextualize = _ctx_swapped
''', feedback="swapped"),
    Mistake("BiLM", "LSTM states zeroed at padding positions", '''
_ctx_ok = BiLM.contextualize
def _ctx_zeroed(self, x, mask):
    s = _ctx_ok(self, x, mask)
    return torch.cat([s[:1], s[1:] * mask[None, :, :, None]])
BiLM.contextualize = _ctx_zeroed
''', feedback="padding positions are zero"),
    Mistake("BiLM", "backward reads the flipped padded row", '''
def reverse_padded(x, mask):
    return x.flip(1)
''', feedback="reverse_padded"),
    Mistake("ELMo", "gamma left out", '''
class ELMo(ELMo):
    def forward(self, chars):
        return scalar_mix(self.bilm(chars), self.s, torch.ones((), dtype=self.gamma.dtype))
''', feedback="gamma left out"),
]
