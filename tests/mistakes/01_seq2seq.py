"""Known-wrong versions of chapter 01's graded functions (appended to the solution notebook)."""
from tests.mistakes import Mistake

# The reference beam search with one line changed, as a template: {select}, {finish}, {norm}, {stop}.
_BEAM = '''
def beam_search(step_fn, bos_id, eos_id, beam_size, max_len, n_best=1, length_norm=True):
    live, scores = [[bos_id]], torch.zeros(1, dtype=torch.float64)
    finished = []
    for _ in range(max_len):
        log_probs = step_fn(torch.tensor(live, dtype=torch.long)).detach().double().cpu()
        cand = {select}
        V = cand.shape[1]
        top, idx = cand.flatten().topk(min(beam_size, cand.numel()))
        extended = [(live[j // V] + [j % V], s) for s, j in zip(top.tolist(), idx.tolist())]
        finished += [(h, s) for h, s in extended if h[-1] == eos_id]
        kept = [(h, s) for h, s in extended if {finish}]
        live = [h for h, _ in kept]
        scores = torch.tensor([s for _, s in kept], dtype=torch.float64)
        if {stop}:
            break
    else:
        finished += list(zip(live, scores.tolist()))
    results = [(h[1:], s / ({norm}) if length_norm else s) for h, s in finished]
    return sorted(results, key=lambda r: -r[1])[:n_best]
'''


def beam(select="scores[:, None] + log_probs", finish="h[-1] != eos_id", norm="len(h) - 1",
         stop="len(finished) >= n_best or not live") -> str:
    return _BEAM.format(select=select, finish=finish, norm=norm, stop=stop)


# The reference corpus_bleu with one part changed, as a template: {grams}, {match}, {corpus}, {zero}, {mean}, {bp}.
_BLEU = '''
from collections import Counter
import math
def corpus_bleu(hypotheses, references, max_n=4):
    if len(hypotheses) != len(references):
        raise ValueError("lengths differ")
    def ngrams(tokens, n):
        return Counter(tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1))
    matches, totals = [0] * max_n, [0] * max_n
    pairs = {corpus}
    for hyp, ref in pairs:
        for n in range(1, {orders} + 1):
            h, r = ngrams(hyp, n), ngrams(ref, n)
            matches[n - 1] += {match}
            totals[n - 1] += sum(h.values())
    c, r = sum(map(len, hypotheses)), sum(map(len, references))
    if {zero}:
        return 0.0
    p = [m / t for m, t in zip(matches, totals)]
    score = {mean}
    bp = {bp}
    return {scale} * bp * score
'''


def bleu(corpus="list(zip(hypotheses, references))", orders="max_n", match="sum((h & r).values())",
         zero="c == 0 or min(matches) == 0", mean="math.exp(sum(math.log(x) for x in p) / max_n)",
         bp="math.exp(1 - r / c) if c < r else 1.0", scale="100.0") -> str:
    return _BLEU.format(corpus=corpus, orders=orders, match=match, zero=zero, mean=mean, bp=bp, scale=scale)


