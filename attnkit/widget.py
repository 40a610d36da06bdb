"""An interactive attention view that lives in a cell's output: no CDN, no server.

    from attnkit.widget import attention_view
    attention_view(weights, queries, keys, title="Encoder self-attention")

`weights` has shape (Q, K), (H, Q, K) or (L, H, Q, K): one row of weights over
the keys for each query token. The object's `_repr_html_()` is a self-contained
widget (inline SVG heat map, inline JavaScript): hover a query token (or its row)
to highlight its weights over the keys, click to pin it, and pick the head and
the layer with the selectors shown when there are several. Element ids are
unique per instance, so several views can live on one page.
"""
from __future__ import annotations

import html
import itertools
import json
import uuid
from typing import Sequence

import numpy as np

__all__ = ["attention_view", "AttentionView"]

_COUNTER = itertools.count()
CELL = 22  # px, side of one heat-map cell


def _as_array(weights) -> np.ndarray:
    """A float64 numpy array from a torch tensor (any device, with grad) or array-like."""
    if hasattr(weights, "detach"):
        weights = weights.detach().to("cpu").double().numpy()
    try:
        return np.asarray(weights, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise TypeError(f"weights must be a torch tensor or a numpy array, got {type(weights)}") from err


def _as_4d(w: np.ndarray) -> np.ndarray:
    """(Q, K), (H, Q, K) or (L, H, Q, K) as (L, H, Q, K)."""
    if w.ndim == 2:
        return w[None, None]
    if w.ndim == 3:
        return w[None]
    if w.ndim == 4:
        return w
    raise ValueError(f"weights must have shape (Q, K), (H, Q, K) or (L, H, Q, K); got {w.shape}")


def _tokens(tokens: Sequence[str], n: int, name: str, axis: str) -> list[str]:
    if isinstance(tokens, str) or not all(isinstance(t, str) for t in tokens):
        raise TypeError(f"{name} must be a list of token strings")
    tokens = list(tokens)
    if len(tokens) != n:
        raise ValueError(f"{len(tokens)} {name} for {n} {axis} of the weights (axis -{2 if axis == 'rows' else 1})")
    return tokens


class AttentionView:
    """The widget; displayed by Jupyter and Jupyter Book through `_repr_html_`."""

    def __init__(self, weights, queries: Sequence[str], keys: Sequence[str], title: str | None = None):
        w = _as_4d(_as_array(weights))
        if not np.isfinite(w).all():
            raise ValueError("weights contain NaN or infinity")
        L, H, Q, K = w.shape
        if min(L, H, Q, K) == 0:
            raise ValueError(f"weights must not be empty; got shape {w.shape}")
        self.queries = _tokens(queries, Q, "queries", "rows")
        self.keys = _tokens(keys, K, "keys", "columns")
        self.weights, self.title = w, title
        self.uid = f"attnview-{uuid.uuid4().hex[:8]}-{next(_COUNTER)}"

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return self.weights.shape

    def _selector(self, kind: str, n: int) -> str:
        if n == 1:
            return ""
        opts = "".join(f'<option value="{i}">{kind} {i}</option>' for i in range(n))
        return (f'<label style="margin-right:1em">{kind} '
                f'<select id="{self.uid}-{kind.lower()}" data-role="{kind.lower()}">{opts}</select></label>')

    def _svg(self) -> str:
        L, H, Q, K = self.shape
        left = 8 + 8 * max(len(q) for q in self.queries)  # px for query labels
        top = 8 + 7 * max(len(k) for k in self.keys)      # px for rotated key labels
        width, height = left + K * CELL + 4, top + Q * CELL + 4
        parts = [f'<svg id="{self.uid}-svg" width="{width}" height="{height}" '
                 f'xmlns="http://www.w3.org/2000/svg" style="font:12px monospace">']
        for k, tok in enumerate(self.keys):
            x, y = left + k * CELL + CELL / 2 + 4, top - 4
            parts.append(f'<text class="key" data-k="{k}" x="{x}" y="{y}" '
                         f'transform="rotate(-60 {x} {y})">{html.escape(tok)}</text>')
        for q, tok in enumerate(self.queries):
            y = top + q * CELL + CELL * 0.7
            parts.append(f'<text class="query" data-q="{q}" x="{left - 6}" y="{y}" text-anchor="end" '
                         f'style="cursor:pointer">{html.escape(tok)}</text>')
            for k in range(K):
                parts.append(f'<rect class="cell" data-q="{q}" data-k="{k}" x="{left + k * CELL}" '
                             f'y="{top + q * CELL}" width="{CELL - 1}" height="{CELL - 1}" '
                             f'style="cursor:pointer"><title></title></rect>')
        parts.append("</svg>")
        return "".join(parts)

    def _keys_row(self) -> str:
        spans = "".join(f'<span class="attnview-key" data-k="{k}" style="padding:1px 3px;margin:1px;'
                        f'border-radius:3px;display:inline-block">{html.escape(t)}</span>'
                        for k, t in enumerate(self.keys))
        return (f'<div id="{self.uid}-keys" style="margin-top:6px;font:13px monospace">'
                f'<span id="{self.uid}-label" style="color:#555">hover or click a query token</span>'
                f'<div>{spans}</div></div>')

    def _script(self) -> str:
        data = json.dumps(np.round(self.weights, 4).tolist())
        return _SCRIPT.replace("__UID__", self.uid).replace("__DATA__", data)

    def _repr_html_(self) -> str:
        L, H, _, _ = self.shape
        title = f'<div style="font-weight:bold;margin-bottom:4px">{html.escape(self.title)}</div>' if self.title else ""
        controls = self._selector("Layer", L) + self._selector("Head", H)
        controls = f'<div style="margin-bottom:4px">{controls}</div>' if controls else ""
        return (f'<div id="{self.uid}" class="attnview tex2jax_ignore mathjax_ignore" style="font-family:sans-serif;font-size:13px">'
                f"{title}{controls}{self._svg()}{self._keys_row()}</div>"
                f"<script>{self._script()}</script>")

    def __repr__(self) -> str:
        return f"AttentionView(shape={self.shape}, title={self.title!r})"


_SCRIPT = r"""
(function () {
  var W = __DATA__;
  var root = document.getElementById("__UID__");
  if (!root) { return; }
  var layer = 0, head = 0, pinned = -1;
  function pick(role) { var s = root.querySelector('select[data-role="' + role + '"]');
                        return s ? parseInt(s.value, 10) : 0; }
  function color(w, strong) { var a = Math.max(0, Math.min(1, w));
    return strong ? "rgba(214,39,40," + a + ")" : "rgba(31,119,180," + a + ")"; }
  function paint(active) {
    var M = W[layer][head];
    root.querySelectorAll("rect.cell").forEach(function (r) {
      var q = +r.getAttribute("data-q"), k = +r.getAttribute("data-k"), w = M[q][k];
      r.setAttribute("fill", color(w, q === active));
      r.setAttribute("stroke", q === active ? "#d62728" : "#eee");
      r.firstChild.textContent = "query " + q + " \u2192 key " + k + ": " + w.toFixed(3);
    });
    root.querySelectorAll("text.query").forEach(function (t) {
      var on = +t.getAttribute("data-q") === active;
      t.setAttribute("font-weight", on ? "bold" : "normal");
      t.setAttribute("fill", on ? "#d62728" : "#000");
    });
    var label = document.getElementById("__UID__-label");
    root.querySelectorAll("span.attnview-key").forEach(function (s) {
      var k = +s.getAttribute("data-k");
      s.style.background = active < 0 ? "transparent" : color(M[active][k], true);
      s.title = active < 0 ? "" : M[active][k].toFixed(3);
    });
    root.setAttribute("data-active", String(active));
    if (active < 0) { label.textContent = "hover or click a query token"; return; }
    var name = root.querySelectorAll("text.query")[active].textContent;
    label.textContent = "weights of query " + active + " \u201c" + name + "\u201d over the keys" +
                        (pinned >= 0 ? " (pinned; click again to release)" : "") + ":";
  }
  function over(e) { var q = e.target.getAttribute("data-q");
                     if (q !== null && pinned < 0) { paint(+q); } }
  function out() { if (pinned < 0) { paint(-1); } }
  function click(e) { var q = e.target.getAttribute("data-q"); if (q === null) { return; }
                      pinned = (pinned === +q) ? -1 : +q; paint(pinned >= 0 ? pinned : +q); }
  root.querySelectorAll("text.query, rect.cell").forEach(function (el) {
    el.addEventListener("mouseover", over); el.addEventListener("mouseout", out);
    el.addEventListener("click", click);
  });
  root.querySelectorAll("select").forEach(function (s) {
    s.addEventListener("change", function () { layer = pick("layer"); head = pick("head");
                                               paint(pinned); });
  });
  paint(-1);
})();
"""


def attention_view(weights, queries: Sequence[str], keys: Sequence[str], *,
                   title: str | None = None) -> AttentionView:
    """An interactive view of attention weights, displayed as the cell's output.

    weights: torch tensor or numpy array of shape (Q, K), (H, Q, K) or (L, H, Q, K);
    queries: Q token strings (the rows); keys: K token strings (the columns).
    Raises ValueError/TypeError with the expected shapes on bad input.
    """
    return AttentionView(weights, queries, keys, title=title)
