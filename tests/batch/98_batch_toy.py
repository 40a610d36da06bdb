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
#     chapter: 98_batch_toy
# ---

# %% [markdown]
# # 98. A toy chapter for the batch-grading tests

# %%
import torch

# %% nbgrader={"grade": false, "grade_id": "add", "locked": false, "schema_version": 3, "solution": true}
def add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Elementwise a + b."""
    ### BEGIN SOLUTION
    return a + b
    ### END SOLUTION

# %% nbgrader={"grade": false, "grade_id": "scale", "locked": false, "schema_version": 3, "solution": true}
def scale(x: torch.Tensor, k: float) -> torch.Tensor:
    """x times k."""
    ### BEGIN SOLUTION
    return x * k
    ### END SOLUTION

# %%
print(add(torch.ones(2), torch.ones(2)))  # tensor([2., 2.])
