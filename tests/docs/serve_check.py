"""Run a documented `jupyter lab NB` or `jupyter notebook NB` as the doc-command tests do, then stop it.

    python tests/docs/serve_check.py jupyter lab exercises/02_attention.ipynb

The command runs as written (the `jupyter` of the session's PATH, in its folder), with these
options added: no browser, 127.0.0.1 and a free port, a token, and `--allow-root` when run as root
(as these tests may be; students are not). It succeeds when, within LIMIT seconds, the server
serves the notebook (its contents API returns it as a notebook), starts a kernel for it (a
session), and that kernel runs `import torch, attnkit` (over the kernel's websocket, as the
browser would); the server is then stopped. Standard library only: this script is a client,
whatever Python runs it.
"""
from __future__ import annotations

import base64
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

LIMIT = float(os.environ.get("DOC_SERVE_SECONDS", "300"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def api(base: str, token: str, path: str, method: str = "GET", body: dict | None = None) -> dict:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method,
                                 headers={"Authorization": f"token {token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        text = r.read().decode()
    return json.loads(text) if text else {}


class Channels:
    """A kernel's websocket (`/api/kernels/ID/channels`, Jupyter's JSON messages), RFC 6455 by hand."""

    def __init__(self, port: int, token: str, kernel: str) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET /api/kernels/{kernel}/channels?session_id={secrets.token_hex(8)} HTTP/1.1\r\n"
                           f"Host: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                           f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                           f"Authorization: token {token}\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise OSError("the server closed the websocket handshake")
            head += chunk
        head, self.rest = head.split(b"\r\n\r\n", 1)
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise OSError(f"websocket refused: {head.splitlines()[0]!r}")

    def _read(self, n: int) -> bytes:
        while len(self.rest) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise OSError("the kernel's websocket closed")
            self.rest += chunk
        data, self.rest = self.rest[:n], self.rest[n:]
        return data

    def send(self, msg: dict) -> None:
        data = json.dumps(msg).encode()
        n = len(data)
        head = bytes([0x81]) + (bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + n.to_bytes(2, "big")
                                if n < 1 << 16 else bytes([0x80 | 127]) + n.to_bytes(8, "big"))
        mask = os.urandom(4)
        self.sock.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def receive(self) -> dict | None:
        """The next text message (None for a control frame)."""
        payload, opcode = b"", None
        while True:
            b0, b1 = self._read(2)
            n = b1 & 0x7F
            n = int.from_bytes(self._read(2 if n == 126 else 8), "big") if n >= 126 else n
            data = self._read(n)
            opcode = opcode if (b0 & 0x0F) == 0 else b0 & 0x0F
            payload += data
            if b0 & 0x80:
                break
        if opcode == 8:
            raise OSError("the kernel's websocket closed")
        return json.loads(payload) if opcode == 1 else None

    def run(self, code: str, deadline: float) -> str:
        """Execute `code`; return what it printed, or raise AssertionError with its error."""
        msg_id = secrets.token_hex(8)
        self.send({"header": {"msg_id": msg_id, "msg_type": "execute_request", "username": "doc-test",
                              "session": secrets.token_hex(8), "date": "", "version": "5.3"},
                   "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
                   "content": {"code": code, "silent": False, "store_history": False, "user_expressions": {},
                               "allow_stdin": False, "stop_on_error": True}})
        printed = []
        while time.monotonic() < deadline:
            msg = self.receive()
            if not msg or msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind, content = msg["header"]["msg_type"], msg["content"]
            if kind == "stream":
                printed.append(content["text"])
            elif kind == "error":
                raise AssertionError(f"the kernel failed to run {code!r}: {content['ename']}: {content['evalue']}")
            elif kind == "execute_reply":
                assert content["status"] == "ok", f"the kernel failed to run {code!r}: {content}"
                return "".join(printed)
        raise TimeoutError(f"the kernel did not run {code!r} within {LIMIT:.0f} s")


def until(deadline: float, what: str, probe):
    """probe() until it returns something truthy (errors count as not yet); TimeoutError at deadline."""
    last = None
    while time.monotonic() < deadline:
        try:
            got = probe()
            if got:
                return got
        except (urllib.error.URLError, OSError, ValueError) as exc:
            last = exc
            if isinstance(exc, urllib.error.HTTPError) and exc.code == 404:
                raise TimeoutError(f"{what}: {exc}") from exc  # served, and missing: no use waiting
        time.sleep(1)
    raise TimeoutError(f"{what} not within {LIMIT:.0f} s (last: {last})")


def main(cmd: list[str]) -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # stopped from outside: stop the server too
    notebook = next((a for a in cmd[2:] if a.endswith(".ipynb")), None)
    port, token = free_port(), secrets.token_hex(16)
    extra = ["--no-browser", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
             f"--IdentityProvider.token={token}"]
    if os.geteuid() == 0:
        extra.append("--allow-root")
    base = f"http://127.0.0.1:{port}"
    log = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen(cmd + extra, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + LIMIT
    try:
        until(deadline, "the server's API", lambda: proc.poll() is None and api(base, token, "/api/status"))
        path = notebook
        if notebook:  # a server given a notebook serves the notebook's folder: its path there is its name
            path = os.path.basename(notebook)
            model = until(deadline, f"{notebook} served",
                          lambda: api(base, token, f"/api/contents/{path}?content=1"))
            assert model["type"] == "notebook" and model["content"]["cells"], f"{notebook}: not a notebook"
        session = api(base, token, "/api/sessions", "POST",
                      {"path": path or "untitled.ipynb", "type": "notebook", "name": "",
                       "kernel": {"name": "python3"}})
        channels = until(deadline, "the kernel's websocket", lambda: Channels(port, token, session["kernel"]["id"]))
        printed = channels.run("import sys, torch, attnkit; print(sys.executable, attnkit.__file__)", deadline)
        api(base, token, f"/api/sessions/{session['id']}", "DELETE")
        print(f"{' '.join(cmd)}: served {notebook or 'the server'}; its kernel ran "
              f"`import torch, attnkit`: {printed.strip()}")
        return 0
    except (TimeoutError, AssertionError, urllib.error.URLError, KeyError, OSError) as exc:
        log.seek(0)
        print(f"{' '.join(cmd)}: {exc}\n--- its output ---\n{log.read()[-4000:]}", file=sys.stderr)
        return 1
    finally:
        with_group = lambda sig: os.killpg(proc.pid, sig)  # noqa: E731 - the server and its kernels
        try:
            with_group(signal.SIGTERM)
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with_group(signal.SIGKILL)
            proc.wait()
        except ProcessLookupError:
            pass


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
