"""Known-correct variants of graded functions, in the styles of public implementations: each must get full
marks from the hidden graders (tests/test_graders_selftest.py) and pass every public check (`make release`
refuses a public check that one fails, course/release.py)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Variant:
    """A correct redefinition of `function` in another style (`name` says whose), appended to the solution
    notebook."""

    function: str
    name: str
    code: str
