"""Known-wrong versions of chapter 05's graded functions (appended to the solution notebook)."""
from tests.mistakes import Mistake

MISTAKES = [
    # ------------------------------------------------------------ input transformations
    Mistake("gpt_classification_input", "no extract token", '''
def gpt_classification_input(text, start_id, extract_id):
    return [start_id] + list(text)
''', feedback="extract token is missing"),
    Mistake("gpt_classification_input", "appends to the caller's list", '''
def gpt_classification_input(text, start_id, extract_id):
    text.append(extract_id)
    return [start_id] + text
''', feedback="modified its input"),
    Mistake("gpt_entailment_input", "no delimiter", '''
def gpt_entailment_input(premise, hypothesis, start_id, delim_id, extract_id):
    return [start_id] + list(premise) + list(hypothesis) + [extract_id]
''', feedback="delimiter is missing"),
    Mistake("gpt_similarity_inputs", "one order only", '''
def gpt_similarity_inputs(a, b, start_id, delim_id, extract_id):
    return [gpt_entailment_input(a, b, start_id, delim_id, extract_id)]
''', feedback="one order only"),
    Mistake("gpt_similarity_inputs", "orders swapped", '''
def gpt_similarity_inputs(a, b, start_id, delim_id, extract_id):
    return [gpt_entailment_input(b, a, start_id, delim_id, extract_id),
            gpt_entailment_input(a, b, start_id, delim_id, extract_id)]
''', feedback="orders swapped"),
    Mistake("gpt_multiple_choice_inputs", "all answers in one sequence", '''
def gpt_multiple_choice_inputs(context, answers, start_id, delim_id, extract_id):
    return [gpt_entailment_input(context, [t for a in answers for t in a], start_id, delim_id, extract_id)]
''', feedback="all answers in one sequence"),
    # ------------------------------------------------------------ filter_logits
    Mistake("filter_logits", "top_k = 0 keeps everything (no ValueError)", '''
_filter_ok = filter_logits
def filter_logits(logits, top_k=None, top_p=None):
    return _filter_ok(logits, None if top_k is not None and top_k < 1 else top_k, top_p)
''', feedback="should raise ValueError"),
    Mistake("filter_logits", "top-p applied at top_p >= 1 too", '''
_filter_ok = filter_logits
def filter_logits(logits, top_k=None, top_p=None):
    out = _filter_ok(logits, top_k, None)
    if top_p is not None:
        probs, order = out.softmax(-1).sort(dim=-1, descending=True, stable=True)
        drop_sorted = probs.cumsum(-1) - probs >= top_p
        drop_sorted[..., 0] = False
        out = out.masked_fill(drop_sorted.scatter(-1, order, drop_sorted), float("-inf"))
    return out
''', feedback="which should keep every logit"),
    Mistake("filter_logits", "top-p drops the token which crosses the threshold", '''
_filter_ok = filter_logits
def filter_logits(logits, top_k=None, top_p=None):
    out = _filter_ok(logits, top_k, None)
    if top_p is not None and top_p < 1.0:
        probs, order = out.softmax(-1).sort(-1, descending=True)
        drop_sorted = probs.cumsum(-1) > top_p
        drop_sorted[..., 0] = False
        out = out.masked_fill(drop_sorted.scatter(-1, order, drop_sorted), float("-inf"))
    return out
''', feedback="crosses the threshold"),
    Mistake("filter_logits", "top-k keeps exactly k (ties dropped)", '''
_filter_ok = filter_logits
def filter_logits(logits, top_k=None, top_p=None):
    out = logits
    if top_k is not None and top_k < logits.shape[-1]:
        idx = logits.topk(top_k, -1).indices
        keep = torch.zeros_like(logits, dtype=torch.bool).scatter(-1, idx, True)
        out = logits.masked_fill(~keep, float("-inf"))
    return _filter_ok(out, None, top_p)
''', feedback="drops some tied"),
    Mistake("filter_logits", "top-p on the unfiltered distribution", '''
_filter_ok = filter_logits
def filter_logits(logits, top_k=None, top_p=None):
    a = _filter_ok(logits, top_k, None)
    b = _filter_ok(logits, None, top_p)
    return a.masked_fill(b == float("-inf"), float("-inf"))
''', feedback="full distribution"),
    Mistake("filter_logits", "top-p keeps only tokens inside the mass, the top one not forced", '''
_filter_ok = filter_logits
def filter_logits(logits, top_k=None, top_p=None):
    out = _filter_ok(logits, top_k, None)
    if top_p is not None and top_p < 1.0:
        probs, order = out.softmax(-1).sort(-1, descending=True)
        drop_sorted = probs.cumsum(-1) > top_p
        out = out.masked_fill(drop_sorted.scatter(-1, order, drop_sorted), float("-inf"))
    return out
''', feedback="every token removed"),
    Mistake("filter_logits", "top-p drops everything at top_p=0 (top one not forced)", '''
_filter_ok = filter_logits
def filter_logits(logits, top_k=None, top_p=None):
    out = _filter_ok(logits, top_k, None)
    if top_p is not None and top_p < 1.0:
        probs, order = out.softmax(-1).sort(-1, descending=True)
        drop_sorted = probs.cumsum(-1) - probs >= top_p
        out = out.masked_fill(drop_sorted.scatter(-1, order, drop_sorted), float("-inf"))
    return out
''', feedback="top_p=0"),
    Mistake("filter_logits", "removed entries set to 0", '''
_filter_ok = filter_logits
def filter_logits(logits, top_k=None, top_p=None):
    out = _filter_ok(logits, top_k, top_p)
    return out.masked_fill(out == float("-inf"), 0.0)
''', feedback="set to 0 instead of -inf"),
    # ------------------------------------------------------------ sample_next_token
    Mistake("sample_next_token", "temperature applied after the softmax", '''
def sample_next_token(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
    if temperature == 0:
        return logits.argmax(-1)
    probs = filter_logits(logits, top_k, top_p).softmax(-1) / temperature
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)
''', feedback="temperature applied after the softmax"),
    Mistake("sample_next_token", "top-p filter before the temperature", '''
def sample_next_token(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
    if temperature == 0:
        return logits.argmax(-1)
    probs = (filter_logits(logits, top_k, top_p) / temperature).softmax(-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)
''', feedback="before the temperature"),
    Mistake("sample_next_token", "filters ignored", '''
def sample_next_token(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
    if temperature == 0:
        return logits.argmax(-1)
    return torch.multinomial((logits / temperature).softmax(-1), 1, generator=generator).squeeze(-1)
''', feedback="ignored"),
    Mistake("sample_next_token", "greedy always", '''
def sample_next_token(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
    return logits.argmax(-1)
''', feedback="the argmax instead of a sample"),
    Mistake("sample_next_token", "divides by zero at temperature 0", '''
def sample_next_token(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
    probs = filter_logits(logits / temperature, top_k, top_p).softmax(-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)
'''),
    Mistake("sample_next_token", "returns (B, 1)", '''
def sample_next_token(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
    if temperature == 0:
        return logits.argmax(-1, keepdim=True)
    probs = filter_logits(logits / temperature, top_k, top_p).softmax(-1)
    return torch.multinomial(probs, 1, generator=generator)
'''),
    Mistake("sample_next_token", "unseeded randomness", '''
import random as _random
def sample_next_token(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
    if temperature == 0:
        return logits.argmax(-1)
    probs = filter_logits(logits / temperature, top_k, top_p).softmax(-1)
    g = torch.Generator(device=logits.device).manual_seed(_random.SystemRandom().randrange(2**31))
    return torch.multinomial(probs, 1, generator=g).squeeze(-1)
''', feedback="the same seed"),
    # ------------------------------------------------------------ attend_with_cache
    Mistake("attend_with_cache", "cache concatenated on the wrong axis", '''
def attend_with_cache(q, k, v, cache=None):
    if cache is not None:
        k = torch.cat([cache[0], k], dim=1)
        v = torch.cat([cache[1], v], dim=1)
    T, S_all = q.shape[-2], k.shape[-2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    mask = torch.ones(T, S_all, dtype=torch.bool, device=q.device).tril(S_all - T)
    return scores.masked_fill(~mask, float("-inf")).softmax(-1) @ v, (k, v)
''', feedback="wrong axis"),
    Mistake("attend_with_cache", "causal mask off by one in the cached step", '''
def attend_with_cache(q, k, v, cache=None):
    if cache is not None:
        k = torch.cat([cache[0], k], dim=2)
        v = torch.cat([cache[1], v], dim=2)
    T, S_all = q.shape[-2], k.shape[-2]
    S = S_all - T
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    mask = torch.ones(T, S_all, dtype=torch.bool, device=q.device).tril(S + 1 if S else 0)
    return scores.masked_fill(~mask, float("-inf")).softmax(-1) @ v, (k, v)
''', feedback="off by one in the cached step"),
    Mistake("attend_with_cache", "mask ignores the cache offset", '''
def attend_with_cache(q, k, v, cache=None):
    if cache is not None:
        k = torch.cat([cache[0], k], dim=2)
        v = torch.cat([cache[1], v], dim=2)
    T, S_all = q.shape[-2], k.shape[-2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    mask = torch.ones(T, S_all, dtype=torch.bool, device=q.device).tril()
    return scores.masked_fill(~mask, float("-inf")).softmax(-1) @ v, (k, v)
''', feedback="ignores the cache"),
    Mistake("attend_with_cache", "no causal mask", '''
def attend_with_cache(q, k, v, cache=None):
    if cache is not None:
        k = torch.cat([cache[0], k], dim=2)
        v = torch.cat([cache[1], v], dim=2)
    return (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).softmax(-1) @ v, (k, v)
''', feedback="no causal mask"),
    Mistake("attend_with_cache", "new keys before the cache", '''
_attend_ok = attend_with_cache
def attend_with_cache(q, k, v, cache=None):
    if cache is None:
        return _attend_ok(q, k, v)
    out, _ = _attend_ok(q, k, v, cache)
    return out, (torch.cat([k, cache[0]], 2), torch.cat([v, cache[1]], 2))
''', feedback="before the cached ones"),
    # ------------------------------------------------------------ modules
    Mistake("CausalSelfAttention", "no output projection", '''
class CausalSelfAttention(CausalSelfAttention):
    def forward(self, x, cache=None):
        q = split_heads(self.w_q(x), self.n_heads)
        k = split_heads(self.w_k(x), self.n_heads)
        v = split_heads(self.w_v(x), self.n_heads)
        out, cache = attend_with_cache(q, k, v, cache)
        return merge_heads(out), cache
''', feedback="no output projection"),
    Mistake("CausalSelfAttention", "heads split without a transpose", '''
class CausalSelfAttention(CausalSelfAttention):
    def forward(self, x, cache=None):
        B, T, D = x.shape
        sp = lambda t: t.reshape(B, self.n_heads, T, D // self.n_heads)
        out, cache = attend_with_cache(sp(self.w_q(x)), sp(self.w_k(x)), sp(self.w_v(x)), cache)
        return self.w_o(out.reshape(B, T, D)), cache
''', feedback="without a transpose"),
    Mistake("GPTBlock", "post-norm", '''
class GPTBlock(GPTBlock):
    def forward(self, x, cache=None):
        a, cache = self.attn(x, cache)
        x = self.ln1(x + a)
        return self.ln2(x + self.mlp(x)), cache
''', feedback="post-norm instead of pre-norm"),
    Mistake("GPTBlock", "ln1 and ln2 swapped", '''
class GPTBlock(GPTBlock):
    def forward(self, x, cache=None):
        a, cache = self.attn(self.ln2(x), cache)
        x = x + a
        return x + self.mlp(self.ln1(x)), cache
''', feedback="ln1 and ln2 swapped"),
    Mistake("GPT", "no final LayerNorm", '''
class GPT(GPT):
    def forward(self, tokens, caches=None):
        B, T = tokens.shape
        S = 0 if caches is None else caches[0][0].shape[2]
        h = self.tok_embed(tokens) + self.pos_embed(torch.arange(S, S + T, device=tokens.device))
        new = []
        for i, block in enumerate(self.blocks):
            h, c = block(h, None if caches is None else caches[i])
            new.append(c)
        return self.head(h), new
''', feedback="no final LayerNorm"),
    Mistake("GPT", "positions not offset by the cache", '''
class GPT(GPT):
    def forward(self, tokens, caches=None):
        B, T = tokens.shape
        h = self.tok_embed(tokens) + self.pos_embed(torch.arange(T, device=tokens.device))
        new = []
        for i, block in enumerate(self.blocks):
            h, c = block(h, None if caches is None else caches[i])
            new.append(c)
        return self.head(self.ln_f(h)), new
''', feedback="not offset"),
    # ------------------------------------------------------------ generate
    Mistake("generate", "cache path feeds the whole sequence again", '''
@torch.no_grad()
def generate(model, prompt, max_new_tokens, temperature=1.0, top_k=None, top_p=None, use_cache=True,
             generator=None):
    tokens, caches = prompt, None
    for _ in range(max_new_tokens):
        logits, caches = model(tokens, caches if use_cache else None)
        nxt = sample_next_token(logits[:, -1], temperature, top_k, top_p, generator)
        tokens = torch.cat([tokens, nxt[:, None]], 1)
    return tokens
'''),
    Mistake("generate", "returns only the new tokens", '''
_generate_ok = generate
def generate(model, prompt, max_new_tokens, **kw):
    return _generate_ok(model, prompt, max_new_tokens, **kw)[:, prompt.shape[1]:]
''', feedback="only the new tokens"),
    Mistake("generate", "reads the first position's logits", '''
@torch.no_grad()
def generate(model, prompt, max_new_tokens, temperature=1.0, top_k=None, top_p=None, use_cache=True,
             generator=None):
    tokens = prompt
    for _ in range(max_new_tokens):
        logits, _ = model(tokens)
        nxt = sample_next_token(logits[:, 0], temperature, top_k, top_p, generator)
        tokens = torch.cat([tokens, nxt[:, None]], 1)
    return tokens
'''),
    # ------------------------------------------------------------ prefix matching
    Mistake("prefix_matching_score", "the earlier occurrence itself, not the token after it", '''
def prefix_matching_score(attn, tokens):
    B, H, T, _ = attn.shape
    same = tokens[:, :, None] == tokens[:, None, :]
    earlier = same & torch.ones(T, T, dtype=torch.bool).tril(-1)
    repeats = earlier.any(-1)
    mass = (attn * earlier[:, None]).sum(-1)
    return (mass * repeats[:, None]).sum((0, 2)) / repeats.sum().clamp(min=1)
''', feedback="not the token after it"),
    Mistake("prefix_matching_score", "off by one: two after the earlier occurrence", '''
def prefix_matching_score(attn, tokens):
    B, H, T, _ = attn.shape
    same = tokens[:, :, None] == tokens[:, None, :]
    earlier = same & torch.ones(T, T, dtype=torch.bool).tril(-1)
    after = torch.zeros_like(earlier)
    after[:, :, 2:] = earlier[:, :, :-2]
    repeats = earlier.any(-1)
    mass = (attn * after[:, None]).sum(-1)
    return (mass * repeats[:, None]).sum((0, 2)) / repeats.sum().clamp(min=1)
''', feedback="j + 2"),
    Mistake("prefix_matching_score", "a position is its own earlier occurrence", '''
def prefix_matching_score(attn, tokens):
    B, H, T, _ = attn.shape
    same = tokens[:, :, None] == tokens[:, None, :]
    earlier = same & torch.ones(T, T, dtype=torch.bool).tril(0)
    after = torch.zeros_like(earlier)
    after[:, :, 1:] = earlier[:, :, :-1]
    repeats = earlier.any(-1)
    mass = (attn * after[:, None]).sum(-1)
    return (mass * repeats[:, None]).sum((0, 2)) / repeats.sum().clamp(min=1)
''', feedback="its own earlier occurrence"),
    Mistake("prefix_matching_score", "mean over every position", '''
def prefix_matching_score(attn, tokens):
    B, H, T, _ = attn.shape
    same = tokens[:, :, None] == tokens[:, None, :]
    earlier = same & torch.ones(T, T, dtype=torch.bool).tril(-1)
    after = torch.zeros_like(earlier)
    after[:, :, 1:] = earlier[:, :, :-1]
    return (attn * after[:, None]).sum(-1).mean((0, 2))
''', feedback="every position"),
    Mistake("prefix_matching_score", "NaN when nothing repeats", '''
def prefix_matching_score(attn, tokens):
    B, H, T, _ = attn.shape
    same = tokens[:, :, None] == tokens[:, None, :]
    earlier = same & torch.ones(T, T, dtype=torch.bool).tril(-1)
    after = torch.zeros_like(earlier)
    after[:, :, 1:] = earlier[:, :, :-1]
    repeats = earlier.any(-1)
    mass = (attn * after[:, None]).sum(-1)
    return (mass * repeats[:, None]).sum((0, 2)) / repeats.sum()
'''),
]
