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
#     chapter: 08_reformer
# ---

# %% [markdown]
# # 8. The Reformer: LSH attention, reversible layers, chunking
#
# ## Motivation
#
# The Transformer of chapter 3 is quadratic in its input length and linear in
# its depth, and both show up in its training *memory* as well as its time. The Reformer
# {cite}`kitaev2020` names three places where a Transformer spends memory, and
# fixes each with one idea:
#
# 1. **The $L \times L$ attention matrix.** Every head of every layer holds a
#    score for every pair of positions, and training keeps the softmax weights
#    for the backward pass. At $L = 16\,384$ that is a gigabyte per head in
#    float32. *Fix*: **locality-sensitive hashing (LSH) attention**, where a
#    query looks only at a few keys next to it once the positions are sorted
#    by hash bucket: its own bucket's keys and, in the variant taught here,
#    the keys of neighbouring buckets that share its chunk window. (Storing
#    the matrix is a choice, not a necessity: exact attention computed block
#    by block avoids it too, and we measure both below. What LSH attention
#    saves over that is the computing of all $L^2$ scores.)
# 2. **Activations stored for every one of $N$ layers.** Backpropagation keeps
#    the input of every layer, so memory grows linearly with depth. *Fix*:
#    **reversible residual layers** {cite}`gomez2017revnet`, whose inputs can
#    be recomputed exactly from their outputs during the backward pass.
# 3. **The wide feed-forward layer.** Its hidden activation is $d_{ff}$ wide
#    (four times $d_{model}$ or more) for every position at once. *Fix*:
#    **chunking**: run the position-wise feed-forward on a few positions at a
#    time. (The paper calls $d_{ff}$ the "depth" of the
#    feed-forward layers; it is the width of its hidden layer.)
#
# The paper's Introduction makes the point with a calculation: the 0.5B
# parameters of the largest reported layer take 2 GB and the input activations
# of 64K tokens of width 1K in a batch of 8 another 2 GB, so if memory were
# only per layer, a large model would fit on one accelerator even at length
# 64K. What breaks that budget is the three problems above: activations stored for
# each of $N$ layers, the $d_{ff}$-wide hidden layer, and the
# $64\text{K} \times 64\text{K}$ attention scores (16 GB in 32-bit floats
# for one head of one sequence, the paper's Section 2).
# We measure each of the three problems below, then build the three fixes,
# check them against brute-force references, and measure again.
#
# Memory is measured with torch's own tool, `torch.autograd.graph.saved_tensors_hooks`,
# wrapped by `attnkit.timing.saved_bytes`: it adds up the bytes of every
# tensor autograd saves for the backward pass (each storage once). That is the
# activation memory of training, it is exact for the kernels that run (with
# one exception, LSH attention, below), and
# it does not depend on how busy the machine is (another device may pick
# other kernels, which save other tensors: PyTorch's fused attention saves
# less than its plain path, for example). For the largest single
# tensor of a forward pass we record the size of every tensor an operation
# produces (a `TorchDispatchMode`). Peak memory of whole processes, measured
# with the operating system, is in the benchmark scripts
# `benchmarks/bench_08_lsh_memory.py` and `benchmarks/bench_08_reversible.py`.

# %%
# Setup: on Colab or Binder this installs the course's helpers (`attnkit`). On your own machine,
# `pip install -e .` did, as the README says (in the course's own repository, `make setup`).
import importlib.util, subprocess, sys  # noqa: E401
if importlib.util.find_spec("attnkit") is None:
    repo = "https://github.com/attention-course/attention-course"  # _config.yml: repository.url
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", f"git+{repo}"], check=True)

# %%
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from attnkit import pick_device, seed_everything
from attnkit.glue import glue
from attnkit.timing import saved_bytes

MiB = 2 ** 20


class LargestTensor(TorchDispatchMode):
    """Records the bytes of the largest tensor any operation produces while active."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel() * t.element_size())
        return out


def largest_tensor_bytes(fn) -> int:
    """Bytes of the largest tensor produced while `fn()` runs."""
    with LargestTensor() as mode:
        fn()
    return mode.largest


def full_shared_qk_attention(qk: torch.Tensor, v: torch.Tensor, causal: bool = False):
    """Plain O(L^2) shared-QK attention: keys are the unit-normalised queries, scores
    q.k / sqrt(D), a token's own key scores -1e5, later keys masked if `causal`."""
    B, T, D = qk.shape
    k = F.normalize(qk, dim=-1)                                   # (B, T, D)
    scores = qk @ k.transpose(1, 2) / math.sqrt(D)                # (B, T, T)
    pos = torch.arange(T, device=qk.device)
    scores = scores.masked_fill(pos[:, None] == pos[None, :], -1e5)
    if causal:
        scores = scores.masked_fill(pos[None, :] > pos[:, None], float("-inf"))
    return scores.softmax(-1) @ v                                 # (B, T, Dv)

# %% [markdown]
# ### The three problems, measured
#
# A first look before any fix. We take one attention layer (shared-QK, as
# below), one feed-forward layer, and stacks of 2, 4 and 8 residual
# feed-forward layers (for the growth with depth). We count the memory
# autograd keeps for the backward pass, and the largest tensor of the
# feed-forward's forward pass.

# %% tags=["skip-grading", "hide-input"]
seed_everything(0)
D0 = 64
rows = []
for L in (512, 1024, 2048):
    qk0 = torch.randn(1, L, D0, requires_grad=True)
    v0 = torch.randn(1, L, D0, requires_grad=True)
    rows.append((L, saved_bytes(lambda: full_shared_qk_attention(qk0, v0)) / MiB))
print("problem 1, the L x L matrix: activation memory of one attention head (batch 1, D=64)")
for L, mib in rows:
    print(f"  L={L:5d}: {mib:7.1f} MiB")
glue("ch08_full_attn_growth", rows[-1][1] / rows[-2][1])


def plain_stack(n_layers: int, d: int) -> nn.Sequential:
    """n residual feed-forward layers x + W2 relu(W1 x), d -> 4d -> d."""
    class Residual(nn.Module):
        def __init__(self):
            super().__init__()
            self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.ReLU(), nn.Linear(4 * d, d))

        def forward(self, x):
            return x + self.ff(x)
    return nn.Sequential(*[Residual() for _ in range(n_layers)])


x0 = torch.randn(4, 256, D0, requires_grad=True)
print("problem 2, activations of every layer: a residual stack (B=4, T=256, d=64, d_ff=256)")
for n in (2, 4, 8):
    net = plain_stack(n, D0)
    mib = saved_bytes(lambda: net(x0), exclude=list(net.parameters())) / MiB
    print(f"  {n:2d} layers: {mib:6.2f} MiB")
ff0 = nn.Sequential(nn.Linear(D0, 16 * D0), nn.ReLU(), nn.Linear(16 * D0, D0))
with torch.no_grad():
    big = largest_tensor_bytes(lambda: ff0(x0)) / MiB
print(f"problem 3, the wide feed-forward (d_ff = 16 d): largest tensor {big:.2f} MiB, "
      f"the input itself {x0.numel() * 4 / MiB:.2f} MiB")

# %% [markdown]
# Doubling $L$ from 1024 to 2048 multiplies the memory of one attention head
# by {glue:text}`ch08_full_attn_growth:.2f`: quadratic. The residual stack
# costs the same amount again for every layer, and the feed-forward's hidden
# activation is as many times larger than its input as $d_{ff}$ is wider than
# $d_{model}$.
#
# ## The math
#
# ### Angular LSH
#
# Attention weights are a softmax: they are dominated by the few keys with the
# largest $q \cdot k$. If we could find, for each query, the keys *near* it
# without computing all $L^2$ scores, we could attend to those only. A
# locality-sensitive hash does it. Draw a random matrix
# $R \in \mathbb{R}^{D \times b/2}$ (a random projection: the Reformer calls it
# a random rotation) and define, for $b$ buckets,
#
# $$h(x) = \arg\max\big([\,xR \,;\, -xR\,]\big) \in \{0, \dots, b-1\}.$$
#
# This is the angular LSH of Andoni et al. {cite}`andoni2015lsh` in the
# cross-polytope style the Reformer uses: the bucket is the index of the
# direction among $\pm r_1, \dots, \pm r_{b/2}$ (the columns of $R$ and
# their negatives) with the largest $x \cdot r$, not the sign pattern of
# random hyperplanes (SimHash). Andoni et al. analyse this cross-polytope
# hash with a square matrix of i.i.d. Gaussians ($D \times D$, so $2D$
# buckets) and make it fast with a pseudo-random rotation built from
# Hadamard transforms. The Reformer, trax, Hugging Face and this page use a
# $D \times b/2$ Gaussian matrix, so the number of buckets $b$ is chosen
# freely; where $b/2 < D$ that is a random projection to $b/2$ dimensions,
# then the cross-polytope hash there.
# With Gaussian columns the bucket maximises
# $\lVert r_j\rVert \cos\theta_j$, so a longer column can win over one at a
# smaller angle; with columns of equal length it is the *nearest* direction.
# Below we measure how many random vectors change bucket when the same
# columns are scaled to unit length (a comparison only: unit columns are
# neither a rotation nor the analysed family): {glue:text}`ch08_gauss_vs_unit_16_4:.0f`% with $D = 16$ and
# 4 buckets (the duplication model's heads),
# {glue:text}`ch08_gauss_vs_unit_64_16:.0f`% and
# {glue:text}`ch08_gauss_vs_unit_64_32:.0f`% with $D = 64$ and 16 or 32
# buckets (the approximation experiment): more with more buckets, and not
# the principle. Two vectors at a small
# angle usually pick the same direction and so share a bucket with high
# probability; vectors pointing apart rarely do.
# Scaling $x$ by a positive factor does not change its bucket; $-x$ lands in
# the opposite one. We hash $n_r$ *rounds* with
# independent matrices $R^{(1)}, \dots, R^{(n_r)}$.
#
# ### Shared-QK attention
#
# For a query and a key to share a bucket they must be hashed by the same
# function, and the Reformer goes one step further: queries and keys are the
# *same* projection, with the keys unit-normalised,
# $k_j = q_j / \lVert q_j \rVert$, and scores $q_i \cdot k_j / \sqrt{D}$,
# a literal reading of the paper. (Trax and Hugging Face score
# $q_i \cdot k_j$ with a unit key and no further $1/\sqrt{D}$: their
# softmax is $\sqrt{D}$ times sharper than ours for the same projection.)
# Then $q_i \cdot k_i$ is the largest score a query could give (its own
# direction): its own key would always get the highest score. The Reformer
# masks it. Trax subtracts $10^5$ from the own score; this chapter *sets* the
# own score to $-10^5$ (not $-\infty$), so it counts only when nothing else
# is available: the first token of a causal sequence, or a query whose
# window holds no earlier key (we do not count how often that happens in
# the experiment below). In float16, $-10^5$ overflows; Hugging Face uses
# $-10^3$ there.
#
# ### Sort, chunk, look back
#
# Buckets have uneven sizes, which batches badly. So we *sort* the positions
# by bucket, and within a bucket by position (a stable order), and cut the
# sorted sequence into chunks of $m$ positions. Chunk $c$ attends to itself
# and to chunk $c-1$ (chunk 0 to the last chunk). With `causal`, keys at
# later *original* positions are masked; a query then needs only the members
# of its bucket at earlier positions, which come before it in the sorted
# order, so a bucket that straddles a chunk boundary is still seen whole as
# long as it is not longer than $m$. Without `causal` that does not hold: a
# query whose bucket continues into the next chunk misses the members of its
# bucket there. Each query
# now scores $2m$ keys, not $L$: memory $O(L\,m)$ instead of $O(L^2)$.
#
# **Variant taught here.** The chunk window is the only restriction: a key of
# a neighbouring bucket that falls into the same window is *not* masked (the
# exercise's signature passes no buckets). That is not a small difference: in
# the approximation experiment below, only a fraction of the keys in a
# query's window share its bucket (we measure it there). The paper's
# formulation masks the others (its mask $m(j, \mathcal{P}_i)$ keeps only
# keys of the query's bucket), and so did trax's older `LSHCausalAttention`
# (`attend_across_buckets=False`); trax's current `LSHSelfAttention` does not
# mask them, and neither do we. Attention across rounds is not deduplicated
# either.
#
# ### Several rounds, combined
#
# One round can separate two close vectors by bad luck. With $n_r$ rounds we
# get, for each query $i$, an output $o_i^{(r)}$ from round $r$ and the
# log-sum-exp of its scores, $\ell_i^{(r)} = \log \sum_{j \in P_i^{(r)}} e^{s_{ij}}$,
# the log of that round's softmax normaliser. The softmax over the union of
# the rounds' keys is then, when the rounds do not overlap,
#
# $$o_i = \sum_r \frac{e^{\ell_i^{(r)}}}{\sum_{r'} e^{\ell_i^{(r')}}}\, o_i^{(r)}
#       = \sum_r \mathrm{softmax}_r(\ell_i^{(r)})\, o_i^{(r)}:$$
#
# a round that found more (and better) keys weighs more. A plain average of
# the rounds would give a round that found nothing as much weight as one that
# found the right keys.
#
# ### Reversible residual layers
#
# Take two streams of activations $(x_1, x_2)$ and let $F$ (attention)
# and $G$ (feed-forward) be any two functions. A reversible block computes
#
# $$y_1 = x_1 + F(x_2), \qquad y_2 = x_2 + G(y_1),$$
#
# and its inverse is exact, in the order shown:
#
# $$x_2 = y_2 - G(y_1), \qquad x_1 = y_1 - F(x_2).$$
#
# So the backward pass needs only the *outputs* of the last layer: each block
# rebuilds its inputs from its outputs, recomputes $F$ and $G$ on them with
# autograd on, and backpropagates through that small graph. Activation
# memory is that of one layer, whatever the depth. The price: $F$ and $G$ run
# twice (about a third more arithmetic, by operation count: one more forward
# pass on top of a forward and a backward; not a measured wall-clock factor),
# and the inversion is exact only up to
# floating-point rounding, which we measure. RevNet {cite}`gomez2017revnet`
# splits the channels of its input into the two halves; the Reformer instead
# feeds the same embedding to both streams (trax's `ReformerLM` duplicates
# it). The checks of this section feed two independent random inputs
# `(x1, x2)`; the Reformer trained on real documents at the end of the
# chapter feeds the same embedding to both streams, as trax does.
#
# The recomputation has a catch: $F$ and $G$ must compute *the same
# functions* in the backward pass as in the forward. LSH attention draws
# random rotations and dropout draws random masks; if the recomputation
# draws new ones, the rebuilt inputs and the gradients are wrong (we measure
# how wrong in the Check). Trax and Hugging Face *store the bucket
# assignments* of the forward pass and reuse them on the recompute (trax's
# `LSHSelfAttention` keeps `(buckets, rng)` as its state; Hugging Face passes
# the buckets to its backward pass), and keep a seed for dropout. This
# chapter's `FixedRotations` below keeps the *rotations* instead and
# re-hashes the rebuilt input. That is exact only if the rebuilt input hashes
# to the same buckets: an inversion error of $10^{-6}$ can move a vector
# across a bucket boundary and change the recomputed function. Storing the
# buckets costs $n_r L$ integers per layer, head and sequence and removes that risk; re-hashing
# is what our small check gets away with. This chapter's sub-layers have no
# dropout.
#
# ### Chunked feed-forward
#
# The feed-forward layer acts on every position on its own, so cutting the
# sequence into $n$ chunks along the *time* axis and concatenating the outputs
# changes nothing but the peak memory: the $d_{ff}$-wide hidden activation
# exists for $T/n$ positions at a time.

# %% [markdown]
# ## Implementation
#
# ### Hashing

# %% nbgrader={"grade": false, "grade_id": "lsh_hash", "locked": false, "schema_version": 3, "solution": true}
def lsh_hash(x: torch.Tensor, rotations: torch.Tensor) -> torch.Tensor:
    """Angular LSH buckets of every vector, for every round.

    x: (B, T, D); rotations: (n_hashes, D, n_buckets // 2).
    Returns (n_hashes, B, T) long: bucket argmax([xR ; -xR]) in [0, n_buckets).
    """
    ### BEGIN SOLUTION
    rotated = torch.einsum("btd,ndr->nbtr", x, rotations)        # (n, B, T, b/2)
    return torch.cat([rotated, -rotated], dim=-1).argmax(dim=-1)  # (n, B, T)
    ### END SOLUTION

# %%
g = seed_everything(0)
x = torch.randn(2, 6, 8, generator=g)
R = torch.randn(3, 8, 2, generator=g)
b = lsh_hash(x, R)
print(b.shape, b.dtype, int(b.min()), int(b.max()))  # torch.Size([3, 2, 6]) torch.int64 0 3
assert torch.equal(lsh_hash(5 * x, R), b)  # scaling a vector keeps its bucket
assert torch.equal(lsh_hash(-x, R), (b + 2) % 4)  # -x lands in the opposite bucket

# %% [markdown]
# Close vectors share a bucket more often than far ones: for pairs at an
# angle $\theta$ we count how often the two land in the same bucket.

# %% tags=["skip-grading", "hide-input"]
import matplotlib.pyplot as plt  # noqa: E402

