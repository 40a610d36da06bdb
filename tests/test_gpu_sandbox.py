"""Grading on a GPU machine, checked on any machine (book/instructors/sandbox.md, "Grading on a GPU").

The sandbox exposes the GPU's device nodes after bubblewrap makes /dev, bounds
host memory with RLIMIT_DATA (which CUDA's start-up survives, unlike
RLIMIT_AS), and CUDA tests count only where the sandboxed student process
reports that CUDA works.
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


def test_cuda_tests_are_skipped_when_the_student_process_has_no_cuda(box, monkeypatch, tmp_path):
    """The grader sees a GPU (patched here), the sandboxed worker reports none: not counted, a warning."""
    monkeypatch.setenv("AUTOGRADER_SOLUTIONS", str(CHAPTER))
    monkeypatch.setenv("AUTOGRADER_GRADERS", str(CHAPTER))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    box._cuda = None  # probe again, as a fresh sandbox would
    result = grade_submission(CHAPTER / "99_toy.py", box)
    assert result["extra_data"]["cuda"] is False
    assert not any("GPU" in t["name"] for t in result["tests"]), "a CUDA test was counted"
    assert result["score"] == result["max_score"] == max_points("99_toy", cuda=False)
    assert max_points("99_toy", cuda=True) > max_points("99_toy", cuda=False)
    assert "could not use it" in result["output"]
