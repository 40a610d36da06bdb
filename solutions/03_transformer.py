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
#     chapter: 03_transformer
# ---

# %% [markdown]
# # 3. The Transformer
#
# ## Motivation
#
# The encoder-decoders of chapters 1 and 2 read a sentence one token at a
# time: the state at position $t$ needs the state at $t-1$. That has two
# costs. Training cannot run in parallel over positions, and information
# from token $i$ reaches token $j$ only through $|i-j|$ recurrent steps, each
# one a chance to forget. Attention (chapter 2) already gave the decoder a
# direct path to every encoder state. The Transformer of Vaswani et al.
# (2017), *Attention Is All You Need*, goes all the way: it drops recurrence
# and builds both the encoder and the decoder from attention alone.
#
# * **Self-attention**: every position of a sequence looks at every
#   position of the same sequence, in one matrix product. The path between
#   any two tokens has length 1, and all positions are computed at once.
# * **Multi-head attention**: several attentions side by side, each in its
#   own small subspace, so that one head can follow syntax while another
#   follows coreference.
# * **Positional encodings**: attention is blind to order, so the position
#   is added to each embedding as a pattern of sines and cosines.
# * **Residual connections and layer normalisation** around every
#   sub-layer make a deep stack trainable.
# * **The decoder** masks its self-attention so that position $t$ never
#   sees the future, and attends to the encoder output through
#   cross-attention.
#
# In this chapter you build each piece as a graded function, assemble a
# complete encoder-decoder, train it from scratch on a small translation-like
# task, look at what its heads attend to, decode with greedy and beam search,
# and measure what self-attention costs compared with an RNN and a
# convolution.

# %%
import math
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

import attnkit
from attnkit.data import Vocab, batches, date_pairs, reversal_pairs

torch.manual_seed(0)

# %% [markdown]
# ## The math
#
# ### Self-attention in six steps
#
# Take the sentence
#
# > *The animal didn't cross the street because it was too tired.*
#
# What does *it* refer to? A reader knows at once: the animal. Self-attention
# is the mechanism that lets the representation of *it* be built from the
# representations of the other words, weighted by how relevant each one is.
# For one word with embedding $x_i \in \mathbb{R}^{d_\text{model}}$:
#
# 1. **Project.** Multiply by three learned matrices to get a query, a key
#    and a value: $q_i = x_i W^Q$, $k_j = x_j W^K$, $v_j = x_j W^V$, each of
#    width $d_k$ (the paper: $d_\text{model} = 512$, $d_k = 64$).
# 2. **Score.** Compare the query of *it* with the key of every word:
#    $e_{ij} = q_i \cdot k_j$.
# 3. **Scale.** Divide by $\sqrt{d_k}$. If the components of $q$ and $k$ have
#    mean 0 and variance 1, $q\cdot k$ has variance $d_k$; without the
#    division the softmax saturates and its gradients vanish.
# 4. **Softmax** over $j$: $\alpha_{ij} = \exp(e_{ij}/\sqrt{d_k}) / \sum_{j'}\exp(e_{ij'}/\sqrt{d_k})$.
# 5. **Weight** every value by its attention weight: $\alpha_{ij} v_j$.
# 6. **Sum**: $z_i = \sum_j \alpha_{ij} v_j$ is the new representation of *it*.
#
# Here are the six steps on the running example, with random (untrained)
# embeddings and projections: the numbers show the mechanics, not yet a
# meaning. A trained model learns $W^Q, W^K$ so that the query of *it* meets
# the key of *animal*.

# %%
sentence = "The animal didn't cross the street because it was too tired".split()
g = torch.Generator().manual_seed(0)
n, d_model_toy, d_k_toy = len(sentence), 8, 4
X = torch.randn(n, d_model_toy, generator=g)                       # (n, d_model): one row per word
W_q, W_k, W_v = (torch.randn(d_model_toy, d_k_toy, generator=g) / math.sqrt(d_model_toy) for _ in range(3))
i = sentence.index("it")

Q, K, V = X @ W_q, X @ W_k, X @ W_v          # step 1: (n, d_k) each
scores = K @ Q[i]                            # step 2: (n,)  q_it . k_j for every word j
scaled = scores / math.sqrt(d_k_toy)         # step 3: (n,)
alpha = scaled.softmax(-1)                   # step 4: (n,)  sums to 1
weighted = alpha[:, None] * V                # step 5: (n, d_k)
z_it = weighted.sum(0)                       # step 6: (d_k,)
for word, e, a in zip(sentence, scaled, alpha):
    print(f"{word:>8s}  score/sqrt(d_k) {e:+.2f}  weight {a:.2f}")
print("z_it =", z_it)

# %% [markdown]
# All rows at once is the **matrix form**. Stack the queries, keys and
# values of all positions into $Q \in \mathbb{R}^{T\times d_k}$,
# $K \in \mathbb{R}^{S\times d_k}$, $V \in \mathbb{R}^{S\times d_v}$:
#
# $$\mathrm{Attention}(Q, K, V) = \mathrm{softmax}\!\left(\frac{QK^\top}{\sqrt{d_k}}\right) V .$$
#
# One $T\times S$ matrix of scores, a softmax along each row, one more matrix
# product. Row $i$ of the result is exactly $z_i$ above:

# %%
Z = torch.softmax(Q @ K.T / math.sqrt(d_k_toy), dim=-1) @ V     # (n, n) @ (n, d_k) -> (n, d_k)
print(torch.allclose(Z[i], z_it))  # True

# %% [markdown]
# Why divide by $\sqrt{d_k}$? With $d_k = 64$ and unit-variance vectors the
# raw dot products have a standard deviation of about 8: a typical softmax
# row then puts almost all its weight on one key, and the gradient through
# the other keys is nearly zero. Scaling brings the standard deviation back
# to about 1:

# %%
gs = torch.Generator().manual_seed(1)
q_, k_ = torch.randn(1000, 64, generator=gs), torch.randn(1000, 10, 64, generator=gs)
raw = torch.einsum("nd,nsd->ns", q_, k_)                          # (1000, 10)
print(f"std of q.k: {raw.std():.1f}, after scaling: {(raw / 8).std():.2f}")
print(f"mean largest weight: unscaled {raw.softmax(-1).max(-1).values.mean():.2f}, "
      f"scaled {(raw / 8).softmax(-1).max(-1).values.mean():.2f}")
