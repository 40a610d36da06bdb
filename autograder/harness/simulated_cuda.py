"""A stand-in CUDA device for machines without a usable GPU, so that the CUDA tests count everywhere.

The CUDA tests check device handling: a student's function called on CUDA tensors must create
nothing on the CPU, return its outputs on the inputs' device and still compute the right values.
Where the sandboxed student process has no usable GPU, a call that asks for device "cuda" runs
inside `simulated_cuda()`: tensors "on cuda" are `SimulatedCuda` tensors, which report device
`cuda:0` but keep their data in CPU memory and compute with the CPU kernels. They follow CUDA's
device rules, so the mistakes a real GPU catches are caught here too:

- an operation mixing a "cuda" tensor with a CPU tensor (other than a 0-dim one, as CUDA allows,
  and an index or a copy source, which CUDA moves) raises CUDA's "Expected all tensors to be on
  the same device" error: e.g. `torch.arange(T)` or `device="cpu"` inside the function;
- an output moved to the CPU (`.cpu()`, `.to("cpu")`) reports device `cpu`;
- `.numpy()` on a "cuda" tensor raises as on a GPU;
- a random draw on "cuda" with a CPU generator (or the reverse) raises as on a GPU;
- `.cuda()`, `.to("cuda")`, `.to(x.device)`, factories with `device=x.device` and
  `torch.Generator(device=x.device)` work.

`torch.cuda.is_available()` stays False (it is queried by code that runs before the call), so a
notebook that picks its device at import time (`DEVICE = "cuda" if torch.cuda.is_available() ...`)
behaves as on any machine without a GPU. Values come from the CPU kernels: random draws follow the
CPU generator, not CUDA's.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode, return_and_correct_aliasing
from torch.utils._pytree import tree_flatten, tree_map

CUDA = torch.device("cuda", 0)
# What torch's C++ side sees: a device type with no-op device guards and autograd support on every
# build (a "cuda" one would make autograd abort on a build without CUDA). Python sees `CUDA`.
CARRIER = torch.device("meta")
aten = torch.ops.aten
# Operations where CUDA accepts CPU tensors beside CUDA ones: indices (moved to the device) and copies.
MIXING_ALLOWED = {aten.index.Tensor, aten.index_put.default, aten.index_put_.default,
                  aten._index_put_impl_.default, aten.copy_.default, aten._to_copy.default}


class SimulatedCuda(torch.Tensor):
    """A tensor that says it is on `cuda:0` and keeps its data in a CPU tensor (`.data_cpu`)."""

    data_cpu: torch.Tensor

    @staticmethod
    def __new__(cls, data: torch.Tensor) -> "SimulatedCuda":
        return torch.Tensor._make_wrapper_subclass(
            cls, data.size(), strides=data.stride(), storage_offset=data.storage_offset(), dtype=data.dtype,
            layout=data.layout, device=CARRIER, requires_grad=data.requires_grad)

    def __init__(self, data: torch.Tensor) -> None:
        self.data_cpu = data

    @property
    def device(self) -> torch.device:
        return CUDA

    @property
    def is_cuda(self) -> bool:
        return True

    @property
    def is_meta(self) -> bool:
        return False

    def get_device(self) -> int:
        return 0

    def __repr__(self, *, tensor_contents: Any = None) -> str:
        text = repr(self.data_cpu)
        return text[:-1] + ", device='cuda:0')" if text.endswith(")") else text

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return run_simulated(func, args, kwargs or {})


def run_simulated(func, args: tuple, kwargs: dict):
    """Run one aten operation with CUDA's device rules, on the CPU data."""
    device = kwargs.get("device")
    simulated = is_simulated(device) or any(isinstance(x, SimulatedCuda) for x in tree_flatten((args, kwargs))[0])
    if not simulated:
        return func(*args, **kwargs)
    if func not in MIXING_ALLOWED:
        check_same_device(args, kwargs)
    on_cpu = dict(kwargs, device=torch.device("cpu")) if device is not None else kwargs
    out = func(*tree_map(unwrap, args), **tree_map(unwrap, on_cpu))
    if device is not None and torch.device(device).type == "cpu":  # .cpu(), .to("cpu"): a CPU tensor
        return out
    out = tree_map(lambda x: SimulatedCuda(x) if isinstance(x, torch.Tensor) else x, out)
    return return_and_correct_aliasing(func, args, kwargs, out) if device is None else out


class SimulatedDispatch(TorchDispatchMode):
    """What C++ code creates on "cuda" (e.g. `at::empty(..., self.options())`) goes to the simulated device."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False  # else torch wraps __torch_dispatch__ in dynamo's `disable`: seconds of import

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return run_simulated(func, args, kwargs or {})


def unwrap(x: Any) -> Any:
    return x.data_cpu if isinstance(x, SimulatedCuda) else x


def check_same_device(args: tuple, kwargs: dict) -> None:
    """CUDA's rule: every tensor of an operation on one device, CPU 0-dim tensors excepted."""
    for x in tree_flatten((args, kwargs))[0]:
        if isinstance(x, torch.Tensor) and not isinstance(x, SimulatedCuda) and x.dim() > 0:
            raise RuntimeError("Expected all tensors to be on the same device, but found at least two "
                               f"devices, cuda:0 and {x.device}!")


