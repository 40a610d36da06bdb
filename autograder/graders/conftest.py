"""Fixtures of the hidden graders: `student` (the sandboxed submission) and `ref` (the solution).

Run by `python -m autograder grade`, they come from its plugin. Authors can
also run a grader file directly:
    pytest autograder/graders/test_02_attention.py --submission solutions/02_attention.py
"""
from __future__ import annotations

import pytest

from autograder.harness.plugin import GradingPlugin


def pytest_addoption(parser) -> None:
    parser.addoption("--submission", default=None, help="notebook to grade when running graders directly")
    parser.addoption("--isolation", default="auto", help="auto, bwrap or process")


def _plugin(config) -> GradingPlugin:
    plugin = next((p for p in config.pluginmanager.get_plugins() if isinstance(p, GradingPlugin)), None)
    if plugin is None:
        from autograder.harness.notebook import read_submission
        from autograder.harness.sandbox import Sandbox
        from autograder.reference import load_reference
        path = config.getoption("--submission")
        if not path:
            pytest.exit("give --submission NOTEBOOK to run the graders directly", returncode=4)
        sub = read_submission(path)
        plugin = GradingPlugin(sub.chapter, sub.cells, Sandbox(isolation=config.getoption("--isolation")),
                               load_reference=load_reference)
        config.pluginmanager.register(plugin)
        config.add_cleanup(lambda: (plugin.close(), plugin.sandbox.close()))
    return plugin


@pytest.fixture(scope="session")
def student(request):
    """The submission's functions, running in a sandboxed process."""
    return _plugin(request.config).student()


@pytest.fixture(scope="session")
def ref(request):
    """The reference solution's names."""
    return _plugin(request.config).reference()
