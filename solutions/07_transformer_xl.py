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
# models of Al-Rfou et al. {cite}`alrfou2019` (the "vanilla" model of this
# chapter) did. Two problems follow.
#
# * **Context fragmentation.** The first token of a segment has no context at
#   all, the second has one token of it, and *nothing* before the segment
#   boundary is ever visible: a dependency longer than $L$ cannot be learned,
#   and a shorter one is cut whenever a boundary falls inside it.
# * **Slow evaluation.** To give every token a full window at test time, the
#   vanilla model slides the window one token at a time and recomputes all
#   $L$ positions for every single prediction: $L$ times the work of one
#   forward pass per token.
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
# encodings with the *rel-shift* trick (proved against a brute-force loop),
# a relative multi-head attention and an XL layer; you train a vanilla
# segment model and an XL model on a task whose dependency is longer than a
# segment, measure how evaluation with the cache beats the sliding window,
# and build XLNet's two attention masks.

# %%
# Setup: on Colab or Binder this installs the course's helpers (`attnkit`); locally, make setup did.
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
# layers, although each gradient stays within one segment.
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
# attention depend on learned relative distances; Transformer-XL rewrites
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
# its own pair; the paper's code shares them across layers by default, both
# work).
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
# appears in fine-tuning and the masked tokens are predicted independently.
# An autoregressive model predicts every token from one side only. XLNet takes
# the expectation over **factorisation orders** $z$ (permutations of
# $1..T$):
#
# $$\max_\theta\ \mathbb{E}_{z\sim\mathcal{Z}_T}\Big[\sum_{t=1}^T \log p_\theta(x_{z_t}\mid x_{z_{<t}})\Big].$$
#
# The tokens stay in place (the positional encodings are unchanged); only the
# attention masks change. Across orders, every token is predicted from
# every subset of the others, both sides included. To predict $x_{z_t}$ the
# model must know *which position* it is predicting, but not its content:
# **two-stream attention**. The *content stream* $h_{z_t}$ sees the tokens
# $z_{\le t}$, itself included (it is the representation used as a key by
# later tokens); the *query stream* $g_{z_t}$ sees $z_{<t}$ and its own
# position, never its own content, and predicts $x_{z_t}$. With
# $\mathrm{rank}[z_t] = t$, content stream $i$ sees $j$ iff
# $\mathrm{rank}[j] \le \mathrm{rank}[i]$, query stream iff
# $\mathrm{rank}[j] < \mathrm{rank}[i]$. **Partial prediction** trains only
# the last $T/K$ tokens of each order ($K = 6$ or $7$ in the paper), which
# have enough context to be predictable.

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
# only $b_q + u$ and $b_q + v$ matter. The paper's code has no bias on the
# query projection; we keep chapter 3's `nn.Linear` with bias. Keys and values
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
# **Two streams.** One step of two-stream attention, single-head and without
# projections to keep it short (given code): both streams take keys and
# values from the content stream $h$; the content stream queries with $h$,
# the query stream with $g$, which starts as a learned vector $w$ and never
# as the token. In XLNet $g$ learns where it stands through relative
# attention; this toy has none, so it adds the position to $w$ instead. Changing the token at a position changes
# that position's content stream but leaves its query stream alone:

# %%
def two_stream_step(h: torch.Tensor, g: torch.Tensor, perm: torch.Tensor):
    """One attention step of both streams: h (T, D) content, g (T, D) query."""
    content, query = permutation_masks(perm)

    def attend(queries, mask):                                          # (T, D), (T, T)
        scores = (queries @ h.T / math.sqrt(h.shape[-1])).masked_fill(~mask, float("-inf"))
        weights = torch.nan_to_num(scores.softmax(-1))                   # a row with no key: 0
        return weights @ h                                               # (T, D)

    return attend(h, content), attend(g, query)


