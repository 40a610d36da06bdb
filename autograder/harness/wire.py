"""Framing of messages between the trusted grader and the student process.

Every message is an 8-byte big-endian length, then a 4-byte length and a
JSON header, then the raw bytes of the tensors it holds. No pickle is used
anywhere: a message can hold only tensors (a whitelist of dtypes, strided,
rebuilt with `torch.frombuffer` and `as_strided`, so their strides survive),
numbers, strings, None, lists, tuples and dicts. The trusted side never
unpickles bytes the student process produced, so no `__reduce__` trick or
`torch.load` bug can run code in it. Unlike `torch.save`, two tensors that
share storage arrive as two separate tensors.

This file is copied into the sandbox and imported there too: stdlib and
torch only.
"""
from __future__ import annotations

import json
import math
import socket
import struct
from typing import Any

import torch

HEADER = struct.Struct(">Q")
JSON_HEADER = struct.Struct(">I")
MAX_MESSAGE = 256 * 1024 * 1024  # a reply larger than this is refused, not read
MAX_DEPTH = 64  # nesting of lists, tuples and dicts
DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
    torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128)}
NAMES = {d: name for name, d in DTYPES.items()}
ITEM_SIZE = {name: torch.empty((), dtype=d).element_size() for name, d in DTYPES.items()}


class WireError(RuntimeError):
    """The other side closed the connection or sent something unreadable."""


def _pack(obj: Any, blobs: list, size: list, depth: int = 0) -> Any:
    """`obj` as JSON-able data; tensors' bytes go to `blobs`."""
    if depth > MAX_DEPTH:
        raise WireError("structure nested too deeply to send")
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, int):
        return {"~i": str(obj)} if abs(obj) >= 2 ** 53 else obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else {"~f": repr(obj)}
    if isinstance(obj, torch.Tensor):
        return _pack_tensor(obj, blobs, size)
    if isinstance(obj, list):
        return [_pack(x, blobs, size, depth + 1) for x in obj]
    if isinstance(obj, tuple):
        return {"~t": [_pack(x, blobs, size, depth + 1) for x in obj]}
    if isinstance(obj, dict):
        return {"~d": [[_pack(k, blobs, size, depth + 1), _pack(v, blobs, size, depth + 1)] for k, v in obj.items()]}
    raise WireError(f"cannot send a {type(obj).__module__}.{type(obj).__qualname__}")


def span(shape: list, stride: list) -> int:
    """How many storage elements a strided view of `shape` and `stride` reaches (0 if it is empty)."""
    if any(n == 0 for n in shape):
        return 0
    return 1 + sum((n - 1) * st for n, st in zip(shape, stride))


def _pack_tensor(t: torch.Tensor, blobs: list, size: list) -> dict:
    """The tensor's strides are kept (a non-contiguous or expanded input stays so): the elements of
    storage it reaches are sent, and rebuilt with `as_strided`."""
    name = NAMES.get(t.dtype)
    if name is None or t.layout is not torch.strided or t.is_quantized:
        raise WireError(f"cannot send a {t.layout} tensor of dtype {t.dtype}")
    t = t.detach()
    if t.device.type != "cpu":
        t = t.to("cpu")
    if t.is_conj() or t.is_neg():
        t = t.resolve_conj().resolve_neg()
    shape, stride = list(t.shape), list(t.stride())
    reach = span(shape, stride)
    if not reach:
        data = b""
    elif reach == t.numel() and t.storage_offset() == 0 and t.is_contiguous():  # the common case
        data = (t.view(torch.int16) if t.dtype is torch.bfloat16 else t).numpy().tobytes()  # C order
    else:
        data = torch.as_strided(t, (reach,), (1,), t.storage_offset()).view(torch.uint8).numpy().tobytes()
    blobs.append(data)
    size[0] += len(data)
    return {"~T": [name, shape, stride, size[0] - len(data), len(data)]}


def encode(obj: Any) -> bytes:
    """Bytes of `obj` (tensors, numbers, strings, lists, tuples, dicts)."""
    blobs: list[bytes] = []
    head = json.dumps(_pack(obj, blobs, [0]), separators=(",", ":"), allow_nan=False).encode()
    return JSON_HEADER.pack(len(head)) + head + b"".join(blobs)


def _unpack(obj: Any, blob: memoryview, depth: int = 0) -> Any:
    if depth > MAX_DEPTH:
        raise WireError("structure nested too deeply")
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, list):
        return [_unpack(x, blob, depth + 1) for x in obj]
    if not (isinstance(obj, dict) and len(obj) == 1):
        raise WireError("malformed message")
    (tag, val), = obj.items()
    if tag == "~t" and isinstance(val, list):
        return tuple(_unpack(x, blob, depth + 1) for x in val)
    if tag == "~d" and isinstance(val, list):
        return {_unpack(k, blob, depth + 1): _unpack(v, blob, depth + 1) for k, v in val}
    if tag == "~T" and isinstance(val, list):
        return _unpack_tensor(val, blob)
    if tag == "~i" and isinstance(val, str):
        return int(val)
    if tag == "~f" and val in ("nan", "inf", "-inf"):
        return float(val)
    raise WireError(f"malformed message (tag {str(tag)[:20]!r})")


def _unpack_tensor(val: list, blob: memoryview) -> torch.Tensor:
    name, shape, stride, offset, nbytes = val
    ints = lambda xs: isinstance(xs, list) and all(type(x) is int and x >= 0 for x in xs)  # noqa: E731
    if name not in DTYPES or not ints(shape) or not ints(stride) or len(shape) != len(stride):
        raise WireError("malformed tensor")
    dtype = DTYPES[name]
    reach = span(shape, stride)
    if type(offset) is not int or type(nbytes) is not int or offset < 0 \
            or nbytes != reach * ITEM_SIZE[name] or offset + nbytes > len(blob):
        raise WireError("malformed tensor: its size does not match its data")
    if reach == 0:
        return torch.empty(shape, dtype=dtype)
    flat = torch.frombuffer(bytearray(blob[offset:offset + nbytes]), dtype=dtype)
    return flat.as_strided(shape, stride)


def decode(data: bytes) -> Any:
    """The object in `data`; nothing in it can run code."""
    try:
        (n,) = JSON_HEADER.unpack_from(data)
        head = json.loads(bytes(data[JSON_HEADER.size:JSON_HEADER.size + n]))
        return _unpack(head, memoryview(data)[JSON_HEADER.size + n:])
    except WireError:
        raise
    except Exception as exc:  # any malformed payload is the sender's fault
        raise WireError(f"unreadable message ({type(exc).__name__}: {str(exc)[:200]})") from None


def frame(obj: Any) -> bytes:
    """One framed message: its length, then its bytes."""
    data = encode(obj)
    return HEADER.pack(len(data)) + data


def send(sock: socket.socket, obj: Any) -> None:
    """Send one framed message."""
    sock.sendall(frame(obj))


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(min(n - got, 1 << 20))
        if not chunk:
            raise WireError("connection closed")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def recv(sock: socket.socket, limit: int = MAX_MESSAGE) -> Any:
    """Receive one framed message; refuse one longer than `limit` bytes."""
    (length,) = HEADER.unpack(_recv_exact(sock, HEADER.size))
    if length > limit:
        raise WireError(f"message of {length} bytes is over the {limit}-byte limit")
    return decode(_recv_exact(sock, length))
