"""Numbers measured in a notebook, quoted in its text: `glue(name, value)`.

The book (myst-nb) shows a glued value wherever the page's text writes
{glue:text}`name:.2f`, so a number in the prose is always the one this run
measured. The output format is myst-nb's own (a display with `scrapbook`
metadata), written here so that a notebook needs no myst-nb to run: on Colab
or in a plain Jupyter the call only prints the value.

The alternative-solution runs (`make test-notebooks`) read the same outputs
to compare an alternative's headline figures with the book's.
"""
from __future__ import annotations

from typing import Any

GLUE_PREFIX = "application/papermill.record/"


def glue(name: str, value: Any, display: bool = False) -> Any:
    """Record `value` under `name` for the book's text; return it unchanged.

    Numbers (Python or 0-d tensor) are stored as plain floats/ints. With
    `display=False` (the default) nothing extra is shown in the notebook.
    """
    try:
        from IPython.core.formatters import format_display_data
        from IPython.display import display as ipy_display
        from IPython import get_ipython
    except ImportError:  # plain Python: nothing to record into
        return value
    if get_ipython() is None:
        return value
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        value = value.item()
    bundle, metadata = format_display_data(value)
    prefix = "" if display else GLUE_PREFIX
    metadata = dict(metadata or {})
    metadata["scrapbook"] = {"name": name, "mime_prefix": prefix}
    ipy_display({prefix + k: v for k, v in bundle.items()}, raw=True, metadata=metadata)
    return value


def glued(nb) -> dict[str, str]:
    """name -> text/plain of every value glued in an executed notebook (nbformat node)."""
    out: dict[str, str] = {}
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            meta = o.get("metadata", {}).get("scrapbook")
            if not meta:
                continue
            data = o.get("data", {})
            text = data.get(meta.get("mime_prefix", "") + "text/plain")
            if text is not None:
                out[meta["name"]] = text if isinstance(text, str) else "".join(text)
    return out
