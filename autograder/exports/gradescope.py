"""A Gradescope autograder for one chapter: build it here, run it there.

`python -m autograder export-gradescope NN_name --out autograder.zip` writes a
zip with setup.sh and run_autograder (from gradescope_template/), the
autograder package, the provided `attnkit` package, the chapter's hidden
graders and its reference solution, pinned requirements and gradescope.json (the chapter, the call
timeout and the grader version of the files zipped: `python -m autograder
check-zip ZIP` says whether the zip is older than the graders here).

On Gradescope, run_autograder calls `python -m autograder.exports.gradescope run`,
which grades /autograder/submission's notebook and always writes
/autograder/results/results.json. The grader runs as root (as Gradescope
starts it); `Sandbox` runs the student's code as an unused, unprivileged uid
(in bubblewrap's namespaces where the container allows them, with rlimits
otherwise), which cannot read the hidden tests: run_autograder makes
/autograder/source readable by root only. A late submission is penalised by
the zip's late policy, from Gradescope's submission_metadata.json
(`autograder.exports.gradescope_late`).

Options of the export: `--secret-file FILE` packs the course secret into the zip (as
`course_secret`, beside the hidden tests), and each student then gets hidden inputs of their own,
keyed by their Gradescope user id (submission_metadata.json); `--public-checks FILE.pt` adds the
chapter's public checks (from `make release`) as 0-point tests. What students see is Gradescope's
`visibility` of each test: the public checks' `visible`, the hidden tests' `after_due_date`, both
configurable (`--hidden-visibility`, `--public-visibility`, and the top-level `--visibility`).
"""
from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import sys
import tempfile
import zipfile
from pathlib import Path

from autograder.exports import gradescope_late
from autograder.paths import ROOT, chapters, graders_dir, solutions_dir
from autograder.harness.sandbox import Limits, Sandbox
from autograder.version import grader_version

HERE = Path(__file__).resolve().parent
PACKAGE = HERE.parent  # autograder/
TEMPLATE = HERE / "gradescope_template"
PACKAGES = ("torch", "numpy", "matplotlib", "pytest", "jupytext", "tqdm",  # what grading imports
            "sacrebleu")  # chapter 01's graders compare corpus_bleu with it
SCRIPTS = ("setup.sh", "run_autograder")
SECRET, PUBLIC_CHECKS = "course_secret", "public_checks.pt"  # optional files of the zip
VISIBILITIES = ("hidden", "after_due_date", "after_published", "visible")  # Gradescope's values
DEFAULT_VISIBILITY = {"result": "visible", "hidden_tests": "after_due_date", "public_checks": "visible"}


# ---------------------------------------------------------------- building the zip
def requirements() -> str:
    """Pins of what the grader needs, at the versions installed here (local tags like +cpu dropped)."""
    lines = []
    for name in PACKAGES:
        try:
            lines.append(f"{name}=={importlib.metadata.version(name).split('+')[0]}")
        except importlib.metadata.PackageNotFoundError:
            lines.append(name)
    return "\n".join(lines) + "\n"


def _python_files(folder: Path, prefix: str) -> dict[str, Path]:
    return {f"{prefix}/{p.relative_to(folder).as_posix()}": p for p in sorted(folder.rglob("*.py"))
            if "__pycache__" not in p.parts}


def bundle(chapter: str) -> dict[str, Path]:
    """Zip path -> file: the package (graders of `chapter` only), attnkit, the reference."""
    files = {k: v for k, v in _python_files(PACKAGE, "autograder").items() if not k.startswith("autograder/graders/")}
    files.update(_python_files(ROOT / "attnkit", "attnkit"))
    for name in ("conftest.py", "pytest.ini", f"test_{chapter}.py"):
        files[f"autograder/graders/{name}"] = graders_dir() / name
    files[f"solutions/{chapter}.py"] = solutions_dir() / f"{chapter}.py"
    return files


def _add(zf: zipfile.ZipFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0))
    info.external_attr = (0o100000 | mode) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    zf.writestr(info, data)


def export(chapter: str, out: Path, call_timeout: float = 10.0, settings: dict | None = None,
           secret: bytes = b"", public_checks: Path | None = None, visibility: dict | None = None) -> Path:
    """Write the Gradescope autograder zip for `chapter` to `out` (atomically); return its path.

    `settings`: more of gradescope.json, e.g. {"late_policy": "per-day:10", "late_cap": 50};
    `secret`: the course secret (per-student hidden inputs); `public_checks`: a public-checks file of the
    chapter; `visibility`: Gradescope visibilities of "result", "hidden_tests", "public_checks".
    """
    if chapter not in chapters():
        raise SystemExit(f"no chapter {chapter!r} with graders (chapters: {', '.join(chapters()) or 'none'})")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=".tmp-", suffix=".zip")
    os.close(fd)
    try:
        with zipfile.ZipFile(tmp, "w") as zf:
            for script in SCRIPTS:
                _add(zf, script, (TEMPLATE / script).read_bytes(), 0o755)
            _add(zf, "requirements.txt", requirements().encode())
            config = {"chapter": chapter, "call_timeout": call_timeout, "grader_version": grader_version(chapter),
                      "visibility": {**DEFAULT_VISIBILITY, **(visibility or {})}, **(settings or {})}
            _add(zf, "gradescope.json", json.dumps(config).encode())
            for name, path in bundle(chapter).items():
                _add(zf, name, path.read_bytes())
            if secret:
                _add(zf, SECRET, secret, 0o600)
            if public_checks is not None:
                _add(zf, PUBLIC_CHECKS, Path(public_checks).read_bytes())
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out


