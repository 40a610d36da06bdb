"""Hidden graders of the toy chapter 98_batch_toy (copied as test_98_batch_toy.py by tests/batch/toy.py)."""
import torch

from autograder.harness.check import expect_close, graded, seeded


@graded("add", points=2, hint="Use +.")
def test_add_matches(student, ref):
    """add: does it match the reference?"""
    g = seeded(0)
    a, b = torch.randn(3, 4, generator=g), torch.randn(3, 4, generator=g)
    expect_close(student.add(a, b), ref.add(a, b), "the sum", mistakes={"a - b": a - b})


@graded("add", points=1, hint="Broadcasting works with +.")
def test_add_broadcasts(student, ref):
    """add: does it broadcast?"""
    a, b = torch.ones(3, 1), torch.arange(4.0)
    expect_close(student.add(a, b), ref.add(a, b), "the sum")


@graded("scale", points=1, hint="Multiply.")
def test_scale(student, ref):
    """scale: does it match the reference?"""
    x = torch.randn(5, generator=seeded(1))
    expect_close(student.scale(x, 3.0), ref.scale(x, 3.0), "the scaled tensor")
