"""Reference values computed once per grading process: the `@reference_cache` decorator.

Every submission of a chapter is graded on the same inputs, so the graders'
reference helpers (a seeded reference module, a brute-force attention, ...)
compute the same values for every submission. A batch worker grades many
submissions in one process; there the second call of a helper with the same
arguments returns a copy of the first call's value instead of computing it again.

A cached helper must be a function of its arguments (and of the global generators'
state, if it seeds them itself). The cache checks what it can:

- the key holds the arguments by value (a tensor by dtype, shape and bytes; the
  reference namespace by identity; `offset.SEED_OFFSET`); an argument it cannot key
  (a module, a callable) makes the call run uncached;
- a miss runs the helper twice, the second time from other states of torch's CPU
  generator and of `random`. A helper whose two values differ (it draws from a generator
  it did not seed, or reads something else that changed) or that changed its inputs in
  place is never cached. One that seeds a generator has its final state recorded, and a
  hit leaves that generator where the helper would; a generator it does not use is left
  alone. (GPU generators are not tracked: cached helpers build on the CPU.)
- a hit returns a copy (`fresh_copy`), so a test that changes what it got changes no
  other test;
- with per-student inputs (a course secret: `seeds.PerStudentInputs`) every test's seeds are its own,
  so no other submission could reuse a value: the cache steps aside there (`bypassed`), and a
  miss's second run is not paid for nothing;
- `AUTOGRADER_REFERENCE_CACHE=verify` also recomputes every hit and records any
  difference in `MISMATCHES` (tests/test_reference_cache.py grades each chapter so);
  `=off` turns the cache off (benchmarks compare the two).
"""
from __future__ import annotations

import collections
import contextlib
import copy
import functools
import hashlib
import os
import random
import types
from typing import Any, Callable, Iterator

import torch

from autograder.harness import offset

MAX_ENTRIES = 4096  # per process; past this, calls run uncached
_CACHE: dict = {}
_ALIVE: list = []  # objects keyed by identity stay alive, so their id is never reused
STATS = {"hits": 0, "misses": 0, "uncached": 0}
MISMATCHES: list[str] = []
_BYPASSED = [0]  # > 0: inside `bypassed()`


@contextlib.contextmanager
def bypassed() -> Iterator[None]:
    """Cached helpers run uncached while this is active."""
    _BYPASSED[0] += 1
    try:
        yield
    finally:
        _BYPASSED[0] -= 1


class Unkeyable(TypeError):
    """An argument the cache cannot key by value."""


def mode() -> str:
    """'on' (the default), 'off' or 'verify', from AUTOGRADER_REFERENCE_CACHE."""
    value = os.environ.get("AUTOGRADER_REFERENCE_CACHE", "on").strip().lower()
    return value if value in ("on", "off", "verify") else "on"


def key_of(obj: Any) -> Any:
    """A hashable key that is equal for equal arguments; Unkeyable for what it cannot compare."""
    if obj is None or isinstance(obj, (bool, int, float, str, bytes)):
        return (type(obj).__name__, obj)
    if isinstance(obj, (torch.dtype, torch.device)):
        return ("torch", str(obj))
    if isinstance(obj, torch.Tensor):
        t = obj.detach().to("cpu").contiguous()
        raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        return ("tensor", str(t.dtype), tuple(t.shape), obj.requires_grad, hashlib.blake2b(raw).hexdigest())
    if isinstance(obj, (tuple, list)):
        return (type(obj).__name__, tuple(key_of(x) for x in obj))
    if isinstance(obj, dict):
        return ("dict", tuple(sorted((repr(k), key_of(v)) for k, v in obj.items())))
    if isinstance(obj, types.SimpleNamespace):  # the reference's names: one object per chapter and process
        if not any(alive is obj for alive in _ALIVE):
            _ALIVE.append(obj)
        return ("namespace", id(obj))
    raise Unkeyable(type(obj).__qualname__)


