"""A throwaway PostgreSQL for the service's tests: Debian's `postgresql` (installed by .ci/run), started in
a temporary folder on a free port, trust authentication on 127.0.0.1 only, removed at the end.

COURSE_POSTGRES_URL (postgresql+psycopg://user@host:port/db) uses a running server instead. Where
neither works, `server()` says why, and the PostgreSQL tests skip with that reason.
"""
from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path


def _binaries() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).resolve().parent if initdb else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A running PostgreSQL: `url(db)` for a database on it, `create()` for a fresh one."""

    def __init__(self) -> None:
        self.base, self.folder, self.stop_command = "", None, None

    def start(self) -> str:
        """'' once running, else why not."""
        if os.environ.get("COURSE_POSTGRES_URL"):
            self.base = os.environ["COURSE_POSTGRES_URL"].rsplit("/", 1)[0]
            return ""
        try:
            import psycopg  # noqa: F401
        except ImportError:
            return "psycopg is not installed (requirements.txt)"
        bin_dir = _binaries()
        if bin_dir is None:
            return "no PostgreSQL here (Debian: apt-get install postgresql; .ci/run installs it)"
        self.folder = Path(tempfile.mkdtemp(prefix="course-pg-"))
        data, port = self.folder / "data", _free_port()
        as_user: list[str] = []
        if os.geteuid() == 0:  # PostgreSQL refuses to run as root: as the postgres user
            if not shutil.which("runuser"):
                return "running as root without runuser: cannot start PostgreSQL"
            shutil.chown(self.folder, "postgres")
            os.chmod(self.folder, 0o700)
            as_user = ["runuser", "-u", "postgres", "--"]
        user = "postgres"
        try:
            subprocess.run([*as_user, str(bin_dir / "initdb"), "-D", str(data), "-U", user, "--auth=trust",
                            "-E", "UTF8", "--no-sync"], check=True, capture_output=True, timeout=120)
            opts = f"-p {port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off"
            subprocess.run([*as_user, str(bin_dir / "pg_ctl"), "-D", str(data), "-o", opts, "-l",
                            str(self.folder / "log"), "-w", "-t", "60", "start"], check=True, capture_output=True,
                           timeout=90)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
            detail = getattr(exc, "stderr", b"") or b""
            return f"PostgreSQL did not start ({exc}; {detail.decode(errors='replace')[-300:]})"
        self.stop_command = [*as_user, str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]
        self.base = f"postgresql+psycopg://{user}@127.0.0.1:{port}"
        return ""

    def create(self) -> str:
        """A new, empty database; its URL."""
        import psycopg
        name = f"course_{uuid.uuid4().hex[:12]}"
        plain = self.base.replace("postgresql+psycopg://", "postgresql://")
        with psycopg.connect(f"{plain}/postgres", autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return f"{self.base}/{name}"

    def stop(self) -> None:
        if self.stop_command:
            subprocess.run(self.stop_command, capture_output=True, timeout=60)
        if self.folder:
            shutil.rmtree(self.folder, ignore_errors=True)
