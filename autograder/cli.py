"""Command line: `python -m autograder grade PATH... --out DIR`, `python -m autograder export-gradescope NN_name`
and `python -m autograder report OUT`, `python -m autograder check-zip ZIP`."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from autograder import late
from autograder.assignment import keep_chapter
from autograder.harness.sandbox import Limits, Sandbox  # light: the zygote starts before torch is imported here


def wants_batch(args: argparse.Namespace) -> bool:
    """A folder, several files or any class-scale option: the parallel, resumable engine."""
    return bool(args.nbgrader_course or args.jobs > 1 or args.force or args.lms_csv or args.scheduler
                or args.cluster or args.student or len(args.paths) != 1 or Path(args.paths[0]).is_dir()
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


def assignment_of(args: argparse.Namespace, jobs: list, course=None) -> tuple[list, str | None, str]:
    """(the jobs, the chapter they are graded as, why grading cannot start): --chapter; for nbgrader,
    the assignment's (per notebook); else the chapter kept in OUT by an earlier run; else the one
    chapter the notebooks name (else refused)."""
    if course is not None:
        from autograder.exports import nbgrader as nbgrader_io
        jobs, left_out, problem = nbgrader_io.assign_chapters(course, args.assignment, jobs, args.chapter)
        if left_out:
            print(f"left out, not notebooks of assignment {args.assignment}: "
                  f"{', '.join(str(j.path) for j in left_out[:10])}", file=sys.stderr)
        found = {j.chapter for j in jobs}
        return jobs, found.pop() if len(found) == 1 else None, problem
    from autograder.assignment import KEPT, infer_chapter, kept_chapter
    if args.chapter:
        return jobs, args.chapter, ""
    if kept := kept_chapter(Path(args.out)):
        print(f"grading as {kept}, the chapter kept in {Path(args.out) / KEPT} (--chapter to change it)",
              file=sys.stderr)
        return jobs, kept, ""
    from autograder.batch.io import stored_results
    recorded: dict[str, list[str]] = {}
    for name, result in stored_results(Path(args.out)).items():
        if result["extra_data"].get("chapter") and name not in {j.name for j in jobs}:
            recorded.setdefault(result["extra_data"]["chapter"], []).append(f"{args.out}/{name}")
    chapter, problem = infer_chapter([j.path for j in jobs], recorded)
    if problem and not recorded and len(jobs) == 1:
        problem = ""  # one file that names no chapter: its result says why it cannot be graded
    if chapter:
        print(f"grading as {chapter}, the chapter the notebooks name (--chapter to choose)", file=sys.stderr)
    return jobs, chapter, problem


def chosen_students(jobs: list, students: list[str]) -> tuple[list, str]:
    """The jobs of --student NAME ..., or why not."""
    from autograder import batch
    chosen, unknown = batch.select_students(jobs, students)
    if unknown:
        known = sorted({j.student for j in jobs})
        return chosen, (f"no submission of {', '.join(unknown)} (students: {', '.join(known[:20])}"
                        f"{', ...' if len(known) > 20 else ''})")
    return chosen, ""


def cmd_batch(args: argparse.Namespace) -> int:
    """Grade a class with `autograder.batch`; see "Grade a folder" in book/instructors/class.md."""
    from autograder import batch
    from autograder.batch import deadlines, duplicates, ids, lms
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
        jobs = batch.same_files_as_before(jobs, out)  # first: a roster or an LMS name given later still wins
        try:
            roster = ids.kept_roster(out, args.roster)
            ided = ids.identify(args.paths, jobs, ids.Roster.read(roster) if roster else None)
            deadline = deadlines.from_args(args, out)
        except ValueError as exc:
            print(exc, file=sys.stderr)
            return 2
        jobs = ided.jobs
    if not jobs:
        print("no notebooks found", file=sys.stderr)
        return 2
    jobs, chapter, problem = assignment_of(args, jobs, course)
    choices = [] if problem or ided is None else duplicates.choose(jobs, chapter, out, ided.identities)
    for choice in choices:
        print(choice.describe(), file=sys.stderr)
    jobs = [job for job in jobs if job.name not in duplicates.superseded_names(choices)]
    if not problem and args.student:
        jobs, problem = chosen_students(jobs, args.student)
    if problem:
        print(problem, file=sys.stderr)
        return 2
    if course is None and chapter:
        keep_chapter(out, chapter)
    try:
        lms_csv = lms.from_args(args, out, chapter)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    settings = batch.Settings(out, jobs=args.jobs, chapter=chapter, isolation=args.isolation,
                              call_timeout=args.call_timeout, submission_timeout=args.submission_timeout,
                              force=args.force or bool(args.student), progress=not args.no_progress,
                              secret=args.secret)
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
    duplicates.mark(report, choices)
    done = [(j, r) for j in report.jobs  # the whole class: every result in OUT
            if (r := report.results.get(j.name)) and r["extra_data"].get("status") in batch.FINAL]
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
    if lms_csv:
        write_lms(lms_csv, report)
    counts = ", ".join(f"{n} {status}" for status, n in sorted(report.counts().items()))
    print(f"{len(jobs)} submission{'s' if len(jobs) != 1 else ''}: {report.graded} graded now, "
          f"{report.skipped} already done; all {len(report.jobs)} in {out}: {counts}")
    print(f"grades in {out / 'grades.csv'}; results in {out}/<submission>/results.json")
    if report.aborted:
        print(report.aborted, file=sys.stderr)
    return 130 if report.interrupted else 1 if report.aborted or report.counts().get("crashed") else 0


def write_lms(lms_csv, report) -> None:
    """Write the LMS CSV from the whole class's `report`; name the students it leaves out."""
    left_out = lms_csv.write(report)
    if left_out:
        print(f"LMS CSV: {len(left_out)} students left out (not graded yet): {', '.join(left_out[:10])}",
              file=sys.stderr)


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
    if wants_batch(args):
        return cmd_batch(args)
    from autograder import batch  # one notebook: graded here, then the class tables of OUT rebuilt
    out = Path(args.out)
    jobs, chapter, problem = assignment_of(args, batch.same_files_as_before(batch.find_jobs(args.paths), out))
    if problem:
        print(problem, file=sys.stderr)
        return 2
    if chapter:
        keep_chapter(out, chapter)
    from autograder.batch import deadlines, duplicates, lms
    from autograder.batch.io import whole
    try:  # what the class run kept in OUT applies here too: its deadline, its LMS CSV
        deadline, lms_csv = deadlines.from_args(args, out), lms.from_args(args, out, chapter)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    job = jobs[0]
    previous = batch.read_result(out, job)
    choices = duplicates.choose([job], chapter, out, deadlines.remembered(job, previous))
    newer = [c for c in choices if job in c.superseded]
    if newer:  # an older notebook of a student whose newer one counts: not graded, as in the class run
        print(f"not graded: {newer[0].student} handed in a newer notebook of {newer[0].chapter}, "
              f"{newer[0].kept.path} ({newer[0].when(newer[0].kept)}), which counts; this one was "
              f"{newer[0].when(job)}", file=sys.stderr)
        report = duplicates.mark(whole(batch.Report([], {}), out), choices)
        try:
            deadlines.write_back(out, report)
        except RuntimeError as exc:  # a batch is writing to OUT
            print(exc, file=sys.stderr)
            return 2
        if lms_csv:
            write_lms(lms_csv, report)
        print(f"results in {out / job.name / 'results.json'} (status superseded); class table {out / 'grades.csv'}")
        return 0
    with Sandbox(Limits(call_seconds=args.call_timeout), isolation=args.isolation) as sandbox:
        from autograder.grade import for_one_notebook, grade_submission  # imports torch while the zygote does
        from autograder.harness.seeds import student_key
        for_one_notebook()
        key = student_key(args.secret, batch.student_id(job)) if args.secret else None  # as a batch keys it
        result = batch.stamp(grade_submission(job.path, sandbox, chapter, inputs_key=key), job,
                             batch.sha256_of(job.path))
    if deadline is not None:
        deadlines.apply(batch.Report([job], {job.name: result}), deadline, deadlines.remembered(job, previous))
    try:
        report = batch.record_alone(out, job, result)
        if choices:  # older notebooks of this student in OUT no longer count
            deadlines.write_back(out, duplicates.mark(report, choices))
    except RuntimeError as exc:  # a batch is writing to OUT
        print(exc, file=sys.stderr)
        return 2
    if lms_csv:
        write_lms(lms_csv, report)
    from autograder.harness.results import function_report
    print(function_report(result))  # what a student needs, in the terminal
    print()
    print(f"results in {out / job.name / 'results.json'}; class table {out / 'grades.csv'}")
    return 0


