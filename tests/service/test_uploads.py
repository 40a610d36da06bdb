"""Uploads are size-limited and type-checked; a bad one gets a clear message and stores nothing; a
student's rate of submissions is limited."""
from __future__ import annotations

import json

import pytest

from autograder.service import queue
from tests.batch.toy import CHAPTER, make_notebook
from tests.service.conftest import csrf_of, signed_in


def upload(client, name: str, raw: bytes, chapter: str = CHAPTER):
    return client.post("/submit", data={"chapter": chapter, "csrf": csrf_of(client.get("/me").text)},
                       files={"notebook": (name, raw, "application/octet-stream")})


def notebook(tmp_path, **metadata) -> bytes:
    nb = json.loads(make_notebook(tmp_path / "nb.ipynb").read_text())
    nb["metadata"].update(metadata)
    return json.dumps(nb).encode()


@pytest.mark.parametrize("name, make, message", [
    ("98_batch_toy.ipynb", lambda t: b"", "the file is empty"),
    ("98_batch_toy.ipynb", lambda t: b"{not json", "not valid JSON"),
    ("98_batch_toy.ipynb", lambda t: b"%PDF-1.4 ...", "a PDF document"),
    ("98_batch_toy.pdf", lambda t: b"%PDF-1.4 ...", "upload your notebook"),
    ("98_batch_toy.ipynb", lambda t: notebook(t, course={"chapter": "02_attention"}),
     "this is the notebook of chapter 02_attention, not of 98_batch_toy"),
    ("98_batch_toy.ipynb", lambda t: json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {},
                                                 "cells": [{"cell_type": "code", "source": "x = 1"}]}).encode(),
     "does not follow the notebook format"),
    ("98_batch_toy.ipynb", lambda t: b"x" * 300_000, "over the"),
])
def test_a_bad_upload_gets_a_clear_message_and_stores_nothing(service, tmp_path, name, make, message):
    alice = signed_in(service, "alice")
    r = upload(alice, name, make(tmp_path))
    assert r.status_code in (400, 413), r.status_code
    assert message in r.text.replace("&#39;", "'")
    assert queue.pending(service.db) == 0


def test_an_assignment_that_is_not_open_is_refused(service, tmp_path):
    r = upload(signed_in(service, "alice"), f"{CHAPTER}.ipynb", notebook(tmp_path), chapter="02_attention")
    assert r.status_code == 400 and "no open assignment" in r.text


def test_a_student_may_hand_in_only_so_often(service, tmp_path):
    alice, raw = signed_in(service, "alice"), notebook(tmp_path)
    for _ in range(4):  # the fixture's limit: 4 in 10 minutes
        assert upload(alice, f"{CHAPTER}.ipynb", raw).status_code == 303
    r = upload(alice, f"{CHAPTER}.ipynb", raw)
    assert r.status_code == 429 and "wait a few minutes" in r.text
    assert upload(signed_in(service, "bob"), f"{CHAPTER}.ipynb", raw).status_code == 303  # per student
    assert queue.pending(service.db) == 5
