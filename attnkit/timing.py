"""Measuring cost: wall-clock time of a call and the memory autograd keeps for backward.

Used by the chapters' cost experiments and by `benchmarks/`; nothing here is
a graded exercise.
"""
from __future__ import annotations

import statistics
import time
from typing import Any, Callable, Iterable

import torch


def _sync(device: torch.device | str | None) -> None:
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def time_call(fn: Callable[[], Any], repeat: int = 5, warmup: int = 1,
              device: torch.device | str | None = None) -> float:
    """The median wall-clock seconds of `fn()` over `repeat` runs, after `warmup` untimed runs.

    Pass the `device` the work runs on so that CUDA kernels are waited for.
    """
    for _ in range(warmup):
        fn()
    _sync(device)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def saved_bytes(fn: Callable[[], Any], exclude: Iterable[torch.Tensor] = ()) -> int:
    """Bytes of the tensors autograd saves for backward while `fn()` runs.

    This is the activation memory a layer costs during training. Tensors
    sharing storage with one in `exclude` (pass the layer's parameters) are
    not counted; a storage saved twice is counted once.
    """
    skip = {t.untyped_storage().data_ptr() for t in exclude}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in skip:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(seen.values())
