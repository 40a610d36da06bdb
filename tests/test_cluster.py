"""Class grading on a Dask cluster: a real `dask scheduler` and two `dask worker` processes on 127.0.0.1.

The workers grade the toy chapter (tests/batch/98_batch_toy.py); they run with
the preload tests/batch/cluster_faults.py, which kills the worker process on a
submission whose name ends in "boom". The scheduler gives a task up after one
worker death too many (allowed-failures 1: two tries), to keep the test short.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import nbformat
import pytest

from autograder import batch
from autograder.batch.io import find_jobs
from tests.batch import toy
from tests.batch.toy import CHAPTER, ROOT, make_notebook, toy_folders

pytest.importorskip("distributed")



def hostile_variant(address: str, graders: Path) -> None:
    """add() reaches for the scheduler and the hidden graders, and gives a wrong sum if it gets either."""
    host, port = address.rsplit("/", 1)[1].rsplit(":", 1)
    toy.VARIANTS["hostile"] = ("    return a + b", f"""    import socket
    try:
        socket.create_connection(({host!r}, {port}), 1).close()
        return a - b
    except OSError:
        pass
    try:
        open({str(graders / f"test_{CHAPTER}.py")!r}).read()
        return a - b
    except OSError:
        return a + b""")


CLASS = {**{f"ok{i}": "ok" for i in range(8)}, **{f"wrong{i}": "wrong" for i in range(4)},
         "segv0": "segv", "segv1": "segv", "loop0": "loop", "garbage0": "garbage", "garbage1": "garbage",
         "hostile0": "hostile", "hostile1": "hostile"}  # and "empty": 20 in all


def make_class(folder: Path, members: dict[str, str], empty: bool = True) -> Path:
    for name, variant in members.items():
        make_notebook(folder / name / f"{CHAPTER}.ipynb", variant)
    if empty:  # no cells, no metadata: its chapter comes from its file name, which travels with the bytes
        (folder / "empty").mkdir()
        nbformat.write(nbformat.v4.new_notebook(), folder / "empty" / f"{CHAPTER}.ipynb")
    return folder


class LocalDask:
    """A `dask scheduler` and two `dask worker` processes (each with its nanny) on 127.0.0.1."""

    def __init__(self, root: Path, env: dict) -> None:
        self.root, self.env, self.procs = root, env, []
        self.file = root / "scheduler.json"
        self.logs = root / "logs"
        self.logs.mkdir()

    def start(self) -> str:
        self._spawn("scheduler", [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                                  "--port", "0", "--no-dashboard", "--scheduler-file", str(self.file)])
        deadline = time.monotonic() + 60
        while not self.file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        self.address = json.loads(self.file.read_text())["address"]
        for i in range(2):
            self._spawn(f"worker{i}", [sys.executable, "-m", "distributed.cli.dask_worker", self.address,
                                       "--host", "127.0.0.1", "--nthreads", "1", "--nworkers", "1",
                                       "--no-dashboard", "--preload", "tests.batch.cluster_faults",
                                       "--name", f"w{i}"])
        return self.address

    def _spawn(self, name: str, cmd: list[str]) -> None:
        log = open(self.logs / f"{name}.log", "w")
        self.procs.append(subprocess.Popen(cmd, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                           start_new_session=True))

    def stop(self) -> None:
        for proc in reversed(self.procs):  # workers first, then the scheduler
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.fixture(scope="module")
def dask_cluster(tmp_path_factory):
    """(scheduler address, solutions folder, graders folder); the workers grade the toy chapter."""
    root = tmp_path_factory.mktemp("dask")
    sol, graders = toy_folders(root / "chapter")
    env = {**os.environ, "AUTOGRADER_SOLUTIONS": str(sol), "AUTOGRADER_GRADERS": str(graders),
           "PYTHONPATH": str(ROOT), "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "1",
           "DASK_DISTRIBUTED__SCHEDULER__WORKER_SATURATION": "1.0"}  # a worker holds only the task it runs
    cluster = LocalDask(root, env)
    try:
        yield cluster.start(), sol, graders
    finally:
        cluster.stop()


@pytest.fixture
def on_cluster(dask_cluster, monkeypatch):
    """The client sees the same toy chapter as the workers; returns the scheduler's address."""
    from autograder.reference import load_reference
    address, sol, graders = dask_cluster
    hostile_variant(address, graders)
    monkeypatch.setenv("AUTOGRADER_SOLUTIONS", str(sol))
    monkeypatch.setenv("AUTOGRADER_GRADERS", str(graders))
    load_reference.cache_clear()
    yield address
    load_reference.cache_clear()