g = seed_everything(1)
angles = torch.linspace(0, math.pi, 13)
base = F.normalize(torch.randn(2000, 64, generator=g), dim=-1)
ortho = F.normalize(torch.randn(2000, 64, generator=g), dim=-1)
ortho = F.normalize(ortho - (ortho * base).sum(-1, keepdim=True) * base, dim=-1)
fig, ax = plt.subplots(figsize=(5, 3))
for n_buckets in (2, 8, 32):
    Rs = torch.randn(1, 64, n_buckets // 2, generator=g)
    same = []
    for a in angles:
        other = math.cos(a) * base + math.sin(a) * ortho
        same.append((lsh_hash(base[None], Rs) == lsh_hash(other[None], Rs)).float().mean().item())
    ax.plot(angles.numpy() * 180 / math.pi, same, marker="o", label=f"{n_buckets} buckets")
ax.set_xlabel("angle between the two vectors (degrees)")
ax.set_ylabel("P(same bucket)")
ax.legend()
plt.tight_layout()
plt.show()

# %% [markdown]
# Gaussian columns against the same columns scaled to unit length: the share
# of 20,000 random vectors whose bucket changes, averaged over 5 draws of $R$.

# %% tags=["skip-grading", "hide-input"]
g = seed_everything(3)
for D, nb in ((16, 4), (64, 16), (64, 32)):
    xs = torch.randn(1, 20000, D, generator=g)
    changed = []
    for _ in range(5):
        Rg = torch.randn(1, D, nb // 2, generator=g)
        unit = F.normalize(Rg, dim=1)                                      # same columns, length 1
        changed.append((lsh_hash(xs, Rg) != lsh_hash(xs, unit)).float().mean().item())
    share = 100 * sum(changed) / len(changed)
    print(f"D = {D}, {nb} buckets: {share:.1f}% of vectors change bucket")
    glue(f"ch08_gauss_vs_unit_{D}_{nb}", share)

# %% [markdown]
# ### Sorting by bucket

# %% nbgrader={"grade": false, "grade_id": "sort_by_bucket", "locked": false, "schema_version": 3, "solution": true}
def sort_by_bucket(buckets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The permutation that sorts positions by bucket, then by position, and its inverse.

    buckets: (..., T) integer. Returns (sorted_idx, undo_idx), both (..., T) long:
    `buckets.gather(-1, sorted_idx)` is sorted, ties in increasing position;
    `sorted_idx.gather(-1, undo_idx)` is `arange(T)` (undo_idx inverts the permutation).
    """
    ### BEGIN SOLUTION
    T = buckets.shape[-1]
    pos = torch.arange(T, device=buckets.device)
    key = buckets.long() * T + pos                                # (..., T) unique keys
    sorted_idx = key.argsort(dim=-1)                              # (..., T)
    undo_idx = sorted_idx.argsort(dim=-1)                         # (..., T)
    return sorted_idx, undo_idx
    ### END SOLUTION

# %%
sidx, undo = sort_by_bucket(torch.tensor([[2, 0, 1, 0, 2, 1]]))
print(sidx.tolist(), undo.tolist())  # [[1, 3, 2, 5, 0, 4]] [[4, 0, 2, 1, 5, 3]]
assert torch.equal(sidx.gather(-1, undo), torch.arange(6)[None])

# %% [markdown]
# Here are the buckets of a real sequence (one head of the random projection
# of a sequence of 64 tokens drawn from 8 clusters), before and after
# sorting. After the sort each bucket is a contiguous run, ordered by
# position inside it; the dashed lines mark chunks of 8.

# %% tags=["skip-grading", "hide-input"]
g = seed_everything(2)
centres = F.normalize(torch.randn(8, 32, generator=g), dim=-1)
tokens = torch.randint(0, 8, (64,), generator=g)
seq = centres[tokens] + 0.2 * torch.randn(64, 32, generator=g)
bk = lsh_hash(seq[None], torch.randn(1, 32, 4, generator=g))[0, 0]   # (64,) in [0, 8)
order, _ = sort_by_bucket(bk)
fig, axes = plt.subplots(2, 1, figsize=(8, 2.6), sharex=True)
for ax, vals, title in ((axes[0], bk, "buckets in sequence order"),
                        (axes[1], bk[order], "after sort_by_bucket (chunks of 8 dashed)")):
    ax.imshow(vals[None].numpy(), cmap="tab10", aspect="auto", vmin=0, vmax=9)
    ax.set_yticks([])
    ax.set_title(title, fontsize=9)
for c in range(8, 64, 8):
    axes[1].axvline(c - 0.5, color="k", ls="--", lw=0.8)
axes[1].set_xlabel("position")
plt.tight_layout()
plt.show()

# %% [markdown]
# ### Chunked attention in the sorted order
#
# The inputs are already sorted: `sq` the shared query/keys, `sv` the values,
# `spos` the original position of each sorted entry (that is `sorted_idx`).

# %% nbgrader={"grade": false, "grade_id": "chunked_lsh_attention", "locked": false, "schema_version": 3, "solution": true}
def chunked_lsh_attention(sq: torch.Tensor, sv: torch.Tensor, spos: torch.Tensor,
                          chunk_len: int, causal: bool = False
                          ) -> tuple[torch.Tensor, torch.Tensor]:
    """Shared-QK attention inside chunks of the sorted sequence, with one chunk of look-back.

    sq: (B, T, D) queries in sorted order (the keys are sq unit-normalised along D);
    sv: (B, T, Dv) values; spos: (B, T) long, the original position of each entry.
    T is a multiple of chunk_len. Chunk c attends to chunks c and c - 1 (chunk 0 to the
    last chunk; with a single chunk, that is itself twice). Scores q.k / sqrt(D); a key at
    the query's own position scores -1e5; with `causal`, keys at later original positions
    are masked out. Returns (out (B, T, Dv), lse (B, T)): the attention output and the
    log-sum-exp of each query's (unmasked) scores.
    """
    ### BEGIN SOLUTION
    B, T, D = sq.shape
    Dv = sv.shape[-1]
    C = T // chunk_len
    q = sq.reshape(B, C, chunk_len, D)                            # (B, C, m, D)
    k = look_back(F.normalize(sq, dim=-1).reshape(B, C, chunk_len, D))  # (B, C, 2m, D)
    v = look_back(sv.reshape(B, C, chunk_len, Dv))                # (B, C, 2m, Dv)
    qpos = spos.reshape(B, C, chunk_len)                          # (B, C, m)
    kpos = look_back(qpos)                                        # (B, C, 2m)
    scores = q @ k.transpose(-1, -2) / math.sqrt(D)               # (B, C, m, 2m)
    if causal:
        later = kpos[:, :, None, :] > qpos[..., None]             # (B, C, m, 2m)
        scores = scores.masked_fill(later, torch.finfo(scores.dtype).min)
    own = kpos[:, :, None, :] == qpos[..., None]                  # (B, C, m, 2m)
    scores = scores.masked_fill(own, -1e5)
    lse = scores.logsumexp(dim=-1)                                # (B, C, m)
    out = scores.softmax(dim=-1) @ v                              # (B, C, m, Dv)
    return out.reshape(B, T, Dv), lse.reshape(B, T)
    ### END SOLUTION


def look_back(x: torch.Tensor) -> torch.Tensor:
    """Each chunk followed by the chunk before it (chunk 0 by the last): (B, C, m, ...) ->
    (B, C, 2m, ...)."""
    return torch.cat([x, x.roll(1, dims=1)], dim=2)

# %%
g = seed_everything(0)
sq = torch.randn(2, 8, 4, generator=g)
sv = torch.randn(2, 8, 3, generator=g)
spos = torch.stack([torch.randperm(8, generator=g) for _ in range(2)])
out, lse = chunked_lsh_attention(sq, sv, spos, chunk_len=4)
print(out.shape, lse.shape)  # torch.Size([2, 8, 3]) torch.Size([2, 8])
# with 2 chunks, every query sees every key: full shared-QK attention (in this order)
assert torch.allclose(chunked_lsh_attention(sq, sv, torch.arange(8).expand(2, 8), 4)[0],
                      full_shared_qk_attention(sq, sv), atol=1e-6)

# %% [markdown]
# ### Combining the hash rounds

# %% nbgrader={"grade": false, "grade_id": "combine_hash_rounds", "locked": false, "schema_version": 3, "solution": true}
def combine_hash_rounds(outs: torch.Tensor, lses: torch.Tensor) -> torch.Tensor:
    """Combine the outputs of n hash rounds, weighted by the softmax over rounds of their lse.

    outs: (n, B, T, Dv); lses: (n, B, T). Returns (B, T, Dv).
    """
    ### BEGIN SOLUTION
    weights = torch.softmax(lses, dim=0)                          # (n, B, T)
    return (weights.unsqueeze(-1) * outs).sum(dim=0)              # (B, T, Dv)
    ### END SOLUTION

# %%
outs = torch.stack([torch.zeros(1, 1, 2), torch.ones(1, 1, 2)])
print(combine_hash_rounds(outs, torch.tensor([[[0.0]], [[math.log(3)]]])))  # 0.75 twice

# %% [markdown]
# ### LSH attention, composed
#
# Hash, then for each round: sort, gather, attend in chunks, and unsort
# (gather with the inverse permutation) back to the original order. The rounds are processed one at a time: under
# `torch.no_grad()` only one round's chunks exist at once, but under autograd
# every round's scores and weights are kept for the backward pass, so the
# training memory grows with the number of rounds (we measure it below).
# Each round is sorted on its own; trax and Hugging Face instead offset each
# round's buckets and sort all $n_r L$ entries at once, which gives the same
# chunks, except for the look-back: their chunks form one sequence over all
# rounds, so a round's first chunk looks back into the *previous round's*
# last chunk (the first round's into the last round's), where here it looks
# back into the last chunk of its own round.

# %% nbgrader={"grade": false, "grade_id": "lsh_attention", "locked": false, "schema_version": 3, "solution": true}
def lsh_attention(qk: torch.Tensor, v: torch.Tensor, rotations: torch.Tensor, chunk_len: int,
                  causal: bool = False) -> torch.Tensor:
    """LSH attention with shared QK: lsh_hash, then per round sort_by_bucket,
    chunked_lsh_attention on the sorted inputs, undo the sort; combine_hash_rounds.

    qk: (B, T, D); v: (B, T, Dv); rotations: (n_hashes, D, n_buckets // 2);
    T a multiple of chunk_len. Returns (B, T, Dv) in the original order.
    """
    ### BEGIN SOLUTION
    B, T, D = qk.shape
    Dv = v.shape[-1]
    buckets = lsh_hash(qk, rotations)                             # (n, B, T)
    outs, lses = [], []
    for bk in buckets:
        sidx, undo = sort_by_bucket(bk)                           # (B, T)
        sq = qk.gather(1, sidx[..., None].expand(B, T, D))        # (B, T, D)
        sv = v.gather(1, sidx[..., None].expand(B, T, Dv))        # (B, T, Dv)
        out, lse = chunked_lsh_attention(sq, sv, sidx, chunk_len, causal)
        outs.append(out.gather(1, undo[..., None].expand(B, T, Dv)))  # (B, T, Dv)
        lses.append(lse.gather(1, undo))                          # (B, T)
    return combine_hash_rounds(torch.stack(outs), torch.stack(lses))
    ### END SOLUTION

# %%
g = seed_everything(0)
qk = torch.randn(2, 16, 8, generator=g)
v = torch.randn(2, 16, 5, generator=g)
one_bucket = torch.zeros(3, 8, 1)  # every token in bucket 0; one chunk of 16 holds them all
out = lsh_attention(qk, v, one_bucket, chunk_len=16, causal=True)
print(out.shape)  # torch.Size([2, 16, 5])
assert torch.allclose(out, full_shared_qk_attention(qk, v, causal=True), atol=1e-5)

# %% [markdown]
# With a single bucket and a chunk as long as the sequence, LSH attention *is*
# full shared-QK attention. Now a module around it: multi-head projections,
# the heads folded into the batch, and `n_hashes` rounds drawn afresh on each
# call unless rotations are given. One draw of rotations serves every head
# and every sequence of the batch; trax draws them per head and per example,
# Hugging Face per head.

# %% nbgrader={"grade": false, "grade_id": "LSHSelfAttention", "locked": false, "schema_version": 3, "solution": true}
class LSHSelfAttention(nn.Module):
    """Multi-head LSH self-attention with shared QK.

    Attributes: `qk`, `v`, `out` (nn.Linear(d_model, d_model), with bias), `n_heads`,
    `n_buckets`, `chunk_len`, `n_hashes` (may be changed between calls), `causal`.
    forward(x (B, T, D), rotations=None) -> (B, T, D): heads of size d_k = D // n_heads
    (head h is features h*d_k:(h+1)*d_k) run lsh_attention on qk(x) and v(x) with the same
    rotations (n_hashes, d_k, n_buckets // 2), drawn with torch.randn on x's device when
    None; the heads are concatenated and go through `out`.
    """

    def __init__(self, d_model: int, n_heads: int, n_buckets: int, chunk_len: int,
                 n_hashes: int = 1, causal: bool = False):
        super().__init__()
        ### BEGIN SOLUTION
        self.n_heads, self.n_buckets, self.chunk_len = n_heads, n_buckets, chunk_len
        self.n_hashes, self.causal = n_hashes, causal
        self.qk = nn.Linear(d_model, d_model)
        self.v = nn.Linear(d_model, d_model)
        self.out = nn.Linear(d_model, d_model)
        ### END SOLUTION

    def forward(self, x: torch.Tensor, rotations: torch.Tensor | None = None) -> torch.Tensor:
        ### BEGIN SOLUTION
        B, T, D = x.shape
        H = self.n_heads
        d_k = D // H
        if rotations is None:
            rotations = torch.randn(self.n_hashes, d_k, self.n_buckets // 2,
                                    device=x.device, dtype=x.dtype)
        qk = self.split(self.qk(x))                               # (B*H, T, d_k)
        v = self.split(self.v(x))                                 # (B*H, T, d_k)
        o = lsh_attention(qk, v, rotations, self.chunk_len, self.causal)  # (B*H, T, d_k)
        o = o.reshape(B, H, T, d_k).transpose(1, 2).reshape(B, T, D)    # (B, T, D)
        return self.out(o)
        ### END SOLUTION

    ### BEGIN SOLUTION
    def split(self, x: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        return x.reshape(B, T, self.n_heads, -1).transpose(1, 2).reshape(B * self.n_heads, T, -1)
    ### END SOLUTION

# %%
attn = LSHSelfAttention(32, n_heads=4, n_buckets=4, chunk_len=8, n_hashes=2, causal=True)
print(attn(torch.randn(2, 32, 32)).shape)  # torch.Size([2, 32, 32])

# %% [markdown]
# ### Reversible blocks

# %% nbgrader={"grade": false, "grade_id": "ReversibleBlock", "locked": false, "schema_version": 3, "solution": true}
class ReversibleBlock(nn.Module):
    """y1 = x1 + f(x2), y2 = x2 + g(y1), and its exact inverse.

    Attributes `f` and `g`: the two sub-modules (for the Reformer, attention and
    feed-forward). forward(x1, x2) -> (y1, y2); inverse(y1, y2) -> (x1, x2).
    """

    def __init__(self, f: nn.Module, g: nn.Module):
        super().__init__()
        ### BEGIN SOLUTION
        self.f, self.g = f, g
        ### END SOLUTION

    def forward(self, x1: torch.Tensor, x2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ### BEGIN SOLUTION
        y1 = x1 + self.f(x2)
        y2 = x2 + self.g(y1)
        return y1, y2
        ### END SOLUTION

    def inverse(self, y1: torch.Tensor, y2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ### BEGIN SOLUTION
        x2 = y2 - self.g(y1)
        x1 = y1 - self.f(x2)
        return x1, x2
        ### END SOLUTION

# %%
def toy_sublayer(d: int) -> nn.Module:
    """A small sub-layer for checks and graders: Linear(d, d) then tanh."""
    return nn.Sequential(nn.Linear(d, d), nn.Tanh())


class ToyReversibleBlock(ReversibleBlock):
    """A ReversibleBlock of two toy sub-layers of width d."""

    def __init__(self, d: int):
        super().__init__(toy_sublayer(d), toy_sublayer(d))


seed_everything(0)
block = ToyReversibleBlock(8)
x1, x2 = torch.randn(2, 3, 8), torch.randn(2, 3, 8)
with torch.no_grad():
    r1, r2 = block.inverse(*block(x1, x2))
print((r1 - x1).abs().max().item() < 1e-6, (r2 - x2).abs().max().item() < 1e-6)  # True True

# %% [markdown]
# ### The backward pass that recomputes
#
# Given the block's outputs and the gradients flowing into them, rebuild the
# inputs and return their gradients. The parameter gradients of `f` and `g`
# are accumulated (`.backward()` on the small recomputed graphs does it). The
# derivatives, from $y_2 = x_2 + G(y_1)$ and $y_1 = x_1 + F(x_2)$:
#
# $$\bar y_1 \mathrel{+}= \Big(\tfrac{\partial G}{\partial y_1}\Big)^{\!\top} \bar y_2,\quad
#   \bar x_2 = \bar y_2 + \Big(\tfrac{\partial F}{\partial x_2}\Big)^{\!\top} \bar y_1,\quad
#   \bar x_1 = \bar y_1.$$

# %% nbgrader={"grade": false, "grade_id": "reversible_block_backward", "locked": false, "schema_version": 3, "solution": true}
def reversible_block_backward(block: ReversibleBlock, y1: torch.Tensor, y2: torch.Tensor,
                              dy1: torch.Tensor, dy2: torch.Tensor):
    """Backward through a ReversibleBlock from its outputs alone.

    Rebuilds x2 = y2 - g(y1), x1 = y1 - f(x2) and returns (x1, x2, dx1, dx2), all detached:
    the inputs and the gradients of the loss w.r.t. them, given dy1, dy2 w.r.t. the outputs.
    Gradients of the parameters of `block.f` and `block.g` are accumulated into their
    `.grad`. Works whether or not grad mode is on.
    """
    ### BEGIN SOLUTION
    with torch.enable_grad():
        y1 = y1.detach().requires_grad_(True)
        gy1 = block.g(y1)
        gy1.backward(dy2)
        dy1 = dy1 + y1.grad                                       # dL/dy1, total
        with torch.no_grad():
            x2 = y2 - gy1
        x2 = x2.detach().requires_grad_(True)
        fx2 = block.f(x2)
        fx2.backward(dy1)
        with torch.no_grad():
            x1 = y1 - fx2
            dx2 = dy2 + x2.grad
    return x1.detach(), x2.detach(), dy1.detach(), dx2.detach()
    ### END SOLUTION

# %%
seed_everything(0)
block = ToyReversibleBlock(8)
x1 = torch.randn(2, 3, 8, requires_grad=True)
x2 = torch.randn(2, 3, 8, requires_grad=True)
y1, y2 = block(x1, x2)
dy1, dy2 = torch.randn_like(y1), torch.randn_like(y2)
torch.autograd.backward((y1, y2), (dy1, dy2))
want = [p.grad.clone() for p in block.parameters()]
block.zero_grad()
r1, r2, dx1, dx2 = reversible_block_backward(block, y1.detach(), y2.detach(), dy1, dy2)
print(torch.allclose(dx1, x1.grad, atol=1e-6), torch.allclose(dx2, x2.grad, atol=1e-6),
      all(torch.allclose(p.grad, w, atol=1e-6) for p, w in zip(block.parameters(), want)))
# True True True


def toy_block_backward(state: dict, y1, y2, dy1, dy2):
    """reversible_block_backward on a ToyReversibleBlock loaded from `state` (used by the
    graders): returns (x1, x2, dx1, dx2, {parameter name: its accumulated .grad})."""
    block = ToyReversibleBlock(y1.shape[-1]).to(y1.device, y1.dtype)
    block.load_state_dict(state)
    x1, x2, dx1, dx2 = reversible_block_backward(block, y1, y2, dy1, dy2)
    return x1, x2, dx1, dx2, {n: p.grad for n, p in block.named_parameters()}

# %% [markdown]
# ### A reversible stack that frees its activations
#
# Autograd would store every block's inputs. A custom `torch.autograd.Function`
# runs all blocks under `torch.no_grad()`, keeps only the last outputs, and in
# its backward walks the blocks in reverse with `reversible_block_backward`.
# The parameters are passed as extra inputs of the Function, so that its output
# requires a gradient whenever they do (even if the input does not); their
# gradients reach `.grad` through `reversible_block_backward`, so the Function
# returns `None` for them. So train it with `loss.backward()`:
# `torch.autograd.grad(loss, params)` raises an error (the parameters appear
# unused in the graph), and with `allow_unused=True` returns `None` for every
# parameter, while their gradients still land in `.grad` as a side effect.
# Hugging Face's reversible function does not take the parameters as inputs
# at all and likewise fills `.grad` inside its backward.

# %% nbgrader={"grade": false, "grade_id": "ReversibleStack", "locked": false, "schema_version": 3, "solution": true}
class ReversibleStack(nn.Module):
    """ReversibleBlocks in sequence, trained without storing their activations.

    Attribute `blocks`: an nn.ModuleList of the given blocks. forward(x1, x2) -> (y1, y2)
    equals applying the blocks one after the other, with the same gradients; autograd
    saves only the final (y1, y2), so the activation memory does not grow with depth.
    """

    def __init__(self, blocks: list[ReversibleBlock]):
        super().__init__()
        ### BEGIN SOLUTION
        self.blocks = nn.ModuleList(blocks)
        ### END SOLUTION

    def forward(self, x1: torch.Tensor, x2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ### BEGIN SOLUTION
        return ReversibleFunction.apply(x1, x2, self.blocks, *self.parameters())
        ### END SOLUTION


### BEGIN SOLUTION
class ReversibleFunction(torch.autograd.Function):
    """Forward without a graph; backward by inverting block after block."""

    @staticmethod
    def forward(ctx, x1, x2, blocks, *params):
        with torch.no_grad():
            for block in blocks:
                x1, x2 = block(x1, x2)
        ctx.blocks = blocks
        ctx.save_for_backward(x1, x2)
        return x1, x2

    @staticmethod
    def backward(ctx, dy1, dy2):
        y1, y2 = ctx.saved_tensors
        for block in reversed(ctx.blocks):
            y1, y2, dy1, dy2 = reversible_block_backward(block, y1, y2, dy1, dy2)
        return (dy1, dy2, None) + (None,) * len(list(ctx.blocks.parameters()))
### END SOLUTION

# %%
class ToyReversibleStack(ReversibleStack):
    """A ReversibleStack of n_layers ToyReversibleBlocks of width d."""

    def __init__(self, n_layers: int, d: int):
        super().__init__([ToyReversibleBlock(d) for _ in range(n_layers)])


def stack_saved_bytes(n_layers: int, x1: torch.Tensor, x2: torch.Tensor) -> int:
    """Bytes autograd saves for a forward pass of ToyReversibleStack(n_layers, width of x1)."""
    seed_everything(0)
    stack = ToyReversibleStack(n_layers, x1.shape[-1])
    return saved_bytes(lambda: stack(x1, x2), exclude=list(stack.parameters()))


seed_everything(0)
stack = ToyReversibleStack(3, 8)
x1, x2 = torch.randn(2, 5, 8), torch.randn(2, 5, 8)
y1, y2 = stack(x1, x2)
(y1.sum() + 2 * y2.sum()).backward()
print([stack_saved_bytes(n, x1, x2) for n in (1, 4)])  # [640, 640]: the two outputs only

# %% [markdown]
# ### Chunked feed-forward

# %% nbgrader={"grade": false, "grade_id": "chunked_feed_forward", "locked": false, "schema_version": 3, "solution": true}
def chunked_feed_forward(ff: nn.Module, x: torch.Tensor, n_chunks: int) -> torch.Tensor:
    """ff applied to n_chunks pieces of x along T (as torch.chunk cuts them), concatenated.

    x: (B, T, D). Returns (B, T, D_out), equal to ff(x) when ff is position-wise.
    """
    ### BEGIN SOLUTION
    return torch.cat([ff(piece) for piece in x.chunk(n_chunks, dim=1)], dim=1)
    ### END SOLUTION

# %%
seed_everything(0)
ff = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 16))
x = torch.randn(2, 12, 16)
print(torch.allclose(chunked_feed_forward(ff, x, 4), ff(x), atol=1e-6))  # True


class PieceRecorder(nn.Module):
    """tanh(x W^T) + the mean of x over the batch: position-wise along T, but it mixes the
    batch. Records in `lengths` the T of every piece it is called on (used by the graders)."""

    def __init__(self, weight: torch.Tensor):
        super().__init__()
        self.weight = weight
        self.lengths: list[int] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.lengths.append(x.shape[1])
        return torch.tanh(x @ self.weight.T) + x.mean(dim=0, keepdim=True)


def probe_chunked_feed_forward(weight: torch.Tensor, x: torch.Tensor, n_chunks: int):
    """chunked_feed_forward with a PieceRecorder: (output, lengths of the pieces)."""
    ff = PieceRecorder(weight)
    return chunked_feed_forward(ff, x, n_chunks), torch.tensor(ff.lengths)

# %% [markdown]
# ## Check
#
# Four cross-checks before the experiments. (1) LSH attention against full
# attention on the same inputs when the buckets are informative: the
# approximation error falls with the number of rounds (measured in the
# Experiment section, after the duplication task).
# (2) A reversible stack against the same blocks run by autograd: same
# outputs, same gradients (both compared below). (3) The inversion error of a deep stack in float32
# and float64. (4) LSH attention as $F$ in a reversible stack, where the
# random rotations must be the same in the forward and the backward pass.

# %% tags=["skip-grading", "hide-input"]
seed_everything(0)
stack = ToyReversibleStack(4, 16)
a1 = torch.randn(2, 10, 16, requires_grad=True)
a2 = torch.randn(2, 10, 16, requires_grad=True)
y1, y2 = stack(a1, a2)
(y1.pow(2).sum() + y2.sum()).backward()
grads_rev = [a1.grad.clone(), a2.grad.clone()] + [p.grad.clone() for p in stack.parameters()]
stack.zero_grad()
a1.grad = a2.grad = None
z1, z2 = a1, a2
for blk in stack.blocks:
    z1, z2 = blk(z1, z2)
(z1.pow(2).sum() + z2.sum()).backward()
grads_auto = [a1.grad, a2.grad] + [p.grad for p in stack.parameters()]
gap = max((a - b).abs().max().item() for a, b in zip(grads_rev, grads_auto))
out_gap = max((y1 - z1).abs().max().item(), (y2 - z2).abs().max().item())
print(f"largest output difference, reversible vs autograd: {out_gap:.2e}")
print(f"largest gradient difference, reversible vs autograd: {gap:.2e}")


def inversion_error(dtype: torch.dtype, n_layers: int = 12, d: int = 64,
                    scale: float = 1.0) -> float:
    """Largest |x - inverse(forward(x))| through n_layers reversible blocks of width d, every
    weight multiplied by `scale` after PyTorch's default initialisation (seed 0)."""
    seed_everything(0)
    blocks = [ReversibleBlock(nn.Sequential(nn.Linear(d, 4 * d), nn.ReLU(), nn.Linear(4 * d, d)),
                              nn.Sequential(nn.Linear(d, 4 * d), nn.ReLU(), nn.Linear(4 * d, d)))
              .to(dtype) for _ in range(n_layers)]
    with torch.no_grad():
        for p in (p for b in blocks for p in b.parameters() if p.dim() == 2):
            p.mul_(scale)
    x1, x2 = torch.randn(4, 128, d, dtype=dtype), torch.randn(4, 128, d, dtype=dtype)
    with torch.no_grad():
        y1, y2 = x1, x2
        for blk in blocks:
            y1, y2 = blk(y1, y2)
        for blk in reversed(blocks):
            y1, y2 = blk.inverse(y1, y2)
    return max((y1 - x1).abs().max().item(), (y2 - x2).abs().max().item())


err32, err64 = inversion_error(torch.float32), inversion_error(torch.float64)
print(f"12 blocks, inversion error: float32 {err32:.1e}, float64 {err64:.1e}")
glue("ch08_inv_err32", err32)
glue("ch08_inv_err64", err64)
for scale in (2, 3):
    err = inversion_error(torch.float32, scale=scale)
    print(f"weights x{scale}: float32 inversion error {err:.1e}")
    glue(f"ch08_inv_err32_x{scale}", err)

# %% [markdown]
# Inverting 12 blocks of width 64 (feed-forwards $64 \to 256 \to 64$, default
# PyTorch initialisation, seed 0) returns the inputs up to
# {glue:text}`ch08_inv_err32:.1e` in float32 and
# {glue:text}`ch08_inv_err64:.1e` in float64: rounding only, amplified a
# little by each block. The error grows with each block's amplification:
# with every weight matrix of these 12 blocks multiplied by 2 after the
# initialisation, the float32 error is {glue:text}`ch08_inv_err32_x2:.1e`,
# and by 3, {glue:text}`ch08_inv_err32_x3:.1e`: each block amplifies the
# rounding error of the blocks after it. So at this
# initialisation the recomputed activations, and the gradients, are exact to
# float precision. A trained network keeps them so only while its blocks
# stay tame; the layer norms inside $F$ and $G$ of a Reformer help. The
# Reformer trained at the end of this chapter is checked there.
#
# ### LSH attention inside a reversible stack
#
# Check (2) used deterministic sub-layers. With `LSHSelfAttention` as $F$,
# every call draws new rotations, so the backward pass recomputes a
# *different* function from the one the forward ran: the rebuilt inputs and
# the gradients are wrong. Our fix draws the rotations once per forward pass
# and reuses them on the recompute (trax and Hugging Face store the buckets
# instead, as said in The math). `FixedRotations` below
# (given code) does it through the `rotations` argument of
# `LSHSelfAttention.forward`: its rotations are drawn by `resample()`, which a
# training loop calls once per step, before the forward pass. Dropout inside
# $F$ or $G$ would need the same treatment (a stored seed).

# %% tags=["skip-grading", "checkpoint-code"]
class FixedRotations(nn.Module):
    """An LSHSelfAttention whose rotations stay fixed between calls of `resample()`.

    Uses the attention only through its documented `qk`, `n_heads`, `n_hashes`,
    `n_buckets` and forward(x, rotations)."""

    def __init__(self, attn: nn.Module):
        super().__init__()
        self.attn = attn
        self.rotations = None

    def resample(self) -> None:
        d_k = self.attn.qk.in_features // self.attn.n_heads
        self.rotations = torch.randn(self.attn.n_hashes, d_k, self.attn.n_buckets // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.attn(x, rotations=self.rotations.to(x.device, x.dtype))


def lsh_reversible_check(fixed: bool) -> tuple[float, float]:
    """Two reversible blocks with LSH attention as f (d=32, 4 heads, 4 buckets, chunks of 8,
    one round, causal): the largest relative gradient difference, ReversibleStack against
    autograd through the same blocks, and the error of inverting the first block."""
    seed_everything(0)
    d = 32
    fs = [LSHSelfAttention(d, 4, 4, 8, n_hashes=1, causal=True) for _ in range(2)]
    fs = [FixedRotations(f) for f in fs] if fixed else fs
    ffs = [nn.Sequential(nn.Linear(d, 2 * d), nn.ReLU(), nn.Linear(2 * d, d)) for _ in fs]
    stack = ReversibleStack([ReversibleBlock(f, ff) for f, ff in zip(fs, ffs)])
    x1 = torch.randn(2, 32, d, requires_grad=True)
    x2 = torch.randn(2, 32, d)
    grads = []
    for use_stack in (True, False):
        torch.manual_seed(1)  # the same rotations in both forward passes
        for f in fs if fixed else []:
            f.resample()
        y1, y2 = stack(x1, x2) if use_stack else (x1, x2)
        for blk in [] if use_stack else stack.blocks:
            y1, y2 = blk(y1, y2)
        (y1.sum() + y2.pow(2).sum()).backward()
        grads.append([x1.grad.clone()] + [p.grad.clone() for p in stack.parameters()])
        stack.zero_grad()
        x1.grad = None
    gap = max(((a - b).norm() / b.norm()).item() for a, b in zip(*grads))
    with torch.no_grad():
        torch.manual_seed(1)
        r1, r2 = stack.blocks[0].inverse(*stack.blocks[0](x1, x2))
    return gap, max((r1 - x1).abs().max().item(), (r2 - x2).abs().max().item())


for fixed in (False, True):
    gap, inv = lsh_reversible_check(fixed)
    name = "rotations fixed per step" if fixed else "fresh rotations per call"
    print(f"{name}: gradient relative difference {gap:.2e}, inversion error {inv:.2e}")
    glue(f"ch08_lsh_rev_gap_{'fixed' if fixed else 'fresh'}", gap)

# %% [markdown]
# With fresh rotations at every call the reversible gradients differ from
# autograd's by {glue:text}`ch08_lsh_rev_gap_fresh:.2f` (largest relative
# difference over the input and the parameters) and inverting one block does
# not give its inputs back; with the rotations fixed per step the difference
# is {glue:text}`ch08_lsh_rev_gap_fixed:.1e`, float rounding.
#
# ## Experiment
#
# Each experiment below is a function of a seed and a thread count, which it
# sets itself (`torch.set_num_threads`, `seed_everything`). The page runs
# each with seed 0 on one thread; the claims check (`python -m course claims
# 08`) runs each with seeds 0 to 4, on 1 and 2 threads, with this chapter's
# solution and with an independent one: 20 runs. It has also run the later
# seeds 5 to 19, one run each. The conclusions stated below were worded on
# the 20 runs and on seeds 5 to 14, which earlier versions of the check held
# out and which the wording has since seen; seeds 15 to 19 are the held-out
# check of the present wording. Each table shows this run's figures next to
# their mean and range over all 35 recorded runs; its last column, what
# changes each figure, reads the first 20. What is
# reproducible: the activation memory of the written-out and the fused
# attention and of the depth experiment is the same in every run, bit for
# bit; LSH attention's memory depends on how it is written (the two
# solutions differ) and moves by less than a percent from run to run, even
# with the same seed and threads (this page's run and the check's). The
# count moves, not the attention: hashing `qk` with gradients on saves a
# small tensor in a branch that is freed before the backward pass, and
# whether the counter, which tells storages apart by address, counts it
# depends on which addresses get reused (trax wraps the bucket ids in
# `stop_gradient`;
# with `qk.detach()` hashed, the count repeats exactly). The
# approximation figures move with the seed (the two solutions agree to
# float rounding), not with the thread count; the duplication figures (a training run) move with the
# seed, the thread count and the solution; times move with everything,
# the machine's load included. With the same code, seed, threads and
# machine a run repeats bit for bit, except the times and LSH attention's
# memory. The page and the check
# run on the CPU; on a GPU, which `pick_device` prefers for the duplication
# task, the figures would differ again. The figures of the sections before
# this one (the three problems, the checks) come from this page's run
# alone, not from the claims check: their memory counts are exact, while
# their rounding errors (inversion, gradient differences) may change in
# the last digits with the thread count or the machine.
#
# ### Memory and time against length
#
# Activation memory (bytes autograd saves for backward) of one head, batch 1,
# $D = 64$, for $L$ from 256 to 8192, of three attentions: full shared-QK
# attention written out (`full_shared_qk_attention`: the $L \times L$ scores
# and weights are tensors), LSH attention (chunks of 64, 4 rounds, $2L/64$
# buckets as in the paper), and exact attention through PyTorch's fused
# kernel, `F.scaled_dot_product_attention`, with the same keys (the unit
# queries) and scale but without the own-key rule. The fused kernel never
# stores the $L \times L$ weights: it computes them block by block, keeps
# only each query's log-sum-exp, and recomputes the blocks in the backward
# pass (the memory-efficient exact attention of FlashAttention). Of the
# $L \times L$ part it keeps only each query's log-sum-exp; it also saves
# $q$, $k$, $v$ and the output. The
# paper's Section 2 already describes memory-efficient attention (each
# query's scores computed on their own and recomputed in the backward pass)
# and ran its full-attention baselines that way.
#
# We also time a forward and backward pass of each, in wall seconds on one
# thread (`attnkit.walltime`), whatever thread count the run sets. This book
# is built on a shared, loaded machine. With two threads a call waits for
# its second thread, however long the load keeps it. One thread has nothing
# to wait for but the CPU. The two ratios the text reports are
# measured in 5 interleaved pairs after one untimed warm-up pair: the other
# attention then LSH, then LSH then the other, and so on, so that neither
# call always goes first and a burst of load slows both calls of a pair
# alike; each ratio is the median
# of the 5 per-pair ratios, and its interquartile range is recorded with it.
# The other points of the plot are the median of 3 runs. The claims check
# fails a timing claim whose margin (on the log scale) is smaller than its
# spread over the runs. Full attention is timed only up to $L = 4096$,
# where it takes {glue:text}`ch08_time_full_4096:.2f` s in this run. A stated budget of 128 MiB
# per head marks where the written-out attention stops fitting.

# %% tags=["skip-grading", "hide-input"]
from attnkit.claims import claim, experiment, spread
from attnkit.walltime import compare, wall_time

BUDGET = 128
LENGTHS = [256, 512, 1024, 2048, 4096, 8192]
TIMED = {"full": [1024, 2048, 4096], "lsh": [1024, 2048, 4096, 8192],
         "sdpa": [1024, 2048, 4096, 8192]}
PAIRS = {4096: "full", 8192: "sdpa"}          # L -> the attention timed against LSH, interleaved


def sdpa_attention(qk: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Exact attention by PyTorch's fused kernel: keys the unit queries, scale 1/sqrt(D).
    (B, T, D) inputs go in as one head, (B, 1, T, D): the fused CPU kernel needs four
    dimensions, and with three PyTorch falls back to the plain path, which stores L x L."""
    k = F.normalize(qk, dim=-1)
    return F.scaled_dot_product_attention(qk[:, None], k[:, None], v[:, None])[:, 0]


@experiment("08_reformer")
def lengths(seed: int = 0, threads: int = 1) -> dict:
    """Activation memory (MiB) and forward+backward seconds of full, LSH and fused attention."""
    torch.set_num_threads(threads)
    g = seed_everything(seed)
    out = {}
    for L in LENGTHS:
        qk = torch.randn(1, L, 64, generator=g, requires_grad=True)
        v = torch.randn(1, L, 64, generator=g, requires_grad=True)
        rot = torch.randn(4, 64, L // 64, generator=g)                  # 4 rounds, 2L/64 buckets
        runs = {"full": lambda: full_shared_qk_attention(qk, v),
                "lsh": lambda: lsh_attention(qk, v, rot, 64),
                "sdpa": lambda: sdpa_attention(qk, v)}
        step = {name: (lambda fn=fn: fn().sum().backward()) for name, fn in runs.items()}
        for name, fn in runs.items():
            out[f"ch08_mem_{name}_{L}"] = saved_bytes(fn) / MiB
            if L in TIMED[name] and not (L in PAIRS and name in (PAIRS[L], "lsh")):
                out[f"ch08_time_{name}_{L}"] = wall_time(step[name], repeat=3).median
        if L in PAIRS:                                                  # the claimed ratios
            other, lsh, ratio = compare(step[PAIRS[L]], step["lsh"], repeat=5)
            out[f"ch08_time_{PAIRS[L]}_{L}"], out[f"ch08_time_lsh_{L}"] = other.median, lsh.median
            out[f"ch08_time_{PAIRS[L]}_over_lsh_{L}"] = ratio.median
            out[f"ch08_time_{PAIRS[L]}_over_lsh_{L}_spread"] = ratio.spread
    out["ch08_mem_lsh1_8192"] = saved_bytes(lambda: lsh_attention(qk, v, rot[:1], 64)) / MiB
    full, lsh = (out[f"ch08_mem_{n}_8192"] for n in ("full", "lsh"))
    out.update({"ch08_mem_ratio_8192": full / lsh,
                "ch08_full_growth": full / out["ch08_mem_full_4096"],
                "ch08_lsh_growth": lsh / out["ch08_mem_lsh_4096"],
                "ch08_sdpa_growth": out["ch08_mem_sdpa_8192"] / out["ch08_mem_sdpa_4096"],
                "ch08_crossover": min(L for L in LENGTHS
                                      if out[f"ch08_mem_full_{L}"] > out[f"ch08_mem_lsh_{L}"]),
                "ch08_full_fits_upto": max(L for L in LENGTHS
                                           if out[f"ch08_mem_full_{L}"] <= BUDGET)})
    return out

# %% tags=["skip-grading", "hide-input"]
len_run = lengths(seed=0, threads=1)
fig, axes = plt.subplots(1, 2, figsize=(10, 3.2))
for name, label, style in (("full", "full attention, written out", "o-"),
                           ("lsh", "LSH attention (4 rounds, chunks of 64)", "s-"),
                           ("sdpa", "exact, fused kernel (SDPA)", "^-")):
    axes[0].loglog(LENGTHS, [len_run[f"ch08_mem_{name}_{L}"] for L in LENGTHS], style, label=label)
    axes[1].loglog(TIMED[name], [len_run[f"ch08_time_{name}_{L}"] for L in TIMED[name]],
                   style, label=label)
axes[0].axhline(BUDGET, color="r", ls="--", lw=1, label=f"budget {BUDGET} MiB")
axes[0].set(xlabel="sequence length L", ylabel="activation memory (MiB)")
axes[1].set(xlabel="sequence length L", ylabel="forward + backward (wall s, 1 thread)")
axes[0].legend(fontsize=7)
plt.tight_layout()
plt.show()
for L in LENGTHS:
    print(f"L={L:5d}: " + "  ".join(
        f"{n} {len_run[f'ch08_mem_{n}_{L}']:7.2f} MiB"
        + (f" {len_run[f'ch08_time_{n}_{L}']:6.3f} s" if L in TIMED[n] else "")
        for n in ("full", "lsh", "sdpa")))

# %% [markdown]
# Full attention written out grows about fourfold in memory with each
# doubling of $L$ (factor {glue:text}`ch08_full_growth:.2f` from 4096 to
# 8192); LSH attention's memory doubles (factor
# {glue:text}`ch08_lsh_growth:.2f`). At $L = 8192$ the written-out attention
# keeps {glue:text}`ch08_mem_ratio_8192:.1f` times the memory of LSH
# attention, and within the 128 MiB budget it fits only up to
# $L =$ {glue:text}`ch08_full_fits_upto`. LSH attention pays a constant
# factor for its 4 rounds (each keeps its own $m \times 2m$ scores per chunk,
# the gathered keys and values, the masks: with one round it keeps
# {glue:text}`ch08_mem_lsh1_8192:.0f` MiB at 8192 instead of
# {glue:text}`ch08_mem_lsh_8192:.0f`), so at short lengths full attention is
# the cheaper one: LSH attention first wins at $L =$
# {glue:text}`ch08_crossover` here. How much LSH attention keeps depends on
# how it is written: the independent solution of the claims check keeps
# more (the range of "LSH: MiB at 8192" in the table below), and with it LSH
# attention first wins at a longer length ("LSH first smaller at L" in the
# table). Both are linear in $L$, both first win at 4096 or 8192, and at
# 8192 both keep less than the written-out attention.

# %% tags=["skip-grading", "hide-input"]
claim("full_quadratic", "The written-out attention's memory grows at least 3.5-fold from L = 4096 "
      "to 8192, LSH attention's at most 2.1-fold.",
      lambda g: g["ch08_full_growth"] >= 3.5 and g["ch08_lsh_growth"] <= 2.1)
claim("lsh_below_full_8192", "LSH attention first keeps less memory than the written-out attention "
      "at L = 4096 or 8192, and at 8192 it keeps less.",
      lambda g: (g["ch08_crossover"] in (4096, 8192)
                 and g["ch08_mem_lsh_8192"] < g["ch08_mem_full_8192"]))

# %% [markdown]
# But the $L \times L$ matrix is a cost of writing attention out, not of
# exact attention. The fused kernel keeps
# {glue:text}`ch08_mem_sdpa_8192:.1f` MiB at $L = 8192$, against
# {glue:text}`ch08_mem_lsh_8192:.0f` MiB for LSH attention: its memory is
# linear in $L$ (factor {glue:text}`ch08_sdpa_growth:.2f` per doubling) and
# smaller at every length. Against memory-efficient exact attention, LSH
# attention does not win on memory. Where it does win is time: the fused
# kernel still computes all $L^2$ scores, LSH attention only
# $n_r \cdot L \cdot 2m$ of them (plus an $O(L \log L)$ sort per round).
# The hash is not free either. With $2L/m$ buckets, $xR$ has $L/m$ columns,
# so hashing costs $n_r \cdot L \cdot D \cdot L/m$ multiply-adds, quadratic
# in $L$: at $L = 8192$ (with $D = m = 64$, as here) as many as the scores. Past
# a limit (128 buckets in trax, one set from the length in Hugging Face) both
# libraries factorise the buckets: two hashes into $b_1$ and $b_2$ buckets,
# $b_1 b_2$ in all, so $xR$ has $(b_1 + b_2)/2$ columns instead of
# $b_1 b_2 / 2$. This chapter does not. At
# $L = 8192$ the fused kernel takes {glue:text}`ch08_time_sdpa_over_lsh_8192:.1f`
# times as long as LSH attention for a forward and backward pass on this
# CPU (interquartile range of the 5 pairs
# {glue:text}`ch08_time_sdpa_over_lsh_8192_spread:.2f`), and the written-out
# attention already {glue:text}`ch08_time_full_over_lsh_4096:.1f` times as
# long at 4096 (range {glue:text}`ch08_time_full_over_lsh_4096_spread:.2f`).
# Against the written-out attention at 4096 the claims check confirms the
# saving. Against the fused kernel at 8192 it does not: LSH attention was
# faster in every recorded run, but by a factor that depends on how LSH
# attention is written (paired by seed and threads, the ratio of the
# alternative solution is 1.4 to 2.4 times smaller than the reference's)
# and moves from run to run more than the check allows
# for a timing claim (the table below), so this is not claimed. LSH's
# advantage is that it computes fewer scores; its memory advantage is
# against an attention that stores them.

# %% tags=["skip-grading", "hide-input"]
claim("fused_beats_lsh_memory", "Exact attention through the fused kernel keeps less memory than "
      "LSH attention at every length.",
      lambda g: all(g[f"ch08_mem_sdpa_{L}"] < g[f"ch08_mem_lsh_{L}"]
                    for L in (256, 512, 1024, 2048, 4096, 8192)))
claim("lsh_wins_time_long", "At L = 4096 LSH attention's forward and backward pass is faster than "
      "the written-out attention's.",
      lambda g: g["ch08_time_full_over_lsh_4096"] > 1)

# %% tags=["skip-grading", "hide-input"]
spread({"ch08_mem_full_8192": "full, written out: MiB at 8192",
        "ch08_mem_lsh_8192": "LSH: MiB at 8192",
        "ch08_mem_sdpa_8192": "fused (SDPA): MiB at 8192", "ch08_time_lsh_8192": "LSH: s at 8192",
        "ch08_time_sdpa_8192": "fused (SDPA): s at 8192", "ch08_time_full_4096": "full: s at 4096",
        "ch08_time_lsh_4096": "LSH: s at 4096", "ch08_full_growth": "full: growth 4096 to 8192",
        "ch08_lsh_growth": "LSH: growth 4096 to 8192",
        "ch08_sdpa_growth": "fused: growth 4096 to 8192",
        "ch08_mem_ratio_8192": "full / LSH memory at 8192",
        "ch08_mem_lsh1_8192": "LSH, 1 round: MiB at 8192",
        "ch08_crossover": "LSH first smaller at L",
        "ch08_full_fits_upto": "full fits 128 MiB up to L",
        "ch08_time_sdpa_over_lsh_8192": "time fused / LSH at 8192",
        "ch08_time_full_over_lsh_4096": "time full / LSH at 4096",
        "ch08_time_sdpa_over_lsh_8192_spread": "its interquartile range over 5 pairs",
        "ch08_time_full_over_lsh_4096_spread": "its interquartile range over 5 pairs "}, digits=3)

# %% [markdown]
# The benchmark `benchmarks/bench_08_lsh_memory.py` measures whole processes
# up to $L = 16\,384$: the peak resident memory of a forward and backward pass
# and its CPU time, for full attention, `lsh_attention`, and the same graded
# pieces with each round wrapped in `torch.utils.checkpoint`, so that
# autograd keeps only a round's output and log-sum-exp and recomputes the
# round in the backward pass. Run it to see its figures; they are not on
# this page.
#
# ### Memory against depth
#
# Activation memory of a training forward pass for 2, 4, 8 and 12 layers, each
# layer an attention-free pair of feed-forwards ($64 \to 256 \to 64$) on
# batch 8 of 128 positions: standard residual layers
# $x \mathrel{+}= F(x);\ x \mathrel{+}= G(x)$ run by autograd, against the
# same sub-layers in a `ReversibleStack`. The peak memory of whole processes
# (parameters and gradients included) is in `benchmarks/bench_08_reversible.py`.

# %% tags=["skip-grading", "hide-input"]
def sublayers(d: int) -> list[nn.Module]:
    """Two feed-forward sub-layers d -> 4d -> d (the F and G of one layer)."""
    return [nn.Sequential(nn.Linear(d, 4 * d), nn.ReLU(), nn.Linear(4 * d, d)) for _ in range(2)]


def standard_forward(layers, x1, x2):
    """The same sub-layers as plain residual layers on x = x1 + x2 (stored by autograd)."""
    x = x1 + x2
    for f, g in layers:
        x = x + f(x)
        x = x + g(x)
    return x


DEPTHS = [2, 4, 8, 12]


@experiment("08_reformer")
def depth(seed: int = 0, threads: int = 1) -> dict:
    """Activation memory (MiB) of standard residual and reversible stacks of DEPTHS layers."""
    torch.set_num_threads(threads)
    g = seed_everything(seed)
    mem_std, mem_rev = [], []
    h1 = torch.randn(8, 128, 64, generator=g, requires_grad=True)
    h2 = torch.randn(8, 128, 64, generator=g, requires_grad=True)
    for n in DEPTHS:
        layers = [sublayers(64) for _ in range(n)]
        params = [p for f, g in layers for p in (*f.parameters(), *g.parameters())]
        rev = ReversibleStack([ReversibleBlock(f, g) for f, g in layers])
        mem_std.append(saved_bytes(lambda: standard_forward(layers, h1, h2), exclude=params) / MiB)
        mem_rev.append(saved_bytes(lambda: rev(h1, h2), exclude=params) / MiB)
    return {"ch08_rev_12_over_2": mem_rev[-1] / mem_rev[0],
            "ch08_std_12_over_2": mem_std[-1] / mem_std[0],
            "ch08_std_per_layer": (mem_std[-1] - mem_std[0]) / (DEPTHS[-1] - DEPTHS[0]),
            "mem_std": mem_std, "mem_rev": mem_rev}

# %% tags=["skip-grading", "hide-input"]
depth_run = depth(seed=0, threads=1)
depths, mem_std, mem_rev = DEPTHS, depth_run["mem_std"], depth_run["mem_rev"]
for n, a, b in zip(depths, mem_std, mem_rev):
    print(f"{n:2d} layers: standard {a:6.2f} MiB   reversible {b:5.2f} MiB")
fig, ax = plt.subplots(figsize=(5, 3))
ax.plot(depths, mem_std, "o-", label="standard residual")
ax.plot(depths, mem_rev, "s-", label="reversible")
ax.set_xlabel("layers")
ax.set_ylabel("activation memory (MiB)")
ax.legend()
plt.tight_layout()
plt.show()

# %% [markdown]
# Standard layers cost {glue:text}`ch08_std_per_layer:.2f` MiB more per
# layer (12 layers: {glue:text}`ch08_std_12_over_2:.1f` times the memory of
# 2). The reversible stack keeps only its final outputs: 12 layers cost
# {glue:text}`ch08_rev_12_over_2:.2f` times what 2 cost, flat in depth as
# the Reformer promises. The memory the reversible backward needs while it
# runs (one block's recomputed graph at a time) is not in these counts, nor
# are the parameters and their gradients, nor the extra time of recomputing
# every layer (one more forward pass per step: about a third more
# arithmetic, not a measured wall-clock factor).
# `python benchmarks/bench_08_reversible.py` measures the peak memory and
# CPU time of whole processes, backward pass included, for up to 24 layers.

# %% tags=["skip-grading", "hide-input"]
claim("reversible_flat", "Twelve reversible layers keep at most 1.05 times the activation memory "
      "of two; twelve standard layers at least four times.",
      lambda g: g["ch08_rev_12_over_2"] <= 1.05 and g["ch08_std_12_over_2"] >= 4)

# %% tags=["skip-grading", "hide-input"]
spread({"ch08_std_per_layer": "standard: MiB per extra layer",
        "ch08_std_12_over_2": "standard: 12 / 2 layers",
        "ch08_rev_12_over_2": "reversible: 12 / 2 layers"}, digits=3)

# %% [markdown]
# ### Chunked feed-forward, measured
#
# The largest tensor in a forward pass of a feed-forward with
# $d_{ff} = 16\,d_{model}$ over 1024 positions, whole and in chunks.

# %% tags=["skip-grading", "hide-input"]
seed_everything(0)
ffw = nn.Sequential(nn.Linear(64, 1024), nn.ReLU(), nn.Linear(1024, 64))
xw = torch.randn(1, 1024, 64)
with torch.no_grad():
    for n in (1, 4, 16):
        mib = largest_tensor_bytes(lambda: chunked_feed_forward(ffw, xw, n)) / MiB
        print(f"{n:2d} chunks: largest tensor {mib:5.2f} MiB")
        if n == 16:
            glue("ch08_ff_chunk16", mib)
    glue("ch08_ff_whole", largest_tensor_bytes(lambda: ffw(xw)) / MiB)
xg = xw.clone().requires_grad_()
ff_params = list(ffw.parameters())
glue("ch08_ff_saved_whole", saved_bytes(lambda: ffw(xg), exclude=ff_params) / MiB)
_ = glue("ch08_ff_saved_chunk16",
         saved_bytes(lambda: chunked_feed_forward(ffw, xg, 16), exclude=ff_params) / MiB)

# %% [markdown]
# Whole, the hidden activation takes {glue:text}`ch08_ff_whole:.2f` MiB; in 16
# chunks the largest tensor is {glue:text}`ch08_ff_chunk16:.2f` MiB, the
# size of the input and the output themselves, which chunking cannot shrink. This is a
# forward pass under `torch.no_grad()`: inference, or the forward pass of a
# reversible stack. Under autograd, chunking alone saves nothing, since every
# chunk's hidden activation is kept for the backward pass (`saved_bytes` of
# a 1024-position pass of this feed-forward:
# {glue:text}`ch08_ff_saved_whole:.2f` MiB whole,
# {glue:text}`ch08_ff_saved_chunk16:.2f` MiB in 16 chunks). Our `reversible_block_backward` recomputes $G$ on the whole
# sequence and calls backward once, so it does not help there either. To
# save memory in training, each chunk must be recomputed and backpropagated
# on its own before the next, as the Reformer's implementation does: the
# gradient of a chunk's output reaches only that chunk's input, so each
# chunk's graph can be built, used and freed before the next. How much that
# holds at once, for one of 16 chunks of this feed-forward:

# %% tags=["skip-grading", "hide-input"]
one_chunk = xw[:, :1024 // 16].clone().requires_grad_()                 # (1, 64, 64)
chunk_mib = saved_bytes(lambda: ffw(one_chunk), exclude=ff_params) / MiB
whole_mib = saved_bytes(lambda: ffw(xg), exclude=ff_params) / MiB
print(f"saved for backward: whole {whole_mib:.2f} MiB, one chunk of 16 {chunk_mib:.2f} MiB")
_ = glue("ch08_ff_saved_one_chunk", chunk_mib)

# %% [markdown]
# One chunk's graph keeps {glue:text}`ch08_ff_saved_one_chunk:.2f` MiB of
# saved activations, against {glue:text}`ch08_ff_saved_whole:.2f` MiB for
# the whole sequence. Writing that backward pass is exercise 11. The
# committed Reformer below does not use it (its feed-forward is small), so
# its training memory is that of the whole recompute.
#
# ### The duplication task
#
# The Reformer paper's synthetic task: sequences $0w0w$ where $w$ is a random
# string of symbols and the second half copies the first. A causal language
# model can predict the second $w$ only by attending to the first. We train a
# small model with LSH attention on it (Table 2 of {cite}`kitaev2020` used
# $L = 1024$; we use $w$ of 15 symbols from 8, so $L = 32$), then evaluate the
# *same* trained model with 1, 2, 4 and 8 hash rounds.
#
# The model: token and learned position embeddings ($d = 64$), two pre-norm
# layers, each an `LSHSelfAttention` (4 heads of 16, 4 buckets, chunks of 8,
# causal) and a feed-forward $64 \to 128 \to 64$, then a linear read-out,
# PyTorch's default initialisation except for the position embeddings
# ($0.02$ times a standard normal). Trained with 2 hash rounds, Adam at
# learning rate 3e-3, 250 steps of batch 64, gradient clipping at 1.0. The
# accuracy is that of predicting the 15 symbols of the second $w$
# (token-level) on 512 fresh sequences (seed 123, the same in every run).
#
# With $L = 32$ and chunks of 8, a query's window (its chunk and the one
# before) is half the sequence, so more rounds also mean more of the
# sequence seen, whatever the hash does. Two controls, applied at evaluation
# to the same LSH-trained model, help separate the two: **random buckets**,
# drawn uniformly and independently of the content (the same sort, chunks and
# combination, through the graded pieces), and **full attention**, every
# earlier key (`full_shared_qk_attention` with the layer's projections).
# Neither is a model *trained* that way, so each also measures how much the
# model depends on the windows it was trained with; we come back to this
# for random buckets below.

# %% tags=["skip-grading", "hide-input"]
from attnkit.train import TrainConfig, train  # noqa: E402

W_LEN, N_SYMBOLS = 15, 8
T_DUP = 2 * (W_LEN + 1)
DUP_STEPS, EVAL_SEED, N_DRAWS = 250, 123, 4
ROUNDS = (1, 2, 4, 8)
device = pick_device()


def duplication_batch(n: int, g: torch.Generator) -> torch.Tensor:
    """n sequences 0 w 0 w, w of W_LEN symbols in 1..N_SYMBOLS: (n, T_DUP) long."""
    w = torch.randint(1, N_SYMBOLS + 1, (n, W_LEN), generator=g)
    zero = torch.zeros(n, 1, dtype=torch.long)
    return torch.cat([zero, w, zero, w], dim=1)


class DupLM(nn.Module):
    """A small causal LM with LSH self-attention (given code, not graded).

    forward(tokens, attend=None): each layer's attention is its LSHSelfAttention, or
    attend(attn, x) when given (the controls: other buckets, full attention)."""

    def __init__(self, d: int = 64, n_layers: int = 2, n_hashes: int = 2):
        super().__init__()
        self.emb = nn.Embedding(N_SYMBOLS + 1, d)
        self.pos = nn.Parameter(0.02 * torch.randn(T_DUP, d))
        self.attns = nn.ModuleList(LSHSelfAttention(d, 4, 4, 8, n_hashes, causal=True)
                                   for _ in range(n_layers))
        self.ffs = nn.ModuleList(nn.Sequential(nn.Linear(d, 2 * d), nn.ReLU(), nn.Linear(2 * d, d))
                                 for _ in range(n_layers))
        self.norms = nn.ModuleList(nn.LayerNorm(d) for _ in range(2 * n_layers))
        self.head = nn.Linear(d, N_SYMBOLS + 1)

    def set_hashes(self, n: int) -> None:
        for a in self.attns:
            a.n_hashes = n

    def hidden(self, tokens: torch.Tensor, layers: int, attend=None) -> torch.Tensor:
        """The residual stream after the first `layers` layers: (B, T, d)."""
        h = self.emb(tokens) + self.pos[: tokens.shape[1]]
        for i in range(layers):
            x = self.norms[2 * i](h)
            h = h + (self.attns[i](x) if attend is None else attend(self.attns[i], x))
            h = h + self.ffs[i](self.norms[2 * i + 1](h))
        return h

    def forward(self, tokens: torch.Tensor, attend=None) -> torch.Tensor:
        return self.head(self.hidden(tokens, len(self.attns), attend))


def heads(attn: LSHSelfAttention, t: torch.Tensor) -> torch.Tensor:
    """(B, T, D) -> (B*H, T, d_k), head h = features h*d_k:(h+1)*d_k, as LSHSelfAttention splits."""
    B, T, D = t.shape
    H = attn.n_heads
    return t.reshape(B, T, H, D // H).transpose(1, 2).reshape(B * H, T, D // H)


def merge(attn: LSHSelfAttention, o: torch.Tensor) -> torch.Tensor:
    """(B*H, T, d_k) -> `out` of the concatenated heads, (B, T, D)."""
    BH, T, dk = o.shape
    H = attn.n_heads
    return attn.out(o.reshape(BH // H, H, T, dk).transpose(1, 2).reshape(BH // H, T, H * dk))


def bucket_attention(draw):
    """attend(attn, x) with buckets draw(n_hashes, N, T) -> (n_hashes, N, T) instead of the hash,
    then the same sort, chunked attention, unsort and combination (the graded pieces)."""
    def attend(attn: LSHSelfAttention, x: torch.Tensor) -> torch.Tensor:
        qk, v = heads(attn, attn.qk(x)), heads(attn, attn.v(x))            # (N, T, d_k)
        rounds = []
        for bk in draw(attn.n_hashes, *qk.shape[:2]):                       # (N, T) per round
            sidx, undo = sort_by_bucket(bk)
            out, lse = chunked_lsh_attention(torch.take_along_dim(qk, sidx[..., None], 1),
                                             torch.take_along_dim(v, sidx[..., None], 1),
                                             sidx, attn.chunk_len, attn.causal)
            rounds.append((torch.take_along_dim(out, undo[..., None], 1),
                           torch.take_along_dim(lse, undo, 1)))
        outs, lses = zip(*rounds)                                           # back in position order
        return merge(attn, combine_hash_rounds(torch.stack(outs), torch.stack(lses)))
    return attend


def full_attention(attn: LSHSelfAttention, x: torch.Tensor) -> torch.Tensor:
    """attend(attn, x) by full causal shared-QK attention: every earlier key, no buckets."""
    return merge(attn, full_shared_qk_attention(heads(attn, attn.qk(x)), heads(attn, attn.v(x)),
                                                True))


@torch.no_grad()
def dup_accuracy(model: DupLM, n_hashes: int, attend=None, n: int = 512) -> float:
    """Token accuracy on the second w of n fresh sequences (seeded), n_hashes rounds."""
    model.set_hashes(n_hashes)
    gen = torch.Generator().manual_seed(EVAL_SEED)
    torch.manual_seed(EVAL_SEED)                                       # the rotations
    seq = duplication_batch(n, gen).to(device)
    pred = model(seq, attend).argmax(-1)
    return (pred[:, W_LEN + 1:-1] == seq[:, W_LEN + 2:]).float().mean().item()


@torch.no_grad()
def layer_buckets(model: DupLM, seq: torch.Tensor, layer: int,
                  rotations: torch.Tensor) -> torch.Tensor:
    """Buckets (n_rounds, n * heads, T) of the shared QK of `layer` (through its `qk`)."""
    attn = model.attns[layer]
    qk = heads(attn, attn.qk(model.norms[2 * layer](model.hidden(seq, layer))))   # (n*H, T, d_k)
    return lsh_hash(qk, rotations.to(qk.device))                                  # (rounds, n*H, T)


@torch.no_grad()
def key_sharing(model: DupLM) -> dict:
    """How often a query t in 16..30 (predicting the second w) shares a bucket, in at least one
    of r rounds, with
    position t - 15, which holds the first copy of the token it must predict; per layer, over
    N_DRAWS draws of 8 rotations on the 512 evaluation sequences."""
    model.set_hashes(2)
    gen = torch.Generator().manual_seed(EVAL_SEED)
    seq = duplication_batch(512, gen).to(device)
    d_k = 64 // model.attns[0].n_heads
    out = {}
    for layer, tag in ((1, ""), (0, "l1_")):
        bks = [layer_buckets(model, seq, layer, torch.randn(8, d_k, 2, generator=gen)).cpu()
               for _ in range(N_DRAWS)]                                   # each (8, 512*H, T)
        for r in ROUNDS:
            out[f"ch08_key_bucket_{tag}{r}"] = sum(
                (b[:r, :, W_LEN + 1:2 * W_LEN + 1] == b[:r, :, 1:W_LEN + 1])
                .any(0).float().mean().item()
                for b in bks) / N_DRAWS
    return out


@experiment("08_reformer")
def duplication(seed: int = 0, threads: int = 1) -> dict:
    """Train DupLM with 2 rounds (seed `seed`, `threads` CPU threads); accuracy with 1 to 8 rounds
    of LSH and of random buckets, with full attention, and the key-sharing counts."""
    torch.set_num_threads(threads)
    g = seed_everything(seed)
    model = DupLM().to(device)

    def dup_loss(step: int) -> torch.Tensor:
        seq = duplication_batch(64, g).to(device)
        logits = model(seq)                                   # position t predicts token t + 1
        return F.cross_entropy(logits[:, W_LEN + 1:-1].reshape(-1, N_SYMBOLS + 1),
                               seq[:, W_LEN + 2:].reshape(-1))

    start = time.perf_counter()
    losses = train(model, dup_loss,
                   TrainConfig(steps=DUP_STEPS, lr=3e-3, desc="duplication (LSH, 2 rounds)"))
    seconds = time.perf_counter() - start
    rand = torch.Generator().manual_seed(EVAL_SEED)
    random_buckets = bucket_attention(
        lambda n, N, T: torch.randint(4, (n, N, T), generator=rand).to(device))
    out = {"ch08_dup_loss": sum(losses[-20:]) / 20,
           "ch08_dup_full": dup_accuracy(model, 1, full_attention)}
    for r in ROUNDS:
        out[f"ch08_dup_acc_{r}"] = dup_accuracy(model, r)
        out[f"ch08_dup_rand_{r}"] = dup_accuracy(model, r, random_buckets)
    out |= key_sharing(model)
    return {**out, "model": model, "seconds": seconds}

# %% tags=["skip-grading", "hide-input"]
dup_run = duplication(seed=0, threads=1)
print(f"trained in {dup_run['seconds']:.0f} s on {device} (seed 0, one thread)")
for r in ROUNDS:
    print(f"{r} round(s): LSH {dup_run[f'ch08_dup_acc_{r}']:.3f}, random buckets "
          f"{dup_run[f'ch08_dup_rand_{r}']:.3f}")
print(f"full attention: {dup_run['ch08_dup_full']:.3f}")

# %% [markdown]
# | rounds at evaluation | 1 | 2 | 4 | 8 |
# | --- | --- | --- | --- | --- |
# | LSH buckets | {glue:text}`ch08_dup_acc_1:.3f` | {glue:text}`ch08_dup_acc_2:.3f` | {glue:text}`ch08_dup_acc_4:.3f` | {glue:text}`ch08_dup_acc_8:.3f` |
# | random buckets (control) | {glue:text}`ch08_dup_rand_1:.3f` | {glue:text}`ch08_dup_rand_2:.3f` | {glue:text}`ch08_dup_rand_4:.3f` | {glue:text}`ch08_dup_rand_8:.3f` |
#
# Full attention on the same model: {glue:text}`ch08_dup_full:.3f`. Chance
# is $1/8 = 0.125$. After 250 steps the model is far from solving the task
# (the paper's models copy almost perfectly when evaluated with enough
# rounds): it predicts about half of the
# symbols of the second $w$. As in the paper's Table 2, a model trained with
# few rounds does better when evaluated with more: with 8 rounds than with 1
# in every run.

# %% tags=["skip-grading", "hide-input"]
claim("rounds_help", "Evaluated with 8 rounds, the model is more accurate than with 1.",
      lambda g: g["ch08_dup_acc_8"] > g["ch08_dup_acc_1"])

# %% [markdown]
# With the same number of rounds, LSH buckets beat content-blind random
# ones in every recorded run. That does not show that the hash carries
# information: the model was trained with LSH's windows, and random buckets
# give it windows it never saw. Random buckets also climb with
# rounds, from {glue:text}`ch08_dup_rand_1:.2f` to
# {glue:text}`ch08_dup_rand_8:.2f` here, and in every recorded run: each
# round's window covers half of this short sequence, and more rounds cover
# more of it, whatever the buckets. So this experiment cannot separate what
# the hash finds from how much of the sequence the windows cover. A model
# trained with random buckets, or the paper's $L = 1024$, where a window is
# a small part of the sequence, would.

# %% tags=["skip-grading", "hide-input"]
claim("hash_beats_random", "With 1, 2, 4 or 8 rounds, LSH buckets beat random buckets.",
      lambda g: all(g[f"ch08_dup_acc_{r}"] > g[f"ch08_dup_rand_{r}"] for r in (1, 2, 4, 8)))
claim("random_climbs", "Random buckets are also more accurate with 8 rounds than with 1.",
      lambda g: g["ch08_dup_rand_8"] > g["ch08_dup_rand_1"])

# %% [markdown]
# How much of this is seed 0? This run's figures, next to their mean and
# range over the 35 recorded runs of the claims check, and which of seed,
# threads and solution change them at all (read on the first 20). 250 steps is not convergence.

# %% tags=["skip-grading", "hide-input"]
spread({"ch08_dup_loss": "final training loss",
        **{f"ch08_dup_acc_{r}": f"LSH, {r} round(s)" for r in ROUNDS},
        **{f"ch08_dup_rand_{r}": f"random buckets, {r} round(s)" for r in ROUNDS},
        "ch08_dup_full": "full attention"}, digits=3)

# %% [markdown]
# Here are the buckets of a real sequence: the shared query/keys of the
# trained model's second layer (head 0, one round of 4 buckets) on a
# duplication sequence, before and after sorting. Below it we count, over
# the 512 evaluation sequences and all heads, how often a query $t$ that
# predicts a symbol of the second $w$ (positions 16 to 30: the separator and
# the second $w$'s first 14 symbols) shares a bucket, in at least one of $r$
# rounds, with position $t - 15$, which holds the first copy of the token it
# must predict.

# %% tags=["skip-grading", "hide-input"]
model = dup_run["model"]
gen = torch.Generator().manual_seed(EVAL_SEED)
seq = duplication_batch(1, gen).to(device)
bk = layer_buckets(model, seq, 1,
                   torch.randn(1, 64 // model.attns[1].n_heads, 2, generator=gen)).cpu()
fig, axes = plt.subplots(2, 1, figsize=(8, 2.6), sharex=True)
order, _ = sort_by_bucket(bk[0, 0])
for ax, vals, title in ((axes[0], bk[0, 0], "layer 2, head 0: buckets of 0 w 0 w in order"),
                        (axes[1], bk[0, 0][order], "after sort_by_bucket (chunks of 8 dashed)")):
    ax.imshow(vals[None].numpy(), cmap="tab10", aspect="auto", vmin=0, vmax=9)
    ax.set_yticks([])
    ax.set_title(title, fontsize=9)
for c in range(8, T_DUP, 8):
    axes[1].axvline(c - 0.5, color="k", ls="--", lw=0.8)
axes[1].set_xlabel("position (upper) / sorted slot (lower)")
plt.tight_layout()
plt.show()
for layer, tag in ((2, ""), (1, "l1_")):
    print(f"layer {layer}: query t and key t - 15 share a bucket in at least one of r rounds")
    for r in ROUNDS:
        print(f"  {r} round(s): {dup_run[f'ch08_key_bucket_{tag}{r}']:.3f} of cases "
              f"(independent random buckets: {1 - 0.75 ** r:.3f})")

# %% [markdown]
# A measured control for the count that follows, on this page's model
# (seed 0) only: with one round, how often a query of the second $w$ shares
# its second-layer bucket with a key of the first $w$ that does *not* hold
# its answer (averaged over those 14 keys and the same number of draws).

# %% tags=["skip-grading", "hide-input"]
gen = torch.Generator().manual_seed(EVAL_SEED)
seq = duplication_batch(512, gen).to(device)
answer, other = [], []
for _ in range(N_DRAWS):
    rot = torch.randn(1, 64 // model.attns[1].n_heads, 2, generator=gen)
    b = layer_buckets(model, seq, 1, rot)[0].cpu()                        # (n*H, T), one round
    same = b[:, W_LEN + 1:2 * W_LEN + 1, None] == b[:, None, 1:W_LEN + 1]  # (n*H, query, key)
    diag = torch.eye(W_LEN, dtype=torch.bool)
    answer.append(same[:, diag].float().mean().item())
    other.append(same[:, ~diag].float().mean().item())
print(f"one round, layer 2: answer key {sum(answer) / N_DRAWS:.3f}, "
      f"other keys of the first w {sum(other) / N_DRAWS:.3f}")
glue("ch08_key_bucket_answer_page_1", sum(answer) / N_DRAWS)
_ = glue("ch08_key_bucket_other_page_1", sum(other) / N_DRAWS)

# %% [markdown]
# In the second layer, the key that holds the answer shares the query's
# bucket in {glue:text}`ch08_key_bucket_1:.3f` of cases with one round,
# {glue:text}`ch08_key_bucket_2:.3f` with two, {glue:text}`ch08_key_bucket_4:.3f`
# with four and {glue:text}`ch08_key_bucket_8:.3f` with eight (averaged over
# 4 draws of the rotations); independent uniform random buckets would give
# $1 - (3/4)^r$: 0.25, 0.44, 0.68, 0.90 (arithmetic, not a measurement).
# That is not this model's chance level: on this page's model, with one
# round, a key of the first $w$ that does *not* hold the answer shares the
# query's bucket in {glue:text}`ch08_key_bucket_other_page_1:.3f` of cases,
# the answer key in {glue:text}`ch08_key_bucket_answer_page_1:.3f` (the
# control above, other draws), since buckets of unequal size raise every
# pair's rate. In the first layer the answer key's rate is
# {glue:text}`ch08_key_bucket_l1_1:.3f` with one round and
# {glue:text}`ch08_key_bucket_l1_8:.3f` with eight. Over the recorded runs
# the second layer's one-round rate is above 0.25 in at least 8 of 10 runs
# of each solution, and it ranges from about a quarter to about three
# quarters (the table below).
# So these counts do not show that hashing brings a query to the key it
# must copy. And since a query here also reads every key of its window,
# bucket or not, they do not show that the model reads the answer through a
# shared bucket. Which keys the layers do pair, and what the model needs, is
# exercise 8.

# %% tags=["skip-grading", "hide-input"]
claim("answer_key_above_chance", "With one round, the second layer puts the key holding the answer "
      "in the query's bucket more often than independent random buckets would (0.25), in at least "
      "8 of 10 runs of each solution.",
      lambda g: g["ch08_key_bucket_1"] > 0.25, at_least=0.8)

# %% tags=["skip-grading", "hide-input"]
spread({**{f"ch08_key_bucket_{r}": f"layer 2, {r} round(s)" for r in ROUNDS},
        "ch08_key_bucket_l1_1": "layer 1, 1 round",
        "ch08_key_bucket_l1_8": "layer 1, 8 rounds"}, digits=3)

# %% [markdown]
# ### Approximation error against rounds
#
# The same effect without training: 512 queries ($D = 64$) drawn around 32
# cluster centres of norm 40 (noise of standard deviation 0.5 per feature), so
# that attention is concentrated on a query's own cluster (how much, we
# print); chunks of 64 and 32 buckets, twice the paper's $2L/m = 16$ (we
# also give the error with 16). The norm 40 is tuned to this chapter's score
# scale, $q \cdot \hat k / \sqrt{D}$. We compare LSH attention with full
# shared-QK attention on the same inputs, relative error
# $\lVert o_{LSH} - o_{full}\rVert / \lVert o_{full}\rVert$, averaged over 5
# draws of the rotations. The experiment `approximation(seed, threads)` draws
# the clusters, the queries and the rotations from `seed`.

# %% tags=["skip-grading", "hide-input"]
@experiment("08_reformer")
def approximation(seed: int = 0, threads: int = 1) -> dict:
    """Relative error of LSH attention against full attention, by rounds; the oracle and the
    bucket statistics behind it."""
    torch.set_num_threads(threads)
    g = seed_everything(seed)
    centres = 40 * F.normalize(torch.randn(32, 64, generator=g), dim=-1)
    labels = torch.randint(0, 32, (1, 512), generator=g)                      # (1, 512)
    qk = centres[labels] + 0.5 * torch.randn(1, 512, 64, generator=g)         # (1, 512, 64)
    v = torch.randn(1, 512, 64, generator=g)
    full = full_shared_qk_attention(qk, v)
    out, largest, same_in_window, mates_missed = {}, 0, [], []
    for r in ROUNDS:
        for n_buckets, tag in ((32, ""), (16, "b16_")):
            errs = []
            for _ in range(5):
                rot = torch.randn(r, 64, n_buckets // 2, generator=g)
                errs.append(((lsh_attention(qk, v, rot, 64) - full).norm() / full.norm()).item())
                if n_buckets == 16:
                    continue
                for bk in lsh_hash(qk, rot)[:, 0]:                                # (512,) per round
                    sizes = torch.bincount(bk, minlength=32)                      # (32,)
                    largest = max(largest, int(sizes.max()))
                    sb = bk[sort_by_bucket(bk)[0]].reshape(8, 64)   # (chunks, m) sorted
                    keys = torch.cat([sb, sb.roll(1, 0)], dim=1)                  # (chunks, 2m)
                    mates = (keys[:, None, :] == sb[:, :, None]).float()          # (chunks, m, 2m)
                    same_in_window.append(mates.mean().item())
                    mates_missed.append((1 - mates.sum(-1) / sizes[sb]).mean().item())
            out[f"ch08_approx_err_{tag}{r}"] = sum(errs) / len(errs)
    same = (labels[0, :, None] == labels[0, None, :]).float()                 # (512, 512)
    k = F.normalize(qk[0], dim=-1)
    scores = (qk[0] @ k.T / 8).fill_diagonal_(-1e5)                          # (512, 512)
    oracle = scores.masked_fill(same == 0, float("-inf")).softmax(-1) @ v[0]  # (512, 64)
    return {**out, "ch08_own_cluster_mass": (scores.softmax(-1) * same).sum(-1).mean().item(),
            "ch08_oracle_err": ((oracle - full[0]).norm() / full.norm()).item(),
            "ch08_largest_bucket": largest,
            "ch08_mates_missed": sum(mates_missed) / len(mates_missed),
            "ch08_window_same_bucket": sum(same_in_window) / len(same_in_window)}

# %% tags=["skip-grading", "hide-input"]
approx_run = approximation(seed=0, threads=1)
for r in ROUNDS:
    print(f"{r} round(s): relative error {approx_run[f'ch08_approx_err_{r}']:.3f} (32 buckets), "
          f"{approx_run[f'ch08_approx_err_b16_{r}']:.3f} (16 buckets)")
print(f"full attention's weight on the query's own cluster: "
      f"{approx_run['ch08_own_cluster_mass']:.3f}")
print(f"oracle (attend exactly to the own cluster): relative error "
      f"{approx_run['ch08_oracle_err']:.3f}")
print(f"largest bucket: {approx_run['ch08_largest_bucket']} members (chunks of 64); "
      f"keys in a query's window sharing its bucket: {approx_run['ch08_window_same_bucket']:.3f}")
print(f"members of a query's bucket outside its window (mean over queries): "
      f"{approx_run['ch08_mates_missed']:.3f}")

# %% [markdown]
# The relative error falls from {glue:text}`ch08_approx_err_1:.3f` with one
# round to {glue:text}`ch08_approx_err_2:.3f` with two,
# {glue:text}`ch08_approx_err_4:.3f` with four and
# {glue:text}`ch08_approx_err_8:.3f` with eight.

# %% tags=["skip-grading", "hide-input"]
claim("error_falls", "The approximation error falls with every doubling of the rounds, with 32 "
      "buckets and with 16.",
      lambda g: all(g[f"ch08_approx_err_{t}{a}"] > g[f"ch08_approx_err_{t}{b}"]
                    for t in ("", "b16_") for a, b in ((1, 2), (2, 4), (4, 8))))

# %% [markdown]
# Where does the rest come from? Full attention puts only
# {glue:text}`ch08_own_cluster_mass:.2f` of a query's weight, on average, on
# the query's own cluster; an oracle that attends exactly to the own
# cluster, and to nothing else, has a relative error of
# {glue:text}`ch08_oracle_err:.3f`. So most of the error that remains is the
# weight full attention spreads over other clusters, which hashing by
# nearness is not built to find. The oracle is a reference point, not a
# lower bound for LSH attention: with eight rounds and 32 buckets LSH
# attention gets below it. With the paper's 16 buckets, eight rounds give
# {glue:text}`ch08_approx_err_b16_8:.3f`. With 32 buckets, buckets longer
# than a chunk play a small part: the largest bucket in these draws had
# {glue:text}`ch08_largest_bucket` members (chunks of 64), and, this
# attention not being causal, a query missed on average
# {glue:text}`ch08_mates_missed:.3f` of its bucket's members, those that fell
# outside its window of two chunks.
#
# In the variant taught here a query reads every key of its window, and
# only {glue:text}`ch08_window_same_bucket:.2f` of a window's keys share its
# bucket (averaged over the 32-bucket draws and their rounds). The paper's equation (3)
# masks the others ($m(j, \mathcal{P}_i) = \infty$ for a key outside the
# query's bucket $\mathcal{P}_i$). The control below keeps only those: in
# each round a query attends to the keys of its own bucket, wherever they
# are in the sequence, and the rounds are combined by your
# `combine_hash_rounds`. Same inputs, same draws of the rotations.

# %% tags=["skip-grading", "hide-input"]
def own_bucket_attention(qk: torch.Tensor, v: torch.Tensor, rotations: torch.Tensor):
    """Non-causal attention of one sequence qk (1, T, d), v (1, T, d_v) over the keys of the
    query's own bucket only, in each round (the own key as in the chapter's variant); the rounds
    combined by combine_hash_rounds. Returns (1, T, d_v)."""
    T, d = qk.shape[1:]
    scores = qk[0] @ F.normalize(qk[0], dim=-1).T / math.sqrt(d)     # (T, T)
    outs, lses = [], []
    for bk in lsh_hash(qk, rotations)[:, 0]:                        # (T,) buckets of one round
        s = scores.masked_fill(bk[None] != bk[:, None], float("-inf")).fill_diagonal_(-1e5)
        lses.append(s.logsumexp(-1))                                # (T,)
        outs.append(s.softmax(-1) @ v[0])                           # (T, d_v)
    return combine_hash_rounds(torch.stack(outs)[:, None], torch.stack(lses)[:, None])


g = torch.Generator().manual_seed(0)                      # the inputs of `approximation(seed=0)`
centres = 40 * F.normalize(torch.randn(32, 64, generator=g), dim=-1)
labels = torch.randint(0, 32, (1, 512), generator=g)                      # (1, 512)
qk_a = centres[labels] + 0.5 * torch.randn(1, 512, 64, generator=g)       # (1, 512, 64)
v_a = torch.randn(1, 512, 64, generator=g)
full_a = full_shared_qk_attention(qk_a, v_a)
rel_err = lambda o: ((o - full_a).norm() / full_a.norm()).item()          # noqa: E731
mask_errs = {"lsh": [], "masked": []}
for draw in range(5):                                                     # 5 draws, 8 rounds
    rot = torch.randn(8, 64, 16, generator=torch.Generator().manual_seed(100 + draw))
    mask_errs["lsh"].append(rel_err(lsh_attention(qk_a, v_a, rot, 64)))
    mask_errs["masked"].append(rel_err(own_bucket_attention(qk_a, v_a, rot)))
mask_err = {k: sum(e) / len(e) for k, e in mask_errs.items()}
print(f"8 rounds, 32 buckets: relative error {mask_err['lsh']:.3f}, own bucket only "
      f"{mask_err['masked']:.3f}; oracle {approx_run['ch08_oracle_err']:.3f}")
assert mask_err["lsh"] < approx_run["ch08_oracle_err"] < mask_err["masked"]   # what the text says
glue("ch08_mask_err_lsh", mask_err["lsh"])
_ = glue("ch08_mask_err_masked", mask_err["masked"])

# %% [markdown]
# With eight rounds, the chapter's LSH attention has a relative error of
# {glue:text}`ch08_mask_err_lsh:.3f` on these draws; attending to the own
# bucket only, {glue:text}`ch08_mask_err_masked:.3f` (the oracle's is
# {glue:text}`ch08_oracle_err:.3f`). A query's window already holds nearly
# all of its bucket (it misses {glue:text}`ch08_mates_missed:.3f` of it), so
# it is the keys of neighbouring buckets in the window that lower the error
# from the own-bucket variant's to LSH attention's, which is below the
# oracle's in every run of the check.

# %% tags=["skip-grading", "hide-input"]
claim("eight_below_oracle", "With 8 rounds and 32 buckets the error is below the oracle's; with "
      "the paper's 16 buckets it is at most 0.03 above it.",
      lambda g: g["ch08_approx_err_8"] < g["ch08_oracle_err"]
      and g["ch08_approx_err_b16_8"] - g["ch08_oracle_err"] <= 0.03)

# %% tags=["skip-grading", "hide-input"]
spread({**{f"ch08_approx_err_{r}": f"error, {r} round(s), 32 buckets" for r in ROUNDS},
        "ch08_approx_err_b16_8": "error, 8 rounds, 16 buckets", "ch08_oracle_err": "oracle's error",
        "ch08_own_cluster_mass": "full attention's weight on the own cluster",
        "ch08_window_same_bucket": "window keys sharing the query's bucket",
        "ch08_largest_bucket": "largest bucket (members)",
        "ch08_mates_missed": "bucket members outside the window"}, digits=3)

# %% [markdown]
# ## Local attention and axial positions
#
# The Reformer of trax and Hugging Face has two more pieces that this
# chapter has not built yet. Both are small.
#
# **Local (chunked) attention.** Cut the sequence, in its own order, into
# chunks of $m$ positions. Each query attends to its own chunk and the chunk
# before it: $2m$ keys, a window that slides one chunk at a time. It is
# `chunked_lsh_attention` with no hashing and no sort: the "sorted" order is
# the identity. A query past the first chunk reads between $m$ and $2m - 1$
# earlier positions, so it cannot copy from far away; LSH attention can. The trax and Hugging Face Reformers
# alternate the two kinds of layer (Hugging Face's `attn_layers`). Hugging
# Face's local layer has separate query and key projections; ours shares them,
# like our LSH layer, so the two layers have parameters of the same shapes.

# %% tags=["skip-grading", "checkpoint-code"]
def local_attention(qk: torch.Tensor, v: torch.Tensor, chunk_len: int,
                    causal: bool = True) -> torch.Tensor:
    """Shared-QK attention to the own chunk and the one before, in the sequence's own order.
    qk: (B, T, D), v: (B, T, Dv), T a multiple of chunk_len. Returns (B, T, Dv)."""
    B, T, _ = qk.shape
    pos = torch.arange(T, device=qk.device).expand(B, T)          # (B, T): the identity "sort"
    return chunked_lsh_attention(qk, v, pos, chunk_len, causal)[0]


def split_heads(t: torch.Tensor, H: int) -> torch.Tensor:
    """(B, T, D) -> (B*H, T, D/H), head h = features h*D/H:(h+1)*D/H, as LSHSelfAttention splits."""
    B, T, D = t.shape
    return t.reshape(B, T, H, D // H).transpose(1, 2).reshape(B * H, T, D // H)  # (B*H, T, d_k)


def merge_heads(o: torch.Tensor, H: int) -> torch.Tensor:
    """(B*H, T, d_k) -> the heads concatenated, (B, T, H*d_k)."""
    BH, T, dk = o.shape
    return o.reshape(BH // H, H, T, dk).transpose(1, 2).reshape(BH // H, T, H * dk)  # (B, T, D)


class LocalSelfAttention(LSHSelfAttention):
    """LSHSelfAttention's projections (`qk`, `v`, `out`) and heads, attending locally instead of
    by hash."""

    def forward(self, x: torch.Tensor, rotations: torch.Tensor | None = None) -> torch.Tensor:
        H = self.n_heads
        qk, v = split_heads(self.qk(x), H), split_heads(self.v(x), H)       # (B*H, T, d_k)
        o = local_attention(qk, v, self.chunk_len, self.causal)             # (B*H, T, d_k)
        return self.out(merge_heads(o, H))                                  # (B, T, D)


def visible_keys(kind: str, T: int = 32, m: int = 8, seed: int = 0) -> torch.Tensor:
    """(T, T) bool: which keys each query of a causal layer attends to (besides itself), read
    off the layer by probing it with one-hot values: local attention, or one round of LSH."""
    g = torch.Generator().manual_seed(seed)
    qk = torch.randn(1, T, 16, generator=g)
    v = torch.eye(T)[None]                                        # (1, T, T): value j marks key j
    if kind == "local":
        weights = local_attention(qk, v, m)
    else:
        weights = lsh_attention(qk, v, torch.randn(1, 16, T // m // 2, generator=g), m, causal=True)
    return weights[0] > 1e-6


# local attention is full attention under a band mask: key j visible to query i iff
# chunk(i) - 1 <= chunk(j) <= chunk(i), j <= i (and j != i unless nothing else is visible)
g = seed_everything(0)
qk, v = torch.randn(2, 32, 8, generator=g), torch.randn(2, 32, 5, generator=g)
i, j = torch.arange(32)[:, None], torch.arange(32)[None]
band = (j <= i) & (j // 8 >= i // 8 - 1)
scores = (qk @ F.normalize(qk, dim=-1).transpose(1, 2) / math.sqrt(8)).masked_fill(~band, -1e9)
scores = scores.masked_fill((i == j) & (i > 0), -1e5)
assert torch.allclose(local_attention(qk, v, 8), scores.softmax(-1) @ v, atol=1e-5)

# %% tags=["skip-grading", "hide-input"]
fig, axes = plt.subplots(1, 2, figsize=(7, 3.4))
for ax, kind, title in zip(axes, ("local", "lsh"), ("local attention, chunks of 8",
                                                     "LSH attention, 1 round, 4 buckets")):
    ax.imshow(visible_keys(kind), cmap="Greys")
    ax.set(title=title, xlabel="key position", ylabel="query position")
plt.tight_layout()
plt.show()

# %% [markdown]
# Each black square is a key that the query of its row attends to. Local
# attention sees a band along the diagonal. LSH attention sees scattered keys
# anywhere before the query: those its hash put in the same or the previous
# chunk of the sorted order.
#
# **Axial position encodings.** A learned position embedding for $L$
# positions holds $L \cdot d$ numbers: at $L = 65\,536$ and $d = 1024$ that is
# 67M parameters, more than many whole models. Axial encodings factor the
# position $p = i \cdot n_2 + j$ over a grid $n_1 \times n_2 = L$ and learn
# two small tables, $E_1$ of $n_1 \times d_1$ and $E_2$ of $n_2 \times d_2$,
# with $d_1 + d_2 = d$. Position $p$ gets $[E_1[i]; E_2[j]]$, the two rows
# concatenated. That is $n_1 d_1 + n_2 d_2$ numbers. Every position still gets
# its own vector, since no two positions share both $i$ and $j$. This is the
# concatenating variant, the one trax uses by default; Hugging Face
# (`axial_pos_shape`, `axial_pos_embds_dim`) does the same. What a trained
# model learns in the two tables is shown in the next section, on the
# committed Reformer.

# %% tags=["skip-grading", "checkpoint-code"]
class AxialPositions(nn.Module):
    """Learned axial position encodings: position i * n2 + j -> [E1[i]; E2[j]], (L, d1 + d2)."""

    def __init__(self, shape: tuple[int, int], dims: tuple[int, int]):
        super().__init__()
        (n1, n2), (d1, d2) = shape, dims
        self.e1 = nn.Parameter(0.02 * torch.randn(n1, d1))
        self.e2 = nn.Parameter(0.02 * torch.randn(n2, d2))

    def forward(self, T: int) -> torch.Tensor:
        n1, d1 = self.e1.shape
        n2, d2 = self.e2.shape
        if T > n1 * n2:
            raise ValueError(f"{T} positions, but the axial grid {n1} x {n2} has only {n1 * n2}")
        grid = torch.cat([self.e1[:, None].expand(n1, n2, d1),
                          self.e2[None].expand(n1, n2, d2)], dim=-1)  # (n1, n2, d)
        return grid.reshape(n1 * n2, d1 + d2)[:T]                     # (L, d)


axial = AxialPositions((4, 8), (3, 5))
p = axial(32)
assert torch.equal(p[2 * 8 + 5], torch.cat([axial.e1[2], axial.e2[5]]))
assert len({tuple(row.tolist()) for row in p}) == 32           # every position its own vector
AXIAL = {65536: ((256, 256), (512, 512), 1024), 4096: ((64, 64), (32, 32), 64)}
for L, ((n1, n2), (d1, d2), d) in AXIAL.items():
    axial_n = sum(t.numel() for t in AxialPositions((n1, n2), (d1, d2)).parameters())
    print(f"L = {L:6d}, d = {d:4d}: a full table {L * d:11,d} numbers, "
          f"axial {n1}x{n2} {axial_n:8,d}")
    glue(f"ch08_axial_{L}", axial_n, display=False)
    glue(f"ch08_axial_full_{L}", L * d, display=False)

# %% [markdown]
# ## One Reformer on real documents
#
# Now the pieces go together into one model, as in the Reformer:
#
# * characters in, embedded, plus axial position encodings;
# * the embedding is copied into the two streams $x_1 = x_2$ of a
#   `ReversibleStack`, as trax does;
# * each `ReversibleBlock` has attention as $F$ and a feed-forward layer as
#   $G$, each after a layer norm; the attention alternates local and LSH
#   attention (2 rounds, rotations fixed per step by `FixedRotations`); the
#   feed-forward runs in chunks (`chunked_feed_forward`; in training this
#   saves nothing here, as the section on chunking showed);
# * the two streams are added, normalised, and projected to the characters
#   (trax and Hugging Face concatenate them into one $2d$-wide vector
#   instead).
#
# Its control is the same network with exact attention in every block,
# through the fused kernel (`F.scaled_dot_product_attention`, causal, the
# same shared query/keys and parameters of the same shapes; the kernel has no mask for
# a token's own key, so the exact model may attend to it). Both are trained to predict the
# next character of long real documents: Python source files of the
# standard library, 20 000 characters or more each (`attnkit.corpora.long_documents`,
# the same corpus as chapter 7). One training window is $L = 2048$
# characters from one document; one window makes one step.
#
# The same function, `train_doc`, trains three times: Adam with a learning
# rate of $3 \cdot 10^{-3}$, 50 warm-up steps and a cosine decay to a tenth,
# gradients clipped at norm 1, on one thread, every model on the same
# windows. Your short run, below, trains the Reformer for
# {glue:text}`ch08_doc_short_steps` steps. The longer runs, declared with
# `@checkpoint`, trained the Reformer and its exact control for
# {glue:text}`ch08_doc_steps` steps each with `python -m course checkpoints
# 08`; their float16 weights are committed, and the page loads them. The
# held-out loss is scored on 32 windows of the validation documents (the
# log scores the first 8 every 250 steps). The cells that define the model's
# pieces taught above (`FixedRotations`, local attention, axial positions)
# carry the tag `checkpoint-code`, so that the command runs them too.

# %% tags=["skip-grading"]
from attnkit.checkpoints import checkpoint  # noqa: E402
from attnkit.corpora import long_documents  # noqa: E402
from attnkit.train import progress  # noqa: E402

DOC_STEPS = 1200            # the committed longer runs (`python -m course checkpoints 08`)

VOCAB = 128                 # characters 0..126; anything else becomes 127


def encode(text: str) -> torch.Tensor:
    """A text as character ids: (len(text),) long."""
    return torch.tensor([min(ord(c), VOCAB - 1) for c in text], dtype=torch.long)


class SDPASelfAttention(LSHSelfAttention):
    """LSHSelfAttention's projections and heads, with exact causal attention by the fused kernel
    (keys the unit queries, no own-key rule: the kernel has no such mask)."""

    def forward(self, x: torch.Tensor, rotations: torch.Tensor | None = None) -> torch.Tensor:
        H = self.n_heads
        qk, v = split_heads(self.qk(x), H), split_heads(self.v(x), H)       # (B*H, T, d_k)
        k = F.normalize(qk, dim=-1)                                         # (B*H, T, d_k)
        o = F.scaled_dot_product_attention(qk[:, None], k[:, None], v[:, None],
                                           is_causal=True)[:, 0]            # (B*H, T, d_k)
        return self.out(merge_heads(o, H))                                  # (B, T, D)


class PreNorm(nn.Module):
    """layer(LayerNorm(x)); a feed-forward layer runs in `n_chunks` chunks along T."""

    def __init__(self, d: int, layer: nn.Module, n_chunks: int = 1):
        super().__init__()
        self.norm, self.layer, self.n_chunks = nn.LayerNorm(d), layer, n_chunks

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm(x)
        if self.n_chunks == 1:
            return self.layer(x)
        return chunked_feed_forward(self.layer, x, self.n_chunks)


class ReformerLM(nn.Module):
    """A character-level Reformer: axial positions, reversible blocks of (attention, chunked
    feed-forward), attention `kinds` per block: "local", "lsh" (2 rounds, 2 max_len / chunk_len
    buckets) or "sdpa" (exact)."""

    def __init__(self, kinds: tuple[str, ...] = ("local", "lsh", "local", "lsh"), d: int = 64,
                 heads: int = 4, chunk_len: int = 64, max_len: int = 2048, n_chunks: int = 4):
        super().__init__()
        self.kinds = kinds
        side = 2 ** (max_len.bit_length() // 2)                   # grid: side x max_len / side
        self.emb = nn.Embedding(VOCAB, d)
        self.pos = AxialPositions((side, max_len // side), (d // 2, d // 2))
        kind = {"local": LocalSelfAttention, "sdpa": SDPASelfAttention,
                "lsh": lambda *a, **k: FixedRotations(LSHSelfAttention(*a, **k))}
        n_buckets = 2 * max_len // chunk_len
        self.attns = [kind[k](d, heads, n_buckets, chunk_len, n_hashes=2, causal=True)
                      for k in kinds]
        ffs = [nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d)) for _ in kinds]
        self.stack = ReversibleStack([ReversibleBlock(PreNorm(d, a), PreNorm(d, ff, n_chunks))
                                      for a, ff in zip(self.attns, ffs)])
        self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, VOCAB)

    def resample(self) -> None:
        """New LSH rotations, fixed until the next call: once per training step."""
        for a in self.attns:
            if isinstance(a, FixedRotations):
                a.resample()

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.emb(tokens) + self.pos(tokens.shape[1])          # (B, T, d)
        y1, y2 = self.stack(h, h)
        return self.head(self.norm(y1 + y2))                      # (B, T, VOCAB)


def lm_loss(model: ReformerLM, window: torch.Tensor) -> torch.Tensor:
    """Mean next-character cross-entropy (nats) of a (B, L + 1) window."""
    model.resample()
    logits = model(window[:, :-1])
    return F.cross_entropy(logits.reshape(-1, VOCAB), window[:, 1:].reshape(-1))


def windows(docs: list, L: int, n: int, g: torch.Generator) -> torch.Tensor:
    """n windows of L + 1 characters, each from a random place of a random document: (n, L + 1)."""
    out = []
    for _ in range(n):
        text = docs[torch.randint(len(docs), (1,), generator=g).item()].text
        start = torch.randint(len(text) - L - 1, (1,), generator=g).item()
        out.append(encode(text[start:start + L + 1]))
    return torch.stack(out)


@torch.no_grad()
def window_losses(model: ReformerLM, data: torch.Tensor) -> torch.Tensor:
    """Each row's mean loss of `data` (n, L + 1), one window at a time, LSH rotations drawn from
    seed 0 (the caller's random state is kept): (n,)."""
    device = next(model.parameters()).device
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return torch.tensor([lm_loss(model, row[None].to(device)).item() for row in data])


def eval_loss(model: ReformerLM, data: torch.Tensor) -> float:
    """Mean loss over the rows of `data` (nats / char)."""
    return window_losses(model, data).mean().item()


DOC_L, N_VALID = 2048, 32
KINDS = {"reformer": ("local", "lsh", "local", "lsh"), "exact": ("sdpa",) * 4}
train_docs, valid_docs = long_documents("train"), long_documents("valid")
valid_data = windows(valid_docs, DOC_L, N_VALID, torch.Generator().manual_seed(0))  # (32, L + 1)


def evaluate_doc(model: ReformerLM) -> dict:
    """Held-out loss (nats / char) on the 32 validation windows."""
    return {"ch08_doc_valid": eval_loss(model.eval(), valid_data)}


def train_doc(model: ReformerLM, steps: int, device: torch.device, lr: float = 3e-3,
              warmup: int = 50, report: int = 25, threads: int = 1) -> list[dict]:
    """Adam on one window of DOC_L characters a step, the same windows for every model (seed 1);
    the learning rate warms up over `warmup` steps, then decays (cosine) to a tenth; gradients
    clipped at norm 1. The log: every `report` steps, the mean training loss of those steps and
    the CPU seconds so far; every 10 reports, the held-out loss on the first 8 validation
    windows."""
    torch.set_num_threads(threads)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    data = torch.Generator().manual_seed(1)
    log, recent, cpu0 = [], [], time.process_time()
    name = " + ".join(sorted(set(model.kinds)))
    for step in progress(range(1, steps + 1), steps, f"{name}, L = {DOC_L}"):
        decay = 0.5 * (1 + math.cos(math.pi * step / steps))
        for group in opt.param_groups:
            group["lr"] = lr * min(1.0, step / warmup) * (0.1 + 0.9 * decay)
        model.train()
        loss = lm_loss(model, windows(train_docs, DOC_L, 1, data).to(device))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        recent.append(loss.item())
        if step % report == 0 or step == steps:
            entry = {"step": step, "loss": round(sum(recent) / len(recent), 4),
                     "cpu_s": round(time.process_time() - cpu0, 1)}
            if step % (10 * report) == 0 or step == steps:
                entry["valid_8"] = round(eval_loss(model.eval(), valid_data[:8]), 4)
            log.append(entry)
            recent = []
    return log


def build_reformer() -> ReformerLM:
    return ReformerLM(KINDS["reformer"])


def build_exact() -> ReformerLM:
    return ReformerLM(KINDS["exact"])


@checkpoint("08_reformer", build=build_reformer, evaluate=evaluate_doc, steps=DOC_STEPS)
def doc_reformer(model: ReformerLM, steps: int, device: torch.device) -> list[dict]:
    """The Reformer (local and LSH attention) on the long documents."""
    return train_doc(model, steps, device)


@checkpoint("08_reformer", build=build_exact, evaluate=evaluate_doc, steps=DOC_STEPS)
def doc_exact(model: ReformerLM, steps: int, device: torch.device) -> list[dict]:
    """The control: the same network with exact attention (SDPA), on the same windows."""
    return train_doc(model, steps, device)

# %% tags=["skip-grading", "hide-input"]
SHORT_STEPS = 250
seed_everything(0)
short_model = build_reformer()
cpu0 = time.process_time()
short_log = doc_reformer(short_model, steps=SHORT_STEPS, device=torch.device("cpu"))  # your run
short_cpu = time.process_time() - cpu0
doc_models = {"reformer": doc_reformer.load(), "exact": doc_exact.load()}    # the committed runs
doc_records = {"reformer": doc_reformer.record(), "exact": doc_exact.record()}
held_out = {name: window_losses(m, valid_data) for name, m in doc_models.items()}  # (32,) each
held_out["short"] = window_losses(short_model.eval(), valid_data)
for name, rec in doc_records.items():      # the page measures what the record says
    assert abs(held_out[name].mean().item() - rec["metrics"]["ch08_doc_valid"]) < 1e-4


def bootstrap_mean(x: torch.Tensor, n: int = 10_000, seed: int = 0) -> tuple[float, float]:
    """A 95% percentile interval of the mean of x, resampling its entries with replacement."""
    g = torch.Generator().manual_seed(seed)
    means = x[torch.randint(len(x), (n, len(x)), generator=g)].mean(1)  # (n,)
    lo, hi = torch.quantile(means, torch.tensor([0.025, 0.975]))
    return lo.item(), hi.item()


def char_baselines(docs: list, data: torch.Tensor) -> dict:
    """Held-out loss (nats / char) of the characters data[:, 1:] under a unigram and a bigram
    character model counted on `docs` (add-one smoothing)."""
    ids = torch.cat([encode(d.text) for d in docs])
    uni = torch.bincount(ids, minlength=VOCAB).double() + 1                          # (V,)
    pairs = torch.bincount(ids[:-1] * VOCAB + ids[1:], minlength=VOCAB ** 2)
    bi = pairs.double().view(VOCAB, VOCAB) + 1                                       # (V, V)
    prev, nxt = data[:, :-1].reshape(-1), data[:, 1:].reshape(-1)
    return {"unigram": -(uni / uni.sum()).log()[nxt].mean().item(),
            "bigram": -(bi / bi.sum(1, keepdim=True)).log()[prev, nxt].mean().item()}


gap = held_out["reformer"] - held_out["exact"]          # (32,) paired by window
gap_lo, gap_hi = bootstrap_mean(gap)
# the control: the committed Reformer with both LSH layers swapped for local attention, the same
# weights (an LSH layer's attn.qk becomes the local layer's qk, and so on)
all_local = ReformerLM(("local",) * 4).to(next(doc_models["reformer"].parameters()).device)
all_local.load_state_dict({k.replace(".f.layer.attn.", ".f.layer."): v
                           for k, v in doc_models["reformer"].state_dict().items()})
held_out["all local"] = window_losses(all_local.eval(), valid_data)
swap = held_out["all local"] - held_out["reformer"]      # (32,) paired by window
swap_lo, swap_hi = bootstrap_mean(swap)
glue("ch08_doc_all_local_valid", held_out["all local"].mean().item())
glue("ch08_doc_swap", swap.mean().item())
glue("ch08_doc_swap_lo", swap_lo)
glue("ch08_doc_swap_hi", swap_hi)
glue("ch08_doc_swap_verdict",
     "The LSH layers carry part of the prediction: local attention in their place does worse."
     if swap_lo > 0 else "Local attention in their place does slightly better: at this stage the "
     "LSH layers add nothing over local attention, so the gap to the exact model is not a result "
     "about hashing." if swap_hi < 0 else
     "At this stage the LSH layers add nothing measurable over local attention, so the gap to "
     "the exact model is not a result about hashing.")
base = char_baselines(train_docs, valid_data)
n_params = sum(p.numel() for p in short_model.parameters())
assert n_params == sum(p.numel() for p in doc_models["exact"].parameters())

print(f"{'run':30s} {'steps':>6s} {'CPU s':>7s} {'held-out nats/char (32 windows)':>32s}")
rows = [("Reformer, your short run", SHORT_STEPS, short_cpu, "short"),
        ("Reformer, committed run", doc_records["reformer"]["log"][-1]["step"],
         doc_records["reformer"]["log"][-1]["cpu_s"], "reformer"),
        ("exact (SDPA), committed", doc_records["exact"]["log"][-1]["step"],
         doc_records["exact"]["log"][-1]["cpu_s"], "exact")]
for label, steps, cpu, name in rows:
    print(f"{label:30s} {steps:6d} {cpu:7.0f} {held_out[name].mean().item():32.3f}")
for name, value in base.items():
    print(f"{name + ' characters (counted)':30s} {'':6s} {'':7s} {value:32.3f}")
print(f"Reformer - exact: {gap.mean().item():+.3f} nats/char, 95% bootstrap interval over the "
      f"32 windows [{gap_lo:+.3f}, {gap_hi:+.3f}]")
print(f"the committed Reformer, its LSH layers swapped for local attention: "
      f"{held_out['all local'].mean().item():.4f} ({swap.mean().item():+.4f} "
      f"[{swap_lo:+.4f}, {swap_hi:+.4f}] against the Reformer as trained)")
glue("ch08_ref_params", n_params)
glue("ch08_doc_short_steps", SHORT_STEPS)
glue("ch08_doc_short_cpu", short_cpu)
glue("ch08_doc_short_valid", held_out["short"].mean().item())
glue("ch08_doc_steps", doc_records["reformer"]["log"][-1]["step"])
for name, rec in doc_records.items():
    glue(f"ch08_doc_{name}_valid", held_out[name].mean().item())
    glue(f"ch08_doc_{name}_cpu", rec["log"][-1]["cpu_s"])
    glue(f"ch08_doc_{name}_minutes", rec["seconds"] / 60)
glue("ch08_doc_gap", gap.mean().item())
glue("ch08_doc_gap_lo", gap_lo)
glue("ch08_doc_gap_hi", gap_hi)
glue("ch08_doc_unigram", base["unigram"])
glue("ch08_doc_bigram", base["bigram"])
for name in ("reformer", "exact"):          # the page says both are below the bigram model
    below = base["bigram"] - held_out[name].mean().item()
    assert below > 0, f"{name} is not below the bigram model"
    glue(f"ch08_doc_{name}_below_bigram", below)
glue("ch08_doc_mb", sum(r["bytes"] for r in doc_records.values()) / 2**20)

fig, ax = plt.subplots(figsize=(7, 3.6))
for key, label, color in (("reformer", "Reformer (local + LSH)", "C0"),
                          ("exact", "exact attention (SDPA)", "C1")):
    log = doc_records[key]["log"]
    ax.plot([r["step"] for r in log], [r["loss"] for r in log], color=color, lw=1,
            label=f"{label}, committed run: training")
    held = [r for r in log if "valid_8" in r]
    ax.plot([r["step"] for r in held], [r["valid_8"] for r in held], "o", color=color, ms=4,
            label=f"{label}, committed run: held-out (8 windows)")
ax.plot([r["step"] for r in short_log], [r["loss"] for r in short_log], color="k", lw=2,
        label="Reformer, your short run: training")
for (name, value), style in zip(base.items(), (":", "--")):
    ax.axhline(value, color="grey", ls=style, lw=1, label=f"{name} characters (held-out)")
ax.set(xlabel=f"step (one window of {DOC_L} characters)", ylabel="nats / char (mean of 25 steps)",
       ylim=(0.5, 4.6))
ax.legend(fontsize=7)
plt.tight_layout()
plt.show()

# %% [markdown]
# Both models have {glue:text}`ch08_ref_params` parameters; the two
# committed runs take {glue:text}`ch08_doc_mb:.1f` MiB in float16. Your short
# run trained the Reformer for {glue:text}`ch08_doc_short_steps` steps
# ({glue:text}`ch08_doc_short_cpu:.0f` CPU-seconds) and reached
# {glue:text}`ch08_doc_short_valid:.3f` nats per character on 32 held-out
# windows of the validation documents. The committed runs trained the
# Reformer and the exact model on the same {glue:text}`ch08_doc_steps`
# windows, with the same function and seed (`python -m course checkpoints
# 08`, one thread, {glue:text}`ch08_doc_reformer_cpu:.0f` and
# {glue:text}`ch08_doc_exact_cpu:.0f` CPU-seconds). On the same 32 windows
# the Reformer's loss is {glue:text}`ch08_doc_reformer_valid:.3f` nats per
# character and the exact model's {glue:text}`ch08_doc_exact_valid:.3f`. For
# scale, a character unigram model counted on the training documents scores
# {glue:text}`ch08_doc_unigram:.2f` and a bigram model
# {glue:text}`ch08_doc_bigram:.3f`.
# After {glue:text}`ch08_doc_steps` steps both models are at about the
# level of that bigram model: the Reformer
# {glue:text}`ch08_doc_reformer_below_bigram:.3f` and the exact model
# {glue:text}`ch08_doc_exact_below_bigram:.3f` nats per character below it.
#
# In this run the Reformer's held-out loss minus the exact model's is
# {glue:text}`ch08_doc_gap:+.3f` nats per character, with a 95% bootstrap
# interval over the 32 windows of [{glue:text}`ch08_doc_gap_lo:+.3f`,
# {glue:text}`ch08_doc_gap_hi:+.3f`].
#
# **What do the LSH layers add?** The same committed weights with both LSH
# layers swapped for local attention (an LSH layer's `qk`, `v` and `out`
# become a local layer's) score {glue:text}`ch08_doc_all_local_valid:.4f`,
# {glue:text}`ch08_doc_swap:+.4f` [{glue:text}`ch08_doc_swap_lo:+.4f`,
# {glue:text}`ch08_doc_swap_hi:+.4f`] against the Reformer as trained.
# {glue:text}`ch08_doc_swap_verdict` What else gives the Reformer its
# lower loss (its local layers, or the exact model attending to each
# token's own key) this page does not test.
#
# The interval covers the choice of held-out windows, not the training
# seed: this is one run of one seed, at {glue:text}`ch08_doc_steps` steps, a
# result of this run and not a law. The paper trained far longer (enwik8,
# imagenet64) and reports, in its Section 5, that shared query/keys and
# reversible layers cost no accuracy there, and that LSH attention with 8
# rounds nearly matches full attention.
#
# **Does the trained stack still invert?** The reversible backward pass is
# exact only if the blocks' inputs can be rebuilt from their outputs. Below,
# the committed Reformer runs one held-out window forward through its four
# blocks and back through their inverses, in float32.

# %% tags=["skip-grading", "hide-input"]
ref = doc_models["reformer"]
with torch.no_grad(), torch.random.fork_rng(devices=[]):
    torch.manual_seed(0)
    ref.resample()                                               # one draw for both ways
    h = ref.emb(valid_data[:1, :-1]) + ref.pos(DOC_L)            # (1, L, d)
    y1, y2 = h, h
    for block in ref.stack.blocks:
        y1, y2 = block(y1, y2)
    x1, x2 = y1, y2
    for block in reversed(ref.stack.blocks):
        x1, x2 = block.inverse(x1, x2)
doc_inv_err = max((x1 - h).abs().max().item(), (x2 - h).abs().max().item())
doc_h_max = h.abs().max().item()
print(f"largest error of the rebuilt inputs {doc_inv_err:.1e}; largest input entry {doc_h_max:.1f}")
assert doc_inv_err < 1e-3 * doc_h_max        # the text says the rebuilt inputs are exact
glue("ch08_doc_inv_err", doc_inv_err)
_ = glue("ch08_doc_h_max", doc_h_max)

# %% [markdown]
# The rebuilt inputs differ from the true ones by at most
# {glue:text}`ch08_doc_inv_err:.1e`, where the largest entry is
# {glue:text}`ch08_doc_h_max:.1f`: float rounding. After training, this
# stack's recomputed activations are still exact to float precision.
#
# **What the axial positions learned.** The committed Reformer's position
# vectors come from a grid of 64 rows ($E_1$) by 32 columns ($E_2$):
# position $p$ is row $\lfloor p / 32 \rfloor$, column $p \bmod 32$. Below,
# the cosine similarity between the vectors of the first 128 positions (four
# rows of the grid), and between the rows of $E_1$ and of $E_2$ themselves.

# %% tags=["skip-grading", "hide-input"]
def neighbour_cos(t: torch.Tensor) -> float:
    """Mean cosine similarity between consecutive rows of t (n, d)."""
    t = F.normalize(t.detach(), dim=-1)
    return (t[1:] * t[:-1]).sum(-1).mean().item()


pos = doc_models["reformer"].pos
with torch.no_grad():
    P = F.normalize(pos(DOC_L), dim=-1)                          # (L, d)
    e1, e2 = F.normalize(pos.e1, dim=-1), F.normalize(pos.e2, dim=-1)
    cos = P @ P.T                                                # (L, L)
n2 = pos.e2.shape[0]
idx = torch.arange(DOC_L)
same_row = (idx[:, None] // n2) == (idx[None] // n2)             # (L, L)
same_col = (idx[:, None] % n2) == (idx[None] % n2)               # (L, L)
seed_everything(0)
untrained = build_reformer().pos
axial_cos = {"row": cos[same_row & ~same_col].mean().item(),
             "column": cos[same_col & ~same_row].mean().item(),
             "neither": cos[~same_row & ~same_col].mean().item(),
             "next_e1": neighbour_cos(pos.e1), "next_e2": neighbour_cos(pos.e2),
             "next_e1_init": neighbour_cos(untrained.e1),
             "next_e2_init": neighbour_cos(untrained.e2)}
print("mean cosine similarity between two position vectors that share their row "
      f"{axial_cos['row']:.3f}, their column {axial_cos['column']:.3f}, neither "
      f"{axial_cos['neither']:.3f}")
print(f"between consecutive rows of E1 {axial_cos['next_e1']:.3f} (untrained "
      f"{axial_cos['next_e1_init']:.3f}), of E2 {axial_cos['next_e2']:.3f} (untrained "
      f"{axial_cos['next_e2_init']:.3f})")
for k, v in axial_cos.items():
    glue(f"ch08_axial_cos_{k}", v)
fig, axes = plt.subplots(1, 3, figsize=(10, 3.4))
for ax, m, title in ((axes[0], cos[:128, :128], "positions 0-127"),
                     (axes[1], e1 @ e1.T, "rows of $E_1$ (64)"),
                     (axes[2], e2 @ e2.T, "rows of $E_2$ (32)")):
    im = ax.imshow(m, cmap="RdBu_r", vmin=-1, vmax=1)
    ax.set(title=title)
fig.colorbar(im, ax=axes, shrink=0.8, label="cosine similarity")
plt.show()

# %% [markdown]
# Two positions share half their vector when they share a row ($E_1$) or a
# column ($E_2$) of the grid; in the committed Reformer their mean cosine
# similarity is then {glue:text}`ch08_axial_cos_row:.2f` (same row) and
# {glue:text}`ch08_axial_cos_column:.2f` (same column), against
# {glue:text}`ch08_axial_cos_neither:.2f` for two positions that share
# neither. Consecutive rows of $E_1$ have a mean cosine similarity of
# {glue:text}`ch08_axial_cos_next_e1:.2f` after training
# ({glue:text}`ch08_axial_cos_next_e1_init:.2f` at initialisation), and
# consecutive rows of $E_2$ {glue:text}`ch08_axial_cos_next_e2:.2f`
# ({glue:text}`ch08_axial_cos_next_e2_init:.2f`).
#
# What the assembled model costs. Both models keep the same few tensors
# across the whole forward pass, because the reversible stack stores no
# block's activations: the embeddings, the stack's two outputs and the head.
# The backward pass recomputes one block at a time, so at its peak it adds
# the activations of one block. We count both with `saved_bytes` (activation
# memory, untrained weights) at $L = 2048$ and $8192$. We also time one
# training step (forward and backward) of the two committed models at
# $L = 2048$, interleaved on one thread (`attnkit.walltime.compare`, 5 pairs).

# %% tags=["skip-grading", "hide-input"]
from attnkit.walltime import compare  # noqa: E402


def model_memory(kinds: tuple[str, ...], L: int) -> float:
    """MiB autograd keeps for a training step of ReformerLM(kinds) at length L: the forward pass,
    plus the largest block recomputed in the backward pass."""
    seed_everything(0)
    model = ReformerLM(kinds, max_len=L)
    model.resample()
    tokens = torch.randint(VOCAB, (1, L))
    params = list(model.parameters())
    kept = saved_bytes(lambda: model(tokens), exclude=params)
    h = model.emb(tokens).detach() + model.pos(L).detach()
    block = max(saved_bytes(lambda b=b: b(h, h), exclude=params) for b in model.stack.blocks)
    return (kept + block) / MiB


mem = {(name, L): model_memory(kinds, L) for L in (2048, 8192)
       for name, kinds in (("reformer", ("local", "lsh", "local", "lsh")), ("full", ("sdpa",) * 4))}
step_data = windows(train_docs, DOC_L, 1, torch.Generator().manual_seed(2))
full_t, ref_t, ratio = compare(lambda: lm_loss(doc_models["exact"], step_data).backward(),
                               lambda: lm_loss(doc_models["reformer"], step_data).backward(),
                               repeat=5)
for L in (2048, 8192):
    print(f"L = {L}: Reformer {mem['reformer', L]:6.1f} MiB, "
          f"exact attention (SDPA) {mem['full', L]:6.1f} MiB")
    glue(f"ch08_ref_mem_{L}", mem["reformer", L])
    glue(f"ch08_ref_mem_sdpa_{L}", mem["full", L])
print(f"one training step at L = {DOC_L}: Reformer {ref_t.median:.3f} s, "
      f"exact {full_t.median:.3f} s, "
      f"exact / Reformer {ratio.median:.2f} (interquartile range {ratio.spread:.2f})")
glue("ch08_ref_step_ratio", ratio.median)
glue("ch08_ref_step_ratio_spread", ratio.spread)
glue("ch08_ref_step_s", ref_t.median)
_ = glue("ch08_ref_step_sdpa_s", full_t.median)

# %% [markdown]
# The Reformer keeps {glue:text}`ch08_ref_mem_8192:.0f` MiB at $L = 8192$ and
# the exact model {glue:text}`ch08_ref_mem_sdpa_8192:.0f` MiB: with the fused
# kernel, exact attention keeps less, as it did for one head in the
# Experiment section. Reversible layers help both models alike (chunking, as
# written here, saves nothing in these counts: the backward pass recomputes
# the feed-forward on the whole sequence); LSH attention's rounds cost memory
# that the fused kernel does not. At
# $L = 2048$ the two models train at nearly the same speed. In this page's
# interleaved pairs (median of 5 on one thread) a training step of the exact
# model takes {glue:text}`ch08_ref_step_ratio:.2f` times as long as the
# Reformer's (interquartile range {glue:text}`ch08_ref_step_ratio_spread:.2f`);
# the committed trainings (above) used {glue:text}`ch08_doc_reformer_cpu:.0f`
# CPU-seconds for the Reformer and {glue:text}`ch08_doc_exact_cpu:.0f` for the
# exact model. The pairs are the better test, since each pair runs back to
# back, under nearly the same load, but they are one run on one machine and the
# claims check does not repeat them, so no ranking is claimed. The time saving of LSH
# attention against the fused kernel is a matter of longer $L$: at 8192 it
# was faster in every run of the claims check, by a factor that moves too
# much with the solution and the run to claim (see above). All of these figures are from this CPU; nothing on this page is
# measured on a GPU.

# %% [markdown]
# ## Summary
#
# * Three places hold a Transformer's training memory: the $L^2$ attention
#   matrix when it is written out, the activations of every layer, the
#   $d_{ff}$-wide feed-forward.
# * **LSH attention** hashes shared queries/keys with random projections,
#   sorts by bucket then position, and attends within chunks with one chunk
#   of look-back: $O(n_r L\,m)$ scores and memory, plus an $O(L \log L)$
#   sort per round and a hash whose cost grows with $L$ times the number of
#   buckets. Rounds are combined with softmax weights of their
#   log-sum-exps; more rounds, smaller error, and more of the sequence seen.
#   Exact attention with a fused kernel also avoids the $L^2$ memory, and
#   keeps less than LSH attention at every length measured. On this CPU
#   (one head, $D = 64$), LSH attention is faster than the written-out
#   attention at $L = 4096$. Against the fused kernel at $L = 8192$ it was
#   faster in every recorded run, by a factor that moves too much with the
#   solution and the run to claim; on GPUs we claim nothing.
# * **Reversible layers** rebuild their inputs from their outputs, so
#   activation memory is flat in depth, at the cost of recomputing every
#   layer once. Parameters, gradients and optimizer state still grow with
#   depth.
# * **Chunking** a position-wise layer along time cuts its peak memory and
#   changes nothing else; in training it saves memory only if each chunk is
#   recomputed and backpropagated on its own, one chunk's graph at a time
#   (exercise 11).
# * **Local attention** attends to the own chunk and the one before, in the
#   sequence's order; **axial position encodings** factor a position table
#   of $L \cdot d$ numbers into two of $n_1 d_1 + n_2 d_2$.
# * **One Reformer** (axial positions, reversible blocks, local and LSH
#   attention, chunked feed-forward) trained on real documents at
#   $L = 2048$, next to the same network with exact attention. After
#   {glue:text}`ch08_doc_steps` steps on the same windows, both were at
#   about the level of a character bigram model
#   ({glue:text}`ch08_doc_bigram:.3f`): held-out losses
#   {glue:text}`ch08_doc_reformer_valid:.3f` and
#   {glue:text}`ch08_doc_exact_valid:.3f` nats per character (one run; the
#   difference {glue:text}`ch08_doc_gap:+.3f`, 95% bootstrap interval over
#   the held-out windows [{glue:text}`ch08_doc_gap_lo:+.3f`,
#   {glue:text}`ch08_doc_gap_hi:+.3f`]). Its LSH layers swapped for local
#   attention change its loss by {glue:text}`ch08_doc_swap:+.4f` nats per
#   character: no measurement on this page shows LSH attention making a
#   model better. The exact attention through the fused kernel keeps less
#   memory.
#
# The attentions of this chapter, side by side:
#
# | attention, one head, length $L$, width $D$ | scores computed | kept for backward |
# | --- | --- | --- |
# | written out | $L^2$ | $L^2$ |
# | exact, fused kernel (SDPA) | $L^2$ | $O(L D)$ |
# | LSH, $n_r$ rounds, chunks of $m$ | $2 n_r L m$, plus $n_r$ sorts, $O(L \log L)$ each, and the hash's $n_r L D b/2$ products | $O(n_r L m)$ |
# | local, chunks of $m$ | $2 L m$ | $O(L m)$ |
#
# ## Exercises
#
# 1. Why must queries and keys be *shared* for LSH attention? What would go
#    wrong if $q$ and $k$ were hashed with the same rotations but were
#    different projections?
# 2. Why does a token's own key score $-10^5$ and not $-\infty$? When is it
#    used?
# 3. `sort_by_bucket` sorts by bucket, then position. What breaks in the causal
#    mask, and what in the look-back, if ties are broken arbitrarily?
# 4. A bucket longer than two chunks: which of its keys does a query at the
#    end of it miss? How would you choose `n_buckets` for a given `chunk_len`
#    (the paper sets $m = 2L / n_{buckets}$, that is $2L / m$ buckets; trax's
#    default is `n_buckets = 2 * (L // chunk_len)`)?
# 5. Show that `combine_hash_rounds` gives exactly the softmax over the union
#    of keys when the rounds' key sets are disjoint. What happens when they
#    overlap (the paper down-weights a key that appears in several rounds,
#    subtracting $\log N_{ij}$ from its score)?
# 6. Reversible layers trade memory for compute. How much more compute does a
#    training step cost? When is the inversion error of float32 harmless
#    for training, and what would make it grow (see the weights x2 and x3
#    above)?
# 7. Chunking the feed-forward changes nothing in the output. Which layer of
#    a Transformer could *not* be chunked along time this way?
# 8. With `layer_buckets`, find which key a query of the second $w$ shares a
#    bucket with most often in the trained model's two layers: the other copy
#    of its own symbol, the position after it, or the one before? Compare
#    with the attention weights of full shared-QK attention on the same
#    query/keys. What does the model need to copy the next symbol?
# 9. Local attention with chunks of $m$ lets a query see between $m$ and
#    $2m - 1$ earlier positions. How far back can information travel
#    through $k$ stacked local layers? The page swapped the committed
#    Reformer's LSH layers for local ones. Do the same with the committed
#    exact model: build `ReformerLM(("local",) * 4)`, copy its weights into
#    it (an exact layer's `qk`, `v` and `out` become a local layer's) and
#    score the 32 held-out windows again. How much does the exact model
#    lose when each of its layers sees only its last 64 to 127 characters?
#    What does that tell you about how far back it reads?
# 10. The committed Reformer's axial grid is $64 \times 32$ with
#     $d_1 = d_2 = 32$. Count its position parameters and those of a full
#     table for $L = 2048$, $d = 64$. Positions $p$ and $p + 1$ (in one row)
#     share their $E_1$ half; $p$ and $p + 32$ share their $E_2$ half. Which
#     two positions 1 apart share no half, and what does the figure of the
#     trained vectors say about them? The model cannot read a window longer
#     than 2048: what would you change to let it, and which part would stay
#     untrained?
# 11. Write `chunked_g_backward(g, y1, dy2, n_chunks)` for a position-wise
#     $G$: it returns $G(y_1)$ and $\partial L / \partial y_1$ through $G$,
#     recomputing and backpropagating one chunk of $y_1$ along $T$ at a
#     time, and accumulates $G$'s parameter gradients. Check that it gives
#     the same gradients as the whole backward pass, and measure with
#     `saved_bytes` what one chunk's graph keeps. Then use it for $G$ in
#     `reversible_block_backward`.
#
# ## References
# ```{bibliography}
# :filter: docname in docnames
# ```
