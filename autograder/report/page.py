"""The class report as one HTML file: matplotlib figures embedded as base64 PNGs, tables, no link outside."""
from __future__ import annotations

import base64
import html
import io
from collections import Counter

from autograder.report.stats import ChapterStats, ClassStats, Loss, describe

STYLE = """body{font-family:sans-serif;max-width:64em;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border-bottom:1px solid #ddd;padding:.3em .6em;
text-align:left;vertical-align:top}td.num,th.num{text-align:right}img{max-width:100%}
.share{white-space:nowrap}.bar{display:inline-block;height:.8em;background:#c44;vertical-align:middle}
small{color:#666}"""


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _img(data: str, alt: str, ident: str) -> str:
    return f'<img id="{ident}" src="data:image/png;base64,{data}" alt="{html.escape(alt)}">'


def score_histogram(chapter: ChapterStats) -> str:
    """The final scores' distribution, as a base64 PNG."""
    from matplotlib.figure import Figure  # no pyplot: no backend, no global state
    top = chapter.max_score
    fig = Figure(figsize=(7, 3.2))
    ax = fig.add_subplot()
    if 0 < top <= 40:  # one bar per point, centred on it
        bins = [x - 0.5 for x in range(int(top) + 2)]
    else:
        bins = [top * i / 20 for i in range(21)] if top else 10
    ax.hist(chapter.scores(), bins=bins, color="#4a7ab5", edgecolor="white")
    ax.set_xlabel(f"score (of {top:g})")
    ax.set_ylabel("submissions")
    ax.set_title(f"{chapter.chapter}: scores of {len(chapter.scored)} submissions")
    ax.yaxis.get_major_locator().set_params(integer=True)
    return _png(fig)


def time_histogram(seconds: list[float]) -> str:
    """Grading time per submission, as a base64 PNG."""
    from matplotlib.figure import Figure
    fig = Figure(figsize=(7, 2.6))
    ax = fig.add_subplot()
    ax.hist(seconds, bins=20, color="#888", edgecolor="white")
    ax.set_xlabel("grading time of one submission (s)")
    ax.set_ylabel("submissions")
    ax.yaxis.get_major_locator().set_params(integer=True)
    return _png(fig)


def _table(ident: str, header: list[str], rows: list[list[str]], numeric: set[int] = frozenset()) -> str:
    if not rows:
        return f'<p id="{ident}"><small>none</small></p>'
    th = "".join(f"<th{' class=num' if i in numeric else ''}>{html.escape(h)}</th>" for i, h in enumerate(header))
    body = "".join("<tr>" + "".join(f"<td{' class=num' if i in numeric else ''}>{c}</td>" for i, c in enumerate(r))
                   + "</tr>" for r in rows)
    return f'<table id="{ident}"><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>'


def _loss_rows(losses: list[Loss], with_function: bool) -> list[list[str]]:
    e = html.escape
    def share(x: Loss) -> str:
        bar = f'<span class="bar" style="width:{x.share * 8:.2f}em"></span>'
        return f'<span class="share">{x.share:.0%} {bar}</span>'
    return [[e(x.name), *([f"<code>{e(x.function)}</code>"] if with_function else []), f"{x.points:g}",
             f"{x.lost} of {x.n}", share(x)] for x in losses]


def _numbers(values: list[float], unit: str = "") -> str:
    d = describe(values)
    return ", ".join(f"{k} {v:.3g}{unit}" for k, v in d.items()) if d else "none"


def chapter_section(chapter: ChapterStats, slug: str) -> str:
    e = html.escape
    statuses = ", ".join(f"{n} {s}" for s, n in sorted(Counter(s.status for s in chapter.submissions).items()))
    mistakes = [[f"<code>{e(fn)}</code>", e(name), str(n)] for fn, name, n in chapter.mistakes()]
    return f"""<section id="chapter-{slug}">
<h2>{e(chapter.chapter)}</h2>
<p>{len(chapter.submissions)} submissions ({statuses}). Final scores (after late penalties), of
{chapter.max_score:g}: {_numbers(chapter.scores())}.</p>
{_img(score_histogram(chapter), f"histogram of the scores of {chapter.chapter}", f"histogram-{slug}")}
<h3>Graded functions: who lost points</h3>
<p><small>Share of the {len(chapter.graded)} graded submissions (status "graded") that lost points in each.</small></p>
{_table(f"functions-{slug}", ["function", "points", "lost points", "share"],
         _loss_rows(chapter.functions(), False), {1, 2})}
<h3>Tests: who lost points</h3>
{_table(f"tests-{slug}", ["test", "function", "points", "lost points", "share"],
         _loss_rows(chapter.tests(), True), {2, 3})}
<h3>Named mistakes</h3>
<p><small>Known mistakes the feedback named, each counted once per submission.</small></p>
{_table(f"mistakes-{slug}", ["function", "mistake", "submissions"], mistakes, {2})}
</section>"""


def render(stats: ClassStats) -> str:
    """The whole report page."""
    e = html.escape
    counts = ", ".join(f"{n} {s}" for s, n in stats.counts().items())
    problems = [[e(s.name), e(s.status), e(s.message)] for s in stats.problems()]
    superseded = [[e(s.name), e(s.student), e(s.superseded_by)] for s in stats.superseded()]
    late = [[e(s.name), f"{s.late['seconds_late'] / 3600:.1f}", f"{s.late.get('penalty', 0):g}", f"{s.score:g}",
             e(str(s.late.get("submitted_from", "")))] for s in stats.late()]
    seconds = stats.seconds()
    timing = (_img(time_histogram(seconds), "histogram of the grading time per submission", "time-histogram")
              if seconds else "")
    chapters = "\n".join(chapter_section(c, str(i)) for i, c in enumerate(stats.chapters()))
    pending = f"<p>Not graded yet (pending in grades.csv): {e(', '.join(stats.pending))}.</p>" if stats.pending else ""
    unreadable = ("<p>Unreadable results (left out): " + e("; ".join(stats.unreadable)) + "</p>"
                  if stats.unreadable else "")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Class report: {e(str(stats.out))}</title>
<style>{STYLE}</style></head><body>
<h1>Class report</h1>
<p>{len(stats.submissions)} results in <code>{e(str(stats.out))}</code>: {e(counts)}.</p>{pending}{unreadable}
{chapters}
<h2>Submissions that could not be graded</h2>
{_table("problems", ["submission", "status", "message"], problems)}
<h2>Superseded notebooks</h2>
<p><small>Older notebooks of a student who handed in a newer one of the same chapter: not graded, not in
the scores; the newer one counts.</small></p>
{_table("superseded", ["submission", "student", "the notebook that counts"], superseded)}
<h2>Late submissions</h2>
{_table("late", ["submission", "hours late", "penalty", "final score", "time from"], late, {1, 2, 3})}
<h2>Grading time</h2>
<p id="timing">Per submission: {_numbers(seconds, " s")}; {sum(seconds):.0f} s in all.</p>
{timing}
</body></html>
"""
