# Tries to read what the grader hides, and to reach a server on the loopback interface.
import os
import socket


def peek(paths):
    seen = {}
    for path in paths:
        try:
            if os.path.isdir(path):
                seen[path] = "listed: " + ", ".join(sorted(os.listdir(path))[:20])
            else:
                with open(path, "rb") as f:
                    seen[path] = f"read {len(f.read())} bytes"
        except OSError as exc:
            seen[path] = f"refused: {type(exc).__name__}"
    return seen


def call_home(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(1.0)
    try:
        s.connect(("127.0.0.1", port))
        s.sendall(b"stolen")
        return "connected"
    except OSError as exc:
        return f"refused: {type(exc).__name__}: {exc}"
    finally:
        s.close()


def leak_grader():
    """Print the hidden grader's source if it can be found (it must not be).

    The walk skips the Python installation (bound read-only from the host, no grader in it):
    walking its thousands of folders took over the 1.5 s call limit on a loaded machine, and
    the test then failed for want of time, not for a leak.
    """
    import sys
    python = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    for root in ("/work", "/root", "/tmp", "/grader", "/"):
        for dirpath, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if d not in ("proc", "sys", "usr", "dev", ".venv", ".git")
                       and os.path.realpath(os.path.join(dirpath, d)) not in python]
            if "test_99_toy.py" in files:
                print(open(os.path.join(dirpath, "test_99_toy.py")).read())
                return dirpath
    return None


def causal_mask(n):
    import torch
    leak_grader()
    return torch.ones(n, n, dtype=torch.bool).tril()
