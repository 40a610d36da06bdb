"""The submission service in Chromium, as its users go through it (`make test-book` runs it).

A student signs in with their token, hands in a notebook with a known mistake, reads the named
mistake, fixes it and gets full marks, and cannot open another student's attempt. The instructor
sees both attempts, downloads the LMS CSV and regrades. A real service (subprocess) grades the toy
chapter of tests/batch/toy.py.
"""
from __future__ import annotations

import re

import pytest

from autograder.service import tokens
from autograder.service.store import open_db
from tests.batch.toy import CHAPTER, make_notebook, toy_chapter  # noqa: F401 - a fixture
from tests.browser.conftest import SHOTS
from tests.service.live import Live

GRADED = 180_000  # ms a grading may take on a loaded machine (the first one starts the worker)


@pytest.fixture
def live(toy_chapter, tmp_path):  # noqa: F811
    folder = tmp_path / "svc"
    folder.mkdir()
    url = f"sqlite:///{folder / 'service.sqlite'}"
    db = open_db(url)
    issued = {sid: tok for sid, _, tok in tokens.issue(db, [("alice", "Alice A"), ("bob", "Bob B")])}
    issued["instructor"] = tokens.issue_instructor(db)
    server = Live(folder, url, [CHAPTER], "--graders", "1").start()
    server.tokens = issued
    yield server
    server.stop()


def signed_in(browser, live, who: str):
    context = browser.new_context(viewport={"width": 1100, "height": 900}, accept_downloads=True)
    page = context.new_page()
    page.route("**/*", lambda route: route.continue_() if route.request.url.startswith(
        ("http://127.0.0.1", "data:", "about:")) else route.abort())
    page.goto(live.url + "/")
    page.get_by_label("Your personal token").fill(live.tokens[who])
    page.get_by_role("button", name="Sign in").click()
    return page


def hand_in(page, live, notebook) -> int:
    page.goto(live.url + "/me")
    page.get_by_label("Notebook (.ipynb)").set_input_files(str(notebook))
    page.get_by_role("button", name="Submit").click()
    page.wait_for_url(re.compile(r"/submissions/\d+$"))
    return int(page.url.rsplit("/", 1)[1])


def test_a_student_reads_the_mistake_fixes_it_and_cannot_read_another(browser, live, tmp_path):
    from playwright.sync_api import expect
    alice = signed_in(browser, live, "alice")
    expect(alice.get_by_role("heading", name="Your submissions")).to_be_visible()
    first = hand_in(alice, live, make_notebook(tmp_path / "wrong" / f"{CHAPTER}.ipynb", "wrong"))
    expect(alice.locator("#feedback")).to_contain_text("known mistake: a - b", timeout=GRADED)
    expect(alice.locator("#feedback")).to_contain_text("What went wrong, by function")
    SHOTS.mkdir(parents=True, exist_ok=True)
    alice.screenshot(path=str(SHOTS / "service-feedback.png"), full_page=True)
    second = hand_in(alice, live, make_notebook(tmp_path / "ok" / f"{CHAPTER}.ipynb", "ok"))
    expect(alice.locator("#score")).to_have_text("4 / 4", timeout=GRADED)
    expect(alice.locator("#feedback")).to_contain_text("total: 4 / 4")

    bob = signed_in(browser, live, "bob")
    theirs = hand_in(bob, live, make_notebook(tmp_path / "bob" / f"{CHAPTER}.ipynb", "wrong"))
    expect(bob.locator("#feedback")).to_contain_text("known mistake", timeout=GRADED)
    response = alice.goto(f"{live.url}/submissions/{theirs}")
    assert response.status == 404
    expect(alice.locator("body")).to_contain_text("no such submission")
    expect(alice.locator("body")).not_to_contain_text("known mistake")
    assert alice.goto(f"{live.url}/instructor").status == 404

    teacher = signed_in(browser, live, "instructor")
    expect(teacher.get_by_role("heading", name="Class dashboard")).to_be_visible()
    teacher.get_by_role("link", name="alice").click()
    expect(teacher.get_by_role("link", name=f"#{first}")).to_be_visible()
    expect(teacher.get_by_role("link", name=f"#{second}")).to_be_visible()
    teacher.screenshot(path=str(SHOTS / "service-history.png"), full_page=True)
    teacher.goto(live.url + "/instructor")
    with teacher.expect_download() as download:
        teacher.get_by_role("link", name="LMS CSV").click()
    rows = open(download.value.path()).read().split()
    assert rows == ["student_id,score", "alice,4", "bob,1"]
    teacher.get_by_role("button", name="Regrade all").click()
    expect(teacher.get_by_role("alert")).to_contain_text("regrading 3 submissions")
    for _ in range(GRADED // 2000):  # each attempt graded a second time
        teacher.goto(f"{live.url}/instructor/students/alice")
        if teacher.locator("td", has_text=re.compile(r"^2$")).count() == 2:
            break
        teacher.wait_for_timeout(2000)
    expect(teacher.locator("td", has_text=re.compile(r"^2$"))).to_have_count(2)
