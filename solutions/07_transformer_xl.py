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
#     chapter: 07_transformer_xl
# ---

# %% [markdown]
# # 7. Transformer-XL and XLNet: memory, relative positions, permutations
#
# ## Motivation
#
# A Transformer language model (chapter 5) reads a window of $L$ tokens. To
# train it on a long text, the usual recipe cuts the text into segments of
# $L$ tokens and trains on each segment on its own, as the deep character
# models of Al-Rfou et al. {cite}`alrfou2019` did (the paper's "vanilla"
# baseline; ours, in the experiment, keeps XL's relative attention and drops
# only the memory). Two problems follow.
#
# * **Context fragmentation.** The first token of a segment has no context at
#   all, the second has one token of it, and *nothing* before the segment
#   boundary is ever visible: a dependency longer than $L$ cannot be learned,
#   and a shorter one is cut whenever a boundary falls inside it.
# * **Slow evaluation.** To give every token a full window at test time, the
#   vanilla model slides the window one token at a time and recomputes all
#   $L$ positions for every single prediction: $L$ positions computed per
#   predicted token, where a cache would compute one.
#
# Transformer-XL {cite}`dai2019` fixes both with two ideas. **Segment-level
# recurrence**: the hidden states computed for the previous segment are kept,
# with the gradient stopped, as a *memory* that the next segment attends to.
# **Relative positional encodings**: a score depends on the distance
# $i - j$ between query and key, never on absolute positions, so states
# computed for one segment can be reused in the next without positional
# confusion. XLNet {cite}`yang2019xlnet` builds on Transformer-XL and replaces
# BERT's `[MASK]` tokens (chapter 6) with a *permutation* language model, made
# possible by a two-stream attention.
#
# In this chapter you implement the memory, its attention mask, the relative
# encodings with the *rel-shift* trick (checked against a brute-force loop),
# a relative multi-head attention and an XL layer; you train a vanilla
# segment model and an XL model on a task whose dependency is longer than a
# segment, measure how evaluation with the cache beats the sliding window,
# and build XLNet's two attention masks, its two-stream attention and its
# target selection, then train a small permutation LM on English text.

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

_ = torch.manual_seed(0)

# %% [markdown]
# ## The math
#
# ### Segment-level recurrence
#
# Split a long sequence into segments $s_\tau = (x_{\tau,1}, \dots, x_{\tau,T})$
# and write $h^{n}_\tau \in \mathbb{R}^{T\times d}$ for the output of layer
# $n$ on segment $\tau$ ($h^0$ is the embedding). Transformer-XL computes
# layer $n$ of segment $\tau + 1$ as
#
# $$\tilde h^{n-1}_{\tau+1} = [\,\mathrm{SG}(m^{n-1}_{\tau}) \circ h^{n-1}_{\tau+1}\,], \qquad
#   q = h^{n-1}_{\tau+1} W_q, \quad k = \tilde h^{n-1}_{\tau+1} W_k, \quad v = \tilde h^{n-1}_{\tau+1} W_v ,$$
#
# where $\circ$ concatenates along the time axis, $\mathrm{SG}$ stops the
# gradient, and the memory $m^{n-1}_\tau$ is the last $M$ ("`mem_len`")
# states of $[m^{n-1}_{\tau-1} \circ h^{n-1}_\tau]$. Queries come from the
# current segment only; keys and values from memory and segment. Each layer
# keeps its own memory: the *input* of layer $n$ on earlier segments.
#
# The attention mask lets every query see every memory slot (all of it lies in
# the past) and the current segment causally: query $i$ sees current
# positions $j \le i$. Since layer $n$ on segment $\tau+1$ reads layer $n-1$
# on segment $\tau$, which read layer $n-2$ on segment $\tau - 1$, the
# longest dependency grows with depth: about $N \times M$ tokens for $N$
# layers (exactly $N M + i$ for the query at index $i$ of its segment, with
# segments of $M$ tokens), although each gradient stays within one segment.
# It is the recurrence of an RNN trained with truncated backpropagation
# through time: the state goes forward, the gradient does not; but here it
# goes from layer $n-1$ of one segment to layer $n$ of the next, one layer up
# per segment.
#
# ### Relative positions: the four terms
#
# With absolute encodings $U_i$ added to the embeddings $E_{x_i}$, the score
# between query $i$ and key $j$ expands into four terms:
#
# $$A^{\mathrm{abs}}_{i,j} = E_{x_i}^\top W_q^\top W_k E_{x_j} + E_{x_i}^\top W_q^\top W_k U_j
#   + U_i^\top W_q^\top W_k E_{x_j} + U_i^\top W_q^\top W_k U_j .$$
#
# Reusing states breaks this: the first token of segment $\tau$ and the first
# of segment $\tau+1$ would both carry $U_1$, and the model could not tell the
# memory from the current segment. Shaw et al. {cite}`shaw2018` first made
# the Transformer's attention depend on learned relative distances (clipped
# at a maximum distance, with a relative term on the values too; in the
# four-term view below they keep terms (a) and (b)); Transformer-XL rewrites
# the four terms with
# a relative encoding $R_{i-j}$ (sinusoidal, not learned) and two learned
# vectors $u, v$ that replace the query's position:
#
# $$A^{\mathrm{rel}}_{i,j} =
#   \underbrace{E_{x_i}^\top W_q^\top W_{k,E} E_{x_j}}_{(a)\ \text{content-content}}
# + \underbrace{E_{x_i}^\top W_q^\top W_{k,R} R_{i-j}}_{(b)\ \text{content-position}}
# + \underbrace{u^\top W_{k,E} E_{x_j}}_{(c)\ \text{global content bias}}
# + \underbrace{v^\top W_{k,R} R_{i-j}}_{(d)\ \text{global position bias}} .$$
#
# (a) says how much token $x_i$ wants token $x_j$; (b) how much it wants to
# look $i - j$ positions back; (c) how interesting $x_j$ is to any query; (d)
# how interesting distance $i-j$ is to any query (a recency bias, say). Keys
# are projected twice: content through $W_{k,E}$ ("`w_k`"), positions through
# $W_{k,R}$ ("`r_net`"). Grouped, with $q_i = W_q E_{x_i}$, $k_j = W_{k,E}E_{x_j}$,
# $r_{i-j} = W_{k,R}R_{i-j}$, one head computes
#
# $$A^{\mathrm{rel}}_{i,j} = (q_i + u)^\top k_j + (q_i + v)^\top r_{i-j},$$
#
# divided by $\sqrt{d_k}$ as usual. In multi-head attention $u$ and $v$ have
# one $d_k$-vector per head, shared by all positions (we give every layer
# its own pair; the paper's PyTorch code shares them across layers for its
# attention, `attn_type = 0`,
# its TensorFlow code by default, though its released WT103 and One Billion
# Word scripts untie them; both work).
#
# ### The rel-shift trick
#
# With memory, the keys are $k = M + T$ ("`klen`") states and the queries the
# last $T$ ("`qlen`"). Query $i$ (at absolute position $M + i$) and key $j$ are
# $M + i - j$ apart. Computing $(q_i + v)^\top r_{M+i-j}$ by gathering the
# vector $r_{M+i-j}$ for every pair would build a `(qlen, klen, d)` tensor
# (gathering from a score matrix instead needs only a `(qlen, klen)` index:
# exercise 5). Instead, compute
# $BD = (q + v)\,r^\top$ against the encodings of the positions
# $\text{klen}-1, \dots, 1, 0$ (in this order: column $c$ holds distance
# $\text{klen} - 1 - c$), a plain matrix product, and *re-index* it: the
# entry we want at $(i, j)$ sits in column $c = j + \text{qlen} - 1 - i$ of row $i$.
# Row $i$ must move left by $\text{qlen} - 1 - i$ columns: the last row stays,
# each row above moves one column more. The paper's code does this without
# any index arithmetic: pad one column of zeros in front, `(qlen, klen+1)`,
# reinterpret the same memory as `(klen+1, qlen)`, drop the first row, and
# reinterpret the rest as `(qlen, klen)`. Entries with $j > i + M$ (the
# future) come out as garbage, but the mask hides exactly those. We check the
# trick against a loop below, because it is easy to get wrong: in this
# layout, dropping the *last* row (`[:-1]`) instead of the first misaligns
# every score silently. (Implementations that lay out the encodings
# differently, padding the zero column at the end for instance, need their
# own convention: a shift is only right for its layout.)
#
# ### XLNet: a permutation language model
#
# BERT predicts masked tokens from both sides, but the `[MASK]` symbol never
# appears in fine-tuning and the masked tokens are predicted independently:
# in "New York is a city" with *New* and *York* masked, BERT predicts each
# from "is a city" alone, while an order that predicts *New* first predicts
# *York* from "New" as well. A traditional left-to-right language model
# predicts *York* from "New" but never from "is a city":
# every token from one side only. XLNet takes the expectation over
# **factorisation orders** $z$ (permutations of $1..T$):
#
# $$\max_\theta\ \mathbb{E}_{z\sim\mathcal{Z}_T}\Big[\sum_{t=1}^T \log p_\theta(x_{z_t}\mid x_{z_{<t}})\Big].$$
#
# The tokens stay in place (the positional encodings are unchanged); only the
# attention masks change. A permuted order is not a reordered sentence
# ("This is good" read as "This good is"): *good* stays the third token; it
# is only predicted at another step. Across orders, every token is
# predicted from every subset of the others, both sides included. To predict $x_{z_t}$ the
# model must know *which position* it is predicting, but not its content:
# **two-stream attention**. The *content stream* $h_{z_t}$ sees the tokens
# $z_{\le t}$, itself included (it is the representation used as a key by
# later tokens); the *query stream* $g_{z_t}$ sees $z_{<t}$ and its own
# position, never its own content, and predicts $x_{z_t}$. With
# $\mathrm{rank}[z_t] = t$, content stream $i$ sees $j$ iff
# $\mathrm{rank}[j] \le \mathrm{rank}[i]$, query stream iff
# $\mathrm{rank}[j] < \mathrm{rank}[i]$. **Partial prediction** trains only
# the last $T/K$ tokens of each order ($K = 6$ or $7$ in the paper), with a
# cut point $c$:
#
# $$\max_\theta\ \mathbb{E}_{z}\big[\log p_\theta(x_{z_{>c}} \mid x_{z_{\le c}})\big]
#   = \mathbb{E}_{z}\Big[\sum_{t=c+1}^{T} \log p_\theta(x_{z_t}\mid x_{z_{<t}})\Big],$$
#
# the paper's reason being optimisation: predicting every token of an order
# makes training converge slowly, so only the tokens with the longest
# context in the order, the last ones, are predicted. The released code picks the
# targets as n-gram spans, lets all non-targets see each other both ways
# and permutes locally; `permutation_masks` below gives the non-targets a
# causal order among themselves, which is simpler. XLNet is built on
# Transformer-XL: it reuses the segment memory (the permutation applies only
# inside the current segment) and the relative positional encodings, and
# adds relative *segment* encodings for its pairs of sentences.

# %% [markdown]
# ## Implementation
#
# ### The memory
#
# `update_memory` appends the new hidden states to the memory and keeps the
# last `mem_len` of them (the most recent), detached from the graph: the
# gradient of the next segment's loss never flows into the previous segment.
# Without the `detach`, every step would backpropagate through all earlier
# segments (and fail, since their graphs were freed).

# %% nbgrader={"grade": false, "grade_id": "update_memory", "locked": false, "schema_version": 3, "solution": true}
def update_memory(memory: torch.Tensor | None, hidden: torch.Tensor,
                  mem_len: int) -> torch.Tensor | None:
    """The memory for the next segment.

    memory: (B, M, D) or None (no memory yet); hidden: (B, T, D), the new states.
    Returns the last `mem_len` states of [memory; hidden] along time, detached from
    the autograd graph, shape (B, min(mem_len, M + T), D); None when mem_len == 0.
    """
    ### BEGIN SOLUTION
    if mem_len == 0:
        return None
    states = hidden if memory is None else torch.cat([memory, hidden], dim=1)  # (B, M+T, D)
    return states[:, -mem_len:].detach()                                       # (B, <=mem_len, D)
    ### END SOLUTION


# %%
mem = update_memory(None, torch.arange(6.0).reshape(1, 3, 2), mem_len=4)
mem = update_memory(mem, 10 + torch.arange(6.0).reshape(1, 3, 2), mem_len=4)
print(mem[0, :, 0])  # tensor([ 4., 10., 12., 14.])  (the last 4 time steps)
print(update_memory(mem, torch.zeros(1, 3, 2), mem_len=0))  # None


# %% [markdown]
# The gradient stops at the memory. This small helper (used by the graders
# too) says whether the returned memory is still attached to the graph of
# the hidden states:

# %%
def memory_keeps_gradient(memory: torch.Tensor | None, hidden: torch.Tensor, mem_len: int) -> bool:
    """Whether update_memory(memory, hidden, mem_len) still requires a gradient from `hidden`."""
    hidden = hidden.detach().clone().requires_grad_(True)
    out = update_memory(memory, hidden, mem_len)
    return bool(out is not None and out.requires_grad)


print(memory_keeps_gradient(None, torch.randn(1, 3, 2), 2))  # False


# %% [markdown]
# ### The attention mask
#
# Keys are `[memory; current]`: `mlen` memory slots, then `qlen` current
# positions. Query $i$ sees every memory slot and the current positions
# $j \le i$, that is key columns $0 .. \text{mlen} + i$. (Mask convention as
# in every chapter: boolean, **True = may attend**.)

# %% nbgrader={"grade": false, "grade_id": "xl_attention_mask", "locked": false, "schema_version": 3, "solution": true}
def xl_attention_mask(qlen: int, mlen: int,
                      device: torch.device | str | None = None) -> torch.Tensor:
    """(qlen, mlen + qlen) bool: query i may attend key j iff j < mlen + i + 1.

    Every memory slot (columns 0..mlen-1) is visible; the current segment is causal.
    """
    ### BEGIN SOLUTION
    return torch.ones(qlen, mlen + qlen, dtype=torch.bool, device=device).tril(mlen)
    ### END SOLUTION


# %%
print(xl_attention_mask(3, 2).int())
# tensor([[1, 1, 1, 0, 0],
#         [1, 1, 1, 1, 0],
#         [1, 1, 1, 1, 1]], dtype=torch.int32)

# %% tags=["skip-grading", "hide-input"]
import matplotlib.pyplot as plt
from attnkit.plot import heatmap

fig, ax = plt.subplots(figsize=(5, 2.8))
heatmap(xl_attention_mask(6, 4).float(), rows=[f"q{i}" for i in range(6)],
        cols=[f"m{j}" for j in range(4)] + [f"x{j}" for j in range(6)], ax=ax, colorbar=False,
        title="xl_attention_mask(6, 4): memory m always visible, current x causal")
plt.tight_layout()
plt.show()

# %% [markdown]
# ### Relative positional encodings
#
# $R$ is the sinusoid of chapter 3, but laid out as in the paper's code: the
# `sin` of all frequencies in the first half, the `cos` in the second half,
# and the rows ordered by *decreasing* distance, $\text{klen}-1, \dots, 0$, so
# that column $c$ of the scores against $R$ is distance $\text{klen}-1-c$.

