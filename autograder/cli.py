"""Command line: `python -m autograder grade PATH... --out DIR`, `python -m autograder export-gradescope NN_name`
and `python -m autograder report OUT`."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from autograder import late
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
                or args.cluster or len(args.paths) != 1 or Path(args.paths[0]).is_dir()
                or args.roster or late.options_given(args))


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
    from autograder.batch import deadlines, ids
    course, deadline, ided = None, None, None
    if args.nbgrader_course:
        from autograder.exports import nbgrader as nbgrader_io
        if not args.assignment:
            print("--nbgrader-course needs --assignment NAME", file=sys.stderr)
            return 2
        if args.roster or late.options_given(args):
            print("with --nbgrader-course, student ids are nbgrader's and the deadline is nbgrader's (its due "
                  "date, extensions and LateSubmissionPlugin): drop --roster, --due, --late-policy, --late-cap "
                  "and --extensions", file=sys.stderr)
            return 2
        course = nbgrader_io.open_course(args.nbgrader_course, args.assignment)
        jobs = nbgrader_io.find_course_jobs(course, args.assignment)
        out = Path(args.out or Path(course.root) / "autograder-results" / args.assignment)
    else:
        jobs, out = batch.find_jobs(args.paths), Path(args.out)
        try:
            ided = ids.identify(args.paths, jobs, ids.Roster.read(Path(args.roster)) if args.roster else None)
            deadline = deadlines.from_args(args, out)
        except ValueError as exc:
            print(exc, file=sys.stderr)
            return 2
        jobs = ided.jobs
    if not jobs:
        print("no notebooks found", file=sys.stderr)
        return 2
    settings = batch.Settings(out, jobs=args.jobs, chapter=args.chapter, isolation=args.isolation,
                              call_timeout=args.call_timeout, submission_timeout=args.submission_timeout,
                              force=args.force, progress=not args.no_progress)
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
    if course is not None:
        nbgrader_io.export_course(course, args.assignment, done)  # nbgrader's late penalties reach the results
        print(f"gradebook: {course.db_url}; feedback in {course.feedback_directory}/<student>/{args.assignment}/")
    else:
        checked = deadlines.settle(report, deadline, ided.identities)
        if deadline is not None:
            print(deadlines.summary(deadline, checked))
    deadlines.write_back(out, report)
    if ided is not None and ided.unmatched:
        print(f"{len(ided.unmatched)} notebooks have no student id (graded; left out of the LMS CSV):\n"
              + ids.unmatched_text(ided), file=sys.stderr)
    if args.lms_csv:
        columns = tuple(args.lms_columns.split(",", 1))
        left_out = batch.write_lms_csv(Path(args.lms_csv), ids.lms_report(report), columns)
        if left_out:
            print(f"LMS CSV: {len(left_out)} students left out (not graded yet): {', '.join(left_out[:10])}",
                  file=sys.stderr)
    counts = ", ".join(f"{n} {status}" for status, n in sorted(report.counts().items()))
    print(f"{len(jobs)} submissions: {counts} ({report.graded} graded now, {report.skipped} already done)")
    print(f"grades in {out / 'grades.csv'}; results in {out}/<submission>/results.json")
    if report.aborted:
        print(report.aborted, file=sys.stderr)
    return 130 if report.interrupted else 1 if report.aborted or report.counts().get("crashed") else 0


def cmd_grade(args: argparse.Namespace) -> int:
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
        for_one_notebook()  # this path grades one notebook (wants_batch takes the rest)
        for name, path in subs:
            result = grade_submission(path, sandbox, args.chapter)
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
    from autograder.exports import gradescope_late
    from autograder.exports.gradescope import export
    try:
        settings = gradescope_late.zip_settings(args.late_policy, args.late_cap)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    path = export(args.chapter, Path(args.out), call_timeout=args.call_timeout, settings=settings)
    print(f"wrote {path}: upload it as the Gradescope autograder (base image: Ubuntu 24.04)")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from autograder.report import write_report
    try:
        path, summary = write_report(Path(args.out))
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    print(summary)
    print(f"report: {path}")
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
    g.add_argument("--force", action="store_true", help="regrade submissions that already have results")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    g.add_argument("--nbgrader-course", metavar="DIR",
                   help="grade DIR/submitted/<student>/ASSIGNMENT/*.ipynb; write nbgrader's gradebook and feedback")
    g.add_argument("--assignment", help="the nbgrader assignment to grade (with --nbgrader-course)")
    g.add_argument("--lms-csv", metavar="FILE", help="also write FILE: one row per student, id and score")
    g.add_argument("--lms-columns", default="student_id,score",
                   help="header of the LMS CSV's two columns (default: student_id,score)")
    g.add_argument("--roster", metavar="CSV", help="student ids: a header row, then rows of (file name or glob "
                   "pattern, id); without it, Canvas, Moodle and Gradescope download names give the ids")
    late.add_arguments(g)
    g.set_defaults(func=cmd_grade)
    e = sub.add_parser("export-gradescope", help="build a Gradescope autograder zip for one chapter")
    e.add_argument("chapter", help="the chapter, e.g. 02_attention")
    e.add_argument("--out", default="autograder.zip", help="the zip to write")
    e.add_argument("--call-timeout", type=float, default=10.0, help="seconds one student call may take")
    late.add_arguments(e, due=False)  # the due date and extensions: Gradescope's submission_metadata.json
    e.set_defaults(func=cmd_export_gradescope)
    r = sub.add_parser("report", help="a class report of OUT: OUT/report.html and a summary")
    r.add_argument("out", help="the folder a `grade` run wrote (OUT/<submission>/results.json)")
    r.set_defaults(func=cmd_report)
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
