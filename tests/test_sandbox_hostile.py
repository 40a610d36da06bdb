"""Hostile submissions, each proving one property of the sandbox (book/instructors/sandbox.md).

Every test grades the toy chapter in tests/hostile/chapter (a solution and its
hidden graders, 5 points in 3 tests) with one of the hostile cells of
tests/hostile/*.py appended. They run in bubblewrap mode (skipped, with the
reason, where bwrap cannot create namespaces) and, where the property holds
there too, in the fallback "process" mode. One sandbox per mode serves the
whole module; limits are short (1.5 s per call) to keep it fast.
"""
from __future__ import annotations

import json
import os
import pickle
import random
import signal
import socket
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from autograder.harness import wire
from autograder.grade import grade_submission
from autograder.harness.notebook import read_submission
from autograder.harness.results import write_json
from autograder.harness.sandbox import Limits, ReducedIsolationWarning, Sandbox, bwrap_works, choose_isolation
from autograder.harness.student import StudentError, StudentProcess

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
HOSTILE = HERE / "hostile"
CHAPTER = HOSTILE / "chapter"
TOY = "99_toy"  # 6 points: 5, and 1 for its CUDA test (on the simulated CUDA device where no GPU is usable)
SECRET = "hidden-grader-source-7d1f"  # in the toy graders' source; never in feedback
LIMITS = Limits(call_seconds=1.5, load_seconds=5, submission_seconds=60, memory_bytes=1 << 30,
                cpu_seconds=30, processes=32)
NO_BWRAP = "bubblewrap (bwrap) is missing or cannot create namespaces here (apt-get install bubblewrap)"
CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWNET = 0x00020000, 0x10000000, 0x40000000


# ---------------------------------------------------------------- fixtures and helpers
@pytest.fixture(scope="module", autouse=True)
def toy_chapter():
    """Grade against the toy chapter, not the course's real chapters."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AUTOGRADER_SOLUTIONS", str(CHAPTER))
        mp.setenv("AUTOGRADER_GRADERS", str(CHAPTER))
        yield


@pytest.fixture(scope="module")
def bwrap_box():
    if not bwrap_works():
        pytest.skip(NO_BWRAP)
    with Sandbox(LIMITS, isolation="bwrap") as sandbox:
        yield sandbox


@pytest.fixture(scope="module")
def process_box():
    with Sandbox(LIMITS, isolation="process") as sandbox:
        yield sandbox


@pytest.fixture(params=["bwrap", "process"])
def box(request) -> Sandbox:
    """The module's sandbox of each mode in turn."""
    return request.getfixturevalue(f"{request.param}_box")


def snippet(name: str, **fill) -> str:
    """A hostile cell from tests/hostile/NAME.py, with its __PLACEHOLDERS__ filled in."""
    source = (HOSTILE / f"{name}.py").read_text()
    for key, value in fill.items():
        source = source.replace(f"__{key.upper()}__", str(value))
    return source


def notebook(folder: Path, *names: str, **fill) -> Path:
    """The toy solution with the named hostile cells appended, saved as an nbformat-4 notebook."""
    cells = [{"cell_type": "code", "metadata": {"tags": c["tags"]}, "source": c["source"],
              "outputs": [], "execution_count": None} for c in read_submission(CHAPTER / f"{TOY}.py").cells]
    for name in names:
        cells.append({"cell_type": "code", "metadata": {}, "source": snippet(name, **fill),
                      "outputs": [], "execution_count": None})
    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {"course": {"chapter": TOY}}, "cells": cells}
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{'_'.join(names) or 'solution'}.ipynb"
    path.write_text(json.dumps(nb))
    return path


def grade(box: Sandbox, folder: Path, *names: str, **fill) -> dict:
    return grade_submission(notebook(folder, *names, **fill), box, TOY)


def by_function(result: dict) -> dict[str, dict]:
    """The result's tests by the function they grade."""
    return {t["tags"][0]: t for t in result["tests"]}


def student(box: Sandbox, *names: str, **fill) -> StudentProcess:
    """A student process running only the named hostile cells."""
    return StudentProcess(box, [{"cell_type": "code", "source": snippet(n, **fill), "tags": []} for n in names])


def processes_with(marker: str) -> list[int]:
    """Pids of the host's processes whose command line contains `marker`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def descendants(pid: int) -> set[int]:
    """The live processes below `pid` on the host."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if fields[0] != "Z":
                children.setdefault(int(fields[1]), []).append(int(entry.name))
    out, todo = set(), [pid]
    while todo:
        for c in children.get(todo.pop(), ()):
            out.add(c)
            todo.append(c)
    return out


