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
# # 99. A toy chapter (for the book-building tests)

# %%
import torch

# %% nbgrader={"grade": false, "grade_id": "double", "locked": false, "schema_version": 3, "solution": true}
def double(x: torch.Tensor) -> torch.Tensor:
    """Twice x."""
    ### BEGIN SOLUTION
    return x * 2
    ### END SOLUTION

# %%
print(double(torch.tensor([1.0, 2.0])))  # tensor([2., 4.])