def check_zip(path: Path) -> tuple[bool, str]:
    """(whether the zip grades with today's graders, what to tell the instructor): the grader version
    it records against the chapter's as it is here (`autograder.version`)."""
    try:
        with zipfile.ZipFile(path) as zf:
            config = json.loads(zf.read("gradescope.json"))
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as exc:
        return False, f"{path}: not an autograder zip of this course ({type(exc).__name__}: {exc})"
    chapter, recorded = config.get("chapter"), config.get("grader_version")
    current = grader_version(chapter)
    if recorded == current:
        return True, f"{path}: current ({chapter}, grader version {current})"
    when = f"with grader version {recorded}" if recorded else "before zips recorded their grader version"
    return False, (f"{path}: STALE: exported {when}; the graders, reference or harness of {chapter} have changed "
                   f"since (now {current}). Export it again (python -m autograder export-gradescope {chapter}), "
                   "upload it to Gradescope and regrade the submissions there.")


# ---------------------------------------------------------------- running on Gradescope
def find_notebook(folder: Path, chapter: str) -> tuple[Path | None, str]:
    """The submitted notebook for `chapter`, or None and a message for the student."""
    found = sorted(p for p in folder.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
    for pick in ([p for p in found if p.stem == chapter], [p for p in found if chapter in p.stem], found):
        if len(pick) == 1:
            return pick[0], ""
    if not found:
        return None, f"no notebook (.ipynb) was submitted; upload your {chapter}.ipynb"
    names = ", ".join(p.name for p in found[:10])
    return None, f"several notebooks were submitted ({names}); upload only {chapter}.ipynb"


def gradescope_student(root: Path) -> str | None:
    """The submitter's Gradescope user id (a group's ids, sorted and joined), from submission_metadata.json."""
    try:
        users = json.loads((root / "submission_metadata.json").read_text())["users"]
        ids = sorted(str(u["id"]) for u in users)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return "+".join(ids) or None


def inputs_key(root: Path) -> bytes | None:
    """The student's key of their own hidden inputs, when the zip holds a course secret."""
    from autograder.harness.seeds import read_secret, student_key
    secret_file, student = root / "source" / SECRET, gradescope_student(root)
    if not secret_file.exists():
        return None
    if student is None:
        raise RuntimeError("the autograder has a course secret but submission_metadata.json names no user")
    return student_key(read_secret(secret_file), student)


def public_tests(root: Path, notebook: Path, box: Sandbox, visibility: str) -> list[dict]:
    """The public checks' results as 0-point tests of `visibility` ([] without a public-checks file)."""
    from autograder.harness.replay import check_notebook, load_checks
    path = root / "source" / PUBLIC_CHECKS
    if not path.exists():
        return []
    tests = check_notebook(notebook, load_checks(path), box)["tests"]
    return [{**t, "name": f"Public check: {t['name']}", "score": 0.0, "max_score": 0.0, "visibility": visibility}
            for t in tests]


def grade_here(root: Path) -> dict:
    """Grade the notebook in root/submission; a results object (score 0 and why, if there is none)."""
    from autograder.grade import bad_result, for_one_notebook, grade_submission
    from autograder.harness.results import set_visibility
    for_one_notebook()
    config = json.loads((root / "source" / "gradescope.json").read_text())
    chapter, seen = config["chapter"], {**DEFAULT_VISIBILITY, **config.get("visibility", {})}
    notebook, problem = find_notebook(root / "submission", chapter)
    if notebook is None:
        return set_visibility(bad_result(problem, chapter, 0.0), seen["hidden_tests"], seen["result"])
    limits = Limits(call_seconds=float(config.get("call_timeout", 10.0)))
    with Sandbox(limits, isolation="auto") as box:  # as root: students get an unused, unprivileged uid
        result = grade_submission(notebook, box, chapter, inputs_key=inputs_key(root))
        public = public_tests(root, notebook, box, seen["public_checks"])
    result["extra_data"]["student_uid"] = getattr(box, "host_uid", None)
    set_visibility(result, seen["hidden_tests"], seen["result"])
    result["tests"] = public + result["tests"]
    return gradescope_late.apply(result, root, config)


def run(root: Path) -> int:
    """Write root/results/results.json for the submission in root/submission."""
    from autograder.harness.results import write_json
    try:
        result = grade_here(root)
    except Exception as exc:  # noqa: BLE001 - Gradescope must get a results.json whatever happens
        import traceback
        traceback.print_exc()
        result = {"score": 0.0, "output": f"The autograder failed ({type(exc).__name__}) while grading "
                  "this submission. Tell your instructor.", "extra_data": {"status": "crashed"}}
    write_json(root / "results" / "results.json", result)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder.exports.gradescope", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="grade the submission in ROOT/submission (what run_autograder calls)")
    r.add_argument("--root", default="/autograder", help="Gradescope's /autograder folder")
    args = parser.parse_args(argv)
    return run(Path(args.root))


if __name__ == "__main__":
    sys.exit(main())