class ToSimulated(torch.autograd.Function):
    """A CPU tensor moved to the simulated device (differentiable, as `.to("cuda")` is)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        return SimulatedCuda(x.detach())

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return unwrap(grad)


def is_cuda(device: Any) -> bool:
    """Whether an argument names a CUDA device ("cuda", "cuda:0", torch.device("cuda"), 0 is not)."""
    if not isinstance(device, (str, torch.device)):
        return False
    try:
        return torch.device(device).type == "cuda"
    except RuntimeError:
        return False


def is_simulated(device: Any) -> bool:
    """Whether an aten operation's device is the simulated one (CUDA, or the carrier C++ code uses)."""
    return is_cuda(device) or (device is not None and torch.device(device) == CARRIER)


def to_simulated(x: torch.Tensor) -> torch.Tensor:
    return x if isinstance(x, SimulatedCuda) else ToSimulated.apply(x)


RealGenerator = torch.Generator


class AnyGenerator(type(RealGenerator)):
    """`isinstance(g, torch.Generator)` stays true of every generator while `torch.Generator` is ours."""

    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, RealGenerator)


class SimulatedGenerator(RealGenerator, metaclass=AnyGenerator):
    """`torch.Generator(device)` within `simulated_cuda()`: a CPU generator; one made for "cuda" says so."""

    def __new__(cls, device: Any = "cpu") -> "SimulatedGenerator":
        gen = super().__new__(cls, "cpu" if is_cuda(device) else device)
        gen.simulated = is_cuda(device)
        return gen

    @property
    def device(self) -> torch.device:
        return CUDA if self.simulated else super().device


def check_generator(args: tuple, kwargs: dict) -> None:
    """CUDA's rule: a random operation's generator is on the operation's device."""
    gen = kwargs.get("generator")
    if gen is None:
        return
    on_cuda = is_cuda(kwargs.get("device")) or any(isinstance(x, SimulatedCuda) for x in tree_flatten(args)[0])
    gen_cuda = getattr(gen, "simulated", False)
    if on_cuda != gen_cuda:
        want, got = ("cuda", "cpu") if on_cuda else ("cpu", "cuda")
        raise RuntimeError(f"Expected a '{want}' device type for generator but found '{got}'")


class SimulatedCudaMode(TorchFunctionMode):
    """Routes what would start CUDA to the simulated device: `.cuda()`, `.to(cuda)`, `device=cuda`."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        name = getattr(func, "__name__", "")
        check_generator(args, kwargs)
        if name == "numpy" and args and isinstance(args[0], SimulatedCuda):
            raise TypeError("can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the "
                            "tensor to host memory first.")
        if name in ("tolist", "new_tensor") and args and isinstance(args[0], SimulatedCuda):
            out = getattr(args[0].data_cpu, name)(*args[1:], **kwargs)  # the C++ side would see "meta"
            return to_simulated(out) if name == "new_tensor" and kwargs.get("device") is None else out
        if name == "cuda" and args and isinstance(args[0], torch.Tensor):
            return to_simulated(args[0])
        if name == "to" and args and isinstance(args[0], torch.Tensor):
            return self._to(func, args, kwargs)
        if is_cuda(kwargs.get("device")):
            kwargs["device"] = torch.device("cpu")
            return tree_map(lambda x: SimulatedCuda(x) if isinstance(x, torch.Tensor) else x, func(*args, **kwargs))
        return func(*args, **kwargs)

    @staticmethod
    def _to(func, args: tuple, kwargs: dict):
        """Tensor.to(...): the move to "cuda" simulated, the rest (dtype, copy) done by torch."""
        tensor, rest = args[0], list(args[1:])
        moves = any(is_cuda(a) for a in rest) or is_cuda(kwargs.get("device")) \
            or any(isinstance(a, SimulatedCuda) for a in rest)  # .to(other_tensor)
        if not moves:
            return func(*args, **kwargs)
        here = None if isinstance(tensor, SimulatedCuda) else torch.device("cpu")  # the move is ours
        rest = [a.dtype if isinstance(a, SimulatedCuda) else here if is_cuda(a) else a for a in rest]
        if "device" in kwargs:
            kwargs["device"] = here
        return to_simulated(func(tensor, *rest, **kwargs))


@contextlib.contextmanager
def simulated_cuda() -> Iterator[None]:
    """Within: "cuda" means the simulated device (use only where real CUDA is not usable)."""
    torch.Generator = SimulatedGenerator
    try:
        with SimulatedCudaMode(), SimulatedDispatch():
            yield
    finally:
        torch.Generator = RealGenerator
