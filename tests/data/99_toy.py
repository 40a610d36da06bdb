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

# %% [markdown]
# ## Experiment
#
# Doubling 1000 standard normal draws (seed and thread count set in the cell, as every
# experiment does) gives a standard deviation of about 2.

# %% tags=["skip-grading", "hide-input"]
from attnkit.claims import experiment, spread


@experiment("99_toy")
def doubled_noise(seed: int = 0, threads: int = 1) -> dict:
    """The mean and standard deviation of 1000 doubled standard normals."""
    torch.set_num_threads(threads)
    x = double(torch.randn(1000, generator=torch.Generator().manual_seed(seed)))
    return {"toy_mean": x.mean().item(), "toy_std": x.std().item()}

# %% tags=["skip-grading", "hide-input"]
figures = doubled_noise(seed=0, threads=1)
spread({"toy_mean": "mean", "toy_std": "standard deviation"})

# %% tags=["skip-grading", "hide-input"]
from attnkit.claims import claim

claim("toy_std_near_two", "Doubling makes the standard deviation about 2 (within 0.2).",
      lambda g: abs(g["toy_std"] - 2) < 0.2)
