"""CPU time of a call: the cost figures of the claims-checked experiments.

Wall-clock time (`attnkit.timing.time_call`) counts the time a process waits for a
CPU shared with other jobs, so on a loaded machine a small call can look ten times
slower than it is. The CPU time of this process (all its threads) counts only the
work done, and so ratios between two calls survive the load. It is still not a
bit-reproducible figure: caches, frequency and spinning threads move it.
"""
from __future__ import annotations

import statistics
import time
from typing import Any, Callable


def cpu_time_call(fn: Callable[[], Any], repeat: int = 5, warmup: int = 1) -> float:
    """The median CPU seconds of this process (all threads) over `repeat` runs of `fn()`,
    after `warmup` untimed runs. CPU only: it does not wait for CUDA kernels."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return statistics.median(times)
