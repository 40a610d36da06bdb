"""A real service in a subprocess (`python -m autograder serve`), for the kill -9, grading, browser and
load tests: started on a free port of 127.0.0.1, waited for, killed at the end."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Live:
    """`python -m autograder serve` on 127.0.0.1; `start()`, `kill()` (SIGKILL), `stop()`."""

    def __init__(self, folder: Path, db_url: str, chapters: list[str], *options: str) -> None:
        self.folder, self.db_url, self.chapters, self.options = Path(folder), db_url, chapters, options
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def start(self, timeout: float = 120.0) -> "Live":
        self.starts += 1
        log = open(self.folder / f"server-{self.starts}.log", "wb")
        cmd = [sys.executable, "-m", "autograder", "serve", "--dir", str(self.folder), "--db", self.db_url,
               "--port", str(self.port), *(a for c in self.chapters for a in ("--chapter", c)), *self.options]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                     env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE"})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited ({self.proc.returncode}): "
                                   + (self.folder / f"server-{self.starts}.log").read_text()[-2000:])
            try:
                if httpx.get(self.url + "/", timeout=2, trust_env=False).status_code == 200:
                    return self
            except httpx.HTTPError:
                time.sleep(0.2)
        raise RuntimeError("the server did not answer in time")

    def workers(self) -> list[int]:
        """The pids of the server's grading workers (`autograder.batch.worker`)."""
        found = []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                cmd = (proc / "cmdline").read_bytes().split(b"\0")
                ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if ppid == self.proc.pid and b"autograder.batch.worker" in cmd:
                found.append(int(proc.name))
        return found

    def kill(self) -> None:
        """kill -9 the server process (its workers die with it, as with any crash)."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def submit(url: str, token: str, path: Path, chapter: str, timeout: float = 30.0) -> httpx.Response:
    """What `python -m attnkit submit` sends."""
    return httpx.post(url + "/api/submit", headers={"Authorization": f"Bearer {token}"},
                      data={"chapter": chapter}, files={"notebook": (path.name, path.read_bytes())},
                      timeout=timeout, trust_env=False)


def wait_done(url: str, token: str, sub_id: int, timeout: float = 120.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = httpx.get(f"{url}/api/submissions/{sub_id}", headers={"Authorization": f"Bearer {token}"},
                      timeout=10, trust_env=False)
        if r.status_code == 200 and r.json()["status"] == "done":
            return r.json()
        time.sleep(0.3)
    raise TimeoutError(f"submission {sub_id} not graded in {timeout:g} s")