torch.manual_seed(0)
perm = torch.tensor([2, 0, 3, 1])
pos_enc = relative_positional_encoding(4, 8).flip(0)                    # rows: positions 0..3
emb, w = torch.randn(5, 8), torch.randn(8)
x_a, x_b = torch.tensor([1, 2, 3, 4]), torch.tensor([1, 0, 3, 4])     # differ at position 1
h_a, g_a = two_stream_step(emb[x_a] + pos_enc, w + pos_enc, perm)
h_b, g_b = two_stream_step(emb[x_b] + pos_enc, w + pos_enc, perm)
print(torch.allclose(g_a[1], g_b[1]), torch.allclose(h_a[1], h_b[1]))   # True False

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
# $d_{ff} = 128$, trained on segments of $T = 16$ tokens, 64 streams a batch,
# for 500 steps of Adam (learning rate $2\cdot10^{-3}$, gradient norm clipped
# at 1.0, seed 0). The **vanilla** model reads each segment alone
# (`mem_len = 0`); the **XL** model reads the streams in order and carries a
# memory of $M = 16$ states per layer from segment to segment. Same data,
# same steps, same parameters.

# %% tags=["skip-grading", "hide-input"]
import time

from attnkit.glue import glue

N_NOISE, N_VALUES, MAX_DIST = 16, 8, 48
Q_TOKEN = N_NOISE + N_VALUES                     # tokens: noise, values V_x, Q, answers A_x
VOCAB = Q_TOKEN + 1 + N_VALUES


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


SEG, MEM, BATCH, STEPS = 16, 16, 64, 500
device = attnkit.pick_device()
train_tokens, train_dist = recall_stream(BATCH, SEG * STEPS + 1, torch.Generator().manual_seed(0))
train_tokens, train_dist = train_tokens.to(device), train_dist.to(device)
print(train_tokens[0, :40].tolist())


def train_recall(mem_len: int) -> tuple[XLLanguageModel, list[float]]:
    """Train on the segments in order, carrying the memory when mem_len > 0."""
    torch.manual_seed(0)
    model = XLLanguageModel(VOCAB, d_model=64, n_heads=4, d_ff=128, n_layers=2).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    mems, losses = None, []
    model.train()
    for s in range(STEPS):
        x = train_tokens[:, s * SEG:(s + 1) * SEG]                              # (B, T)
        y = train_tokens[:, s * SEG + 1:(s + 1) * SEG + 1]                      # (B, T) next tokens
        scored = train_dist[:, s * SEG:(s + 1) * SEG] > 0                       # (B, T) at Q
        logits, mems = model(x, mems, mem_len)
        loss = F.cross_entropy(logits[scored], y[scored])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    return model.eval(), losses


models, train_time = {}, {}
for name, mem_len in [("vanilla", 0), ("XL", MEM)]:
    start = time.perf_counter()
    models[name], losses = train_recall(mem_len)
    train_time[name] = time.perf_counter() - start
    print(f"{name}: {STEPS} steps in {train_time[name]:.0f} s, "
          f"final loss {sum(losses[-50:]) / 50:.3f}")

# %% [markdown]
# We evaluate on 64 fresh streams of 640 tokens in three ways: the vanilla
# model **segment by segment** (as trained), the vanilla model with a
# **sliding window** of the last 16 tokens before every query (its best
# case: every query gets the full window), the XL model segment by
# segment **with memory**, `mem_len = 16` as in training, and, as a control,
# the *vanilla* model read with the same memory (evaluation only: it never
# saw a memory in training).

# %% tags=["skip-grading", "hide-input"]
eval_tokens, eval_dist = recall_stream(64, SEG * 40 + 1, torch.Generator().manual_seed(1))
eval_tokens, eval_dist = eval_tokens.to(device), eval_dist.to(device)