# The global generators a helper may move: torch's CPU generator and Python's `random`.
GENERATORS = ((torch.get_rng_state, torch.set_rng_state, torch.equal),
              (random.getstate, random.setstate, lambda a, b: a == b))


def rng_state() -> list:
    return [get() for get, _, _ in GENERATORS]


def moved(before: list, after: list) -> list:
    """Per generator: its state in `after` if it differs from `before`, else None (it was not used)."""
    return [None if same(a, b) else b for (_, _, same), a, b in zip(GENERATORS, before, after)]


def set_rng_state(states: list) -> None:
    """Set each generator whose state is given (None: leave it)."""
    for (_, put, _), state in zip(GENERATORS, states):
        if state is not None:
            put(state)


def equal(a: Any, b: Any) -> bool:
    """Whether two cached values are the same, exactly (tensors bit for bit, modules by state)."""
    if isinstance(a, torch.Tensor):
        if not (isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape):
            return False
        if a.is_floating_point() or a.is_complex():  # NaN == NaN here: same bits, same value
            return torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(0.0), b.nan_to_num(0.0))
        return torch.equal(a, b)
    if isinstance(a, torch.nn.Module):
        return (type(a) is type(b) and a.training == b.training
                and equal(dict(a.state_dict()), dict(b.state_dict())))
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return type(a) is type(b) and a.keys() == b.keys() and all(equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def reference_cache(fn: Callable) -> Callable:
    """Cache `fn`'s values in this process, keyed by its arguments (see the module's docstring)."""

    @functools.wraps(fn)
    def cached(*args, **kwargs):
        how = mode()
        if how == "off":
            return fn(*args, **kwargs)
        if _BYPASSED[0]:
            STATS["uncached"] += 1
            return fn(*args, **kwargs)
        try:  # the seed offset (public checks' inputs) is part of every key
            key = (fn.__module__, fn.__qualname__, offset.SEED_OFFSET, key_of(args), key_of(kwargs))
        except Unkeyable:
            STATS["uncached"] += 1
            return fn(*args, **kwargs)
        entry = _CACHE.get(key)
        if entry is None:
            STATS["misses"] += 1
            return _compute(fn, key, args, kwargs)
        if entry is UNCACHEABLE:
            STATS["uncached"] += 1
            return fn(*args, **kwargs)
        STATS["hits"] += 1
        value, after = entry
        if how == "verify":
            _verify(fn, args, kwargs, value, after)
        set_rng_state(after)
        return fresh_copy(value)

    return cached


def fresh_copy(obj: Any, memo: dict | None = None) -> Any:
    """A copy of a cached value that shares no tensor with it: like `copy.deepcopy`, but a module
    is rebuilt from a copy of its `__dict__` (parameters, buffers, submodules and tensors copied, hook
    tables renewed, other attributes shared), twice as fast as deepcopy for the reference's modules.
    Shared tensors and modules stay shared (tied weights)."""
    memo = {} if memo is None else memo
    if id(obj) in memo:
        return memo[id(obj)]
    kind = type(obj)
    if kind in _IMMUTABLE:
        return obj
    if kind is torch.nn.Parameter:
        new = torch.nn.Parameter(obj.detach().clone(), obj.requires_grad)
    elif kind is torch.Tensor and obj.is_leaf:
        new = obj.detach().clone().requires_grad_(obj.requires_grad)
    elif isinstance(obj, torch.nn.Module):
        return _copy_module(obj, memo)
    elif kind in (list, tuple):
        new = kind(fresh_copy(x, memo) for x in obj)
    elif kind is dict:
        new = {k: fresh_copy(v, memo) for k, v in obj.items()}
    else:
        new = copy.deepcopy(obj, memo)
    memo[id(obj)] = new
    return new


_IMMUTABLE = {type(None), bool, int, float, str, bytes, torch.dtype, torch.device}


_TABLES = ("_parameters", "_buffers", "_modules")


def _copy_module(obj: torch.nn.Module, memo: dict) -> torch.nn.Module:
    new = object.__new__(type(obj))
    memo[id(obj)] = new
    attrs = obj.__dict__.copy()
    for name, value in attrs.items():  # values are replaced in place: the dict keeps its size
        kind = type(value)
        if kind in _IMMUTABLE:
            continue
        if name in _TABLES:
            attrs[name] = {k: v if v is None else fresh_copy(v, memo) for k, v in value.items()}
        elif kind is collections.OrderedDict or kind is set:  # hook tables, non-persistent buffer names
            attrs[name] = kind(value)
        elif kind is dict or isinstance(value, (torch.Tensor, torch.nn.Module, list, tuple)):
            attrs[name] = fresh_copy(value, memo)
        elif kind is types.MethodType and id(value.__self__) in memo:  # e.g. self.act = self.gelu
            attrs[name] = types.MethodType(value.__func__, memo[id(value.__self__)])
    object.__setattr__(new, "__dict__", attrs)  # not nn.Module.__setattr__, which would look at it
    return new


UNCACHEABLE = object()  # a key whose helper turned out not to be a function of its arguments


def _compute(fn: Callable, key: tuple, args: tuple, kwargs: dict) -> Any:
    """A miss: compute, and learn from a second run (from other generator states) whether the value
    can be cached and what the helper does to the global generators. Once per key and process."""
    before = rng_state()
    value = fn(*args, **kwargs)
    after = rng_state()
    if len(_CACHE) >= MAX_ENTRIES:
        return value
    try:
        stored = fresh_copy(value)
        changed_args = (key_of(args), key_of(kwargs)) != key[-2:]
    except (RuntimeError, TypeError, Unkeyable):  # e.g. a non-leaf tensor: not copyable, not cached
        return value
    if changed_args:  # it changed its inputs in place: a hit would not; never run it twice either
        _CACHE[key] = UNCACHEABLE
        return value
    _perturb()
    start = rng_state()
    again = fn(*args, **kwargs)
    end = rng_state()
    set_rng_state(after)  # the generators as the real call left them
    first, second = moved(before, after), moved(start, end)
    sets = []
    for (_, _, same), a, b, f, s in zip(GENERATORS, after, end, first, second):
        if f is None and s is None:
            sets.append(None)  # the helper does not use this generator
        elif same(a, b):
            sets.append(a)  # it seeds it: a hit leaves it where the helper does
        else:
            sets = None  # it draws from it without seeding it: its value depends on the caller's state
            break
    cacheable = sets is not None and equal(value, again)
    _CACHE[key] = (stored, sets) if cacheable else UNCACHEABLE
    return value


def _perturb() -> None:
    """Move both generators somewhere else (the CPU generator directly: no lazy GPU seeding)."""
    n = 7919 + STATS["misses"] + STATS["hits"]
    torch.default_generator.manual_seed(n)
    random.seed(n)


def _verify(fn: Callable, args: tuple, kwargs: dict, value: Any, after: list) -> None:
    """Compute again from other global generator states; record what differs from the cached entry."""
    entry_state = rng_state()
    _perturb()
    start = rng_state()
    fresh = fn(*args, **kwargs)
    now = moved(start, rng_state())
    name = fn.__qualname__
    if not equal(fresh, value):
        MISMATCHES.append(f"{name}: the cached value differs from a fresh one")
    for (_, _, same), first, again in zip(GENERATORS, after, now):
        if (first is None) != (again is None) or (first is not None and not same(first, again)):
            MISMATCHES.append(f"{name}: a fresh call left a global generator elsewhere than the first call")
    set_rng_state(entry_state)


def clear() -> None:
    """Forget every cached value (tests)."""
    _CACHE.clear()
    _ALIVE.clear()
    MISMATCHES.clear()
    for k in STATS:
        STATS[k] = 0
