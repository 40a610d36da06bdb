"""The web side: sign-in, upload, status and feedback for students; the dashboard for instructors.

Who may see what:
- a student sees only their own attempts: any other id answers 404, as if it did not exist;
- the instructor's pages need the instructor's token;
- a browser signs in once with the token and then holds a session cookie (HttpOnly, SameSite=Strict,
  Secure behind HTTPS); every form carries the session's CSRF token; `python -m attnkit submit`
  sends the token itself (`Authorization: Bearer`) and needs no cookie.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import secrets
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse, Response
from sqlalchemy import delete, func, select

from autograder.batch import deadlines
from autograder.harness.results import function_report
from autograder.service import classes, queue, tokens, uploads
from autograder.service.pages import render
from autograder.service.store import Result, Session, Student, Submission, aware, now

COOKIE = "attn_session"
LOGIN_COOKIE = "attn_login"  # the sign-in form's CSRF token (double submit: no session yet)


@dataclass
class Config:
    """How the service runs (`python -m autograder serve` fills it from its options)."""

    folder: Path
    db: object  # a sessionmaker on a migrated database
    chapters: list[str]
    max_bytes: int = 5 * 2**20
    rate: tuple[int, float] = (10, 600.0)  # at most this many submissions per student in this many seconds
    secure_cookies: bool = False  # set behind HTTPS: cookies then travel over HTTPS only
    session_hours: float = 12.0
    on_start: list = field(default_factory=list)  # callables run at start-up (the graders)
    on_stop: list = field(default_factory=list)


@dataclass(frozen=True)
class Who:
    role: str  # "student" | "instructor"
    student_id: str | None
    csrf: str = ""
    api: bool = False

    @property
    def label(self) -> str:
        return self.student_id if self.role == "student" else "instructor"


class Denied(Exception):
    """Not signed in, or not allowed: the page answers `status`."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def when(t) -> str:
    return aware(t).strftime("%Y-%m-%d %H:%M:%S") if t else ""