def without_timing(result: dict) -> dict:
    result = json.loads(json.dumps(result))
    result["extra_data"].pop("execution_time", None)
    return result


@pytest.fixture
def marker():
    """A unique, valid `sleep` duration to find a process by; what carries it is killed afterwards."""
    tag = f"4711.{random.SystemRandom().randrange(10**8, 10**9)}"
    yield tag
    for pid in processes_with(tag):  # only when the test failed
        os.kill(pid, signal.SIGKILL)


# ---------------------------------------------------------------- a dying process costs one test
def test_the_toy_solution_gets_full_marks(box, tmp_path):
    result = grade(box, tmp_path)
    assert (result["score"], result["max_score"]) == (6, 6), result["output"]
    assert result["extra_data"]["isolation"] == box.isolation


def test_exit_and_timeout_cost_one_test_each(box, tmp_path):
    tests = by_function(result := grade(box, tmp_path, "exit_and_timeout"))
    assert "exited with code 3" in tests["causal_mask"]["output"]
    assert "in `causal_mask`" in tests["causal_mask"]["output"]
    assert "ran longer than 1.5 s in `scaled_scores`" in tests["scaled_scores"]["output"]
    assert tests["noisy_sum"]["status"] == "passed"  # in a fresh process
    assert (result["score"], result["max_score"]) == (1, 6)


def test_segfault_and_memory_hog_cost_one_test_each(box, tmp_path):
    tests = by_function(result := grade(box, tmp_path, "segfault_and_memory"))
    assert "crashed (SIGSEGV" in tests["causal_mask"]["output"]
    assert "in `causal_mask`" in tests["causal_mask"]["output"]
    assert "`scaled_scores` ran out of memory" in tests["scaled_scores"]["output"]
    assert "1 GiB" in tests["scaled_scores"]["output"]
    assert tests["noisy_sum"]["status"] == "passed"
    assert result["score"] == 1


def test_a_cell_that_ends_its_process_costs_only_itself(box, tmp_path):
    result = grade(box, tmp_path, "load_exit")
    assert (result["score"], result["max_score"]) == (6, 6), result["output"]
    assert "exited with code 9" in result["output"] and "run again without it" in result["output"]


def test_killing_its_parent_costs_one_test_and_the_sandbox_goes_on(box, tmp_path):
    kill_all = box.isolation == "namespaces" or os.geteuid() == 0  # kill(-1) reaches only the sandbox
    tests = by_function(result := grade(box, tmp_path / "a", "kill_parent", kill_all=kill_all))
    assert tests["causal_mask"]["status"] == "failed" and "`causal_mask`" in tests["causal_mask"]["output"]
    assert tests["scaled_scores"]["status"] == tests["noisy_sum"]["status"] == "passed"
    assert result["score"] == 4
    assert grade(box, tmp_path / "b")["score"] == 6


def test_submission_wall_clock_budget_stops_grading(box, tmp_path):
    box.limits = replace(LIMITS, submission_seconds=2.5)
    try:
        started = time.monotonic()
        result = grade(box, tmp_path, "slow")
    finally:
        box.limits = LIMITS
    # The feedback proves the budget stopped grading: the later tests were never called. The wall
    # clock only guards against a hang; a tight bound failed at load 12 (6.03 s for a 2.5 s budget).
    assert time.monotonic() - started < 30
    tests = by_function(result)
    assert "ran longer than 1.5 s in `causal_mask`" in tests["causal_mask"]["output"]
    assert "used up its 2.5 s" in tests["scaled_scores"]["output"]
    assert "used up its 2.5 s" in tests["noisy_sum"]["output"]
    assert result["score"] == 0


# ---------------------------------------------------------------- everything it started is gone
def test_fork_bomb_is_bounded_and_cleaned_up(box, tmp_path):
    probe = student(box, "fork_bomb")
    try:
        made = probe.call("probe_forks", (200,), timeout=30).value
    finally:
        probe.close()
    assert 0 < made < LIMITS.processes  # RLIMIT_NPROC holds (even when grading as root)
    before = descendants(box.proc.pid)
    tests = by_function(result := grade(box, tmp_path, "fork_bomb"))  # the real thing, now that it is bounded
    assert "ran longer than 1.5 s in `causal_mask`" in tests["causal_mask"]["output"]
    assert result["score"] == 4
    assert descendants(box.proc.pid) == before


def test_detached_daemon_is_killed_with_its_submission(box, tmp_path, marker):
    tag = marker
    proc = student(box, "daemon", results=tmp_path / "unused.json", marker=tag)
    try:
        assert proc.loaded()["names"], "the daemon cell did not run"
        assert processes_with(tag), "the detached sleeper should run while the submission does"
    finally:
        proc.close()
    assert processes_with(tag) == []


