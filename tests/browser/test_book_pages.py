"""What a reader sees: every page of _toc.yml opened in Chromium, offline."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.browser.conftest import HTML, ROOT, SHOTS, toc_pages

PAGES = toc_pages()
MATHJAX_READY = """async () => {
  if (!window.MathJax || !MathJax.startup) { return false; }
  await MathJax.startup.promise; return true; }"""
RAW_MATH_LEFT = """() => {
  const main = document.querySelector('main') || document.body;
  const copy = main.cloneNode(true);
  copy.querySelectorAll('pre, code, script, mjx-container, .highlight').forEach(e => e.remove());
  const text = copy.innerText;
  return ['\\\\(', '\\\\[', '$$'].filter(s => text.includes(s)); }"""
OVERFLOWING_CODE = """() => [...document.querySelectorAll('div.cell_input pre, div.highlight pre')]
  .filter(p => p.innerText.split('\\n').every(l => l.length <= 100))
  .filter(p => p.scrollWidth > p.clientWidth + 1).map(p => p.innerText.slice(0, 80))"""
RAW_TABLE_ROW = re.compile(r"^\s*\|.*\|\s*\|[-:|\u2014 ]*\|")   # "| a | b | |---|---|" on one line
BROKEN_IMAGES = """() => [...document.images]
  .filter(i => !i.complete || i.naturalWidth === 0).map(i => i.getAttribute('src'))"""


def open_page(page, site, name):
    assert (HTML / f"{name}.html").exists(), f"{name}.html was not built (is the page executed?)"
    page.goto(f"{site}/{name}.html", wait_until="load")
    return page


@pytest.mark.parametrize("name", PAGES)
def test_page_renders_offline(page, site, name):
    """No console error; every formula typeset; every image loaded; no error output; screenshot."""
    open_page(page, site, name)
    n_math = page.locator("main .math").count()
    if n_math:
        assert page.evaluate(MATHJAX_READY), f"{name}: MathJax did not load"
        typeset = page.locator("main mjx-container").count()
        assert typeset >= n_math, f"{name}: {typeset} of {n_math} formulas typeset"
    assert page.evaluate(RAW_MATH_LEFT) == [], f"{name}: raw TeX left on the page"
    assert page.evaluate(BROKEN_IMAGES) == [], f"{name}: images that did not load"
    assert page.evaluate(OVERFLOWING_CODE) == [], f"{name}: code of <= 100 characters a line " \
        "overflows its box (book/_static/course.css)"
    errors = page.locator(".cell_output .traceback, .cell_output .output.error, "
                          ".cell_output .output.stderr")
    assert errors.count() == 0, f"{name}: an output cell shows an error:\n" + \
        "\n".join(errors.all_inner_texts())[:2000]
    outputs = "\n".join(page.locator(".cell_output").all_inner_texts())
    assert "Traceback (most recent call last)" not in outputs, f"{name}: a traceback is shown"
    raw_tables = [line for line in outputs.splitlines() if RAW_TABLE_ROW.match(line)]
    assert not raw_tables, f"{name}: a Markdown table shown as raw text (nb_render_markdown_format " \
        f"in _config.yml):\n" + "\n".join(raw_tables[:3])
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name.replace('/', '__')}.png"), full_page=True)
    assert page.errors == [], f"{name}: " + "\n".join(page.errors)


CHAPTERS = [p for p in PAGES if p.startswith("book/chapters/")]


def code_cells(path: Path) -> list[str]:
    nb = json.loads(path.read_text())
    return ["".join(c["source"]) if isinstance(c["source"], list) else c["source"]
            for c in nb["cells"] if c["cell_type"] == "code"]


@pytest.mark.parametrize("name", CHAPTERS)
def test_launch_and_download_buttons_open_the_exercise_notebook(page, site, name):
    chapter = Path(name).name
    exercise = f"exercises/{chapter}.ipynb"
    open_page(page, site, name)
    hrefs = page.eval_on_selector_all("main a[href]", "as => as.map(a => a.href)")
    colab = [h for h in hrefs if "colab.research.google.com" in h]
    binder = [h for h in hrefs if "mybinder.org" in h]
    download = [h for h in hrefs if "raw.githubusercontent.com" in h]
    assert colab and all(h.endswith(exercise) for h in colab), colab
    assert binder and all(f"labpath=exercises%2F{chapter}.ipynb" in h for h in binder), binder
    assert download and all(h.endswith(exercise) for h in download), download
    launch = page.eval_on_selector_all(".dropdown-launch-buttons a[href]",
                                       "as => as.map(a => a.href)")
    assert all(exercise in h for h in launch), f"a launch button opens something else: {launch}"
    # The theme's ".ipynb" download is the page's notebook: its code must be the exercise's.
    ipynb = page.eval_on_selector_all("a[href$='.ipynb']", "as => as.map(a => a.href)")
    for href in [h for h in ipynb if "/_sources/" in h]:
        local = HTML / "_sources" / href.split("/_sources/", 1)[1]
        assert code_cells(local) == code_cells(ROOT / exercise), \
            f"{href}: its code cells differ from {exercise} (run `make exercises`?)"


def test_search_finds_softmax_and_lands_on_its_page(page, site):
    page.goto(f"{site}/search.html?q=softmax", wait_until="load")
    results = page.locator("#search-results ul.search li a, ul.search li a")
    results.first.wait_for(timeout=30_000)
    assert results.count() >= 1
    results.first.click()
    page.wait_for_load_state("load")
    assert "search.html" not in page.url
    assert "softmax" in page.locator("main").inner_text().lower(), page.url


def click_widget(page, root):
    """Click the first query token of one attention view; return (active, coloured keys)."""
    root.locator("text.query").first.click()
    active = root.get_attribute("data-active")
    coloured = root.evaluate("""r => [...r.querySelectorAll('span.attnview-key')]
        .filter(s => s.style.background && s.style.background !== 'transparent').length""")
    return active, coloured


def test_attention_view_responds_to_a_click(page, site, tmp_path):
    """A standalone page with two views: clicking a query colours its keys; the head selector
    switches the weights shown; the two views do not interfere."""
    import numpy as np
    from attnkit.widget import attention_view
    w = np.random.default_rng(0).dirichlet(np.ones(4), size=(2, 3, 3))  # (L, H, Q, K)
    views = [attention_view(w, ["a", "b", "c"], ["w", "x", "y", "z"], title=f"view {i}")
             for i in range(2)]
    target = HTML / "_widget_test.html"
    target.write_text("<html><body>" + "".join(v._repr_html_() for v in views) + "</body></html>")
    try:
        page.goto(f"{site}/_widget_test.html", wait_until="load")
        first, second = page.locator(".attnview").nth(0), page.locator(".attnview").nth(1)
        assert click_widget(page, first) == ("0", 4)
        assert second.get_attribute("data-active") == "-1"
        cell = first.locator('rect.cell[data-q="0"][data-k="0"]')
        before = cell.get_attribute("fill")
        first.locator('select[data-role="head"]').select_option("2")
        assert cell.get_attribute("fill") != before or w[0, 0, 0, 0] == w[0, 2, 0, 0]
        assert page.errors == []
    finally:
        target.unlink()


NEEDS_VIEW = {"02_attention", "03_transformer"}  # issue 9: at least one view each


@pytest.mark.parametrize("name", CHAPTERS)
def test_attention_views_on_the_page_respond_to_a_click(page, site, name):
    open_page(page, site, name)
    roots = page.locator(".attnview")
    if roots.count() == 0:
        assert Path(name).name not in NEEDS_VIEW, f"{name} must show an attention view"
        pytest.skip(f"{name} has no attention view")
    if Path(name).name == "03_transformer":
        assert page.locator('.attnview select[data-role="head"]').count(), \
            "03's attention view must switch between heads"
    for i in range(roots.count()):
        root = roots.nth(i)
        root.scroll_into_view_if_needed()
        active, coloured = click_widget(page, root)
        assert active == "0" and coloured > 0, f"{name}: view {i} did not respond"
    assert page.errors == []
