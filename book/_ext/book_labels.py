"""Sphinx extension for the course book: one citation label per work, across the whole book.

The alpha labels of sphinxcontrib-bibtex are made unique per bibliography, that
is per page. Two works with the same authors' initials and year then carry the same
label on two pages (Lewis et al. 2020, BART, in chapter 06, and Liu et al. 2020 in
chapter 03 were both "LLG+20"). Here every label is computed once over all of
references.bib, and works that share one get "a", "b", ... in order of their keys,
so a label names the same work on every page.
"""
from __future__ import annotations

import functools
from collections import Counter
from pathlib import Path

import pybtex.plugin
from pybtex.database import parse_file
from pybtex.style.formatting.alpha import Style as AlphaStyle
from pybtex.style.labels.alpha import LabelStyle as AlphaLabels

BIB = Path(__file__).resolve().parents[2] / "references.bib"


@functools.lru_cache(maxsize=None)
def book_labels(path: Path = BIB) -> dict[str, str]:
    """key -> label, unique over the whole bibliography."""
    entries = parse_file(str(path)).entries
    plain = {key: AlphaLabels().format_label(entry) for key, entry in entries.items()}
    count, seen = Counter(plain.values()), Counter()
    labels = {}
    for key in sorted(plain):
        label = plain[key]
        if count[label] > 1:
            labels[key] = label + chr(ord("a") + seen[label])
            seen[label] += 1
        else:
            labels[key] = label
    return labels


class BookLabels(AlphaLabels):
    def format_labels(self, sorted_entries):
        labels = book_labels()
        for entry in sorted_entries:
            yield labels.get(entry.key) or self.format_label(entry)


class BookStyle(AlphaStyle):
    default_label_style = BookLabels


def setup(app):
    pybtex.plugin.register_plugin("pybtex.style.formatting", "bookalpha", BookStyle)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
