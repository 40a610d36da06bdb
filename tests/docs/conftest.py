"""The student commands of the docs, run in a fresh clone of a release: `make test-book` runs them,
`make test` does not (they install the release's pinned packages into a new virtual environment:
minutes, and pip's index or cache)."""
import os

if os.environ.get("COURSE_BOOK_TESTS") != "1":
    collect_ignore_glob = ["test_*.py"]
