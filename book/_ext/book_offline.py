"""Sphinx extension for the course book: nothing on a page loads from the network.

sphinx-thebe (pulled in by Jupyter Book 1.x) adds an inline script that declares
`const THEBE_JS_URL = "https://unpkg.com/..."` twice on every page, a console error
("Identifier 'THEBE_JS_URL' has already been declared"), and would fetch Thebe from a CDN.
Live code is off in this book (readers use Colab, Binder or a local copy), so its scripts go.
"""


def drop_thebe(app, pagename, templatename, context, doctree):
    scripts = context.get("script_files")
    if scripts is None:
        return
    kept = [s for s in scripts
            if "THEBE_JS_URL" not in str(getattr(s, "attributes", {}).get("body", ""))
            and "sphinx-thebe" not in str(s) and "unpkg.com" not in str(s)]
    scripts[:] = kept


def setup(app):
    app.connect("html-page-context", drop_thebe, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
