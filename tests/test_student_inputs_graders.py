"""Per-student hidden inputs against the real graders: under random course secrets the solution and the
alternative solution keep full marks, every known-wrong variant (tests/mistakes/) still loses points,
and the reference cache stays correct.

The graders run in this process against namespaces (tests/integrity/inprocess.py), each test's body
once per (variant, secret), with the inputs `PerStudentInputs` gives that secret's student. `make test`
runs chapter 02 under 20 secrets (every variant) and 03's reference cache under one, the secrets drawn
from a fixed seed so that a failure repeats; AUTOGRADER_ALL_SECRETS=1 runs every chapter under 20
fresh random secrets (a failure message names the secret and the student).
"""
from __future__ import annotations

import hashlib
import os
import secrets

import pytest
import torch

from autograder.harness import memo
from autograder.harness.seeds import student_key
from autograder.paths import chapters
from tests.integrity.inprocess import grade_variants

SECRETS = 20
EXPLORE = bool(os.environ.get("AUTOGRADER_ALL_SECRETS"))
FULL = ["02_attention"] + (sorted(set(chapters()) - {"02_attention"}) if EXPLORE else [])


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny tensors: one torch thread is 3x faster here than a pool fighting other jobs for the cores."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def random_keys(n: int) -> dict[bytes, str]:
    """The keys of n students, each under a secret of its own -> "secret HEX, student ID" (to repeat it)."""
    drawn = [secrets.token_bytes(32) if EXPLORE else hashlib.sha256(f"secret {i}".encode()).digest()
             for i in range(n)]
    return {student_key(s, f"student{i}"): f"secret {s.hex()}, student{i}" for i, s in enumerate(drawn)}


@pytest.mark.parametrize("chapter", FULL)
def test_full_marks_and_every_known_mistake_caught_under_random_secrets(chapter):
    keys = random_keys(SECRETS)
    graded = grade_variants(chapter, list(keys))
    variants = sorted({name for name, _ in graded.ran})
    assert "solution" in variants and len(variants) > 2
    for name in variants:
        ran = [graded.ran[(name, k)] for k in keys]
        assert min(ran) > 0, f"{name}: no test ran under some secret"
        lost = {keys[k]: graded.failed.get((name, k), []) for k in keys}
        if name.startswith("mistake"):
            missed = [who for who, failed in lost.items() if not failed]
            assert not missed, f"{name}: not caught under {len(missed)} of {SECRETS} secrets ({missed[0]})"
        else:
            assert not any(lost.values()), f"{name} lost points: {[(w, f) for w, f in lost.items() if f][0]}"


def test_the_reference_cache_stays_correct_under_per_student_inputs(monkeypatch):
    """Verify mode recomputes every hit: the unshifted runs still share values, the students' runs
    compute their own (bypassing the cache), and every run keeps full marks."""
    monkeypatch.setenv("AUTOGRADER_REFERENCE_CACHE", "verify")
    memo.clear()
    graded = grade_variants("03_transformer", list(random_keys(1)), mistake_keys=0)
    assert memo.STATS["hits"] > 0 and memo.STATS["uncached"] > 0, memo.STATS
    assert not memo.MISMATCHES, memo.MISMATCHES
    assert not any(graded.failed.values()), dict(graded.failed)
    memo.clear()
