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
#     chapter: 99_toy
# ---

# %% [markdown]
# # 99. A toy chapter for the autograder's own tests

# %%
import torch

# %% nbgrader={"grade": false, "grade_id": "causal_mask", "locked": false, "schema_version": 3, "solution": true}
def causal_mask(n: int) -> torch.Tensor:
    """(n, n) bool mask, True where position i may look at position j (j <= i)."""
    ### BEGIN SOLUTION
    return torch.ones(n, n, dtype=torch.bool).tril()
    ### END SOLUTION

# %% nbgrader={"grade": false, "grade_id": "scaled_scores", "locked": false, "schema_version": 3, "solution": true}
def scaled_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """q (B, S, D), k (B, T, D) -> (B, S, T) scores q k^T / sqrt(D)."""
    ### BEGIN SOLUTION
    return q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    ### END SOLUTION

# %% nbgrader={"grade": false, "grade_id": "noisy_sum", "locked": false, "schema_version": 3, "solution": true}
def noisy_sum(x: torch.Tensor) -> torch.Tensor:
    """x.sum() plus noise from the global torch generator (the harness seeds it)."""
    ### BEGIN SOLUTION
    return x.sum() + torch.randn(())
    ### END SOLUTION

# %%
print(causal_mask(3))
