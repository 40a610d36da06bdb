"""Fixtures of the submission service's tests: a database (SQLite; PostgreSQL where one can be started),
the toy chapter (tests/batch/toy.py), a roster of two students with tokens, and the app in process."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.batch.toy import CHAPTER, toy_chapter  # noqa: F401 - a fixture
from tests.service.postgres import Server


@pytest.fixture(scope="session")
def postgres():
    server = Server()
    why = server.start()
    yield server if not why else why
    server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'service.sqlite'}"
    server = request.getfixturevalue("postgres")
    if isinstance(server, str):
        pytest.skip(f"PostgreSQL tests skipped: {server}")
    return server.create()


@dataclass
class Service:
    app: object
    db: object
    folder: Path
    tokens: dict  # "alice", "bob", "instructor" -> token


def make_service(db_url: str, folder: Path, **config) -> Service:
    from autograder.service import tokens
    from autograder.service.app import Config, create_app
    from autograder.service.store import open_db
    db = open_db(db_url)
    issued = tokens.issue(db, [("alice", "Alice A"), ("bob", "Bob B")])
    toks = {sid: token for sid, _, token in issued}
    toks["instructor"] = tokens.issue_instructor(db)
    folder.mkdir(parents=True, exist_ok=True)
    return Service(create_app(Config(folder, db, [CHAPTER], **config)), db, folder, toks)


@pytest.fixture
def service(toy_chapter, db_url, tmp_path):  # noqa: F811 - the fixture above
    return make_service(db_url, tmp_path / "svc", max_bytes=200_000, rate=(4, 600.0))


def csrf_of(html: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', html)
    assert match, "no CSRF field in the page"
    return match.group(1)


def signed_in(service: Service, who: str):
    """A TestClient signed in as `who` with its token, as a browser does."""
    from fastapi.testclient import TestClient
    client = TestClient(service.app, follow_redirects=False)
    client.__enter__()
    page = client.get("/")
    r = client.post("/signin", data={"token": service.tokens[who], "csrf": csrf_of(page.text)})
    assert r.status_code == 303, r.text
    return client
