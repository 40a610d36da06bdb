"""Plotting helpers: attention heatmaps and curves."""
from __future__ import annotations

from typing import Sequence

import matplotlib.pyplot as plt
import torch


def heatmap(weights: torch.Tensor, rows: Sequence[str] | None = None, cols: Sequence[str] | None = None,
            ax=None, title: str | None = None, cmap: str = "viridis", colorbar: bool = True):
    """Draw a (rows, cols) weight matrix, e.g. attention of targets (rows) over sources (cols)."""
    w = weights.detach().float().cpu()
    if w.dim() != 2:
        raise ValueError(f"heatmap takes a 2-D matrix, got shape {tuple(w.shape)}")
    ax = ax or plt.gca()
    im = ax.imshow(w.numpy(), cmap=cmap, aspect="auto", vmin=0.0 if w.min() >= 0 else None)
    if cols is not None:
        ax.set_xticks(range(len(cols)), list(cols), fontsize=8)
    if rows is not None:
        ax.set_yticks(range(len(rows)), list(rows), fontsize=8)
    if title:
        ax.set_title(title, fontsize=9)
    if colorbar:
        plt.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    return ax


def heatmap_grid(mats: Sequence[torch.Tensor], titles: Sequence[str], rows=None, cols=None,
                 ncols: int = 4, size: float = 2.6):
    """A grid of heatmaps, e.g. one per head; returns the figure."""
    n = len(mats)
    nrows = (n + ncols - 1) // ncols
    fig, axes = plt.subplots(nrows, min(ncols, n), figsize=(size * min(ncols, n), size * nrows), squeeze=False)
    for i, ax in enumerate(axes.flat):
        if i < n:
            heatmap(mats[i], rows, cols, ax=ax, title=titles[i], colorbar=False)
        else:
            ax.axis("off")
    fig.tight_layout()
    return fig


def curves(series: dict[str, Sequence[float]], xlabel: str = "step", ylabel: str = "loss",
           ax=None, smooth: int = 1, logy: bool = False):
    """Plot named curves (e.g. training losses), optionally smoothed by a running mean."""
    ax = ax or plt.gca()
    for name, ys in series.items():
        ys = torch.as_tensor(list(ys), dtype=torch.float)
        if smooth > 1 and len(ys) >= smooth:
            ys = torch.nn.functional.avg_pool1d(ys[None, None], smooth, 1).flatten()
        ax.plot(ys.numpy(), label=name)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if logy:
        ax.set_yscale("log")
    ax.legend()
    return ax