MISTAKES = [
    # ------------------------------------------------------------ sequence_log_prob
    Mistake("sequence_log_prob", "pad positions counted", '''
def sequence_log_prob(logits, targets, pad_id):
    return logits.log_softmax(-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1).sum(-1)
''', feedback="pad positions counted"),
    Mistake("sequence_log_prob", "log-softmax over the wrong axis", '''
def sequence_log_prob(logits, targets, pad_id):
    lp = logits.log_softmax(1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return lp.masked_fill(targets == pad_id, 0.0).sum(-1)
''', feedback="wrong axis"),
    Mistake("sequence_log_prob", "raw logits, no log-softmax", '''
def sequence_log_prob(logits, targets, pad_id):
    lp = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return lp.masked_fill(targets == pad_id, 0.0).sum(-1)
''', feedback="no log-softmax"),
    Mistake("sequence_log_prob", "mean instead of sum", '''
def sequence_log_prob(logits, targets, pad_id):
    lp = logits.log_softmax(-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    real = targets != pad_id
    return lp.masked_fill(~real, 0.0).sum(-1) / real.sum(-1)
''', feedback="a mean over positions"),
    Mistake("sequence_log_prob", "pad id hard-coded to 0", '''
def sequence_log_prob(logits, targets, pad_id):
    lp = logits.log_softmax(-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return lp.masked_fill(targets == 0, 0.0).sum(-1)
'''),
    Mistake("sequence_log_prob", "returns float32 for float64 logits", '''
_slp_ok = sequence_log_prob
def sequence_log_prob(logits, targets, pad_id):
    return _slp_ok(logits, targets, pad_id).float()
''', feedback="dtype"),
    Mistake("sequence_log_prob", "modifies the logits in place", '''
def sequence_log_prob(logits, targets, pad_id):
    lp = logits.log_softmax(-1)
    logits.data.copy_(lp)
    picked = lp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return picked.masked_fill(targets == pad_id, 0.0).sum(-1)
''', feedback="in place"),
    # ------------------------------------------------------------ perplexity
    Mistake("perplexity", "pad positions counted in the number of tokens", '''
def perplexity(logits, targets, pad_id):
    return torch.exp(-sequence_log_prob(logits, targets, pad_id).sum() / targets.numel())
''', feedback="pad positions counted"),
    Mistake("perplexity", "mean of per-sentence perplexities", '''
def perplexity(logits, targets, pad_id):
    n = (targets != pad_id).sum(-1)
    return torch.exp(-sequence_log_prob(logits, targets, pad_id) / n).mean()
''', feedback="a mean of the sentences' perplexities"),
    Mistake("perplexity", "no division by the number of tokens", '''
def perplexity(logits, targets, pad_id):
    return torch.exp(-sequence_log_prob(logits, targets, pad_id).sum())
''', feedback="no division"),
    Mistake("perplexity", "returns the cross-entropy, not its exponent", '''
def perplexity(logits, targets, pad_id):
    return -sequence_log_prob(logits, targets, pad_id).sum() / (targets != pad_id).sum()
'''),
    # ------------------------------------------------------------ GRULanguageModel
    Mistake("GRULanguageModel", "GRU without batch_first", '''
class GRULanguageModel(nn.Module):
    def __init__(self, vocab_size, emb=32, hid=64):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, emb)
        self.gru = nn.GRU(emb, hid)
        self.out = nn.Linear(hid, vocab_size)

    def forward(self, tokens):
        return self.out(self.gru(self.embed(tokens))[0])
''', feedback="batch_first"),
    Mistake("GRULanguageModel", "returns probabilities", '''
class GRULanguageModel(nn.Module):
    def __init__(self, vocab_size, emb=32, hid=64):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, emb)
        self.gru = nn.GRU(emb, hid, batch_first=True)
        self.out = nn.Linear(hid, vocab_size)

    def forward(self, tokens):
        return self.out(self.gru(self.embed(tokens))[0]).softmax(-1)
''', feedback="probabilities instead of logits"),
    Mistake("GRULanguageModel", "other attribute names", '''
class GRULanguageModel(nn.Module):
    def __init__(self, vocab_size, emb=32, hid=64):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, emb)
        self.rnn = nn.GRU(emb, hid, batch_first=True)
        self.proj = nn.Linear(hid, vocab_size)

    def forward(self, tokens):
        return self.proj(self.rnn(self.emb(tokens))[0])
'''),
    Mistake("GRULanguageModel", "only the last position's logits", '''
class GRULanguageModel(nn.Module):
    def __init__(self, vocab_size, emb=32, hid=64):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, emb)
        self.gru = nn.GRU(emb, hid, batch_first=True)
        self.out = nn.Linear(hid, vocab_size)

    def forward(self, tokens):
        return self.out(self.gru(self.embed(tokens))[1][-1])
''', feedback="shape"),
    # ------------------------------------------------------------ sample_decode
    Mistake("sample_decode", "temperature multiplies", '''
_sample_ok = sample_decode
def sample_decode(step_fn, bos_id, eos_id, max_len, temperature=1.0, batch_size=1, generator=None):
    t = 0 if temperature == 0 else 1 / temperature
    return _sample_ok(step_fn, bos_id, eos_id, max_len, t, batch_size, generator)
''', feedback="multiplies the log-probs"),
    Mistake("sample_decode", "a draw only for the rows still running", '''
def sample_decode(step_fn, bos_id, eos_id, max_len, temperature=1.0, batch_size=1, generator=None):
    ys = torch.full((batch_size, 1), bos_id, dtype=torch.long)
    done = torch.zeros(batch_size, dtype=torch.bool)
    for _ in range(max_len):
        lp = step_fn(ys)
        ys, done = ys.to(lp.device), done.to(lp.device)
        if temperature == 0:
            nxt = lp.argmax(-1)
        else:
            nxt = torch.full_like(ys[:, 0], eos_id)
            probs = (lp[~done] / temperature).softmax(-1)
            nxt[~done] = torch.multinomial(probs, 1, generator=generator).squeeze(1)
        nxt = nxt.masked_fill(done, eos_id)
        ys = torch.cat([ys, nxt[:, None]], 1)
        done = done | (nxt == eos_id)
        if bool(done.all()):
            break
    return ys
''', feedback="rows still running"),
    Mistake("sample_decode", "temperature ignored", '''
_sample_ok = sample_decode
def sample_decode(step_fn, bos_id, eos_id, max_len, temperature=1.0, batch_size=1, generator=None):
    return _sample_ok(step_fn, bos_id, eos_id, max_len, 1.0, batch_size, generator)
''', feedback="temperature is ignored"),
    Mistake("sample_decode", "no EOS padding", '''
def sample_decode(step_fn, bos_id, eos_id, max_len, temperature=1.0, batch_size=1, generator=None):
    ys = torch.full((batch_size, 1), bos_id, dtype=torch.long)
    for _ in range(max_len):
        lp = step_fn(ys)
        ys = ys.to(lp.device)
        if temperature == 0:
            nxt = lp.argmax(-1)
        else:
            nxt = torch.multinomial((lp / temperature).softmax(-1), 1, generator=generator).squeeze(1)
        ys = torch.cat([ys, nxt[:, None]], 1)
        if bool((ys == eos_id).any(1).all()):
            break
    return ys
'''),
    Mistake("sample_decode", "temperature 0 divides by zero", '''
def sample_decode(step_fn, bos_id, eos_id, max_len, temperature=1.0, batch_size=1, generator=None):
    ys = torch.full((batch_size, 1), bos_id, dtype=torch.long)
    done = torch.zeros(batch_size, dtype=torch.bool)
    for _ in range(max_len):
        lp = step_fn(ys)
        ys, done = ys.to(lp.device), done.to(lp.device)
        nxt = torch.multinomial((lp / temperature).softmax(-1), 1, generator=generator).squeeze(1)
        nxt = nxt.masked_fill(done, eos_id)
        ys = torch.cat([ys, nxt[:, None]], 1)
        done = done | (nxt == eos_id)
        if bool(done.all()):
            break
    return ys
'''),
    # ------------------------------------------------------------ greedy_decode
    Mistake("greedy_decode", "finished rows not padded with EOS", '''
def greedy_decode(step_fn, bos_id, eos_id, max_len, batch_size=1):
    ys = torch.full((batch_size, 1), bos_id, dtype=torch.long)
    for _ in range(max_len):
        lp = step_fn(ys)
        ys = torch.cat([ys.to(lp.device), lp.argmax(-1, keepdim=True)], 1)
        if bool((ys == eos_id).any(1).all()):
            break
    return ys
''', feedback="not padded with EOS"),
    Mistake("greedy_decode", "no early stop", '''
def greedy_decode(step_fn, bos_id, eos_id, max_len, batch_size=1):
    ys = torch.full((batch_size, 1), bos_id, dtype=torch.long)
    done = torch.zeros(batch_size, dtype=torch.bool)
    for _ in range(max_len):
        lp = step_fn(ys)
        ys, done = ys.to(lp.device), done.to(lp.device)
        nxt = lp.argmax(-1).masked_fill(done, eos_id)
        ys = torch.cat([ys, nxt[:, None]], 1)
        done = done | (nxt == eos_id)
    return ys
''', feedback="shape"),
    Mistake("greedy_decode", "stops when the first row ends", '''
def greedy_decode(step_fn, bos_id, eos_id, max_len, batch_size=1):
    ys = torch.full((batch_size, 1), bos_id, dtype=torch.long)
    for _ in range(max_len):
        lp = step_fn(ys)
        nxt = lp.argmax(-1)
        ys = torch.cat([ys.to(lp.device), nxt[:, None]], 1)
        if bool((nxt == eos_id).any()):
            break
    return ys
'''),
    Mistake("greedy_decode", "BOS left out of the output", '''
_greedy_ok = greedy_decode
def greedy_decode(step_fn, bos_id, eos_id, max_len, batch_size=1):
    return _greedy_ok(step_fn, bos_id, eos_id, max_len, batch_size)[:, 1:]
''', feedback="shape"),
    Mistake("greedy_decode", "argmax over the batch axis", '''
def greedy_decode(step_fn, bos_id, eos_id, max_len, batch_size=1):
    ys = torch.full((batch_size, 1), bos_id, dtype=torch.long)
    done = torch.zeros(batch_size, dtype=torch.bool)
    for _ in range(max_len):
        lp = step_fn(ys)
        ys, done = ys.to(lp.device), done.to(lp.device)
        nxt = lp.argmax(0)[:batch_size].expand(batch_size).masked_fill(done, eos_id)
        ys = torch.cat([ys, nxt[:, None]], 1)
        done = done | (nxt == eos_id)
        if bool(done.all()):
            break
    return ys
'''),
    # ------------------------------------------------------------ beam_search
    Mistake("beam_search", "scores not cumulative", beam(select="log_probs + 0 * scores[:, None]"),
            feedback="not cumulative"),
    Mistake("beam_search", "finished hypotheses left in the beam", beam(finish="True"),
            feedback="left in the beam"),
    Mistake("beam_search", "normalisation with BOS counted", beam(norm="len(h)"), feedback="BOS counted"),
    Mistake("beam_search", "never normalises", beam(norm="1")),
    Mistake("beam_search", "stops only when no hypothesis is live", beam(stop="not live")),
    Mistake("beam_search", "stops at the first finished hypothesis whatever n_best", beam(stop="finished or not live")),
    Mistake("beam_search", "best beam_size tokens of each hypothesis, not overall", '''
def beam_search(step_fn, bos_id, eos_id, beam_size, max_len, n_best=1, length_norm=True):
    live, scores, finished = [[bos_id]], [0.0], []
    for _ in range(max_len):
        lp = step_fn(torch.tensor(live, dtype=torch.long)).detach().double().cpu()
        ext = []
        for i, h in enumerate(live):
            top, idx = lp[i].topk(min(beam_size, lp.shape[1]))
            ext += [(h + [j], scores[i] + s) for s, j in zip(top.tolist(), idx.tolist())]
        ext = sorted(ext, key=lambda e: -e[1])[:beam_size * len(live)]
        finished += [e for e in ext if e[0][-1] == eos_id]
        kept = [e for e in ext if e[0][-1] != eos_id]
        live, scores = [h for h, _ in kept], [s for _, s in kept]
        if len(finished) >= n_best or not live:
            break
    else:
        finished += list(zip(live, scores))
    res = [(h[1:], s / (len(h) - 1) if length_norm else s) for h, s in finished]
    return sorted(res, key=lambda r: -r[1])[:n_best]
'''),
    Mistake("beam_search", "BOS kept in the returned tokens", '''
_beam_ok = beam_search
def beam_search(step_fn, bos_id, eos_id, beam_size, max_len, n_best=1, length_norm=True):
    raw = _beam_ok(step_fn, bos_id, eos_id, beam_size, max_len, 1000, False)
    res = [([bos_id] + t, s / (len(t)) if length_norm else s) for t, s in raw]
    return sorted(res, key=lambda r: -r[1])[:n_best]
''', feedback="BOS"),
    Mistake("beam_search", "worst first", '''
_beam_ok = beam_search
def beam_search(step_fn, bos_id, eos_id, beam_size, max_len, n_best=1, length_norm=True):
    return _beam_ok(step_fn, bos_id, eos_id, beam_size, max_len, n_best, length_norm)[::-1]
'''),
    Mistake("beam_search", "live hypotheses dropped at max_len", '''
_beam_ok = beam_search
def beam_search(step_fn, bos_id, eos_id, beam_size, max_len, n_best=1, length_norm=True):
    return [r for r in _beam_ok(step_fn, bos_id, eos_id, beam_size, max_len, n_best, length_norm)
            if r[0] and r[0][-1] == eos_id]
'''),
    Mistake("beam_search", "log-softmax applied to log-probs over the wrong axis", beam(
        select="scores[:, None] + log_probs.log_softmax(0)")),

    # ------------------------------------------------------------ corpus_bleu
    Mistake("corpus_bleu", "no clipping", bleu(match="sum(k for g, k in h.items() if g in r)"),
            feedback="no clipping"),
    Mistake("corpus_bleu", "no brevity penalty", bleu(bp="1.0"), feedback="no brevity penalty"),
    Mistake("corpus_bleu", "brevity penalty applied when c > r too", bleu(bp="math.exp(1 - r / c)"),
            feedback="applied when c > r"),
    Mistake("corpus_bleu", "brevity penalty with r and c swapped", bleu(bp="math.exp(1 - c / r) if c < r else 1.0"),
            feedback="swapped"),
    Mistake("corpus_bleu", "arithmetic mean of the precisions", bleu(mean="sum(p) / max_n"),
            feedback="arithmetic mean"),
    Mistake("corpus_bleu", "n-grams counted across sentence boundaries",
            bleu(corpus="[(sum(hypotheses, []), sum(references, []))]"), feedback="across sentence boundaries"),
    Mistake("corpus_bleu", "add-one smoothing", bleu(match="sum((h & r).values()) + (n > 1)",
                                                       zero="c == 0 or min(matches) == 0 or min(totals) == 0"),
            feedback="smoothing"),
    Mistake("corpus_bleu", "zero precisions left out of the mean", bleu(
        zero="c == 0 or max(matches) == 0",
        mean="math.exp(sum(math.log(x) for x in p if x > 0) / sum(x > 0 for x in p))"),
            feedback="zero precisions left out"),
    Mistake("corpus_bleu", "BLEU on a 0-1 scale", bleu(scale="1.0"), feedback="0-1 scale"),
    Mistake("corpus_bleu", "max_n ignored", bleu(orders="4", mean="math.exp(sum(math.log(x) for x in p) / 4)").replace(
        "[0] * max_n", "[0] * 4"), feedback="max_n ignored"),
    Mistake("corpus_bleu", "empty hypotheses left out", bleu(
        corpus="[(h, r) for h, r in zip(hypotheses, references) if h]").replace(
        "c, r = sum(map(len, hypotheses)), sum(map(len, references))",
        "c, r = sum(len(h) for h, _ in pairs), sum(len(r) for _, r in pairs)"), feedback="empty hypotheses left out"),
    Mistake("corpus_bleu", "no ValueError when the lengths differ", bleu().replace(
        'raise ValueError("lengths differ")', "pass")),
    Mistake("corpus_bleu", "a ZeroDivisionError when every hypothesis is empty",
            bleu(zero="min(matches) == 0 and c > 0")),
    Mistake("corpus_bleu", "a 0-d tensor instead of a float", bleu(scale="torch.tensor(100.0)")),
    Mistake("corpus_bleu", "a mean of sentence-level BLEU scores", '''
_corpus_bleu_ok = corpus_bleu
def corpus_bleu(hypotheses, references, max_n=4):
    if len(hypotheses) != len(references):
        raise ValueError("lengths differ")
    return sum(_corpus_bleu_ok([h], [r], max_n) for h, r in zip(hypotheses, references)) / len(hypotheses)
''', feedback="a mean of sentence-level BLEU"),
    Mistake("corpus_bleu", "sacreBLEU's default exp smoothing", '''
def corpus_bleu(hypotheses, references, max_n=4):
    from sacrebleu.metrics import BLEU
    if len(hypotheses) != len(references):
        raise ValueError("lengths differ")
    bleu = BLEU(tokenize="none", max_ngram_order=max_n)
    return float(bleu.corpus_score([" ".join(h) for h in hypotheses], [[" ".join(r) for r in references]]).score)
''', feedback="smoothing"),
]
