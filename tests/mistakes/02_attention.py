"""Known-wrong versions of chapter 02's graded functions (appended to the solution notebook)."""
from tests.mistakes import Mistake

MISTAKES = [
    # ------------------------------------------------------------ additive_score
    Mistake("additive_score", "concat order [h; s]", '''
def additive_score(s, h, W, v):
    Dh = h.shape[-1]
    hidden = torch.tanh(h @ W[:, :Dh].T + (s @ W[:, Dh:].T).unsqueeze(1))
    return hidden @ v
''', feedback="[h_j; s] instead of [s; h_j]"),
    Mistake("additive_score", "no tanh", '''
def additive_score(s, h, W, v):
    Ds = s.shape[-1]
    return ((s @ W[:, :Ds].T).unsqueeze(1) + h @ W[:, Ds:].T) @ v
''', feedback="tanh missing"),
    Mistake("additive_score", "hard-coded float32", '''
def additive_score(s, h, W, v):
    s, h, W, v = s.float(), h.float(), W.float(), v.float()
    Ds = s.shape[-1]
    return torch.tanh((s @ W[:, :Ds].T).unsqueeze(1) + h @ W[:, Ds:].T) @ v
''', feedback="dtype"),
    # ------------------------------------------------------------ dot_score
    Mistake("dot_score", "scaled dot product", '''
def dot_score(s, h):
    return (h @ s.unsqueeze(-1)).squeeze(-1) / math.sqrt(s.shape[-1])
''', feedback="scaled by 1/sqrt(D)"),
    Mistake("dot_score", "hard-coded float32", '''
def dot_score(s, h):
    return torch.einsum("bd,bsd->bs", s.float(), h.float())
''', feedback="dtype"),
    # ------------------------------------------------------------ scaled_dot_score
    Mistake("scaled_dot_score", "missing 1/sqrt(D)", '''
def scaled_dot_score(s, h):
    return (h @ s.unsqueeze(-1)).squeeze(-1)
''', feedback="missing the 1/sqrt(D)"),
    Mistake("scaled_dot_score", "divided by D", '''
def scaled_dot_score(s, h):
    return (h @ s.unsqueeze(-1)).squeeze(-1) / s.shape[-1]
''', feedback="divided by D instead of sqrt(D)"),
    Mistake("scaled_dot_score", "scaled by the number of positions", '''
def scaled_dot_score(s, h):
    return (h @ s.unsqueeze(-1)).squeeze(-1) / math.sqrt(h.shape[1])
''', feedback="1/sqrt(S)"),
    # ------------------------------------------------------------ general_score
    Mistake("general_score", "W transposed", '''
def general_score(s, h, W):
    return (h @ W @ s.unsqueeze(-1)).squeeze(-1)
''', feedback="W transposed"),
    # ------------------------------------------------------------ cosine_score
    Mistake("cosine_score", "no eps clamp", '''
def cosine_score(s, h, eps=1e-8):
    dots = (h @ s.unsqueeze(-1)).squeeze(-1)
    return dots / (s.norm(dim=-1, keepdim=True) * h.norm(dim=-1))
''', feedback="without the eps clamp"),
    Mistake("cosine_score", "F.cosine_similarity clamps each norm", '''
def cosine_score(s, h, eps=1e-8):
    return F.cosine_similarity(s.unsqueeze(1), h, dim=-1, eps=eps)
''', feedback="clamped separately"),
    Mistake("cosine_score", "normalised by |h_j| only", '''
def cosine_score(s, h, eps=1e-8):
    return (h @ s.unsqueeze(-1)).squeeze(-1) / h.norm(dim=-1).clamp_min(eps)
''', feedback="normalised by |h_j| only"),
    # ------------------------------------------------------------ location_score
    Mistake("location_score", "W transposed", '''
def location_score(s, W):
    return s @ W
''', feedback="W transposed"),
    # ------------------------------------------------------------ masked_softmax
    Mistake("masked_softmax", "softmax over the wrong axis", '''
def masked_softmax(scores, mask=None, dim=-1):
    if mask is None:
        return torch.softmax(scores, dim=0)
    w = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=0)
    return w.masked_fill(~mask, 0.0)
''', feedback="wrong axis"),
    Mistake("masked_softmax", "mask inverted", '''
def masked_softmax(scores, mask=None, dim=-1):
    if mask is None:
        return torch.softmax(scores, dim=dim)
    w = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=dim)
    return w.masked_fill(mask, 0.0)
''', feedback="mask inverted"),
    Mistake("masked_softmax", "masking after the softmax", '''
def masked_softmax(scores, mask=None, dim=-1):
    w = torch.softmax(scores, dim=dim)
    return w if mask is None else w * mask
''', feedback="masking after the softmax"),
    Mistake("masked_softmax", "fully masked rows NaN", '''
def masked_softmax(scores, mask=None, dim=-1):
    if mask is None:
        return torch.softmax(scores, dim=dim)
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=dim)
''', feedback="NaN"),
    Mistake("masked_softmax", "fully masked rows uniform", '''
def masked_softmax(scores, mask=None, dim=-1):
    if mask is None:
        return torch.softmax(scores, dim=dim)
    return torch.softmax(scores.masked_fill(~mask, -1e9), dim=dim)
''', feedback="left uniform"),
    Mistake("masked_softmax", "modifies the scores in place", '''
def masked_softmax(scores, mask=None, dim=-1):
    if mask is None:
        return torch.softmax(scores, dim=dim)
    scores.masked_fill_(~mask, float("-inf"))
    return torch.softmax(scores, dim=dim).masked_fill(~mask, 0.0)
''', feedback="in place"),
    Mistake("masked_softmax", "dim ignored", '''
def masked_softmax(scores, mask=None, dim=-1):
    if mask is None:
        return torch.softmax(scores, dim=-1)
    w = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    return w.masked_fill(~mask, 0.0)
''', feedback="dim ignored"),
    Mistake("masked_softmax", "computed in float32", '''
def masked_softmax(scores, mask=None, dim=-1):
    scores = scores.float()
    if mask is None:
        return torch.softmax(scores, dim=dim)
    w = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=dim)
    return w.masked_fill(~mask, 0.0)
''', feedback="dtype"),
    # ------------------------------------------------------------ attention_context
    Mistake("attention_context", "weights ignored", '''
def attention_context(weights, values):
    return values.mean(1)
''', feedback="weights ignored"),
    Mistake("attention_context", "hard-coded float32", '''
def attention_context(weights, values):
    return torch.einsum("bs,bsd->bd", weights.float(), values.float())
''', feedback="dtype"),
    # ------------------------------------------------------------ additive_attention
    Mistake("additive_attention", "mask ignored", '''
def additive_attention(s, h, W, v, mask=None):
    weights = masked_softmax(additive_score(s, h, W, v))
    return attention_context(weights, h), weights
''', feedback="mask ignored"),
    Mistake("additive_attention", "returns (weights, context)", '''
def additive_attention(s, h, W, v, mask=None):
    weights = masked_softmax(additive_score(s, h, W, v), mask)
    return weights, attention_context(weights, h)
''', feedback="should have shape"),
    # ------------------------------------------------------------ local_p_position
    Mistake("local_p_position", "scaled by the length", '''
def local_p_position(s, W_p, v_p, lengths):
    return lengths.to(s.dtype) * torch.sigmoid(torch.tanh(s @ W_p.T) @ v_p)
''', feedback="instead of length - 1"),
    Mistake("local_p_position", "integer lengths make float32", '''
def local_p_position(s, W_p, v_p, lengths):
    return (lengths - 1.0) * torch.sigmoid(torch.tanh(s @ W_p.T) @ v_p).float()
''', feedback="dtype"),
    # ------------------------------------------------------------ local_p_weights
    Mistake("local_p_weights", "sigma = D", '''
def local_p_weights(scores, p, D, mask=None):
    offset = torch.arange(scores.shape[-1], dtype=scores.dtype) - p.unsqueeze(-1)
    window = offset.abs() <= D
    if mask is not None:
        window = window & mask
    return masked_softmax(scores, window) * torch.exp(-offset ** 2 / (2 * D ** 2))
''', feedback="sigma = D instead of D/2"),
    Mistake("local_p_weights", "no window", '''
def local_p_weights(scores, p, D, mask=None):
    offset = torch.arange(scores.shape[-1], dtype=scores.dtype) - p.unsqueeze(-1)
    return masked_softmax(scores, mask) * torch.exp(-offset ** 2 / (2 * (D / 2) ** 2))
''', feedback="no window"),
    Mistake("local_p_weights", "strict window", '''
def local_p_weights(scores, p, D, mask=None):
    offset = torch.arange(scores.shape[-1], dtype=scores.dtype) - p.unsqueeze(-1)
    window = offset.abs() < D
    if mask is not None:
        window = window & mask
    return masked_softmax(scores, window) * torch.exp(-offset ** 2 / (2 * (D / 2) ** 2))
''', feedback="|j - p| < D"),
    Mistake("local_p_weights", "p detached from the graph", '''
def local_p_weights(scores, p, D, mask=None):
    p = p.detach()
    offset = torch.arange(scores.shape[-1], dtype=scores.dtype) - p.unsqueeze(-1)
    window = offset.abs() <= D
    if mask is not None:
        window = window & mask
    return masked_softmax(scores, window) * torch.exp(-offset ** 2 / (2 * (D / 2) ** 2))
'''),
]