# std of q.k: 8.0, after scaling: 1.00
# mean largest weight: unscaled 0.93, scaled 0.46

# %% [markdown]
# ## Implementation
#
# ### Scaled dot-product attention
#
# Our function works on any leading dimensions `(...)` (batch, heads), takes
# an optional boolean **mask, True where a query may attend to a key**
# (PyTorch's convention for a boolean mask), and returns both the output
# and the weights. Masked scores are set to $-\infty$ before the softmax, so
# that their weights are exactly 0. A query whose keys are *all* masked
# (this happens with padded queries) would give $0/0$; we define its weights
# and its output to be all zeros, never NaN.

# %% nbgrader={"grade": false, "grade_id": "scaled_dot_product_attention", "locked": false, "schema_version": 3, "solution": true}
def scaled_dot_product_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                                 mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q k^T / sqrt(d_k)) v.

    q: (..., T, d_k), k: (..., S, d_k), v: (..., S, d_v); mask: bool, broadcastable
    to (..., T, S), True where query t may attend to key s.
    Returns (out (..., T, d_v), weights (..., T, S)). Masked weights are exactly 0;
    a query with every key masked gets all-zero weights and output (never NaN).
    """
    ### BEGIN SOLUTION
    d_k = q.shape[-1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)           # (..., T, S)
    if mask is not None:
        mask = mask.to(torch.bool)
        scores = scores.masked_fill(~mask, float("-inf"))
        # a row with no allowed key would be softmax(-inf, ..., -inf) = NaN: give it finite scores ...
        scores = scores.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    weights = scores.softmax(dim=-1)                              # (..., T, S)
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)                 # ... and zero weights
    return weights @ v, weights                                   # (..., T, d_v), (..., T, S)
    ### END SOLUTION


# %%
# Check: shapes, rows summing to 1, a masked key getting weight 0, a fully masked query.
g = torch.Generator().manual_seed(0)
q, k, v = torch.randn(2, 3, 4, generator=g), torch.randn(2, 5, 4, generator=g), torch.randn(2, 5, 6, generator=g)
mask = torch.ones(3, 5, dtype=torch.bool)
mask[0, 4] = False    # query 0 may not see key 4
mask[2] = False       # query 2 sees nothing
out, w = scaled_dot_product_attention(q, k, v, mask)
print(out.shape, w.shape)         # torch.Size([2, 3, 6]) torch.Size([2, 3, 5])
print(w.sum(-1))                  # tensor([[1., 1., 0.], [1., 1., 0.]])
print(w[:, 0, 4], out[:, 2].abs().sum())  # tensor([0., 0.]) tensor(0.)
# the same numbers as PyTorch's fused kernel (which also gives zeros for a fully masked query)
print(torch.allclose(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask), atol=1e-6))  # True

# %% [markdown]
# ### Masks
#
# Two masks are all a Transformer needs.
#
# * The **causal mask** of the decoder: position $t$ may attend to
#   positions $\le t$ only (the lower triangle, diagonal included). During
#   training the decoder sees the whole target sentence at once; the mask
#   makes the prediction at $t$ depend only on tokens before and at $t$, as at
#   generation time.
# * The **padding mask**: a batch of sentences of different lengths is padded
#   to a rectangle; no query should attend to a pad token. We return it with
#   shape `(B, 1, 1, S)` so that it broadcasts over heads and queries.

# %% nbgrader={"grade": false, "grade_id": "causal_mask", "locked": false, "schema_version": 3, "solution": true}
def causal_mask(T: int, device: torch.device | str | None = None) -> torch.Tensor:
    """(T, T) bool: True where query t may attend to key s, i.e. s <= t (the diagonal included)."""
    ### BEGIN SOLUTION
    return torch.ones(T, T, dtype=torch.bool, device=device).tril()
    ### END SOLUTION


# %%
print(causal_mask(4).int())
# tensor([[1, 0, 0, 0],
#         [1, 1, 0, 0],
#         [1, 1, 1, 0],
#         [1, 1, 1, 1]], dtype=torch.int32)

# %% nbgrader={"grade": false, "grade_id": "padding_mask", "locked": false, "schema_version": 3, "solution": true}
def padding_mask(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    """tokens (B, S) long -> (B, 1, 1, S) bool, True at real tokens, False at `pad_id`."""
    ### BEGIN SOLUTION
    return (tokens != pad_id)[:, None, None, :]                   # (B, 1, 1, S)
    ### END SOLUTION


# %%
pm = padding_mask(torch.tensor([[5, 6, 7], [5, 0, 0]]), pad_id=0)
print(pm.shape, pm[:, 0, 0])  # torch.Size([2, 1, 1, 3]) tensor([[ True,  True,  True], [ True, False, False]])

# %% tags=["skip-grading"]
# The decoder's mask combines both: causal AND target padding. White = may attend.
import matplotlib.pyplot as plt
from attnkit.plot import curves, heatmap, heatmap_grid

tokens = ["<bos>", "2", "0", "2", "3", "<pad>", "<pad>"]
tgt_demo = torch.tensor([[1, 5, 6, 5, 7, 0, 0]])
fig, axes = plt.subplots(1, 2, figsize=(8, 3.4))
heatmap(causal_mask(7).float(), tokens, tokens, ax=axes[0], title="causal_mask(7)", cmap="gray", colorbar=False)
heatmap((causal_mask(7) & padding_mask(tgt_demo, 0))[0, 0].float(), tokens, tokens, ax=axes[1],
        title="causal & padding (rows: queries, cols: keys)", cmap="gray", colorbar=False)
plt.tight_layout()
plt.show()

# %% [markdown]
# ### Multi-head attention
#
# One attention averages over all the words a query finds relevant; it
# cannot follow several relations at once. Multi-head attention runs $H$
# attentions in parallel, each on its own $d_k = d_\text{model}/H$-wide slice
# of learned projections:
#
# $$\mathrm{head}_h = \mathrm{Attention}(Q W_h^Q, K W_h^K, V W_h^V), \qquad
# \mathrm{MultiHead}(Q,K,V) = \mathrm{Concat}(\mathrm{head}_1, \dots, \mathrm{head}_H)\, W^O .$$
#
# In code all $H$ projections are one `nn.Linear(d_model, d_model)`; we then
# **split** its output into heads: feature $[h d_k, (h+1) d_k)$ goes to head
# $h$. A `view` to `(B, T, H, d_k)` does that, and a `transpose` puts the
# heads before the positions, `(B, H, T, d_k)`, so that attention runs on
# the last two dimensions of every head at once. (A `view` straight to
# `(B, H, T, d_k)` without the transpose is a classic bug: it has the right
# shape but mixes positions into heads.) After attention we **merge**:
# transpose back and concatenate the heads, then apply $W^O$.

# %% nbgrader={"grade": false, "grade_id": "split_heads", "locked": false, "schema_version": 3, "solution": true}
def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """x (B, T, D) -> (B, H, T, D/H); head h takes features [h*d_k, (h+1)*d_k)."""
    ### BEGIN SOLUTION
    B, T, D = x.shape
    d_k = D // n_heads
    return x.reshape(B, T, n_heads, d_k).transpose(1, 2)         # (B, H, T, d_k)
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "merge_heads", "locked": false, "schema_version": 3, "solution": true}
def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """x (B, H, T, d_k) -> (B, T, H*d_k), the inverse of `split_heads` (heads concatenated)."""
    ### BEGIN SOLUTION
    B, H, T, d_k = x.shape
    return x.transpose(1, 2).reshape(B, T, H * d_k)               # (B, T, H*d_k)
    ### END SOLUTION


# %%
x = torch.arange(2 * 3 * 8.0).reshape(2, 3, 8)
xs = split_heads(x, 4)
print(xs.shape, xs[0, 1, 0])   # torch.Size([2, 4, 3, 2]) tensor([2., 3.])  (head 1 = features 2..3 of position 0)
print(torch.equal(merge_heads(xs), x))  # True

# %% [markdown]
# Now the module. It computes attention through **your**
# `scaled_dot_product_attention` (readable, and it gives us the weights to
# plot), keeps the last weights in `self.attn` with shape `(B, H, T, S)`, and
# takes a boolean mask broadcastable to `(B, H, T, S)`: a padding mask
# `(B, 1, 1, S)`, a causal mask `(T, T)` or a combination `(B, 1, T, T)`.

# %% nbgrader={"grade": false, "grade_id": "MultiHeadAttention", "locked": false, "schema_version": 3, "solution": true}
class MultiHeadAttention(nn.Module):
    """Multi-head attention with projections `w_q, w_k, w_v, w_o` (each nn.Linear(d_model, d_model), with bias).

    forward(query (B, T, D), key (B, S, D), value (B, S, D), mask=None) -> (B, T, D),
    mask: bool broadcastable to (B, H, T, S), True = may attend.
    After a call, `self.attn` holds the attention weights (B, H, T, S).
    """

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        ### BEGIN SOLUTION
        assert d_model % n_heads == 0, "d_model must be a multiple of n_heads"
        self.n_heads = n_heads
        self.w_q = nn.Linear(d_model, d_model)
        self.w_k = nn.Linear(d_model, d_model)
        self.w_v = nn.Linear(d_model, d_model)
        self.w_o = nn.Linear(d_model, d_model)
        self.attn: torch.Tensor | None = None
        ### END SOLUTION

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                mask: torch.Tensor | None = None) -> torch.Tensor:
        ### BEGIN SOLUTION
        q = split_heads(self.w_q(query), self.n_heads)            # (B, H, T, d_k)
        k = split_heads(self.w_k(key), self.n_heads)              # (B, H, S, d_k)
        v = split_heads(self.w_v(value), self.n_heads)            # (B, H, S, d_k)
        out, weights = scaled_dot_product_attention(q, k, v, mask)  # (B, H, T, d_k), (B, H, T, S)
        self.attn = weights.detach()
        return self.w_o(merge_heads(out))                         # (B, T, D)
        ### END SOLUTION


# %%
torch.manual_seed(0)
mha = MultiHeadAttention(d_model=16, n_heads=4)
xq, xkv = torch.randn(2, 3, 16), torch.randn(2, 5, 16)
src_pad = padding_mask(torch.tensor([[4, 4, 4, 4, 4], [4, 4, 4, 0, 0]]), pad_id=0)   # (2, 1, 1, 5)
y = mha(xq, xkv, xkv, src_pad)
print(y.shape, mha.attn.shape)        # torch.Size([2, 3, 16]) torch.Size([2, 4, 3, 5])
print(mha.attn[1, :, :, 3:].abs().max())  # tensor(0.)  (no weight on padding)


# %% [markdown]
# **The fast path.** PyTorch ships the same computation as a fused kernel,
# `torch.nn.functional.scaled_dot_product_attention` (FlashAttention or a
# memory-efficient kernel on a GPU). It does not return the weights, so it
# cannot fill `self.attn`, but with the same projections it must give the
# same output. We check that here; `benchmarks/bench_03_attention.py`
# compares the speed.

# %%
def mha_fast(m: MultiHeadAttention, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
             mask: torch.Tensor | None = None) -> torch.Tensor:
    """The module `m`'s output computed with PyTorch's fused attention kernel."""
    q = split_heads(m.w_q(query), m.n_heads)                      # (B, H, T, d_k)
    k = split_heads(m.w_k(key), m.n_heads)                        # (B, H, S, d_k)
    v = split_heads(m.w_v(value), m.n_heads)                      # (B, H, S, d_k)
    return m.w_o(merge_heads(F.scaled_dot_product_attention(q, k, v, attn_mask=mask)))  # (B, T, D)


print(torch.allclose(mha_fast(mha, xq, xkv, xkv, src_pad), y, atol=1e-6))  # True
causal = causal_mask(5)
print(torch.allclose(mha_fast(mha, xkv, xkv, xkv, causal), mha(xkv, xkv, xkv, causal), atol=1e-6))  # True

# %% [markdown]
# ### Positional encodings
#
# Self-attention is **permutation-equivariant**: shuffle the input positions
# and the outputs are shuffled the same way, nothing else changes. Word order
# must therefore enter through the input. The paper adds to each embedding a
# vector that depends only on the position $t$:
#
# $$PE_{t, 2k} = \sin\!\left(\frac{t}{10000^{2k/d}}\right), \qquad
#   PE_{t, 2k+1} = \cos\!\left(\frac{t}{10000^{2k/d}}\right), \qquad k = 0, \dots, d/2 - 1 .$$
#
# Each pair of dimensions $(2k, 2k+1)$ is a point going round a circle at
# angular frequency $\omega_k = 10000^{-2k/d}$: fast for the first pairs
# (period $2\pi$), slow for the last (period $2\pi\cdot 10000$).

# %% nbgrader={"grade": false, "grade_id": "sinusoidal_positional_encoding", "locked": false, "schema_version": 3, "solution": true}
def sinusoidal_positional_encoding(max_len: int, d_model: int) -> torch.Tensor:
    """(max_len, d_model) float32: PE[t, 2k] = sin(t / 10000^(2k/d)), PE[t, 2k+1] = cos(t / 10000^(2k/d))."""
    ### BEGIN SOLUTION
    t = torch.arange(max_len, dtype=torch.float64)[:, None]                # (max_len, 1)
    two_k = torch.arange(0, d_model, 2, dtype=torch.float64)               # (d/2,) = 0, 2, 4, ...
    angle = t / 10000 ** (two_k / d_model)                                 # (max_len, d/2)
    pe = torch.zeros(max_len, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, : d_model // 2])
    return pe.float()
    ### END SOLUTION


# %%
pe = sinusoidal_positional_encoding(50, 16)
print(pe.shape, pe.dtype)             # torch.Size([50, 16]) torch.float32
print(pe[0, :4], pe[1, :2])           # tensor([0., 1., 0., 1.]) tensor([0.8415, 0.5403])

# %% tags=["skip-grading"]
# Figures: the encoding as a heatmap, and a few of its dimensions as curves over t.
pe_big = sinusoidal_positional_encoding(100, 64)
fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
heatmap(pe_big.T, ax=axes[0], title="PE (rows: dimension i, columns: position t)", cmap="RdBu")
axes[0].set_xlabel("position t")
axes[0].set_ylabel("dimension i")
curves({f"dim {i}": pe_big[:, i] for i in (0, 1, 8, 20, 40)}, xlabel="position t", ylabel="PE[t, i]", ax=axes[1])
plt.tight_layout()
plt.show()

# %% [markdown]
# **An analogy: counting in binary.** Write $t = 0, 1, 2, \dots$ in binary.
# The lowest bit flips at every step, the next one every two steps, the
# next every four: each bit is a square wave of twice the period of the
# previous one, and together they give every position a unique code. The
# sinusoidal encoding is the smooth, continuous version of the same idea:
# the first dimensions oscillate fast, the last ones slowly. Compare the
# two pictures below (position along the horizontal axis in both).

# %% tags=["skip-grading"]
t16 = torch.arange(64)
bits = torch.stack([(t16 >> b) & 1 for b in range(6)])                         # (6, 64): bit b of t
fig, axes = plt.subplots(1, 2, figsize=(11, 2.8))
heatmap(bits.float(), rows=[f"bit {b}" for b in range(6)], ax=axes[0], title="t in binary (bit 0 on top)",
        cmap="gray", colorbar=False)
heatmap(sinusoidal_positional_encoding(64, 12).T, ax=axes[1], title="PE[t] (dimension 0 on top)", cmap="RdBu",
        colorbar=False)
plt.tight_layout()
plt.show()

# %% [markdown]
# **Relative positions are linear.** The paper chose sinusoids because
# "for any fixed offset $\varphi$, $PE_{t+\varphi}$ can be represented as a
# linear function of $PE_t$". Here is the proof. Take one pair of
# dimensions, with $a = \omega_k t$ and $b = \omega_k \varphi$. The angle-sum
# formulas give
#
# $$\begin{aligned}
# \sin(a + b) &= \sin a \cos b + \cos a \sin b,\\
# \cos(a + b) &= \cos a \cos b - \sin a \sin b,
# \end{aligned}
# \qquad\text{i.e.}\qquad
# \begin{pmatrix} PE_{t+\varphi,2k} \\ PE_{t+\varphi,2k+1} \end{pmatrix}
# = \underbrace{\begin{pmatrix} \cos \omega_k\varphi & \sin \omega_k\varphi \\
#                               -\sin \omega_k\varphi & \cos \omega_k\varphi \end{pmatrix}}_{R_k(\varphi)}
# \begin{pmatrix} PE_{t,2k} \\ PE_{t,2k+1} \end{pmatrix}.$$
#
# $R_k(\varphi)$ is a rotation matrix and it does not depend on $t$. Stacking
# the $d/2$ pairs gives a block-diagonal matrix $M(\varphi) =
# \mathrm{diag}(R_0(\varphi), \dots, R_{d/2-1}(\varphi))$ with
# $M(\varphi)\, PE_t = PE_{t+\varphi}$ for **every** $t$: shifting by
# $\varphi$ is one fixed rotation of every pair, by an angle proportional to
# its frequency. A layer that can apply linear maps can therefore learn to
# attend "3 positions back". Build $M$:

# %% nbgrader={"grade": false, "grade_id": "pe_offset_matrix", "locked": false, "schema_version": 3, "solution": true}
def pe_offset_matrix(offset: int, d_model: int) -> torch.Tensor:
    """(d_model, d_model) float32 matrix M with M @ PE[t] == PE[t + offset] for every t.

    Block diagonal: block k (rows/columns 2k, 2k+1) is [[cos b, sin b], [-sin b, cos b]]
    with b = offset / 10000^(2k/d_model).
    """
    ### BEGIN SOLUTION
    two_k = torch.arange(0, d_model, 2, dtype=torch.float64)               # (d/2,)
    b = offset / 10000 ** (two_k / d_model)                                # (d/2,)
    c, s = torch.cos(b), torch.sin(b)
    m = torch.zeros(d_model, d_model, dtype=torch.float64)
    idx = torch.arange(0, d_model, 2)
    m[idx, idx], m[idx, idx + 1] = c, s
    m[idx + 1, idx], m[idx + 1, idx + 1] = -s, c
    return m.float()
    ### END SOLUTION


# %%
pe = sinusoidal_positional_encoding(60, 16)
M = pe_offset_matrix(7, 16)
print(M[:2, :2])                                          # tensor([[ 0.7539,  0.6570], [-0.6570,  0.7539]])
print(torch.allclose(pe[:53] @ M.T, pe[7:], atol=1e-5))   # True: M @ PE[t] = PE[t + 7] for every t
print(torch.allclose(M @ M.T, torch.eye(16), atol=1e-6))  # True: a rotation

# %% [markdown]
# ### Residual connections and layer normalisation
#
# Every sub-layer (attention or feed-forward) is wrapped as
#
# $$x \leftarrow \mathrm{LayerNorm}\big(x + \mathrm{Dropout}(\mathrm{Sublayer}(x))\big).$$
#
# The residual connection $x + \dots$ gives the gradient a direct path
# through the stack. **Layer normalisation** rescales each position's vector
# to mean 0 and variance 1 over its $d$ features, then applies a learned
# gain $\gamma$ and bias $\beta$:
#
# $$\mathrm{LN}(x) = \gamma \odot \frac{x - \mu}{\sqrt{\sigma^2 + \epsilon}} + \beta,
# \qquad \mu = \tfrac1d\textstyle\sum_i x_i,\quad \sigma^2 = \tfrac1d\sum_i (x_i-\mu)^2 .$$
#
# Unlike batch normalisation it uses no statistics across the batch, so it
# behaves the same in training and at inference and for any sequence length.
#
# **We teach post-norm, as in the paper**: the normalisation comes *after*
# the residual addition. Most later models (GPT-2 onwards) use **pre-norm**,
# $x \leftarrow x + \mathrm{Sublayer}(\mathrm{LN}(x))$, with one more
# LayerNorm at the end of the stack; we build it as a variant below and
# compare the two in the experiments.

# %% nbgrader={"grade": false, "grade_id": "layer_norm", "locked": false, "schema_version": 3, "solution": true}
def layer_norm(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """Normalise x (..., D) over its last dim (biased variance, eps inside the sqrt), then * gamma (D,) + beta (D,)."""
    ### BEGIN SOLUTION
    mu = x.mean(-1, keepdim=True)                                  # (..., 1)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)                   # (..., 1)
    return (x - mu) / torch.sqrt(var + eps) * gamma + beta         # (..., D)
    ### END SOLUTION


# %%
x = torch.randn(2, 3, 8)
gamma, beta = torch.rand(8), torch.randn(8)
print(torch.allclose(layer_norm(x, gamma, beta), F.layer_norm(x, (8,), gamma, beta), atol=1e-6))  # True
print(layer_norm(x, torch.ones(8), torch.zeros(8)).mean(-1).abs().max() < 1e-6)            # tensor(True)

# %% [markdown]
# ### The position-wise feed-forward network
#
# After attention has mixed information across positions, each position is
# processed on its own by the same two-layer network,
# $\mathrm{FFN}(x) = \max(0, x W_1 + b_1) W_2 + b_2$, widening to $d_{ff}$
# (2048 in the paper, four times $d_\text{model}$) and back.

# %% nbgrader={"grade": false, "grade_id": "FeedForward", "locked": false, "schema_version": 3, "solution": true}
class FeedForward(nn.Module):
    """linear2(relu(linear1(x))): (B, T, d_model) -> (B, T, d_model), with linear1: d_model -> d_ff."""

    def __init__(self, d_model: int, d_ff: int) -> None:
        super().__init__()
        ### BEGIN SOLUTION
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        ### END SOLUTION

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ### BEGIN SOLUTION
        return self.linear2(torch.relu(self.linear1(x)))          # (B, T, d_model)
        ### END SOLUTION


# %%
print(FeedForward(16, 64)(torch.randn(2, 3, 16)).shape)  # torch.Size([2, 3, 16])

# %% [markdown]
# ### The encoder layer
#
# Self-attention then feed-forward, each wrapped in residual + LayerNorm
# (post-norm), with dropout applied to each sub-layer's output before it is
# added to the residual, as in the paper. Dropout is active only in training
# mode (`model.train()`); the graders run your modules in `eval()` mode.

# %% nbgrader={"grade": false, "grade_id": "EncoderLayer", "locked": false, "schema_version": 3, "solution": true}
class EncoderLayer(nn.Module):
    """Post-norm encoder layer with attributes `self_attn`, `ff`, `norm1`, `norm2` (nn.LayerNorm(d_model)).

    forward(x (B, S, D), mask=None) -> (B, S, D):
        x = norm1(x + dropout(self_attn(x, x, x, mask)))
        x = norm2(x + dropout(ff(x)))
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.1) -> None:
        super().__init__()
        ### BEGIN SOLUTION
        self.self_attn = MultiHeadAttention(d_model, n_heads)
        self.ff = FeedForward(d_model, d_ff)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        ### END SOLUTION

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        ### BEGIN SOLUTION
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask)))   # (B, S, D)
        return self.norm2(x + self.dropout(self.ff(x)))                    # (B, S, D)
        ### END SOLUTION


