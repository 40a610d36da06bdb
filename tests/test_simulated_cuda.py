"""The simulated CUDA device: on a machine without a GPU, the CUDA tests catch what a GPU catches
(a tensor made on the CPU inside the function, an output moved to the CPU, numpy on a GPU tensor)
and pass correct device-generic code with the reference's values."""
from __future__ import annotations

import pytest
import torch

from autograder.harness.simulated_cuda import SimulatedCuda, simulated_cuda
from autograder.harness.worker import answer

SAME_DEVICE = "Expected all tensors to be on the same device"


def scores(q, k):
    """Device-generic: the mask follows q."""
    mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
    return (q @ k.transpose(-1, -2) / torch.tensor(q.shape[-1], dtype=q.dtype) ** 0.5).masked_fill(~mask, 0.0)


def scores_cpu_mask(q, k):
    mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()  # the classic mistake
    return (q @ k.transpose(-1, -2)).masked_fill(~mask, 0.0)


def scores_hard_cpu(q, k):
    return q @ k.transpose(-1, -2) + torch.zeros(q.shape[-2], k.shape[-2], device="cpu")


def inputs():
    g = torch.Generator().manual_seed(0)
    return torch.randn(2, 4, 3, generator=g), torch.randn(2, 4, 3, generator=g)


def test_device_generic_code_runs_and_matches_the_cpu_values():
    q, k = inputs()
    with simulated_cuda():
        out = scores(q.to("cuda"), k.cuda())
        assert isinstance(out, SimulatedCuda) and str(out.device) == "cuda:0" and out.is_cuda
        back = out.cpu()
    assert type(back) is torch.Tensor and back.device.type == "cpu"
    assert torch.equal(back, scores(q, k))


@pytest.mark.parametrize("wrong", [scores_cpu_mask, scores_hard_cpu])
def test_a_cpu_tensor_inside_the_function_fails_as_on_a_gpu(wrong):
    q, k = inputs()
    assert wrong(q, k).shape == (2, 4, 4)  # fine on the CPU
    with simulated_cuda(), pytest.raises(RuntimeError, match=SAME_DEVICE):
        wrong(q.to("cuda"), k.to("cuda"))


def test_output_moved_to_the_cpu_and_numpy_are_seen():
    q, _ = inputs()
    with simulated_cuda():
        x = q.to("cuda")
        assert x.sum(-1).cpu().device.type == "cpu" and x.to("cpu").device.type == "cpu"
        with pytest.raises(TypeError, match="cuda:0 device type tensor to numpy"):
            x.numpy()
        assert x.tolist() == q.tolist() and x.sum().item() == pytest.approx(q.sum().item())


def test_cpu_scalars_and_indices_are_allowed_as_cuda_allows_them():
    q, _ = inputs()
    with simulated_cuda():
        x = q.to("cuda")
        assert torch.equal((x * torch.tensor(2.0)).cpu(), q * 2)
        assert torch.equal(x[torch.tensor([1, 0])].cpu(), q[torch.tensor([1, 0])])
        assert torch.equal(torch.where(x > 0, x, 0.0).cpu(), torch.where(q > 0, q, 0.0))


def test_modules_dtype_moves_and_autograd_work():
    torch.manual_seed(0)
    lin = torch.nn.Linear(3, 5)
    q, _ = inputs()
    want = lin(q)
    want.sum().backward()
    want_grad = lin.weight.grad.clone()
    lin.zero_grad()
    with simulated_cuda():
        lin.to("cuda")
        assert str(lin.weight.device) == "cuda:0" and isinstance(lin.weight, torch.nn.Parameter)
        out = lin(q.to("cuda"))
        out.sum().backward()
        assert str(lin.weight.grad.device) == "cuda:0"
        assert torch.allclose(out.cpu(), want.detach()) and torch.allclose(lin.weight.grad.cpu(), want_grad)
        assert q.to("cuda").to(torch.float64).dtype == torch.float64
        assert str(torch.ones(2).to(q.to("cuda")).device) == "cuda:0"


def test_the_worker_runs_cuda_requests_on_the_simulated_device_without_a_gpu():
    ns: dict = {}
    exec("import torch\n"
         "def f(x):\n    return x + torch.arange(x.shape[-1], device=x.device)\n"
         "def g(x):\n    return x + torch.arange(x.shape[-1])\n", ns)
    x = torch.ones(2, 3)
    good = answer(ns, {"op": "call", "name": "f", "args": (x,), "kwargs": {}, "device": "cuda"})
    assert good["ok"] and good["devices"] == ["cuda:0"] and torch.equal(good["value"], x + torch.arange(3))
    bad = answer(ns, {"op": "call", "name": "g", "args": (x,), "kwargs": {}, "device": "cuda"})
    assert not bad["ok"] and SAME_DEVICE in bad["message"]
    plain = answer(ns, {"op": "call", "name": "g", "args": (x,), "kwargs": {}})
    assert plain["ok"] and plain["devices"] == ["cpu"]


def test_generators_follow_the_device_of_the_draw():
    probs = torch.tensor([[0.2, 0.3, 0.5]])
    with simulated_cuda():
        p = probs.to("cuda")
        g = torch.Generator(p.device).manual_seed(0)
        assert str(g.device) == "cuda:0" and isinstance(g, torch.Generator)
        draw = torch.multinomial(p, 4, replacement=True, generator=g)
        assert str(draw.device) == "cuda:0"
        with pytest.raises(RuntimeError, match="device type for generator"):
            torch.multinomial(p, 1, generator=torch.Generator().manual_seed(0))
    assert torch.Generator is type(torch.default_generator)
    want = torch.multinomial(probs, 4, replacement=True, generator=torch.Generator().manual_seed(0))
    assert torch.equal(draw.cpu(), want)


def test_a_device_argument_naming_cuda_is_simulated_too():
    ns: dict = {}
    exec("import torch\ndef mask(n, device=None):\n    return torch.ones(n, n, dtype=torch.bool, device=device)\n", ns)
    reply = answer(ns, {"op": "call", "name": "mask", "args": (3,), "kwargs": {"device": "cuda"}})
    assert reply["ok"] and reply["devices"] == ["cuda:0"] and bool(reply["value"].all())
