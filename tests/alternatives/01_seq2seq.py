"""An alternative solution of chapter 01, written in another style (see the briefing)."""
import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def _append(prefix: Tensor, column: Tensor) -> Tensor:
    """prefix (B, t) with column (B,) appended, on the column's device."""
    return torch.cat((prefix.to(column.device), column.unsqueeze(1)), dim=1)


def _gru_layer(x: Tensor, gru: nn.GRU) -> Tensor:
    """nn.GRU's equations written out (one layer, batch first, zero initial state): (B, T, H)."""
    w_ih, w_hh, b_ih, b_hh = gru.weight_ih_l0, gru.weight_hh_l0, gru.bias_ih_l0, gru.bias_hh_l0
    B, T, _ = x.shape
    h = x.new_zeros(B, gru.hidden_size)
    gates_x = F.linear(x, w_ih, b_ih)                       # (B, T, 3H)
    outs = []
    for t in range(T):
        r_x, z_x, n_x = gates_x[:, t].chunk(3, dim=-1)
        r_h, z_h, n_h = F.linear(h, w_hh, b_hh).chunk(3, dim=-1)
        r, z = torch.sigmoid(r_x + r_h), torch.sigmoid(z_x + z_h)
        n = torch.tanh(n_x + r * n_h)
        h = (1 - z) * n + z * h
        outs.append(h)
    return torch.stack(outs, dim=1)


def sequence_log_prob(logits, targets, pad_id):
    B, T, V = logits.shape
    nll = F.cross_entropy(logits.reshape(B * T, V), targets.reshape(B * T), ignore_index=pad_id,
                          reduction="none")
    return -nll.view(B, T).sum(dim=1)


def perplexity(logits, targets, pad_id):
    V = logits.shape[-1]
    return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), ignore_index=pad_id).exp()


class GRULanguageModel(nn.Module):
    def __init__(self, vocab_size, emb=32, hid=64):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, emb)
        self.gru = nn.GRU(emb, hid, batch_first=True)
        self.out = nn.Linear(hid, vocab_size)

    def forward(self, tokens):
        x = F.embedding(tokens, self.embed.weight)
        return F.linear(_gru_layer(x, self.gru), self.out.weight, self.out.bias)


def sample_decode(step_fn, bos_id, eos_id, max_len, temperature=1.0, batch_size=1, generator=None):
    out = torch.full((batch_size, 1), bos_id, dtype=torch.long)
    ended = None
    for _ in range(max_len):
        scores = step_fn(out)
        if temperature == 0:
            pick = torch.max(scores, dim=1).indices
        else:
            probs = torch.softmax(scores / temperature, dim=1)
            pick = torch.multinomial(probs, 1, generator=generator)[:, 0]
        if ended is not None:
            pick = torch.where(ended, torch.full_like(pick, eos_id), pick)
        out = _append(out, pick)
        ended = out.eq(eos_id).any(dim=1)
        if ended.all():
            break
    return out


def greedy_decode(step_fn, bos_id, eos_id, max_len, batch_size=1):
    out = torch.full((batch_size, 1), bos_id, dtype=torch.long)
    for _ in range(max_len):
        pick = torch.max(step_fn(out), dim=1).indices
        ended = out.to(pick.device).eq(eos_id).any(dim=1)
        out = _append(out, torch.where(ended, torch.full_like(pick, eos_id), pick))
        if out.eq(eos_id).any(dim=1).all():
            break
    return out


def beam_search(step_fn, bos_id, eos_id, beam_size, max_len, n_best=1, length_norm=True):
    beam = [((bos_id,), 0.0)]
    done = []
    steps = 0
    while steps < max_len:
        steps += 1
        rows = step_fn(torch.tensor([list(h) for h, _ in beam], dtype=torch.long)).double().tolist()
        candidates = [(h + (v,), s + lp) for (h, s), row in zip(beam, rows) for v, lp in enumerate(row)]
        candidates.sort(key=lambda c: c[1], reverse=True)
        best = candidates[:beam_size]
        done.extend(c for c in best if c[0][-1] == eos_id)
        beam = [c for c in best if c[0][-1] != eos_id]
        if len(done) >= n_best or len(beam) == 0:
            break
    else:
        done.extend(beam)

    def final(c):
        tokens = list(c[0][1:])
        return tokens, (c[1] / len(tokens) if length_norm else c[1])
    return sorted(map(final, done), key=lambda r: r[1], reverse=True)[:n_best]



def _gram_counts(words, order):
    """{n-gram: how often it occurs}, by hand (zip of shifted copies)."""
    table = {}
    for gram in zip(*(words[k:] for k in range(order))):
        table[gram] = table.get(gram, 0) + 1
    return table


def corpus_bleu(hypotheses, references, max_n=4):
    if len(references) != len(hypotheses):
        raise ValueError("corpus_bleu needs one reference per hypothesis")
    hits = [0 for _ in range(max_n)]
    counted = [0 for _ in range(max_n)]
    for candidate, gold in zip(hypotheses, references):
        for order in range(1, max_n + 1):
            gold_counts = _gram_counts(list(gold), order)
            for gram, times in _gram_counts(list(candidate), order).items():
                hits[order - 1] += min(times, gold_counts.get(gram, 0))
                counted[order - 1] += times
    hyp_len = sum(len(h) for h in hypotheses)
    ref_len = sum(len(r) for r in references)
    if hyp_len == 0 or 0 in hits:
        return 0.0
    product = 1.0
    for h, t in zip(hits, counted):
        product *= h / t
    penalty = 1.0 if hyp_len >= ref_len else math.exp(1.0 - ref_len / hyp_len)
    return float(100 * penalty * product ** (1.0 / max_n))

HEADLINES = {}   # the chapter's claims test this solution (tests/claims/01_seq2seq.json)
