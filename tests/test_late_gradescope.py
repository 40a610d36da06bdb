"""Late submissions on Gradescope: times and due dates from submission_metadata.json, the policy from the zip."""
from __future__ import annotations

import json
import zipfile
from datetime import datetime, timedelta

import pytest

from autograder.exports import gradescope_late
from tests.batch.toy import CHAPTER, toy_chapter  # noqa: F401 - fixture
from tests.test_gradescope_export import run_autograder

METADATA = {"id": 1, "created_at": "2026-12-03T00:00:00.000000+00:00",
            "assignment": {"due_date": "2026-12-01T23:59:00.000000+00:00", "late_due_date": None},
            "users": [{"email": "a@example.edu", "id": 7, "name": "A"}]}


def test_gradescope_metadata_gives_the_times_and_a_students_extension_wins():
    when = gradescope_late.lateness(METADATA)
    assert (when.seconds_late, when.extension) == (24 * 3600 + 60, "")
    extended = dict(METADATA, users=[{"id": 7, "assignment": {"due_date": "2026-12-03T12:00:00+00:00"}},
                                     {"id": 8, "assignment": {"due_date": "2026-12-02T12:00:00+00:00"}}])
    assert gradescope_late.lateness(extended).seconds_late == 0  # a group: the latest due date of its members
    assert gradescope_late.lateness({"created_at": "2026-12-03T00:00:00Z", "assignment": {}}) is None


def test_run_autograder_penalises_by_the_zips_policy(toy_chapter, tmp_path):
    from autograder.cli import main
    zip_path = tmp_path / "autograder.zip"
    assert main(["export-gradescope", CHAPTER, "--out", str(zip_path), "--late-policy", "per-day:25"]) == 0
    with zipfile.ZipFile(zip_path) as zf:
        assert json.loads(zf.read("gradescope.json"))["late_policy"] == "per-day:25"
    root = tmp_path / "autograder"
    root.mkdir()
    (root / "submission_metadata.json").write_text(json.dumps(METADATA))
    result = run_autograder(zip_path, root, {f"{CHAPTER}.ipynb": "ok"})
    assert (result["score"], result["extra_data"]["late"]["raw_score"]) == (2.0, 4.0)  # 2 started days: 50%
    assert "1 d 1 min after the due date" in result["output"]
    assert datetime.fromisoformat(result["extra_data"]["late"]["submitted"]) - timedelta(days=1, minutes=1) \
        == datetime.fromisoformat(result["extra_data"]["late"]["due"])


def test_the_zip_keeps_a_valid_policy_only():
    assert gradescope_late.zip_settings(None, None) is None
    assert gradescope_late.zip_settings("per-hour:5", 40) == {"late_policy": "per-hour:5", "late_cap": 40}
    for policy, cap in (("weekly", None), (None, 30.0)):
        with pytest.raises(ValueError):
            gradescope_late.zip_settings(policy, cap)
