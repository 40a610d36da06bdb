"""Wall time that holds under load: one thread, repeats, interleaved calls, the median and the spread.

`attnkit.timing.time_call` times a call with whatever threads torch has; on a shared
machine with 2 threads a call can wait for its second thread and look ten times
slower than it is. `attnkit.cputime` counts CPU time instead, but spinning threads
are counted too. This module times on ONE torch thread (nothing to wait for but the
CPU itself), repeats each call, and reports the median and the spread of the
repeats. `compare` interleaves two calls (a, b, a, b, ...), so that a burst of load
slows both alike, and reports the median of the per-pair ratios and their spread.

The spread is the interquartile range (q3 - q1) of the repeats, in the unit of the
figure (seconds for `wall_time`, a plain ratio for `compare`). A comparison whose
margin (how far its ratio is from the claimed bound) is smaller than the spread says
nothing: the claims check (course/claims.py) fails such a timing claim.
"""
from __future__ import annotations

import os
import statistics
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch


@dataclass(frozen=True)
class Timing:
    """Repeated measurements of one figure: the values, their median and their spread (q3 - q1)."""

    values: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def spread(self) -> float:
        if len(self.values) < 2:
            return 0.0
        q1, _, q3 = statistics.quantiles(self.values, n=4, method="inclusive")
        return q3 - q1


@contextmanager
def one_thread(cpu: int | None = None) -> Iterator[None]:
    """Run the block on one torch thread (and, if `cpu` is given, this process pinned to that CPU)."""
    threads = torch.get_num_threads()
    affinity = os.sched_getaffinity(0) if cpu is not None and hasattr(os, "sched_getaffinity") else None
    torch.set_num_threads(1)
    if affinity is not None:
        os.sched_setaffinity(0, {cpu})
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        if affinity is not None:
            os.sched_setaffinity(0, affinity)


def _once(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _check(repeat: int, warmup: int) -> None:
    if repeat < 1 or warmup < 0:
        raise ValueError(f"repeat must be >= 1 and warmup >= 0, got repeat={repeat}, warmup={warmup}")


def wall_time(fn: Callable[[], Any], repeat: int = 7, warmup: int = 1, cpu: int | None = None) -> Timing:
    """Wall seconds of `fn()` on one torch thread: `repeat` timed runs after `warmup` untimed ones.
    CPU work only (it does not wait for CUDA kernels)."""
    _check(repeat, warmup)
    with one_thread(cpu):
        for _ in range(warmup):
            fn()
        return Timing(tuple(_once(fn) for _ in range(repeat)))


def compare(slow: Callable[[], Any], fast: Callable[[], Any], repeat: int = 7, warmup: int = 1,
            cpu: int | None = None) -> tuple[Timing, Timing, Timing]:
    """Time `slow` and `fast` interleaved on one torch thread; (slow, fast, slow/fast per pair).

    The ratio's median and spread are those of the per-pair ratios, not the ratio of the medians:
    each pair ran back to back, under nearly the same load."""
    _check(repeat, warmup)
    a, b = [], []
    with one_thread(cpu):
        for _ in range(warmup):
            slow(), fast()
        for i in range(repeat):
            first, second = (slow, fast) if i % 2 == 0 else (fast, slow)   # neither always goes first
            t1, t2 = _once(first), _once(second)
            a.append(t1 if i % 2 == 0 else t2)
            b.append(t2 if i % 2 == 0 else t1)
    return Timing(tuple(a)), Timing(tuple(b)), Timing(tuple(x / y for x, y in zip(a, b)))
