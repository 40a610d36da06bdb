"""The graders' reference values, cached per grading process (`autograder/harness/memo.py`): does a
cached value equal a fresh one, and can a test that changes what it got change another test?"""
from __future__ import annotations

import random

import pytest
import torch

from autograder.grade import grade_submission
from autograder.harness import check, memo, offset
from autograder.harness.memo import fresh_copy, reference_cache
from autograder.harness.sandbox import Limits, Sandbox
from autograder.paths import graders_dir, solutions_dir


@pytest.fixture(autouse=True)
def empty_cache(monkeypatch):
    monkeypatch.delenv("AUTOGRADER_REFERENCE_CACHE", raising=False)
    memo.clear()
    yield
    memo.clear()


class Tied(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(5, 3)
        self.out = torch.nn.Linear(3, 5)
        self.out.weight = self.embed.weight  # tied, as GPT ties its head
        self.register_buffer("pe", torch.arange(3.0))
        self.scale = 2.0
        self.extra = [torch.ones(2)]
        self.act = self.double  # a bound method of the module itself

    def double(self, x):
        return 2 * x


def test_a_copied_module_equals_the_original_and_shares_nothing_with_it():
    torch.manual_seed(0)
    m = Tied().eval()
    c = fresh_copy(m)
    assert type(c) is Tied and not c.training and c.scale == 2.0
    assert memo.equal(c, m)
    assert c.out.weight is c.embed.weight, "tied weights must stay tied in the copy"
    assert c.act.__self__ is c, "a bound method of the module must be bound to the copy"
    assert isinstance(c.out.weight, torch.nn.Parameter) and c.out.weight.requires_grad
    with torch.no_grad():
        c.embed.weight.add_(1.0)
        c.pe.add_(1.0)
        c.extra[0].add_(1.0)
    c.register_forward_hook(lambda *a: None)
    c.train()
    assert torch.equal(m.pe, torch.arange(3.0)) and torch.equal(m.extra[0], torch.ones(2))
    assert not torch.equal(m.embed.weight, c.embed.weight)
    assert not m._forward_hooks and not m.training


def test_a_hit_returns_an_equal_value_that_the_caller_may_change():
    calls = []

    @reference_cache
    def build(seed: int, x: torch.Tensor):
        calls.append(seed)
        g = torch.Generator().manual_seed(seed)
        return {"w": torch.randn(3, generator=g) + x, "n": seed}

    first = build(1, torch.ones(3))
    assert calls == [1, 1], "a miss runs the helper twice, to learn whether its value can be cached"
    first["w"].add_(100.0)  # the caller changes its copy
    second = build(1, torch.ones(3))
    assert calls == [1, 1], "the second call should be a hit"
    assert torch.equal(second["w"], torch.randn(3, generator=torch.Generator().manual_seed(1)) + 1)
    build(1, torch.zeros(3))
    assert calls == [1, 1, 1, 1], "another tensor value is another key"


def test_a_helper_that_seeds_the_global_generator_leaves_it_where_a_fresh_call_would():
    @reference_cache
    def seeded_module(seed: int):
        torch.manual_seed(seed)
        return torch.nn.Linear(2, 2)

    seeded_module(3)
    fresh_next = torch.rand(4)
    torch.manual_seed(99)
    seeded_module(3)  # a hit
    assert torch.equal(torch.rand(4), fresh_next)


def test_a_helper_that_does_not_touch_the_generator_leaves_the_callers_state_alone():
    @reference_cache
    def pure(n: int):
        return torch.arange(n)

    pure(3)
    torch.manual_seed(5)
    random.seed(5)
    before = torch.get_rng_state(), random.getstate()
    pure(3)  # a hit
    assert memo.STATS["hits"] == 1
    assert torch.equal(torch.get_rng_state(), before[0]) and random.getstate() == before[1]


def test_what_cannot_be_keyed_runs_uncached_and_the_seed_offset_is_part_of_the_key(monkeypatch):
    calls = []

    @reference_cache
    def f(x):
        calls.append(1)
        return 1

    f(torch.nn.Linear(1, 1))
    f(torch.nn.Linear(1, 1))
    assert len(calls) == 2 and memo.STATS["uncached"] == 2
    f(1)
    f(1)
    assert len(calls) == 4 and memo.STATS["hits"] == 1
    monkeypatch.setattr(offset, "SEED_OFFSET", 1000)
    f(1)
    assert len(calls) == 6, "a public check's shifted seeds must not reuse the graders' values"


def test_a_helper_that_is_not_a_function_of_its_arguments_is_never_cached(monkeypatch):
    state = {"n": 0}

    @reference_cache
    def counter(k: int):
        state["n"] += 1
        return state["n"]

    @reference_cache
    def unseeded(n: int):
        return torch.rand(n)

    @reference_cache
    def changes_its_input(x: torch.Tensor):
        x.add_(1)
        return x.sum()

    assert [counter(1), counter(1)] == [1, 3]
    a, b = unseeded(2), unseeded(2)
    assert not torch.equal(a, b)
    x = torch.zeros(2)
    changes_its_input(x)
    changes_its_input(x)
    assert torch.equal(x, torch.full((2,), 2.0)), "run once per call, as without the cache"
    assert memo.STATS["hits"] == 0 and memo.STATS["uncached"] == 2


def test_off_computes_every_time_and_verify_finds_hidden_state_that_changed(monkeypatch):
    setting = {"scale": 1.0}

    @reference_cache
    def scaled(k: int):
        return k * setting["scale"]

    monkeypatch.setenv("AUTOGRADER_REFERENCE_CACHE", "off")
    assert scaled(2) == 2.0 and memo.STATS["misses"] == 0
    monkeypatch.setenv("AUTOGRADER_REFERENCE_CACHE", "verify")
    scaled(2)
    setting["scale"] = 3.0  # what a cached helper must never read
    assert scaled(2) == 2.0
    assert memo.MISMATCHES and "scaled" in memo.MISMATCHES[0]


CACHED = sorted(p.stem.removeprefix("test_") for p in graders_dir().glob("test_*.py")
                if "@reference_cache" in p.read_text())


def test_some_chapters_cache_reference_values():
    assert CACHED, "no grader file uses @reference_cache"


@pytest.mark.parametrize("chapter", CACHED)
def test_cached_reference_values_equal_fresh_ones_in_a_real_grading(chapter, monkeypatch):
    """Grade the solution twice in one process, as a batch worker does: the second grading reads the
    cache, and verify mode recomputes every hit from other generator states and compares."""
    monkeypatch.setenv("AUTOGRADER_REFERENCE_CACHE", "verify")
    with Sandbox(Limits(call_seconds=20)) as sandbox:
        results = [grade_submission(solutions_dir() / f"{chapter}.py", sandbox) for _ in range(2)]
    assert memo.STATS["hits"] > 0
    assert not memo.MISMATCHES, memo.MISMATCHES
    for result in results:
        assert result["score"] == result["max_score"] > 0, [t["output"] for t in result["tests"] if t["score"] == 0]


def test_lazy_mistakes_are_built_only_for_a_wrong_answer_and_still_named():
    built = []

    def mistakes():
        built.append(1)
        return {"softmax over the wrong axis": torch.zeros(2)}

    check.expect_close(torch.ones(2), torch.ones(2), "the weights", mistakes=mistakes)
    assert not built
    with pytest.raises(check.GradingFailure, match="known mistake: softmax over the wrong axis"):
        check.expect_close(torch.zeros(2), torch.ones(2), "the weights", mistakes=mistakes)
    assert built == [1]
