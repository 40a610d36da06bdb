"""Take docs/book.png, the README's screenshot: chapter 03's attention view in the built book.

    make book && .venv/bin/python docs/screenshot.py

Serves _build/html on localhost and drives Debian's chromium (never `playwright install`).
"""
from __future__ import annotations

import functools
import http.server
import threading
from pathlib import Path

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parent.parent
HTML, OUT = ROOT / "_build" / "html", ROOT / "docs" / "book.png"


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def main() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(HTML)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.goto(f"http://127.0.0.1:{server.server_address[1]}/book/chapters/03_transformer.html",
                  wait_until="load")
        view = page.locator(".attnview").first
        view.scroll_into_view_if_needed()
        page.evaluate(f"window.scrollBy(0, {view.bounding_box()['y'] - 120})")
        view.locator("text.query").first.click()  # a query pinned: its keys coloured
        page.wait_for_timeout(500)
        page.screenshot(path=str(OUT))
        browser.close()
    server.shutdown()
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
