"""Framing of messages between the trusted grader and the student process.

Every message is an 8-byte big-endian length followed by a `torch.save`
payload. Both sides read with `torch.load(weights_only=True)`, so a payload
can hold only tensors, numbers, strings, None, lists, tuples and dicts: the
trusted side never unpickles an object the student process built.

This file is copied into the sandbox and imported there too: stdlib and
torch only.
"""
from __future__ import annotations

import io
import socket
import struct
from typing import Any

import torch

HEADER = struct.Struct(">Q")
MAX_MESSAGE = 256 * 1024 * 1024  # a reply larger than this is refused, not read


class WireError(RuntimeError):
    """The other side closed the connection or sent something unreadable."""


def encode(obj: Any) -> bytes:
    """Bytes of `obj` (tensors, numbers, strings, lists, tuples, dicts)."""
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def decode(data: bytes) -> Any:
    """The object in `data`, loaded without running any pickled code."""
    try:
        return torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    except Exception as exc:  # any malformed payload is the sender's fault
        raise WireError(f"unreadable message ({type(exc).__name__}: {str(exc)[:200]})") from None


def send(sock: socket.socket, obj: Any) -> None:
    """Send one framed message."""
    data = encode(obj)
    sock.sendall(HEADER.pack(len(data)) + data)


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
