"""Percentile bootstrap intervals over resampled items (sentences, test pairs), for any statistic.

    from attnkit.resample import bootstrap_interval
    # a paired difference: both systems scored on the same resample of the test items
    lo, hi = bootstrap_interval(lambda idx: (right_a[idx] - right_b[idx]).float().mean(1), len(right_a))

`statistic` maps a (n, items) tensor of resampled item indices (drawn with replacement) to the
(n,) values of the statistic on each resample; the 95% interval is their 2.5 and 97.5 percentiles.
The draws are fixed by `seed`, so a page gives the same interval on every run. Chapter 06's
experiment draws the same indices (its `bootstrap`, kept in the experiment so that its claims
records stay valid).
"""
from __future__ import annotations

from typing import Callable

import torch


def bootstrap_interval(statistic: Callable[[torch.Tensor], torch.Tensor], items: int, n: int = 1000,
                       seed: int = 0) -> tuple[float, float]:
    """The 95% percentile interval of `statistic` over `n` resamples of `items` items."""
    if items < 1 or n < 40:
        raise ValueError(f"need at least 1 item and 40 resamples, not {items} and {n}")
    idx = torch.randint(items, (n, items), generator=torch.Generator().manual_seed(seed))  # (n, items)
    values = statistic(idx).sort().values                                                 # (n,)
    return values[int(0.025 * n)].item(), values[int(0.975 * n) - 1].item()
