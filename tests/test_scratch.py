"""Does a killed grader leave its temporary folders behind? (autograder/harness/scratch.py)"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile

from autograder.harness.scratch import owned_tempdir, sweep

MAKE = "from autograder.harness.scratch import owned_tempdir; print(owned_tempdir('ag-test-'), flush=True)"


def made_by_child(tmp_path, wait: bool) -> tuple[str, subprocess.Popen]:
    """A folder made by a child process (ended by SIGKILL, or still running)."""
    env = dict(os.environ, TMPDIR=str(tmp_path))
    code = MAKE + ("; import time; time.sleep(60)" if not wait else "; import os; os.kill(os.getpid(), 9)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
    path = proc.stdout.readline().strip()
    if wait:
        proc.wait()
    return path, proc


def test_the_folder_of_a_killed_process_goes_and_a_live_ones_stays(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    live, running = made_by_child(tmp_path, wait=False)  # first: making one sweeps the dead
    dead, killed = made_by_child(tmp_path, wait=True)
    try:
        assert killed.returncode == -signal.SIGKILL and os.path.isdir(dead) and os.path.isdir(live)
        mine = owned_tempdir("ag-test-")
        assert not os.path.exists(dead), "the killed process's folder should be removed"
        assert os.path.isdir(live), "a running process's folder must stay"
        assert os.path.basename(mine).startswith(f"ag-test-{os.getpid()}-")
    finally:
        running.kill()
        running.wait()


def test_only_folders_named_prefix_pid_dash_are_touched(tmp_path):
    others = [tmp_path / "ag-test-notapid-x", tmp_path / "ag-test-", tmp_path / "ag-tests-1-x"]
    for path in others:
        path.mkdir()
    (tmp_path / "ag-test-999999999-file").write_text("a file, not a folder")
    gone = tmp_path / "ag-test-999999999-abc"
    gone.mkdir()
    assert sweep("ag-test-", str(tmp_path)) == [gone]
    assert all(path.exists() for path in others)