@torch.no_grad()
def accuracy_by_segments(model: XLLanguageModel, mem_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(correct, count) per distance 0..MAX_DIST, reading the streams segment by segment."""
    correct = torch.zeros(MAX_DIST + 1, device=device)
    count = torch.zeros(MAX_DIST + 1, device=device)
    mems = None
    for s in range(eval_tokens.shape[1] // SEG):
        x = eval_tokens[:, s * SEG:(s + 1) * SEG]
        y = eval_tokens[:, s * SEG + 1:(s + 1) * SEG + 1]
        d = eval_dist[:, s * SEG:(s + 1) * SEG]
        logits, mems = model(x, mems, mem_len)
        hit = (logits.argmax(-1) == y).float()
        correct.index_add_(0, d[d > 0], hit[d > 0])
        count.index_add_(0, d[d > 0], torch.ones_like(hit[d > 0]))
    return correct.cpu(), count.cpu()


@torch.no_grad()
def accuracy_sliding(model: XLLanguageModel, window: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(correct, count) per distance, each query read with the `window` tokens ending at it."""
    b, t = torch.nonzero(eval_dist[:, window - 1:-1] > 0, as_tuple=True)
    t = t + window - 1                                                    # query positions
    idx = t[:, None] + torch.arange(1 - window, 1, device=device)        # (N, window)
    logits, _ = model(eval_tokens[b[:, None], idx])                       # (N, window, V)
    hit = (logits[:, -1].argmax(-1) == eval_tokens[b, t + 1]).float().cpu()
    d = eval_dist[b, t].cpu()
    return (torch.zeros(MAX_DIST + 1).index_add_(0, d, hit),
            torch.zeros(MAX_DIST + 1).index_add_(0, d, torch.ones_like(hit)))


results = {"vanilla, segments": accuracy_by_segments(models["vanilla"], 0),
           "vanilla, sliding window 16": accuracy_sliding(models["vanilla"], SEG),
           "vanilla, memory 16 (eval only)": accuracy_by_segments(models["vanilla"], MEM),
           "XL, memory 16": accuracy_by_segments(models["XL"], MEM)}


def band(res, lo: int, hi: int) -> float:
    """Accuracy over the distances lo..hi."""
    correct, count = res
    return (correct[lo:hi + 1].sum() / count[lo:hi + 1].sum()).item()


bands = [(1, 15), (16, 31), (32, 48)]
for name, res in results.items():
    print(f"{name:31s}"
          + "".join(f"  d {lo:2d}-{hi:2d}: {band(res, lo, hi):.2f}" for lo, hi in bands))
keys = {"vanilla, segments": "vanilla_seg", "vanilla, sliding window 16": "vanilla_win",
        "vanilla, memory 16 (eval only)": "vanilla_mem", "XL, memory 16": "xl"}
for name, res in results.items():
    for (lo, hi), where in zip(bands, ["near", "mid", "far"]):
        glue(f"ch07_acc_{keys[name]}_{where}", band(res, lo, hi))

fig, ax = plt.subplots(figsize=(7, 3.2))
dists = torch.arange(1, MAX_DIST + 1)
for name, (correct, count) in results.items():
    acc = correct[1:] / count[1:].clamp(min=1)
    smooth = F.avg_pool1d(acc[None, None], 3, 1, 1, count_include_pad=False)[0, 0]
    ax.plot(dists, smooth, label=name)
ax.axhline(1 / N_VALUES, color="gray", ls=":", label="chance")
for edge in (SEG, SEG + MEM):
    ax.axvline(edge, color="gray", lw=0.5)
ax.set(xlabel="distance d from the value to the query", ylabel="accuracy (running mean of 3)",
       title="recall across segment boundaries (segment 16, memory 16)")
ax.legend(fontsize=8)
plt.tight_layout()
plt.show()

# %% [markdown]
# The measured accuracies, by distance band:
#
# | model | $d$ 1-15 | $d$ 16-31 | $d$ 32-48 |
# | --- | --- | --- | --- |
# | vanilla, segment by segment | {glue:text}`ch07_acc_vanilla_seg_near:.2f` | {glue:text}`ch07_acc_vanilla_seg_mid:.2f` | {glue:text}`ch07_acc_vanilla_seg_far:.2f` |
# | vanilla, sliding window of 16 | {glue:text}`ch07_acc_vanilla_win_near:.2f` | {glue:text}`ch07_acc_vanilla_win_mid:.2f` | {glue:text}`ch07_acc_vanilla_win_far:.2f` |
# | vanilla, memory 16 (evaluation only) | {glue:text}`ch07_acc_vanilla_mem_near:.2f` | {glue:text}`ch07_acc_vanilla_mem_mid:.2f` | {glue:text}`ch07_acc_vanilla_mem_far:.2f` |
# | XL, memory 16 | {glue:text}`ch07_acc_xl_near:.2f` | {glue:text}`ch07_acc_xl_mid:.2f` | {glue:text}`ch07_acc_xl_far:.2f` |
#
# Chance is 1/8 = 0.125. Every accuracy here comes from one training run per
# model (seed 0); we did not repeat the runs over seeds. (The cell prints the
# training times; on a shared machine they follow its load more than the
# work, which is larger for XL.) Read the curves with the geometry in mind. Read segment by
# segment, the vanilla model sees the value only when the query sits at
# least $d$ tokens into its segment, so its accuracy falls with $d$ and is at
# chance from $d = 16$ on: *context fragmentation*. The sliding window gives
# every query its 15 predecessors, and so is right up to $d = 15$, but
# nothing further, at 16 times the cost. XL reads the memory: a query at
# position $i$ of its segment sees $16 + i$ tokens back directly, and more
# through the second layer's memory, which holds first-layer states that had
# themselves looked back. Its accuracy stays high past one segment. Part of
# this comes for free: the control row, the vanilla model read with a memory
# it never saw in training, also gains past $d = 16$, because its scores
# depend only on distances, and distances up to 15 it has learned. But it
# does not match XL in the middle band and stays near chance in the far one.
# In XL training the memory states are detached, yet attention *over* them
# is trained: the loss at a query whose value sits in the memory updates
# $W_q$, $W_k$, $W_v$, `r_net`, $u$ and $v$ at distances beyond one segment.
# Only the memory states themselves receive no gradient.
#
# ### Evaluation speed: cache against sliding window
#
# To predict every token of a long text with a context of $C$ tokens, the
# vanilla model runs one forward pass over a window of $C$ tokens *per
# token*. XL runs one pass per *segment* of $C$ tokens, with a memory of $C$
# (every token gets at least $C$ tokens of context, up to $2C$). We time
# both, per predicted token (each figure the median of 7 timings), with the
# model above, on a batch of one stream and one window per vanilla call; we
# also count the floating-point operations of each (`FlopCounterMode`). This
# measures the number of calls and the arithmetic, not the best vanilla
# evaluator: `accuracy_sliding` above batches all windows into one call.
# `benchmarks/bench_07_xl_eval.py` does the same at longer contexts.

# %% tags=["skip-grading", "hide-input"]
from torch.utils.flop_counter import FlopCounterMode

from attnkit.timing import time_call

model = models["XL"]
text = torch.randint(VOCAB, (1, 4096), generator=torch.Generator().manual_seed(2)).to(device)


@torch.no_grad()
def vanilla_per_token(context: int, n_tokens: int = 8) -> float:
    """Seconds per token, sliding a window of `context` tokens one token at a time."""
    def run():
        for t in range(n_tokens):
            model(text[:, t:t + context])
    return time_call(run, repeat=7, device=device) / n_tokens


@torch.no_grad()
def xl_per_token(context: int) -> float:
    """Seconds per token, reading segments of `context` tokens with a memory of `context`."""
    with torch.no_grad():
        _, mems = model(text[:, :context], None, context)                 # warm memory
    return time_call(lambda: model(text[:, context:2 * context], mems, context),
                     repeat=7, device=device) / context


@torch.no_grad()
def flop_ratio(context: int) -> float:
    """Counted FLOPs per token of the sliding window over those of the cache."""
    def count(fn) -> int:
        with FlopCounterMode(display=False) as counter:
            fn()
        return counter.get_total_flops()
    _, mems = model(text[:, :context], None, context)
    vanilla = count(lambda: model(text[:, :context]))
    xl = count(lambda: model(text[:, context:2 * context], mems, context)) / context
    return vanilla / xl


contexts = [16, 32, 64, 128, 256]
speed = {c: (vanilla_per_token(c), xl_per_token(c)) for c in contexts}
flops = {c: flop_ratio(c) for c in contexts}
print(f"{'context':>8s} {'vanilla ms/token':>17s} {'XL ms/token':>12s} {'speed-up':>9s}"
      f" {'speed-up/C':>11s} {'FLOP ratio':>11s}")
for c, (van, xl) in speed.items():
    print(f"{c:8d} {1e3 * van:17.3f} {1e3 * xl:12.4f} {van / xl:9.1f}"
          f" {van / xl / c:11.2f} {flops[c]:11.1f}")
C_SMALL, C_LARGE = contexts[0], contexts[-1]
glue("ch07_speedup_small", speed[C_SMALL][0] / speed[C_SMALL][1])
glue("ch07_speedup_large", speed[C_LARGE][0] / speed[C_LARGE][1])
glue("ch07_speedup_small_per_c", speed[C_SMALL][0] / speed[C_SMALL][1] / C_SMALL)
glue("ch07_speedup_large_per_c", speed[C_LARGE][0] / speed[C_LARGE][1] / C_LARGE)
glue("ch07_flop_ratio_small", flops[C_SMALL])
glue("ch07_flop_ratio_large", flops[C_LARGE])
glue("ch07_speed_device", device.type)

fig, ax = plt.subplots(1, 2, figsize=(10, 3.2))
ax[0].loglog(contexts, [1e3 * speed[c][0] for c in contexts], "o-", label="vanilla, sliding window")
ax[0].loglog(contexts, [1e3 * speed[c][1] for c in contexts], "o-", label="XL, cache")
ax[0].set(xlabel="context C", ylabel="ms per token", title=f"evaluation time ({device.type})")
ax[0].legend()
ax[1].loglog(contexts, [speed[c][0] / speed[c][1] for c in contexts], "o-", label="measured")
ax[1].loglog(contexts, contexts, "k--", lw=1, label="C (call count)")
ax[1].loglog(contexts, [flops[c] for c in contexts], "k:", label="FLOP ratio")
ax[1].set(xlabel="context C", ylabel="vanilla / XL", title="speed-up of the cache")
ax[1].legend(fontsize=8)
plt.tight_layout()
plt.show()

# %% [markdown]
# On this run ({glue:text}`ch07_speed_device`) the cache is
# {glue:text}`ch07_speedup_small:.0f` times faster than the sliding window at
# $C = 16$ ({glue:text}`ch07_speedup_small_per_c:.2f` $C$) and
# {glue:text}`ch07_speedup_large:.0f` times at $C = 256$
# ({glue:text}`ch07_speedup_large_per_c:.2f` $C$). Two bounds frame these
# figures. Per segment of $C$ tokens, XL does at least the work of one
# window (the same $C$ queries, against $C$ to $2C$ keys), while the window
# makes $C$ calls. If the fixed cost of a call dominated, the ratio would be
# $C$; if arithmetic dominated, it would be the FLOP ratio, which we counted:
# {glue:text}`ch07_flop_ratio_small:.0f` at $C = 16$ and
# {glue:text}`ch07_flop_ratio_large:.0f` at $C = 256$, below $C$ because XL's
# queries see up to twice as many keys. A model this small sits between the
# two, so by this count the ratio should not exceed $C$. Medians of 7
# timings of small models on a shared machine are noisy, and the count
# ignores what a call costs besides its arithmetic and its launch (building
# masks and position tables, Python overhead, caches), which need not be the
# same for a window and a segment; a point above $C$, or a curve that is not
# monotone, comes from one of these, and we have not separated them. The
# robust reading is the trend: the speed-up grows with $C$. When attention dominates, the FLOP
# ratio tends to $C/2$ (each XL query reads $2C$ keys instead of $C$), and
# that is what the paper reports: up to 1,874 times at a context of 3,800
# on a GPU, and between 0.43 and 0.50 of $C$ across its table of contexts.
#
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
#   positions without a gather; we proved it against a loop.
# * Evaluation with the cache computes each position once; the sliding window
#   recomputes the whole context for each token. The speed-up is at most $C$
#   (the ratio of calls) and, when arithmetic dominates, near the FLOP ratio,
#   which tends to $C/2$.
# * XLNet maximises the likelihood over factorisation orders; two-stream
#   attention gives the query stream the position but not the content of the
#   token it predicts, and partial prediction trains only the last tokens of
#   each order.
#
# **What is reproducible.** The check cells print the same numbers on every
# machine. Training is seeded (seed 0), and each accuracy comes from that
# one run; they may move across devices and library versions, and the times
# depend on the machine, which is why the text quotes this run's own numbers.
#
# ## Exercises
#
# 1. **Memory length.** Evaluate the XL model with `mem_len` 0, 8, 16, 32, 64
#    (without retraining). Where does accuracy saturate? Does a memory longer
#    than in training help, and why or why not?
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
# 6. **Two streams.** Build a one-layer XLNet with the masks of
#    `permutation_masks`, train it on the recall task with partial prediction
#    ($K = 4$), and compare its accuracy on the answers with a left-to-right
#    model.

# %% [markdown]
# ## References
#
# ```{bibliography}
# :filter: docname in docnames
# ```