def test_detached_daemon_cannot_rewrite_the_results(box, tmp_path, marker):
    results, tag = tmp_path / "out" / "sub" / "results.json", marker
    result = grade(box, tmp_path, "daemon", results=results, marker=tag)
    write_json(results, result)
    time.sleep(1.0)  # the daemon rewrote the file every 50 ms while it lived
    assert json.loads(results.read_text()) == result
    assert result["score"] == 6 and processes_with(tag) == []
    if box.host_uid:
        assert not [p for p in Path("/proc").iterdir() if p.name.isdigit() and _owner(p) == box.host_uid]


def _owner(path: Path) -> int | None:
    try:
        return path.stat().st_uid
    except OSError:
        return None


def test_temporary_folder_is_private_to_each_submission(box):
    seen = []
    for tag in ("first", "second"):
        proc = student(box, "privileges")
        try:
            seen.append(proc.call("leave_and_look", (tag,)).value)
        finally:
            proc.close()
    assert seen == [[], []]


# ---------------------------------------------------------------- its tricks change nothing
def test_monkeypatching_the_checks_changes_no_grade(box, tmp_path):
    assert grade(box, tmp_path / "right", "monkeypatch")["score"] == 6
    result = grade(box, tmp_path / "wrong", "monkeypatch", "wrong_answers")
    assert result["score"] == 0
    assert all(t["status"] == "failed" for t in result["tests"])
    # the graders' plain asserts carry SECRET; feedback shows neither it nor reference values
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(2, 3, 4, generator=g), torch.randn(2, 5, 4, generator=g)
    want = (q @ k.transpose(-2, -1) / 2).flatten()[:5]
    text = json.dumps(result)
    assert SECRET not in text and "torch.allclose" not in text
    assert not [f"{v:.4f}" for v in want.tolist() if f"{v:.4f}" in text]


def test_fake_output_changes_neither_grade_nor_structure(box, tmp_path):
    good = grade(box, tmp_path / "good")
    result = grade(box, tmp_path / "fake", "fake_output")
    assert result["score"] == 4 and by_function(result)["causal_mask"]["status"] == "failed"
    assert result.keys() == good.keys() and result["extra_data"].keys() == good["extra_data"].keys()
    assert [(t["name"], t["max_score"]) for t in result["tests"]] == [(t["name"], t["max_score"]) for t in good["tests"]]
    text = json.dumps(result)
    assert "\x1b" not in text and "\\u001b" not in text and "\r" not in result["output"]
    assert len(result["output"]) < 5000  # 1 MB printed, a few KB shown
    assert "Your code printed" in result["output"] and "more characters cut" in result["output"]
    for line in result["output"].splitlines():  # the student's text only ever appears fenced as theirs
        if "All tests passed" in line or '"score"' in line:
            assert line.startswith("| "), line


def test_student_bytes_are_never_unpickled(box, tmp_path):
    pwned = tmp_path / "pwned"
    tests = by_function(grade(box, tmp_path, "unpickle", marker=pwned))
    assert "sent back something unreadable" in tests["causal_mask"]["output"]
    assert tests["noisy_sum"]["status"] == "passed"
    assert not pwned.exists()


def test_wire_refuses_pickles_and_malformed_tensors(tmp_path):
    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {tmp_path / 'pwned'}",))

    def message(head: bytes, data: bytes = b"") -> bytes:
        return wire.JSON_HEADER.pack(len(head)) + head + data

    bad = {"a pickle": pickle.dumps(Payload()), "nothing": b"",
           "short data": message(b'{"~T":["float32",[1000],[1],0,4000]}', bytes(8)),
           "negative stride": message(b'{"~T":["float32",[2],[-1],0,8]}', bytes(8)),
           "unknown dtype": message(b'{"~T":["object",[1],[1],0,8]}', bytes(8)),
           "unknown tag": message(b'{"~pickle":"gASV"}'), "deep": message(b"[" * 5000 + b"]" * 5000)}
    for what, data in bad.items():
        with pytest.raises(wire.WireError):
            wire.decode(data)
            pytest.fail(f"decoded {what}")
    assert not (tmp_path / "pwned").exists()
    t = torch.randn(3, 4).t()[1:]  # strides survive the trip
    assert torch.equal(back := wire.decode(wire.encode(t)), t) and back.stride() == t.stride()


