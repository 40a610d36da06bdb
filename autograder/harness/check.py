"""The API that hidden graders are written in.

A grader is a pytest test decorated with `@graded(function, points, hint)`.
It builds its inputs from a seed, calls the student's function through the
`student` fixture (a proxy to the sandboxed student process) and the
reference through `ref`, and compares with `expect_close`, which names a
known mistake when the student's answer matches one.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

import torch

from autograder.harness import offset
from autograder.harness.memo import reference_cache  # noqa: F401 - part of the graders' API


class GradingFailure(AssertionError):
    """A check failed; its message is shown to the student. `cause`, when the check knows it ('NaN',
    'Inf', 'known mistake: NAME'), leads the feedback instead of the test's hint (`diagnosis`)."""

    def __init__(self, message: str = "", cause: str = "") -> None:
        super().__init__(message)
        self.cause = cause


def graded(function: str, points: float = 1.0, hint: str = "") -> Callable:
    """Declare what a test grades, what it is worth and what to tell a student who fails it."""
    def mark(test: Callable) -> Callable:
        test.graded = {"function": function, "points": float(points), "hint": hint}
        return test
    return mark


def seeded(seed: int) -> torch.Generator:
    """A CPU generator for building a test's inputs."""
    return torch.Generator().manual_seed(seed + offset.SEED_OFFSET)  # moved by `seeds.shifted_seeds`


def first_seed(seed: int, shows: Callable[[int], bool], tries: int = 50) -> int:
    """The first of seed, seed + 1000, ... for which `shows(seed)` holds (the inputs it draws show what
    the test is about). Under per-student inputs a hand-picked seed is not the one drawn: a test whose
    point needs a property of its inputs draws until they have it. Without a shift, `seed` if it shows."""
    for candidate in range(seed, seed + 1000 * tries, 1000):
        if shows(candidate):
            return candidate
    raise RuntimeError(f"no seed from {seed} on draws inputs the test can use ({tries} tried)")


def _describe(x: Any) -> str:
    if isinstance(x, torch.Tensor):
        return f"a {x.dtype} tensor of shape {tuple(x.shape)}"
    return f"a {type(x).__name__}"


def _close(got: Any, want: Any, rtol: float, atol: float) -> bool:
    if isinstance(want, torch.Tensor):
        if not isinstance(got, torch.Tensor) or got.shape != want.shape:
            return False
        try:
            return bool(torch.allclose(got.to(torch.float64), want.to(torch.float64),
                                       rtol=rtol, atol=atol, equal_nan=False))
        except RuntimeError:
            return False
    if isinstance(want, (tuple, list)):
        return (isinstance(got, (tuple, list)) and len(got) == len(want)
                and all(_close(a, b, rtol, atol) for a, b in zip(got, want)))
    if isinstance(want, dict):
        return (isinstance(got, dict) and got.keys() == want.keys()
                and all(_close(got[k], want[k], rtol, atol) for k in want))
    if isinstance(want, float):
        return isinstance(got, (int, float)) and abs(got - want) <= atol + rtol * abs(want)
    try:
        return bool(got == want)
    except (RuntimeError, TypeError, ValueError):  # e.g. a tensor where a number was expected
        return False


def expect_close(got: Any, want: Any, what: str = "your output", *, rtol: float = 1e-4,
                 atol: float = 1e-5, dtype: bool = True,
                 mistakes: Mapping[str, Any] | Callable[[], Mapping[str, Any]] | None = None) -> None:
    """Fail unless `got` matches `want` in type, shape, dtype and value.

    `mistakes` maps a known mistake's description to the output that mistake
    produces on the same input; if `got` matches one, the failure names it.
    It may be a function returning that mapping (`mistakes=lambda: {...}`): it
    is then called only when `got` does not match, so a correct submission
    does not pay for outputs that cost a forward pass each.
    """
    if isinstance(want, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            raise GradingFailure(f"{what} should be {_describe(want)}, got {_describe(got)}")
        if tuple(got.shape) != tuple(want.shape):
            raise GradingFailure(f"{what} should have shape {tuple(want.shape)}, got {tuple(got.shape)}")
        if dtype and got.dtype != want.dtype:
            raise GradingFailure(f"{what} should have dtype {want.dtype}, got {got.dtype}")
        if got.is_floating_point() and bool(torch.isnan(got).any()) and not bool(torch.isnan(want).any()):
            raise GradingFailure(f"{what} contains NaN", cause="NaN")
        if got.is_floating_point() and bool(torch.isinf(got).any()) and not bool(torch.isinf(want).any()):
            raise GradingFailure(f"{what} contains Inf", cause="Inf")
    elif isinstance(got, float) and isinstance(want, float) and got != got and want == want:
        raise GradingFailure(f"{what} is NaN", cause="NaN")
    if _close(got, want, rtol, atol):
        return
    if callable(mistakes):
        mistakes = mistakes()
    for name, value in (mistakes or {}).items():
        if _close(got, value, rtol, atol):
            raise GradingFailure(f"{what} looks like the result of a known mistake: {name}",
                                 cause=f"known mistake: {name}")
    if isinstance(want, torch.Tensor) and isinstance(got, torch.Tensor):
        err = (got.double() - want.double()).abs().max().item()
        raise GradingFailure(f"{what} does not match the reference (largest difference {err:.3g})")
    raise GradingFailure(f"{what} does not match the reference")


def expect(condition: bool, message: str) -> None:
    """Fail with `message` unless `condition` holds."""
    if not condition:
        raise GradingFailure(message)


def expect_raises(call: Callable[[], Any], error: str, what: str) -> None:
    """Fail unless `call()` (a call of the student's code) raises the exception class named `error`
    (`"ValueError"`); another error of the student's fails the test with its own message."""
    try:
        call()
    except GradingFailure as exc:
        if f" raised {error}:" in str(exc).split("\n")[0]:
            return
        raise
    raise GradingFailure(f"{what} should raise {error}; it returned without an error")


def expect_unmodified(before: Any, after: Any, function: str) -> None:
    """Fail if the student's function changed its inputs in place."""
    if isinstance(before, torch.Tensor):
        expect(isinstance(after, torch.Tensor) and torch.equal(before, after),
               f"{function} modified one of its input tensors in place")
    elif isinstance(before, (tuple, list)):
        for b, a in zip(before, after):
            expect_unmodified(b, a, function)


def needs_cuda(test: Callable) -> Callable:
    """Mark a test that calls the student's code on "cuda". It runs and counts on every machine: on
    the real GPU where the sandboxed student process can use one, on the simulated CUDA device
    (`simulated_cuda`) elsewhere, so an assignment has one maximum everywhere."""
    test.needs_cuda = True
    return test


def counts(test: Callable) -> bool:
    """Whether a test is graded (and so counts towards max_score): every `@graded` test, on every machine."""
    return hasattr(test, "graded")


def is_cuda_oom(exc: BaseException) -> bool:
    """Whether a failure is CUDA running out of memory (perhaps because another submission held it)."""
    text = str(exc)
    return "out of memory" in text and ("CUDA" in text or "cuda" in text)
