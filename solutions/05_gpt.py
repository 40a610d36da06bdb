# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
#   course:
#     chapter: 05_gpt
# ---

# %% [markdown]
# # 5. GPT: from generative pre-training to few-shot prompting
#
# ## Motivation
#
# Chapter 3's Transformer translates: an encoder reads the source, a decoder
# writes the target. OpenAI's GPT {cite}`radford2018` keeps only the decoder
# (without cross-attention), as Liu et al. {cite}`liu2018generating` had
# done to write Wikipedia articles, and trains it on one task for which
# text is free: predict the next token. Three papers then changed what such a model
# is *for*:
#
# * **GPT-1** {cite}`radford2018`: pre-train the language model (117M
#   parameters, on the 7,000 unpublished books of BookCorpus), then
#   fine-tune it with a small linear head on each task, the way ImageNet
#   features are reused in vision. Every task is turned
#   into one token sequence (*input transformations*), so the same network
#   serves classification, entailment, similarity and multiple choice.
# * **GPT-2** {cite}`radford2019`: about ten times the parameters (1.5B)
#   and the data (WebText, 8M web pages, on a byte-level BPE vocabulary of
#   50,257 tokens), and no fine-tuning at all. The task is written in the prompt (*zero-shot*): a
#   text followed by `TL;DR:` gets summarised, `english sentence = french
#   sentence` pairs followed by an English sentence and `=` get translated.
#   GPT-2's "zero-shot" means no task-specific training: its translation
#   prompt does contain example pairs, which GPT-3's terms would call
#   few-shot.
# * **GPT-3** {cite}`brown2020`: 175B parameters. A few demonstrations
#   in the prompt (*few-shot in context*), still with no gradient update,
#   make the model better at a new task than the bare instruction, and
#   the gain grows with model size: large for the 175B model, small for
#   the smallest ones (GPT-3's Figures 1.2 and 1.3). None of these models
#   is small enough for this course; pre-trained GPT-2 weights can be
#   loaded with Hugging Face's `transformers` to try prompting on a real
#   one.
#
# And a generator needs a way to pick tokens: greedy, temperature, top-k
# and nucleus (top-p) sampling {cite}`holtzman2020`, and, to be fast, a *KV
# cache*. In this chapter you build all of it. Then you train a tiny
# attention-only GPT, in under a minute on a CPU, until it retrieves from
# the demonstrations in its prompt the label of a letter under a mapping
# drawn afresh for every prompt, and find the two heads that do it: the
# induction circuit of Olsson et al. {cite}`olsson2022`. Last, your `GPT`
# learns English text, writes it, is shown to compute GPT-2's function,
# and is scaled across five sizes.

# %%
# Setup: on Colab or Binder this installs the course's helpers (`attnkit`). On your own machine,
# `pip install -e .` did, as the README says (in the course's own repository, `make setup`).
import importlib.util, subprocess, sys  # noqa: E401
if importlib.util.find_spec("attnkit") is None:
    repo = "https://github.com/attention-course/attention-course"  # _config.yml: repository.url
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", f"git+{repo}"], check=True)

# %%
import math

import torch
import torch.nn.functional as F
from torch import nn

import attnkit
from attnkit.glue import glue

_ = torch.manual_seed(0)

# %% [markdown]
# ## The math
#
# A language model factorises the probability of a sequence left to right,
#
# $$p(u_1, \dots, u_n) = \prod_{i} p(u_i \mid u_1, \dots, u_{i-1}),$$
#
# and GPT-1's pre-training maximises $L_1 = \sum_i \log p(u_i \mid u_{<i})$
# over a large corpus. The network is a stack of Transformer *decoder*
# blocks: masked (causal) self-attention, so that position $i$ sees only
# positions $\le i$, then a feed-forward network, each with a residual
# connection and a LayerNorm. With token embeddings $W_e$ and learned
# position embeddings $W_p$:
#
# $$h_0 = U W_e + W_p, \qquad h_l = \mathrm{block}(h_{l-1}), \qquad
#   p(u) = \mathrm{softmax}(h_L W_\text{out}).$$
#
# GPT-1 and GPT-2 *tie* the output layer to the token embeddings,
# $W_\text{out} = W_e^\top$, so $p(u) = \mathrm{softmax}(h_L W_e^\top)$.
# **Our `head` is untied**: a separate `nn.Linear(d_model, vocab_size,
# bias=False)`, one more matrix to learn (tying it is a one-line change).
#
# **Fine-tuning (GPT-1).** A labelled example, tokens $x^1..x^m$ with label
# $y$, is fed through the pre-trained model; the last position's final
# state $h_L^m$ goes through one new linear layer,
# $p(y \mid x) = \mathrm{softmax}(h_L^m W_y)$, and the loss is
# $L_2 + \lambda L_1$ (the language-model loss kept as an auxiliary term,
# $\lambda = 0.5$). Only $W_y$ and the embeddings of new delimiter tokens
# are new parameters.
#
# **Norm placement.** GPT-1 used the original post-norm block of chapter 3.
# GPT-2 moved the LayerNorm to the input of each sub-layer and added one
# final LayerNorm after the last block (*pre-norm*). **We teach pre-norm,
# GPT-2's placement**:
#
# $$x \leftarrow x + \mathrm{Attn}(\mathrm{LN}_1(x)), \qquad
#   x \leftarrow x + \mathrm{MLP}(\mathrm{LN}_2(x)),$$
#
# with a GELU in the MLP, as both GPTs (GPT-1's and GPT-2's code use the
# tanh approximation of the GELU; we use PyTorch's exact `nn.GELU()`). Chapter
# 3 measured that pre-norm trains without a warm-up where post-norm did
# not, on its task. We still use a short warm-up in the experiment below,
# as GPT-1 (and later GPT-3) did: it is a cheap precaution for Adam's first
# steps, not a requirement of pre-norm.

# %% [markdown]
# ## Implementation
#
# ### GPT-1's input transformations
#
# A pre-trained model reads one contiguous sequence, so GPT-1 rewrites
# every structured input as one. Each sequence starts with a start token and
# ends with an *extract* token, whose final hidden state feeds the linear
# head; a *delimiter* separates the parts of a pair:
#
# | task | sequence(s) | head |
# | --- | --- | --- |
# | classification | `[start] text [extract]` | linear on the extract state |
# | entailment | `[start] premise [delim] hypothesis [extract]` | linear |
# | similarity | `[start] a [delim] b [extract]` and `[start] b [delim] a [extract]` | the two extract states **summed**, then linear |
# | multiple choice | `[start] context [delim] answer_k [extract]`, one per answer | one score each, softmax over the answers |
#
# Similarity has no natural order, so both orders are processed and their
# representations added element-wise. Token lists in, token lists out:

# %% nbgrader={"grade": false, "grade_id": "gpt_classification_input", "locked": false, "schema_version": 3, "solution": true}
def gpt_classification_input(text: list[int], start_id: int, extract_id: int) -> list[int]:
    """[start] text [extract], as a new list (the input list is not modified)."""
    ### BEGIN SOLUTION
    return [start_id] + list(text) + [extract_id]
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "gpt_entailment_input", "locked": false, "schema_version": 3, "solution": true}
def gpt_entailment_input(premise: list[int], hypothesis: list[int], start_id: int, delim_id: int,
                         extract_id: int) -> list[int]:
    """[start] premise [delim] hypothesis [extract], as a new list."""
    ### BEGIN SOLUTION
    return [start_id] + list(premise) + [delim_id] + list(hypothesis) + [extract_id]
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "gpt_similarity_inputs", "locked": false, "schema_version": 3, "solution": true}
def gpt_similarity_inputs(a: list[int], b: list[int], start_id: int, delim_id: int,
                          extract_id: int) -> list[list[int]]:
    """Both orders: [[start] a [delim] b [extract], [start] b [delim] a [extract]]."""
    ### BEGIN SOLUTION
    return [gpt_entailment_input(a, b, start_id, delim_id, extract_id),
            gpt_entailment_input(b, a, start_id, delim_id, extract_id)]
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "gpt_multiple_choice_inputs", "locked": false, "schema_version": 3, "solution": true}
def gpt_multiple_choice_inputs(context: list[int], answers: list[list[int]], start_id: int,
                               delim_id: int, extract_id: int) -> list[list[int]]:
    """One sequence per answer, in order: [start] context [delim] answer_k [extract]."""
    ### BEGIN SOLUTION
    return [gpt_entailment_input(context, ans, start_id, delim_id, extract_id) for ans in answers]
    ### END SOLUTION


# %%
START, DELIM, EXTRACT = 100, 101, 102
print(gpt_classification_input([5, 6, 7], START, EXTRACT))          # [100, 5, 6, 7, 102]
print(gpt_entailment_input([5, 6], [8], START, DELIM, EXTRACT))     # [100, 5, 6, 101, 8, 102]
print(gpt_similarity_inputs([5], [8, 9], START, DELIM, EXTRACT))
# [[100, 5, 101, 8, 9, 102], [100, 8, 9, 101, 5, 102]]
print(gpt_multiple_choice_inputs([5, 6], [[1], [2, 3]], START, DELIM, EXTRACT))
# [[100, 5, 6, 101, 1, 102], [100, 5, 6, 101, 2, 3, 102]]

# %% [markdown]
# ### Prompts instead of fine-tuning (GPT-2, GPT-3)
#
# GPT-2 and GPT-3 drop the head and the fine-tuning: the task goes into the
# text itself and the model simply continues it. GPT-2 {cite}`radford2019`
# induces summarisation by appending `TL;DR:` to an article and sampling
# 100 tokens with top-k, $k = 2$ (the sampling section below), and
# translation by a context of `english sentence = french sentence` pairs
# followed by `english sentence =` (zero-shot in GPT-2's sense: no
# training for the task). GPT-3 {cite}`brown2020` names the three
# settings by the number of demonstrations in the prompt: zero-shot (an
# instruction only), one-shot, few-shot. No weight changes in any of them.
# The demonstrations below paraphrase GPT-3's Figure 2.1 (which writes
# `=>`).

# %%
def text_prompt(demos: list[tuple[str, str]], query: str, task: str = "",
                sep: str = " = ") -> str:
    """An optional task line, one `x = y` line per demonstration, then `query =`."""
    lines = ([task] if task else []) + [f"{x}{sep}{y}" for x, y in demos]
    return "\n".join(lines + [f"{query}{sep}".rstrip()])


DEMOS = [("sea otter", "loutre de mer"), ("peppermint", "menthe poivrée"),
         ("plush giraffe", "girafe en peluche")]
for name, n in (("zero-shot", 0), ("one-shot", 1), ("few-shot", 3)):
    print(f"--- {name}\n{text_prompt(DEMOS[:n], 'cheese', 'Translate English to French:')}")
print("--- GPT-2 summarisation\n" + "The tiny GPT of this chapter was trained on a CPU ... TL;DR:")

# %% [markdown]
# ### Causal self-attention with a KV cache
#
# At generation time a GPT produces one token per forward pass. Without a
# cache, step $t$ runs the whole prefix of length $t$ through every layer
# again, although the keys and values of positions $< t$ are exactly those
# of the previous step (the causal mask guarantees that position $j$ never
# depends on anything after it). Generating $N$ tokens then costs
# $\sum_t t = O(N^2)$ position-passes, and the attention inside each pass
# is $O(t^2)$ on its own.
#
# The **KV cache** stores each layer's keys and values. A step feeds only
# the new position(s): their queries, keys and values are computed, the new
# keys and values are appended to the cache **along the position axis**
# (dim 2 of `(B, H, S, d_k)`), and the new queries attend to all of them.
# New position $i$ (of $T$ new ones, after $S$ cached) sits at absolute
# position $S + i$, so it may see cached positions $0..S-1$ and new ones
# $\le i$: the causal mask is the $(T, S+T)$ matrix with
# $\text{mask}[i, j] = (j \le S + i)$, the lower triangle shifted right by
# $S$. With $T$ new positions and no cache it is the ordinary causal mask.
#
# The price is memory: per layer, two tensors of $B \cdot H \cdot S \cdot
# d_k = B \cdot S \cdot D$ numbers, $2 L B S D$ in all.

# %% nbgrader={"grade": false, "grade_id": "attend_with_cache", "locked": false, "schema_version": 3, "solution": true}
def attend_with_cache(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      cache: tuple[torch.Tensor, torch.Tensor] | None = None
                      ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """Causal attention of T new positions over S cached ones plus themselves.

    q, k, v: (B, H, T, d) for the new positions; cache: None or (k_cache, v_cache), each
    (B, H, S, d). Returns (out (B, H, T, d), (k_all, v_all)) with k_all = the cached keys
    followed by the new ones along the positions, (B, H, S+T, d) (likewise v_all).
    New position i sees every cached position and the new positions <= i.
    Scores are q . k / sqrt(d).
    """
    ### BEGIN SOLUTION
    if cache is not None:
        k = torch.cat([cache[0], k], dim=2)                            # (B, H, S+T, d)
        v = torch.cat([cache[1], v], dim=2)                            # (B, H, S+T, d)
    T, S_all = q.shape[-2], k.shape[-2]
    S = S_all - T                                                      # cached positions
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])          # (B, H, T, S+T)
    mask = torch.ones(T, S_all, dtype=torch.bool, device=q.device).tril(S)   # (T, S+T)
    weights = scores.masked_fill(~mask, float("-inf")).softmax(-1)     # (B, H, T, S+T)
    return weights @ v, (k, v)                                         # (B, H, T, d)
    ### END SOLUTION


# %%
# Check: attending to 5 positions at once equals 3 first, then 2 more with the cache.
g = torch.Generator().manual_seed(0)
q5, k5, v5 = (torch.randn(2, 4, 5, 8, generator=g) for _ in range(3))
full, (k_all, _) = attend_with_cache(q5, k5, v5)
first, cache = attend_with_cache(q5[:, :, :3], k5[:, :, :3], v5[:, :, :3])
rest, (k_all2, v_all2) = attend_with_cache(q5[:, :, 3:], k5[:, :, 3:], v5[:, :, 3:], cache)
print(k_all2.shape)                                                 # torch.Size([2, 4, 5, 8])
print(torch.allclose(torch.cat([first, rest], 2), full, atol=1e-6))  # True
print(torch.allclose(full, F.scaled_dot_product_attention(q5, k5, v5, is_causal=True),
                     atol=1e-6))                                    # True

# %% [markdown]
# ### The GPT block and the model
#
# Two given helpers split the model width into heads and back (chapter 3's
# `split_heads` and `merge_heads`). The attention module projects $x$ to
# queries, keys and values with `w_q, w_k, w_v`, calls your
# `attend_with_cache`, and projects back with `w_o`. It returns its output
# **and** the updated cache, and so does each block; the model threads one
# cache per layer through the stack and offsets the position embeddings by
# the number of cached positions. There is no dropout anywhere in this
# chapter's model.

# %%
def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """(B, T, D) -> (B, H, T, D/H); head h takes features [h*d_k, (h+1)*d_k)."""
    B, T, D = x.shape
    return x.reshape(B, T, n_heads, D // n_heads).transpose(1, 2)      # (B, H, T, d_k)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, H, T, d_k) -> (B, T, H*d_k), the inverse of split_heads."""
    B, H, T, d_k = x.shape
    return x.transpose(1, 2).reshape(B, T, H * d_k)                    # (B, T, D)


# %% nbgrader={"grade": false, "grade_id": "CausalSelfAttention", "locked": false, "schema_version": 3, "solution": true}
class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention with a KV cache.

    Attributes: `w_q, w_k, w_v, w_o`, each nn.Linear(d_model, d_model) with bias; `n_heads`.
    forward(x (B, T, D), cache=None) -> (out (B, T, D), (k_all, v_all)):
    heads split as in `split_heads`, attention by `attend_with_cache` (cache: None or the
    (k, v) pair of earlier positions, each (B, H, S, d_k)), heads merged, then w_o.
    """

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        ### BEGIN SOLUTION
        self.n_heads = n_heads
        self.w_q = nn.Linear(d_model, d_model)
        self.w_k = nn.Linear(d_model, d_model)
        self.w_v = nn.Linear(d_model, d_model)
        self.w_o = nn.Linear(d_model, d_model)
        ### END SOLUTION

    def forward(self, x: torch.Tensor, cache: tuple[torch.Tensor, torch.Tensor] | None = None
                ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        ### BEGIN SOLUTION
        q = split_heads(self.w_q(x), self.n_heads)                     # (B, H, T, d_k)
        k = split_heads(self.w_k(x), self.n_heads)                     # (B, H, T, d_k)
        v = split_heads(self.w_v(x), self.n_heads)                     # (B, H, T, d_k)
        out, cache = attend_with_cache(q, k, v, cache)                 # (B, H, T, d_k)
        return self.w_o(merge_heads(out)), cache                       # (B, T, D)
        ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "GPTBlock", "locked": false, "schema_version": 3, "solution": true}
class GPTBlock(nn.Module):
    """Pre-norm decoder block (GPT-2's placement), no cross-attention, no dropout.

    Attributes: `ln1`, `ln2` (nn.LayerNorm(d_model)), `attn` (CausalSelfAttention),
    `mlp` = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model)).
    forward(x (B, T, D), cache=None) -> (x (B, T, D), new_cache):
        a, new_cache = attn(ln1(x), cache); x = x + a; x = x + mlp(ln2(x))
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int) -> None:
        super().__init__()
        ### BEGIN SOLUTION
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))
        ### END SOLUTION

    def forward(self, x: torch.Tensor, cache: tuple[torch.Tensor, torch.Tensor] | None = None
                ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        ### BEGIN SOLUTION
        a, cache = self.attn(self.ln1(x), cache)                       # (B, T, D)
        x = x + a
        return x + self.mlp(self.ln2(x)), cache                        # (B, T, D)
        ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "GPT", "locked": false, "schema_version": 3, "solution": true}
