"""Student ids from LMS downloads (Canvas, Moodle, Gradescope) and from --roster; unmatched ones listed."""
from __future__ import annotations

import csv
from datetime import datetime, timedelta, timezone

from pathlib import Path

import pytest

from autograder.batch import find_jobs
from autograder.batch.ids import Roster, identify, lms_identity, lms_report
from autograder.batch.io import Report, lms_rows
from autograder.harness.notebook import chapter_from_name
from autograder.paths import chapters
from tests.batch.toy import CHAPTER, make_notebook, toy_chapter  # noqa: F401 - fixture

GRADESCOPE_YML = """\
submission_101:
  :submitters:
  - :name: Jane Doe
    :sid: '3031234567'
    :email: jane@example.edu
  :created_at: 2026-12-01 23:02:00.000000000 -08:00
  :score: 0.0
submission_102:
  :submitters:
  - :name: Al Pair
    :sid: ''
    :email: al@example.edu
  - :name: Bo Pair
    :sid: '3039999999'
    :email: bo@example.edu
  :created_at: 2026-12-01 22:00:00.000000000 -08:00
"""


def touch(folder: Path, *names: str) -> Path:
    for name in names:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("{}")
    return folder


def ids_of(folder: Path, roster: Roster | None = None) -> dict[str, tuple[str, str]]:
    ided = identify([str(folder)], find_jobs([str(folder)]), roster)
    return {j.path.relative_to(folder).as_posix(): (j.student, ided.identities[j.name].source) for j in ided.jobs}


def test_canvas_names_give_the_canvas_user_id_late_or_not(tmp_path):
    folder = touch(tmp_path, "doejohn_123456_7891011_02_attention.ipynb",
                   "smithann_late_234567_8912345_02_attention.ipynb",
                   "leebo_LATE_345678_9123456_02_attention-1.ipynb", "notes.ipynb")
    assert ids_of(folder) == {
        "doejohn_123456_7891011_02_attention.ipynb": ("123456", "canvas"),
        "smithann_late_234567_8912345_02_attention.ipynb": ("234567", "canvas"),
        "leebo_LATE_345678_9123456_02_attention-1.ipynb": ("345678", "canvas"),
        "notes.ipynb": ("", "unmatched"),  # among LMS names: listed, never guessed
    }
    assert lms_identity(Path("smithann_late_234567_8912345_02_attention.ipynb")).late
    assert not lms_identity(Path("doejohn_123456_7891011_02_attention.ipynb")).late


@pytest.mark.parametrize("chapter", [*chapters(), CHAPTER])
def test_lms_download_names_give_the_chapter(chapter):
    """The numbers before the chapter (Canvas's user and submission ids) are not its "NN_"."""
    for name in (f"doejohn_123456_7891011_{chapter}.ipynb", f"doejohn_123456_7891011_{chapter}-1.ipynb",
                 f"smithann_late_23_8912345_{chapter}-12.ipynb", f"Jo Doe_123_assignsubmission_file_{chapter}.ipynb",
                 f"alice_{chapter}.ipynb", f"{chapter}.ipynb"):
        assert chapter_from_name(Path(name)) == chapter, name
    assert chapter_from_name(Path("doejohn_123456_7891011_notes.ipynb")) is None


