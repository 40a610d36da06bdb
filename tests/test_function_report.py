"""Does grading one notebook print, per function, the points and each failed test's feedback?"""
from autograder.harness.results import function_report


def test_report_lists_functions_and_failed_feedback():
    result = {"score": 3, "max_score": 5, "output": "Chapter x: 3 / 5 points.\n\nSome cells of your notebook raised",
              "tests": [{"name": "f: right?", "score": 2, "max_score": 2, "output": "", "tags": ["f"]},
                        {"name": "g: right?", "score": 1, "max_score": 1, "output": "", "tags": ["g"]},
                        {"name": "g: on float64?", "score": 0, "max_score": 2,
                         "output": "the scores should have dtype float64\nHint: keep the dtype", "tags": ["g"]}]}
    text = function_report(result)
    lines = text.splitlines()
    assert lines[1].split() == ["f", "2", "2", "ok"] and lines[2].split() == ["g", "1", "3", "FAILED"]
    assert "total: 3 / 5" in text and "* g: on float64?" in text and "    Hint: keep the dtype" in text
    assert "Some cells of your notebook raised" in text
