"""tests/hostile/ holds data, not tests: the toy chapter's hidden graders in chapter/ run only
inside the grader (see tests/test_sandbox_hostile.py), never as part of this project's suite."""
collect_ignore = ["chapter"]