# %%
torch.manual_seed(0)
enc_layer = EncoderLayer(16, 4, 64).eval()
h = enc_layer(torch.randn(2, 5, 16), src_pad)
print(h.shape, h.mean(-1).abs().max() < 1e-5)  # torch.Size([2, 5, 16]) tensor(True)  (post-norm: LayerNorm last)


# %% [markdown]
# The pre-norm variant, for comparison only (not the paper's, not graded):
# the same parameters, the LayerNorm moved to the input of each sub-layer.
# A pre-norm stack leaves the residual stream un-normalised, so it ends
# with one more LayerNorm.

# %%
class PreNormEncoderLayer(EncoderLayer):
    """x = x + dropout(self_attn(norm1(x))); x = x + dropout(ff(norm2(x)))."""

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.dropout(self.self_attn(h, h, h, mask))                # (B, S, D)
        return x + self.dropout(self.ff(self.norm2(x)))                    # (B, S, D)


# %% [markdown]
# ### The decoder layer
#
# The decoder layer has three sub-layers, each with residual + LayerNorm:
#
# 1. **masked self-attention** over the target prefix (the causal mask, and
#    the target padding mask);
# 2. **cross-attention** (encoder-decoder attention): the *queries* come from
#    the decoder, the *keys and values* from the encoder output, the
#    `memory`, masked by the source padding mask. This is chapter 2's
#    attention, with several heads and dot-product scores;
# 3. the feed-forward network.

