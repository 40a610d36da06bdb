"""Command line: `python -m autograder grade PATH... --out DIR` and `python -m autograder export-gradescope NN_name`."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from autograder.harness.sandbox import Limits, Sandbox  # light: the zygote starts before torch is imported here


def find_notebooks(paths: list[str]) -> list[tuple[str, Path]]:
    """(submission name, file) for each notebook in `paths`; folders are searched recursively."""
    found: list[tuple[str, Path]] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            for f in sorted(x for x in p.rglob("*") if x.is_file() and x.suffix == ".ipynb"
                            and ".ipynb_checkpoints" not in x.parts):
                found.append(("__".join(f.relative_to(p).with_suffix("").parts), f))
        else:
            found.append((p.stem, p))
    names = [n for n, _ in found]
    return [(n if names.count(n) == 1 else f"{n}-{i}", f) for i, (n, f) in enumerate(found)]


def wants_batch(args: argparse.Namespace) -> bool:
    """A folder, several files or any class-scale option: the parallel, resumable engine."""
    return bool(args.nbgrader_course or args.jobs > 1 or args.force or args.lms_csv or args.scheduler
                or args.cluster or len(args.paths) != 1 or Path(args.paths[0]).is_dir())


def cluster_runner(args: argparse.Namespace):
    """(runner, cluster) for --scheduler or --cluster; (None, None) for the local pool."""
    if not (args.scheduler or args.cluster):
        return None, None
    from autograder import cluster
    threads = dict(threads=args.worker_threads, connect_timeout=args.connect_timeout)
    if args.scheduler:
        return cluster.runner(args.scheduler, worker_wait=args.worker_wait or 60.0, **threads), None
    from autograder.cluster.jobqueue import start_cluster
    started = start_cluster(args.cluster, args.jobs, args.cluster_config, args.tls)
    print(f"submitted {args.jobs} {args.cluster} jobs of Dask workers; scheduler at {started.scheduler_address}",
          file=sys.stderr)
    return cluster.runner(started, worker_wait=args.worker_wait or 1800.0, **threads), started


def cmd_batch(args: argparse.Namespace) -> int:
    """Grade a class with `autograder.batch`; see "Grading a class" in the README."""
    from autograder import batch
    course = None
    if args.nbgrader_course:
        from autograder.exports import nbgrader as nbgrader_io
        if not args.assignment:
            print("--nbgrader-course needs --assignment NAME", file=sys.stderr)
            return 2
        course = nbgrader_io.open_course(args.nbgrader_course, args.assignment)
        jobs = nbgrader_io.find_course_jobs(course, args.assignment)
        out = Path(args.out or Path(course.root) / "autograder-results" / args.assignment)
    else:
        jobs, out = batch.find_jobs(args.paths), Path(args.out)
    if not jobs:
        print("no notebooks found", file=sys.stderr)
        return 2
    settings = batch.Settings(out, jobs=args.jobs, chapter=args.chapter, isolation=args.isolation,
                              call_timeout=args.call_timeout, submission_timeout=args.submission_timeout,
                              force=args.force, progress=not args.no_progress, secret=args.secret)
    try:
        runner, started = cluster_runner(args)
    except RuntimeError as exc:  # dask-jobqueue missing or misconfigured
        print(exc, file=sys.stderr)
        return 2
    try:
        report = batch.run_batch(jobs, settings, runner=runner)
    finally:
        if started is not None:
            started.close()  # cancels the batch jobs
    done = [(j, r) for j in jobs if (r := report.results.get(j.name)) and r["extra_data"].get("status") in batch.FINAL]
    if args.lms_csv:
        left_out = batch.write_lms_csv(Path(args.lms_csv), report, tuple(args.lms_columns.split(",", 1)))
        if left_out:
            print(f"LMS CSV: {len(left_out)} students left out (not graded yet): {', '.join(left_out[:10])}",
                  file=sys.stderr)
    if course is not None:
        nbgrader_io.export_course(course, args.assignment, done)
        print(f"gradebook: {course.db_url}; feedback in {course.feedback_directory}/<student>/{args.assignment}/")
    counts = ", ".join(f"{n} {status}" for status, n in sorted(report.counts().items()))
    print(f"{len(jobs)} submissions: {counts} ({report.graded} graded now, {report.skipped} already done)")
    print(f"grades in {out / 'grades.csv'}; results in {out}/<submission>/results.json")
    if report.aborted:
        print(report.aborted, file=sys.stderr)
    return 130 if report.interrupted else 1 if report.aborted or report.counts().get("crashed") else 0


def read_secret_arg(args: argparse.Namespace) -> bool:
    """Replace args.secret_file by args.secret (bytes, b"" without one); False, with a message, if unreadable."""
    args.secret = b""
    if args.secret_file:
        from autograder.harness.seeds import read_secret
        try:
            args.secret = read_secret(args.secret_file)
        except (OSError, ValueError) as exc:
            print(f"--secret-file: {exc}", file=sys.stderr)
            return False
    return True


def cmd_grade(args: argparse.Namespace) -> int:
    if not read_secret_arg(args):
        return 2
    if args.student and wants_batch(args):
        print("--student is for one notebook; a class's student ids come from its folders", file=sys.stderr)
        return 2
    if wants_batch(args):
        return cmd_batch(args)
    subs = find_notebooks(args.paths)
    if not subs:
        print("no notebooks found in " + " ".join(args.paths), file=sys.stderr)
        return 2
    out = Path(args.out)
    limits = Limits(call_seconds=args.call_timeout)
    rows = []
    with Sandbox(limits, isolation=args.isolation) as sandbox:  # imports torch in parallel with us
        from autograder.grade import for_one_notebook, grade_submission
        from autograder.harness.results import summary_table, write_json
        from autograder.harness.seeds import student_key
        for_one_notebook()  # this path grades one notebook (wants_batch takes the rest)
        for name, path in subs:  # the student: --student, or the file's stem (as the batch names a file)
            key = student_key(args.secret, args.student or name) if args.secret else None
            result = grade_submission(path, sandbox, args.chapter, inputs_key=key)
            write_json(out / name / "results.json", result)
            extra = result["extra_data"]
            rows.append((name, extra.get("chapter"), result["score"], result["max_score"], extra.get("status")))
    if len(subs) == 1:  # one notebook: what a student needs, in the terminal
        from autograder.harness.results import function_report
        print(function_report(result))
        print()
    print(summary_table(rows))
    print(f"results in {out}/<submission>/results.json")
    return 0


def cmd_export_gradescope(args: argparse.Namespace) -> int:
    from autograder.exports.gradescope import export
    if not read_secret_arg(args):
        return 2
    visibility = {"result": args.visibility, "hidden_tests": args.hidden_visibility,
                  "public_checks": args.public_visibility}
    path = export(args.chapter, Path(args.out), call_timeout=args.call_timeout, secret=args.secret,
                  public_checks=Path(args.public_checks) if args.public_checks else None, visibility=visibility)
    print(f"wrote {path}: upload it as the Gradescope autograder (base image: Ubuntu 24.04)")
    if args.secret:
        print("it holds the course secret: keep it out of the repository and the release", file=sys.stderr)
    return 0


def cmd_similarity(args: argparse.Namespace) -> int:
    """Write OUT/similarity.html and OUT/similarity.csv; see docs/notes/i30.md."""
    from autograder.similarity import is_results_folder, similarity
    if not args.out and not (len(args.paths) == 1 and is_results_folder(Path(args.paths[0]))):
        print("similarity needs --out DIR unless it is given one results folder", file=sys.stderr)
        return 2
    out = Path(args.out or args.paths[0])
    entries, pairs, (page, table) = similarity(args.paths, out, args.chapter,
                                               Path(args.starter) if args.starter else None, args.top,
                                               args.threshold)
    if not entries:
        print("no submissions found in " + " ".join(args.paths), file=sys.stderr)
        return 2
    for p in pairs[:5]:
        flag = "  identical file" if p.identical_file else ""
        print(f"{100 * p.similarity:5.1f}%  {p.a.name}  {p.b.name}{flag}")
    print(f"{len(entries)} submissions, {len(pairs)} pairs: {page} and {table}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("grade", help="grade notebooks; write OUT/<submission>/results.json")
    g.add_argument("paths", nargs="*", help="notebooks, or folders of notebooks")
    g.add_argument("--out", help="folder for the results (default with --nbgrader-course: "
                   "COURSE/autograder-results/ASSIGNMENT)")
    g.add_argument("--chapter", help="chapter (NN_name) for notebooks whose metadata does not say")
    g.add_argument("--jobs", type=int, default=1, help="submissions graded in parallel")
    g.add_argument("--isolation", choices=("auto", "bwrap", "process"), default="auto",
                   help="auto: bubblewrap when available, else a plain subprocess (with a warning)")
    g.add_argument("--call-timeout", type=float, default=10.0, help="seconds one student call may take")
    g.add_argument("--submission-timeout", type=float, default=600.0,
                   help="seconds of grading per submission: tests not started by then fail; 120 s later "
                   "it is stopped (score 0, status timeout)")
    c = g.add_argument_group("grading on a Dask cluster (see 'On a Dask cluster' in the README)")
    c.add_argument("--scheduler", metavar="ADDRESS",
                   help="grade on the Dask workers of this scheduler, e.g. tcp://HOST:8786 or tls://HOST:8786")
    c.add_argument("--cluster", choices=("slurm", "pbs", "sge"),
                   help="start --jobs batch jobs of Dask workers (dask-jobqueue; settings from Dask's "
                   "jobqueue configuration or --cluster-config)")
    c.add_argument("--cluster-config", metavar="FILE", help="a YAML file with a jobqueue: section")
    c.add_argument("--tls", action="store_true", help="with --cluster: mutual TLS with the certificates of Dask's "
                   "configuration (distributed.comm.tls)")
    c.add_argument("--connect-timeout", type=float, default=10.0, help="seconds to reach the scheduler")
    c.add_argument("--worker-wait", type=float, default=0.0,
                   help="seconds to wait for a first worker (default 60 with --scheduler, 1800 with --cluster)")
    c.add_argument("--worker-threads", type=int, default=0,
                   help="torch threads per worker (default: the host's cores shared among its workers)")
    g.add_argument("--secret-file", metavar="FILE",
                   help="the course secret (keep it out of the repository): every student then gets hidden "
                   "inputs of their own, drawn from the secret, their id and the test")
    g.add_argument("--student", metavar="ID", help="with --secret-file and one notebook: the student's id "
                   "(default: the file's name without .ipynb)")
    g.add_argument("--force", action="store_true", help="regrade submissions that already have results")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    g.add_argument("--nbgrader-course", metavar="DIR",
                   help="grade DIR/submitted/<student>/ASSIGNMENT/*.ipynb; write nbgrader's gradebook and feedback")
    g.add_argument("--assignment", help="the nbgrader assignment to grade (with --nbgrader-course)")
    g.add_argument("--lms-csv", metavar="FILE", help="also write FILE: one row per student, id and score")
    g.add_argument("--lms-columns", default="student_id,score",
                   help="header of the LMS CSV's two columns (default: student_id,score)")
    g.set_defaults(func=cmd_grade)
    e = sub.add_parser("export-gradescope", help="build a Gradescope autograder zip for one chapter")
    e.add_argument("chapter", help="the chapter, e.g. 02_attention")
    e.add_argument("--out", default="autograder.zip", help="the zip to write")
    e.add_argument("--call-timeout", type=float, default=10.0, help="seconds one student call may take")
    e.add_argument("--secret-file", metavar="FILE", help="pack the course secret: each student gets hidden "
                   "inputs of their own (keyed by their Gradescope user id)")
    e.add_argument("--public-checks", metavar="FILE.pt", help="also run these public checks (from `make "
                   "release`: _build/release/attnkit/checks/NN_name.pt) and show them as 0-point tests")
    from autograder.exports.gradescope import VISIBILITIES  # Gradescope's four values
    e.add_argument("--hidden-visibility", choices=VISIBILITIES, default="after_due_date",
                   help="when students see the hidden tests' details (Gradescope's per-test visibility)")
    e.add_argument("--public-visibility", choices=VISIBILITIES, default="visible",
                   help="when students see the public checks (with --public-checks)")
    e.add_argument("--visibility", choices=VISIBILITIES, default="visible",
                   help="Gradescope's top-level visibility of the results")
    e.set_defaults(func=cmd_export_gradescope)
    s = sub.add_parser("similarity", help="rank pairs of submissions by shared code (similarity.html, .csv)")
    s.add_argument("paths", nargs="+", help="a batch's results folder (OUT), or notebooks and folders of them")
    s.add_argument("--out", help="folder for similarity.html and similarity.csv (default: the results folder)")
    s.add_argument("--chapter", help="chapter (NN_name) for notebooks whose metadata does not say")
    s.add_argument("--starter", help="the starter notebook whose code is boilerplate (default: "
                   "exercises/NN_name.ipynb)")
    s.add_argument("--top", type=int, default=50, help="pairs shown in the HTML report (the CSV has all)")
    s.add_argument("--threshold", type=float, default=0.5,
                   help="similarity at which a pair's side-by-side view opens in the report (0 to 1)")
    s.set_defaults(func=cmd_similarity)
    args = parser.parse_args(argv)
    if args.command == "grade" and not (args.paths or args.nbgrader_course):
        parser.error("grade needs notebooks or folders, or --nbgrader-course DIR --assignment NAME")
    if args.command == "grade" and not (args.out or args.nbgrader_course):
        parser.error("grade needs --out DIR")
    if args.command == "grade" and args.scheduler and args.cluster:
        parser.error("--scheduler and --cluster: give one")
    if args.command == "grade" and len(args.lms_columns.split(",")) != 2:
        parser.error("--lms-columns takes two names: ID_COLUMN,SCORE_COLUMN")
    return args.func(args)
