"""`python -m autograder report OUT`: the summary, and report.html as Chromium shows it (offline)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from autograder.harness.atomic import write_json
from autograder.harness.results import TestResult, results_json
from autograder.report.stats import ClassStats

CHROMIUM = os.environ.get("COURSE_CHROMIUM", "/usr/bin/chromium")
CHAPTER = "02_attention"
CONCAT = "the scores looks like the result of a known mistake: concat order [h; s]"
TESTS = [("additive: matches", "additive_score", 2.0), ("additive: dtype", "additive_score", 1.0),
         ("dot: matches", "dot_score", 2.0), ("dot: gradients", "dot_score", 1.0)]


def _graded(failed: dict[str, str], seconds: float, late: dict | None = None) -> dict:
    tests = [TestResult(name, fn, 0.0 if name in failed else pts, pts, "failed" if name in failed else "passed",
                        failed.get(name, "")) for name, fn, pts in TESTS]
    result = results_json(CHAPTER, tests, "Chapter 02_attention.", {"status": "graded", "execution_time": seconds})
    if late:
        result["extra_data"]["late"] = late
        result["score"] = late["raw_score"] - late["penalty"]
    return result


def _failed(status: str, message: str) -> dict:
    return results_json(CHAPTER, [], message, {"status": status, "execution_time": 9.0}, max_score=6.0)


@pytest.fixture
def graded_class(tmp_path) -> Path:
    out = tmp_path / "out"
    late = {"seconds_late": 7200.0, "raw_score": 6.0, "penalty": 3.0, "submitted_from": "file mtime"}
    results = {
        "s1": _graded({}, 1.0),
        "s2": _graded({"additive: matches": CONCAT + "\nHint: split W"}, 2.0),
        "s3": _graded({"additive: matches": CONCAT, "dot: matches": "the scores looks like the result of a known "
                                                                     "mistake: scaled by 1/sqrt(D)"}, 3.0),
        "s4": _graded({"dot: matches": "the scores does not match the reference"}, 4.0),
        "s5": _failed("error", "This submission could not be graded: not a notebook"),
        "s6": _failed("timeout", "Grading this submission took longer than 720 s, so it was stopped. Score: 0."),
        "s7": _graded({}, 5.0, late),
    }
    for name, result in results.items():
        result["extra_data"]["submission"] = name
        write_json(out / name / "results.json", result)
    (out / "grades.csv").write_text("submission,chapter,score,max,status\ns8,,,,pending\n")
    return out


def test_the_statistics_count_losses_among_the_graded_and_mistakes_once_per_submission(graded_class):
    (chapter,) = ClassStats.read(graded_class).chapters()
    assert sorted(chapter.scores()) == [0, 0, 2, 3, 4, 4, 6]
    assert [(x.name, x.lost, x.n) for x in chapter.functions()] == [("additive_score", 2, 5), ("dot_score", 2, 5)]
    assert [(x.name, x.lost) for x in chapter.tests()] == [("additive: matches", 2), ("dot: matches", 2),
                                                          ("additive: dtype", 0), ("dot: gradients", 0)]
    assert chapter.mistakes() == [("additive_score", "concat order [h; s]", 2),
                                  ("dot_score", "scaled by 1/sqrt(D)", 1)]


def test_the_report_command_prints_a_summary_and_writes_one_offline_page(graded_class, capsys):
    from autograder.cli import main
    assert main(["report", str(graded_class)]) == 0
    printed = capsys.readouterr().out
    assert "7 submissions: 1 error, 5 graded, 1 timeout; 1 pending" in printed
    assert f"{CHAPTER}: mean 2.7, median 3, min 0, max 6 (of 6)" in printed
    assert "hardest test: additive: matches [additive_score]: 2 of 5 lost points" in printed
    assert "commonest named mistake: concat order [h; s] [additive_score]: 2 submissions" in printed
    assert "late: 1 submissions, 3 points of penalties" in printed
    assert "grading time: median 4.0 s, max 9.0 s, 33 s in all" in printed
    page = (graded_class / "report.html").read_text()
    assert "http://" not in page and "https://" not in page and page.count("data:image/png;base64,") == 2


def test_the_report_renders_in_chromium_with_its_histogram_and_tables(graded_class):
    from playwright.sync_api import sync_playwright

    from autograder.report import write_report
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} missing: apt-get install chromium (never `playwright install`)")
    path, _ = write_report(graded_class)
    requests, errors = [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page()
        page.on("request", lambda r: requests.append(r.url))
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.goto(path.resolve().as_uri())
        histogram = page.locator("img#histogram-0")
        size = histogram.evaluate("img => [img.complete, img.naturalWidth, img.naturalHeight]")
        tests = page.locator("#tests-0 tbody tr").all_inner_texts()
        mistakes = page.locator("#mistakes-0 tbody tr").all_inner_texts()
        problems = page.locator("#problems tbody tr").all_inner_texts()
        functions = page.locator("#functions-0 tbody tr").count()
        timing = page.locator("img#time-histogram").evaluate("img => img.naturalWidth")
        browser.close()
    assert size[0] and size[1] > 300 and size[2] > 100  # the PNG decoded, at its size
    assert timing > 300 and functions == 2
    assert len(tests) == 4 and tests[0].startswith("additive: matches") and "2 of 5" in tests[0]
    assert mistakes[0].split("\t") == ["additive_score", "concat order [h; s]", "2"]
    assert [row.split("\t")[:2] for row in problems] == [["s5", "error"], ["s6", "timeout"]]
    assert errors == [] and all(u.startswith(("file:", "data:")) for u in requests)


def test_an_empty_folder_is_refused_with_a_reason(tmp_path, capsys):
    from autograder.cli import main
    assert main(["report", str(tmp_path)]) == 2
    assert "no results.json" in capsys.readouterr().err