# %% nbgrader={"grade": false, "grade_id": "relative_positional_encoding", "locked": false, "schema_version": 3, "solution": true}
def relative_positional_encoding(klen: int, d_model: int,
                                 device: torch.device | str | None = None) -> torch.Tensor:
    """(klen, d_model) float32: row c encodes the distance p = klen - 1 - c.

    R[c, k] = sin(p * f_k), R[c, d/2 + k] = cos(p * f_k), f_k = 1 / 10000^(2k/d), k < d/2.
    """
    ### BEGIN SOLUTION
    pos = torch.arange(klen - 1, -1, -1, dtype=torch.float64, device=device)      # (klen,)
    two_k = torch.arange(0, d_model, 2, dtype=torch.float64, device=device)       # (d/2,)
    angle = pos[:, None] / 10000 ** (two_k / d_model)                             # (klen, d/2)
    return torch.cat([angle.sin(), angle.cos()], dim=-1).float()                  # (klen, d)
    ### END SOLUTION


# %%
R = relative_positional_encoding(5, 4)
print(R.shape, R[-1])  # torch.Size([5, 4]) tensor([0., 0., 1., 1.])  (distance 0)

# %% [markdown]
# ### rel-shift

# %% nbgrader={"grade": false, "grade_id": "rel_shift", "locked": false, "schema_version": 3, "solution": true}
def rel_shift(x: torch.Tensor) -> torch.Tensor:
    """Re-index scores computed against distances klen-1 .. 0 to key positions.

    x: (..., qlen, klen), qlen <= klen, column c of row i scored against distance klen-1-c.
    Returns (..., qlen, klen) with out[..., i, j] = x[..., i, j + qlen - 1 - i] for every
    j <= i + klen - qlen (the entries the XL mask keeps; the others are unspecified).
    """
    ### BEGIN SOLUTION
    *lead, qlen, klen = x.shape
    padded = torch.cat([x.new_zeros(*lead, qlen, 1), x], dim=-1)    # (..., qlen, klen+1)
    padded = padded.reshape(*lead, klen + 1, qlen)                  # the same memory, re-read
    return padded[..., 1:, :].reshape(*lead, qlen, klen)            # (..., qlen, klen)
    ### END SOLUTION


# %% [markdown]
# **The proof on a small example.** Fill the scores with labels: `x[i, c]`
# $= 10\,i + (\text{klen}-1-c)$, "row $i$, distance $p$". After the shift,
# entry $(i, j)$ must read distance $\text{mlen} + i - j$, the true distance
# between query $i$ (absolute position $\text{mlen} + i$) and key $j$:

# %%
qlen, klen = 3, 5
dist_label = torch.arange(klen - 1, -1, -1).repeat(qlen, 1)            # (qlen, klen): distances
x = 10 * torch.arange(qlen)[:, None] + dist_label
print(x)
print(rel_shift(x) * xl_attention_mask(qlen, klen - qlen))
# tensor([[ 4,  3,  2,  1,  0],
#         [14, 13, 12, 11, 10],
#         [24, 23, 22, 21, 20]])
# tensor([[ 2,  1,  0,  0,  0],
#         [13, 12, 11, 10,  0],
#         [24, 23, 22, 21, 20]])


# %% [markdown]
# Row 0 (absolute position 2) sees keys 0, 1, 2 at distances 2, 1, 0; row 2
# sees all five, at distances 4..0. Now the same against a brute-force loop,
# for many shapes, with and without memory:

# %%
def rel_shift_loop(x: torch.Tensor) -> torch.Tensor:
    """The definition of rel_shift, one entry at a time (zeros where unspecified)."""
    *_, qlen, klen = x.shape
    out = torch.zeros_like(x)
    for i in range(qlen):
        for j in range(i + klen - qlen + 1):
            out[..., i, j] = x[..., i, j + qlen - 1 - i]
    return out


for qlen, klen in [(1, 1), (1, 4), (4, 4), (3, 8), (7, 9), (5, 16)]:
    x = torch.randn(2, 3, qlen, klen)
    keep = xl_attention_mask(qlen, klen - qlen)
    assert torch.equal(rel_shift(x) * keep, rel_shift_loop(x)), (qlen, klen)
print("rel_shift agrees with the loop")  # rel_shift agrees with the loop

# %% [markdown]
# ### Relative attention scores
#
# `rel_attention_scores` puts the four terms together: (a)+(c) as
# $(q + u)k^\top$, (b)+(d) as the rel-shifted $(q+v)r^\top$. Here `r` is the
# projected encoding $W_{k,R} R$, split into heads, shape `(H, klen, d)`:
# it does not depend on the batch.

