"""A small training loop with a progress bar, and exact-match evaluation."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Iterable

import torch


@dataclass
class TrainConfig:
    """What `train` needs besides the model and the loss."""

    steps: int = 1000
    lr: float = 1e-3
    clip: float | None = 1.0
    log_every: int = 50
    desc: str = "training"


def progress(iterable: Iterable, total: int, desc: str):
    """A tqdm progress bar, or the bare iterable when $ATTNKIT_PROGRESS=off (the book build)."""
    if os.environ.get("ATTNKIT_PROGRESS", "on") == "off":
        return iterable
    from tqdm.auto import tqdm
    return tqdm(iterable, total=total, desc=desc)


def train(model: torch.nn.Module, loss_fn: Callable[[int], torch.Tensor], cfg: TrainConfig,
          optimizer: torch.optim.Optimizer | None = None,
          schedule: Callable[[int], float] | None = None) -> list[float]:
    """Minimise `loss_fn(step)` for `cfg.steps` steps; return the loss of every step.

    `schedule(step)`, if given, sets the learning rate of every parameter
    group before each step (for example the Noam schedule of chapter 03).
    """
    opt = optimizer or torch.optim.Adam(model.parameters(), lr=cfg.lr)
    model.train()
    losses: list[float] = []
    bar = progress(range(cfg.steps), cfg.steps, cfg.desc)
    for step in bar:
        if schedule is not None:
            for group in opt.param_groups:
                group["lr"] = schedule(step + 1)
        loss = loss_fn(step)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
        opt.step()
        losses.append(loss.item())
        if hasattr(bar, "set_postfix") and step % cfg.log_every == 0:
            bar.set_postfix(loss=f"{losses[-1]:.3f}")
    model.eval()
    print(f"{cfg.desc}: {cfg.steps} steps, final loss {sum(losses[-20:]) / len(losses[-20:]):.4f}")
    return losses


def exact_match(predictions: list[str], targets: list[str]) -> float:
    """The fraction of predictions equal to their target."""
    if len(predictions) != len(targets):
        raise ValueError(f"{len(predictions)} predictions for {len(targets)} targets")
    return sum(p == t for p, t in zip(predictions, targets)) / max(len(targets), 1)