def test_a_canvas_named_notebook_without_metadata_is_graded_as_its_chapter(toy_chapter, tmp_path):
    """Without --chapter and with the notebook's own metadata lost, the chapter comes from the name."""
    import json
    from autograder.cli import main
    subs = tmp_path / "canvas"
    for name in (f"doejohn_123456_7891011_{CHAPTER}-1.ipynb", f"smithann_late_234567_8912345_{CHAPTER}.ipynb"):
        path = make_notebook(subs / name, "ok")
        nb = json.loads(path.read_text())
        nb["metadata"].pop("course", None)
        path.write_text(json.dumps(nb))
    assert main(["grade", str(subs), "--out", str(tmp_path / "out"), "--no-progress"]) == 0
    with open(tmp_path / "out" / "grades.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["chapter"], r["score"], r["max"]) for r in rows] == [(CHAPTER, "4", "4")] * 2


def test_moodle_folders_and_files_give_the_participant_id(tmp_path):
    folder = touch(tmp_path, "Jane Doe_12345_assignsubmission_file_/02_attention.ipynb",
                   "Participant_67890_assignsubmission_file_02_attention.ipynb")
    assert ids_of(folder) == {"Jane Doe_12345_assignsubmission_file_/02_attention.ipynb": ("12345", "moodle"),
                              "Participant_67890_assignsubmission_file_02_attention.ipynb": ("67890", "moodle")}


def test_a_gradescope_export_gives_sids_groups_and_submission_times(tmp_path):
    export = touch(tmp_path / "assignment_7_export", "submission_101/02_attention.ipynb",
                   "submission_102/work/02_attention.ipynb", "submission_103/02_attention.ipynb")
    (export / "submission_metadata.yml").write_text(GRADESCOPE_YML)
    ided = identify([str(tmp_path)], find_jobs([str(tmp_path)]))
    got = {j.path.parent.relative_to(export).parts[0]: (j.student, ided.identities[j.name].source) for j in ided.jobs}
    assert got == {"submission_101": ("3031234567", "gradescope"),
                   "submission_102": ("al@example.edu;3039999999", "gradescope"),  # a group: each member
                   "submission_103": ("", "unmatched")}  # not in the metadata
    jane = next(ided.identities[j.name] for j in ided.jobs if j.student == "3031234567")
    assert jane.submitted == datetime(2026, 12, 2, 7, 2, tzinfo=timezone.utc)
    assert jane.submitted.utcoffset() == timedelta(hours=-8)

    res = {"score": 5.0, "max_score": 6.0, "extra_data": {"status": "graded"}}
    report = Report(ided.jobs, {j.name: dict(res) for j in ided.jobs})
    assert lms_rows(lms_report(report)) == ([["3031234567", "5"], ["3039999999", "5"], ["al@example.edu", "5"]], [])


def test_a_plain_class_folder_keeps_its_folder_and_file_names(tmp_path):
    folder = touch(tmp_path, "alice.ipynb", "bob/hw.ipynb")
    assert ids_of(folder) == {"alice.ipynb": ("alice", "folder"), "bob/hw.ipynb": ("bob", "folder")}


def test_a_roster_maps_names_and_patterns_and_lists_the_rest(tmp_path):
    folder = touch(tmp_path / "subs", "doejohn_123456_7891011_02_attention.ipynb", "alice.ipynb", "bob/hw.ipynb",
                   "zed.ipynb", "twin.ipynb")
    roster_csv = tmp_path / "roster.csv"
    with open(roster_csv, "w", newline="") as f:
        csv.writer(f).writerows([["file", "id"], ["doejohn_*", "S-001"], ["alice.ipynb", "S-002"],
                                 ["bob/*", "S-003"], ["twin*", "S-004"], ["*win.ipynb", "S-005"], ["", ""]])
    roster = Roster.read(roster_csv)
    got = ids_of(folder, roster)
    assert got == {"doejohn_123456_7891011_02_attention.ipynb": ("S-001", "roster"), "alice.ipynb": ("S-002", "roster"),
                   "bob/hw.ipynb": ("S-003", "roster"), "zed.ipynb": ("", "unmatched"),
                   "twin.ipynb": ("", "unmatched")}  # two ids: ambiguous, not guessed
    ided = identify([str(folder)], find_jobs([str(folder)]), roster)
    reasons = {j.path.name: ided.identities[j.name].reason for j in ided.unmatched}
    assert reasons == {"zed.ipynb": "no row of the roster matches it",
                       "twin.ipynb": "the roster gives it several ids (S-004, S-005)"}


@pytest.mark.parametrize("text, message", [("file,id\n", "no rows"), ("file,id\nalice.ipynb\n", "line 2"),
                                           ("file,id\n,S-1\n", "line 2")])
def test_a_bad_roster_is_refused_with_its_line(tmp_path, text, message):
    (tmp_path / "r.csv").write_text(text)
    with pytest.raises(ValueError, match=message):
        Roster.read(tmp_path / "r.csv")
    with pytest.raises(ValueError, match="No such file"):
        Roster.read(tmp_path / "missing.csv")


def test_the_lms_csv_of_a_canvas_download_has_canvas_ids_and_lists_the_unmatched(toy_chapter, tmp_path, capsys):
    from autograder.cli import main
    subs = tmp_path / "canvas"
    make_notebook(subs / f"doejohn_123456_7891011_{CHAPTER}.ipynb", "ok")
    make_notebook(subs / f"smithann_late_234567_8912345_{CHAPTER}.ipynb", "wrong")
    make_notebook(subs / "stray.ipynb", "ok")
    lms = tmp_path / "lms.csv"
    assert main(["grade", str(subs), "--out", str(tmp_path / "out"), "--no-progress", "--lms-csv", str(lms),
                 "--lms-columns", "ID,Toy"]) == 0
    with open(lms, newline="") as f:
        assert list(csv.reader(f)) == [["ID", "Toy"], ["123456", "4"], ["234567", "1"]]
    err = capsys.readouterr().err
    assert "1 notebooks have no student id" in err and "stray.ipynb: not an LMS download's name" in err
    with open(tmp_path / "out" / "grades.csv", newline="") as f:
        assert len(list(csv.DictReader(f))) == 3  # graded all the same


def test_a_bad_roster_stops_the_command_before_grading(tmp_path, capsys):
    from autograder.cli import main
    touch(tmp_path / "subs", "alice.ipynb")
    (tmp_path / "roster.csv").write_text("file,id\nalice.ipynb\n")
    assert main(["grade", str(tmp_path / "subs"), "--out", str(tmp_path / "out"), "--roster",
                 str(tmp_path / "roster.csv")]) == 2
    assert "line 2" in capsys.readouterr().err and not (tmp_path / "out" / "grades.csv").exists()


def test_the_canvas_layout_has_the_columns_of_canvas_gradebook_export(toy_chapter, tmp_path, capsys):
    """`--lms-format canvas`: Student, ID, SIS User ID, SIS Login ID, Section, then the assignment, as
    Canvas's gradebook export has them (book/instructors/lms.md cites Canvas's guides); kept in OUT, so a
    rerun without the options writes the same layout."""
    from autograder.cli import main
    subs, out, lms = tmp_path / "canvas", tmp_path / "out", tmp_path / "canvas.csv"
    make_notebook(subs / f"doejohn_123456_7891011_{CHAPTER}.ipynb", "ok")
    make_notebook(subs / f"smithann_late_234567_8912345_{CHAPTER}.ipynb", "wrong")
    want = [["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Toy (4411)"],
            ["", "123456", "", "", "", "4"], ["", "234567", "", "", "", "1"]]
    assert main(["grade", str(subs), "--out", str(out), "--no-progress", "--lms-csv", str(lms),
                 "--lms-format", "canvas", "--lms-columns", "ID,Toy (4411)"]) == 0
    with open(lms, newline="") as f:
        assert list(csv.reader(f)) == want
    lms.unlink()
    assert main(["grade", str(subs), "--out", str(out), "--no-progress"]) == 0  # kept: written again
    with open(lms, newline="") as f:
        assert list(csv.reader(f)) == want
    assert main(["grade", str(subs), "--out", str(out), "--no-progress", "--lms-format", "canvas",
                 "--lms-columns", "student_id,Toy"]) == 2
    assert "one of Canvas's id columns" in capsys.readouterr().err


def test_the_roster_is_kept_for_the_lms_csv_of_later_runs(toy_chapter, tmp_path):
    from autograder.cli import main
    subs, out, lms = tmp_path / "subs", tmp_path / "out", tmp_path / "lms.csv"
    make_notebook(subs / "alice.ipynb", "ok")
    (tmp_path / "roster.csv").write_text("file,id\nalice*,S001\n")
    assert main(["grade", str(subs), "--out", str(out), "--no-progress", "--roster", str(tmp_path / "roster.csv"),
                 "--lms-csv", str(lms)]) == 0
    make_notebook(subs / "bob.ipynb", "wrong")  # not in the roster
    assert main(["grade", str(subs), "--out", str(out), "--no-progress"]) == 0
    with open(lms, newline="") as f:
        assert list(csv.reader(f)) == [["student_id", "score"], ["S001", "4"]]