class GPT(nn.Module):
    """A decoder-only Transformer language model (pre-norm).

    Attributes: `tok_embed` nn.Embedding(vocab_size, d_model), `pos_embed`
    nn.Embedding(max_len, d_model) (learned positions), `blocks` nn.ModuleList of n_layers
    GPTBlock, `ln_f` nn.LayerNorm(d_model) (the final norm of pre-norm), `head`
    nn.Linear(d_model, vocab_size, bias=False), and the int `max_len`.
    forward(tokens (B, T) long, caches=None) -> (logits (B, T, V), new_caches):
    caches is None or the list of one (k, v) pair per block from an earlier call; the new
    tokens then sit at positions S..S+T-1, S the number of cached positions.
    h = tok_embed(tokens) + pos_embed(positions); each block; ln_f; head.
    """

    def __init__(self, vocab_size: int, d_model: int = 64, n_heads: int = 4, d_ff: int = 256,
                 n_layers: int = 2, max_len: int = 128) -> None:
        super().__init__()
        ### BEGIN SOLUTION
        self.max_len = max_len
        self.tok_embed = nn.Embedding(vocab_size, d_model)
        self.pos_embed = nn.Embedding(max_len, d_model)
        self.blocks = nn.ModuleList([GPTBlock(d_model, n_heads, d_ff) for _ in range(n_layers)])
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        ### END SOLUTION

    def forward(self, tokens: torch.Tensor, caches: list | None = None
                ) -> tuple[torch.Tensor, list]:
        ### BEGIN SOLUTION
        B, T = tokens.shape
        S = 0 if caches is None else caches[0][0].shape[2]
        pos = torch.arange(S, S + T, device=tokens.device)                # (T,)
        h = self.tok_embed(tokens) + self.pos_embed(pos)                  # (B, T, D)
        new_caches = []
        for i, block in enumerate(self.blocks):
            h, c = block(h, None if caches is None else caches[i])        # (B, T, D)
            new_caches.append(c)
        return self.head(self.ln_f(h)), new_caches                        # (B, T, V)
        ### END SOLUTION

    # Given (not an exercise): generation as a method, for convenience.
    def generate(self, prompt: torch.Tensor, max_new_tokens: int, **kwargs) -> torch.Tensor:
        return generate(self, prompt, max_new_tokens, **kwargs)


# %%
_ = torch.manual_seed(0)
tiny = GPT(vocab_size=12, d_model=32, n_heads=4, d_ff=64, n_layers=2, max_len=16).eval()
toks = torch.tensor([[1, 5, 7, 2, 3], [4, 4, 4, 4, 4]])
logits, caches = tiny(toks)
print(logits.shape, len(caches), caches[0][0].shape)
# torch.Size([2, 5, 12]) 2 torch.Size([2, 4, 5, 8])
# the same logits, three positions first and two with the cache:
la, ca = tiny(toks[:, :3])
lb, _ = tiny(toks[:, 3:], ca)
print(torch.allclose(torch.cat([la, lb], 1), logits, atol=1e-5))   # True

# %% [markdown]
# ### Sampling: greedy, temperature, top-k, top-p
#
# The model gives logits $z$ over the vocabulary for the next token. How
# to choose one?
#
# * **Greedy**: $\arg\max_v z_v$. Deterministic, and prone to loops and
#   bland text {cite}`holtzman2020`. Holtzman et al.'s finding concerns
#   every *maximisation* decoder, beam search (chapter 1) included: the
#   most probable text is not the most human-like.
# * **Temperature** $\tau$: sample from $\mathrm{softmax}(z/\tau)$. The
#   division happens **on the logits, before the softmax**: $\tau < 1$
#   sharpens, $\tau > 1$ flattens, $\tau \to 0$ tends to greedy (we define
#   $\tau = 0$ as the argmax). Dividing the *probabilities* by $\tau$ does
#   nothing at all, since sampling renormalises them.
# * **Top-k** {cite}`fan2018hierarchical`: keep the $k$ largest logits, set
#   the rest to $-\infty$. Our convention for ties: every token whose logit
#   equals the $k$-th largest stays (so more than $k$ may stay), as in
#   `logits < topk(logits, k).values[..., -1:]`.
# * **Top-p, nucleus sampling** {cite}`holtzman2020`: sort the probabilities
#   in decreasing order and keep the smallest prefix whose total is
#   $\ge p$. The token that *crosses* the threshold is kept, and the most
#   probable token always stays, even for $p = 0$. Tokens of equal
#   probability are ordered by a stable sort, lower index first, so at a
#   tie on the boundary the lower index stays. A fixed $k$ is too many
#   when the model is sure and too few when it is not; the nucleus keeps
#   fewer tokens when the model is sure (shown below on a trained model).
#
# `filter_logits` applies top-k first, then top-p on what is left
# (renormalised). Everything removed becomes $-\infty$, so a softmax gives it
# probability exactly 0.

# %% nbgrader={"grade": false, "grade_id": "filter_logits", "locked": false, "schema_version": 3, "solution": true}
def filter_logits(logits: torch.Tensor, top_k: int | None = None,
                  top_p: float | None = None) -> torch.Tensor:
    """logits (B, V) -> (B, V): the same values, removed entries set to -inf.

    Top-k first (top_k >= 1, else ValueError): keep the logits >= the k-th largest of the row
    (ties at the k-th value all stay). Then top-p on the remaining distribution
    softmax(kept logits): keep the smallest set of most probable tokens whose total
    probability is >= top_p; the token that crosses top_p is kept, and the most probable token
    always stays (even for top_p <= 0). Equal probabilities are ordered by a stable sort, lower
    index first. None (and top_p >= 1) keep all.
    """
    ### BEGIN SOLUTION
    out = logits
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be >= 1 or None, got {top_k}")
    if top_k is not None and top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[..., -1:]                 # (B, 1)
        out = out.masked_fill(out < kth, float("-inf"))                   # (B, V)
    if top_p is not None and top_p < 1.0:
        probs, order = out.softmax(-1).sort(dim=-1, descending=True, stable=True)  # (B, V)
        before = probs.cumsum(-1) - probs                                 # mass before each
        drop_sorted = before >= top_p                                     # (B, V)
        drop_sorted[..., 0] = False                                       # the top token stays
        drop = drop_sorted.scatter(-1, order, drop_sorted)                # back to vocab order
        out = out.masked_fill(drop, float("-inf"))
    return out
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "sample_next_token", "locked": false, "schema_version": 3, "solution": true}
def sample_next_token(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                      top_p: float | None = None,
                      generator: torch.Generator | None = None) -> torch.Tensor:
    """logits (B, V) -> (B,) long: divide by temperature, filter_logits, sample.

    temperature == 0 is the argmax (greedy). Randomness only from `generator`.
    """
    ### BEGIN SOLUTION
    if temperature == 0:
        return logits.argmax(-1)                                          # (B,)
    probs = filter_logits(logits / temperature, top_k, top_p).softmax(-1)  # (B, V)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)  # (B,)
    ### END SOLUTION


# %%
z = torch.tensor([[2.0, 1.0, 1.0, 0.0, -1.0]])
print(filter_logits(z, top_k=2))     # tensor([[2., 1., 1., -inf, -inf]])   (a tie at the 2nd)
print(z.softmax(-1))                 # tensor([[0.5206, 0.1915, 0.1915, 0.0705, 0.0259]])
print(filter_logits(z, top_p=0.6))   # tensor([[2., 1., -inf, -inf, -inf]])  (0.52 < 0.6: one more)
print(filter_logits(z, top_p=0.5))   # tensor([[2., -inf, -inf, -inf, -inf]])
print(filter_logits(z, top_p=0.0))   # tensor([[2., -inf, -inf, -inf, -inf]])  (the top one stays)
print(sample_next_token(z, temperature=0))   # tensor([0])
gen = torch.Generator().manual_seed(0)
draws = sample_next_token(z.expand(10000, 5), top_k=3, generator=gen)
print(torch.bincount(draws, minlength=5) / 10000)
# about tensor([0.58, 0.21, 0.21, 0.00, 0.00])  (softmax of [2, 1, 1]: 0.576, 0.212, 0.212)

# %% [markdown]
# ### Generation, with and without the cache
#
# In training, the causal mask lets the decoder compute every position of a
# sequence in one pass, all next-token losses at once; at inference the
# next token is not known until it is chosen, so generation goes one step
# at a time. `generate` appends `max_new_tokens` tokens to a prompt. Without the cache
# every step runs the model on all tokens so far and reads the last
# position's logits. With it, the first step runs on the prompt and keeps
# the caches; every later step feeds only the token just chosen. Both
# compute the same logits up to float rounding (the checks use a
# tolerance of about $10^{-6}$), so with the same seed they choose the
# same tokens, unless two logits tie within that rounding: the cells
# below check that the tokens are equal.

# %% nbgrader={"grade": false, "grade_id": "generate", "locked": false, "schema_version": 3, "solution": true}
@torch.no_grad()
def generate(model: GPT, prompt: torch.Tensor, max_new_tokens: int, temperature: float = 1.0,
             top_k: int | None = None, top_p: float | None = None, use_cache: bool = True,
             generator: torch.Generator | None = None) -> torch.Tensor:
    """prompt (B, T0) long -> (B, T0 + max_new_tokens) long, the prompt then the new tokens.

    Each new token is sample_next_token(last position's logits, temperature, top_k, top_p,
    generator). use_cache: run the prompt once, then feed only the newest token with the
    caches model(...) returned; else run model on the whole sequence at every step.
    Requires T0 + max_new_tokens - 1 <= model.max_len (the last token is never fed back).
    """
    ### BEGIN SOLUTION
    tokens, caches, step_input = prompt, None, prompt
    for _ in range(max_new_tokens):
        if use_cache:
            logits, caches = model(step_input, caches)                   # (B, t, V)
        else:
            logits, _ = model(tokens)                                    # (B, T, V)
        nxt = sample_next_token(logits[:, -1], temperature, top_k, top_p, generator)  # (B,)
        step_input = nxt[:, None]                                        # (B, 1)
        tokens = torch.cat([tokens, step_input], dim=1)                  # (B, T+1)
    return tokens
    ### END SOLUTION


# %%
prompt = torch.tensor([[1, 2, 3]])
a = generate(tiny, prompt, 8, temperature=0, use_cache=False)
b = generate(tiny, prompt, 8, temperature=0, use_cache=True)
print(a.shape, torch.equal(a, b))                 # torch.Size([1, 11]) True
sa = generate(tiny, prompt, 8, generator=torch.Generator().manual_seed(1), use_cache=False)
sb = generate(tiny, prompt, 8, generator=torch.Generator().manual_seed(1), use_cache=True)
print(torch.equal(sa, sb))                        # True

# %% [markdown]
# ## Check
#
# The cached and uncached paths agree above, and the model's logits at a
# position do not depend on later tokens (the causal mask). One more check
# against PyTorch's fused kernel, the fast path: our attention module equals
# the same projections run through
# `F.scaled_dot_product_attention(..., is_causal=True)`.

# %%
attn = tiny.blocks[0].attn
x = torch.randn(2, 6, 32, generator=torch.Generator().manual_seed(3))
q, k, v = (split_heads(w(x), 4) for w in (attn.w_q, attn.w_k, attn.w_v))
fast = attn.w_o(merge_heads(F.scaled_dot_product_attention(q, k, v, is_causal=True)))
print(torch.allclose(attn(x)[0], fast, atol=1e-5))                            # True
l1, _ = tiny(torch.tensor([[1, 5, 7, 2, 3]]))
l2, _ = tiny(torch.tensor([[1, 5, 7, 9, 9]]))
print(torch.allclose(l1[:, :3], l2[:, :3], atol=1e-6))                       # True: causal

# %% [markdown]
# ### Your GPT is GPT-2
#
# Your `GPT` is GPT-2's architecture. `attnkit.pretrained.load_gpt2`
# copies a GPT-2's weights into it: it transposes GPT-2's `Conv1D`
# weights, splits its fused query-key-value projection into `w_q, w_k,
# w_v`, ties the head to the token embedding and sets your `mlp[1]` to the
# tanh GELU that GPT-2 uses (a forward that calls `F.gelu` itself gets it
# inside `gelu_approximation("tanh")`, as below). The next cell builds a small GPT-2 with
# Hugging Face `transformers` (2 layers, width 64, 4 heads, random
# weights moved off their initial values by noise, nothing downloaded),
# copies it into your class and compares the logits on the same tokens. `transformers` is a test dependency of
# the course (`requirements-ci.txt`); where it is not installed, the cell
# says so and glues nothing but `nan`.

# %% tags=["skip-grading", "hide-input"]
try:
    import transformers
except ImportError:
    transformers = None
if transformers is None:
    glue("ch05_gpt2_diff", float("nan"))
    print("Skipped: transformers is not installed (pip install transformers==5.24.0).")
else:
    from attnkit.pretrained import gelu_approximation, load_gpt2, max_logit_difference
    torch.manual_seed(0)
    hf_tiny = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=100, n_positions=32, n_embd=64, n_layer=2, n_head=4, bos_token_id=0,
        eos_token_id=0)).eval()
    with torch.no_grad():                    # move every weight off its init (gains, biases too)
        for p in hf_tiny.parameters():
            p.add_(0.2 * torch.randn(p.shape))
    mine_tiny = load_gpt2(GPT, hf_tiny)                      # your class, at the same sizes
    ids = torch.randint(0, 100, (2, 32), generator=torch.Generator().manual_seed(0))
    with torch.no_grad(), gelu_approximation("tanh"):   # also for a forward calling F.gelu itself
        tiny_diff = max_logit_difference(mine_tiny(ids)[0], hf_tiny(ids).logits)
    glue("ch05_gpt2_diff", tiny_diff)
    print(f"transformers {transformers.__version__}: largest logit difference {tiny_diff:.1e} "
          f"over {ids.numel()} positions x 100 tokens")

# %% [markdown]
# In this run the largest difference between the two models' logits is
# {glue:text}`ch05_gpt2_diff:.1e`: float32 rounding, the same function.
#
# ### Optional: GPT-2 small in your own class
#
# The same loader takes GPT-2 small's trained weights (124M parameters,
# about 550 MB to download). The cell below then compares your model's
# logits with `transformers`' and lets your model write. It needs the
# internet, so it runs only when you set `FETCH = True` or the environment
# variable `ATTNKIT_FETCH_WEIGHTS=1`; the course itself never downloads
# anything, so on the book's page it is skipped and says so.

# %% tags=["skip-grading"]
import os

FETCH = os.environ.get("ATTNKIT_FETCH_WEIGHTS") == "1"
hf_gpt2 = None
if FETCH:
    try:
        from transformers import AutoTokenizer, GPT2LMHeadModel
        hf_gpt2 = GPT2LMHeadModel.from_pretrained("gpt2").eval()
        gpt2_tok = AutoTokenizer.from_pretrained("gpt2")
    except (ImportError, OSError) as e:            # no transformers, or no internet
        print(f"Skipped: GPT-2 small could not be loaded ({type(e).__name__}: {str(e)[:120]}).")
