"""Grading on a GPU machine, checked on any machine (book/instructors/sandbox.md, "Grading on a GPU").

The sandbox exposes the GPU's device nodes after bubblewrap makes /dev, bounds
host memory with RLIMIT_DATA (which CUDA's start-up survives, unlike
RLIMIT_AS), and CUDA tests count on every machine (on the simulated CUDA
device where the sandboxed student process reports no usable CUDA).
"""
from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from autograder.grade import grade_submission, max_points
from autograder.harness.sandbox import Limits, Sandbox, bwrap_command, gpu_binds
from autograder.harness.student import StudentProcess

HERE = Path(__file__).resolve().parent
CHAPTER = HERE / "hostile" / "chapter"
LIMITS = Limits(call_seconds=5, load_seconds=20, submission_seconds=60, memory_bytes=1 << 30)


def test_gpu_nodes_come_after_dev_and_nothing_else_is_added():
    nodes = ["/dev/nvidia0", "/dev/nvidia-uvm", "/dev/nvidiactl"]
    plain = bwrap_command(["bwrap"], "/stage", "/grader", {"A": "1"}, [], 3)
    gpu = bwrap_command(["bwrap"], "/stage", "/grader", {"A": "1"}, nodes, 3)
    dev = gpu.index("--dev")
    for node in nodes:
        at = gpu.index(node)
        assert gpu[at - 1] == "--dev-bind" and gpu[at + 1] == node
        assert at > dev, f"{node} is bound before --dev /dev, which hides it"
    assert [a for a in gpu if a not in gpu_binds(nodes)] == [a for a in plain if a != "--dev-bind"]
    assert len(gpu) == len(plain) + 3 * len(nodes)


def test_set_limits_bounds_data_not_address_space():
    code = ("import resource\nfrom autograder.harness.zygote import set_limits\n"
            "set_limits({'data_extra': 1 << 30})\n"
            "print(resource.getrlimit(resource.RLIMIT_DATA)[0], resource.getrlimit(resource.RLIMIT_AS)[0])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    data, address = map(int, out.split())
    assert address == resource.RLIM_INFINITY, "RLIMIT_AS would stop CUDA from starting"
    assert (1 << 30) < data < (1 << 30) + (8 << 30)


@pytest.fixture(scope="module")
def box():
    with Sandbox(LIMITS, isolation="process") as sandbox:
        yield sandbox


def test_student_process_gets_data_limit_only(box):
    cell = ("import resource\n"
            "def rlimits():\n"
            "    return [resource.getrlimit(resource.RLIMIT_AS)[0], resource.getrlimit(resource.RLIMIT_DATA)[0]]\n")
    student = StudentProcess(box, [{"cell_type": "code", "source": cell, "tags": []}])
    try:
        address, data = student.rlimits()
    finally:
        student.close()
    assert address == resource.RLIM_INFINITY
    assert data != resource.RLIM_INFINITY and 0 < data < (LIMITS.memory_bytes + (8 << 30))


def test_host_memory_beyond_the_limit_still_fails_cleanly(box):
    cell = ("import torch\n"
            "def hog():\n"
            "    return torch.ones(3 << 30, dtype=torch.uint8).sum()\n")
    student = StudentProcess(box, [{"cell_type": "code", "source": cell, "tags": []}])
    try:
        with pytest.raises(Exception, match="ran out of memory"):
            student.hog()
    finally:
        student.close()


@pytest.mark.parametrize("grader_sees_gpu", [False, True])
def test_totals_are_the_same_with_cuda_present_and_absent(box, monkeypatch, grader_sees_gpu):
    """One maximum on every machine: the CUDA test counts whether the sandbox can use CUDA (patched to
    yes here) or not (it runs on the simulated device), and a correct notebook gets every point."""
    monkeypatch.setenv("AUTOGRADER_SOLUTIONS", str(CHAPTER))
    monkeypatch.setenv("AUTOGRADER_GRADERS", str(CHAPTER))
    totals = {}
    for usable in (False, True):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: grader_sees_gpu or usable)
        monkeypatch.setattr(box, "cuda", usable)  # what student.cuda_usable says
        result = grade_submission(CHAPTER / "99_toy.py", box)
        assert result["extra_data"]["cuda"] is usable
        assert any("GPU" in t["name"] and t["status"] == "passed" for t in result["tests"]), "no CUDA test ran"
        totals[usable] = (result["score"], result["max_score"])
        assert ("simulated CUDA device" in result["output"]) == (grader_sees_gpu and not usable)
    assert totals[False] == totals[True] == (max_points("99_toy"), max_points("99_toy"))
