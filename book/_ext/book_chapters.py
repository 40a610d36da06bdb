"""Sphinx extension for the course book: the intro's table of chapters comes from _toc.yml.

    ```{course-chapters}
    01_seq2seq: autoregressive LMs, an RNN encoder-decoder, greedy and beam search | PyTorch basics
    02_attention: Bahdanau and Luong attention, scoring functions, masking | 01
    ```

Each line gives a chapter's "what you build" and "read first"; the table has one row for
each chapter of _toc.yml (every file under book/chapters/, in the toc's order), linked to its
page under the page's own title. A chapter of the toc without a line, or a line for a chapter
the toc does not hold, is a build warning: the table can neither go stale nor miss a chapter.
"""
from __future__ import annotations

from pathlib import Path

import yaml
from docutils import nodes
from docutils.parsers.rst import Directive
from sphinx import addnodes
from sphinx.util import logging

logger = logging.getLogger(__name__)
CHAPTERS_DIR = "book/chapters/"


def toc_files(toc: dict) -> list[str]:
    """Every file of a jupyter-book _toc.yml, root first, in order, without suffix."""
    files = [toc["root"]]

    def walk(entries):
        for entry in entries or []:
            if "file" in entry:
                files.append(entry["file"])
            walk(entry.get("sections"))
            walk(entry.get("chapters"))

    for part in toc.get("parts", []):
        walk(part.get("chapters"))
    walk(toc.get("chapters"))
    return [f.rsplit(".", 1)[0] if f.endswith((".md", ".ipynb")) else f for f in files]


def toc_chapters(toc: dict) -> list[str]:
    """The chapters of the book: the toc's files under book/chapters/, e.g. 'book/chapters/01_seq2seq'."""
    return [f for f in toc_files(toc) if f.startswith(CHAPTERS_DIR)]


def parse_lines(lines: list[str]) -> dict[str, tuple[str, str]]:
    """{'01_seq2seq': (what you build, read first)} from the directive's lines."""
    rows = {}
    for line in lines:
        if not line.strip():
            continue
        name, _, rest = line.partition(":")
        what, _, first = rest.partition("|")
        rows[name.strip()] = (what.strip(), first.strip())
    return rows


def chapter_rows(toc: dict, lines: list[str]) -> tuple[list[tuple[str, str, str]], list[str]]:
    """(rows: (doc, what, read first) for each toc chapter, problems: one sentence each)."""
    described = parse_lines(lines)
    docs = toc_chapters(toc)
    names = [d[len(CHAPTERS_DIR):] for d in docs]
    problems = [f"chapter {n} is in _toc.yml but has no line in course-chapters" for n in names
                if n not in described]
    problems += [f"course-chapters describes {n}, which is not a chapter of _toc.yml" for n in described
                 if n not in names]
    rows = [(doc, *described.get(name, ("", ""))) for doc, name in zip(docs, names)]
    return rows, problems


def _paragraph(*children) -> nodes.entry:
    entry = nodes.entry()
    entry += nodes.paragraph("", "", *children)
    return entry


class CourseChapters(Directive):
    has_content = True

    def run(self):
        env = self.state.document.settings.env
        path = Path(env.srcdir) / "_toc.yml"
        env.note_dependency(str(path))  # the page is read again when the toc changes
        toc = yaml.safe_load(path.read_text())
        rows, problems = chapter_rows(toc, list(self.content))
        for problem in problems:
            logger.warning(problem, location=(env.docname, self.lineno), type="course", subtype="chapters")
        table = nodes.table(classes=["course-chapters"])
        group = nodes.tgroup(cols=3)
        table += group
        for width in (30, 50, 20):
            group += nodes.colspec(colwidth=width)
        head, body = nodes.thead(), nodes.tbody()
        group += head
        group += body
        header = nodes.row()
        for title in ("chapter", "what you build", "read first"):
            header += _paragraph(nodes.Text(title))
        head += header
        for doc, what, first in rows:
            link = addnodes.pending_xref("", nodes.inline("", ""), refdomain="std", reftype="doc",
                                         reftarget="/" + doc, refexplicit=False, refdoc=env.docname,
                                         refwarn=True)
            row = nodes.row()
            row += _paragraph(link)
            row += _paragraph(nodes.Text(what))
            row += _paragraph(nodes.Text(first))
            body += row
        return [table]


def setup(app):
    app.add_directive("course-chapters", CourseChapters)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