def settings(out: Path, **kw) -> batch.Settings:
    return batch.Settings(out, **{"jobs": 2, "call_timeout": 2.0, "progress": False, **kw})


def on_dask(address: str, **kw):
    from autograder import cluster
    return cluster.runner(address, worker_wait=60, **kw)


def essence(result: dict) -> tuple:
    """What grading decided: score, status, and each test's score (not the times or the paths)."""
    return (result["score"], result["max_score"], result["extra_data"].get("status"),
            tuple((t["name"], t["score"]) for t in result["tests"]))


def results(out: Path) -> dict[str, dict]:
    """Each submission's results.json, by student folder (alice for alice__98_batch_toy)."""
    return {p.parent.name.split("__")[0]: json.loads(p.read_text()) for p in out.glob("*/results.json")}


def test_a_cluster_grades_twenty_mixed_submissions_as_the_local_pool_does(on_cluster, tmp_path):
    subs = make_class(tmp_path / "subs", CLASS)
    jobs = find_jobs([str(subs)])
    assert len(jobs) == 20
    written = Counter()
    remote = batch.run_batch(jobs, settings(tmp_path / "remote"), runner=on_dask(on_cluster),
                             on_result=lambda job, res: written.update([job.name]))
    assert (remote.graded, remote.aborted) == (20, "")
    assert set(written.values()) == {1}
    local = batch.run_batch(jobs, settings(tmp_path / "local"))
    assert local.graded == 20
    there, here = results(tmp_path / "remote"), results(tmp_path / "local")
    assert {k: essence(v) for k, v in there.items()} == {k: essence(v) for k, v in here.items()}
    statuses = Counter(r["extra_data"]["status"] for r in there.values())
    assert statuses == {"graded": 17, "error": 3}  # the two garbage files and the empty notebook
    scores = {k: r["score"] for k, r in there.items()}
    assert scores["ok0"] == scores["segv0"] == 4 and scores["wrong0"] == 1
    if there["hostile0"]["extra_data"]["isolation"] == "bwrap":  # no network, no graders in sight
        assert scores["hostile0"] == 4
    assert (tmp_path / "remote" / "grades.csv").read_text() == (tmp_path / "local" / "grades.csv").read_text()

    again = batch.run_batch(jobs, settings(tmp_path / "remote"), runner=on_dask(on_cluster))
    assert (again.graded, again.skipped) == (0, 20)  # a rerun resumes: nothing graded twice


def test_a_worker_killed_mid_batch_loses_nothing_and_a_poison_submission_is_given_up(on_cluster, tmp_path):
    from distributed import Client
    subs = make_class(tmp_path / "subs", {**{f"s{i:02d}": "ok" for i in range(19)}, "z_boom": "ok"}, empty=False)
    with Client(on_cluster, timeout=10, set_as_default=False) as client:
        pids = sorted(client.run(os.getpid).values())
    assert len(pids) == 2
    written, killed = Counter(), []

    def record(job, res):
        written.update([job.name])
        if len(written) == 3 and not killed:  # mid-batch: both workers are busy with queued work
            os.kill(pids[0], signal.SIGKILL)
            killed.append(pids[0])

    report = batch.run_batch(find_jobs([str(subs)]), settings(tmp_path / "out"), runner=on_dask(on_cluster),
                             on_result=record)
    assert killed and report.aborted == ""
    assert len(written) == 20 and set(written.values()) == {1}  # each result written once
    got = results(tmp_path / "out")
    assert len(got) == 20
    assert {k: (r["score"], r["extra_data"]["status"]) for k, r in got.items() if k != "z_boom"} == {
        f"s{i:02d}": (4, "graded") for i in range(19)}
    poison = got["z_boom"]
    assert poison["extra_data"]["status"] == "crashed" and "stopped every Dask worker" in poison["output"]


