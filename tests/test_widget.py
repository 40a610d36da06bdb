"""Does attention_view produce a self-contained widget and reject bad shapes clearly?"""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from attnkit.widget import attention_view


def test_2d_widget_is_self_contained_html():
    w = torch.softmax(torch.randn(3, 4), dim=-1)
    html = attention_view(w, ["a", "b", "c"], ["w", "x", "y", "z"], title="T<1>")._repr_html_()
    assert "<svg" in html and "<script>" in html and "T&lt;1&gt;" in html
    assert "http://" not in html.replace("http://www.w3.org/2000/svg", "")
    assert "https://" not in html and "<select" not in html  # no CDN; no selector for one head
    assert html.count('class="cell"') == 12


def test_layers_and_heads_get_selectors_and_ids_are_unique():
    w = np.random.default_rng(0).random((2, 3, 4, 5))
    q, k = list("abcd"), list("vwxyz")
    one, two = attention_view(w, q, k)._repr_html_(), attention_view(w, q, k)._repr_html_()
    assert 'data-role="layer"' in one and 'data-role="head"' in one
    assert one.count("<option") == 2 + 3
    ids = lambda s: set(re.findall(r'id="([^"]+)"', s))  # noqa: E731
    assert ids(one) and not ids(one) & ids(two)


def test_tensor_on_grad_and_float64_accepted():
    w = torch.rand(2, 3, 3, dtype=torch.float64, requires_grad=True)
    assert attention_view(w, list("abc"), list("abc")).shape == (1, 2, 3, 3)


@pytest.mark.parametrize("weights, queries, keys, message", [
    (np.zeros(5), ["a"], ["b"], "shape"),
    (np.zeros((1, 1, 1, 2, 2)), ["a", "b"], ["a", "b"], "shape"),
    (np.zeros((2, 3)), ["a"], ["x", "y", "z"], "queries"),
    (np.zeros((2, 3)), ["a", "b"], ["x", "y"], "keys"),
    (np.full((1, 1), np.nan), ["a"], ["b"], "NaN"),
])
def test_bad_input_is_rejected_with_a_clear_message(weights, queries, keys, message):
    with pytest.raises(ValueError, match=message):
        attention_view(weights, queries, keys)


def test_tokens_must_be_strings():
    with pytest.raises(TypeError, match="token strings"):
        attention_view(np.zeros((1, 2)), "a", [1, 2])