# %% nbgrader={"grade": false, "grade_id": "rel_attention_scores", "locked": false, "schema_version": 3, "solution": true}
def rel_attention_scores(q: torch.Tensor, k: torch.Tensor, r: torch.Tensor,
                         u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Transformer-XL's scores ((q + u) k^T + rel_shift((q + v) r^T)) / sqrt(d).

    q: (B, H, qlen, d), k: (B, H, klen, d), r: (H, klen, d) (distances klen-1 .. 0),
    u, v: (H, d). Returns (B, H, qlen, klen); entries the XL mask hides are unspecified.
    """
    ### BEGIN SOLUTION
    B, H, qlen, d = q.shape
    ac = (q + u[:, None, :]) @ k.transpose(-2, -1)                        # (B, H, qlen, klen)
    bd = torch.einsum("bhid,hcd->bhic", q + v[:, None, :], r)             # (B, H, qlen, klen)
    return (ac + rel_shift(bd)) / math.sqrt(d)                            # (B, H, qlen, klen)
    ### END SOLUTION


# %% [markdown]
# The check spells out the four terms for every pair $(i, j)$ with an
# explicit distance $\text{mlen} + i - j$:

# %%
def rel_scores_loop(q, k, r, u, v):
    """The four terms, pair by pair (zeros where the XL mask hides)."""
    B, H, qlen, d = q.shape
    klen = k.shape[2]
    mlen = klen - qlen
    out = torch.zeros(B, H, qlen, klen, dtype=q.dtype)
    for i in range(qlen):
        for j in range(mlen + i + 1):
            r_ij = r[:, klen - 1 - (mlen + i - j)]                      # (H, d): distance mlen+i-j
            a = (q[:, :, i] * k[:, :, j]).sum(-1)                       # content-content
            b = (q[:, :, i] * r_ij).sum(-1)                             # content-position
            c = (u * k[:, :, j]).sum(-1)                                # global content bias
            d_ = (v * r_ij).sum(-1)                                     # global position bias
            out[:, :, i, j] = (a + b + c + d_) / math.sqrt(d)
    return out


g = torch.Generator().manual_seed(0)
for qlen, mlen in [(4, 0), (3, 5), (1, 6)]:
    klen = qlen + mlen
    q, k = torch.randn(2, 3, qlen, 8, generator=g), torch.randn(2, 3, klen, 8, generator=g)
    r, u, v = (torch.randn(3, n, 8, generator=g) for n in (klen, 1, 1))
    scores = rel_attention_scores(q, k, r, u[:, 0], v[:, 0]) * xl_attention_mask(qlen, mlen)
    assert torch.allclose(scores, rel_scores_loop(q, k, r, u[:, 0], v[:, 0]), atol=1e-5)
print("the four terms agree")  # the four terms agree

# %% [markdown]
# ### Relative multi-head attention
#
# The module follows chapter 3's `MultiHeadAttention` (projections `w_q`,
# `w_k`, `w_v`, `w_o`, each `nn.Linear(d_model, d_model)` with bias) and adds
# what relative attention needs: `r_net`, `nn.Linear(d_model, d_model,
# bias=False)`, projecting the relative encodings, and the biases `u` and `v`,
# parameters of shape `(H, d_k)` initialised to **zeros** (the model learns
# them; the paper's code draws them from a small normal). The bias $b_q$ of
# `w_q` is redundant with them: it is added to every query, so it adds
# $b_q^\top k_j$ and $b_q^\top r_{i-j}$, terms of the same form as (c) and (d);
# only $b_q + u$ and $b_q + v$ matter. The paper's code has no bias on any
# of its attention projections; we keep chapter 3's `nn.Linear` with bias. Keys and values
# come from `[memory; x]`, queries from `x`; the XL mask is built inside, and
# the weights of the last call are kept in `self.attn`. We use no dropout in
# this chapter.

# %% nbgrader={"grade": false, "grade_id": "RelMultiHeadAttention", "locked": false, "schema_version": 3, "solution": true}
class RelMultiHeadAttention(nn.Module):
    """Transformer-XL's relative multi-head self-attention over [memory; x].

    Attributes: `w_q`, `w_k`, `w_v`, `w_o` (nn.Linear(d_model, d_model), with bias),
    `r_net` (nn.Linear(d_model, d_model, bias=False)), `u` and `v` (nn.Parameter (H, d_k),
    zeros at initialisation). Head h takes features [h*d_k, (h+1)*d_k) as in chapter 3.

    forward(x (B, T, D), memory (B, M, D) or None) -> (B, T, D): queries from x, keys and
    values from [memory; x], r = r_net(relative_positional_encoding(M + T, D)) split into
    heads (H, M+T, d_k), scores from rel_attention_scores, masked by xl_attention_mask(T, M)
    (masked weights exactly 0), softmax over keys, weighted values, heads merged, w_o.
    After a call, `self.attn` holds the weights (B, H, T, M + T).
    """

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        ### BEGIN SOLUTION
        assert d_model % n_heads == 0, "d_model must be a multiple of n_heads"
        self.n_heads = n_heads
        d_k = d_model // n_heads
        self.w_q = nn.Linear(d_model, d_model)
        self.w_k = nn.Linear(d_model, d_model)
        self.w_v = nn.Linear(d_model, d_model)
        self.w_o = nn.Linear(d_model, d_model)
        self.r_net = nn.Linear(d_model, d_model, bias=False)
        self.u = nn.Parameter(torch.zeros(n_heads, d_k))
        self.v = nn.Parameter(torch.zeros(n_heads, d_k))
        self.attn: torch.Tensor | None = None
        ### END SOLUTION

    def forward(self, x: torch.Tensor, memory: torch.Tensor | None = None) -> torch.Tensor:
        ### BEGIN SOLUTION
        B, T, D = x.shape
        H = self.n_heads
        M = 0 if memory is None else memory.shape[1]
        K = M + T
        context = x if memory is None else torch.cat([memory, x], dim=1)   # (B, K, D)
        q = self.w_q(x).reshape(B, T, H, D // H).transpose(1, 2)           # (B, H, T, d_k)
        k = self.w_k(context).reshape(B, K, H, D // H).transpose(1, 2)     # (B, H, K, d_k)
        v = self.w_v(context).reshape(B, K, H, D // H).transpose(1, 2)     # (B, H, K, d_k)
        R = relative_positional_encoding(K, D, device=x.device).to(x.dtype)  # (K, D)
        r = self.r_net(R).reshape(K, H, D // H).transpose(0, 1)              # (H, K, d_k)
        scores = rel_attention_scores(q, k, r, self.u, self.v)               # (B, H, T, K)
        mask = xl_attention_mask(T, M, device=x.device)                      # (T, K)
        weights = scores.masked_fill(~mask, float("-inf")).softmax(-1)       # (B, H, T, K)
        self.attn = weights.detach()
        out = (weights @ v).transpose(1, 2).reshape(B, T, D)                 # (B, T, D)
        return self.w_o(out)
        ### END SOLUTION


# %%
torch.manual_seed(0)
rel_attn = RelMultiHeadAttention(d_model=16, n_heads=4)
x, memory = torch.randn(2, 3, 16), torch.randn(2, 5, 16)
print(rel_attn(x, memory).shape, rel_attn.attn.shape)
print(rel_attn.attn[0, 0].sum(-1), rel_attn.attn[0, 0, 0, 6:])
# torch.Size([2, 3, 16]) torch.Size([2, 4, 3, 8])
# tensor([1.0000, 1.0000, 1.0000]) tensor([0., 0.])  (query 0 sees the memory and itself)

# %% [markdown]
# ### The XL layer
#
# One post-norm layer, as in the paper's default configuration: relative
# attention over `[memory; x]`, residual and LayerNorm, a ReLU feed-forward,
# residual and LayerNorm. It returns its output and the memory for the next
# segment: `update_memory` of its *input* `x`, because the memory of layer $n$
# holds the states that enter layer $n$.

# %% nbgrader={"grade": false, "grade_id": "XLLayer", "locked": false, "schema_version": 3, "solution": true}
class XLLayer(nn.Module):
    """A post-norm Transformer-XL layer whose forward takes and returns memory.

    Attributes: `attn` (RelMultiHeadAttention(d_model, n_heads)), `norm1`, `norm2`
    (nn.LayerNorm(d_model)), `linear1` (nn.Linear(d_model, d_ff)), `linear2`
    (nn.Linear(d_ff, d_model)).

    forward(x (B, T, D), memory (B, M, D) or None, mem_len) -> (out (B, T, D), new_memory):
    h = norm1(x + attn(x, memory)); out = norm2(h + linear2(relu(linear1(h))));
    new_memory = update_memory(memory, x, mem_len) (the layer's input, detached).
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int) -> None:
        super().__init__()
        ### BEGIN SOLUTION
        self.attn = RelMultiHeadAttention(d_model, n_heads)
        self.norm1 = nn.LayerNorm(d_model)
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.norm2 = nn.LayerNorm(d_model)
        ### END SOLUTION

    def forward(self, x: torch.Tensor, memory: torch.Tensor | None = None,
                mem_len: int = 0) -> tuple[torch.Tensor, torch.Tensor | None]:
        ### BEGIN SOLUTION
        h = self.norm1(x + self.attn(x, memory))                                 # (B, T, D)
        out = self.norm2(h + self.linear2(torch.relu(self.linear1(h))))          # (B, T, D)
        return out, update_memory(memory, x, mem_len)
        ### END SOLUTION


# %% [markdown]
# A small language model around it (given code): an embedding (no absolute
# positions anywhere: all the order information comes from $R$), `n_layers`
# XL layers, each with its own memory, and an output layer. With
# `mem_len = 0` it is the vanilla segment model with relative positions: the
# same network, without the memory.

# %%
class XLLanguageModel(nn.Module):
    """Embedding, `n_layers` XLLayer's and a linear output; forward(tokens, mems, mem_len)."""

    def __init__(self, vocab_size: int, d_model: int, n_heads: int, d_ff: int,
                 n_layers: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        self.layers = nn.ModuleList(XLLayer(d_model, n_heads, d_ff) for _ in range(n_layers))
        self.out = nn.Linear(d_model, vocab_size)

    def forward(self, tokens: torch.Tensor, mems: list | None = None,
                mem_len: int = 0) -> tuple[torch.Tensor, list]:
        """tokens (B, T) -> (logits (B, T, V), the memories for the next segment, one a layer)."""
        h = self.embed(tokens)                                                   # (B, T, D)
        mems = mems if mems is not None else [None] * len(self.layers)
        new_mems = []
        for layer, memory in zip(self.layers, mems):
            h, new_memory = layer(h, memory, mem_len)                            # (B, T, D)
            new_mems.append(new_memory)
        return self.out(h), new_mems


# %% [markdown]
# ### XLNet's two masks
#
# `permutation_masks` turns a factorisation order into the two masks of
# two-stream attention. `perm[t]` is the position predicted at step $t$; its
# inverse, `rank`, says at which step each position comes.

# %% nbgrader={"grade": false, "grade_id": "permutation_masks", "locked": false, "schema_version": 3, "solution": true}
def permutation_masks(perm: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """XLNet's masks for the factorisation order `perm` (T,) long, a permutation of 0..T-1.

    With rank[perm[t]] = t: content[i, j] = rank[j] <= rank[i] (the content stream sees
    itself), query[i, j] = rank[j] < rank[i] (the query stream never sees its own content).
    Returns (content (T, T) bool, query (T, T) bool), on perm's device.
    """
    ### BEGIN SOLUTION
    rank = torch.empty_like(perm)
    rank[perm] = torch.arange(len(perm), device=perm.device)                # (T,)
    content = rank[None, :] <= rank[:, None]                                # (T, T)
    query = rank[None, :] < rank[:, None]                                   # (T, T)
    return content, query
    ### END SOLUTION


# %%
content, query = permutation_masks(torch.tensor([2, 0, 3, 1]))
print(content.int())
print(query.int())
# tensor([[1, 0, 1, 0],
#         [1, 1, 1, 1],
#         [0, 0, 1, 0],
#         [1, 0, 1, 1]], dtype=torch.int32)
# tensor([[0, 0, 1, 0],
#         [1, 0, 1, 1],
#         [0, 0, 0, 0],
#         [1, 0, 1, 0]], dtype=torch.int32)

# %% [markdown]
# Position 2 comes first in this order: its query stream sees nothing (in
# XLNet it would still see the memory), its content stream only itself.
# Position 1 comes last and sees everything else. With the identity order the
# content mask is the causal mask of chapter 5.
#
# ### Two-stream attention
#
# One attention step updates both streams. Keys and values come from the
# content stream $h$ only, for both. The content stream queries with $h$
# under the content mask; the query stream queries with $g$ under the query
# mask. Both use the same projections, as in XLNet: `w_q`, `w_k`, `w_v`,
# `w_o`, each `nn.Linear(d_model, d_model, bias=False)` (XLNet's projections
# have no bias). Heads split the features as in chapter 3. The query stream
# of the first position in the order has no key at all (XLNet would give it
# the memory); a softmax over no key is NaN, so its weights are set to
# zero, and its output is `w_o(0) = 0`. We leave out XLNet's relative terms
# and its memory: they enter as in `RelMultiHeadAttention`.

# %% nbgrader={"grade": false, "grade_id": "TwoStreamAttention", "locked": false, "schema_version": 3, "solution": true}
class TwoStreamAttention(nn.Module):
    """XLNet's two-stream multi-head attention, without relative terms or memory.

    Attributes: `w_q`, `w_k`, `w_v`, `w_o` (nn.Linear(d_model, d_model, bias=False)), shared by
    both streams; `n_heads`. Head h takes features [h*d_k, (h+1)*d_k) as in chapter 3.

    forward(h (B, T, D) content stream, g (B, T, D) query stream, perm (T,) the factorisation
    order, shared by the batch) -> (new h, new g), (B, T, D) each. Keys and values are w_k(h)
    and w_v(h) for both streams. The content stream's queries are w_q(h), masked by the content
    mask of permutation_masks(perm); the query stream's are w_q(g), masked by the query mask.
    Scores are scaled by 1/sqrt(d_k), masked keys get weight exactly 0, and a row with no key
    (the query stream of perm[0]) gets all-zero weights, never NaN. Heads merged, then w_o.
    """

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        ### BEGIN SOLUTION
        assert d_model % n_heads == 0, "d_model must be a multiple of n_heads"
        self.n_heads = n_heads
        self.w_q = nn.Linear(d_model, d_model, bias=False)
        self.w_k = nn.Linear(d_model, d_model, bias=False)
        self.w_v = nn.Linear(d_model, d_model, bias=False)
        self.w_o = nn.Linear(d_model, d_model, bias=False)
        ### END SOLUTION

    def forward(self, h: torch.Tensor, g: torch.Tensor,
                perm: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ### BEGIN SOLUTION
        B, T, D = h.shape
        H = self.n_heads
        content, query = permutation_masks(perm.to(h.device))                # (T, T) each
        k = self.w_k(h).reshape(B, T, H, D // H).transpose(1, 2)             # (B, H, T, d_k)
        v = self.w_v(h).reshape(B, T, H, D // H).transpose(1, 2)             # (B, H, T, d_k)

        def attend(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            q = self.w_q(x).reshape(B, T, H, D // H).transpose(1, 2)         # (B, H, T, d_k)
            scores = q @ k.transpose(-2, -1) / math.sqrt(D // H)             # (B, H, T, T)
            weights = scores.masked_fill(~mask, float("-inf")).softmax(-1)
            weights = torch.nan_to_num(weights)                              # a row with no key: 0
            return self.w_o((weights @ v).transpose(1, 2).reshape(B, T, D))  # (B, T, D)

        return attend(h, content), attend(g, query)
        ### END SOLUTION


# %%
torch.manual_seed(0)
layer = TwoStreamAttention(8, 2)
perm = torch.tensor([2, 0, 3, 1])
h, g = torch.randn(1, 4, 8), torch.randn(1, 4, 8)
new_h, new_g = layer(h, g, perm)
print(new_h.shape, new_g.shape)                                      # (1, 4, 8) twice
print(new_g[0, 2].abs().max().item())                                # 0.0: position 2 comes first
h_other = h.clone()
h_other[0, 3] += 1.0                                                 # change the token at 3
print(torch.allclose(layer(h_other, g, perm)[1][0, 3], new_g[0, 3]))  # True: g at 3 never reads it
print(torch.allclose(layer(h_other, g, perm)[0][0, 3], new_h[0, 3]))  # False: h at 3 does
# torch.Size([1, 4, 8]) torch.Size([1, 4, 8])
# 0.0
# True
# False

# %% [markdown]
# ### Target selection
#
# XLNet does not train every step of an order. It cuts the order and
# predicts only the last $1/K$ of its steps, the ones with the most context
# ($K = 6$ in the paper). `partial_prediction_targets` returns which
# positions are targets and a one-hot `target_mapping` with one row per
# target, as the authors' data pipeline builds it (their rows follow the
# sequence, ours the order). Hugging Face's model accepts such a mapping, but
# its data collator passes the identity, one row per position. With one row
# per target, the authors' query stream has $T/K$ rows from the first layer
# on: its query projection, output projection and feed-forward run on $T/K$
# rows. Its attention does not shrink: every layer scatters the query rows to
# their positions with `target_mapping`, scores all $T$ positions against
# the keys, and gathers the $T/K$ rows back. This chapter's model keeps the
# query stream at all $T$ positions, which is simpler to read, and uses
# `target_mapping` only at the output layer. The targets' rows are the same
# either way: a query row attends to the content stream, never to another
# query row.

# %% nbgrader={"grade": false, "grade_id": "partial_prediction_targets", "locked": false, "schema_version": 3, "solution": true}
def partial_prediction_targets(perm: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The targets of partial prediction: the positions of the last T // k steps of `perm` (T,).

    Returns (is_target (T,) bool, True at those positions; target_mapping (T // k, T) float32,
    row s one-hot at the position of the s-th target, in the order's sequence), on perm's device.
    Raises ValueError unless 1 <= k <= T.
    """
    ### BEGIN SOLUTION
    T = len(perm)
    if not 1 <= k <= T:
        raise ValueError(f"k must be between 1 and the length {T}, got {k}")
    targets = perm[T - T // k:]                                            # (n,) positions
    is_target = torch.zeros(T, dtype=torch.bool, device=perm.device)
    is_target[targets] = True
    return is_target, F.one_hot(targets, T).float()                        # (T,), (n, T)
    ### END SOLUTION


# %%
perm = torch.tensor([4, 1, 5, 0, 3, 2])
is_target, mapping = partial_prediction_targets(perm, k=3)
print(is_target.int().tolist())                                      # positions 3 and 2
print(mapping)                                                       # rows: position 3, then 2
g = torch.randn(6, 8)
print(torch.equal(mapping @ g, g[[3, 2]]))                           # True: the targets' rows
# [0, 0, 1, 1, 0, 0]
# tensor([[0., 0., 0., 1., 0., 0.],
#         [0., 0., 1., 0., 0., 0.]])
# True


# %% [markdown]
# ## Check
#
# **The cache is exact.** With a memory long enough to hold everything seen
# so far, reading a sequence segment by segment must give the same logits as
# reading it in one piece: the memory holds exactly the states the one-piece
# pass would compute, and relative positions make them mean the same thing in
# both. (With absolute positions, the second segment would have to be told
# its offset; with relative ones there is nothing to tell.)

# %%
torch.manual_seed(0)
lm = XLLanguageModel(vocab_size=11, d_model=16, n_heads=2, d_ff=32, n_layers=2).eval()
tokens = torch.randint(11, (2, 12))
with torch.no_grad():
    whole, _ = lm(tokens)                                                  # (2, 12, 11)
    pieces, mems = [], None
    for seg in tokens.split(4, dim=1):                                     # 3 segments of 4
        logits, mems = lm(seg, mems, mem_len=12)
        pieces.append(logits)
print(torch.allclose(torch.cat(pieces, dim=1), whole, atol=1e-5))          # True
print([m.shape[1] for m in mems])                                          # [12, 12]

# %% [markdown]
# ## Experiment
#
# ### A dependency longer than a segment
#
# The task (generated in code, `recall_stream` below) is a stream of
# episodes. An episode shows a *value* token $V_x$ (one of 8), then $d - 1$
# noise tokens (16 noise symbols, uniform), then a query token `Q`, after
# which the model must output the answer $A_x$; 16 to 24 more noise tokens
# separate it from the next episode. The distance $d$ from the value to `Q`
# is uniform in 1..48. Only the answer is scored (the loss is the
# cross-entropy at the `Q` positions); a model that cannot see the value is
# at chance, 1/8.
#
# Both models are the same network, 2 layers, $d_\text{model} = 64$, 4 heads,
# $d_{ff} = 128$, relative positions, PyTorch's default initialisation with
# $u = v = 0$, trained on segments of $T = 16$ tokens, 64 streams a batch,
# for 1,000 steps of Adam (learning rate $2\cdot10^{-3}$, gradient norm clipped
# at 1.0). The **vanilla** model reads each segment alone (`mem_len = 0`);
# the **XL** model reads the streams in order and carries a memory of
# $M = 16$ states per layer from segment to segment. Same data, same steps,
# same parameters. (The paper's vanilla baseline, Al-Rfou et al.'s model,
# used absolute positions; ours shares XL's relative attention, so the two
# differ only in the memory.)
#
# We evaluate on 128 fresh streams of 641 tokens (640 scored positions) in six readings: the vanilla
# model **segment by segment** (as trained); the vanilla model with a
# **sliding window** (every query read with the 15 tokens before it, its best
# case within a segment's length); the XL model segment by segment **with
# memory**, `mem_len = 16` as in training; as a **control**, the *vanilla*
# model read with the same memory (evaluation only: it never saw a memory in
# training); and both models read as the paper evaluates, with a **longer
# memory** and the same number of keys for every query (below).
#
# The experiment is one function, `recall(seed, threads)`: it sets the thread
# count (`torch.set_num_threads`) and seeds every generator it uses with
# `seed` (`attnkit.seed_everything`), so no earlier cell changes its figures;
# the evaluation streams are the same in every run. The page runs it with
# seed 0 on one thread, and a fresh process with the same seed and thread
# count gives the same figures. The claims check
# (`python -m course claims 07`) runs it with seeds 0 to 4, on 1 and 2
# threads, with this chapter's solution and with an independent one (20
# runs). The independent solution gives the same bits as this one in every
# run, so the claims rest on 10 distinct trainings, not 20. Every conclusion
# below marked as a claim is checked on all of them; the others are this
# run's figures, and the text says so.

# %% tags=["skip-grading", "hide-input"]
import time

from attnkit.claims import claim, experiment, spread

N_NOISE, N_VALUES, MAX_DIST = 16, 8, 48
Q_TOKEN = N_NOISE + N_VALUES                     # tokens: noise, values V_x, Q, answers A_x
VOCAB = Q_TOKEN + 1 + N_VALUES
SEG, MEM, LONG_MEM, BATCH, STEPS = 16, 16, 48, 64, 1000
EVAL_STREAMS, EVAL_SEED = 128, 1000
device = attnkit.pick_device()


def recall_stream(n: int, length: int, generator: torch.Generator):
    """n streams of `length` tokens and, at each Q, its distance to the value (0 elsewhere)."""
    tokens = torch.empty(n, length, dtype=torch.long)
    dist = torch.zeros(n, length, dtype=torch.long)
    for b in range(n):
        seq, ds = [], []
        while len(seq) < length:
            d = int(torch.randint(1, MAX_DIST + 1, (1,), generator=generator))
            gap = int(torch.randint(16, 25, (1,), generator=generator))
            value = int(torch.randint(N_VALUES, (1,), generator=generator))
            noise = torch.randint(N_NOISE, (d - 1 + gap,), generator=generator).tolist()
            answer = Q_TOKEN + 1 + value
            seq += [N_NOISE + value] + noise[:d - 1] + [Q_TOKEN, answer] + noise[d - 1:]
            ds += [0] * d + [d] + [0] * (gap + 1)
        tokens[b], dist[b] = torch.tensor(seq[:length]), torch.tensor(ds[:length])
    return tokens, dist


def train_recall(mem_len: int, seed: int, tokens: torch.Tensor,
                 dist: torch.Tensor) -> tuple[XLLanguageModel, list[float]]:
    """Train on the segments of `tokens` in order, carrying the memory when mem_len > 0."""
    torch.manual_seed(seed)
    model = XLLanguageModel(VOCAB, d_model=64, n_heads=4, d_ff=128, n_layers=2).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    mems, losses = None, []
    model.train()
    for s in range(STEPS):
        x = tokens[:, s * SEG:(s + 1) * SEG]                                    # (B, T)
        y = tokens[:, s * SEG + 1:(s + 1) * SEG + 1]                            # (B, T) next tokens
        scored = dist[:, s * SEG:(s + 1) * SEG] > 0                             # (B, T) at Q
        logits, mems = model(x, mems, mem_len)
        loss = F.cross_entropy(logits[scored], y[scored])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    return model.eval(), losses


@torch.no_grad()
def read_segments(model: XLLanguageModel, tokens: torch.Tensor, dist: torch.Tensor,
                  seg: int, mem_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(correct, count), each (MAX_DIST + 1, SEG): by distance d and by the query's index
    i = position mod SEG (its index in its training-size segment), reading `seg` tokens a call."""
    correct = torch.zeros(MAX_DIST + 1, SEG, device=device)
    count = torch.zeros(MAX_DIST + 1, SEG, device=device)
    index = (torch.arange(tokens.shape[1], device=device) % SEG).expand_as(tokens)  # (B, L)
    mems = None
    for s in range((tokens.shape[1] - 1) // seg):
        part = slice(s * seg, (s + 1) * seg)
        logits, mems = model(tokens[:, part], mems, mem_len)                   # (B, seg, V)
        hit = (logits.argmax(-1) == tokens[:, s * seg + 1:(s + 1) * seg + 1]).float()
        d, i = dist[:, part], index[:, part]
        at_q = d > 0
        correct.index_put_((d[at_q], i[at_q]), hit[at_q], accumulate=True)
        count.index_put_((d[at_q], i[at_q]), torch.ones_like(hit[at_q]), accumulate=True)
    return correct.cpu(), count.cpu()


@torch.no_grad()
def read_window(model: XLLanguageModel, tokens: torch.Tensor, dist: torch.Tensor,
                window: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(correct, count) as read_segments, each query read with the query and its window - 1
    predecessors (all windows in one batch)."""
    b, t = torch.nonzero(dist[:, window - 1:-1] > 0, as_tuple=True)
    t = t + window - 1                                                    # query positions
    idx = t[:, None] + torch.arange(1 - window, 1, device=device)        # (N, window)
    logits, _ = model(tokens[b[:, None], idx])                            # (N, window, V)
    hit = (logits[:, -1].argmax(-1) == tokens[b, t + 1]).float().cpu()
    d, i = dist[b, t].cpu(), (t % SEG).cpu()
    correct = torch.zeros(MAX_DIST + 1, SEG).index_put_((d, i), hit, accumulate=True)
    count = torch.zeros(MAX_DIST + 1, SEG).index_put_((d, i), torch.ones_like(hit), accumulate=True)
    return correct, count


_d = torch.arange(MAX_DIST + 1)[:, None]                                  # (MAX_DIST + 1, 1)
_i = torch.arange(SEG)[None, :]                                           # (1, SEG)
QUERIES = {"near": (_d >= 1) & (_d < SEG), "mid": (_d >= SEG) & (_d < 2 * SEG),
           "far": _d >= 2 * SEG,
           # beyond the segment, within one attention hop of the memory: d <= M + i
           "hop": (_d >= SEG) & (_d <= MEM + _i),
           # beyond one hop, within two (layer 1's memory relays it): M + i < d <= 2M + i
           "relay": (_d > MEM + _i) & (_d <= 2 * MEM + _i),
           "unreachable": _d > 2 * MEM + _i}
QUERIES = {k: m.expand(MAX_DIST + 1, SEG) for k, m in QUERIES.items()}   # each (MAX_DIST + 1, SEG)


def accuracy(res: tuple[torch.Tensor, torch.Tensor], which: str) -> float:
    """Accuracy over the queries of one group of QUERIES."""
    correct, count = res
    keep = QUERIES[which]
    return (correct[keep].sum() / count[keep].sum()).item()


READINGS = {"vanilla_seg": "vanilla, segment by segment",
            "vanilla_win": "vanilla, sliding window of 16",
            "vanilla_mem": "control: vanilla, memory 16 (evaluation only)", "xl": "XL, memory 16",
            "xl_long": "XL, memory 48, same length",
            "vanilla_long": "control: vanilla, memory 48, same length"}


@experiment("07_transformer_xl")
def recall(seed: int = 0, threads: int = 1) -> dict:
    """Train vanilla and XL (seed `seed`, `threads` CPU threads); accuracies of six readings."""
    torch.set_num_threads(threads)
    gen = attnkit.seed_everything(seed)        # every generator seeded here, whatever ran before
    train = recall_stream(BATCH, SEG * STEPS + 1, gen)
    train = tuple(t.to(device) for t in train)
    models, losses, seconds = {}, {}, {}
    for name, mem_len in [("vanilla", 0), ("XL", MEM)]:
        start = time.perf_counter()
        models[name], losses[name] = train_recall(mem_len, seed, *train)
        seconds[name] = time.perf_counter() - start
    tokens, dist = (t.to(device) for t in recall_stream(
        EVAL_STREAMS, SEG * 40 + 1, torch.Generator().manual_seed(EVAL_SEED)))
    results = {"vanilla_seg": read_segments(models["vanilla"], tokens, dist, SEG, 0),
               "vanilla_win": read_window(models["vanilla"], tokens, dist, SEG),
               "vanilla_mem": read_segments(models["vanilla"], tokens, dist, SEG, MEM),
               "xl": read_segments(models["XL"], tokens, dist, SEG, MEM),
               # one token a call with LONG_MEM states: every query sees the same number of keys
               "xl_long": read_segments(models["XL"], tokens, dist, 1, LONG_MEM),
               "vanilla_long": read_segments(models["vanilla"], tokens, dist, 1, LONG_MEM)}
    figures = {f"ch07_acc_{key}_{which}": accuracy(res, which)
               for key, res in results.items() for which in QUERIES}
    figures.update({f"ch07_loss_{name.lower()}": sum(l[-50:]) / 50 for name, l in losses.items()})
    _, count = results["xl"]
    figures["ch07_far_reachable"] = (count[QUERIES["far"] & ~QUERIES["unreachable"]].sum()
                                     / count[QUERIES["far"]].sum()).item()
    return {**figures, "models": models, "results": results, "seconds": seconds}

# %% tags=["skip-grading", "hide-input"]
from attnkit.glue import glue

SEGMENT_READINGS = ("vanilla_seg", "vanilla_mem", "xl")   # read in segments of SEG, as in training
xl_run = recall(seed=0, threads=1)
reach = xl_run["ch07_far_reachable"]
# reachable answered, chance on the rest
glue("ch07_far_ceiling", reach + (1 - reach) / N_VALUES)
for name, s in xl_run["seconds"].items():
    loss = xl_run[f"ch07_loss_{name.lower()}"]
    print(f"{name}: {STEPS} steps in {s:.0f} s, final loss {loss:.3f}")
# hop and relay only where i is the query's segment index
for key, label in READINGS.items():
    bands = (("near", "mid", "far", "hop", "relay") if key in SEGMENT_READINGS
             else ("near", "mid", "far"))
    print(f"{label:47s}" + "".join(f"  {w} {xl_run[f'ch07_acc_{key}_{w}']:.2f}" for w in bands))

fig, ax = plt.subplots(figsize=(7, 3.2))
dists = torch.arange(1, MAX_DIST + 1)
for key, (correct, count) in xl_run["results"].items():
    acc = correct.sum(1)[1:] / count.sum(1)[1:].clamp(min=1)
    smooth = F.avg_pool1d(acc[None, None], 3, 1, 1, count_include_pad=False)[0, 0]
    ax.plot(dists, smooth, label=READINGS[key])
ax.axhline(1 / N_VALUES, color="gray", ls=":", label="chance")
for edge in (SEG, SEG + MEM):
    ax.axvline(edge, color="gray", lw=0.5)
ax.set(xlabel="distance d from the value to the query", ylabel="accuracy (running mean of 3)",
       title="recall across segment boundaries (trained: segment 16, memory 16)")
ax.legend(fontsize=7)
plt.tight_layout()
plt.show()

# %% [markdown]
# The measured accuracies of this run (seed 0, one thread), by distance band:
#
# | reading | $d$ 1-15 | $d$ 16-31 | $d$ 32-48 |
# | --- | --- | --- | --- |
# | vanilla, segment by segment | {glue:text}`ch07_acc_vanilla_seg_near:.2f` | {glue:text}`ch07_acc_vanilla_seg_mid:.2f` | {glue:text}`ch07_acc_vanilla_seg_far:.2f` |
# | vanilla, sliding window of 16 | {glue:text}`ch07_acc_vanilla_win_near:.2f` | {glue:text}`ch07_acc_vanilla_win_mid:.2f` | {glue:text}`ch07_acc_vanilla_win_far:.2f` |
# | control: vanilla, memory 16 (evaluation only) | {glue:text}`ch07_acc_vanilla_mem_near:.2f` | {glue:text}`ch07_acc_vanilla_mem_mid:.2f` | {glue:text}`ch07_acc_vanilla_mem_far:.2f` |
# | XL, memory 16 | {glue:text}`ch07_acc_xl_near:.2f` | {glue:text}`ch07_acc_xl_mid:.2f` | {glue:text}`ch07_acc_xl_far:.2f` |
# | XL, memory 48, same length | {glue:text}`ch07_acc_xl_long_near:.2f` | {glue:text}`ch07_acc_xl_long_mid:.2f` | {glue:text}`ch07_acc_xl_long_far:.2f` |
# | control: vanilla, memory 48, same length | {glue:text}`ch07_acc_vanilla_long_near:.2f` | {glue:text}`ch07_acc_vanilla_long_mid:.2f` | {glue:text}`ch07_acc_vanilla_long_far:.2f` |
#
# Chance is 1/8 = 0.125. Read the rows with the geometry in mind. Read
# segment by segment, the vanilla model sees the value only when the query
# sits at least $d$ tokens into its segment, so its accuracy falls with $d$
# and is at chance from $d = 16$ on: *context fragmentation*.

# %% tags=["skip-grading", "hide-input"]
claim("fragmentation", "Read segment by segment, the vanilla model is at chance (below 0.2) "
      "beyond one segment.",
      lambda g: max(g["ch07_acc_vanilla_seg_mid"], g["ch07_acc_vanilla_seg_far"]) < 0.2)

# %% [markdown]
# The sliding window gives every query its 15 predecessors (the window is the
# query and the 15 tokens before it), and so is right up to $d = 15$, but
# nothing further, at 16 times the positions computed per predicted token (a
# 16-token window per query, against one position in a segment). Its row
# scores only the queries with 15 tokens before them: the queries in the
# first 15 tokens of a stream (about 7% of the near band, none of the other
# bands) have no full window and are left out of that row alone.

# %% tags=["skip-grading", "hide-input"]
claim("window_reach", "The sliding window of 16 answers the near band (at least 0.95) and is at "
      "chance (below 0.2) beyond it.",
      lambda g: g["ch07_acc_vanilla_win_near"] >= 0.95
      and max(g["ch07_acc_vanilla_win_mid"], g["ch07_acc_vanilla_win_far"]) < 0.2)

# %% [markdown]
# XL reads the memory. A query at index $i$ of its segment sees $16 + i$
# tokens back in one attention hop; the second layer reads first-layer states
# of the memory, which had themselves looked back, so a value up to
# $32 + i$ tokens back can be *relayed*: layer 1 copies it forward into a
# state that layer 2 then reads. We split the queries beyond one segment
# accordingly: **one-hop** queries ($16 \le d \le 16 + i$) and **relay**
# queries ($16 + i < d \le 32 + i$); the rest ($d > 32 + i$) are out of
# reach, at any accuracy but chance. Only
# {glue:text}`ch07_far_reachable:.0%` of the far band ($d$ 32-48) is within
# reach, which caps the far band near {glue:text}`ch07_far_ceiling:.2f`
# (the reachable queries answered, chance on the rest), whatever the model
# learns.
#
# The control row separates the two. The vanilla model, read with a memory it
# never saw in training, answers {glue:text}`ch07_acc_vanilla_mem_hop:.2f` of
# the one-hop queries, at distances 16 to 31 that it never trained on
# (segments of 16 hold distances up to 15): its attention finds the value by
# content, and the relative encoding of a longer distance does not stop it.
# But it answers only {glue:text}`ch07_acc_vanilla_mem_relay:.2f` of the
# relay queries: relaying is a skill, and the vanilla model never needed it.

# %% tags=["skip-grading", "hide-input"]
claim("control_one_hop", "The vanilla model read with a memory answers the one-hop queries beyond "
      "one segment (at least 0.9), at distances it never trained on.",
      lambda g: g["ch07_acc_vanilla_mem_hop"] >= 0.9)
claim("control_no_relay", "The vanilla model read with a memory stays near chance (at most 0.25) "
      "on relay queries.",
      lambda g: g["ch07_acc_vanilla_mem_relay"] <= 0.25)

# %% [markdown]
# What XL's training adds is the relay: XL answers
# {glue:text}`ch07_acc_xl_relay:.2f` of the relay queries in this run, and
# its far band, relay or out of reach, rises from the control's
# {glue:text}`ch07_acc_vanilla_mem_far:.2f` to {glue:text}`ch07_acc_xl_far:.2f`.
# In XL training the memory states are detached, yet attention *over* them
# is trained: the loss at a query whose value sits in the memory updates
# $W_q$, $W_k$, $W_v$, `r_net`, $u$ and $v$ at distances beyond one segment.
# The loss at a relay query trains layer 2 to read the memory, but not
# layer 1 to carry the value: the layer-1 states that carry it belong to the
# previous segment and reach layer 2 only as its detached memory, and layer
# 1 at the current positions up to the query cannot see the value at all
# (changing the value token leaves their outputs unchanged). Layer 1 learns
# to carry values forward only from queries whose carrying states lie in
# the current segment, where the gradient reaches them.

# %% tags=["skip-grading", "hide-input"]
claim("xl_adds_relay", "XL answers relay queries better than the control, by at least 0.2.",
      lambda g: g["ch07_acc_xl_relay"] - g["ch07_acc_vanilla_mem_relay"] >= 0.2)
claim("xl_far_beats_control", "XL's far band beats the control's by at least 0.1.",
      lambda g: g["ch07_acc_xl_far"] - g["ch07_acc_vanilla_mem_far"] >= 0.1)

# %% [markdown]
# **A longer memory at evaluation.** The paper trains with $M$ equal to the
# segment length and evaluates with a memory several times longer. Its
# released code adds a flag, `same_length`, which most of its evaluation
# scripts set (all those of its `tf/sota` folder):
# every query attends to the same number of keys, the $M$ most recent,
# instead of $M + i$. Those scripts read segments of 32 to 128 tokens with
# memories of 128 to 3,800. We do the same without changing the model: the
# last row reads one token per call with a memory of 48 states, so every
# query past the first 48 positions of a stream, in each layer, sees itself
# and exactly the 48 states before it.
# That is what `same_length` gives with a memory of 49 in the released
# PyTorch code's convention, where a query sees `mem_len` keys, itself
# included; its TensorFlow code shows a query `mem_len` + 1 keys, itself
# included, so there it is a memory of 48.
# All of the far band is then within one hop, and XL's far band goes from
# {glue:text}`ch07_acc_xl_far:.2f` to {glue:text}`ch07_acc_xl_long_far:.2f`.
# The vanilla model read the same way reaches
# {glue:text}`ch07_acc_vanilla_long_far:.2f`: one hop over a long memory
# needs no relay, and attention by content reaches distances never trained
# on, as the control showed. So on this task the long memory at evaluation
# does the work, for either model; what XL's training adds is the relay, which
# matters when the memory is as short as in training.

# %% tags=["skip-grading", "hide-input"]
claim("long_memory_one_hop", "Read with a memory of 48 and the same length for every query, "
      "both XL and the vanilla model answer at least 0.9 of the far band.",
      lambda g: min(g["ch07_acc_xl_long_far"], g["ch07_acc_vanilla_long_far"]) >= 0.9)

# %% [markdown]
# In this run the near band pays (XL {glue:text}`ch07_acc_xl_long_near:.2f`, vanilla
# {glue:text}`ch07_acc_vanilla_long_near:.2f`, against
# {glue:text}`ch07_acc_xl_near:.2f` for XL with its training memory). A
# likely cause is a distractor: an episode is at least 19 tokens long, so
# with 48 states in view a near-band query often sees the value of the
# episode before as well ({glue:text}`ch07_near_older_share:.0%` of the
# near-band queries, {glue:text}`ch07_mid_older_share:.0%` of the mid band
# and none of the far band, where the older value is more than 48 tokens
# back). The vanilla model never had two values in view in training (no
# segment of 16 tokens holds two), and XL rarely: an older value lies within
# its one-hop view of $16 + i$ tokens for only
# {glue:text}`ch07_near_older_share_train:.1%` of the near-band queries. The
# cell below re-reads this run's models split that way: near-band queries
# with an older value in view are answered at
# {glue:text}`ch07_xl_long_near_older:.2f` by XL and
# {glue:text}`ch07_vanilla_long_near_older:.2f` by the vanilla model, the
# others at {glue:text}`ch07_xl_long_near_clear:.2f` and
# {glue:text}`ch07_vanilla_long_near_clear:.2f`. The near band's drop and
# this split are this run's figures (seed 0, one thread); neither is a
# claim.

# %% tags=["skip-grading", "hide-input"]
def older_value_in_view(tokens: torch.Tensor, dist: torch.Tensor,
                        back: torch.Tensor) -> torch.Tensor:
    """(B, L) bool: at a query, a value token other than its own lies 1 to `back` tokens back."""
    is_value = ((tokens >= N_NOISE) & (tokens < N_NOISE + N_VALUES)).long()
    before = F.pad(is_value.cumsum(1), (1, 0))                  # before[:, p]: values in [0, p)
    pos = torch.arange(tokens.shape[1], device=tokens.device).expand_as(dist)
    lo, own = (pos - back).clamp(min=0), (pos - dist).clamp(min=0)
    return (dist > 0) & (before.gather(1, own) - before.gather(1, lo) > 0)


eval_tokens, eval_dist = (t.to(device) for t in recall_stream(
    EVAL_STREAMS, SEG * 40 + 1, torch.Generator().manual_seed(EVAL_SEED)))
read = eval_dist[:, :-1]                                 # the queries the readings score
near_q = (read >= 1) & (read < SEG)
older = older_value_in_view(eval_tokens, eval_dist, torch.tensor(LONG_MEM))[:, :-1]
older_train = older_value_in_view(
    eval_tokens, eval_dist,
    MEM + torch.arange(eval_tokens.shape[1], device=device) % SEG)[:, :-1]
glue("ch07_near_older_share", (older & near_q).sum().item() / near_q.sum().item())
mid_q = (read >= SEG) & (read < 2 * SEG)
glue("ch07_mid_older_share", (older & mid_q).sum().item() / mid_q.sum().item())
glue("ch07_near_older_share_train", (older_train & near_q).sum().item() / near_q.sum().item())
for key, name in [("xl_long", "XL"), ("vanilla_long", "vanilla")]:
    correct_all, count_all = xl_run["results"][key]
    correct_old, count_old = read_segments(xl_run["models"][name], eval_tokens,
                                           eval_dist * older_value_in_view(eval_tokens, eval_dist,
                                                                           torch.tensor(LONG_MEM)),
                                           1, LONG_MEM)
    near = QUERIES["near"]
    acc_old = (correct_old[near].sum() / count_old[near].sum()).item()
    acc_clear = ((correct_all - correct_old)[near].sum()
                 / (count_all - count_old)[near].sum()).item()
    glue(f"ch07_{key}_near_older", acc_old)
    glue(f"ch07_{key}_near_clear", acc_clear)
    print(f"{READINGS[key]}, near band: older value in view {acc_old:.2f} "
          f"({int(count_old[near].sum())} queries), none {acc_clear:.2f}")

# %% [markdown]
# **How much of this is seed 0?** The table below shows this run's figures
# next to their mean and range over the 40 recorded runs of the claims
# check: 20 on seeds 0 to 4 (one and two threads, this chapter's solution
# and an independent one) and one each on the later seeds 5 to 24. The last
# column, what changes each figure, reads the first 20. With the seed, the thread count and
# the code fixed, a run repeats bit for bit on one machine. A second thread
# changes the order of float sums, and training amplifies the difference.
# The independent solution gave the same bits as this one in every run
# (the timings aside): it computes the same sums in the same order. So the
# 40 runs are 30 distinct trainings, and the table's range is over seeds and
# thread counts together. A solution that rounds differently, another CPU, a
# GPU or another library version would move the figures as a second thread
# does. Every claim above holds on the runs of the check and on the held-out
# seeds (their badges).

# %% tags=["skip-grading", "hide-input"]
spread({"ch07_loss_xl": "XL, final training loss", "ch07_acc_xl_mid": "XL, d 16-31",
        "ch07_acc_xl_far": "XL, d 32-48", "ch07_acc_xl_relay": "XL, relay queries",
        "ch07_acc_vanilla_mem_mid": "control, d 16-31",
        "ch07_acc_vanilla_mem_far": "control, d 32-48",
        "ch07_acc_vanilla_mem_hop": "control, one-hop queries",
        "ch07_acc_vanilla_mem_relay": "control, relay queries",
        "ch07_acc_xl_long_far": "XL, memory 48 same length, d 32-48",
        "ch07_acc_vanilla_long_far": "control, memory 48 same length, d 32-48"})

# %% [markdown]
# ### XL on real documents
#
# The recall task was made for the memory. Real text is the test that
# matters: the paper's results are on long real documents, and its
# *relative effective context length* asks how much of a longer context a
# model actually turns into a lower loss. We ask the same at laptop scale,
# on the course's long-document corpus (`attnkit.corpora.long_documents`,
# described in `docs/DATA.md`): whole Python source files of the standard
# library, 20,000 characters or more each, split by file into 105 training,
# 13 validation and 20 test documents. Chapter 8 trains its Reformer on the
# same corpus.
#
# The model is the chapter's `XLLanguageModel`, character by character:
# code points 0 to 126 are their own ids and every other character is 127.
# It has 4 layers, $d_\text{model} = 128$, 4 heads and $d_{ff} = 256$. The
# training documents are joined by blank lines and cut into 32 contiguous
# streams, as the paper's code batches its corpora. Step $s$ reads the
# $s$-th segment of $L = 64$ characters of every stream. **XL** carries a
# memory of $M = 64$ states per layer from one segment to the next. The
# **control** is the same network trained on the same segments in the same
# order with no memory (`mem_len = 0`). It is the chapter's vanilla model:
# relative positions, no memory. Both start from the same initialisation
# (seed 0) and train with AdamW (betas 0.9 and 0.95, weight decay 0.01), a
# learning rate of $2 \cdot 10^{-3}$ with 100 warm-up steps and a cosine
# decay to a tenth, gradients clipped at norm 1, on one thread. The
# training log scores 512 characters from the middle of each validation
# document, read in segments of 64, once without and once with the memory.
#
# The same function trains three times. Your short run, below, trains XL
# for 120 steps. The longer runs, declared with `@checkpoint`, trained XL
# and the control for 2,000 steps each (4.1 million of the 4.3 million
# training characters, each read once) with `python -m course checkpoints
# 07`. Their float16 weights are committed, and the page loads them.

# %% tags=["skip-grading"]
import time

import numpy as np

from attnkit.checkpoints import checkpoint
from attnkit.corpora import long_documents

DOC_VOCAB = 128                        # code points 0..126; any other character is 127
DOC_SEG, DOC_MEM, DOC_STREAMS = 64, 64, 32
DOC_SIZE = dict(d_model=128, n_heads=4, d_ff=256, n_layers=4)


def encode_chars(text: str) -> torch.Tensor:
    """A text as character ids, (len(text),) long: code points 0..126, anything else 127."""
    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    return torch.from_numpy(np.minimum(codes, DOC_VOCAB - 1).astype(np.int64))


def doc_streams(docs: list, n_streams: int) -> torch.Tensor:
    """The documents joined by blank lines, cut into `n_streams` contiguous streams: (n, N)."""
    ids = encode_chars("\n\n".join(d.text for d in docs))
    n = len(ids) // n_streams
    return ids[:n_streams * n].view(n_streams, n)                          # (n_streams, N)


def middles(docs: list, length: int) -> torch.Tensor:
    """The middle `length` characters of each document: (len(docs), length)."""
    return torch.stack([encode_chars(d.text[(len(d.text) - length) // 2:][:length]) for d in docs])


DOC_TRAIN = doc_streams(long_documents("train"), DOC_STREAMS)              # (32, ~135k)
DOC_VALID = middles(long_documents("valid"), 1025)                        # (13, 1025)


@torch.no_grad()
def char_losses(model: XLLanguageModel, ids: torch.Tensor, seg: int, mem_len: int) -> torch.Tensor:
    """Per-character losses (nats) of ids[:, 1:], read in segments of `seg` characters with a
    memory of `mem_len` states per layer: (B, T - 1)."""
    losses, mems = [], None
    for s in range(0, ids.shape[1] - 1, seg):
        y = ids[:, s + 1:s + seg + 1]                                      # (B, <=seg) targets
        logits, mems = model(ids[:, s:s + y.shape[1]], mems, mem_len)      # (B, <=seg, V)
        losses.append(F.cross_entropy(logits.transpose(1, 2), y, reduction="none"))
    return torch.cat(losses, dim=1)                                        # (B, T - 1)


def build_doc_lm() -> XLLanguageModel:
    return XLLanguageModel(DOC_VOCAB, **DOC_SIZE)


@torch.no_grad()
def evaluate_doc_lm(model: XLLanguageModel) -> dict:
    """Validation nats per character on the last 512 characters of each excerpt, read in
    segments of DOC_SEG without memory and with a memory of DOC_MEM."""
    ids = DOC_VALID.to(next(model.parameters()).device)
    return {"ch07_doc_valid_nomem": char_losses(model, ids, DOC_SEG, 0)[:, 512:].mean().item(),
            "ch07_doc_valid_mem": char_losses(model, ids, DOC_SEG, DOC_MEM)[:, 512:].mean().item()}


def train_doc_lm(model: XLLanguageModel, steps: int, device: torch.device, mem_len: int,
                 lr: float = 2e-3, threads: int = 1, report: int = 250) -> list[dict]:
    """Train on the streams' segments in order, carrying a memory of `mem_len`; the log."""
    if steps * DOC_SEG + 1 > DOC_TRAIN.shape[1]:
        raise ValueError(f"{steps} steps of {DOC_SEG} overrun the streams ({DOC_TRAIN.shape[1]})")
    torch.set_num_threads(threads)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.01)
    data = DOC_TRAIN.to(device)
    mems, log, cpu0 = None, [], time.process_time()
    for step in range(1, steps + 1):
        warm, decay = min(1.0, step / 100), 0.5 * (1 + math.cos(math.pi * step / steps))
        for group in opt.param_groups:
            group["lr"] = lr * warm * (0.1 + 0.9 * decay)
        s = (step - 1) * DOC_SEG
        x, y = data[:, s:s + DOC_SEG], data[:, s + 1:s + DOC_SEG + 1]      # (B, T) each
        model.train()
        logits, mems = model(x, mems, mem_len)                             # (B, T, V)
        loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % report == 0 or step == steps:
            val = evaluate_doc_lm(model.eval())
            log.append({"step": step, "loss": round(loss.item(), 4),
                        "cpu_s": round(time.process_time() - cpu0, 1),
                        **{k: round(v, 4) for k, v in val.items()}})
    return log


@checkpoint("07_transformer_xl", build=build_doc_lm, evaluate=evaluate_doc_lm, steps=2000)
def doc_xl(model: XLLanguageModel, steps: int, device: torch.device) -> list[dict]:
    """XL on the long documents: segments of DOC_SEG, a memory of DOC_MEM."""
    return train_doc_lm(model, steps, device, mem_len=DOC_MEM)


@checkpoint("07_transformer_xl", build=build_doc_lm, evaluate=evaluate_doc_lm, steps=2000)
def doc_vanilla(model: XLLanguageModel, steps: int, device: torch.device) -> list[dict]:
    """The control: the same network on the same segments, no memory."""
    return train_doc_lm(model, steps, device, mem_len=0)

# %% tags=["skip-grading", "hide-input"]
from attnkit.glue import glue

torch.manual_seed(0)
short_xl = build_doc_lm()
_cpu0 = time.process_time()
SHORT_DOC_STEPS = 120
_ = doc_xl(short_xl, steps=SHORT_DOC_STEPS, device=torch.device("cpu"))   # your short run
short_doc_cpu = time.process_time() - _cpu0
doc_models = {"XL": doc_xl.load(), "control": doc_vanilla.load()}
doc_records = {"XL": doc_xl.record(), "control": doc_vanilla.record()}
short_doc = evaluate_doc_lm(short_xl)
print(f"{'run':22s} {'steps':>6s} {'CPU s':>7s} {'no memory':>10s} {'memory 64':>10s}"
      "  (validation nats/char)")
print(f"{'XL, short run':22s} {SHORT_DOC_STEPS:6d} {short_doc_cpu:7.0f}"
      f" {short_doc['ch07_doc_valid_nomem']:10.3f} {short_doc['ch07_doc_valid_mem']:10.3f}")
for name, rec in doc_records.items():
    m, last = rec["metrics"], rec["log"][-1]
    print(f"{name + ', longer run':22s} {last['step']:6d} {last['cpu_s']:7.0f}"
          f" {m['ch07_doc_valid_nomem']:10.3f} {m['ch07_doc_valid_mem']:10.3f}")
    glue(f"ch07_doc_{name.lower()}_cpu", last["cpu_s"])
    glue(f"ch07_doc_{name.lower()}_valid_nomem", m["ch07_doc_valid_nomem"])
    glue(f"ch07_doc_{name.lower()}_valid_mem", m["ch07_doc_valid_mem"])
glue("ch07_doc_short_cpu", short_doc_cpu)
glue("ch07_doc_short_valid_nomem", short_doc["ch07_doc_valid_nomem"])
glue("ch07_doc_short_valid_mem", short_doc["ch07_doc_valid_mem"])
glue("ch07_doc_params", sum(p.numel() for p in short_xl.parameters()))
glue("ch07_doc_mb", sum(r["bytes"] for r in doc_records.values()) / 2**20)

fig, ax = plt.subplots(figsize=(7, 3.2))
for name, rec in doc_records.items():
    for key, style, label in (("ch07_doc_valid_nomem", ":", "no memory"),
                              ("ch07_doc_valid_mem", "-", "memory 64")):
        ax.plot([r["cpu_s"] for r in rec["log"]], [r[key] for r in rec["log"]], style,
                marker=".", color="C0" if name == "XL" else "C1",
                label=f"{name}, read with {label}")
ax.plot([short_doc_cpu], [short_doc["ch07_doc_valid_mem"]], "k*", label="XL, short run, memory 64")
ax.set(xlabel="CPU seconds of training (one thread)", ylabel="validation nats per character",
       title="training on the long documents")
ax.legend(fontsize=7)
plt.tight_layout()
plt.show()

# %% [markdown]
# The model has {glue:text}`ch07_doc_params:,.0f` parameters; the two
# committed runs take {glue:text}`ch07_doc_mb:.1f` MB in float16. Your short
# run took {glue:text}`ch07_doc_short_cpu:.0f` CPU-seconds and reached
# {glue:text}`ch07_doc_short_valid_mem:.2f` nats per character on the
# validation excerpts, read with memory. The longer runs took
# {glue:text}`ch07_doc_xl_cpu:.0f` (XL) and
# {glue:text}`ch07_doc_control_cpu:.0f` (control) CPU-seconds and reached
# {glue:text}`ch07_doc_xl_valid_mem:.3f` (XL, read with its memory) and
# {glue:text}`ch07_doc_control_valid_nomem:.3f` (control, read as trained,
# without memory).
#
# **Loss against the context used.** Now the test documents. From the
# middle of each of the 20 we take 769 characters and score the last 256
# predictions (5,120 characters in all); the 512 before them are context
# that a reading may or may not use. Every reading scores the same
# characters, so the losses compare directly. A reading gives each
# prediction some number of earlier characters, the *context used*:
#
# * **segments with a memory of $M$**: the text is read in segments of 64
#   from the start of the excerpt, carrying a memory of $M$ states per
#   layer. A character at index $i$ of its segment sees $M + i$ characters
#   in the first layer, $M + 31.5$ on average. $M = 0$ is the vanilla
#   reading, disjoint segments. In deeper layers the memory holds states
#   that had looked further back themselves, so the reach is longer than
#   this, up to the start of the excerpt;
# * **a sliding window of $w$**: every character is predicted by a call on
#   the $w$ characters that end at its predecessor ($w - 1$ of context), as
#   the vanilla model is evaluated at its best.
#
# We read both models in both ways, the control included: it never saw a
# memory in training, as in the recall task.

# %% tags=["skip-grading", "hide-input"]
DOC_PREFIX, DOC_SCORED = 512, 256
DOC_TEST = middles(long_documents("test"), DOC_PREFIX + DOC_SCORED + 1)   # (20, 769)
DOC_MEMORIES, DOC_WINDOWS = (0, 32, 64, 128, 256, 512), (16, 64)


@torch.no_grad()
def window_losses(model: XLLanguageModel, ids: torch.Tensor, start: int, window: int,
                  chunk: int = 256) -> torch.Tensor:
    """Losses of ids[:, start + 1:], each character predicted by one call on the `window`
    characters that end at its predecessor: (B, T - 1 - start)."""
    x = ids[:, start - window + 1:-1].unfold(1, window, 1)                # (B, S, window)
    y = ids[:, start + 1:]                                                # (B, S)
    B, S, W = x.shape
    last = torch.cat([model(part)[0][:, -1] for part in x.reshape(B * S, W).split(chunk)])
    return F.cross_entropy(last, y.reshape(-1), reduction="none").view(B, S)   # (B, S)


doc_readings = {}     # (model, kind, size) -> (context used, per-document mean losses (20,))
for name, model in doc_models.items():
    for m in DOC_MEMORIES:
        losses = char_losses(model, DOC_TEST, DOC_SEG, m)[:, DOC_PREFIX:]    # (20, 256)
        doc_readings[name, "memory", m] = (m + (DOC_SEG - 1) / 2, losses.mean(1))
    for w in DOC_WINDOWS:
        losses = window_losses(model, DOC_TEST, DOC_PREFIX, w)               # (20, 256)
        doc_readings[name, "window", w] = (w - 1, losses.mean(1))
for key, (ctx, per_doc) in doc_readings.items():
    glue(f"ch07_doc_{key[0].lower()}_{key[1]}_{key[2]}", per_doc.mean().item())


def doc_interval(a: tuple, b: tuple, n: int = 2000) -> tuple[float, float, float]:
    """Mean loss of reading a minus reading b and its 95% bootstrap interval over documents."""
    diff = doc_readings[a][1] - doc_readings[b][1]                       # (20,)
    picks = torch.randint(len(diff), (n, len(diff)), generator=torch.Generator().manual_seed(0))
    means = diff[picks].mean(1)
    return diff.mean().item(), means.quantile(0.025).item(), means.quantile(0.975).item()


DOC_DIFFS = {"fragmentation": (("control", "window", 64), ("control", "memory", 0)),
             "as_trained": (("XL", "memory", 64), ("control", "memory", 0)),
             "same_reading": (("XL", "memory", 64), ("control", "memory", 64)),
             "xl_long": (("XL", "memory", 512), ("XL", "memory", 64)),
             "control_long": (("control", "memory", 512), ("control", "memory", 64)),
             "short_window": (("XL", "window", 16), ("control", "window", 16))}
for key, (a, b) in DOC_DIFFS.items():
    mean, lo, hi = doc_interval(a, b)
    glue(f"ch07_doc_diff_{key}", mean)
    glue(f"ch07_doc_diff_{key}_lo", lo)
    glue(f"ch07_doc_diff_{key}_hi", hi)
    print(f"{' '.join(map(str, a)):18s} - {' '.join(map(str, b)):18s}: {mean:+.3f} nats/char"
          f" (95% bootstrap interval over documents {lo:+.3f} to {hi:+.3f})")

fig, ax = plt.subplots(figsize=(7, 3.6))
for name, color in (("XL", "C0"), ("control", "C1")):
    for kind, style in (("memory", "o-"), ("window", "s--")):
        pts = sorted(v for k, v in doc_readings.items() if k[0] == name and k[1] == kind)
        label = f"{name}, {'segments of 64 + memory M' if kind == 'memory' else 'sliding window'}"
        ax.plot([c for c, _ in pts], [l.mean().item() for _, l in pts], style, color=color,
                label=label)
for (name, kind, size), (ctx, per_doc) in doc_readings.items():
    if kind == "memory" and name == "XL":
        ax.annotate(f"M={size}", (ctx, per_doc.mean().item()), fontsize=7,
                    textcoords="offset points", xytext=(2, 4))
ax.axvline(DOC_SEG - 1, color="gray", lw=0.5, label="the control's longest training context")
ax.axvline(DOC_SEG + DOC_MEM - 1, color="gray", lw=0.5, ls=":",
           label="XL's longest training context (first layer)")
ax.set_xscale("log")
ax.set_xticks([16, 32, 64, 128, 256, 512], labels=["16", "32", "64", "128", "256", "512"])
ax.xaxis.set_minor_formatter(plt.NullFormatter())
ax.set(xlabel="context used: earlier characters seen in the first layer (mean)",
       ylabel="test nats per character",
       title="the same 5,120 test characters, eight readings of each model")
ax.legend(fontsize=7)
plt.tight_layout()
plt.show()

# %% [markdown]
# The numbers below are this run's: one trained model of each kind, read
# once. A bracket is the 95% bootstrap interval of a difference over the 20
# test documents (2,000 resamples): it says how much the figure depends on
# which documents were drawn, not how it would vary over training seeds.
#
# Context fragmentation costs the vanilla reading. The control, read as it
# was trained on disjoint segments, scores
# {glue:text}`ch07_doc_control_memory_0:.3f` nats per character. The same
# weights with a sliding window of 64 score
# {glue:text}`ch07_doc_control_window_64:.3f`, a difference of
# {glue:text}`ch07_doc_diff_fragmentation:+.3f`
# [{glue:text}`ch07_doc_diff_fragmentation_lo:+.3f`,
# {glue:text}`ch07_doc_diff_fragmentation_hi:+.3f`].
#
# Read as it was trained, with its memory of 64, XL scores
# {glue:text}`ch07_doc_xl_memory_64:.3f`:
# {glue:text}`ch07_doc_diff_as_trained:+.3f`
# [{glue:text}`ch07_doc_diff_as_trained_lo:+.3f`,
# {glue:text}`ch07_doc_diff_as_trained_hi:+.3f`] against the control read
# as trained.
#
# Part of that gain is only more context at evaluation. The control read
# with the same memory of 64, which it never saw in training, scores
# {glue:text}`ch07_doc_control_memory_64:.3f`. What remains, same reading
# and same context, is what XL learnt from training with the memory:
# {glue:text}`ch07_doc_diff_same_reading:+.3f`
# [{glue:text}`ch07_doc_diff_same_reading_lo:+.3f`,
# {glue:text}`ch07_doc_diff_same_reading_hi:+.3f`].
#
# A memory longer than in training does not help this model. From $M = 64$
# to $M = 512$, XL's loss changes by
# {glue:text}`ch07_doc_diff_xl_long:+.3f`
# [{glue:text}`ch07_doc_diff_xl_long_lo:+.3f`,
# {glue:text}`ch07_doc_diff_xl_long_hi:+.3f`] and the control's by
# {glue:text}`ch07_doc_diff_control_long:+.3f`
# [{glue:text}`ch07_doc_diff_control_long_lo:+.3f`,
# {glue:text}`ch07_doc_diff_control_long_hi:+.3f`]. The paper's models,
# trained far longer on far more text, gain from evaluation memories many
# times their training memory; ours was trained on one pass of 4 million
# characters.
#
# XL pays for its memory at short context. With a window of 16 it scores
# {glue:text}`ch07_doc_xl_window_16:.3f` and the control
# {glue:text}`ch07_doc_control_window_16:.3f`
# ({glue:text}`ch07_doc_diff_short_window:+.3f`
# [{glue:text}`ch07_doc_diff_short_window_lo:+.3f`,
# {glue:text}`ch07_doc_diff_short_window_hi:+.3f`]). In training, every XL
# segment after the first had 64 states of memory, so XL almost never
# predicted from a short context, while the control did so at the start of
# every segment.
#
# **What this is, and what it is not.** Dai et al. {cite}`dai2019` measure
# how much context a model uses with the *relative effective context
# length* (RECL). It builds on the effective context length of Khandelwal
# et al. {cite}`khandelwal2018`: the longest context whose extension still
# lowers the loss by more than a threshold. RECL is defined on a *group* of
# models. The gain of a longer context is measured relative to the best
# short-context model of the group, so that all models share one baseline,
# and a parameter $r$ restricts the comparison to the hardest fraction $r$
# of the tokens. On WikiText-103 (words) the paper reports that XL's RECL
# is about 80% longer than that of recurrent networks and 450% longer than
# that of a vanilla Transformer. Our figure is the raw material of such a
# measure, not the measure itself. It gives the loss of two models at each
# context, on 5,120 characters, one training run each, with no threshold
# and no selection of hard tokens. Read by eye, XL's loss stops falling
# near the context it trained with: {glue:text}`ch07_doc_xl_memory_64:.3f`
# at $M = 64$ (64 to 127 characters in the first layer),
# {glue:text}`ch07_doc_xl_memory_256:.3f` at $M = 256$. The control's best
# readings give it 63 to 127 characters, and longer ones hurt it.

# %% [markdown]
# **Evaluation speed on this model.** The cache pays at evaluation too. We
# compute the loss of the same 128 characters of one test document in two
# ways with the trained XL model. The **sliding window** gives every
# character $C$ characters of context: one window of $C + 1$ characters
# per predicted character, all 128 windows in one call. The **cache**
# reads segments of 64 with a memory of $C$, so a character sees $C$ to
# $C + 63$ characters; the memory is filled beforehand, untimed, from the
# $C$ characters before. We time both in wall
# time on one thread pinned to one CPU, 7 interleaved pairs
# (`attnkit.walltime.compare`), and report the median of the per-pair
# ratios with its interquartile range. We also count the floating-point
# operations of each reading (`FlopCounterMode`).
# %% tags=["skip-grading", "hide-input"]
import os

from torch.utils.flop_counter import FlopCounterMode

from attnkit.walltime import compare

SPEED_CONTEXTS, SPEED_SCORED = (64, 128), 128
speed_text = DOC_TEST[:1, :DOC_PREFIX + SPEED_SCORED + 1]                # (1, 641): one document
xl_doc = doc_models["XL"]


@torch.no_grad()
def warm_memory(model: XLLanguageModel, ids: torch.Tensor, mem_len: int) -> list:
    """The memories after reading `ids` in segments of DOC_SEG with a memory of `mem_len`."""
    mems = None
    for s in range(0, ids.shape[1], DOC_SEG):
        _, mems = model(ids[:, s:s + DOC_SEG], mems, mem_len)
    return mems


@torch.no_grad()
def cached_losses(model: XLLanguageModel, ids: torch.Tensor, start: int, mems: list,
                  mem_len: int) -> torch.Tensor:
    """Losses of ids[:, start + 1:], read in segments of DOC_SEG from `start` on, from `mems`."""
    losses = []
    for s in range(start, ids.shape[1] - 1, DOC_SEG):
        y = ids[:, s + 1:s + DOC_SEG + 1]
        logits, mems = model(ids[:, s:s + y.shape[1]], mems, mem_len)
        losses.append(F.cross_entropy(logits.transpose(1, 2), y, reduction="none"))
    return torch.cat(losses, dim=1)


def flops(fn) -> int:
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


speed_rows = {}
for c in SPEED_CONTEXTS:
    mems = warm_memory(xl_doc, speed_text[:, DOC_PREFIX - c:DOC_PREFIX], c)   # untimed
    window = lambda c=c: window_losses(xl_doc, speed_text, DOC_PREFIX, c + 1)   # noqa: E731
    cached = lambda c=c, mems=mems: cached_losses(  # noqa: E731
        xl_doc, speed_text, DOC_PREFIX, mems, c)
    slow, fast, ratio = compare(window, cached, repeat=7, cpu=min(os.sched_getaffinity(0)))
    speed_rows[c] = {"window_ms": 1e3 * slow.median / SPEED_SCORED,
                     "cached_ms": 1e3 * fast.median / SPEED_SCORED,
                     "speedup": ratio.median, "spread": ratio.spread,
                     "flop_ratio": flops(window) / flops(cached),
                     "window_loss": window().mean().item(), "cached_loss": cached().mean().item()}
    for k, v in speed_rows[c].items():
        glue(f"ch07_doc_speed_{k}_{c}", v)
print(f"{'context C':>9s} {'window ms/char':>15s} {'cached ms/char':>15s} {'speed-up':>9s}"
      f" {'(IQR)':>6s} {'FLOP ratio':>11s} {'window loss':>12s} {'cached loss':>12s}")
for c, r in speed_rows.items():
    print(f"{c:9d} {r['window_ms']:15.3f} {r['cached_ms']:15.4f} {r['speedup']:9.1f}"
          f" {r['spread']:6.1f} {r['flop_ratio']:11.1f} {r['window_loss']:12.3f}"
          f" {r['cached_loss']:12.3f}")

# %% [markdown]
# In this run, at $C = 64$ the cache is
# {glue:text}`ch07_doc_speed_speedup_64:.0f` times faster than the window
# (interquartile range {glue:text}`ch07_doc_speed_spread_64:.1f`), and at
# $C = 128$ {glue:text}`ch07_doc_speed_speedup_128:.0f` times
# ({glue:text}`ch07_doc_speed_spread_128:.1f`). These are one run's figures
# on a shared machine, not claims. Both readings score the same 128
# characters of one test document, a harder stretch than the test set's
# average. The window gives {glue:text}`ch07_doc_speed_window_loss_64:.3f`
# nats per character at $C = 64$ and
# {glue:text}`ch07_doc_speed_window_loss_128:.3f` at $C = 128$; the cache
# gives {glue:text}`ch07_doc_speed_cached_loss_64:.3f` and
# {glue:text}`ch07_doc_speed_cached_loss_128:.3f`. 128 characters are too
# few to compare the two readings; the loss against context is measured on
# 5,120 characters above.
#
# The speed-up comes from the positions computed. The window recomputes all
# $C + 1$ positions of every layer for each predicted character. The cache
# computes each position once and reads the memory. It does pay for that
# memory: per segment of 64 it re-projects the $C$ memory states through
# $W_k$ and $W_v$, projects $C + 64$ relative encodings through `r_net`, and
# attends over $C + 64$ keys. So the FLOP ratio is
# {glue:text}`ch07_doc_speed_flop_ratio_64:.0f` at $C = 64$ and
# {glue:text}`ch07_doc_speed_flop_ratio_128:.0f` at $C = 128$, below
# $C + 1$. The measured speed-up also depends on how fast each kind of call
# runs. The window's calls are large batched matrix products. The cache
# makes small calls of 64 positions, whose fixed costs (masks, the position
# table, Python) weigh more.

# %% [markdown]
# ### Evaluation speed: cache against sliding window
#
# To predict every token of a long text with a context of $C$ tokens, the
# vanilla model runs one forward pass over a window of $C$ tokens *per
# token*. XL runs one pass per *segment* of $C$ tokens, with a memory of $C$
# (past the first segment, every token sees between $C$ and $2C - 1$
# earlier tokens). We time
# both in wall seconds per predicted token, on one torch thread
# (`attnkit.walltime.compare`), whatever thread count the run sets. This
# book is built on a shared, loaded machine, where a call with two threads
# can wait for its second one. The two calls alternate, 8 window calls
# against one segment call, 7 pairs after a warm-up pair. A burst of load
# then slows both calls of a pair alike, so the speed-up is the median of
# the 7 per-pair ratios, and their interquartile range is recorded as its
# spread. The page runs `costs` on the CPU whatever device is present, as the
# claims check does. On a GPU these calls would return before their kernels
# finish, so these figures say nothing about a GPU. We use a
# model of the recall task's shape (2 layers, $d_{model} = 64$; untrained:
# the cost does not depend on the weights), on a batch of one stream and one window per vanilla call; we
# also count the floating-point operations of each (`FlopCounterMode`),
# split into the products of the projections and feed-forwards (`mm`,
# `addmm`) and those of attention (`bmm`). This measures the number of calls
# and the arithmetic, not the best vanilla evaluator (`read_window` above
# batches all windows into one call). The experiment `costs(seed, threads)`
# is also run 20 times by the claims check; the seed draws the text and the
# (untrained) weights.
# `benchmarks/bench_07_xl_eval.py` times a wider, untrained model (4 layers,
# $d_\text{model} = 256$) at longer contexts, with its own settings; its
# figures are not this table's.

# %% tags=["skip-grading", "hide-input"]
from matplotlib.ticker import NullFormatter
from torch.utils.flop_counter import FlopCounterMode

from attnkit.glue import glue

from attnkit.walltime import compare

CONTEXTS = [16, 32, 64, 128, 256]
WINDOW_CALLS, TIMED_PAIRS = 8, 7   # window calls timed per pair; interleaved pairs per context


def flops_by_kind(fn) -> tuple[int, int]:
    """(projection FLOPs, attention FLOPs) of fn(): mm/addmm against bmm."""
    with FlopCounterMode(display=False) as counter:
        fn()
    ops = {str(op): n for op, n in counter.get_flop_counts()["Global"].items()}
    proj = ops.get("aten.mm", 0) + ops.get("aten.addmm", 0)
    return proj, sum(ops.values()) - proj


@experiment("07_transformer_xl")
@torch.no_grad()
def costs(seed: int = 0, threads: int = 1) -> dict:
    """Time and FLOPs per predicted token, sliding window against the cache, for each context C."""
    torch.set_num_threads(threads)
    gen = attnkit.seed_everything(seed)        # every generator seeded here, whatever ran before
    model = XLLanguageModel(VOCAB, d_model=64, n_heads=4, d_ff=128, n_layers=2).to(device).eval()
    text = torch.randint(VOCAB, (1, 4096), generator=gen).to(device)
    out, speed = {}, {}
    for c in CONTEXTS:
        def window(n_tokens: int = WINDOW_CALLS):
            for t in range(n_tokens):
                model(text[:, t:t + c])
        _, mems = model(text[:, :c], None, c)                               # a warm memory
        segment = lambda: model(text[:, c:2 * c], mems, c)                  # noqa: E731
        # wall time on one thread, the two interleaved; the ratio per pair, then its median
        win, seg, ratio = compare(window, segment, repeat=TIMED_PAIRS)
        per_token = c / WINDOW_CALLS                                        # window calls vs tokens
        speed[c] = (win.median / WINDOW_CALLS, seg.median / c)
        win_proj, win_attn = flops_by_kind(lambda: model(text[:, :c]))
        xl_proj, xl_attn = flops_by_kind(segment)
        out[f"ch07_speedup_{c}"] = ratio.median * per_token
        out[f"ch07_speedup_{c}_spread"] = ratio.spread * per_token
        out[f"ch07_flop_ratio_{c}"] = (win_proj + win_attn) / ((xl_proj + xl_attn) / c)
        extra = xl_proj + xl_attn - win_proj - win_attn
        out[f"ch07_extra_proj_share_{c}"] = (xl_proj - win_proj) / extra
    return {**out, "speed": speed}

# %% tags=["skip-grading", "hide-input"]
device = torch.device("cpu")   # wall time of CPU work: time the costs on the CPU
cost_run = costs(seed=0, threads=1)
print(f"{'context':>8s} {'vanilla ms/token':>17s} {'XL ms/token':>12s} {'speed-up':>9s}"
      f" {'IQR':>6s} {'speed-up/C':>11s} {'FLOP ratio':>11s} {'extra FLOPs in projections':>27s}")
for c, (van, xl) in cost_run["speed"].items():
    print(f"{c:8d} {1e3 * van:17.3f} {1e3 * xl:12.4f} {cost_run[f'ch07_speedup_{c}']:9.1f}"
          f" {cost_run[f'ch07_speedup_{c}_spread']:6.1f} {cost_run[f'ch07_speedup_{c}'] / c:11.2f}"
          f" {cost_run[f'ch07_flop_ratio_{c}']:11.1f}"
          f" {cost_run[f'ch07_extra_proj_share_{c}']:27.0%}")
glue("ch07_speed_device", device.type)

fig, ax = plt.subplots(1, 2, figsize=(10, 3.2))
ax[0].loglog(CONTEXTS, [1e3 * cost_run["speed"][c][0] for c in CONTEXTS], "o-",
             label="vanilla, sliding window")
ax[0].loglog(CONTEXTS, [1e3 * cost_run["speed"][c][1] for c in CONTEXTS], "o-", label="XL, cache")
ax[0].set(xlabel="context C", ylabel="wall ms per token (1 thread)",
          title=f"evaluation time ({device.type})")
ax[0].legend()
ax[1].errorbar(CONTEXTS, [cost_run[f"ch07_speedup_{c}"] for c in CONTEXTS],
               yerr=[[cost_run[f"ch07_speedup_{c}_spread"] / 2 for c in CONTEXTS]] * 2, fmt="o-",
               label="measured (median, bar: IQR)")
ax[1].plot(CONTEXTS, CONTEXTS, "k--", lw=1, label="C (call count)")
ax[1].plot(CONTEXTS, [cost_run[f"ch07_flop_ratio_{c}"] for c in CONTEXTS], "k:", label="FLOP ratio")
ax[1].set(xscale="log", yscale="log", xlabel="context C", ylabel="vanilla / XL",
          title="speed-up of the cache")
ax[1].legend(fontsize=8)
for a in ax:
    a.xaxis.set_minor_formatter(NullFormatter())
    a.yaxis.set_minor_formatter(NullFormatter())
plt.tight_layout()
plt.show()
from attnkit import claims                                   # the recorded runs, for the text

record = claims.load_record(claims.CHAPTER[0])
speedups_16 = [r["figures"]["ch07_speedup_16"] for r in claims.record_runs(record)
               + claims.seen_runs(record) + claims.confirmation_runs(record)
               if "ch07_speedup_16" in r["figures"]]
glue("ch07_speedup_16_above_c", sum(v > 16 for v in speedups_16))
glue("ch07_speedup_16_runs", len(speedups_16))
spread({f"ch07_speedup_{c}": f"speed-up at C = {c}" for c in CONTEXTS}
       | {f"ch07_flop_ratio_{c}": f"FLOP ratio at C = {c}" for c in (16, 256)}, digits=1)

# %% [markdown]
# On this run ({glue:text}`ch07_speed_device`, one thread) the cache is
# {glue:text}`ch07_speedup_16:.0f` times faster than the sliding window at
# $C = 16$ and {glue:text}`ch07_speedup_256:.0f` times at $C = 256$. In
# every run of the claims check the cache is faster at every $C$, and its
# speed-up is larger at $C = 256$ than at $C = 16$ (the two timing claims
# below); the sizes of the speed-ups are this run's. Per segment of $C$ tokens, XL
# does at least the work of one window, while the window makes $C$ calls. If
# the fixed cost of a call dominated, the ratio would be about $C$; if
# arithmetic dominated, it would be the FLOP ratio, which we counted:
# {glue:text}`ch07_flop_ratio_16:.1f` at $C = 16$ and
# {glue:text}`ch07_flop_ratio_256:.0f` at $C = 256$, below $C$. The
# measured ratio is wall time on a shared machine and moves with its load:
# in {glue:text}`ch07_speedup_16_above_c` of the
# {glue:text}`ch07_speedup_16_runs` recorded runs it is above $C$ at
# $C = 16$ (the table above), which neither case explains. So only the direction and the growth
# of the speed-up are claimed.
# Why below $C$ depends on $C$. XL caches each layer's *input* states, not
# their keys and values, so every segment re-projects its memory through
# $W_k$ and $W_v$, and `r_net` projects $2C$ relative encodings instead of
# $C$: at $C = 16$, {glue:text}`ch07_extra_proj_share_16:.0%` of XL's extra
# FLOPs over one window are these projections. At $C = 256$ attention over
# the extra keys dominates instead (projections
# {glue:text}`ch07_extra_proj_share_256:.0%`), and the FLOP ratio tends to
# $C/2$, each XL query reading up to $2C$ keys instead of up to $C$. (Chapter
# 5's KV cache stores keys and values and so avoids the re-projection. XL's
# keys $k_j = W_{k,E} h_j$ carry no position, since positions enter only
# through $r$, recomputed at every call, so at evaluation caching keys and
# values would give the same scores and skip the re-projection. Storing
# states serves training: the current $W_k$ and $W_v$, which the loss updates,
# project the memory at every step, so the loss trains them on the memory's
# keys and values too, although the states themselves are detached.)

# %% tags=["skip-grading", "hide-input"]
claim("flops_below_calls", "The FLOP ratio is below the call count C at every context.",
      lambda g: all(g[f"ch07_flop_ratio_{c}"] < c for c in (16, 32, 64, 128, 256)))
claim("reprojection_small_c", "At C = 16 most of XL's extra FLOPs are projections; at C = 256 "
      "most are attention.",
      lambda g: g["ch07_extra_proj_share_16"] > 0.5 > g["ch07_extra_proj_share_256"])
claim("cache_faster", "The cache evaluates faster than the sliding window at every context C.",
      lambda g: all(g[f"ch07_speedup_{c}"] > 1 for c in (16, 32, 64, 128, 256)))
claim("speedup_grows", "The cache's speed-up is larger at C = 256 than at C = 16.",
      lambda g: g["ch07_speedup_256"] > g["ch07_speedup_16"])

# %% [markdown]
# The FLOP counts do not depend on the machine, and their two claims hold in
# every run. The timings depend on the machine and its load, so the claims
# check holds a timing claim to a stricter rule: on the log scale, the run
# closest to the bound must clear it by more than the claim's quantity
# varies across the runs. Both timing claims pass that rule.

# %% [markdown]
# The paper reports up to 1,874 times at an attention length of 3,800 on a
# GPU, between 0.43 and 0.50 of that length across its table. That is not the
# configuration above: "attention length" there is the evaluation *memory*,
# presumably read as in its released evaluation scripts, with short segments
# (32 to 128 tokens) and `same_length`, so each query reads about $M$ keys,
# not up to $2C$, and a segment of 128 tokens re-projects a memory of 3,800,
# some 30 times its own length. Its figures are of a different cost
# balance; the agreement of 0.43-0.50 with our $C/2$ limit is a coincidence
# as far as this chapter can show.

# %% [markdown]
# ### A permutation's two masks
#
# Finally, the masks of one factorisation order of 8 tokens, rows = the
# stream at position $i$, columns = the positions it may read:

# %% tags=["skip-grading", "hide-input"]
perm = torch.randperm(8, generator=torch.Generator().manual_seed(3))
content, query = permutation_masks(perm)
labels = [f"{i} (step {int((perm == i).nonzero())})" for i in range(8)]
fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
heatmap(content.float(), rows=labels, cols=list(range(8)), ax=axes[0], colorbar=False,
        title=f"content stream, order {perm.tolist()}")
heatmap(query.float(), rows=labels, cols=list(range(8)), ax=axes[1], colorbar=False,
        title="query stream (no diagonal: never its own token)")
plt.tight_layout()
plt.show()

# %% [markdown]
# The content mask is the query mask plus the diagonal. Sorted by the order
# (rows and columns permuted by `perm`), both become the triangular masks of
# a left-to-right model: XLNet is an autoregressive model in a random order,
# with the positions kept.
#
# ### Why two streams
#
# Why not one stream? The usual parameterisation of an autoregressive model
# predicts the token at step $t$ from the content state of its context:
# $p(x_{z_t} = x \mid x_{z_{<t}}) \propto \exp(e(x)^\top h(x_{z_{<t}}))$.
# In a fixed order that is fine: step $t$ always predicts position $t$. In a
# random order it is not. $h(x_{z_{<t}})$ depends on the context, not on the
# position $z_t$ to be predicted, so two orders that share the context
# $z_{<t}$ but predict different positions give the same distribution
# {cite}`yang2019xlnet` (its section 2.3). The query stream fixes this:
# $g_{z_t}$ reads the context with a query built from the *position* $z_t$,
# and never from the token there.
#
# The cell below uses `TwoStreamAttention` with one head. Two orders share the
# context $\{2, 0\}$: `[2, 0, 3, 1]` predicts position 3 next, `[2, 0, 1, 3]`
# position 1. The one-stream prediction reads the content state of the last
# context position, 0, which is the same in both orders, so both targets get
# the same distribution; the query stream gives them different ones.

# %% tags=["skip-grading"]
torch.manual_seed(0)
D, V = 8, 5
layer, out = TwoStreamAttention(D, 1), nn.Linear(D, V)
pos = relative_positional_encoding(4, D).flip(0)                          # rows: positions 0..3
emb, w = torch.randn(V, D), torch.randn(D)
x = torch.tensor([1, 2, 3, 4])
order_a, order_b = torch.tensor([2, 0, 3, 1]), torch.tensor([2, 0, 1, 3])  # context {2, 0} in both
with torch.no_grad():
    h_a, g_a = (s[0] for s in layer((emb[x] + pos)[None], (w + pos)[None], order_a))
    h_b, g_b = (s[0] for s in layer((emb[x] + pos)[None], (w + pos)[None], order_b))
    one_a, one_b = out(h_a[0]).softmax(-1), out(h_b[0]).softmax(-1)       # target 3 / target 1
    two_a, two_b = out(g_a[3]).softmax(-1), out(g_b[1]).softmax(-1)
print("one stream, same distribution for targets 3 and 1:", torch.allclose(one_a, one_b))   # True
print("two streams, same distribution for targets 3 and 1:", torch.allclose(two_a, two_b))  # False

# %% [markdown]
# The one-stream failure is not a matter of training: whatever the weights,
# the two targets share one distribution. At fine-tuning, XLNet drops the
# query stream and uses the content stream as an ordinary encoder.


# %% [markdown]
# ### A permutation language model on real text
#
# Now the whole recipe on English. The text is the course's prose corpus
# (`corpora.prose_text`, see `docs/DATA.md`), character by character, in
# windows of 32 characters. The network is two layers of two-stream
# attention, each your `TwoStreamAttention` (4 heads, $d = 64$) followed by a
# feed-forward block, post-norm, the same weights for both streams, as in
# XLNet. The positions are the chapter's sinusoids, added to the token
# embeddings for the content stream and to one learned vector $w$ for the
# query stream. The output layer reads the query stream at the targets,
# through `target_mapping`.
#
# Four copies of this network train for 600 steps each (batches of 32
# windows, AdamW, seed 0), about a CPU-minute together:
#
# * the **permutation LM**: a random order per batch, the targets the last
#   half of the order (partial prediction with $K = 2$; the paper's $K = 6$
#   gives fewer targets per step, which a run this short cannot afford);
# * the **permutation LM with $K = 1$**: the same, every step of each order
#   a target (32 a window, as many as the left-to-right LM has), a control
#   for the number of targets;
# * the **left-to-right LM**: the same network in the identity order,
#   every position a target, an ordinary language model;
# * the **one-stream control**: random orders and $K = 2$, but each target is
#   predicted from the content stream of the step before it, as in the
#   usual parameterisation that section 2.3 of the paper rules out.
#
# All are scored on the same characters: 512 validation windows, each group
# of 8 sharing one of 64 random orders, the targets the order's last $1/6$
# (5 characters a window, the paper's cut), so each target has at least 27
# other characters of context in the order, mostly on both sides of it. The left-to-right model scores those characters from their
# left side only. The loss is the cross-entropy in nats per character.

# %% tags=["skip-grading"]
from attnkit import corpora

TRAIN_TEXT, VALID_TEXT = corpora.prose_text("train"), corpora.prose_text("valid")
CHARS = sorted(set(TRAIN_TEXT)) + ["\ufffd"]   # the training text's characters, then "unknown"
CHAR_ID = {c: i for i, c in enumerate(CHARS)}
WINDOW, N_WINDOWS = 32, 512


def encode(text: str) -> torch.Tensor:
    """str -> (len,) long; a character the training text lacks gets the last id."""
    return torch.tensor([CHAR_ID.get(c, len(CHARS) - 1) for c in text])


TRAIN_IDS = encode(TRAIN_TEXT)
VALID_IDS = encode(VALID_TEXT[:WINDOW * N_WINDOWS]).reshape(N_WINDOWS, WINDOW)   # (512, 32)


class TwoStreamLayer(nn.Module):
    """TwoStreamAttention and a feed-forward block, post-norm, the same weights for both streams."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int) -> None:
        super().__init__()
        self.attn = TwoStreamAttention(d_model, n_heads)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))

    def forward(self, h, g, perm):
        a_h, a_g = self.attn(h, g, perm)                                  # (B, T, D) each
        h, g = self.norm1(h + a_h), self.norm1(g + a_g)
        return self.norm2(h + self.ff(h)), self.norm2(g + self.ff(g))


class PermutationLM(nn.Module):
    """Characters (B, T) and an order -> logits at the order's targets (B, n, V) and the targets."""

    def __init__(self, vocab: int, d_model=64, n_heads=4, d_ff=256, n_layers=2, context=WINDOW):
        super().__init__()
        self.emb = nn.Embedding(vocab, d_model)
        self.w = nn.Parameter(0.1 * torch.randn(d_model))                # the query stream's start
        self.register_buffer("pos", relative_positional_encoding(context, d_model).flip(0))
        self.layers = nn.ModuleList(TwoStreamLayer(d_model, n_heads, d_ff) for _ in range(n_layers))
        self.out = nn.Linear(d_model, vocab)

    def forward(self, x, perm, k, one_stream=False):
        B, T = x.shape
        h = self.emb(x) + self.pos[:T]                                    # (B, T, D)
        g = (self.w + self.pos[:T]).expand(B, T, -1)                      # (B, T, D): no token
        for layer in self.layers:
            h, g = layer(h, g, perm)
        _, mapping = partial_prediction_targets(perm, k)                  # (n, T)
        n = len(mapping)
        if one_stream:          # the content stream of the step before each target
            read = h[:, perm[T - n - 1:T - 1]]                            # (B, n, D)
        else:
            read = torch.einsum("nt,btd->bnd", mapping, g)               # (B, n, D)
        return self.out(read), x[:, perm[T - n:]]                         # (B, n, V), (B, n)

# %% tags=["skip-grading", "hide-input"]
import time

from attnkit.glue import glue
from attnkit.train import progress

K_TRAIN, K_EVAL, STEPS = 2, 6, 600


def train_lm(mode: str, steps: int = STEPS, seed: int = 0, k: int = K_TRAIN) -> PermutationLM:
    """mode: "perm" (random orders, the last 1/k of each a target), "ltr" (identity order, every
    position), "one" (one stream)."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    model = PermutationLM(len(CHARS))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, 3e-3, total_steps=steps, pct_start=0.05)
    for _ in progress(range(steps), steps, mode):
        start = torch.randint(len(TRAIN_IDS) - WINDOW, (32,), generator=gen)
        x = TRAIN_IDS[start[:, None] + torch.arange(WINDOW)]               # (32, WINDOW)
        perm = torch.arange(WINDOW) if mode == "ltr" else torch.randperm(WINDOW, generator=gen)
        logits, y = model(x, perm, 1 if mode == "ltr" else k, one_stream=mode == "one")
        loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
    return model.eval()


ORDERS = torch.stack([torch.randperm(WINDOW, generator=torch.Generator().manual_seed(1000 + i))
                      for i in range(N_WINDOWS // 8)])                   # one order per 8 windows
TARGETS = ORDERS[:, -(WINDOW // K_EVAL):].repeat_interleave(8, 0)         # (512, 5) positions


@torch.no_grad()
def target_losses(model: PermutationLM, order: str, one_stream: bool = False) -> torch.Tensor:
    """(512, 5) losses at the evaluation targets, the last 1/6 of each window's order; order "perm"
    reads them in that order, "ltr" left to right (left context only)."""
    out = []
    for x, perm in zip(VALID_IDS.split(8), ORDERS):
        if order == "perm":
            logits, y = model(x, perm, K_EVAL, one_stream)                # (8, 5, V), (8, 5)
        else:
            logits, y = model(x, torch.arange(WINDOW), 1)                 # (8, 32, V), (8, 32)
            logits, y = logits[:, perm[-(WINDOW // K_EVAL):]], y[:, perm[-(WINDOW // K_EVAL):]]
        out.append(F.cross_entropy(logits.transpose(1, 2), y, reduction="none"))
    return torch.cat(out)


def interval(diff: torch.Tensor) -> tuple[float, float]:
    """95% bootstrap interval of the mean difference, resampling the 64 orders (each with its 8
    windows) 1,000 times: windows that share an order are not independent."""
    per_order = diff.mean(1).view(len(ORDERS), -1).mean(1)                # (64,)
    gen = torch.Generator().manual_seed(0)
    idx = torch.randint(len(per_order), (1000, len(per_order)), generator=gen)     # (1000, 64)
    means = per_order[idx].mean(1).sort().values
    return float(means[25]), float(means[974])


started = time.process_time()
perm_lm, ltr_lm, one_lm = (train_lm(mode) for mode in ("perm", "ltr", "one"))
every_lm = train_lm("perm", k=1)               # every step of each order a target, as in "ltr"
losses = {"perm_both": target_losses(perm_lm, "perm"), "perm_left": target_losses(perm_lm, "ltr"),
          "every_both": target_losses(every_lm, "perm"),
          "ltr_left": target_losses(ltr_lm, "ltr"),
          "one_stream": target_losses(one_lm, "perm", one_stream=True)}
counts = torch.bincount(TRAIN_IDS, minlength=len(CHARS)).double() + 1     # add-one unigram
losses["unigram"] = -(counts / counts.sum()).log()[VALID_IDS.gather(1, TARGETS)].float()
for name, value in losses.items():
    glue(f"ch07_plm_{name}", value.mean().item())
glue("ch07_plm_cpu", time.process_time() - started)
PAIRS = {"both_vs_left": ("perm_left", "perm_both"), "ltr_vs_perm": ("perm_both", "ltr_left"),
         "ltr_vs_every": ("every_both", "ltr_left")}
for name, (worse, better) in PAIRS.items():   # the gap: worse minus better
    low, high = interval(losses[worse] - losses[better])
    glue(f"ch07_plm_{name}_low", low)
    glue(f"ch07_plm_{name}_high", high)
every_low = interval(losses["every_both"] - losses["ltr_left"])[0]
glue("ch07_plm_every_verdict", "so the number of targets does not explain the gap" if every_low > 0
     else "so the gap may come from the number of targets")
print({name: round(value.mean().item(), 3) for name, value in losses.items()})

# %% [markdown]
# On this run (seed 0, {glue:text}`ch07_plm_cpu:.0f` CPU-seconds for the
# four trainings), in nats per character at the same 2,560 characters:
#
# | model | context of each target | loss |
# |---|---|---|
# | permutation LM, in the evaluation's order | at least 27 characters, mostly both sides | {glue:text}`ch07_plm_perm_both:.2f` |
# | permutation LM, left to right | the left side only | {glue:text}`ch07_plm_perm_left:.2f` |
# | permutation LM trained with $K = 1$, in the evaluation's order | at least 27 characters, mostly both sides | {glue:text}`ch07_plm_every_both:.2f` |
# | left-to-right LM | the left side only | {glue:text}`ch07_plm_ltr_left:.2f` |
# | one-stream control, in the evaluation's order | at least 27 characters, mostly both sides | {glue:text}`ch07_plm_one_stream:.2f` |
# | character frequencies (unigram) | none | {glue:text}`ch07_plm_unigram:.2f` |
#
# The permutation LM uses the right side: the same network scores the same
# characters lower when the order gives it both sides than left to right,
# by {glue:text}`ch07_plm_both_vs_left_low:.2f` to
# {glue:text}`ch07_plm_both_vs_left_high:.2f` nats (a 95% bootstrap interval
# over the 64 orders and their windows).
# After 600 steps the left-to-right LM, which reads only the left side, is
# still better than the permutation LM with both sides, by
# {glue:text}`ch07_plm_ltr_vs_perm_low:.2f` to
# {glue:text}`ch07_plm_ltr_vs_perm_high:.2f` nats: every order's masks differ,
# so the permutation objective is a harder task, learnt more slowly, the
# slow convergence that made the paper predict only the last steps of each
# order. The permutation LM trains on 16 targets a window ($K = 2$) and the
# left-to-right LM on 32. Trained with $K = 1$, every step of each order a
# target (32 a window), the permutation LM scores
# {glue:text}`ch07_plm_every_both:.2f` and stays behind the left-to-right LM
# by {glue:text}`ch07_plm_ltr_vs_every_low:.2f` to
# {glue:text}`ch07_plm_ltr_vs_every_high:.2f` nats,
# {glue:text}`ch07_plm_every_verdict`. The one-stream control stays close to the character frequencies:
# a prediction that does not know which position it is for gains little
# from its context.
# These are one run's figures, not claims checked over seeds.


# %% [markdown]
# ## Summary
#
# * Segment-level recurrence caches each layer's input states of the previous
#   segment, detached, as a memory of `mem_len` states; queries attend to
#   `[memory; segment]`, the memory always visible, the segment causal. The
#   reach grows with depth, while gradients stay inside a segment.
# * Relative positions make cached states reusable: the score is
#   $(q_i + u)^\top k_j + (q_i + v)^\top r_{i-j}$, content-content,
#   content-position, a global content bias $u$ and a global position bias
#   $v$, with $r$ the projected sinusoid of the distance.
# * The rel-shift (pad a zero column, reinterpret, drop the first row)
#   aligns scores computed against distances $\text{klen}-1..0$ with the key
#   positions without a gather; we checked it against a loop.
# * The memory lets a query read values beyond its segment in one hop, and a
#   two-layer model relay them further; trained with the memory, XL learns the
#   relay, which a model trained on segments alone and read with a memory does
#   not. Evaluated as the paper does, with a memory longer than in training and
#   the same number of keys for every query, one hop reaches further still.
# * On Python source read character by character, XL read with its memory
#   beat the same network trained without memory, even read with the same
#   memory ({glue:text}`ch07_doc_diff_same_reading:+.3f` nats per character;
#   one training each); a memory longer than in training added nothing.
# * Evaluation with the cache computes each segment once, re-projecting its
#   memory (XL caches states, not keys and values); the sliding window
#   recomputes the whole context for each token. In this configuration
#   (segment = memory = $C$) the FLOP ratio stays below $C$ and tends to
#   $C/2$ when attention dominates. Timed on one thread, the cache is faster
#   at every $C$, and more so at $C = 256$ than at $C = 16$.
# * XLNet maximises the likelihood over factorisation orders; two-stream
#   attention gives the query stream the position but not the content of the
#   token it predicts, since one stream would give every target position the
#   same distribution; partial prediction trains only the last $1/K$ of each
#   order.
# * Trained on English characters, the permutation LM predicts a character
#   better from both sides than from its left; in our short run it stays
#   behind a left-to-right LM of the same network, and without the query
#   stream it stays near the character frequencies.
#
# **What is reproducible.** The check cells print the same numbers on every
# machine. The experiments set their thread count and seed themselves; the
# page runs them with seed 0 on one thread, and with the same code, seed and
# threads a run repeats bit for bit on one machine. A second thread changes
# the float sums and so the trained models; another correct solution,
# another CPU, a GPU or another library version can too; the times also
# follow the machine's load. So the text quotes this run's figures through `glue`, the
# tables give their range over the 40 recorded runs of the claims check (30
# distinct trainings), and every conclusion is either a claim checked on all of them or
# stated as this run's figure: the near band's drop with a long memory, its
# split by distractor, the sizes of the evaluation speed-ups, the two-stream
# check cells and the permutation LM's losses.
#
# ## Exercises
#
# 1. **Memory length.** Evaluate the XL model with `mem_len` 0, 8, 16, 32, 64
#    (without retraining), segment by segment and one token a call. Where
#    does accuracy saturate, and why does the near band fall with a long
#    memory?
# 2. **Depth.** Train XL with 1 and with 3 layers. How does the reach (the
#    largest distance with good accuracy) change? Compare with $N \times M$.
# 3. **Absolute positions.** Replace the relative encodings with chapter 3's
#    absolute ones added to the embeddings (positions 0..T-1 in every
#    segment) and train with memory. What goes wrong at the boundary?
# 4. **Ablate the terms.** Zero (and freeze) $u$, then $v$, then drop term
#    (b). Zero and freeze the bias of `w_q` as well (`w_q.bias`): $b_q$ is
#    added to every query, so with $u = v = 0$ terms (c) and (d) would survive
#    as $b_q^\top k_j$ and $b_q^\top r_{i-j}$. Which term does this task need?
# 5. **A faster shift.** Implement the relative scores with a gather
#    (`torch.gather` over the distance index) and compare speed and memory
#    with `rel_shift` for `qlen = klen = 512`.
# 6. **A longer permutation LM.** Train the page's permutation LM and
#    left-to-right LM for 3,000 steps, the permutation LM with $K = 2$ and
#    with the paper's $K = 6$. Does the permutation LM, reading both sides,
#    overtake the left-to-right LM on the same characters? Which $K$ gets
#    there first?
# 7. **Relative terms in the query stream.** Give `TwoStreamAttention`
#    Transformer-XL's relative scores (`rel_attention_scores`, with `r_net`,
#    $u$ and $v$) and drop the sinusoids added to $w$. Does the permutation
#    LM learn faster?

# %% [markdown]
# ## References
#
# ```{bibliography}
# :filter: docname in docnames
# ```