if hf_gpt2 is not None:
    from attnkit.pretrained import load_gpt2, max_logit_difference
    gpt2 = load_gpt2(GPT, hf_gpt2)                    # your class, at GPT-2 small's sizes
    gpt2_ids = torch.tensor([gpt2_tok.encode("The attention mechanism lets a model")])
    with torch.no_grad():
        gpt2_diff = max_logit_difference(gpt2(gpt2_ids)[0], hf_gpt2(gpt2_ids).logits)
    print(f"largest logit difference from transformers: {gpt2_diff:.1e}")  # float32 rounding only
    print(gpt2_tok.decode(generate(gpt2, gpt2_ids, 30, temperature=0)[0]))  # greedy
elif not FETCH:
    print("Skipped: set FETCH = True (or ATTNKIT_FETCH_WEIGHTS=1) to load GPT-2 small "
          "into your GPT.")

# %% [markdown]
# ## Experiment
#
# ### In-context learning and induction heads
#
# GPT-3's headline is that a model trained only to predict the next token
# learns to *learn from its prompt*: shown a few demonstrations of a task,
# it does the task better, with no gradient update. Olsson et al.
# {cite}`olsson2022` argue that one mechanism may account for much of this
# ability, the **induction head** (described first by Elhage et al.
# {cite}`elhage2021`), and showed by ablation, in small attention-only
# Transformers, that it does the work there. It takes two heads in two layers. A *previous-token head*
# in an early layer writes into each position which token came before it.
# An *induction head* in a later layer then looks, from the current token
# `x`, for the earlier positions whose previous token was `x`, and copies
# what it finds there: after `... x y ... x`, it predicts `y`. Olsson et al. found that such
# heads form abruptly during training (a *phase change*), that in-context
# learning appears at the same moment, and that one layer is not enough: a
# single layer's keys see only the token and the position, not the token
# before, so no head can match "the position after an earlier `x`" (Elhage
# et al.'s argument: matching on the previous token needs a head of an
# earlier layer to write it there).
#
# The experiment below studies the narrowest form of in-context learning:
# **retrieval**. Each prompt pairs letters with labels under a mapping
# drawn afresh, and the answer to the query is a label the prompt already
# pairs with the query letter: copying it is the whole task. The model is
# trained on this very task, half of every batch. That is not GPT-3's
# few-shot learning. GPT-3's `cheese =` cannot be answered by copying
# anything from its prompt, and Olsson et al. only argue that induction
# heads, including "fuzzy" ones that match and copy by meaning in large
# models, may underlie it. What the experiment shows is how a circuit that
# retrieves from the context forms and works, in the setting of Chan et
# al. {cite}`chan2022data` (which properties of the training data make
# in-context learning emerge), Reddy {cite}`reddy2024mechanistic` (an
# abrupt induction head in a 2-layer attention-only network on labelled
# few-shot sequences) and Singh et al. {cite}`singh2024needs` (several
# induction heads that add up, fed by previous-token heads).
#
# This section trains such a model on a CPU, in about
# {glue:text}`ch05_cpu_both:.0f` s of CPU for it and its control, and finds
# the heads: the accuracy rising with the number of demonstrations, the phase
# change in the training curve, the heads, and what zeroing them does.
#
# ### Measuring an induction head
#
# How would we know an induction head had formed? Olsson et al. measure
# each head's *prefix-matching score*: on a sequence with repeated tokens,
# the attention a token pays to the position right *after* its earlier
# occurrences. An induction head puts most of its weight there; a head
# that attends to the earlier occurrence itself (a duplicate-token head)
# scores 0. You write it; the experiment below uses it on every head of
# the trained model.

# %% nbgrader={"grade": false, "grade_id": "prefix_matching_score", "locked": false, "schema_version": 3, "solution": true}
def prefix_matching_score(attn: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Per-head prefix-matching score, (H,).

    attn: (B, H, T, T) causal attention weights, attn[b, h, i, j] from query i to key j;
    tokens: (B, T) the token ids. A query position i *repeats* if tokens[b, j] == tokens[b, i]
    for some earlier j < i. Its score is the attention from i to the positions j + 1 right after
    all such earlier occurrences j (summed over them). The result is, per head, the mean of that
    score over every repeating position of every sequence (0 if no position repeats).
    """
    ### BEGIN SOLUTION
    B, H, T, _ = attn.shape
    same = tokens[:, :, None] == tokens[:, None, :]                       # (B, T, T) [i, j]
    earlier = same & torch.ones(T, T, dtype=torch.bool, device=tokens.device).tril(-1)
    after = torch.zeros_like(earlier)                                     # [i, j + 1]
    after[:, :, 1:] = earlier[:, :, :-1]
    repeats = earlier.any(-1)                                             # (B, T)
    mass = (attn * after[:, None]).sum(-1)                                # (B, H, T)
    return (mass * repeats[:, None]).sum((0, 2)) / repeats.sum().clamp(min=1)   # (H,)
    ### END SOLUTION


# %%
# Check on hand-made weights: head 0 attends to the token after the earlier occurrence,
# head 1 to the earlier occurrence itself. tokens 5 6 5: position 2 repeats position 0.
toy = torch.zeros(1, 2, 3, 3)
toy[0, :, 0, 0] = 1
toy[0, :, 1, 1] = 1
toy[0, 0, 2, 1] = 1                   # 5 at position 2 -> position 1, after the first 5
toy[0, 1, 2, 0] = 1                   # -> position 0, the first 5 itself
print(prefix_matching_score(toy, torch.tensor([[5, 6, 5]])))   # tensor([1., 0.])



# %% [markdown]
# ### The task, and why it needs help
#
# Each sequence has its own secret function $f$, which maps the 8 letters
# `a..h` onto 8 of 16 separate label tokens `A..P` (injective, a fresh one
# per sequence), and shows 16 demonstrations of it, written `x y x y ...`:
#
# ```
# c K a D h B a D f N ...
# ```
#
# The loss is on every label. A label can only be predicted from the
# context: the first time a letter appears, its label is any of the labels
# not yet used; every later time, it is the label that followed that
# letter before. A test prompt is $n$ demonstrations of a new $f$ followed
# by a query letter; the prediction is the most probable of the 16 labels
# (chance: $1/16$). The reference is an **ideal copier**: it answers from
# the demonstrations when the query's letter was shown, and otherwise
# guesses uniformly among the labels not yet used.
#
# **Why the few-shot task alone stalls.** The chapter's first version of
# this task mapped the 8 letters onto themselves (a bijection of the same 8
# letters). Then no single feature of the context helps: which letters were
# shown as answers, or whether the query letter was shown, each leave every
# letter at probability 1/8; only their combination, or full copying,
# pays, so the first step needs two pieces at once, each useless alone,
# and in that version's runs gradient descent did not find it. With 16 labels, one single feature
# does help: a label already shown is likelier than one not shown, so a
# model that only *counts* which labels its context holds beats chance.
# Counting alone gives exactly 1/8 from one shot on: when $m$ labels were
# shown, the query's letter was among the shown ones with probability
# $m/8$, and then its label is one of the $m$, so each shown label has
# probability $1/8$. That step is easy, and a model takes it; beyond it,
# partial copying pays a little, and full copying needs the two heads above
# at once, in two layers. In design runs not repeated on this page, the
# same attention-only model trained on
# this task alone stayed at counting or partial copying (8-shot accuracy at
# most 0.25, twice the counting level of this 16-label task) for up to
# 1,500 steps, with learning rates $3\cdot10^{-3}$ and $10^{-2}$, 1, 2 or 4 heads and two
# vocabularies; the chapter's earlier GPT with MLP blocks, on the task
# alone, began to copy after about 1,000 steps and reached 0.44 at 8 shots
# by 2,000 (design runs), too long for this page. Exercise 1 asks you to see it.
#
# **What the repeats are for.** Olsson et al. trained on text, where
# repeated phrases are common. We give the model the same kind of help:
# half of every batch is **random tokens in which a segment of random
# length (3 to 16) at a random place is written twice in a row**, with the
# loss on the second copy (from its second token). There, nothing but
# copying predicts anything: a random token has loss $\ln 24$, and a model
# that copies predicts every token of the second copy, so copying pays at
# every position of the copy and there is no counting shortcut. The
# random length and place matter: in an earlier run (not repeated on this
# page) with a whole half repeated at a fixed offset, the model learned to
# copy from a fixed distance back, a positional copy, and nothing carried
# over to the few-shot task.
# The other half of every batch is the few-shot task, whose format the
# model must also learn; the two losses are averaged.

# %%
LETTERS = "abcdefgh"
LABELS = "ABCDEFGHIJKLMNOP"
K, N_LABELS = len(LETTERS), len(LABELS)
VOCAB = list(LETTERS) + list(LABELS)          # ids 0-7 the letters, 8-23 the labels
N_PAIRS = 16                                  # demonstrations per training sequence: 32 tokens


def icl_batch(n: int, n_pairs: int = N_PAIRS, gen: torch.Generator | None = None) -> torch.Tensor:
    """(n, 2 n_pairs) few-shot sequences `x1 y1 x2 y2 ...`: each sequence has its own injective
    f from the K letters onto K of the N_LABELS labels; the x's are uniform letters, y = f(x)."""
    f = K + torch.argsort(torch.rand(n, N_LABELS, generator=gen), -1)[:, :K]       # (n, K)
    xs = torch.randint(0, K, (n, n_pairs), generator=gen)                          # (n, P)
    return torch.stack([xs, f.gather(1, xs)], -1).reshape(n, 2 * n_pairs)          # (n, 2P)


def repeat_batch(n: int, length: int = 2 * N_PAIRS, gen: torch.Generator | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """(n, length) random tokens in which a segment of random length 3..length/2 at a random
    place is written twice in a row, and the targets (n, length - 1) for next-token prediction:
    the tokens of the second copy from its second token on, -100 (ignored) elsewhere."""
    seg = torch.randint(3, length // 2 + 1, (n, 1), generator=gen)                  # (n, 1)
    start = (torch.rand(n, 1, generator=gen) * (length - 2 * seg + 1)).long()       # (n, 1)
    idx = torch.arange(length)[None]                                                # (1, T)
    second = (idx >= start + seg) & (idx < start + 2 * seg)                         # (n, T)
    seq = torch.randint(0, len(VOCAB), (n, length), generator=gen)
    seq = seq.gather(1, torch.where(second, idx - seg, idx))                        # the copy
    target = seq[:, 1:].masked_fill(~(second & (idx > start + seg))[:, 1:], -100)  # (n, T-1)
    return seq, target


def show(seq: torch.Tensor) -> str:
    return " ".join(VOCAB[i] for i in seq.tolist())


print(show(icl_batch(1, gen=torch.Generator().manual_seed(0))[0]))
rep, _ = repeat_batch(1, gen=torch.Generator().manual_seed(0))
print(show(rep[0]))


# %%
def gpt_init_(model: nn.Module, std: float = 0.02) -> nn.Module:
    """GPT-1's N(0, 0.02^2) initialisation (without GPT-2's 1/sqrt(N) residual scaling), for any
    implementation: every nn.Linear and nn.Embedding weight from N(0, std^2), biases 0,
    every nn.LayerNorm at weight 1 and bias 0."""
    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=std)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)
        if isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
    return model


# %% [markdown]
# ### The experiment
#
# **The model** is attention-only, as in Olsson et al.'s small models: a GPT
# whose blocks keep only `x + attn(ln1(x))`, your `CausalSelfAttention`
# with no MLP, then the final LayerNorm and the head (untied from the
# embedding), learned positions, $d = 64$, 4 heads, 2 layers, and the same
# with 1 layer as the **control**. Every weight is drawn from
# $\mathcal N(0, 0.02^2)$ by the given `gpt_init_` (GPT-1's
# initialisation, biases 0, LayerNorms at 1 and 0). AdamW, learning rate
# $3\cdot10^{-3}$, weight decay 0.01 on all parameters (GPT-1 exempted
# biases and gains; we do not), a 100-step linear
# warm-up, the gradient norm clipped at 1.0 (`train`'s default), batches of
# 64 (32 repeated-token sequences and 32 few-shot sequences), 500 steps. The
# seed sets the initial weights (`torch.manual_seed(seed)` before each
# model) and the batches (a generator seeded with `seed + 1000`); the
# held-out sequences are the same in every run. The thread count is the
# number of CPU threads PyTorch uses.
#
# **What it measures.** Every 25 steps, on 256 held-out few-shot sequences,
# the loss on each of the 16 labels, and Olsson et al.'s **in-context
# learning score**, adapted to this task (theirs is the loss at token 500
# minus the loss at token 50 of natural text): the loss on the 16th label
# minus the loss on the 2nd
# (negative when the context helps). The **switch step** is the first
# evaluation at which that score reaches half its final value. After
# training: the accuracy at 0, 1, 2, 4 and 8 shots on 2000 fresh prompts
# each; per head, on 256 sequences of 16 random tokens written twice, the
# prefix-matching score (your `prefix_matching_score`) and the
# previous-token score (the mean attention to the position just before);
# per head, a **copying score**: the eigenvalues $\lambda$ of the head's
# path from a token's embedding, through its values and output, to the
# logits ($W_E W_V^h W_O^h W_U$, LayerNorms reduced to their gains),
# $\sum_i \lambda_i / \sum_i |\lambda_i|$, near 1 for a head that raises
# the logit of the token it attends to (Elhage et al.'s measure, which
# Olsson et al. use); and the 8-shot accuracy with heads zeroed (their output, before `w_o`, set to 0):
# each head alone, all layer-2 heads with a prefix-matching score above 0.5
# together, layer 1's previous-token head (its highest previous-token
# score), and another layer-1 head (its lowest).
#
# **Seeds and threads.** The cell below holds the whole experiment as one
# function, `icl(seed, threads)`. This page runs it once, with seed 0 and
# one thread. The claims check of the course (`python -m course claims
# 05`) runs it for seeds 0 to 4, with one and two threads, with this
# solution and with another correct one written differently, and checks
# every claim below on each of these 20 runs. The page's run is the
# check's run of seed 0 with one thread.

# %% tags=["skip-grading", "hide-input"]
import contextlib
import time

from attnkit.claims import experiment
from attnkit.train import TrainConfig, train

SHOTS = [0, 1, 2, 4, 8]
D_MODEL, N_HEADS, STEPS, WARMUP, LR, BATCH, EVAL_EVERY = 64, 4, 500, 100, 3e-3, 64, 25


class AttnOnlyBlock(nn.Module):
    """GPTBlock without the MLP: x + attn(norm(x)). Keeps norm(x) to recompute the weights."""

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads, self.seen = n_heads, None
        self.norm = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads)             # your class

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen = self.norm(x)
        return x + self.attn(self.seen)[0]

    def weights(self) -> torch.Tensor:
        """(B, H, T, T) causal attention weights of the last forward, from w_q and w_k."""
        q, k = (split_heads(w(self.seen), self.n_heads) for w in (self.attn.w_q, self.attn.w_k))
        T = q.shape[2]
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        return scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), -math.inf).softmax(-1)