def create_app(config: Config) -> FastAPI:
    db = config.db

    @contextlib.asynccontextmanager
    async def lifespan(app):
        uploads.warm()
        for start in config.on_start:
            start()
        yield
        for stop in config.on_stop:
            stop()

    app = FastAPI(title="Attention course submissions", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)

    @app.middleware("http")
    async def headers(request: Request, call_next):
        response = await call_next(request)
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("X-Frame-Options", "DENY")
        response.headers.setdefault("Referrer-Policy", "no-referrer")
        response.headers.setdefault("Content-Security-Policy",
                                    "default-src 'self'; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'")
        response.headers.setdefault("Cache-Control", "no-store")
        return response

    @app.exception_handler(Denied)
    async def denied(request: Request, exc: Denied):
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": exc.message}, exc.status)
        if exc.status == 401:
            return RedirectResponse("/", 303)
        return HTMLResponse(render("message", title="Not here", error=exc.message, back="/"), exc.status)

    # ------------------------------------------------------------ who is asking
    def who(request: Request) -> Who:
        auth = request.headers.get("authorization", "")
        if auth.lower().startswith("bearer "):
            found = tokens.who(db, auth[7:].strip())
            if found is None:
                raise Denied(401, "that token is not valid")
            return Who(found[0], found[1], api=True)
        cookie = request.cookies.get(COOKIE)
        if cookie:
            with db() as s:
                row = s.get(Session, digest(cookie))
                if row is not None and aware(row.expires_at) > now():
                    return Who("student" if row.student_id else "instructor", row.student_id, row.csrf)
        raise Denied(401, "sign in first")

    def student(request: Request) -> Who:
        w = who(request)
        if w.role != "student":
            raise Denied(403, "this page is for students; the instructor's is /instructor")
        return w

    def instructor(request: Request) -> Who:
        w = who(request)
        if w.role != "instructor":
            raise Denied(404, "no such page")
        return w

    async def form_of(request: Request, w: Who | None = None, max_files: int = 0):
        """The request's form, its CSRF token checked against the session's (not for API calls)."""
        length = int(request.headers.get("content-length") or 0)
        if length > config.max_bytes + 2**16:
            raise Denied(413, f"the upload is over the {config.max_bytes / 2**20:g} MiB limit")
        form = await request.form(max_files=max_files, max_fields=8)
        if w is not None and not w.api and not secrets.compare_digest(str(form.get("csrf", "")), w.csrf):
            raise Denied(403, "this form has expired (or came from another site): reload the page and try again")
        return form

    # ------------------------------------------------------------ signing in and out
    @app.get("/", response_class=HTMLResponse)
    def home(request: Request):
        with contextlib.suppress(Denied):
            w = who(request)
            return RedirectResponse("/me" if w.role == "student" else "/instructor", 303)
        login = secrets.token_urlsafe(16)
        response = HTMLResponse(render("signin", title="Sign in", csrf=login))
        set_cookie(response, LOGIN_COOKIE, login, 600)
        return response

    @app.post("/signin")
    async def signin(request: Request):
        form = await request.form(max_files=0, max_fields=4)
        expected = request.cookies.get(LOGIN_COOKIE, "")
        if not expected or not secrets.compare_digest(str(form.get("csrf", "")), expected):
            return HTMLResponse(render("message", title="Sign in", back="/",
                                       error="this form has expired: reload the page and sign in again"), 403)
        found = tokens.who(db, str(form.get("token", "")))
        if found is None:
            return HTMLResponse(render("message", title="Sign in", back="/",
                                       error="that token is not valid: copy it again from your instructor's message"),
                                401)
        cookie = secrets.token_urlsafe(32)
        with db.begin() as s:
            s.execute(delete(Session).where(Session.expires_at < now()))  # old sessions go
            s.add(Session(id_hash=digest(cookie), student_id=found[1], csrf=secrets.token_urlsafe(24),
                          expires_at=now() + timedelta(hours=config.session_hours)))
        response = RedirectResponse("/me" if found[0] == "student" else "/instructor", 303)
        set_cookie(response, COOKIE, cookie, int(config.session_hours * 3600))
        response.delete_cookie(LOGIN_COOKIE)
        return response

    @app.post("/signout")
    async def signout(request: Request):
        w = who(request)
        await form_of(request, w)
        with db.begin() as s:
            row = s.get(Session, digest(request.cookies.get(COOKIE, "")))
            if row is not None:
                s.delete(row)
        response = RedirectResponse("/", 303)
        response.delete_cookie(COOKIE)
        return response

    def set_cookie(response: Response, name: str, value: str, max_age: int) -> None:
        response.set_cookie(name, value, max_age=max_age, httponly=True, samesite="strict",
                            secure=config.secure_cookies, path="/")

    # ------------------------------------------------------------ students
    def chapter_choices() -> list[dict]:
        out = []
        for ch in config.chapters:
            d = deadlines.load(Path(config.folder) / ch)
            out.append({"name": ch, "due": d.due.strftime("%Y-%m-%d %H:%M %Z") if d else ""})
        return out

    def attempt_rows(s, student_id: str) -> list[dict]:
        rows = []
        for sub in s.scalars(select(Submission).where(Submission.student_id == student_id)
                             .order_by(Submission.id.desc())):
            res = queue.latest_result(s, sub.id)
            penalty = ""
            if res is not None:
                lateness = json.loads(res.result).get("extra_data", {}).get("late") or {}
                penalty = f"{lateness['penalty']:g}" if lateness.get("penalty") else ""
            rows.append({"id": sub.id, "chapter": sub.chapter, "when": when(sub.submitted_at),
                         "status": sub.status if res is None or sub.status in queue.ACTIVE else res.status,
                         "score": f"{res.score:g} / {res.max_score:g}" if res else "", "penalty": penalty,
                         "rounds": s.scalar(select(func.count()).select_from(Result)
                                            .where(Result.submission_id == sub.id))})
        return rows

    @app.get("/me", response_class=HTMLResponse)
    def me(request: Request, error: str = ""):
        w = student(request)
        with db() as s:
            rows = attempt_rows(s, w.student_id)
        return render("student", title="Your submissions", who=w.label, csrf=w.csrf, chapters=chapter_choices(),
                      attempts=rows, error=error)

    def too_many(student_id: str) -> str:
        limit, seconds = config.rate
        with db() as s:
            recent = s.scalar(select(func.count()).select_from(Submission).where(
                Submission.student_id == student_id, Submission.submitted_at > now() - timedelta(seconds=seconds)))
        if recent >= limit:
            return (f"you have handed in {recent} notebooks in the last {seconds / 60:g} minutes, the most "
                    f"allowed: wait a few minutes, and check your notebook with `python -m attnkit check` meanwhile")
        return ""

    async def accept_upload(request: Request, w: Who) -> tuple[int | None, str, int]:
        """(submission id, "", 200) or (None, why not, HTTP status)."""
        form = await form_of(request, w, max_files=1)
        upload, chapter = form.get("notebook"), str(form.get("chapter", ""))
        if upload is None or isinstance(upload, str):
            return None, "no file: choose your notebook (.ipynb) and submit again", 400
        raw = await upload.read(config.max_bytes + 1)
        return await run_in_threadpool(store_upload, w, raw, upload.filename or "", chapter)

    def store_upload(w: Who, raw: bytes, filename: str, chapter: str) -> tuple[int | None, str, int]:
        try:
            uploads.check(raw, filename, chapter, config.chapters, config.max_bytes)
        except uploads.Refused as exc:
            return None, f"Not accepted: {exc}", 413 if len(raw) > config.max_bytes else 400
        busy = too_many(w.student_id)
        if busy:
            return None, f"Not accepted: {busy}", 429
        sub_id = queue.accept(db, w.student_id, chapter, Path(filename).name[:300], raw,
                              hashlib.sha256(raw).hexdigest())
        return sub_id, "", 200  # committed: only now is the upload acknowledged

    @app.post("/submit")
    async def submit_page(request: Request):
        w = student(request)
        sub_id, problem, status = await accept_upload(request, w)
        if sub_id is None:
            with db() as s:
                rows = attempt_rows(s, w.student_id)
            return HTMLResponse(render("student", title="Your submissions", who=w.label, csrf=w.csrf,
                                       chapters=chapter_choices(), attempts=rows, error=problem), status)
        return RedirectResponse(f"/submissions/{sub_id}", 303)

    def own_submission(s, w: Who, sub_id: int) -> Submission:
        sub = s.get(Submission, sub_id)
        if sub is None or (w.role == "student" and sub.student_id != w.student_id):
            raise Denied(404, "no such submission")  # another student's reads as missing
        return sub

    def view(s, sub: Submission) -> dict:
        res = queue.latest_result(s, sub.id)
        result = json.loads(res.result) if res else None
        return {"id": sub.id, "chapter": sub.chapter, "filename": sub.filename, "student": sub.student_id,
                "when": when(sub.submitted_at), "status": "done" if result and sub.status == "done" else sub.status,
                "place": queue.place(s, sub),
                "score": f"{res.score:g} / {res.max_score:g}" if res else "",
                "feedback": function_report(result) if result else "",
                "result_status": res.status if res else ""}

    @app.get("/submissions/{sub_id}", response_class=HTMLResponse)
    def submission_page(request: Request, sub_id: int):
        w = who(request)
        with db() as s:
            v = view(s, own_submission(s, w, sub_id))
        back = "/me" if w.role == "student" else f"/instructor/students/{v['student']}"
        return render("submission", title=f"Attempt #{v['id']}", who=w.label, csrf=w.csrf, sub=v,
                      place=v["place"], feedback=v["feedback"], back=back,
                      refresh=2 if v["status"] in queue.ACTIVE else 0)

    # ------------------------------------------------------------ the API (python -m attnkit submit)
    @app.post("/api/submit")
    async def api_submit(request: Request):
        w = student(request)
        sub_id, problem, status = await accept_upload(request, w)
        if sub_id is None:
            return JSONResponse({"error": problem}, status)
        return JSONResponse({"id": sub_id, "url": f"/submissions/{sub_id}"}, 201)

    @app.get("/api/submissions/{sub_id}")
    def api_submission(request: Request, sub_id: int):
        w = who(request)
        with db() as s:
            v = view(s, own_submission(s, w, sub_id))
        return JSONResponse(v)

    # ------------------------------------------------------------ instructors
    def class_rows(s, chapter: str) -> list[dict]:
        rows = []
        for st in s.scalars(select(Student).order_by(Student.id)):
            subs = list(s.scalars(select(Submission).where(Submission.student_id == st.id,
                                                           Submission.chapter == chapter)
                                  .order_by(Submission.id.desc())))
            res = next((r for sub in subs if (r := queue.latest_result(s, sub.id)) is not None), None)
            rows.append({"id": st.id, "name": st.name, "attempts": len(subs),
                         "when": when(subs[0].submitted_at) if subs else "",
                         "status": subs[0].status if subs else "",
                         "score": f"{res.score:g} / {res.max_score:g}" if res else ""})
        return rows

    @app.get("/instructor", response_class=HTMLResponse)
    def dashboard(request: Request, message: str = ""):
        w = instructor(request)
        with db() as s:
            chapters = [{**c, "rows": class_rows(s, c["name"])} for c in chapter_choices()]
        return render("instructor", title="Class dashboard", who=w.label, csrf=w.csrf, chapters=chapters,
                      pending=queue.pending(db), error=message)

    @app.get("/instructor/students/{student_id}", response_class=HTMLResponse)
    def history(request: Request, student_id: str):
        w = instructor(request)
        with db() as s:
            if s.get(Student, student_id) is None:
                raise Denied(404, "no such student")
            rows = attempt_rows(s, student_id)
        return render("history", title=f"History of {student_id}", who=w.label, csrf=w.csrf, attempts=rows)

    @app.post("/instructor/regrade")
    async def regrade(request: Request):
        w = instructor(request)
        form = await form_of(request, w)
        n = queue.regrade(db, str(form.get("chapter") or "") or None)
        if w.api:
            return JSONResponse({"queued": n})
        return RedirectResponse(f"/instructor?message=regrading+{n}+submissions", 303)

    def chapter_of(chapter: str) -> str:
        if chapter not in config.chapters:
            raise Denied(404, "no such assignment")
        return chapter

    @app.get("/instructor/{chapter}/grades.csv")
    def grades_csv(request: Request, chapter: str):
        instructor(request)
        out, _ = classes.write_folder(db, config.folder, chapter_of(chapter))
        return FileResponse(out / "grades.csv", media_type="text/csv", filename=f"{chapter}-grades.csv")

    @app.get("/instructor/{chapter}/lms.csv")
    def lms(request: Request, chapter: str):
        instructor(request)
        path = classes.lms_csv(db, config.folder, chapter_of(chapter))
        return FileResponse(path, media_type="text/csv", filename=f"{chapter}-lms.csv")

    @app.get("/instructor/{chapter}/report", response_class=HTMLResponse)
    def report(request: Request, chapter: str):
        instructor(request)
        try:
            path = classes.class_report(db, config.folder, chapter_of(chapter))
        except ValueError as exc:
            raise Denied(404, f"no class report yet: {exc}") from None
        return HTMLResponse(path.read_text())

    @app.get("/instructor/{chapter}/similarity", response_class=HTMLResponse)
    def similarity(request: Request, chapter: str):
        instructor(request)
        return HTMLResponse(classes.similarity_report(db, config.folder, chapter_of(chapter)).read_text())

    @app.get("/instructor/{chapter}/gradescope.zip")
    def gradescope(request: Request, chapter: str):
        instructor(request)
        path = classes.gradescope_zip(config.folder, chapter_of(chapter))
        return FileResponse(path, media_type="application/zip", filename=f"{chapter}-autograder.zip")

    @app.get("/instructor/{chapter}/gradebook.db")
    async def nbgrader(request: Request, chapter: str):
        instructor(request)
        path = await run_in_threadpool(classes.nbgrader_gradebook, db, config.folder, chapter_of(chapter))
        return FileResponse(path, media_type="application/vnd.sqlite3", filename=f"{chapter}-gradebook.db")

    return app
