"""`python -m autograder serve` and `python -m autograder service ...` (tokens, deadlines).

Light at import: `autograder.cli` adds these subcommands without importing FastAPI or SQLAlchemy.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from autograder import late

DEFAULT_DIR = "autograder-service"


def add_parsers(sub) -> None:
    """Add `serve` and `service` to the autograder's subcommands."""
    s = sub.add_parser("serve", help="the submission service: students hand in, graded in seconds")
    folder_and_db(s)
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (behind a reverse proxy: 127.0.0.1)")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--chapter", action="append", metavar="NN_name",
                   help="an open assignment (repeat for several; default: every chapter)")
    s.add_argument("--graders", type=int, default=1,
                   help="warm grading workers in this process (0: none; run `serve --grade-only` elsewhere)")
    s.add_argument("--grade-only", action="store_true", help="grade the queue, serve no pages")
    s.add_argument("--isolation", choices=("auto", "bwrap", "process"), default="auto")
    s.add_argument("--call-timeout", type=float, default=10.0, help="seconds one student call may take")
    s.add_argument("--submission-timeout", type=float, default=600.0, help="seconds of grading per submission")
    s.add_argument("--lease", type=float, default=60.0,
                   help="seconds a grader holds a submission without renewing (a killed grader's "
                   "submission is graded again after this)")
    s.add_argument("--max-upload-mb", type=float, default=5.0, help="largest notebook accepted, MiB")
    s.add_argument("--rate", default="10/600", metavar="N/SECONDS",
                   help="at most N submissions per student in SECONDS (default 10/600)")
    s.add_argument("--secure-cookies", action="store_true",
                   help="behind HTTPS (a reverse proxy): cookies travel over HTTPS only")
    s.add_argument("--secret-file", metavar="FILE", help="the course secret: per-student hidden inputs")
    s.add_argument("--scheduler", metavar="ADDRESS", help="grade on the Dask workers of this scheduler "
                   "(tcp://HOST:8786 or tls://...) instead of local workers")
    s.set_defaults(func=cmd_serve)
    a = sub.add_parser("service", help="the submission service's instructor commands: tokens, deadlines")
    asub = a.add_subparsers(dest="action", required=True)
    t = asub.add_parser("tokens", help="add the roster's students and issue their personal tokens")
    folder_and_db(t)
    t.add_argument("--roster", required=True, metavar="CSV",
                   help="a header row naming an id column (id, student_id, SID; Canvas's gradebook export: "
                   "ID) and a name column (name, Student); else the first two columns are id and name")
    t.add_argument("--again", action="store_true", help="issue new tokens to students who have one (the old ones stop working)")
    t.add_argument("--out", metavar="CSV", help="write (student_id, name, token) here (default: SERVICE/tokens-new.csv)")
    t.set_defaults(func=cmd_tokens)
    i = asub.add_parser("instructor-token", help="issue the instructor's token (the old one stops working)")
    folder_and_db(i)
    i.set_defaults(func=cmd_instructor)
    d = asub.add_parser("deadline", help="set a chapter's due date and late policy (SERVICE/NN_name/deadline.json)")
    folder_and_db(d)
    d.add_argument("chapter", help="the assignment, e.g. 02_attention")
    late.add_arguments(d)
    d.set_defaults(func=cmd_deadline)


def folder_and_db(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dir", default=DEFAULT_DIR, help=f"the service's folder (default: ./{DEFAULT_DIR}): the "
                   "SQLite database, deadlines, the class folders")
    p.add_argument("--db", metavar="URL", help="database URL (default: sqlite:///DIR/service.sqlite; "
                   "PostgreSQL: postgresql+psycopg://user:password@host/dbname)")


def open_db(args):
    from autograder.service.store import default_url, open_db as opened
    Path(args.dir).mkdir(parents=True, exist_ok=True)
    return opened(args.db or default_url(Path(args.dir)))


def cmd_tokens(args) -> int:
    from autograder.service import tokens
    try:
        roster = tokens.read_roster(Path(args.roster))
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    issued = tokens.issue(open_db(args), roster, again=args.again)
    out = Path(args.out or Path(args.dir) / "tokens-new.csv")
    tokens.write_tokens(out, issued)
    print(f"{len(roster)} students in the roster; {len(issued)} new tokens in {out} (readable by you only): "
          "send each student theirs, then delete the file. Only their hashes are stored.")
    return 0


def cmd_instructor(args) -> int:
    from autograder.service import tokens
    token = tokens.issue_instructor(open_db(args))
    print(token)
    print("the instructor's token (shown once; only its hash is stored)", file=sys.stderr)
    return 0


def cmd_deadline(args) -> int:
    from autograder.batch import deadlines
    try:
        deadline = deadlines.from_args(args, Path(args.dir) / args.chapter)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    if deadline is None:
        print(f"{args.chapter}: no deadline (give --due TIME and --late-policy POLICY)")
    else:
        print(f"{args.chapter}: {deadline.describe()}; applied to each attempt when it is graded")
    return 0


def parse_rate(text: str) -> tuple[int, float]:
    try:
        n, seconds = text.split("/")
        return int(n), float(seconds)
    except ValueError:
        raise SystemExit(f"--rate {text!r}: give N/SECONDS, e.g. 10/600") from None


def grading_settings(args):
    from autograder.batch import Settings
    secret = b""
    if args.secret_file:
        from autograder.harness.seeds import read_secret
        secret = read_secret(args.secret_file)
    chapters = args.chapter or []
    return Settings(Path(args.dir), jobs=max(1, args.graders), chapter=chapters[0] if len(chapters) == 1 else None,
                    isolation=args.isolation, call_timeout=args.call_timeout,
                    submission_timeout=args.submission_timeout, progress=False, secret=secret)


def cmd_serve(args) -> int:
    from autograder.paths import chapters as all_chapters
    from autograder.service.grading import Grader, start_in_thread
    db = open_db(args)
    known = all_chapters()
    chapters = args.chapter or known
    unknown = [c for c in chapters if c not in known]
    if unknown:
        print(f"no graders for {', '.join(unknown)} (chapters: {', '.join(known)})", file=sys.stderr)
        return 2
    args.chapter = chapters if args.chapter else None
    if args.scheduler:
        from autograder.service.grading import DaskGrader
        grader = DaskGrader(db, Path(args.dir), grading_settings(args), args.scheduler, lease=args.lease)
    else:
        grader = Grader(db, Path(args.dir), grading_settings(args), lease=args.lease) if args.graders > 0 else None
    if args.grade_only:
        if grader is None:
            print("--grade-only needs --graders 1 or more", file=sys.stderr)
            return 2
        print(f"grading the queue of {args.db or Path(args.dir) / 'service.sqlite'} with {args.graders} "
              "workers (Ctrl-C stops)", file=sys.stderr)
        try:
            grader.run()
        except KeyboardInterrupt:
            grader.stop.set()
        return 0
    import uvicorn
    from autograder.service.app import Config, create_app
    config = Config(Path(args.dir), db, chapters, max_bytes=int(args.max_upload_mb * 2**20),
                    rate=parse_rate(args.rate), secure_cookies=args.secure_cookies)
    if grader is not None:
        config.on_start.append(lambda: start_in_thread(grader))
        config.on_stop.append(grader.stop.set)
    print(f"serving on http://{args.host}:{args.port}/ ({len(chapters)} assignments, {args.graders} graders)",
          file=sys.stderr, flush=True)
    uvicorn.run(create_app(config), host=args.host, port=args.port, log_level="warning",
                proxy_headers=True, forwarded_allow_ips="127.0.0.1")
    return 0
