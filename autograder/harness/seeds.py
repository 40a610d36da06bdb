"""The seeds of the graders' inputs: moved for the public checks, and per student with a course secret.

Graders draw every input from a seed: `check.seeded(n)` and, for the reference's weights,
`torch.manual_seed(n)`. `shifted_seeds(offset)` moves both by `offset` while it is active (the
trusted process only: the student process seeds itself). `make release` uses it to draw the
public checks' inputs; `PerStudentInputs` uses it in every graded test with an offset derived
from the course secret, the student and the test:

    key    = HMAC-SHA256(secret, "student:" + student id)     # student_key(), once per submission
    offset = 2**20 + HMAC-SHA256(key, chapter + ":" + test)   # test_offset(), 48 bits

so two students get different inputs, a regrade of one student the same ones, and a new secret
(each term) new ones. The secret and the keys stay in the trusted grading processes: student code
sees only its inputs.
"""
from __future__ import annotations

import contextlib
import hashlib
import hmac
from pathlib import Path
from typing import Iterator

import pytest
import torch

from autograder.harness import memo
from autograder.harness import offset as seed_offset

REAL_MANUAL_SEED = torch.manual_seed
MIN_OFFSET = 2**20  # far from 0 (the graders' own inputs) and from the public checks' small shift
MIN_SECRET_BYTES = 16


def read_secret(path: str | Path) -> bytes:
    """The course secret in `path` (its bytes, surrounding whitespace removed); ValueError if too short."""
    secret = Path(path).read_bytes().strip()
    if len(secret) < MIN_SECRET_BYTES:
        raise ValueError(f"{path}: a course secret needs at least {MIN_SECRET_BYTES} bytes; make one with "
                         "`python -c \"import secrets; print(secrets.token_hex(32))\" > FILE`")
    return secret


def student_key(secret: bytes, student: str) -> bytes:
    """The key of one student's inputs."""
    return hmac.new(secret, b"student:" + student.encode(), hashlib.sha256).digest()


def inputs_id(key: bytes | None) -> str | None:
    """What results.json records of a student's inputs key (None: the shared inputs): a hash of the key,
    so that a result graded under another secret, or without one, is not taken as current."""
    return hashlib.sha256(key).hexdigest()[:16] if key else None


def test_offset(key: bytes, test: str) -> int:
    """The seed offset of one test (`chapter:test_name`) for the student of `key`."""
    digest = hmac.new(key, test.encode(), hashlib.sha256).digest()
    return MIN_OFFSET + int.from_bytes(digest[:6], "big")


test_offset.__test__ = False  # not a pytest test


@contextlib.contextmanager
def shifted_seeds(offset: int) -> Iterator[None]:
    """Every grader seed moved by `offset` while active: `seeded(n)` and `torch.manual_seed(n)`."""
    old_offset, old_manual_seed = seed_offset.SEED_OFFSET, torch.manual_seed
    seed_offset.SEED_OFFSET = offset
    if offset:
        torch.manual_seed = lambda seed: REAL_MANUAL_SEED(int(seed) + offset)
    try:
        yield
    finally:
        seed_offset.SEED_OFFSET, torch.manual_seed = old_offset, old_manual_seed


@contextlib.contextmanager
def real_seeds() -> Iterator[None]:
    """torch.manual_seed as it is, within a shift (what the student side of a request sees)."""
    shifted, torch.manual_seed = torch.manual_seed, REAL_MANUAL_SEED
    try:
        yield
    finally:
        torch.manual_seed = shifted


class PerStudentInputs:
    """A pytest plugin: each graded test runs with its seeds shifted by `test_offset(key, chapter:test)`.

    The shift covers the test's body only (fixtures, such as the reference, are built unshifted), and
    the reference cache steps aside (`memo.bypassed`): no other student could reuse a value.
    """

    def __init__(self, key: bytes, chapter: str) -> None:
        self.key, self.chapter = key, chapter

    @contextlib.contextmanager
    def inputs(self, test: str) -> Iterator[None]:
        """While active, the seeds of test `test` (its function's name) are this student's."""
        with shifted_seeds(test_offset(self.key, f"{self.chapter}:{test}")), memo.bypassed():
            yield

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_call(self, item):
        with self.inputs(item.name):
            return (yield)
