"""attnkit.resample: a percentile bootstrap interval that holds a statistic's spread, tells a real
paired difference from noise, and gives the same draws on every run."""
from __future__ import annotations

import pytest
import torch

from attnkit.resample import bootstrap_interval


def _paired(gain: float, items: int = 400, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Right (1) or wrong (0) answers of two systems on the same items; `a` is right on a share
    `gain` more of them."""
    g = torch.Generator().manual_seed(seed)
    u = torch.rand(items, generator=g)
    return (u < 0.6 + gain).float(), (torch.rand(items, generator=g) < 0.6).float()


def test_the_interval_of_a_mean_holds_the_mean_and_has_the_binomial_width():
    """Does the interval of a 60% accuracy on 400 items hold it, about +-1.96 standard errors wide?"""
    right = torch.tensor([1.0] * 240 + [0.0] * 160)
    lo, hi = bootstrap_interval(lambda idx: right[idx].mean(1), len(right))
    se = (0.6 * 0.4 / 400) ** 0.5
    assert lo < 0.6 < hi
    assert hi - lo == pytest.approx(2 * 1.96 * se, rel=0.15)


def test_a_real_paired_gain_lies_above_zero_and_none_does_not():
    a, b = _paired(gain=0.15)
    lo, _ = bootstrap_interval(lambda idx: (a[idx] - b[idx]).mean(1), len(a))
    assert lo > 0
    a, b = _paired(gain=0.0)
    lo, hi = bootstrap_interval(lambda idx: (a[idx] - b[idx]).mean(1), len(a))
    assert lo < 0 < hi


def test_the_draws_are_fixed_by_the_seed():
    """Same seed, same resamples (so a page gives the same interval on every run); another seed,
    other resamples."""
    drawn = []
    keep = lambda idx: drawn.append(idx) or idx.float().mean(1)  # noqa: E731
    for seed in (0, 0, 1):
        bootstrap_interval(keep, 50, seed=seed)
    assert torch.equal(drawn[0], drawn[1]) and not torch.equal(drawn[0], drawn[2])
    assert drawn[0].shape == (1000, 50) and 0 <= drawn[0].min() and drawn[0].max() < 50


def test_too_few_items_or_resamples_are_refused():
    with pytest.raises(ValueError, match="at least"):
        bootstrap_interval(lambda idx: idx.float().mean(1), 0)
    with pytest.raises(ValueError, match="at least"):
        bootstrap_interval(lambda idx: idx.float().mean(1), 10, n=10)
