"""The pages around the chapters: the intro's table, the student page and the instructors' guide.

(Every page of _toc.yml, these included, also goes through test_book_pages.py: no console error,
formulas, images, a screenshot.)
"""
from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urljoin, urlparse

import pytest

from tests.browser.conftest import HTML, toc_pages
from tests.browser.test_book_pages import open_page

PAGES = toc_pages()
CHAPTERS = [p for p in PAGES if p.startswith("book/chapters/")]
GUIDE = [p for p in PAGES if p.startswith("book/instructors/")] + ["book/using"]


def test_the_intro_table_links_every_chapter_of_the_toc_under_its_title(page, site):
    open_page(page, site, "book/intro")
    rows = page.locator("table.course-chapters tbody tr")
    assert rows.count() == len(CHAPTERS)
    for i, chapter in enumerate(CHAPTERS):
        link = rows.nth(i).locator("td").first.locator("a")
        assert link.get_attribute("href") == f"{Path(chapter).relative_to('book')}.html"
        title = page.evaluate("""async url => {
            const r = await fetch(url); const d = new DOMParser().parseFromString(await r.text(), 'text/html');
            return d.querySelector('main h1').textContent.replace('#', '').trim(); }""",
                              f"{site}/{chapter}.html")
        assert link.inner_text().strip() == title, (chapter, link.inner_text(), title)
    assert "not in the book yet" not in page.locator("main").inner_text()


@pytest.mark.parametrize("name", GUIDE)
def test_guide_pages_show_their_commands_and_every_link_leads_to_a_page(page, site, name):
    open_page(page, site, name)
    assert page.locator("main div.highlight pre").count() >= 1, f"{name}: no command shown"
    assert "To be written" not in page.locator("main").inner_text(), f"{name}: a section is still to be written"
    hrefs = page.eval_on_selector_all("main a[href]", "as => as.map(a => a.href)")
    broken = []
    for href in hrefs:
        url = urlparse(href)
        if url.hostname != "127.0.0.1":
            continue
        target = HTML / url.path.lstrip("/")
        if not target.is_file():
            broken.append(href)
        elif url.fragment and f'id="{url.fragment}"' not in target.read_text():
            broken.append(href)
    assert not broken, f"{name}: links to nothing: {broken}"


def test_the_student_page_gives_the_release_commands_not_the_instructors():
    text = (HTML / "book" / "using.html").read_text()
    code = " ".join(re.findall(r"<pre>(.*?)</pre>", text, re.S))
    code = re.sub(r"<[^>]+>", "", code)
    assert "python -m attnkit check" in code and "jupyter lab" in code and "git clone" in code
    assert "make setup" not in code and "-m autograder" not in code
    main = re.sub(r"<[^>]+>", "", text.split("<main", 1)[1])
    for way in ("On Colab", "On Binder", "On your own machine", "Hand it in"):
        assert way in main


@pytest.mark.parametrize("name", CHAPTERS)
def test_citations_link_to_their_own_pages_bibliography(name):
    """Why the "duplicate citation" warning is silenced (_config.yml): a work cited in two chapters is
    listed in both, and each page's citations resolve to its own list."""
    text = (HTML / f"{name}.html").read_text()
    listed = dict(re.findall(r'<div class="citation" id="([^"]+)" role="doc-biblioentry">\s*'
                             r'<span class="label"><span class="fn-bracket">\[</span>'
                             r'(?:<a role="doc-backlink" href="[^"]*">)?([^<]+)', text))
    assert listed, f"{name}: no bibliography found (did the markup change?)"
    labels = set(listed.values())
    cites = [(href, label) for href, label in
             re.findall(r'<a class="reference internal" href="([^"]*)" title="[^"]*">([^<]+)</a>', text)
             if label in labels]
    assert cites, f"{name}: no citation found"
    stray = [(href, label) for href, label in cites
             if not href.startswith("#") or listed.get(href[1:]) != label]
    assert not stray, f"{name}: citations that leave the page or miss its bibliography: {stray[:5]}"
