"""Browser tests of the built book (_build/html): `make test-book` runs them, `make test` does not.

They need a built book and Debian's chromium, so the default pytest run ignores this folder
unless COURSE_BOOK_TESTS=1 (set by `make test-book`). Playwright never downloads a browser here.
"""
from __future__ import annotations

import functools
import http.server
import os
import threading
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
HTML = ROOT / "_build" / "html"
SHOTS = ROOT / "_build" / "screenshots"
CHROMIUM = os.environ.get("COURSE_CHROMIUM", "/usr/bin/chromium")

if os.environ.get("COURSE_BOOK_TESTS") != "1":
    collect_ignore_glob = ["test_*.py"]


def toc_pages() -> list[str]:
    """Every page of _toc.yml (root first), as paths without suffix: 'book/intro', ..."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    pages = [toc["root"]]

    def walk(entries):
        for entry in entries or []:
            if "file" in entry:
                pages.append(entry["file"])
            walk(entry.get("sections"))
            walk(entry.get("chapters"))

    for part in toc.get("parts", []):
        walk(part.get("chapters"))
    walk(toc.get("chapters"))
    return [str(Path(p).with_suffix("")) if Path(p).suffix in (".md", ".ipynb") else p
            for p in pages]


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="session")
def site():
    """The built book served on localhost (fonts and search behave as on GitHub Pages)."""
    if not (HTML / "index.html").exists():
        pytest.fail("no built book: run `make book` first")
    handler = functools.partial(_Quiet, directory=str(HTML))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} missing: apt-get install chromium (never `playwright install`)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture
def page(browser):
    """A fresh page that records console errors and uncaught exceptions in `page.errors`."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    pg = context.new_page()
    pg.errors = []
    pg.on("console", lambda m: pg.errors.append(f"console {m.type}: {m.text}")
          if m.type == "error" else None)
    pg.on("pageerror", lambda e: pg.errors.append(f"page error: {e}"))
    # Anything that is not the local book (a CDN, a font service) is refused: the book is offline.
    pg.route("**/*", lambda route: route.continue_() if route.request.url.startswith(
        ("http://127.0.0.1", "data:", "blob:", "about:")) else route.abort())
    yield pg
    context.close()