def cmd_export_gradescope(args: argparse.Namespace) -> int:
    from autograder.exports import gradescope_late
    from autograder.exports.gradescope import export
    try:
        settings = gradescope_late.zip_settings(args.late_policy, args.late_cap)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    if not read_secret_arg(args):
        return 2
    visibility = {"result": args.visibility, "hidden_tests": args.hidden_visibility,
                  "public_checks": args.public_visibility}
    path = export(args.chapter, Path(args.out), call_timeout=args.call_timeout, settings=settings,
                  secret=args.secret,
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


def cmd_check_zip(args: argparse.Namespace) -> int:
    from autograder.exports.gradescope import check_zip
    verdicts = [check_zip(Path(z)) for z in args.zips]
    for current, message in verdicts:
        print(message, file=sys.stdout if current else sys.stderr)
    return 0 if all(current for current, _ in verdicts) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("grade", help="grade notebooks; write OUT/<submission>/results.json")
    g.add_argument("paths", nargs="*", help="notebooks, or folders of notebooks")
    g.add_argument("--out", help="folder for the results (default with --nbgrader-course: "
                   "COURSE/autograder-results/ASSIGNMENT)")
    g.add_argument("--chapter", help="the chapter (NN_name) every notebook is graded as (default: the one "
                   "chapter a folder's notebooks name; with --nbgrader-course, the assignment's)")
    g.add_argument("--jobs", type=int, default=1, help="submissions graded in parallel")
    g.add_argument("--isolation", choices=("auto", "bwrap", "process"), default="auto",
                   help="auto: bubblewrap when available, else a plain subprocess (with a warning)")
    g.add_argument("--call-timeout", type=float, default=10.0, help="seconds one student call may take")
    g.add_argument("--submission-timeout", type=float, default=600.0,
                   help="seconds of grading per submission: tests not started by then fail; 120 s later "
                   "it is stopped (score 0, status timeout)")
    c = g.add_argument_group("grading on a Dask cluster (see book/instructors/cluster.md)")
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
    g.add_argument("--force", action="store_true", help="regrade submissions that already have current results")
    g.add_argument("--student", action="append", metavar="NAME",
                   help="grade only this student's submissions (a student id or a submission name), again "
                   "even if current; repeat for several. The class tables keep every student")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    g.add_argument("--nbgrader-course", metavar="DIR",
                   help="grade DIR/submitted/<student>/ASSIGNMENT/*.ipynb; write nbgrader's gradebook and feedback")
    g.add_argument("--assignment", help="the nbgrader assignment to grade (with --nbgrader-course)")
    g.add_argument("--lms-csv", metavar="FILE", help="also write FILE: one row per student, id and score")
    g.add_argument("--lms-columns", metavar="ID_COLUMN,SCORE_COLUMN",
                   help="the LMS CSV's id and score columns (default: student_id,score; canvas: ID,NN_name)")
    g.add_argument("--lms-format", choices=("plain", "canvas"),
                   help="plain: the two columns; canvas: Canvas's gradebook columns (Student, ID, SIS User ID, "
                   "SIS Login ID, Section, then the score). Kept in OUT/lms.json with --lms-csv for later runs")
    g.add_argument("--roster", metavar="CSV", help="student ids: a header row, then rows of (file name or glob "
                   "pattern, id); without it, Canvas, Moodle and Gradescope download names give the ids")
    late.add_arguments(g)
    g.set_defaults(func=cmd_grade)
    e = sub.add_parser("export-gradescope", help="build a Gradescope autograder zip for one chapter")
    e.add_argument("chapter", help="the chapter, e.g. 02_attention")
    e.add_argument("--out", default="autograder.zip", help="the zip to write")
    e.add_argument("--call-timeout", type=float, default=10.0, help="seconds one student call may take")
    late.add_arguments(e, due=False)  # the due date and extensions: Gradescope's submission_metadata.json
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
    r = sub.add_parser("report", help="a class report of OUT: OUT/report.html and a summary")
    r.add_argument("out", help="the folder a `grade` run wrote (OUT/<submission>/results.json)")
    r.set_defaults(func=cmd_report)
    z = sub.add_parser("check-zip", help="is a Gradescope autograder zip older than the graders here? (exit 1 if so)")
    z.add_argument("zips", nargs="+", metavar="ZIP", help="zips written by export-gradescope")
    z.set_defaults(func=cmd_check_zip)
    from autograder.service.cli import add_parsers as add_service_parsers  # light: no web imports
    add_service_parsers(sub)
    args = parser.parse_args(argv)
    if args.command == "grade" and not (args.paths or args.nbgrader_course):
        parser.error("grade needs notebooks or folders, or --nbgrader-course DIR --assignment NAME")
    if args.command == "grade" and not (args.out or args.nbgrader_course):
        parser.error("grade needs --out DIR")
    if args.command == "grade" and args.scheduler and args.cluster:
        parser.error("--scheduler and --cluster: give one")
    return args.func(args)
