"""attnkit.walltime: wall time on one thread, repeats, median and spread, interleaved comparisons."""
import pytest
import torch

from attnkit import walltime
from attnkit.walltime import Timing, compare, one_thread, wall_time


class FakeClock:
    """perf_counter that advances only when a timed function says how long it 'took'."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def work(self, seconds, log=None, name=None):
        def fn():
            self.now += seconds() if callable(seconds) else seconds
            if log is not None:
                log.append(name)
        return fn


def test_median_and_spread_are_the_middle_and_interquartile_range():
    t = Timing((5.0, 1.0, 2.0, 3.0, 4.0))
    assert t.median == 3.0
    assert t.spread == pytest.approx(2.0)       # q3 = 4, q1 = 2
    assert Timing((7.0,)).spread == 0.0


def test_wall_time_runs_on_one_thread_and_restores_the_count(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(walltime.time, "perf_counter", clock)
    seen = []
    before = torch.get_num_threads()
    t = wall_time(lambda: (seen.append(torch.get_num_threads()), clock.work(0.5)()), repeat=3, warmup=2)
    assert seen == [1] * 5                       # 2 warm-up + 3 timed runs, all on one thread
    assert t.values == (0.5, 0.5, 0.5)
    assert torch.get_num_threads() == before


def test_one_thread_restores_the_count_after_an_error():
    before = torch.get_num_threads()
    with pytest.raises(RuntimeError):
        with one_thread():
            raise RuntimeError("boom")
    assert torch.get_num_threads() == before


def test_compare_pairs_and_alternates_the_calls(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(walltime.time, "perf_counter", clock)
    log = []
    slow_times = iter([9, 3.0, 6.0, 3.0, 30.0])      # warm-up, then 4 timed runs; one burst of load
    fast_times = iter([9, 1.0, 2.0, 1.0, 10.0])      # the burst hits the pair alike
    slow, fast, ratio = compare(clock.work(lambda: next(slow_times), log, "slow"),
                                clock.work(lambda: next(fast_times), log, "fast"), repeat=4, warmup=1)
    assert log == ["slow", "fast", "slow", "fast", "fast", "slow", "slow", "fast", "fast", "slow"]
    assert slow.values == (3.0, 6.0, 3.0, 30.0) and fast.values == (1.0, 2.0, 1.0, 10.0)
    assert ratio.values == (3.0, 3.0, 3.0, 3.0)      # per pair: the burst cancels
    assert ratio.median == 3.0 and ratio.spread == 0.0
    assert slow.median / fast.median == pytest.approx(3.0)


def test_bad_repeat_is_refused():
    with pytest.raises(ValueError, match="repeat"):
        wall_time(lambda: None, repeat=0)
    with pytest.raises(ValueError, match="warmup"):
        compare(lambda: None, lambda: None, warmup=-1)