def test_a_worker_of_another_course_version_is_refused(on_cluster, tmp_path, monkeypatch):
    graders = tmp_path / "graders"
    shutil.copytree(os.environ["AUTOGRADER_GRADERS"], graders)
    with open(graders / f"test_{CHAPTER}.py", "a") as f:
        f.write("\n# a grader changed on the client only\n")
    monkeypatch.setenv("AUTOGRADER_GRADERS", str(graders))
    subs = make_class(tmp_path / "subs", {"ann": "ok"}, empty=False)
    report = batch.run_batch(find_jobs([str(subs)]), settings(tmp_path / "out"), runner=on_dask(on_cluster))
    assert report.graded == 0
    assert "course version differs" in report.aborted and "127.0.0.1" in report.aborted


def test_an_unreachable_scheduler_is_a_clear_error_at_once(tmp_path):
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    subs = make_class(tmp_path / "subs", {"ann": "ok"}, empty=False)
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "autograder", "grade", str(subs), "--out", str(tmp_path / "out"),
                           "--scheduler", f"tcp://127.0.0.1:{port}", "--no-progress"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert f"cannot reach the Dask scheduler at tcp://127.0.0.1:{port}" in proc.stderr
    assert time.monotonic() - started < 30  # the Python start-up; no connection retries


def test_a_slurm_config_file_gives_workers_of_one_thread_each_from_the_course_venv(tmp_path):
    pytest.importorskip("dask_jobqueue")
    import dask.config
    from autograder.cluster.jobqueue import JobqueueError, make_cluster
    page = (ROOT / "book" / "instructors" / "cluster.md").read_text()  # the instructors' guide, "Slurm"
    config = page.split("<!-- slurm-config -->\n```yaml\n", 1)[1].split("```", 1)[0]
    (tmp_path / "jobqueue.yaml").write_text(config)
    cluster = make_cluster("slurm", tmp_path / "jobqueue.yaml")
    try:
        script = cluster.job_script()
    finally:
        cluster.close()
    assert "#SBATCH -p grading" in script and "--nthreads 1" in script and "--nworkers 8" in script
    assert "/course/.venv/bin/python -m distributed.cli.dask_worker" in script
    if shutil.which("openssl"):  # --tls: the certificates of Dask's configuration, on the workers' command line
        pem, key = tmp_path / "cert.pem", tmp_path / "key.pem"  # one self-signed cert: CA and every role
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", pem,
                        "-days", "1", "-subj", "/CN=127.0.0.1"], check=True, capture_output=True)
        tls = {f"distributed.comm.tls.{role}.{part}": str(path) for role in ("scheduler", "worker", "client")
               for part, path in (("cert", pem), ("key", key))}
        with dask.config.set({"distributed.comm.tls.ca-file": str(pem), **tls}):
            cluster = make_cluster("slurm", tmp_path / "jobqueue.yaml", tls=True)
        try:
            assert cluster.scheduler_address.startswith("tls://")
            assert f"--tls-ca-file {pem}" in cluster.job_script()
        finally:
            cluster.close()
    with pytest.raises(JobqueueError, match="ca-file"):
        make_cluster("slurm", tmp_path / "jobqueue.yaml", tls=True)
    (tmp_path / "bad.yaml").write_text("slurm: {}\n")
    with pytest.raises(JobqueueError, match="no `jobqueue:` section"):
        make_cluster("slurm", tmp_path / "bad.yaml")
