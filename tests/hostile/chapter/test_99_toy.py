"""Hidden graders of the toy chapter used by tests/test_sandbox_hostile.py and tests/test_malformed.py.

The comparisons use torch.allclose, numpy.allclose and pytest.approx on
purpose: a submission that monkeypatches them in its own process must not
change the grade. SECRET_MARKER must never appear in any feedback.
"""
import numpy as np
import pytest
import torch

from autograder.harness.check import expect, expect_close, graded, needs_cuda, seeded

SECRET_MARKER = "hidden-grader-source-7d1f"  # never shown to students


@graded("causal_mask", points=2, hint="Keep j <= i: a lower-triangular mask.")
def test_causal_mask(student, ref):
    """causal_mask: is it lower-triangular?"""
    got = student.causal_mask(4)
    want = ref.causal_mask(4)
    expect_close(got, want, "the mask")
    assert torch.equal(got, want), SECRET_MARKER


@graded("scaled_scores", points=2, hint="Divide by the square root of the last dimension.")
def test_scaled_scores(student, ref):
    """scaled_scores: does it match the reference?"""
    g = seeded(1)
    q, k = torch.randn(2, 3, 4, generator=g), torch.randn(2, 5, 4, generator=g)
    got = student.scaled_scores(q, k)
    want = ref.scaled_scores(q, k)
    assert isinstance(got, torch.Tensor) and got.shape == want.shape, SECRET_MARKER
    assert torch.allclose(got, want, atol=1e-5), SECRET_MARKER
    assert np.allclose(got.numpy(), want.numpy(), atol=1e-5), SECRET_MARKER
    assert got.sum().item() == pytest.approx(want.sum().item(), abs=1e-4), SECRET_MARKER


@graded("noisy_sum", points=1, hint="Add one torch.randn(()) to the sum.")
def test_noisy_sum(student, ref):
    """noisy_sum: same noise as the reference under the harness's seed?"""
    x = torch.arange(4.0)
    torch.manual_seed(0)
    want = ref.noisy_sum(x)
    got = student.noisy_sum(x)
    expect(isinstance(got, torch.Tensor), "noisy_sum should return a tensor")
    assert abs(got.item() - want.item()) < 1e-6, SECRET_MARKER


@needs_cuda
@graded("scaled_scores", points=1, hint="Create every tensor on the inputs' device.")
def test_scaled_scores_cuda(student, ref):
    """scaled_scores: does it run on the GPU? (counts only where the sandbox can use CUDA)"""
    g = seeded(2)
    q, k = torch.randn(2, 3, 4, generator=g), torch.randn(2, 5, 4, generator=g)
    call = student.call("scaled_scores", args=(q, k), device="cuda")
    expect(all(d.startswith("cuda") for d in call.devices), "the scores should stay on the GPU")
    expect_close(call.value, ref.scaled_scores(q, k), "the scores", atol=1e-4)