class AttnOnlyGPT(nn.Module):
    """Token and learned position embeddings, n_layers AttnOnlyBlock, then the unembedding:
    the final LayerNorm and the head."""

    def __init__(self, vocab_size: int, n_layers: int, d_model: int = D_MODEL,
                 n_heads: int = N_HEADS, max_len: int = 2 * N_PAIRS) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.embed = nn.ModuleDict({"token": nn.Embedding(vocab_size, d_model),
                                    "position": nn.Embedding(max_len, d_model)})
        self.blocks = nn.ModuleList(AttnOnlyBlock(d_model, n_heads) for _ in range(n_layers))
        self.unembed = nn.Sequential(nn.LayerNorm(d_model),
                                     nn.Linear(d_model, vocab_size, bias=False))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed["token"](tokens) + self.embed["position"].weight[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.unembed(x)                                          # (B, T, V)


@contextlib.contextmanager
def zeroed(model: AttnOnlyGPT, heads: list[tuple[int, int]]):
    """Inside the block, the (layer, head) pairs' outputs are 0: their columns of w_o."""
    saved = []
    with torch.no_grad():
        for layer, h in heads:
            w = model.blocks[layer].attn.w_o.weight                     # (D, D)
            cols = slice(h * w.shape[1] // model.n_heads, (h + 1) * w.shape[1] // model.n_heads)
            saved.append((w, cols, w[:, cols].clone()))
            w[:, cols] = 0
    try:
        yield
    finally:
        with torch.no_grad():
            for w, cols, old in saved:
                w[:, cols] = old


@torch.no_grad()
def shot_accuracy(model: nn.Module, n_shots: int, n: int = 2000,
                  seed: int = 7) -> tuple[float, float]:
    """(model accuracy, ideal copier's expected accuracy) on these n prompts: n_shots pairs of a
    new f, then a query letter; the prediction is the most probable label. Both are means over
    the same fixed prompts, not the analytic expectation."""
    seq = icl_batch(n, n_shots + 1, gen=torch.Generator().manual_seed(seed + n_shots))
    pred = model(seq[:, :-1])[:, -1, K:].argmax(-1) + K                   # (n,)
    xs, ys, query = seq[:, 0:-2:2], seq[:, 1:-2:2], seq[:, -2]
    seen = (xs == query[:, None]).any(1)                                  # (n,)
    used = torch.tensor([len(set(r.tolist())) for r in ys])               # distinct labels shown
    copier = torch.where(seen, 1.0, 1.0 / (N_LABELS - used))
    return (pred == seq[:, -1]).float().mean().item(), copier.mean().item()


@torch.no_grad()
def pair_losses(model: nn.Module, seqs: torch.Tensor) -> torch.Tensor:
    """(P,) the mean loss on each pair's label, over the sequences (B, 2P)."""
    logits = model(seqs[:, :-1])[:, 0::2]                                 # at each letter
    return F.cross_entropy(logits.transpose(1, 2), seqs[:, 1::2], reduction="none").mean(0)


def mixed_loss(model: nn.Module, gen: torch.Generator) -> torch.Tensor:
    """Half a batch of repeated random tokens, half of the few-shot task; losses averaged."""
    rep, target = repeat_batch(BATCH // 2, gen=gen)
    loss_rep = F.cross_entropy(model(rep[:, :-1]).flatten(0, 1), target.flatten())
    seq = icl_batch(BATCH - BATCH // 2, gen=gen)
    loss_fs = F.cross_entropy(model(seq[:, :-1])[:, 0::2].flatten(0, 1), seq[:, 1::2].flatten())
    return 0.5 * (loss_rep + loss_fs)


@torch.no_grad()
def copying_score(model: AttnOnlyGPT, layer: int, h: int) -> float:
    """sum(eigenvalues) / sum(|eigenvalues|) of the head's token -> logit path."""
    block = model.blocks[layer]
    emb, (norm_f, head) = model.embed["token"].weight, model.unembed               # (V, D)
    cols = slice(h * emb.shape[1] // model.n_heads, (h + 1) * emb.shape[1] // model.n_heads)
    ov = (emb * block.norm.weight) @ block.attn.w_v.weight[cols].T                  # (V, d_k)
    path = (ov @ block.attn.w_o.weight[:, cols].T * norm_f.weight) @ head.weight.T  # (V, V)
    ev = torch.linalg.eigvals(path)                                        # (V,) complex
    return (ev.sum().real / ev.abs().sum()).item()


@torch.no_grad()
def head_scores(model: AttnOnlyGPT, seqs: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer: (prefix-matching (H,), previous-token (H,)) on seqs, and the weights kept."""
    model(seqs)
    out = []
    for block in model.blocks:
        w = block.weights()                                                # (B, H, T, T)
        out.append((prefix_matching_score(w, seqs), w.diagonal(-1, -2, -1).mean((0, 2))))
    return out


@experiment("05_gpt")
def icl(seed: int = 0, threads: int = 1) -> dict:
    """Train the 2-layer attention-only model and the 1-layer control on the mix; measure the
    few-shot accuracy, the ICL score along training, the heads and the ablations."""
    torch.set_num_threads(threads)
    attnkit.seed_everything(seed)
    held_out = icl_batch(256, gen=torch.Generator().manual_seed(99))            # (256, 32)
    repeats = torch.randint(0, len(VOCAB), (256, N_PAIRS),
                            generator=torch.Generator().manual_seed(98)).repeat(1, 2)  # (256, 32)
    out, runs = {"ch05_steps": STEPS, "ch05_chance": 1 / N_LABELS}, {}
    for n_layers in (2, 1):
        tag = "" if n_layers == 2 else "_1l"
        torch.manual_seed(seed)
        model = gpt_init_(AttnOnlyGPT(len(VOCAB), n_layers))
        gen = torch.Generator().manual_seed(seed + 1000)
        opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.01)
        curve = []                                                         # (step, ICL score)

        def loss_fn(step: int) -> torch.Tensor:
            if step % EVAL_EVERY == 0:                                     # after `step` updates
                pl = pair_losses(model, held_out)
                curve.append((step, (pl[-1] - pl[1]).item()))
            return mixed_loss(model, gen)

        start = time.process_time()
        losses = train(model, loss_fn, TrainConfig(steps=STEPS, clip=1.0, desc=f"{n_layers} layer"),
                       optimizer=opt, schedule=lambda s: LR * min(1.0, s / WARMUP))
        out[f"ch05_cpu{tag}"] = time.process_time() - start
        pl = pair_losses(model, held_out)
        curve.append((STEPS, (pl[-1] - pl[1]).item()))
        runs[n_layers] = {"model": model, "losses": losses, "curve": curve, "pair_loss": pl}
        for n in SHOTS:
            out[f"ch05_acc{tag}_{n}shot"], out[f"ch05_ideal_{n}shot"] = shot_accuracy(model, n)
        out[f"ch05_icl_score{tag}"] = curve[-1][1]
        out[f"ch05_loss_pair2{tag}"], out[f"ch05_loss_pair16{tag}"] = pl[1].item(), pl[-1].item()
        out[f"ch05_max_prefix{tag}"] = max(p.max().item() for p, _ in head_scores(model, repeats))
    final = out["ch05_icl_score"]
    out["ch05_switch_step"] = next((s for s, sc in runs[2]["curve"] if sc <= final / 2), -1) \
        if final < -0.3 else -1
    out["ch05_copier_gap"] = max(abs(out[f"ch05_acc_{n}shot"] - out[f"ch05_ideal_{n}shot"])
                                 for n in SHOTS)
    model = runs[2]["model"]
    scores = head_scores(model, repeats)
    for layer, (prefix, prev) in enumerate(scores):
        for h in range(N_HEADS):
            name = f"l{layer + 1}h{h}"
            out[f"ch05_prefix_{name}"], out[f"ch05_prev_{name}"] = prefix[h].item(), prev[h].item()
            out[f"ch05_copy_{name}"] = copying_score(model, layer, h)
            with zeroed(model, [(layer, h)]):
                out[f"ch05_abl_{name}"] = shot_accuracy(model, 8)[0]
    induction = [h for h in range(N_HEADS) if scores[1][0][h] > 0.5]
    prev_head, other_head = int(scores[0][1].argmax()), int(scores[0][1].argmin())
    with zeroed(model, [(1, h) for h in induction]):
        out["ch05_abl_induction"] = shot_accuracy(model, 8)[0]
    out["ch05_n_induction"] = len(induction)
    out["ch05_prev_head"], out["ch05_other_head"] = prev_head, other_head
    out["ch05_prev_score"] = scores[0][1][prev_head].item()
    out["ch05_abl_prev"] = out[f"ch05_abl_l1h{prev_head}"]
    out["ch05_abl_other"] = out[f"ch05_abl_l1h{other_head}"]
    out["ch05_abl_single_min"] = min((out[f"ch05_abl_l2h{h}"] for h in induction), default=-1.0)
    out["ch05_min_copy_induction"] = min((out[f"ch05_copy_l2h{h}"] for h in induction),
                                         default=-1.0)
    return out | {"runs": runs, "repeats": repeats, "induction": induction}


# %% tags=["skip-grading", "hide-input"]
from attnkit.claims import load_record, record_runs, spread

out = icl(seed=0, threads=1)                       # the page's run: seed 0, one thread
runs = out["runs"]
# the claims check's run of the same seed and thread count (a student's copy has no record)
_checked = next((r["figures"] for r in record_runs(load_record("05_gpt"))
                 if (r["implementation"], r["seed"], r["threads"]) == ("reference", 0, 1)), None)
if _checked is not None:
    _same = all(out[k] == v for k, v in _checked.items() if "cpu" not in k)
    print(f"the claims check's run of seed 0 with one thread, CPU times aside: "
          f"{'the same, bit for bit' if _same else 'different'}")
icl_model = runs[2]["model"]
print(f"training CPU time: 2 layers {out['ch05_cpu']:.1f} s, 1 layer {out['ch05_cpu_1l']:.1f} s "
      f"(evaluations every {EVAL_EVERY} steps included)")
for n in SHOTS:
    print(f"{n} shots: 2 layers {out[f'ch05_acc_{n}shot']:.3f}   1 layer "
          f"{out[f'ch05_acc_1l_{n}shot']:.3f}   ideal copier {out[f'ch05_ideal_{n}shot']:.3f}")
print(f"ICL score: 2 layers {out['ch05_icl_score']:.2f}, 1 layer {out['ch05_icl_score_1l']:.2f}; "
      f"switch at step {out['ch05_switch_step']}")
glue("ch05_acc1_minus_control", out["ch05_acc_8shot"] - out["ch05_acc_1l_8shot"])
glue("ch05_cpu_both", out["ch05_cpu"] + out["ch05_cpu_1l"])
# the switch's width: the steps from 20% to 80% of the final score
_final = runs[2]["curve"][-1][1]
_s20 = next(s for s, sc in runs[2]["curve"] if sc <= 0.2 * _final)
_s80 = next(s for s, sc in runs[2]["curve"] if sc <= 0.8 * _final)
glue("ch05_switch_width", _s80 - _s20)
_ = glue("ch05_prev_others", max(out[f"ch05_prev_l1h{h}"] for h in range(N_HEADS)
                                 if h != out["ch05_prev_head"]))

# %% tags=["skip-grading", "hide-input"]
import matplotlib.pyplot as plt

fig, axes = plt.subplots(1, 3, figsize=(15, 3.6))
ax = axes[0]
ax.plot(SHOTS, [out[f"ch05_acc_{n}shot"] for n in SHOTS], "o-", label="2 layers")
ax.plot(SHOTS, [out[f"ch05_acc_1l_{n}shot"] for n in SHOTS], "s-", label="1 layer (control)")
ax.plot(SHOTS, [out[f"ch05_ideal_{n}shot"] for n in SHOTS], "k--", label="ideal copier")
ax.axhline(1 / N_LABELS, color="gray", lw=0.8, label="chance 1/16")
ax.set(xlabel="shots in the prompt", ylabel="accuracy on the query",
       title="in-context retrieval under a fresh f")
ax.legend(fontsize=8)
ax = axes[1]
for n_layers, style in ((2, "-"), (1, "--")):
    steps, score = zip(*runs[n_layers]["curve"])
    ax.plot(steps, score, style, marker=".",
            label=f"ICL score, {n_layers} layer{'s' * (n_layers > 1)}")
smooth = torch.tensor(runs[2]["losses"]).unfold(0, 10, 1).mean(1)
ax.plot(range(10, STEPS + 1), smooth, lw=0.8, alpha=0.7,
        label="training loss, 2 layers (mean of 10)")
ax.axvline(out["ch05_switch_step"], color="red", lw=0.8)
ax.annotate(f"switch: step {out['ch05_switch_step']}", xy=(out["ch05_switch_step"], 0.5),
            xytext=(out["ch05_switch_step"] + 20, 1.5), color="red", fontsize=8)
ax.axhline(0, color="gray", lw=0.5)
ax.set(xlabel="step", ylabel="nats", title="training: the phase change")
ax.legend(fontsize=7, loc="lower left")
ax = axes[2]
pairs = range(1, N_PAIRS + 1)
ax.plot(pairs, runs[2]["pair_loss"], "o-", label="2 layers")
ax.plot(pairs, runs[1]["pair_loss"], "s-", label="1 layer")
ax.set(xlabel="pair in the context", ylabel="loss on its label (held out)",
       title="loss along the context")
ax.legend(fontsize=8)
plt.tight_layout()
plt.show()

# %% [markdown]
# **In-context learning appears.** In this run (seed 0, one thread) the
# 2-layer model answers a query with no demonstration at
# {glue:text}`ch05_acc_0shot:.3f` (chance: {glue:text}`ch05_chance:.4f`),
# with one {glue:text}`ch05_acc_1shot:.3f`, with two
# {glue:text}`ch05_acc_2shot:.3f`, with four {glue:text}`ch05_acc_4shot:.3f`
# and with eight {glue:text}`ch05_acc_8shot:.3f`, where the ideal copier
# reaches {glue:text}`ch05_ideal_8shot:.3f`; at no number of shots is it
# more than {glue:text}`ch05_copier_gap:.3f` from the copier. The model has
# learned to read its prompt, and copies nearly as well as copying can.

# %% tags=["skip-grading", "hide-input"]
from attnkit.claims import claim

claim("few_shot_rises", "The 2-layer model's accuracy rises with every added demonstration: "
      "8 shots > 4 > 2 > 1 > 0.",
      lambda g: g["ch05_acc_8shot"] > g["ch05_acc_4shot"] > g["ch05_acc_2shot"]
      > g["ch05_acc_1shot"] > g["ch05_acc_0shot"])
claim("eight_shot_far_above_chance", "At 8 shots the 2-layer model is right more than half the "
      "time, over 8 times chance (1/16).",
      lambda g: g["ch05_acc_8shot"] > 0.5)
claim("close_to_copier", "At every number of shots the 2-layer model is within 0.06 of the ideal "
      "copier.",
      lambda g: g["ch05_copier_gap"] <= 0.06)

# %% [markdown]
# **The 1-layer control does not.** Trained the same way, the 1-layer
# model reaches {glue:text}`ch05_acc_1l_8shot:.3f` at 8 shots,
# {glue:text}`ch05_acc1_minus_control:.2f` below the 2-layer model. It is
# above chance (1/16) and below 0.3 in every run. One layer can count: a
# label already shown is likelier than one not shown, and a head that
# attends to the labels of the context and raises their logits gets the
# counting level of 1/8. On some seeds it also copies a little and reaches
# about 0.2 at 8 shots. What one layer cannot do is match "the position
# after an earlier copy of the query letter", so it never comes near the
# 2-layer model. Along the context (right panel) the
# 2-layer model's loss on a label falls from
# {glue:text}`ch05_loss_pair2:.2f` nats at the 2nd pair to
# {glue:text}`ch05_loss_pair16:.2f` at the 16th, an in-context learning
# score of {glue:text}`ch05_icl_score:.2f`; the 1-layer model's score is
# {glue:text}`ch05_icl_score_1l:.2f`.

# %% tags=["skip-grading", "hide-input"]
from attnkit.claims import claim

claim("beats_one_layer", "At 8 shots the 2-layer model beats the 1-layer control by more than "
      "0.3.",
      lambda g: g["ch05_acc_8shot"] - g["ch05_acc_1l_8shot"] > 0.3)
claim("one_layer_counts", "At 8 shots the 1-layer control is above chance (1/16) and below 0.3.",
      lambda g: 1 / 16 < g["ch05_acc_1l_8shot"] < 0.3)
claim("one_layer_no_icl_score", "The 1-layer control's in-context learning score stays above "
      "-0.3 nats, the 2-layer model's falls below -1.",
      lambda g: g["ch05_icl_score_1l"] > -0.3 and g["ch05_icl_score"] < -1)

# %% [markdown]
# **The phase change.** The middle panel shows the in-context learning
# score along training. It reaches half its final value at step
# {glue:text}`ch05_switch_step:.0f` of {glue:text}`ch05_steps:.0f` (the red
# line; the step is found from the run, as the first evaluation at which
# the score is at most half its final value, and only if the final score is
# below -0.3 nats). In this run it goes from 20% to 80% of its final value
# in {glue:text}`ch05_switch_width:.0f` steps, against
# {glue:text}`ch05_steps:.0f` of training: an abrupt drop (measured on this
# page's run; the check claims only that the switch falls inside the run).
# The score is measured every 25 steps, so no width below 25 steps can be
# seen: the drop may be sharper than that. Olsson et al. see
# the same signature, an abrupt drop of the in-context learning score,
# when induction heads form. The 1-layer model has no such drop.

# %% tags=["skip-grading", "hide-input"]
from attnkit.claims import claim

claim("switch_inside_run", "The switch happens inside the run: after step 50 and at least 100 "
      "steps before the end.",
      lambda g: 50 < g["ch05_switch_step"] <= g["ch05_steps"] - 100)

# %% tags=["skip-grading", "hide-input"]
spread({**{f"ch05_acc_{n}shot": f"accuracy, {n} shots, 2 layers" for n in SHOTS},
        "ch05_acc_1l_8shot": "accuracy, 8 shots, 1 layer",
        "ch05_ideal_8shot": "ideal copier, 8 shots",
        "ch05_icl_score": "ICL score, 2 layers (nats)",
        "ch05_icl_score_1l": "ICL score, 1 layer (nats)",
        "ch05_switch_step": "switch step",
        "ch05_cpu": "training CPU seconds, 2 layers"})

# %% [markdown]
# ### Finding the heads
#
# Which heads do it? For each head of the 2-layer model, the
# prefix-matching score (your function, on sequences of 16 random tokens
# written twice), the previous-token score, the copying score, and the
# 8-shot accuracy when that head alone is zeroed; then the ablations that
# matter, with the 1-layer control for comparison.

# %% tags=["skip-grading", "hide-input"]
labels = [f"L{layer}H{h}" for layer in (1, 2) for h in range(N_HEADS)]
keys = [f"l{layer}h{h}" for layer in (1, 2) for h in range(N_HEADS)]
fig, axes = plt.subplots(1, 2, figsize=(13, 3.4))
x = torch.arange(len(keys)).float()
for i, (kind, name) in enumerate((("prefix", "prefix matching"), ("prev", "previous token"),
                                  ("copy", "copying"), ("abl", "8-shot acc., head zeroed"))):
    axes[0].bar(x + 0.2 * i - 0.3, [out[f"ch05_{kind}_{k}"] for k in keys], width=0.2, label=name)
axes[0].set_xticks(x.tolist(), labels)
axes[0].axhline(0, color="gray", lw=0.5)
axes[0].set(title="per head (L = layer, H = head)")
axes[0].legend(fontsize=7)
bars = {"nothing zeroed": out["ch05_acc_8shot"],
        f"induction heads ({out['ch05_n_induction']:.0f})": out["ch05_abl_induction"],
        f"previous-token head L1H{out['ch05_prev_head']:.0f}": out["ch05_abl_prev"],
        f"other head L1H{out['ch05_other_head']:.0f}": out["ch05_abl_other"],
        "1-layer control": out["ch05_acc_1l_8shot"]}
axes[1].barh(list(bars), list(bars.values()))
axes[1].axvline(1 / N_LABELS, color="gray", lw=0.8, label="chance")
axes[1].set(xlabel="8-shot accuracy", title="ablations")
axes[1].invert_yaxis()
plt.tight_layout()
plt.show()

# %% [markdown]
# In this run {glue:text}`ch05_n_induction:.0f` of layer 2's 4 heads have
# a prefix-matching score above 0.5 (the highest,
# {glue:text}`ch05_max_prefix:.2f`), and they copy: their copying scores
# are positive, the smallest {glue:text}`ch05_min_copy_induction:.3f` (1 is
# the most a head can have). In this run layer 1's heads score positive
# too (the bars above; on other seeds some of them are negative), so a
# copying score alone does not single out an induction head. In layer 1 one head, head {glue:text}`ch05_prev_head:.0f`,
# attends to the previous position with weight
# {glue:text}`ch05_prev_score:.2f` on average, against at most
# {glue:text}`ch05_prev_others:.2f` for the other three: the
# previous-token head of the circuit. The 1-layer control
# has no induction head: its highest prefix-matching score is
# {glue:text}`ch05_max_prefix_1l:.2f`.
#
# **Ablations.** Zeroing one induction head changes little (the lowest
# 8-shot accuracy with one of them zeroed is
# {glue:text}`ch05_abl_single_min:.3f`): no single one is needed, the
# others make up for it. Zeroing all of them together drops the 8-shot
# accuracy to {glue:text}`ch05_abl_induction:.3f`. In most runs (the table
# below; this page's run zeroes {glue:text}`ch05_n_induction:.0f` of 4) all
# four layer-2 heads pass the 0.5 threshold, so this zeroes the whole of
# layer 2: it shows that the model needs its second layer, not
# which of its heads. The selective test is in layer 1, the previous-token
# head against another layer-1 head. Zeroing the one previous-token head
# drops it to {glue:text}`ch05_abl_prev:.3f`. In most runs it costs at
# least a third of the accuracy: the induction heads find little to match
# without it. In the one recorded run where this test fails (seed 7, two
# threads), a second layer-1 head also attends to the previous position and
# does the same work. Zeroing another
# layer-1 head, head {glue:text}`ch05_other_head:.0f`, leaves
# {glue:text}`ch05_abl_other:.3f`.

# %% tags=["skip-grading", "hide-input"]
from attnkit.claims import claim

claim("induction_heads_needed", "Layer 2 has at least one head with prefix matching above 0.5, "
      "and zeroing all such heads drops 8-shot accuracy below 0.25.",
      lambda g: g["ch05_n_induction"] >= 1 and g["ch05_abl_induction"] < 0.25)
claim("prev_token_head_needed", "In most runs (at least 6 in 10) zeroing layer 1's previous-token "
      "head costs at least a third of the 8-shot accuracy.",
      lambda g: g["ch05_abl_prev"] < 2 / 3 * g["ch05_acc_8shot"], at_least=0.6)
claim("other_head_not_needed", "Zeroing another layer-1 head leaves 8-shot accuracy within 0.05 "
      "of the intact model's.",
      lambda g: g["ch05_abl_other"] >= g["ch05_acc_8shot"] - 0.05)
claim("induction_heads_redundant", "Zeroing any single induction head leaves 8-shot accuracy "
      "within 0.05 of the intact model's.",
      lambda g: g["ch05_abl_single_min"] >= g["ch05_acc_8shot"] - 0.05)
claim("induction_heads_copy", "Every induction head has a positive copying score.",
      lambda g: g["ch05_min_copy_induction"] > 0)
claim("no_induction_in_one_layer", "The 1-layer control has no head with prefix matching above "
      "0.5.",
      lambda g: g["ch05_max_prefix_1l"] < 0.5)

# %% tags=["skip-grading", "hide-input"]
spread({"ch05_n_induction": "layer-2 heads with prefix matching > 0.5",
        "ch05_max_prefix": "highest prefix matching, 2 layers",
        "ch05_max_prefix_1l": "highest prefix matching, 1 layer",
        "ch05_prev_score": "previous-token head's score",
        "ch05_abl_induction": "8 shots, induction heads zeroed",
        "ch05_abl_single_min": "8 shots, one induction head zeroed (lowest)",
        "ch05_abl_prev": "8 shots, previous-token head zeroed",
        "ch05_abl_other": "8 shots, another layer-1 head zeroed"})

# %% [markdown]
# **K-composition, read off the weights.** The ablations show what the
# model needs. Elhage et al. {cite}`elhage2021` also show the circuit in
# the weights: a layer-2 head's keys *compose* with a layer-1 head when its
# query-key matrix reads what that head writes. For layer-2 head $j$ with
# $W_{QK}^j = W_Q^j {W_K^j}^\top$ and layer-1 head $i$ with
# $W_{OV}^i = W_V^i W_O^i$ (row vectors, each LayerNorm's gain folded into
# the matrices it feeds), the **K-composition score** is
# $\lVert W_{QK}^j {W_{OV}^i}^\top \rVert_F \,/\, (\lVert W_{QK}^j \rVert_F
# \lVert W_{OV}^i \rVert_F)$. It is large when the directions head $i$
# writes are the ones head $j$'s keys read. Two unrelated matrices of
# these shapes score about the baseline below (random Gaussian
# $W_{OV}$ of the same rank, 100 draws).

# %% tags=["skip-grading", "hide-input"]
import statistics


@torch.no_grad()
def head_matrices(block: AttnOnlyBlock, h: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(W_QK, W_OV) of head h, (D, D) each, for row vectors.

    The block's LayerNorm gain is folded in."""
    d_k = block.attn.w_q.weight.shape[0] // block.n_heads
    c, g = slice(h * d_k, (h + 1) * d_k), block.norm.weight[:, None]          # g: (D, 1)
    w_q, w_k, w_v = (g * w.weight[c].T for w in (block.attn.w_q, block.attn.w_k, block.attn.w_v))
    return w_q @ w_k.T, w_v @ block.attn.w_o.weight[:, c].T                   # (D, D), (D, D)


def k_composition(qk: torch.Tensor, ov: torch.Tensor) -> float:
    return ((qk @ ov.T).norm() / (qk.norm() * ov.norm())).item()


first, second = icl_model.blocks
k_comp = torch.tensor([[k_composition(head_matrices(second, j)[0], head_matrices(first, i)[1])
                        for i in range(N_HEADS)] for j in range(N_HEADS)])  # (layer-2, layer-1)
d_k, gen = D_MODEL // N_HEADS, torch.Generator().manual_seed(0)
k_random = statistics.mean(
    k_composition(head_matrices(second, j)[0],
                  torch.randn(D_MODEL, d_k, generator=gen)
                  @ torch.randn(d_k, D_MODEL, generator=gen))
    for j in range(N_HEADS) for _ in range(25))
prev, other = int(out["ch05_prev_head"]), int(out["ch05_other_head"])
induction = [h for h in range(N_HEADS) if out[f"ch05_prefix_l2h{h}"] > 0.5]
fig, ax = plt.subplots(figsize=(4.2, 3.2))
im = ax.imshow(k_comp.numpy(), cmap="viridis")
ax.set_xticks(range(N_HEADS),
              [f"L1H{i}" + (" (prev)" if i == prev else "") for i in range(N_HEADS)],
              fontsize=7)
ax.set_yticks(range(N_HEADS), [f"L2H{j}" + (" (ind)" if j in induction else "")
                               for j in range(N_HEADS)], fontsize=7)
ax.set_title(f"K-composition (random: {k_random:.2f})", fontsize=9)
plt.colorbar(im, ax=ax)
plt.tight_layout()
plt.show()
glue("ch05_kcomp_prev", float(k_comp[induction, prev].mean()) if induction else float("nan"))
glue("ch05_kcomp_rest", float(k_comp[induction][:, [i for i in range(N_HEADS) if i != prev]].mean())
     if induction else float("nan"))
glue("ch05_kcomp_random", k_random)
glue("ch05_kcomp_prev_top", float(sum(int(k_comp[j].argmax()) == prev for j in induction)))
print(f"K-composition of the induction heads with the previous-token head L1H{prev}: "
      f"{k_comp[induction, prev].tolist()}; with the other layer-1 heads: "
      f"{k_comp[induction][:, [i for i in range(N_HEADS) if i != prev]].tolist()}; "
      f"random: {k_random:.3f}")

# %% [markdown]
# In this run the induction heads' K-composition with the previous-token
# head is {glue:text}`ch05_kcomp_prev:.2f` on average, with the other
# layer-1 heads {glue:text}`ch05_kcomp_rest:.2f`, and random matrices of
# the same shapes score {glue:text}`ch05_kcomp_random:.2f`. For
# {glue:text}`ch05_kcomp_prev_top:.0f` of the
# {glue:text}`ch05_n_induction:.0f` induction heads, the previous-token
# head is the layer-1 head their keys read most. That is the composition
# the ablations implied, seen in the weights: the induction heads' keys
# read what the previous-token head writes.

# %% [markdown]
# The induction heads at work, on one sequence of 16 random tokens written
# twice: pick layer 2 and one of its induction heads, then hover over a
# token of the second half (a query) to see it attend to the token *after*
# its earlier occurrence, the one it is about to predict. Layer 1's
# previous-token head shows a line just below the diagonal.

# %% tags=["skip-grading", "hide-input"]
from attnkit.widget import attention_view

with torch.no_grad():
    icl_model(out["repeats"][:1])
    maps = torch.stack([block.weights()[0] for block in icl_model.blocks])   # (L, H, T, T)
tokens = [VOCAB[i] for i in out["repeats"][0].tolist()]
attention_view(maps, tokens, tokens, title="attention on 16 random tokens written twice")

# %% [markdown]
# **What is reproducible, and how fragile.** The table's last column says
# what moves each figure: with the same seed, thread count, solution and
# machine, every figure but the CPU time repeats bit for bit. This page's
# run is the claims check's run of seed 0 with one thread; the
# experiment's output above compares the two. The processor is part of
# the machine: torch picks its vector kernels (AVX2 or AVX-512) by the
# processor, they round differently, and the same seed then trains
# another model. A second thread adds the same numbers in
# another order, and after 500 steps the two runs are two different
# models. The other correct solution, in this check, trained to the same
# bits as this one (its operations happen to round alike here); only the
# figures that its own `prefix_matching_score` computes differ, in their
# last bits. On a GPU the figures differ again. The claims above held on
# every one of the 20 runs of the check. The spread tables give the
# range over 30 runs (seeds 0 to 4, seeds 5 to 9 of an earlier round and
# the held-out seeds 10 to 14); other
# seeds can fall outside it.
# The recipe was chosen among variants tried while this chapter was designed, one
# run each (seed 0), not repeated on this page. In that one run each, a
# quarter of repeated sequences instead of a half, batches of 32, an
# embedding tied to the head, or a learning rate of $10^{-2}$ gave no
# in-context learning within 500 steps, and with the chapter's MLP blocks
# the switch came after about 600 steps. One run per variant does not show
# that a variant prevents the switch, only that this recipe was the one
# that worked.

# %% [markdown]
# ### Sampling on a real next-token distribution
#
# Take a two-shot prompt whose query letter was not demonstrated,
# `a A c C f`. The trained model cannot know the answer. The answer is a
# label, and not `A` or `C`: the mapping is one to one and `a`, `c` already
# map to them. Here is the model's next-token distribution, and what each
# filter leaves of it.

# %% tags=["skip-grading", "hide-input"]
with torch.no_grad():
    demo = torch.tensor([[0, K + 0, 2, K + 2, 5]])                    # "a A c C f"
    z_real = icl_model(demo)[0, -1].float()                           # (V,)
panels = {"softmax(z)": z_real.softmax(-1),
          "temperature 0.5": (z_real / 0.5).softmax(-1),
          "temperature 2": (z_real / 2).softmax(-1),
          "top-k, k=3": filter_logits(z_real[None], top_k=3)[0].softmax(-1),
          "top-p, p=0.7": filter_logits(z_real[None], top_p=0.7)[0].softmax(-1)}
fig, axes = plt.subplots(1, len(panels), figsize=(15, 2.8), sharey=True)
for ax, (name, p) in zip(axes, panels.items()):
    ax.bar(range(len(VOCAB)), p.numpy())
    ax.set_xticks(range(len(VOCAB)), VOCAB, fontsize=6)
    ax.set_title(name)
plt.tight_layout()
plt.show()
glue("ch05_nucleus_size", int((filter_logits(z_real[None], top_p=0.7) > -math.inf).sum()))
with torch.no_grad():                         # a prompt the model is sure about: "a A c C a"
    z_sure = icl_model(torch.tensor([[0, K + 0, 2, K + 2, 0]]))[0, -1].float()
glue("ch05_nucleus_size_sure", int((filter_logits(z_sure[None], top_p=0.7) > -math.inf).sum()))
glue("ch05_top_prob_sure", float(z_sure.softmax(-1).max()))
p_real = z_real.softmax(-1)                                            # (V,)
label_mass, used_mass = float(p_real[K:].sum()), float(p_real[[K, K + 2]].sum())
glue("ch05_label_mass", label_mass)
glue("ch05_unused_mass", label_mass - used_mass)
glue("ch05_unused_indifferent", label_mass * (N_LABELS - 2) / N_LABELS)   # ignoring which were used
glue("ch05_p_used", used_mass / 2)                                     # mean of p(A), p(C)
glue("ch05_p_unused", (label_mass - used_mass) / (N_LABELS - 2))       # mean unused label
nucleus = filter_logits(z_real[None], top_p=0.7)[0] > -math.inf         # (V,)
glue("ch05_nucleus_used", int(nucleus[[K, K + 2]].sum()))
glue("ch05_top_prob", float(z_real.softmax(-1).max()))
print(f"prompt: {show(demo[0])}   greedy: {VOCAB[int(z_real.argmax())]}")

# %% [markdown]
# The model puts {glue:text}`ch05_label_mass:.3f` of the probability on
# the 16 labels: it knows a label comes. It does not rule out the two
# labels already used. It puts {glue:text}`ch05_unused_mass:.3f` on the 14
# unused labels, and a model that ignored which labels were used would put
# {glue:text}`ch05_unused_indifferent:.3f` there (14/16 of its label mass).
# In this run an impossible label, `A` or `C`, gets
# {glue:text}`ch05_p_used:.3f` on average and an unused label
# {glue:text}`ch05_p_unused:.3f`. On other seeds the order reverses: an
# impossible label gets more than an unused one. That is the counting
# shortcut from above, where a label already shown is the likelier guess.
# The most probable token has only
# {glue:text}`ch05_top_prob:.2f`. The ideal copier assumes more than the
# model learned: it spreads its guess over the unused labels only. Lower temperature sharpens, higher flattens; top-k keeps a fixed
# number of tokens whatever their mass; the 0.7-nucleus here keeps
# {glue:text}`ch05_nucleus_size:.0f` tokens, as many as it takes to cover
# 70% of the mass, and {glue:text}`ch05_nucleus_used:.0f` of them are
# labels already used, which cannot be the answer: the nucleus keeps what
# the model finds likely, not what is possible. On the prompt `a A c C a`, where the model can copy and
# is sure (its most probable token has {glue:text}`ch05_top_prob_sure:.3f`),
# the same 0.7-nucleus keeps {glue:text}`ch05_nucleus_size_sure:.0f`, while
# top-k with $k = 3$ keeps 3 in both cases: the nucleus adapts to the
# model's certainty, a fixed $k$ does not. The cache is timed below, on the
# GPT trained on real text.

# %% [markdown]
# ### The GPT on real text
#
# Until here the chapter's `GPT` class ran only on toy tokens. Now it
# learns English. The text is the course's prose corpus
# (`corpora.prose_text`, described in `docs/DATA.md`): the documentation
# that Python's standard library ships, 1.7 million characters to train
# on. We model it **character by character**. A character vocabulary
# needs no tokenizer, every validation character has an id, and the
# baselines are exact n-gram counts over the same units. A subword model
# would see more text per step, but its loss would be per subword, and the
# page's comparison with the n-gram models would need a conversion.
#
# The model is your `GPT` with 3 layers, $d = 128$, 4 heads, $d_{ff} =
# 512$ and a context of 64 characters, initialised by `gpt_init_`. It is
# trained with AdamW (betas 0.9 and 0.95, weight decay 0.1 on every
# weight), a learning rate of $5 \times 10^{-3}$ with 50 warm-up steps and
# a cosine decay to a tenth, gradients clipped at norm 1, on batches of 32
# random windows of the training text, seeded 0, on 2 threads. Training
# runs on whatever `OMP_WAIT_POLICY` the environment sets: on a shared
# machine, `OMP_WAIT_POLICY=PASSIVE` stops idle threads from spinning.
# The validation loss is the cross-entropy in nats per character on the
# first 50,000 characters of the validation split, cut into windows of
# 64, so a prediction sees 0 to 63 earlier characters.
#
# The same function trains twice. Your short run, below, takes
# about two CPU-minutes. The longer run, declared with `@checkpoint`, was
# trained by `python -m course checkpoints 05_gpt` with the same code and
# committed (float16 weights); the page loads it.

# %% tags=["skip-grading"]
import time

from attnkit import corpora
from attnkit.checkpoints import checkpoint

TRAIN_TEXT, VALID_TEXT = corpora.prose_text("train"), corpora.prose_text("valid")
CHARS = sorted(set(TRAIN_TEXT)) + ["\ufffd"]   # the training text's characters, then "unknown"
CHAR_ID = {c: i for i, c in enumerate(CHARS)}
CONTEXT, N_VALID = 64, 50_000


def encode(text: str) -> torch.Tensor:
    """str -> (len,) long; a character the training text lacks gets the last id."""
    return torch.tensor([CHAR_ID.get(c, len(CHARS) - 1) for c in text])


def decode(ids) -> str:
    return "".join(CHARS[int(i)] for i in ids)


TRAIN_IDS, VALID_IDS = encode(TRAIN_TEXT), encode(VALID_TEXT[:N_VALID])


def build() -> nn.Module:
    return gpt_init_(GPT(len(CHARS), d_model=128, n_heads=4, d_ff=512, n_layers=3, max_len=CONTEXT))


@torch.no_grad()
def evaluate(model: nn.Module) -> dict:
    """Validation cross-entropy (nats per character) on windows of CONTEXT characters."""
    device = next(model.parameters()).device
    n = (len(VALID_IDS) - 1) // CONTEXT
    x = VALID_IDS[:n * CONTEXT].view(n, CONTEXT).to(device)           # (n, T)
    y = VALID_IDS[1:n * CONTEXT + 1].view(n, CONTEXT).to(device)      # (n, T)
    total = sum(F.cross_entropy(model(x[i:i + 128])[0].flatten(0, 1), y[i:i + 128].flatten(),
                                reduction="sum").item() for i in range(0, n, 128))
    return {"ch05_val_loss": total / (n * CONTEXT)}


@checkpoint("05_gpt", build=build, evaluate=evaluate, steps=5000)
def char_gpt(model: nn.Module, steps: int, device: torch.device, batch: int = 32, lr: float = 5e-3,
             threads: int = 2, report: int = 250) -> list[dict]:
    """Train `model` on random windows of the training text; the log every `report` steps."""
    torch.set_num_threads(threads)
    gen = torch.Generator().manual_seed(0)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)
    log, cpu0 = [], time.process_time()
    for step in range(1, steps + 1):
        warm, decay = min(1.0, step / 50), 0.5 * (1 + math.cos(math.pi * step / steps))
        for group in opt.param_groups:
            group["lr"] = lr * warm * (0.1 + 0.9 * decay)
        starts = torch.randint(0, len(TRAIN_IDS) - CONTEXT - 1, (batch,), generator=gen)
        x = torch.stack([TRAIN_IDS[s:s + CONTEXT] for s in starts]).to(device)          # (B, T)
        y = torch.stack([TRAIN_IDS[s + 1:s + CONTEXT + 1] for s in starts]).to(device)  # (B, T)
        model.train()
        loss = F.cross_entropy(model(x)[0].flatten(0, 1), y.flatten())
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % report == 0 or step == steps:
            val = evaluate(model.eval())["ch05_val_loss"]
            log.append({"step": step, "loss": round(loss.item(), 4), "val_loss": round(val, 4),
                        "cpu_s": round(time.process_time() - cpu0, 1)})
    return log

# %% tags=["skip-grading", "hide-input"]
from collections import Counter

torch.manual_seed(0)
short_gpt = build()
_cpu0 = time.process_time()
short_log = char_gpt(short_gpt, steps=1000, device=torch.device("cpu"))   # your short run
short_cpu = time.process_time() - _cpu0
long_gpt, long_record = char_gpt.load(), char_gpt.record()
torch.set_num_threads(2)


def kneser_ney(text: str, n: int, discount: float = 0.75):
    """Interpolated Kneser-Ney character n-gram model: prob(context, char) -> probability.

    The highest order uses counts, lower orders continuation counts (how many distinct
    characters precede), each interpolated down to the uniform distribution over CHARS."""
    counts = [None] * (n + 1)
    counts[n] = Counter(text[i:i + n] for i in range(len(text) - n + 1))
    for k in range(n - 1, 0, -1):
        counts[k] = Counter(g[1:] for g in counts[k + 1])
    totals, types = [Counter() for _ in range(n + 1)], [Counter() for _ in range(n + 1)]
    for k in range(1, n + 1):
        for g, c in counts[k].items():
            totals[k][g[:-1]] += c
            types[k][g[:-1]] += 1

    def prob(context: str, ch: str) -> float:
        p = 1.0 / len(CHARS)
        for k in range(1, n + 1):
            h = context[len(context) - k + 1:] if k > 1 else ""
            if len(h) != k - 1 or totals[k][h] == 0:
                break
            p = (max(counts[k][h + ch] - discount, 0) + discount * types[k][h] * p) / totals[k][h]
        return p
    return prob


VALID_STR = decode(VALID_IDS)
uni = Counter(TRAIN_TEXT)
baselines = {"unigram (add-one)": -sum(math.log((uni[c] + 1) / (len(TRAIN_TEXT) + len(CHARS)))
                                       for c in VALID_STR[1:]) / (len(VALID_STR) - 1)}
for n in (3, 5):
    p = kneser_ney(TRAIN_TEXT, n)
    nll = -sum(math.log(p(VALID_STR[max(0, i - n + 1):i], VALID_STR[i]))
               for i in range(1, len(VALID_STR)))
    baselines[f"Kneser-Ney {n}-gram"] = nll / (len(VALID_STR) - 1)
rows = {**baselines, "GPT, short run": evaluate(short_gpt)["ch05_val_loss"],
        "GPT, longer run": long_record["metrics"]["ch05_val_loss"]}
for name, loss in rows.items():
    print(f"{name:20s} {loss:.3f} nats/char, perplexity {math.exp(loss):5.2f}")
glue("ch05_real_unigram", baselines["unigram (add-one)"])
glue("ch05_real_kn3", baselines["Kneser-Ney 3-gram"])
glue("ch05_real_kn5", baselines["Kneser-Ney 5-gram"])
glue("ch05_real_ppl_kn5", math.exp(baselines["Kneser-Ney 5-gram"]))
glue("ch05_real_short", rows["GPT, short run"])
glue("ch05_real_ppl_short", math.exp(rows["GPT, short run"]))
glue("ch05_real_long", rows["GPT, longer run"])
glue("ch05_real_ppl_long", math.exp(rows["GPT, longer run"]))
glue("ch05_real_short_cpu", short_cpu)
glue("ch05_real_long_cpu", long_record["log"][-1]["cpu_s"])
glue("ch05_real_long_wall", long_record["seconds"])
glue("ch05_real_short_steps", short_log[-1]["step"])
glue("ch05_real_long_steps", long_record["log"][-1]["step"])
glue("ch05_real_params", sum(p.numel() for p in short_gpt.parameters()))
fig, ax = plt.subplots(figsize=(7, 3.2))
for log, name in ((short_log, "short run"), (long_record["log"], "longer run")):
    ax.plot([r["cpu_s"] for r in log], [r["val_loss"] for r in log], marker=".",
            label=f"GPT, {name}")
for (name, loss), style in zip(baselines.items(), (":", "--", "-.")):
    ax.axhline(loss, color="gray", linestyle=style, label=name)
ax.set_xlabel("CPU seconds of training")
ax.set_ylabel("validation nats per character")
ax.legend(fontsize=7)
plt.tight_layout()
plt.show()

# %% [markdown]
# A unigram model, add-one smoothed, scores
# {glue:text}`ch05_real_unigram:.2f` nats per character. Interpolated
# Kneser-Ney (discount 0.75) scores {glue:text}`ch05_real_kn3:.2f` with 3
# characters and {glue:text}`ch05_real_kn5:.3f` with 5 (perplexity
# {glue:text}`ch05_real_ppl_kn5:.2f`). The GPT has
# {glue:text}`ch05_real_params:,.0f` parameters. In this run the short run
# took {glue:text}`ch05_real_short_cpu:.0f` CPU-seconds for
# {glue:text}`ch05_real_short_steps:.0f` steps and reached
# {glue:text}`ch05_real_short:.3f` (perplexity
# {glue:text}`ch05_real_ppl_short:.2f`): below the 3-gram, above the 5-gram.
# The longer run took {glue:text}`ch05_real_long_cpu:.0f` CPU-seconds
# ({glue:text}`ch05_real_long_wall:.0f` s of wall time on a shared machine)
# for {glue:text}`ch05_real_long_steps:.0f` steps and reached
# {glue:text}`ch05_real_long:.3f` (perplexity
# {glue:text}`ch05_real_ppl_long:.2f`), level with the 5-gram in this run.
# Its loss was still falling when it stopped. The samples of both runs
# have the corpus's layout: paragraphs, indented lines and tables. The
# longer run spells most words right, and its sentences do not mean
# anything. Here is what each writes, from the same prompt, seed and
# temperature 0.8.
#
# Your `generate` needs the prompt and the new text to fit the context of
# 64 characters. The given `write` calls it in chunks: it keeps the last 32
# characters as the prompt and asks for 32 more, so every character is
# chosen with 32 to 63 characters of context.

# %% tags=["skip-grading", "hide-input"]
def write(model: nn.Module, prompts: list[str], n_chars: int, seed: int = 0,
          **sampling) -> list[str]:
    """Continue each prompt by n_chars characters, with your `generate`, 32 at a time."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.stack([encode(p[-32:]) for p in prompts])                 # (B, 32)
    out = ids
    while out.shape[1] - ids.shape[1] < n_chars:
        new = generate(model, out[:, -32:], 32, generator=gen, **sampling)[:, 32:]
        out = torch.cat([out, new], 1)
    return [decode(row[32:32 + n_chars]) for row in out]


PROMPT = "The return value of the function "
for name, model in (("short run", short_gpt), ("longer run", long_gpt)):
    sample = write(model, [PROMPT], 300, temperature=0.8)[0]
    print(f"--- {name}, temperature 0.8:\n{PROMPT}{sample}\n")

# %% [markdown]
# ### Sampling from the trained model
#
# The longer run now writes with each decoding rule. Eight prompts, 32
# characters each from the validation text, are continued by 320
# characters with every rule. Three numbers describe each rule. The
# **distinct-2 rate** is the fraction of the word pairs that are distinct:
# 1 means no pair repeats, a loop drives it down. The **repeated 8-grams**
# are the fraction of the character 8-grams that already occurred earlier
# in the same text: a loop of any kind drives it up. The **model's
# likelihood** is the mean log-probability, in nats per character, that the
# model itself (at temperature 1) gives the characters it wrote. The last
# row is the validation text that follows the same prompts.

# %% tags=["skip-grading", "hide-input"]
def distinct2(text: str) -> float:
    """The fraction of distinct word pairs among all word pairs of text."""
    words = text.split()
    pairs = list(zip(words, words[1:]))
    return len(set(pairs)) / max(1, len(pairs))


def repeated8(text: str) -> float:
    """The fraction of the character 8-grams of text that already occurred earlier in it
    (a loop of spaces or of one word counts; distinct-2 misses a loop of spaces)."""
    grams = [text[i:i + 8] for i in range(len(text) - 7)]
    return 1 - len(set(grams)) / max(1, len(grams))


@torch.no_grad()
def own_loglik(model: nn.Module, prompts: list[str], texts: list[str]) -> float:
    """Mean log-probability per character of texts after prompts, with write's 32-63 context."""
    ids = torch.stack([encode(p[-32:] + t) for p, t in zip(prompts, texts)])   # (B, 32 + n)
    total, count = 0.0, 0
    for s in range(32, ids.shape[1], 32):
        window = ids[:, s - 32:s + 32]                                       # (B, <= 64)
        logp = model(window[:, :-1])[0].log_softmax(-1)[:, 31:]              # (B, <= 32, V)
        target = window[:, 32:]                                              # (B, <= 32)
        total += logp.gather(-1, target[..., None]).sum().item()
        count += target.numel()
    return total / count


starts = range(1000, 1000 + 8 * 5000, 5000)
prompts = [VALID_STR[s - 32:s] for s in starts]
rules = {"greedy": dict(temperature=0), "temperature 0.5": dict(temperature=0.5),
         "temperature 0.8": dict(temperature=0.8), "temperature 1": dict(temperature=1.0),
         "temperature 1.2": dict(temperature=1.2), "top-k, k=5": dict(top_k=5),
         "top-p, p=0.5": dict(top_p=0.5), "top-p, p=0.8": dict(top_p=0.8),
         "top-p, p=0.95": dict(top_p=0.95)}
WRITE_SEEDS = (0, 1, 2)                    # the sampled rules: 8 prompts x 3 seeds each
texts = {name: [t for seed in (WRITE_SEEDS if kw.get("temperature") != 0 else (0,))
                for t in write(long_gpt, prompts, 320, seed=seed, **kw)]
         for name, kw in rules.items()}
texts["validation text"] = [VALID_STR[s:s + 320] for s in starts]
sampling_rows = {name: (sum(map(distinct2, t)) / len(t),
                        own_loglik(long_gpt, prompts * (len(t) // len(prompts)), t),
                        sum(map(repeated8, t)) / len(t))
                 for name, t in texts.items()}
print(f"{'rule':16s} {'distinct-2':>10s} {'repeated 8-grams':>17s} {'model log-prob/char':>20s}")
for name, (d2, ll, rep) in sampling_rows.items():
    print(f"{name:16s} {d2:10.3f} {rep:17.3f} {ll:20.3f}")
print(f"\n--- greedy:\n{prompts[0]}{texts['greedy'][0]}")
print(f"\n--- top-p, p=0.8:\n{prompts[0]}{texts['top-p, p=0.8'][0]}")
for name in ("greedy", "temperature 1", "top-p, p=0.8", "validation text"):
    glue(f"ch05_real_d2_{name.split(',')[0].split()[0].replace('-', '')}", sampling_rows[name][0])
    glue(f"ch05_real_ll_{name.split(',')[0].split()[0].replace('-', '')}", sampling_rows[name][1])
    glue(f"ch05_real_rep_{name.split(',')[0].split()[0].replace('-', '')}", sampling_rows[name][2])
glue("ch05_real_ll_t05", sampling_rows["temperature 0.5"][1])
glue("ch05_real_d2_t05", sampling_rows["temperature 0.5"][0])
glue("ch05_real_ll_t12", sampling_rows["temperature 1.2"][1])
_ = glue("ch05_real_d2_t12", sampling_rows["temperature 1.2"][0])

# %% [markdown]
# The sampled rules are averaged over 8 prompts and 3 seeds, since one
# seed moves their figures a lot. Greedy decoding repeats
# {glue:text}`ch05_real_rep_greedy:.2f` of its character 8-grams, the
# validation text {glue:text}`ch05_real_rep_validation:.2f`: greedy text
# falls into loops. Its distinct-2 rate is
# {glue:text}`ch05_real_d2_greedy:.2f`, against
# {glue:text}`ch05_real_d2_validation:.2f` for the validation text, but
# distinct-2 counts words, and a loop of spaces has none. The model finds its greedy text far more likely
# ({glue:text}`ch05_real_ll_greedy:.2f` nats per character) than the
# validation text ({glue:text}`ch05_real_ll_validation:.2f`): text chosen
# to maximise the model's probability is not text like people's. Greedy
# decoding does not search for the most likely text, though: it takes the
# best character one step at a time.
# As the temperature rises from 0.5 to 1.2, the distinct-2 rate goes from
# {glue:text}`ch05_real_d2_t05:.2f` to {glue:text}`ch05_real_d2_t12:.2f`
# and the likelihood falls from {glue:text}`ch05_real_ll_t05:.2f` to
# {glue:text}`ch05_real_ll_t12:.2f`. Diversity is bought with likelihood,
# and the table shows the same trade as $p$ moves. At temperature 1
# the samples' likelihood is {glue:text}`ch05_real_ll_temperature:.2f`,
# near the validation text's: sampling at temperature 1 writes text the
# model finds as surprising as real text, as a calibrated model should.
#
# What does the nucleus keep? Two prompts end in the same sentence. After
# "The return value of the functio" the next character is almost surely
# "n". After "The return value of the " many words can follow.

# %% tags=["skip-grading", "hide-input"]
with torch.no_grad():
    for key, text in (("sure", "The return value of the functio"),
                      ("open", "The return value of the ")):
        z = long_gpt(encode(text)[None])[0][0, -1]                         # (V,)
        kept = filter_logits(z[None], top_p=0.9)[0] > -math.inf              # (V,)
        glue(f"ch05_real_nucleus_{key}", int(kept.sum()))
        glue(f"ch05_real_top_{key}", float(z.softmax(-1).max()))
        print(f"{text!r}: top-p 0.9 keeps {int(kept.sum())} characters: "
              f"{''.join(CHARS[i] for i in kept.nonzero().flatten())!r}")

# %% [markdown]
# On the sure prompt the most probable character has probability
# {glue:text}`ch05_real_top_sure:.3f`, and the 0.9-nucleus keeps
# {glue:text}`ch05_real_nucleus_sure:.0f` characters. On the open one the
# most probable has {glue:text}`ch05_real_top_open:.3f`, and the nucleus
# keeps {glue:text}`ch05_real_nucleus_open:.0f`. A fixed top-k keeps the
# same number in both.

# %% [markdown]
# ### The KV cache on the trained model
#
# We time `generate` on the longer run, greedy, from a 10-character
# prompt, with and without the cache, for 50, 200 and 500 new characters.
# The model was trained with 64 positions, so only the 50-character run is
# the trained model as it is. For the longer runs `extend_positions` gives
# a copy with 520 positions, position $p$ using the trained embedding of
# position $p \bmod 64$: every step does the same arithmetic as the trained
# model's, but past 64 characters the text is not what a trained model
# writes, and it serves only the timing and the token check. The times are
# wall-clock seconds on one thread, the median of 3 runs per length (of
# 2 at 500, to keep the page short), the two paths alternating, in this run. The tokens of both paths must be
# equal. `benchmarks/bench_05_kv_cache.py` times the same model with the
# same functions (median of 5).

# %% tags=["skip-grading", "hide-input"]
import statistics

from torch.overrides import TorchFunctionMode


def extend_positions(model: nn.Module, max_len: int, n_heads: int = 4) -> nn.Module:
    """A copy of `model` (with n_heads heads) with max_len positions: position p has the
    embedding of position p mod model.max_len."""
    blocks = model.blocks
    copy = GPT(model.tok_embed.num_embeddings, d_model=model.tok_embed.embedding_dim,
               n_heads=n_heads, d_ff=blocks[0].mlp[0].out_features,
               n_layers=len(blocks), max_len=max_len)
    state = dict(model.state_dict())
    state["pos_embed.weight"] = state["pos_embed.weight"][torch.arange(max_len) % model.max_len]
    copy.load_state_dict(state)
    return copy.eval()


def time_generation(model: nn.Module, prompt: torch.Tensor, n_new: int, repeats: int) -> dict:
    """Median wall seconds of greedy generate without and with the cache (alternating runs)."""
    times = {False: [], True: []}
    for _ in range(repeats):
        for use_cache in (False, True):
            t0 = time.perf_counter()
            out = generate(model, prompt, n_new, temperature=0, use_cache=use_cache)
            times[use_cache].append(time.perf_counter() - t0)
            if use_cache:
                fast = out
            else:
                slow = out
    return {"no_cache": statistics.median(times[False]), "cache": statistics.median(times[True]),
            "equal": torch.equal(slow, fast), "tokens": fast}


class CountCalls(TorchFunctionMode):
    """Counts the PyTorch functions called from Python inside its `with` block."""
    def __init__(self):
        super().__init__()
        self.n = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.n += 1
        return func(*args, **(kwargs or {}))


@torch.no_grad()
def call_seconds(model: nn.Module, tokens: torch.Tensor, caches=None, repeats: int = 30) -> float:
    """Median wall seconds of one forward call model(tokens, caches)."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        model(tokens, caches)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


torch.set_num_threads(1)
kv_prompt = encode(VALID_STR[990:1000])[None]                              # (1, 10)
kv_long = extend_positions(long_gpt, 520)
kv_rows = {n: time_generation(long_gpt if n <= 54 else kv_long, kv_prompt, n,
                             repeats=3 if n < 500 else 2) for n in (50, 200, 500)}
print(f"{'new chars':>9s} {'no cache (s)':>13s} {'cache (s)':>10s} {'speed-up':>9s} "
      f"{'positions ratio':>16s} {'equal tokens':>13s}")
for n, r in kv_rows.items():
    ratio = sum(10 + t for t in range(n)) / (10 + n - 1)      # positions run: no cache / cache
    print(f"{n:9d} {r['no_cache']:13.3f} {r['cache']:10.3f} {r['no_cache'] / r['cache']:8.1f}x "
          f"{ratio:15.0f}x {str(r['equal']):>13s}")
    glue(f"ch05_speedup_{n}", r["no_cache"] / r["cache"])
    glue(f"ch05_predicted_{n}", ratio)
glue("ch05_identical", float(all(r["equal"] for r in kv_rows.values())))
print(f"prompt {decode(kv_prompt[0])!r}, greedy: {decode(kv_rows[50]['tokens'][0, 10:])!r}")

# where the time of a step goes: one position after 10 or 500 cached, and whole passes
with torch.no_grad():
    _, kv_caches = kv_long(kv_rows[500]["tokens"][:, :500])
one = kv_rows[500]["tokens"][:, 500:501]                                  # (1, 1)
step_10 = call_seconds(kv_long, one, [(k[:, :, :10], v[:, :, :10]) for k, v in kv_caches])
step_500 = call_seconds(kv_long, one, kv_caches)
passes = {T: call_seconds(kv_long, kv_rows[500]["tokens"][:, :T], repeats=10)
          for T in (1, 100, 500)}
with torch.no_grad(), CountCalls() as calls:
    kv_long(one, kv_caches)
n_ops = calls.n                                                           # operators called
cache_mib = sum(k.numel() * k.element_size() + v.numel() * v.element_size()
                for k, v in kv_caches) / 2**20
print(f"one cached step: {1e3 * step_10:.2f} ms after 10 positions, "
      f"{1e3 * step_500:.2f} ms after 500;"
      f" {n_ops} PyTorch operators per step")
print("a pass without the cache: " + ", ".join(f"{T} positions {1e3 * s:.2f} ms"
                                                for T, s in passes.items()))
print(f"cache after 500 positions: {cache_mib:.2f} MiB (= 2 x 3 layers x 500 x 128 x 4 bytes)")
glue("ch05_step_ms_10", 1e3 * step_10)
glue("ch05_step_ms_500", 1e3 * step_500)
glue("ch05_pass_ms_1", 1e3 * passes[1])
glue("ch05_pass_ms_100", 1e3 * passes[100])
glue("ch05_pass_ms_500", 1e3 * passes[500])
glue("ch05_pass_us_per_pos_100", 1e6 * passes[100] / 100)
glue("ch05_step_ops", n_ops)
glue("ch05_cache_mib", cache_mib)
torch.set_num_threads(2)

# %% [markdown]
# In this run the cache made 50 new characters
# {glue:text}`ch05_speedup_50:.1f` times faster, 200 characters
# {glue:text}`ch05_speedup_200:.1f` times and 500 characters
# {glue:text}`ch05_speedup_500:.1f` times, and the two paths chose the
# same tokens at every length. Counting the positions run through the
# model predicts {glue:text}`ch05_predicted_50:.0f`,
# {glue:text}`ch05_predicted_200:.0f` and
# {glue:text}`ch05_predicted_500:.0f` times: without the cache step $t$
# runs $10 + t$ positions, with it every step after the first runs one.
#
# The measured speed-ups are smaller because a step has a fixed cost. One
# cached step took {glue:text}`ch05_step_ms_10:.2f` ms after 10 cached
# positions and {glue:text}`ch05_step_ms_500:.2f` ms after 500. A pass of
# one position without a cache took {glue:text}`ch05_pass_ms_1:.2f` ms,
# but a pass of 100 positions took {glue:text}`ch05_pass_ms_100:.1f` ms,
# {glue:text}`ch05_pass_us_per_pos_100:.0f` µs per position. So most of a
# one-position step is not arithmetic on that position. It is the cost of
# calling {glue:text}`ch05_step_ops:.0f` PyTorch operators one after
# another from Python (the embedding, per layer two LayerNorms, four
# projections, the concatenation, the mask, the softmax, two matrix
# products, the MLP), each a few microseconds of dispatch around little
# work. The cache removes positions, not calls. Without the cache the cost
# grows faster than the number of positions: a pass of 500 positions took
# {glue:text}`ch05_pass_ms_500:.0f` ms, because its attention scores and
# mask are $500 \times 500$. That is why the gain grows with the length.
#
# The price is memory: {glue:text}`ch05_cache_mib:.2f` MiB for 500
# positions of this small model, $2 L S D$ numbers per sequence. For one
# sequence of a large model the cache is small next to the weights: at
# full context about 0.16B numbers for GPT-2's 1.5B parameters, about
# 4.8B for GPT-3's 175B. But a server generates for many sequences at
# once, each with its own cache, and beyond roughly 10 (GPT-2) or 36
# (GPT-3) full-length sequences the caches outweigh the weights: in
# batched serving it is the cache that limits the batch size and the
# context length.

# %% [markdown]
# ### Scaling on a laptop
#
# GPT-3 was not a lucky guess. Kaplan et al. {cite}`kaplan2020scaling`
# trained Transformer language models from 768 to 1.5 billion parameters
# (embeddings not counted) and found that the test loss falls as a **power law** in each of
# the three things spent, when the other two do not limit it: the
# parameters $N$, $L(N) \approx (N_c/N)^{\alpha_N}$
# with $\alpha_N \approx 0.076$; the data $D$, with $\alpha_D \approx
# 0.095$; and the training compute $C \approx 6ND$ floating-point operations
# (two for the multiply-add of each parameter and token in the forward
# pass, four in the backward), with $\alpha_C \approx 0.050$ when $C$ is
# spent best. Their advice was to spend more compute mostly on a larger
# model. GPT-3 {cite}`brown2020` followed it: 175B parameters trained on
# 300B tokens, about $6 \cdot 175 \cdot 10^9 \cdot 300 \cdot 10^9 \approx
# 3.1 \cdot 10^{23}$ FLOPs.
#
# Here is the same kind of study on the prose corpus, with the longer
# run's recipe on one thread: five model sizes, from 1 layer of width 32
# to 3 layers of width 128 (4 heads, $d_{ff} = 4d$), each trained for 800
# steps of 32 windows of 64 characters (1.6M characters, about one pass
# over the training text) from 3 seeds; and the 2-layer model of width 64
# trained the same way on only 24,000, 104,000 or 424,000 characters of
# the training text, from 3 seeds. A smaller text is made of whole pieces
# of 4,000 characters at evenly spaced places (`spread_subset`: 6, 26 or
# 106 pieces), so that it samples the whole corpus, not its first
# documents. The validation loss
# is measured 8 times along each run. The runs took too long for this page
# (the total CPU time is below); they were run by
# `python -m course sweeps 05` and their records committed
# (`attnkit/sweeps_data/05_gpt/scaling_run.json`, one per run, keyed by its
# configuration and by a hash of the code that made it: the command re-runs
# only the runs whose code or configuration changed). The next cell
# defines `scaling_run`; the one after it reads its records.

# %% tags=["skip-grading"]
from attnkit.sweeps import sweep

SIZES = [(1, 32), (2, 48), (2, 64), (3, 96), (3, 128)]         # (layers, d_model)
DATA_MODEL, DATA_CHARS = (2, 64), [26_000, 106_000, 425_000, len(TRAIN_IDS)]
PIECE = 4_000                      # a smaller training text: pieces of this many characters


def spread_subset(ids: torch.Tensor, n: int, piece: int = PIECE) -> torch.Tensor:
    """About n characters of ids (all of it if n >= len(ids)): n // piece whole pieces of `piece`
    characters at evenly spaced starts, concatenated, so a small text samples the whole corpus."""
    if n >= len(ids):
        return ids
    starts = torch.linspace(0, len(ids) - piece, n // piece).long()                # (n // piece,)
    return torch.cat([ids[s:s + piece] for s in starts.tolist()])        # (n // piece * piece,)


@sweep("05_gpt", configs=[dict(n_layers=L, d_model=d, steps=800, train_chars=len(TRAIN_IDS), seed=s)
                          for L, d in SIZES for s in range(3)]
       + [dict(n_layers=DATA_MODEL[0], d_model=DATA_MODEL[1], steps=800, train_chars=n, seed=s)
          for n in DATA_CHARS[:-1] for s in range(3)])
def scaling_run(n_layers: int, d_model: int, steps: int, train_chars: int, seed: int,
                batch: int = 32, lr: float = 5e-3, evals: int = 8) -> dict:
    """char_gpt's recipe on one thread, for a GPT of the given size trained on train_chars
    characters of the training text (`spread_subset`); the validation loss `evals` times."""
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    model = gpt_init_(GPT(len(CHARS), d_model=d_model, n_heads=4, d_ff=4 * d_model,
                          n_layers=n_layers, max_len=CONTEXT))
    ids, gen = spread_subset(TRAIN_IDS, train_chars), torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)
    log, cpu0 = [], time.process_time()
    for step in range(1, steps + 1):
        warm, decay = min(1.0, step / 50), 0.5 * (1 + math.cos(math.pi * step / steps))
        for group in opt.param_groups:
            group["lr"] = lr * warm * (0.1 + 0.9 * decay)
        starts = torch.randint(0, len(ids) - CONTEXT - 1, (batch,), generator=gen)
        x = torch.stack([ids[s:s + CONTEXT] for s in starts])                     # (B, T)
        y = torch.stack([ids[s + 1:s + CONTEXT + 1] for s in starts])             # (B, T)
        model.train()
        loss = F.cross_entropy(model(x)[0].flatten(0, 1), y.flatten())
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % (steps // evals) == 0:
            log.append({"step": step, "chars": step * batch * CONTEXT,
                        "loss": round(loss.item(), 4),
                        "val_loss": round(evaluate(model.eval())["ch05_val_loss"], 4)})
    embedding = {"tok_embed.weight", "pos_embed.weight", "head.weight"}
    return {"params": sum(p.numel() for n, p in model.named_parameters() if n not in embedding),
            "params_all": sum(p.numel() for p in model.parameters()), "log": log,
            "cpu_s": round(time.process_time() - cpu0, 1)}

# %% tags=["skip-grading", "hide-input"]
import numpy as np

scaling = scaling_run.results()      # the committed records (python -m course sweeps 05)
full = len(TRAIN_IDS)
by_size: dict[tuple, list] = {}                  # (layers, d_model) -> its full-data runs, in order
for r in scaling:
    if r["config"]["train_chars"] == full:
        by_size.setdefault((r["config"]["n_layers"], r["config"]["d_model"]), []).append(r)
by_data = {n: [r for r in scaling if r["config"]["train_chars"] == n
               and (r["config"]["n_layers"], r["config"]["d_model"]) == DATA_MODEL]
           for n in DATA_CHARS}
N = np.array([runs[0]["params"] for runs in by_size.values()], dtype=float)            # (sizes,)
final = [np.array([r["log"][-1]["val_loss"] for r in runs])   # per seed
         for runs in by_size.values()]


def power_fit(n: np.ndarray, loss: np.ndarray) -> tuple[float, float]:
    """Least squares of log loss = log a - alpha log n; returns (alpha, a)."""
    slope, intercept = np.polyfit(np.log(n), np.log(loss), 1)
    return -slope, math.exp(intercept)


mean_final = np.array([f.mean() for f in final])                                        # (sizes,)
alpha, a_fit = power_fit(N, mean_final)
rng = np.random.default_rng(0)                   # bootstrap: resample the seeds of every size
boot = [power_fit(N, np.array([rng.choice(f, len(f)).mean() for f in final]))[0]
        for _ in range(2000)]
alpha_lo, alpha_hi = np.percentile(boot, [2.5, 97.5])
loo = [power_fit(np.delete(N, i), np.delete(mean_final, i))[0] for i in range(len(N))]  # one out

fig, axes = plt.subplots(1, 3, figsize=(15, 3.6))
for (L, d), row in zip(by_size, final):
    axes[0].scatter([by_size[(L, d)][0]["params"]] * len(row), row, s=12, label=f"{L} x {d}")
grid = np.geomspace(N.min() / 1.5, N.max() * 1.5)
axes[0].plot(grid, a_fit * grid ** -alpha, "k--", lw=1,
             label=f"fit: alpha {alpha:.3f} [{alpha_lo:.3f}, {alpha_hi:.3f}]")
axes[0].set(xscale="log", yscale="log", xlabel="parameters N (without embeddings and head)",
            ylabel="validation nats/char", title="after 800 steps (1.6M characters)")
axes[0].legend(fontsize=7)
for (L, d), runs in by_size.items():
    chars = np.array([e["chars"] for e in runs[0]["log"]])
    loss = np.mean([[e["val_loss"] for e in r["log"]] for r in runs], 0)
    axes[1].plot(6 * runs[0]["params"] * chars, loss, marker=".", label=f"{L} x {d}")
axes[1].set(xscale="log", yscale="log", xlabel="training compute C = 6ND (FLOPs)",
            ylabel="validation nats/char", title="loss along training, mean over seeds")
axes[1].legend(fontsize=7)
actual = {n: len(spread_subset(TRAIN_IDS, n)) for n in DATA_CHARS}    # whole pieces: below n
for n, runs in by_data.items():
    chars = [e["chars"] for e in runs[0]["log"]]
    loss = np.mean([[e["val_loss"] for e in r["log"]] for r in runs], 0)
    label = f"text of {actual[n] / 1e3:,.0f}k chars: valid"
    line, = axes[2].plot(chars, loss, marker=".", label=label)
    if n == DATA_CHARS[0]:                                       # the training loss where it parts
        train = np.mean([[e["loss"] for e in r["log"]] for r in runs], 0)
        axes[2].plot(chars, train, ls="--", color=line.get_color(), label="its training batches")
axes[2].set(xscale="log", xlabel="characters seen D", ylabel="nats/char",
            title=f"data: the {DATA_MODEL[0]} x {DATA_MODEL[1]} model, mean over seeds")
axes[2].legend(fontsize=7)
plt.tight_layout()
plt.show()

best = {n: np.mean([min(e["val_loss"] for e in r["log"]) for r in runs])
        for n, runs in by_data.items()}
last = {n: np.mean([r["log"][-1]["val_loss"] for r in runs]) for n, runs in by_data.items()}
for (L, d), row in zip(by_size, final):
    print(f"{L} layers x d {d:3d}: N = {by_size[(L, d)][0]['params']:7,d}, validation "
          f"{row.mean():.3f} (seeds {', '.join(f'{v:.3f}' for v in row)})")
train_last = {n: np.mean([r["log"][-1]["loss"] for r in runs]) for n, runs in by_data.items()}
for n in DATA_CHARS:
    print(f"training text of {actual[n]:9,d} characters: best validation {best[n]:.3f}, "
          f"last {last[n]:.3f}"
          f" (seeds {', '.join(str(r['log'][-1]['val_loss']) for r in by_data[n])}),"
          f" last training batch {train_last[n]:.3f}")
tiny = by_data[DATA_CHARS[0]]
rises = all(r["log"][-1]["val_loss"] > min(e["val_loss"] for e in r["log"]) + 0.1 for r in tiny)
print(f"on {actual[DATA_CHARS[0]]:,d} characters the validation loss rose by more than 0.1 "
      f"from its lowest on every seed: {rises}")
assert rises, "the text says the validation loss rose on every seed of the smallest text"
glue("ch05_data_train_last_tiny", train_last[DATA_CHARS[0]])
c_ours = 6 * N.max() * by_size[list(by_size)[-1]][0]["log"][-1]["chars"]
print(f"alpha = {alpha:.3f}, 95% bootstrap interval [{alpha_lo:.3f}, {alpha_hi:.3f}]; "
      f"largest run {c_ours:.1e} FLOPs; GPT-3 6 x 175e9 x 300e9 = {6 * 175e9 * 300e9:.2e}")
glue("ch05_scale_alpha", alpha)
glue("ch05_scale_alpha_lo", alpha_lo)
glue("ch05_scale_alpha_hi", alpha_hi)
glue("ch05_scale_alpha_loo_lo", min(loo))
glue("ch05_scale_alpha_loo_hi", max(loo))
glue("ch05_scale_n_min", N.min())
glue("ch05_scale_n_max", N.max())
glue("ch05_scale_loss_min", mean_final[-1])
glue("ch05_scale_loss_max", mean_final[0])
glue("ch05_scale_flops", c_ours)
glue("ch05_scale_gpt3_ratio", 6 * 175e9 * 300e9 / c_ours)
glue("ch05_scale_cpu", sum(r["cpu_s"] for r in scaling) / 60)
glue("ch05_scale_runs", len(scaling))
glue("ch05_scale_n_ratio", N.max() / N.min())
for key, n in zip(("tiny", "small", "mid", "full"), DATA_CHARS):
    glue(f"ch05_data_best_{key}", best[n])
    glue(f"ch05_data_last_{key}", last[n])

# %% [markdown]
# The {glue:text}`ch05_scale_runs:.0f` runs took
# {glue:text}`ch05_scale_cpu:.0f` CPU-minutes. From
# {glue:text}`ch05_scale_n_min:,.0f` to {glue:text}`ch05_scale_n_max:,.0f`
# parameters the validation loss after 800 steps falls from
# {glue:text}`ch05_scale_loss_max:.3f` to
# {glue:text}`ch05_scale_loss_min:.3f` nats per character. A power law fits
# it with exponent $\alpha = $ {glue:text}`ch05_scale_alpha:.3f` (95%
# bootstrap interval over the seeds
# {glue:text}`ch05_scale_alpha_lo:.3f` to
# {glue:text}`ch05_scale_alpha_hi:.3f`). That interval covers the noise
# of the seeds only. The five points do not lie on one line: leaving one
# size out moves $\alpha$ between {glue:text}`ch05_scale_alpha_loo_lo:.3f`
# and {glue:text}`ch05_scale_alpha_loo_hi:.3f`, and depth grows with width
# here (1, 2, 2, 3, 3 layers). The middle panel puts every
# evaluation of every run on one axis of compute, $6ND$ with $D$ the
# characters seen so far: at each budget, the lowest curve is the best
# that compute bought here.
#
# On the right, the 2-layer model of width 64 meets the data limit. On
# 24,000 characters it learns its training text by heart: its training
# loss falls to {glue:text}`ch05_data_train_last_tiny:.2f`, while its
# validation loss, lowest at {glue:text}`ch05_data_best_tiny:.2f`, rises
# to {glue:text}`ch05_data_last_tiny:.2f` by step 800, on every seed.
# On 104,000 characters it ends at {glue:text}`ch05_data_last_small:.3f`,
# above the {glue:text}`ch05_data_last_full:.3f` of the whole text. On
# 424,000 characters it ends at {glue:text}`ch05_data_last_mid:.3f`, as
# on the whole text. So 800 steps of this model need between 104,000 and
# 424,000 characters; more text than that buys nothing at this size and
# this budget.
#
# **What this study can show, and what it cannot.** It shows the shape
# in parameters: at the same data, a larger model is better, and a power
# law describes the five sizes. It shows how a budget of compute is spent
# along training, and where data runs out. It cannot measure
# Kaplan et al.'s exponents. Its sizes span a factor of
# {glue:text}`ch05_scale_n_ratio:.0f`, theirs a factor of about
# $2 \cdot 10^6$, and a line through five points over less than two decades
# says little about the four decades beyond. Its models are not
# trained to convergence (800 steps for every size, so the large ones are
# held back by the data they saw), its learning rate is not tuned per
# size, and its loss is per character, not per BPE token, so its exponent
# is not theirs to compare, even where the two numbers happen to be
# close. Its largest run used about
# {glue:text}`ch05_scale_flops:.1e` FLOPs, GPT-3 about
# {glue:text}`ch05_scale_gpt3_ratio:.0e` times more. And it says nothing
# about what appears only at scale, such as GPT-3's few-shot learning.
#
# **Two facts from the history.** GPT-2 was released in stages
# {cite}`solaiman2019release`: in February 2019 OpenAI published the paper
# and only the smallest model, saying the full one could be misused to
# write fake text at scale, then the 355M model in May, the 774M model in
# August and the full 1.5B model in November 2019, having found no strong
# evidence of misuse. GPT-3's 300B training tokens came from a weighted
# mix {cite}`brown2020`: filtered Common Crawl (60% of the mix), WebText2
# (22%), two book corpora (8% each) and English Wikipedia (3%). The mix
# is not in proportion to size: in the 300B tokens Wikipedia was seen 3.4
# times and WebText2 2.9 times, Common Crawl 0.44 times.

# %% [markdown]
# ## Summary
#
# * GPT is a Transformer decoder without cross-attention, pre-trained as a
#   left-to-right language model; we use GPT-2's **pre-norm** block with a
#   final LayerNorm and learned positions.
# * GPT-1 fine-tunes with a linear head on the extract token; its input
#   transformations turn every task into sequences: `[start] text
#   [extract]`, premise `[delim]` hypothesis, both orders for similarity
#   (summed), one sequence per answer for multiple choice.
# * GPT-2 does tasks from the prompt with no task-specific training (its
#   "zero-shot" prompts can hold example pairs); GPT-3 measured zero-,
#   one- and few-shot prompting systematically, across model sizes, with
#   no gradient update. A 2-layer attention-only GPT, trained for 500
#   steps on a mix of a few-shot retrieval task and repeated random
#   tokens, retrieves in context: its accuracy rises with every
#   demonstration, to about an ideal copier's,
#   after a switch during training (abrupt in this page's run). It does it with an induction
#   circuit: a previous-token head in layer 1 and (redundant) induction
#   heads in layer 2, found by their prefix-matching scores; zeroing all
#   the induction heads (in most runs all of layer 2) removes it, and
#   zeroing the previous-token head costs at least a third of it in most
#   runs. One layer
#   cannot: the control counts which labels its context holds, and never
#   comes near the 2-layer model. On the
#   few-shot task alone, the same model stayed at counting or partial
#   copying for 1,500 steps in earlier runs: full copying needs both heads
#   at once.
# * Temperature divides the logits before the softmax; top-k keeps the $k$
#   largest; top-p keeps the smallest prefix of mass $\ge p$, the crossing
#   token included.
# * The KV cache appends keys and values along the position axis; new
#   position $i$ sees the cache and new positions $\le i$. It chose the
#   same tokens; on the trained model it made 500 characters
#   {glue:text}`ch05_speedup_500:.0f` times faster in this run (the
#   figure moves with the machine's load), 50
#   characters only {glue:text}`ch05_speedup_50:.1f` times, because every
#   step pays a fixed cost for its calls; it costs $2LSD$ numbers per
#   sequence.
# * The chapter's `GPT`, trained on English prose for 5,000 steps, reaches
#   the Kneser-Ney 5-gram's loss, writes words and layout, and falls into
#   loops when decoded greedily; loaded with GPT-2's weights it gives
#   `transformers`' logits.
# * Across five sizes on a CPU, the loss falls with the parameters like a
#   power law (exponent {glue:text}`ch05_scale_alpha:.2f` here, over a
#   factor of {glue:text}`ch05_scale_n_ratio:.0f` in size); Kaplan et
#   al.'s laws span a factor of millions, which a CPU cannot. Trained on
#   24,000 characters, a small model learns them by heart and its
#   validation loss rises; 424,000 characters are enough for its 800 steps.
#
# **What is reproducible.** The check cells print the same numbers on every
# machine. The experiment's figures move with the seed, the thread count,
# the solution, the processor and the device (the spread tables say what
# moves each of them). On the machine that built this page, its run of
# seed 0 is the claims check's run of seed 0 with one thread, bit for bit.
# The claims are what held on the runs of the claims check. Times depend
# on the machine.
#
# ## Exercises
#
# 1. **Without the repeats.** Train the same 2-layer attention-only model
#    on the few-shot task alone (no repeated sequences, all 64 sequences
#    of a batch few-shot) for 500 and then 1,500 steps, plotting the 8-shot
#    accuracy and the in-context learning score every 50 steps. Does it
#    pass the counting level of the 1-layer control? Measure every head's
#    `prefix_matching_score`: does an induction head form? Then try a
#    quarter of repeated sequences instead of a half. (Open: no grader.)
# 2. **Post-norm.** Rewrite the attention-only block in GPT-1's post-norm
#    form, `x = norm(x + attn(x))` (no final LayerNorm), and train it again
#    without the warm-up. What happens to the switch?
# 3. **Fine-tuning head.** Add GPT-1's linear head on the last position
#    of the trained 2-layer model and fine-tune it to classify whether a
#    sequence is a few-shot sequence or a repeated random one, with and
#    without the auxiliary language-model loss. How few steps does it need,
#    and does the in-context accuracy survive the fine-tuning?
# 4. **Harder functions.** Replace the random injective $f$ by
#    $f(x) = $ label number $(x + s) \bmod 16$, with a random $s$ per
#    sequence: one demonstration determines $f$ for every letter. Does the
#    model, trained on it, answer letters it has not seen demonstrated
#    better than the ideal copier?
# 5. **When do the heads form?** (Open.) Train the 2-layer model again
#    with its seed, keep a copy of the weights every 25 steps, and plot,
#    along training, the prefix-matching score of each layer-2 head, the
#    previous-token score of each layer-1 head and the in-context learning
#    score on one plot. Do the previous-token head and the induction heads
#    appear at the same step as the switch, or one before the other? Olsson
#    et al. argue from such co-occurrence that the induction heads *are*
#    the phase change; what would you need to show that they cause it
#    (the ablations above are one part)?
# 6. **Cache memory.** Grouped-query attention shares one key/value head
#    between several query heads. How much smaller is the cache with 4
#    query heads and 1 key/value head, and what changes in
#    `attend_with_cache`?
# 7. **Sampling.** On the few-shot sequences the loss was on the labels
#    only, so the model was never trained to say that a letter follows a
#    label there. Retrain it with the loss on every next token of the
#    few-shot sequences, then sample 20 continuations of `a A c C` (up to
#    the 32 positions the model has) with `sample_next_token` in a loop
#    (the attention-only model keeps no cache), greedy, $\tau = 1$, top-k 3
#    and top-p 0.9. Which keep the `x y` alternation, and which stay
#    consistent with the demonstrated $f$?

# %% [markdown]
# ## References
#
# ```{bibliography}
# :filter: docname in docnames
# ```
