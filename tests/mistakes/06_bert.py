"""Known-wrong versions of chapter 06's graded functions (appended to the solution notebook)."""
from tests.mistakes import Mistake

MISTAKES = [
    # ------------------------------------------------------------ bert_input
    Mistake("bert_input", "segment ids off by one: the first [SEP] in segment 1", '''
def bert_input(tokens_a, tokens_b=None, *, cls_id, sep_id):
    a = list(tokens_a)
    ids, seg = [cls_id] + a + [sep_id], [0] * (len(a) + 1) + [1]
    if tokens_b is not None:
        b = list(tokens_b)
        ids, seg = ids + b + [sep_id], seg + [1] * (len(b) + 1)
    return torch.tensor(ids, dtype=torch.long), torch.tensor(seg, dtype=torch.long)
''', feedback="off by one"),
    Mistake("bert_input", "segment ids off by one: the final [SEP] in segment 0", '''
def bert_input(tokens_a, tokens_b=None, *, cls_id, sep_id):
    a = list(tokens_a)
    ids, seg = [cls_id] + a + [sep_id], [0] * (len(a) + 2)
    if tokens_b is not None:
        b = list(tokens_b)
        ids, seg = ids + b + [sep_id], seg + [1] * len(b) + [0]
    return torch.tensor(ids, dtype=torch.long), torch.tensor(seg, dtype=torch.long)
''', feedback="off by one"),
    Mistake("bert_input", "no final [SEP] after B", '''
def bert_input(tokens_a, tokens_b=None, *, cls_id, sep_id):
    a = list(tokens_a)
    ids, seg = [cls_id] + a + [sep_id], [0] * (len(a) + 2)
    if tokens_b is not None:
        b = list(tokens_b)
        ids, seg = ids + b, seg + [1] * len(b)
    return torch.tensor(ids, dtype=torch.long), torch.tensor(seg, dtype=torch.long)
''', feedback="final [SEP] is missing"),
    Mistake("bert_input", "empty B treated as no B", '''
_bert_input_ok = bert_input
def bert_input(tokens_a, tokens_b=None, *, cls_id, sep_id):
    return _bert_input_ok(tokens_a, tokens_b if tokens_b is not None and len(tokens_b) else None,
                          cls_id=cls_id, sep_id=sep_id)
'''),
    # ------------------------------------------------------------ BertEmbeddings
    Mistake("BertEmbeddings", "no LayerNorm", '''
_BE_ok = BertEmbeddings
class BertEmbeddings(_BE_ok):
    def forward(self, input_ids, token_type_ids=None):
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        pos = torch.arange(input_ids.shape[1], device=input_ids.device)
        return self.dropout(self.token(input_ids) + self.segment(token_type_ids) + self.position(pos))
''', feedback="no LayerNorm"),
    Mistake("BertEmbeddings", "positions start at 1", '''
_BE_ok = BertEmbeddings
class BertEmbeddings(_BE_ok):
    def forward(self, input_ids, token_type_ids=None):
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        pos = torch.arange(1, input_ids.shape[1] + 1, device=input_ids.device)
        x = self.token(input_ids) + self.segment(token_type_ids) + self.position(pos)
        return self.dropout(self.norm(x))
''', feedback="positions start at 1"),
    Mistake("BertEmbeddings", "segment embedding not added", '''
_BE_ok = BertEmbeddings
class BertEmbeddings(_BE_ok):
    def forward(self, input_ids, token_type_ids=None):
        pos = torch.arange(input_ids.shape[1], device=input_ids.device)
        return self.dropout(self.norm(self.token(input_ids) + self.position(pos)))
''', feedback="segment embedding is not added"),
    # ------------------------------------------------------------ mlm_mask
    Mistake("mlm_mask", "labml's separate, overlapping draws for the random and unchanged parts", '''
def mlm_mask(input_ids, mask_id, vocab_size, special_mask, mlm_prob=0.15, generator=None):
    full = (torch.rand(input_ids.shape, generator=generator) < mlm_prob) & ~special_mask
    unchanged = full & (torch.rand(input_ids.shape, generator=generator) < 0.1)
    random_part = full & (torch.rand(input_ids.shape, generator=generator) < 0.1)
    x = input_ids.masked_fill(full & ~unchanged, mask_id)
    random_ids = torch.randint(vocab_size, input_ids.shape, generator=generator)
    x = torch.where(random_part, random_ids, x)
    return x, input_ids.masked_fill(~full, -100)
''', feedback="separate draws that overlap"),
    Mistake("mlm_mask", "special tokens masked", '''
_mlm_mask_ok = mlm_mask
def mlm_mask(input_ids, mask_id, vocab_size, special_mask, mlm_prob=0.15, generator=None):
    return _mlm_mask_ok(input_ids, mask_id, vocab_size, torch.zeros_like(special_mask), mlm_prob, generator)
''', feedback="special tokens masked"),
    Mistake("mlm_mask", "labels set at unselected positions", '''
_mlm_mask_ok = mlm_mask
def mlm_mask(input_ids, mask_id, vocab_size, special_mask, mlm_prob=0.15, generator=None):
    inputs, labels = _mlm_mask_ok(input_ids, mask_id, vocab_size, special_mask, mlm_prob, generator)
    return inputs, input_ids.clone()
''', feedback="labels set at unselected positions"),
    Mistake("mlm_mask", "every selected token becomes [MASK]", '''
_mlm_mask_ok = mlm_mask
def mlm_mask(input_ids, mask_id, vocab_size, special_mask, mlm_prob=0.15, generator=None):
    inputs, labels = _mlm_mask_ok(input_ids, mask_id, vocab_size, special_mask, mlm_prob, generator)
    return input_ids.masked_fill(labels != -100, mask_id), labels
''', feedback="every selected token became [MASK]"),
    Mistake("mlm_mask", "labels only at [MASK] positions", '''
_mlm_mask_ok = mlm_mask
def mlm_mask(input_ids, mask_id, vocab_size, special_mask, mlm_prob=0.15, generator=None):
    inputs, labels = _mlm_mask_ok(input_ids, mask_id, vocab_size, special_mask, mlm_prob, generator)
    return inputs, labels.masked_fill(inputs != mask_id, -100)
'''),
    Mistake("mlm_mask", "15% of all tokens chosen, then specials skipped (rate too low)", '''
_mlm_mask_ok = mlm_mask
def mlm_mask(input_ids, mask_id, vocab_size, special_mask, mlm_prob=0.15, generator=None):
    n = special_mask.numel()
    p = mlm_prob * float((~special_mask).sum()) / n
    return _mlm_mask_ok(input_ids, mask_id, vocab_size, special_mask, p, generator)
'''),
    Mistake("mlm_mask", "random ids drawn from [5, vocab_size) only", '''
def mlm_mask(input_ids, mask_id, vocab_size, special_mask, mlm_prob=0.15, generator=None):
    sel = (torch.rand(input_ids.shape, generator=generator) < mlm_prob) & ~special_mask
    u = torch.rand(input_ids.shape, generator=generator)
    rnd = torch.randint(5, vocab_size, input_ids.shape, generator=generator)
    x = torch.where(sel & (u >= 0.8) & (u < 0.9), rnd, input_ids).masked_fill(sel & (u < 0.8), mask_id)
    return x, input_ids.masked_fill(~sel, -100)
'''),
    Mistake("mlm_mask", "modifies input_ids in place", '''
_mlm_mask_ok = mlm_mask
def mlm_mask(input_ids, mask_id, vocab_size, special_mask, mlm_prob=0.15, generator=None):
    inputs, labels = _mlm_mask_ok(input_ids, mask_id, vocab_size, special_mask, mlm_prob, generator)
    input_ids.copy_(inputs)
    return inputs, labels
''', feedback="in place"),
    # ------------------------------------------------------------ mlm_loss
    Mistake("mlm_loss", "mean over all positions", '''
def mlm_loss(logits, labels):
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), reduction="sum")
    return ce / labels.numel()
''', feedback="averaged over all positions"),
    Mistake("mlm_loss", "sum instead of mean", '''
def mlm_loss(logits, labels):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), reduction="sum")
''', feedback="summed instead of averaged"),
    Mistake("mlm_loss", "NaN when nothing is selected", '''
def mlm_loss(logits, labels):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
''', feedback="NaN"),
    # ------------------------------------------------------------ nsp_pairs
    Mistake("nsp_pairs", "is_next labels inverted", '''
_nsp_ok = nsp_pairs
def nsp_pairs(docs, generator=None):
    return [(a, b, 1 - n) for a, b, n in _nsp_ok(docs, generator)]
''', feedback="labels inverted"),
    Mistake("nsp_pairs", "random sentence from any document, its own included", '''
def nsp_pairs(docs, generator=None):
    every = [s for d in docs for s in d]
    pairs = []
    for doc in docs:
        for i in range(len(doc) - 1):
            if float(torch.rand(1, generator=generator)) < 0.5:
                pairs.append((doc[i], doc[i + 1], 1))
            else:
                pairs.append((doc[i], every[int(torch.randint(len(every), (1,), generator=generator))], 0))
    return pairs
''', feedback="same document"),
    Mistake("nsp_pairs", "random sentence always from the next document", '''
def nsp_pairs(docs, generator=None):
    pairs = []
    for d, doc in enumerate(docs):
        e = d + 1
        while not docs[e % len(docs)]:
            e += 1
        other = docs[e % len(docs)]
        for i in range(len(doc) - 1):
            if float(torch.rand(1, generator=generator)) < 0.5:
                pairs.append((doc[i], doc[i + 1], 1))
            else:
                pairs.append((doc[i], other[int(torch.randint(len(other), (1,), generator=generator))], 0))
    return pairs
''', feedback="mostly from later"),
    Mistake("nsp_pairs", "IsNext with probability 0.3", '''
def nsp_pairs(docs, generator=None):
    pairs = []
    for d, doc in enumerate(docs):
        others = [e for e in range(len(docs)) if e != d and docs[e]]
        for i in range(len(doc) - 1):
            if float(torch.rand(1, generator=generator)) < 0.3:
                pairs.append((doc[i], doc[i + 1], 1))
            else:
                other = docs[others[int(torch.randint(len(others), (1,), generator=generator))]]
                pairs.append((doc[i], other[int(torch.randint(len(other), (1,), generator=generator))], 0))
    return pairs
''', feedback="IsNext"),
    Mistake("nsp_pairs", "one pair per sentence, the last one included", '''
_nsp_ok = nsp_pairs
def nsp_pairs(docs, generator=None):
    pairs = _nsp_ok(docs, generator)
    return pairs + [(d[-1], d[0], 0) for d in docs if d]
''', feedback="one per consecutive position"),
    # ------------------------------------------------------------ combine_layers
    Mistake("combine_layers", "an unknown strategy gives the last layer (no ValueError)", '''
_combine_ok = combine_layers
def combine_layers(hidden_states, strategy):
    try:
        return _combine_ok(hidden_states, strategy)
    except ValueError:
        return hidden_states[-1]
''', feedback="should raise ValueError"),
    Mistake("combine_layers", "sum_all includes the embeddings", '''
_combine_ok = combine_layers
def combine_layers(hidden_states, strategy):
    if strategy == "sum_all":
        return torch.stack(hidden_states).sum(0)
    return _combine_ok(hidden_states, strategy)
''', feedback="includes the embedding output"),
    Mistake("combine_layers", "last four off by one", '''
_combine_ok = combine_layers
def combine_layers(hidden_states, strategy):
    if strategy == "sum_last_four":
        return torch.stack(hidden_states[-5:-1]).sum(0)
    return _combine_ok(hidden_states, strategy)
''', feedback="off by one"),
    Mistake("combine_layers", "concat in reverse order", '''
_combine_ok = combine_layers
def combine_layers(hidden_states, strategy):
    if strategy == "concat_last_four":
        return torch.cat(hidden_states[-4:][::-1], -1)
    return _combine_ok(hidden_states, strategy)
''', feedback="reverse order"),
    Mistake("combine_layers", "concat along the time axis", '''
_combine_ok = combine_layers
def combine_layers(hidden_states, strategy):
    if strategy == "concat_last_four":
        return torch.cat(hidden_states[-4:], 1)
    return _combine_ok(hidden_states, strategy)
''', feedback="shape"),
    Mistake("combine_layers", "12 layers hard-coded", '''
_combine_ok = combine_layers
def combine_layers(hidden_states, strategy):
    if strategy == "sum_all":
        return torch.stack(hidden_states[1:13]).sum(0) if len(hidden_states) == 13 else hidden_states[-1] * 6
    return _combine_ok(hidden_states, strategy)
'''),
    # ------------------------------------------------------------ wordpiece_tokenize
    Mistake("wordpiece_tokenize", "shortest match first", '''
def wordpiece_tokenize(word, vocab, unk_token="[UNK]", max_chars=100):
    if len(word) > max_chars:
        return [unk_token]
    out, start = [], 0
    while start < len(word):
        for end in range(start + 1, len(word) + 1):
            cand = ("##" if start else "") + word[start:end]
            if cand in vocab:
                break
        else:
            return [unk_token]
        out.append(cand)
        start = end
    return out
''', feedback="shortest match"),
    Mistake("wordpiece_tokenize", "missing ## on continuation pieces", '''
def wordpiece_tokenize(word, vocab, unk_token="[UNK]", max_chars=100):
    if len(word) > max_chars:
        return [unk_token]
    out, start = [], 0
    while start < len(word):
        for end in range(len(word), start, -1):
            if word[start:end] in vocab:
                break
        else:
            return [unk_token]
        out.append(word[start:end])
        start = end
    return out
''', feedback="'##'"),
    Mistake("wordpiece_tokenize", "[UNK] only for the unmatched rest", '''
def wordpiece_tokenize(word, vocab, unk_token="[UNK]", max_chars=100):
    if len(word) > max_chars:
        return [unk_token]
    out, start = [], 0
    while start < len(word):
        for end in range(len(word), start, -1):
            cand = ("##" if start else "") + word[start:end]
            if cand in vocab:
                break
        else:
            return out + [unk_token]
        out.append(cand)
        start = end
    return out
''', feedback="only the unmatched piece"),
    Mistake("wordpiece_tokenize", "max_chars compared with >=", '''
_wp_ok = wordpiece_tokenize
def wordpiece_tokenize(word, vocab, unk_token="[UNK]", max_chars=100):
    if len(word) >= max_chars:
        return [unk_token]
    return _wp_ok(word, vocab, unk_token, max_chars)
'''),
    # ------------------------------------------------------------ bpe_train
    Mistake("bpe_train", "no end-of-word symbol", '''
def bpe_train(word_freqs, num_merges):
    words = {tuple(w): f for w, f in word_freqs.items()}
    merges = []
    for _ in range(num_merges):
        counts = Counter()
        for s, f in words.items():
            for p in zip(s, s[1:]):
                counts[p] += f
        if not counts:
            break
        best = min(counts, key=lambda p: (-counts[p], p))
        merges.append(best)
        words = {merge_pair(s, best): f for s, f in words.items()}
    return merges
''', feedback="no '</w>'"),
    Mistake("bpe_train", "counts not weighted by frequency", '''
_bpe_train_ok = bpe_train
def bpe_train(word_freqs, num_merges):
    return _bpe_train_ok({w: 1 for w in word_freqs}, num_merges)
''', feedback="not weighted by word frequency"),
    Mistake("bpe_train", "ties to the largest pair", '''
def bpe_train(word_freqs, num_merges):
    words = {tuple(w) + ("</w>",): f for w, f in word_freqs.items()}
    merges = []
    for _ in range(num_merges):
        counts = Counter()
        for s, f in words.items():
            for p in zip(s, s[1:]):
                counts[p] += f
        if not counts:
            break
        best = max(counts, key=lambda p: (counts[p], p))
        merges.append(best)
        words = {merge_pair(s, best): f for s, f in words.items()}
    return merges
''', feedback="ties go to the largest pair"),
    Mistake("bpe_train", "a pair counted once per word", '''
def bpe_train(word_freqs, num_merges):
    words = {tuple(w) + ("</w>",): f for w, f in word_freqs.items()}
    merges = []
    for _ in range(num_merges):
        counts = Counter()
        for s, f in words.items():
            for p in set(zip(s, s[1:])):
                counts[p] += f
        if not counts:
            break
        best = min(counts, key=lambda p: (-counts[p], p))
        merges.append(best)
        words = {merge_pair(s, best): f for s, f in words.items()}
    return merges
''', feedback="once per word type"),
    # ------------------------------------------------------------ bpe_encode
    Mistake("bpe_encode", "merges applied out of order: leftmost mergeable pair first", '''
def bpe_encode(word, merges):
    known = {tuple(p) for p in merges}
    s = tuple(word) + ("</w>",)
    while True:
        pairs = [p for p in zip(s, s[1:]) if p in known]
        if not pairs:
            return list(s)
        s = merge_pair(s, pairs[0])
''', feedback="out of order"),
    Mistake("bpe_encode", "merges applied in reverse order", '''
def bpe_encode(word, merges):
    s = tuple(word) + ("</w>",)
    for p in reversed(merges):
        s = merge_pair(s, tuple(p))
    return list(s)
''', feedback="reverse order"),
    Mistake("bpe_encode", "no end-of-word symbol", '''
_bpe_encode_ok = bpe_encode
def bpe_encode(word, merges):
    out = _bpe_encode_ok(word, merges)
    return out[:-1] if out[-1] == "</w>" else out
'''),
    # ------------------------------------------------------------ text_infilling
    Mistake("text_infilling", "token masking: one mask per masked token", '''
def text_infilling(tokens, mask_id, mask_ratio=0.3, poisson_lambda=3.0, generator=None):
    n = len(tokens)
    chosen = set(torch.randperm(n, generator=generator)[:round(mask_ratio * n)].tolist())
    out = []
    for i, t in enumerate(tokens):
        if i in chosen:
            out.append(mask_id)
        else:
            out.append(int(t))
    return out
''', feedback="adjacent"),
    Mistake("text_infilling", "at least one span drawn, even when k = 0", '''
_infill_ok = text_infilling
def text_infilling(tokens, mask_id, mask_ratio=0.3, poisson_lambda=3.0, generator=None):
    if round(mask_ratio * len(tokens)) == 0:
        return [mask_id] + [int(t) for t in tokens]  # one draw, shortened to a zero-length span
    return _infill_ok(tokens, mask_id, mask_ratio, poisson_lambda, generator)
''', feedback="with k = 0 no span is drawn"),
    Mistake("text_infilling", "more spans than gaps: the extra spans dropped, no ValueError", '''
_infill_ok = text_infilling
def text_infilling(tokens, mask_id, mask_ratio=0.3, poisson_lambda=3.0, generator=None):
    try:
        return _infill_ok(tokens, mask_id, mask_ratio, poisson_lambda, generator)
    except ValueError:
        return [mask_id]
''', feedback="should raise ValueError"),
    Mistake("text_infilling", "zero-length spans dropped", '''
_infill_ok = text_infilling
def text_infilling(tokens, mask_id, mask_ratio=0.3, poisson_lambda=3.0, generator=None):
    out = _infill_ok(tokens, mask_id, mask_ratio, poisson_lambda, generator)
    n, res = len(out), []
    for i, t in enumerate(out):
        if t == mask_id and 0 < i < n - 1 and out[i + 1] == out[i - 1] + 1:
            continue
        res.append(t)
    return res
''', feedback="no zero-length spans"),
    Mistake("text_infilling", "span lengths uniform in 1..5", '''
def text_infilling(tokens, mask_id, mask_ratio=0.3, poisson_lambda=3.0, generator=None):
    n = len(tokens)
    budget = round(mask_ratio * n)
    lengths = []
    while sum(lengths) < budget:
        lengths.append(int(torch.randint(1, 6, (1,), generator=generator)))
    if lengths:
        lengths[-1] -= sum(lengths) - budget
    kept = n - budget
    gaps = sorted(torch.randperm(kept + 1, generator=generator)[:len(lengths)].tolist())
    at = dict(zip(gaps, lengths))
    out, pos = [], 0
    for gap in range(kept + 1):
        if gap in at:
            out.append(mask_id)
            pos += at[gap]
        if gap < kept:
            out.append(int(tokens[pos]))
            pos += 1
    return out
''', feedback="no zero-length spans"),
    Mistake("text_infilling", "budget not trimmed: the last span overshoots", '''
def text_infilling(tokens, mask_id, mask_ratio=0.3, poisson_lambda=3.0, generator=None):
    n = len(tokens)
    budget = round(mask_ratio * n)
    rate = torch.tensor([float(poisson_lambda)])
    lengths = []
    while sum(lengths) < budget:
        lengths.append(int(torch.poisson(rate, generator=generator)))
    budget = min(sum(lengths), n)
    kept = n - budget
    gaps = sorted(torch.randperm(kept + 1, generator=generator)[:len(lengths)].tolist())
    at = dict(zip(gaps, lengths))
    out, pos = [], 0
    for gap in range(kept + 1):
        if gap in at:
            out.append(mask_id)
            pos += at[gap]
        if gap < kept:
            out.append(int(tokens[pos]))
            pos += 1
    return out
''', feedback="tokens were masked; expected"),
    Mistake("text_infilling", "lambda fixed at 3", '''
_infill_ok = text_infilling
def text_infilling(tokens, mask_id, mask_ratio=0.3, poisson_lambda=3.0, generator=None):
    return _infill_ok(tokens, mask_id, mask_ratio, 3.0, generator)
''', feedback="mean span length"),
    # ------------------------------------------------------------ sentence_permutation
    Mistake("sentence_permutation", "tokens shuffled, not sentences", '''
def sentence_permutation(tokens, eos_id, generator=None):
    return [int(tokens[i]) for i in torch.randperm(len(tokens), generator=generator).tolist()]
''', feedback="each intact"),
    Mistake("sentence_permutation", "document rotation instead of permutation", '''
def sentence_permutation(tokens, eos_id, generator=None):
    sents, cur = [], []
    for t in tokens:
        cur.append(int(t))
        if t == eos_id:
            sents.append(cur)
            cur = []
    if cur:
        sents.append(cur)
    if not sents:
        return []
    k = int(torch.randint(len(sents), (1,), generator=generator))
    return [t for s in sents[k:] + sents[:k] for t in s]
''', feedback="rotation"),
    Mistake("sentence_permutation", "trailing piece without eos dropped", '''
def sentence_permutation(tokens, eos_id, generator=None):
    sents, cur = [], []
    for t in tokens:
        cur.append(int(t))
        if t == eos_id:
            sents.append(cur)
            cur = []
    order = torch.randperm(len(sents), generator=generator).tolist()
    return [t for i in order for t in sents[i]]
''', feedback="trailing piece"),
    # ------------------------------------------------------------ t5_span_corruption
    Mistake("t5_span_corruption", "no final sentinel in the targets", '''
_t5_ok = t5_span_corruption
def t5_span_corruption(tokens, sentinel_ids, noise_density=0.15, mean_span_length=3.0, generator=None):
    inputs, targets = _t5_ok(tokens, sentinel_ids, noise_density, mean_span_length, generator)
    return inputs, targets[:-1]
''', feedback="one more sentinel"),
    Mistake("t5_span_corruption", "the same sentinel for every span", '''
_t5_ok = t5_span_corruption
def t5_span_corruption(tokens, sentinel_ids, noise_density=0.15, mean_span_length=3.0, generator=None):
    inputs, targets = _t5_ok(tokens, sentinel_ids, noise_density, mean_span_length, generator)
    first = sentinel_ids[0]
    return ([first if t in sentinel_ids else t for t in inputs],
            [first if t in sentinel_ids else t for t in targets])
''', feedback="sentinel"),
    Mistake("t5_span_corruption", "targets hold the whole text", '''
_t5_ok = t5_span_corruption
def t5_span_corruption(tokens, sentinel_ids, noise_density=0.15, mean_span_length=3.0, generator=None):
    inputs, targets = _t5_ok(tokens, sentinel_ids, noise_density, mean_span_length, generator)
    return inputs, [int(t) for t in tokens]
'''),
    Mistake("t5_span_corruption", "every span exactly mean_span_length, evenly spaced", '''
def t5_span_corruption(tokens, sentinel_ids, noise_density=0.15, mean_span_length=3.0, generator=None):
    n = len(tokens)
    k = min(max(round(noise_density * n), 1), n - 1)
    m = min(max(1, round(k / mean_span_length)), n - k + 1)
    noise = [k // m + (j < k % m) for j in range(m)]
    kept_total = n - k
    kept = [kept_total // (m + 1) + (j < kept_total % (m + 1)) for j in range(m + 1)]
    inputs, targets, pos = [], [], 0
    for j in range(m + 1):
        inputs += [int(t) for t in tokens[pos:pos + kept[j]]]
        pos += kept[j]
        targets.append(sentinel_ids[j])
        if j < m:
            inputs.append(sentinel_ids[j])
            targets += [int(t) for t in tokens[pos:pos + noise[j]]]
            pos += noise[j]
    return inputs, targets
''', feedback="same length"),
    Mistake("t5_span_corruption", "spans may touch", '''
def t5_span_corruption(tokens, sentinel_ids, noise_density=0.15, mean_span_length=3.0, generator=None):
    n = len(tokens)
    k = min(max(round(noise_density * n), 1), n - 1)
    m = min(max(1, round(k / mean_span_length)), n - k + 1)
    noise = [k // m + (j < k % m) for j in range(m)]
    kept = [0] * (m + 1)
    kept[0] = n - k
    inputs, targets, pos = [], [], 0
    for j in range(m + 1):
        inputs += [int(t) for t in tokens[pos:pos + kept[j]]]
        pos += kept[j]
        targets.append(sentinel_ids[j])
        if j < m:
            inputs.append(sentinel_ids[j])
            targets += [int(t) for t in tokens[pos:pos + noise[j]]]
            pos += noise[j]
    return inputs, targets
''', feedback="touch"),
]