# %% nbgrader={"grade": false, "grade_id": "DecoderLayer", "locked": false, "schema_version": 3, "solution": true}
class DecoderLayer(nn.Module):
    """Post-norm decoder layer; attributes `self_attn`, `cross_attn`, `ff`, `norm1`, `norm2`, `norm3`.

    forward(x (B, T, D), memory (B, S, D), tgt_mask=None, memory_mask=None) -> (B, T, D):
        x = norm1(x + dropout(self_attn(x, x, x, tgt_mask)))
        x = norm2(x + dropout(cross_attn(x, memory, memory, memory_mask)))
        x = norm3(x + dropout(ff(x)))
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.1) -> None:
        super().__init__()
        ### BEGIN SOLUTION
        self.self_attn = MultiHeadAttention(d_model, n_heads)
        self.cross_attn = MultiHeadAttention(d_model, n_heads)
        self.ff = FeedForward(d_model, d_ff)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        ### END SOLUTION

    def forward(self, x: torch.Tensor, memory: torch.Tensor, tgt_mask: torch.Tensor | None = None,
                memory_mask: torch.Tensor | None = None) -> torch.Tensor:
        ### BEGIN SOLUTION
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, tgt_mask)))                    # (B, T, D)
        x = self.norm2(x + self.dropout(self.cross_attn(x, memory, memory, memory_mask)))      # (B, T, D)
        return self.norm3(x + self.dropout(self.ff(x)))                                         # (B, T, D)
        ### END SOLUTION


# %%
torch.manual_seed(0)
dec_layer = DecoderLayer(16, 4, 64).eval()
y = dec_layer(torch.randn(2, 3, 16), h, causal_mask(3), src_pad)
print(y.shape, dec_layer.cross_attn.attn.shape)  # torch.Size([2, 3, 16]) torch.Size([2, 4, 3, 5])
print(dec_layer.self_attn.attn[0, 0])            # upper triangle 0: position t sees 0..t only

# %% [markdown]
# ### Stacks and the full model
#
# The encoder is $N$ encoder layers in a row, the decoder $N$ decoder layers,
# each receiving the encoder's final output as `memory`. Around them:
#
# * **embeddings** of source and target tokens, multiplied by
#   $\sqrt{d_\text{model}}$ (as in the paper, so that they are not drowned by
#   the positional encoding), plus the positional encoding, then dropout;
# * a final **linear layer** from $d_\text{model}$ to the target vocabulary,
#   giving logits; a **softmax** turns them into next-token probabilities
#   (we leave it to the loss, which works on log-probabilities).
#
# (The paper also ties the weights of the embeddings and the final linear
# layer; we keep them separate for clarity.)

# %% nbgrader={"grade": false, "grade_id": "Encoder", "locked": false, "schema_version": 3, "solution": true}
class Encoder(nn.Module):
    """`layers`: nn.ModuleList of n_layers EncoderLayer. forward(x (B, S, D), mask=None) -> (B, S, D)."""

    def __init__(self, n_layers: int, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.1) -> None:
        super().__init__()
        ### BEGIN SOLUTION
        self.layers = nn.ModuleList([EncoderLayer(d_model, n_heads, d_ff, dropout) for _ in range(n_layers)])
        ### END SOLUTION

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        ### BEGIN SOLUTION
        for layer in self.layers:
            x = layer(x, mask)                                       # (B, S, D)
        return x
        ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "Decoder", "locked": false, "schema_version": 3, "solution": true}
class Decoder(nn.Module):
    """`layers`: nn.ModuleList of n_layers DecoderLayer.

    forward(x (B, T, D), memory (B, S, D), tgt_mask=None, memory_mask=None) -> (B, T, D):
    every layer attends to the same `memory`.
    """

    def __init__(self, n_layers: int, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.1) -> None:
        super().__init__()
        ### BEGIN SOLUTION
        self.layers = nn.ModuleList([DecoderLayer(d_model, n_heads, d_ff, dropout) for _ in range(n_layers)])
        ### END SOLUTION

    def forward(self, x: torch.Tensor, memory: torch.Tensor, tgt_mask: torch.Tensor | None = None,
                memory_mask: torch.Tensor | None = None) -> torch.Tensor:
        ### BEGIN SOLUTION
        for layer in self.layers:
            x = layer(x, memory, tgt_mask, memory_mask)              # (B, T, D)
        return x
        ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "Transformer", "locked": false, "schema_version": 3, "solution": true}
class Transformer(nn.Module):
    """Encoder-decoder Transformer (post-norm) mapping source token ids to target logits.

    Attributes: `src_embed` nn.Embedding(src_vocab, d_model), `tgt_embed` nn.Embedding(tgt_vocab, d_model),
    `encoder` Encoder, `decoder` Decoder, `out` nn.Linear(d_model, tgt_vocab), `dropout`, `pad_id`.
    Inputs are embedded as dropout(embed(tokens) * sqrt(d_model) + PE[:length]).
    Masks: the source padding mask (B, 1, 1, S) for encoder self-attention and cross-attention;
    causal AND target padding mask (B, 1, T, T) for decoder self-attention.
    """

    def __init__(self, src_vocab: int, tgt_vocab: int, d_model: int = 64, n_heads: int = 4, d_ff: int = 256,
                 n_layers: int = 2, dropout: float = 0.1, pad_id: int = 0) -> None:
        super().__init__()
        ### BEGIN SOLUTION
        self.d_model, self.pad_id = d_model, pad_id
        self.src_embed = nn.Embedding(src_vocab, d_model)
        self.tgt_embed = nn.Embedding(tgt_vocab, d_model)
        self.encoder = Encoder(n_layers, d_model, n_heads, d_ff, dropout)
        self.decoder = Decoder(n_layers, d_model, n_heads, d_ff, dropout)
        self.out = nn.Linear(d_model, tgt_vocab)
        self.dropout = nn.Dropout(dropout)
        ### END SOLUTION

    def embed(self, tokens: torch.Tensor, table: nn.Embedding) -> torch.Tensor:
        """tokens (B, L) -> dropout(table(tokens) * sqrt(d_model) + PE[:L]), (B, L, D)."""
        ### BEGIN SOLUTION
        B, L = tokens.shape
        e = table(tokens) * math.sqrt(self.d_model)                              # (B, L, D)
        pe = sinusoidal_positional_encoding(L, self.d_model).to(e.device, e.dtype)  # (L, D)
        return self.dropout(e + pe)                                              # (B, L, D)
        ### END SOLUTION

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        """src (B, S) long, src_mask (B, 1, 1, S) -> memory (B, S, D)."""
        ### BEGIN SOLUTION
        return self.encoder(self.embed(src, self.src_embed), src_mask)          # (B, S, D)
        ### END SOLUTION

    def decode(self, tgt: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        """tgt (B, T) long (starting with BOS), memory (B, S, D), src_mask (B, 1, 1, S) -> logits (B, T, V)."""
        ### BEGIN SOLUTION
        T = tgt.shape[1]
        tgt_mask = causal_mask(T, tgt.device) & padding_mask(tgt, self.pad_id)   # (B, 1, T, T)
        x = self.decoder(self.embed(tgt, self.tgt_embed), memory, tgt_mask, src_mask)  # (B, T, D)
        return self.out(x)                                                       # (B, T, V)
        ### END SOLUTION

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        """src (B, S) long, tgt (B, T) long -> logits (B, T, tgt_vocab); logits[:, t] predict tgt[:, t+1]."""
        ### BEGIN SOLUTION
        src_mask = padding_mask(src, self.pad_id)                                # (B, 1, 1, S)
        return self.decode(tgt, self.encode(src, src_mask), src_mask)            # (B, T, V)
        ### END SOLUTION

    # Given (not an exercise): the decoding functions below, as methods.
    def greedy_decode(self, src: torch.Tensor, bos_id: int, eos_id: int, max_len: int) -> torch.Tensor:
        return transformer_greedy_decode(self, src, bos_id, eos_id, max_len)

    def beam_search(self, src: torch.Tensor, bos_id: int, eos_id: int, beam_size: int, max_len: int,
                    n_best: int = 1, length_norm: bool = True) -> list[tuple[list[int], float]]:
        return transformer_beam_search(self, src, bos_id, eos_id, beam_size, max_len, n_best, length_norm)


# %%
torch.manual_seed(0)
model = Transformer(src_vocab=11, tgt_vocab=13, d_model=32, n_heads=4, d_ff=64, n_layers=2).eval()
src = torch.tensor([[5, 6, 7, 8], [5, 6, 0, 0]])
tgt = torch.tensor([[1, 9, 10], [1, 9, 0]])
logits = model(src, tgt)
print(logits.shape)                                   # torch.Size([2, 3, 13])
print(sum(p.numel() for p in model.parameters()))     # 43469 parameters

# %% [markdown]
# ### The loss: cross-entropy with label smoothing
#
# The decoder is trained with **teacher forcing**: its input is the target
# shifted right (`<bos> y_1 ... y_{T-1}`), and the logits at $t$ are scored
# against $y_{t+1}$ (`y_1 ... y_T <eos>`). The paper smooths the labels with
# $\epsilon = 0.1$: the target distribution puts $1-\epsilon$ on the right
# token and spreads $\epsilon$ uniformly over the whole vocabulary, so the
# per-position loss is
#
# $$\ell = (1-\epsilon)\,\big(-\log p_y\big) + \epsilon \cdot \frac{1}{V}\sum_{v} \big(-\log p_v\big),$$
#
# averaged over the non-pad positions. It "hurts perplexity, as the model
# learns to be more unsure, but improves accuracy and BLEU".

# %% nbgrader={"grade": false, "grade_id": "label_smoothed_nll", "locked": false, "schema_version": 3, "solution": true}
def label_smoothed_nll(logits: torch.Tensor, target: torch.Tensor, eps: float, pad_id: int) -> torch.Tensor:
    """Mean over non-pad positions of (1-eps)*NLL + eps*mean_v(-log p_v).

    logits (..., V), target (...) long. A scalar tensor; equals
    F.cross_entropy(logits.reshape(-1, V), target.reshape(-1), label_smoothing=eps, ignore_index=pad_id).
    (0 when every target is pad.)
    """
    ### BEGIN SOLUTION
    logp = logits.log_softmax(-1)                                              # (..., V)
    keep = target != pad_id                                                    # (...)
    nll = -logp.gather(-1, target.masked_fill(~keep, 0).unsqueeze(-1)).squeeze(-1)  # (...)
    smooth = -logp.mean(-1)                                                    # (...)
    loss = ((1 - eps) * nll + eps * smooth).masked_fill(~keep, 0.0)            # (...)
    return loss.sum() / keep.sum().clamp(min=1)
    ### END SOLUTION


# %%
g = torch.Generator().manual_seed(0)
lg, tg = torch.randn(2, 4, 7, generator=g), torch.tensor([[3, 4, 5, 0], [6, 0, 0, 0]])
print(label_smoothed_nll(lg, tg, 0.1, pad_id=0))  # tensor(2.4059)
print(torch.allclose(label_smoothed_nll(lg, tg, 0.1, 0),
                     F.cross_entropy(lg.reshape(-1, 7), tg.reshape(-1), label_smoothing=0.1, ignore_index=0)))  # True

# %% [markdown]
# ### The learning-rate schedule
#
# The paper trains with Adam ($\beta_1 = 0.9, \beta_2 = 0.98, \epsilon =
# 10^{-9}$) and a learning rate that grows linearly for `warmup` steps, then
# decays as the inverse square root of the step (often called the "Noam"
# schedule, after one of the authors):
#
# $$\mathrm{lr}(s) = d_\text{model}^{-0.5} \cdot \min\big(s^{-0.5},\; s \cdot \mathrm{warmup}^{-1.5}\big).$$
#
# The two branches meet at $s = \mathrm{warmup}$, the peak. Post-norm
# Transformers are fragile early in training, which is what the warm-up is
# for.

# %% nbgrader={"grade": false, "grade_id": "noam_lr", "locked": false, "schema_version": 3, "solution": true}
def noam_lr(step: int, d_model: int, warmup: int) -> float:
    """d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), step 0 treated as 1."""
    ### BEGIN SOLUTION
    step = max(step, 1)
    return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)
    ### END SOLUTION


# %%
print(f"{noam_lr(4000, 512, 4000):.3g} {noam_lr(0, 512, 4000):.3g} {noam_lr(40000, 512, 4000):.3g}")
# 0.000699 1.75e-07 0.000221

# %% tags=["skip-grading"]
steps = range(1, 20001)
curves({f"d_model={d}, warmup={w}": [noam_lr(s, d, w) for s in steps] for d, w in [(512, 4000), (512, 8000), (256, 4000)]},
       xlabel="step", ylabel="learning rate", ax=plt.figure(figsize=(6, 3.2)).gca())
plt.title("The Transformer's learning-rate schedule")
plt.show()

# %% [markdown]
# ### Decoding
#
# At inference there is no target: the decoder starts from `<bos>` and
# feeds back its own predictions. The encoder runs once; the decoder runs
# once per generated token on the whole prefix (a KV cache, chapter 5, avoids
# recomputing the prefix; we keep it simple).
#
# **Greedy decoding** takes the most probable token at every step. Rows that
# have emitted `<eos>` keep emitting `<eos>`, and we stop once every row has.

# %% nbgrader={"grade": false, "grade_id": "transformer_greedy_decode", "locked": false, "schema_version": 3, "solution": true}
@torch.no_grad()
def transformer_greedy_decode(model: Transformer, src: torch.Tensor, bos_id: int, eos_id: int,
                              max_len: int) -> torch.Tensor:
    """Greedy translation of src (B, S) -> (B, <=1+max_len) long.

    Uses model.encode once and model.decode at every step (argmax of the last position's logits).
    Rows start with BOS; a row that emitted EOS is padded with EOS afterwards; stop early once
    every row has emitted EOS.
    """
    ### BEGIN SOLUTION
    src_mask = padding_mask(src, model.pad_id)                                 # (B, 1, 1, S)
    memory = model.encode(src, src_mask)                                       # (B, S, D)
    ys = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)  # (B, 1)
    done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        nxt = model.decode(ys, memory, src_mask)[:, -1].argmax(-1)             # (B,)
        nxt = nxt.masked_fill(done, eos_id)
        ys = torch.cat([ys, nxt[:, None]], dim=1)                              # (B, t+1)
        done |= nxt == eos_id
        if done.all():
            break
    return ys
    ### END SOLUTION


# %%
out = transformer_greedy_decode(model, src, bos_id=1, eos_id=2, max_len=5)
print(out.shape, out[:, 0])  # torch.Size([2, 6]) tensor([1, 1])  (an untrained model never says <eos>)

# %% [markdown]
# **Beam search** (chapter 1) keeps the `beam_size` best partial
# translations instead of one. Our Transformer version follows chapter 1's
# rules for one source sentence: every live hypothesis is extended by every
# token, the best `beam_size` extensions (by total log-probability) are kept,
# those ending in `<eos>` are finished; stop once `n_best` are finished or
# none is live, or after `max_len` steps (the live ones then count as
# finished). Scores are divided by the number of returned tokens when
# `length_norm`. All live hypotheses have the same length, so one call of
# `model.decode` on a batch of them does a step.

# %% nbgrader={"grade": false, "grade_id": "transformer_beam_search", "locked": false, "schema_version": 3, "solution": true}
@torch.no_grad()
def transformer_beam_search(model: Transformer, src: torch.Tensor, bos_id: int, eos_id: int, beam_size: int,
                            max_len: int, n_best: int = 1, length_norm: bool = True) -> list[tuple[list[int], float]]:
    """Beam search for one source sentence src (1, S) -> the n_best (tokens, score), best first.

    tokens: without BOS, EOS included if emitted; score: cumulative log-prob, divided by
    len(tokens) when `length_norm`.
    """
    ### BEGIN SOLUTION
    src_mask = padding_mask(src, model.pad_id)                                 # (1, 1, 1, S)
    memory = model.encode(src, src_mask)                                       # (1, S, D)
    live, scores = [[bos_id]], torch.zeros(1, dtype=torch.float64)             # N hypotheses, (N,)
    finished: list[tuple[list[int], float]] = []
    for _ in range(max_len):
        N = len(live)
        prefixes = torch.tensor(live, dtype=torch.long, device=src.device)     # (N, t)
        logits = model.decode(prefixes, memory.expand(N, -1, -1), src_mask.expand(N, -1, -1, -1))  # (N, t, V)
        cand = scores[:, None] + logits[:, -1].double().log_softmax(-1).cpu()  # (N, V)
        V = cand.shape[1]
        top, idx = cand.flatten().topk(min(beam_size, N * V))                  # (beam,)
        extended = [(live[j // V] + [j % V], score) for score, j in zip(top.tolist(), idx.tolist())]
        finished += [(hyp, score) for hyp, score in extended if hyp[-1] == eos_id]
        live = [hyp for hyp, _ in extended if hyp[-1] != eos_id]
        scores = torch.tensor([score for hyp, score in extended if hyp[-1] != eos_id], dtype=torch.float64)
        if len(finished) >= n_best or not live:
            break
    else:  # max_len steps done: the live hypotheses count as finished
        finished += list(zip(live, scores.tolist()))
    results = [(hyp[1:], score / max(len(hyp) - 1, 1) if length_norm else score) for hyp, score in finished]
    return sorted(results, key=lambda r: -r[1])[:n_best]
    ### END SOLUTION


# %%
best = transformer_beam_search(model, src[:1], bos_id=1, eos_id=2, beam_size=3, max_len=4, n_best=2)
print([(tokens, round(score, 3)) for tokens, score in best])