def test_grading_twice_gives_identical_results(box, tmp_path):
    first = grade(box, tmp_path / "a", "randomness")
    second = grade(box, tmp_path / "b", "randomness")
    assert first["score"] == 6
    assert without_timing(first) == without_timing(second)


# ---------------------------------------------------------------- what it cannot see or reach (bwrap only)
def test_repository_references_and_output_are_invisible(bwrap_box, tmp_path):
    out = tmp_path / "out" / "results.json"
    write_json(out, {"score": 0})
    hidden = [ROOT, ROOT / "solutions", ROOT / "autograder" / "graders", ROOT / "README.md",
              CHAPTER / "test_99_toy.py", CHAPTER / f"{TOY}.py", out.parent, out,
              Path(bwrap_box._tmp.name) / "zygote.log", Path("/proc/1/root") / str(ROOT / "solutions").lstrip("/")]
    proc = student(bwrap_box, "escape")
    try:
        seen = proc.call("peek", ([str(p) for p in hidden],)).value
    finally:
        proc.close()
    venv = Path(os.sys.prefix)  # the interpreter itself is visible, at its own path: nothing else
    only_venv = f"listed: {venv.name}" if venv.parent == ROOT else "refused"
    assert seen.pop(str(ROOT)) in (only_venv, "refused: FileNotFoundError")
    assert all(v.startswith("refused") for v in seen.values()), [(k, v) for k, v in seen.items() if not v.startswith("refused")]


def test_hidden_grader_source_never_reaches_feedback(bwrap_box, tmp_path):
    result = grade(bwrap_box, tmp_path, "escape")
    assert SECRET not in json.dumps(result)
    outputs = [t["output"] for t in result["tests"] if t["score"] < t["max_score"]]
    assert result["score"] == 6, outputs


def test_loopback_server_is_unreachable(bwrap_box):
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(3)
    accepted = []
    thread = threading.Thread(target=lambda: _accept(server, accepted), daemon=True)
    thread.start()
    proc = student(bwrap_box, "escape")
    try:
        answer = proc.call("call_home", (server.getsockname()[1],)).value
    finally:
        proc.close()
        thread.join()
        server.close()
    assert answer.startswith("refused") and accepted == []


def _accept(server: socket.socket, accepted: list) -> None:
    try:
        accepted.append(server.accept())
    except OSError:
        pass


def test_student_process_has_no_privileges_left(bwrap_box):
    proc = student(bwrap_box, "privileges")
    try:
        fields = proc.call("status_fields").value
        unshared = [proc.call("try_unshare", (flag,)).value for flag in (CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWNET)]
        pids = proc.call("visible_pids").value
    finally:
        proc.close()
    for cap in ("CapEff", "CapPrm", "CapBnd", "CapAmb"):
        assert int(fields[cap], 16) == 0, fields
    assert fields["NoNewPrivs"] == "1"
    assert all(ret != 0 for ret in unshared)
    assert pids == [1]  # PID 1 of its own namespace, alone


def test_fallback_drops_what_it_can(process_box):
    proc = student(process_box, "privileges")
    try:
        fields = proc.call("status_fields").value
    finally:
        proc.close()
    assert fields["NoNewPrivs"] == "1"
    if os.geteuid() == 0:  # its own uid, and only the right to read files
        assert int(fields["Uid"].split()[0]) == process_box.host_uid
        for cap in ("CapEff", "CapPrm", "CapBnd"):  # CAP_DAC_READ_SEARCH at most (when the grader has it)
            assert int(fields[cap], 16) & ~(1 << 2) == 0, fields


def test_fallback_warns_that_isolation_is_reduced(monkeypatch):
    monkeypatch.setattr("autograder.harness.sandbox.bwrap_works", lambda: False)
    with pytest.warns(ReducedIsolationWarning, match="ISOLATION IS REDUCED"):
        assert choose_isolation("auto") == "process"
    with pytest.raises(RuntimeError, match="bubblewrap"):
        choose_isolation("bwrap")



def test_sandbox_starts_a_new_zygote_when_its_zygote_dies(process_box, tmp_path):
    """What a submission that kills the zygote (possible in the fallback without root) leads to."""
    box = process_box
    restarts, proc = box.restarts, student(box, "privileges")
    assert proc.loaded()["names"]  # its process runs: now kill the zygote in the middle of a call
    threading.Timer(0.5, os.killpg, (box.proc.pid, signal.SIGKILL)).start()
    try:
        with pytest.raises(StudentError, match="the sandbox around it died.* in `nap`"):
            proc.call("nap", (10,), timeout=5)
    finally:
        proc.close()
    assert grade(box, tmp_path)["score"] == 6
    assert box.restarts == restarts + 1
