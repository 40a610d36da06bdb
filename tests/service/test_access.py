"""Nobody in where they do not belong: a student reads only their own attempts (tested with another
student's ids), instructor pages need the instructor's token, forms need their CSRF token, cookies
are HttpOnly and SameSite."""
from __future__ import annotations

import hashlib

from autograder.service import queue
from tests.batch.toy import CHAPTER, make_notebook
from tests.service.conftest import csrf_of, signed_in

SECRET = "ALICE-ONLY: your attention weights sum to 2"


def graded_attempt(service, student: str, text: str, tmp_path) -> int:
    """An attempt of `student`, stored and graded (by hand: these tests need no grader)."""
    raw = make_notebook(tmp_path / f"{student}.ipynb").read_bytes()
    sub_id = queue.accept(service.db, student, CHAPTER, f"{CHAPTER}.ipynb", raw, hashlib.sha256(raw).hexdigest())
    claim = queue.claim(service.db, "test", 60)
    assert claim.id == sub_id
    queue.finish(service.db, claim, {"score": 1.0, "max_score": 4.0, "output": f"Chapter: 1 / 4 points.\n\n{text}",
                                     "tests": [], "extra_data": {"status": "graded"}}, "test")
    return sub_id


def test_a_student_reads_only_their_own_attempts(service, tmp_path):
    theirs = graded_attempt(service, "alice", SECRET, tmp_path)
    alice, bob = signed_in(service, "alice"), signed_in(service, "bob")
    own = alice.get(f"/submissions/{theirs}")
    assert own.status_code == 200 and SECRET in own.text  # the page does show feedback to its owner
    other = bob.get(f"/submissions/{theirs}")
    assert other.status_code == 404 and SECRET not in other.text
    assert SECRET not in bob.get("/me").text and f"/submissions/{theirs}" not in bob.get("/me").text
    api = bob.get(f"/api/submissions/{theirs}", headers={"Authorization": f"Bearer {service.tokens['bob']}"})
    assert api.status_code == 404 and SECRET not in api.text
    assert alice.get(f"/api/submissions/{theirs}").json()["feedback"].endswith(SECRET)


def test_instructor_pages_need_the_instructor_token(service, tmp_path):
    graded_attempt(service, "alice", SECRET, tmp_path)
    alice = signed_in(service, "alice")
    for page in ("/instructor", f"/instructor/{CHAPTER}/lms.csv", f"/instructor/{CHAPTER}/grades.csv",
                 f"/instructor/{CHAPTER}/gradescope.zip", "/instructor/students/alice"):
        assert alice.get(page).status_code == 404, page
        api = alice.get(page, headers={"Authorization": f"Bearer {service.tokens['alice']}"})
        assert api.status_code == 404 and "Alice A" not in api.text, page
    assert alice.post("/instructor/regrade", data={"csrf": csrf_of(alice.get("/me").text)}).status_code == 404
    from fastapi.testclient import TestClient
    anonymous = TestClient(service.app, follow_redirects=False)
    assert anonymous.get("/instructor").status_code == 303  # to the sign-in page
    teacher = signed_in(service, "instructor")
    page = teacher.get("/instructor")
    assert page.status_code == 200 and "Alice A" in page.text and "Bob B" in page.text
    assert "alice,1" in teacher.get(f"/instructor/{CHAPTER}/lms.csv").text
    autograder_zip = teacher.get(f"/instructor/{CHAPTER}/gradescope.zip")  # the chapter's Gradescope autograder
    assert autograder_zip.status_code == 200 and autograder_zip.content[:2] == b"PK"


def test_a_wrong_token_signs_nobody_in(service):
    from fastapi.testclient import TestClient
    client = TestClient(service.app, follow_redirects=False)
    page = client.get("/")
    r = client.post("/signin", data={"token": service.tokens["alice"][:-2] + "xx", "csrf": csrf_of(page.text)})
    assert r.status_code == 401 and "not valid" in r.text
    assert client.get("/me").status_code == 303
    api = client.get("/api/submissions/1", headers={"Authorization": "Bearer nonsense"})
    assert api.status_code == 401


def test_cookies_are_httponly_and_samesite(service):
    from fastapi.testclient import TestClient
    client = TestClient(service.app, follow_redirects=False)
    page = client.get("/")
    r = client.post("/signin", data={"token": service.tokens["alice"], "csrf": csrf_of(page.text)})
    cookies = r.headers.get_list("set-cookie")
    session = next(c for c in cookies if c.startswith("attn_session="))
    assert "httponly" in session.lower() and "samesite=strict" in session.lower()
    assert service.tokens["alice"] not in session  # the cookie is a session id, never the token


def test_forms_need_their_csrf_token(service, tmp_path):
    alice = signed_in(service, "alice")
    raw = make_notebook(tmp_path / "nb.ipynb").read_bytes()
    files = {"notebook": (f"{CHAPTER}.ipynb", raw, "application/x-ipynb+json")}
    r = alice.post("/submit", data={"chapter": CHAPTER, "csrf": "forged"}, files=files)
    assert r.status_code == 403
    assert queue.pending(service.db) == 0  # nothing stored
    r = alice.post("/submit", data={"chapter": CHAPTER, "csrf": csrf_of(alice.get("/me").text)}, files=files)
    assert r.status_code == 303 and queue.pending(service.db) == 1
    from fastapi.testclient import TestClient
    fresh = TestClient(service.app, follow_redirects=False)  # no sign-in form fetched: no login cookie
    assert fresh.post("/signin", data={"token": service.tokens["alice"], "csrf": "x"}).status_code == 403
