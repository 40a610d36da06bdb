"""The similarity report: similarity.html (ranked pairs, identical files, side-by-side matches) and
similarity.csv (every pair), both written atomically."""
from __future__ import annotations

import html
import warnings
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

import jinja2
import numpy as np
from copydetect.utils import highlight_overlap

from autograder.harness.atomic import write_csv, write_text
from autograder.similarity.compare import NOISE, Entry, Pair

CSV_HEADER = ["rank", "chapter", "submission_a", "submission_b", "student_a", "student_b", "similarity",
              "share_a", "share_b", "matched_tokens", "identical_file", "file_a", "file_b"]
TEMPLATE = Path(__file__).with_name("report.html.j2")


def csv_rows(pairs: list[Pair]) -> list[list]:
    return [[i, p.a.chapter or "", p.a.name, p.b.name, p.a.student, p.b.student, f"{p.similarity:.3f}",
             f"{p.share_a:.3f}", f"{p.share_b:.3f}", p.tokens, "yes" if p.identical_file else "", p.a.path,
             p.b.path] for i, p in enumerate(pairs, 1)]


def identical_groups(entries: list[Entry]) -> list[list[Entry]]:
    """Submissions whose files are byte for byte the same (by sha256), two or more to a group."""
    by_sha: dict[str, list[Entry]] = defaultdict(list)
    for e in entries:
        if e.sha256:
            by_sha[e.sha256].append(e)
    return [group for group in by_sha.values() if len(group) > 1]


def highlighted(code: str, slices) -> str:
    """The code as HTML, its matched parts in <mark>."""
    slices = np.asarray(slices)
    if slices.size == 0:
        return html.escape(code)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        text, _ = highlight_overlap(code, slices, "<mark>", "</mark>", escape_html=True)
    return text


def side_by_side(pair: Pair) -> dict:
    return {"a": highlighted(pair.a.code, pair.slices[0]), "b": highlighted(pair.b.code, pair.slices[1])}


def render_html(entries: list[Entry], pairs: list[Pair], top: int, threshold: float) -> str:
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    template = env.from_string(TEMPLATE.read_text())
    shown = pairs[:top]
    return template.render(
        entries=entries, pairs=shown, total_pairs=len(pairs), threshold=threshold, noise=NOISE,
        chapters=sorted({e.chapter for e in entries if e.chapter}), identical=identical_groups(entries),
        unread=[e for e in entries if e.problem], empty=[e for e in entries if not e.problem and not e.code],
        shown=[(p, side_by_side(p)) for p in shown],
        generated=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))


def write_report(out: Path, entries: list[Entry], pairs: list[Pair], top: int = 50,
                 threshold: float = 0.5) -> tuple[Path, Path]:
    """OUT/similarity.html (the `top` pairs; those at or over `threshold` opened) and OUT/similarity.csv."""
    page, table = Path(out) / "similarity.html", Path(out) / "similarity.csv"
    write_text(page, render_html(entries, pairs, top, threshold))
    write_csv(table, CSV_HEADER, csv_rows(pairs))
    return page, table
