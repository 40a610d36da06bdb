"""Checking an upload before it is accepted: size, type, notebook format, chapter.

Every refusal is a sentence for the student. The notebook's code is not looked at here (the grader
does that, in its sandbox); only what can be said of the file itself.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

from autograder.harness.notebook import BadSubmission, parse_ipynb, read_submission, sniff


class Refused(ValueError):
    """The upload is not accepted; the message says why."""


def check(raw: bytes, filename: str, chapter: str, chapters: list[str], max_bytes: int) -> None:
    """Raise `Refused` unless `raw` is a notebook of `chapter`, one of the open `chapters`."""
    if chapter not in chapters:
        raise Refused(f"there is no open assignment {chapter!r} (open: {', '.join(chapters) or 'none'})")
    if not raw:
        raise Refused("the file is empty: save your notebook in Jupyter, then upload the .ipynb file")
    if len(raw) > max_bytes:
        raise Refused(f"the file is over the {max_bytes / 2**20:g} MiB limit: clear the outputs (Kernel > "
                      "Restart Kernel and Clear Outputs of All Cells), save and upload again")
    if not filename.lower().endswith(".ipynb"):
        kind = sniff(raw)
        raise Refused(f"{filename} is {kind or 'not a .ipynb file'}: upload your notebook, the .ipynb file")
    try:
        parse_ipynb(raw)
        validate_format(raw)
        with tempfile.TemporaryDirectory() as tmp:  # the grader's own reader: the same messages
            path = Path(tmp) / f"{chapter}.ipynb"
            path.write_bytes(raw)
            read_submission(path, chapter)
    except BadSubmission as exc:
        raise Refused(str(exc)) from None


def validate_format(raw: bytes) -> None:
    """nbformat's own schema check (BadSubmission with its message)."""
    import nbformat
    try:
        nb = nbformat.reads(raw.decode("utf-8"), as_version=4)
        nbformat.validate(nb)
    except nbformat.ValidationError as exc:
        raise BadSubmission(f"the notebook does not follow the notebook format (nbformat 4): "
                            f"{str(exc.message)[:200]}; open and save it again in Jupyter") from None
    except Exception as exc:  # noqa: BLE001 - nbformat's readers raise several kinds
        raise BadSubmission(f"the notebook cannot be read ({type(exc).__name__}: {str(exc)[:200]})") from None


def warm() -> None:
    """Import nbformat and build its schema validator now, not on the first upload (seconds)."""
    import nbformat
    nbformat.validate(nbformat.v4.new_notebook())
