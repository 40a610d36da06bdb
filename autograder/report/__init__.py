"""`python -m autograder report OUT`: a class report of a graded folder, OUT/report.html and a summary.

The page (one file, figures embedded, so it opens offline and can be mailed)
shows, per chapter, the distribution of the final scores as a histogram, the
share of graded submissions that lost points in each graded function and in
each test, and the named mistakes with their counts; then the submissions that
could not be graded, the late ones and the grading time. `stats` computes,
`page` draws (matplotlib) and writes the HTML.
"""
from __future__ import annotations

from pathlib import Path

from autograder.harness.atomic import write_text
from autograder.report.page import render
from autograder.report.stats import ClassStats, describe

REPORT = "report.html"


def summary(stats: ClassStats) -> str:
    """What the terminal shows: counts, scores, the hardest test and the commonest mistake per chapter."""
    counts = ", ".join(f"{n} {s}" for s, n in stats.counts().items())
    lines = [f"{len(stats.submissions)} submissions: {counts}"
             + (f"; {len(stats.pending)} pending" if stats.pending else "")]
    for ch in stats.chapters():
        d = describe(ch.scores())
        if d:
            lines.append(f"{ch.chapter}: mean {d['mean']:.1f}, median {d['median']:g}, min {d['min']:g}, "
                         f"max {d['max']:g} (of {ch.max_score:g}) over {len(ch.scored)} scored")
        tests = ch.tests()
        if tests and tests[0].lost:
            t = tests[0]
            lines.append(f"  hardest test: {t.name} [{t.function}]: {t.lost} of {t.n} lost points")
        mistakes = ch.mistakes()
        if mistakes:
            fn, name, n = mistakes[0]
            lines.append(f"  commonest named mistake: {name} [{fn}]: {n} submissions")
    problems = stats.problems()
    if problems:
        lines.append(f"not graded: {', '.join(f'{s.name} ({s.status})' for s in problems[:10])}"
                     + (f" and {len(problems) - 10} more" if len(problems) > 10 else ""))
    for s in stats.superseded():
        lines.append(f"superseded: {s.name} (a newer notebook of {s.student or '?'} counts: {s.superseded_by})")
    if stats.late():
        lines.append(f"late: {len(stats.late())} submissions, "
                     f"{sum(s.late.get('penalty', 0) for s in stats.late()):g} points of penalties")
    seconds = stats.seconds()
    if seconds:
        d = describe(seconds)
        lines.append(f"grading time: median {d['median']:.1f} s, max {d['max']:.1f} s, {sum(seconds):.0f} s in all")
    return "\n".join(lines)


def write_report(out: Path) -> tuple[Path, str]:
    """Write OUT/report.html (atomically); return its path and the summary. ValueError: nothing to report."""
    stats = ClassStats.read(Path(out))
    path = Path(out) / REPORT
    write_text(path, render(stats))
    return path, summary(stats)
