"""Is grading fair at its edges? Public checks stay inside what the hidden graders accept, one rule loads
the reference's weights in every chapter, and given code answers no graded exercise."""
from __future__ import annotations

import math
import re

import pytest
import torch
from torch import nn

from autograder.harness import wire
from autograder.harness.worker import answer, load_weights
from course.exercises import chapters, read_solution
from course.release import NUDGES, _nudge, load_variants, mistaken_namespace, nudge_records, reply_subset, \
    verify_checks


# ---------------------------------------------------------------- public checks within grading
def pe_namespace() -> dict:
    """Chapter 03's reference sinusoidal_positional_encoding, alone."""
    cell = next(c for c in read_solution("03_transformer").cells
                if c.metadata.get("nbgrader", {}).get("grade_id") == "sinusoidal_positional_encoding")
    ns = {"torch": torch, "math": math}
    exec(compile(cell.source, "<pe>", "exec"), ns)
    return ns


def tutorial_pe(ns: dict) -> dict:
    variant = next(v for v in load_variants("03_transformer") if v.function == "sinusoidal_positional_encoding")
    return mistaken_namespace(ns, variant.code)


def pe_check(ns: dict, max_len: int, d_model: int) -> dict:
    """A public check of the PE, recorded from `ns` on (max_len, d_model)."""
    request = {"op": "call", "name": "sinusoidal_positional_encoding", "args": (max_len, d_model), "kwargs": {},
               "seed": 0}
    reply = answer(ns, wire.decode(wire.encode(request)))
    return {"name": f"PE({max_len}, {d_model})", "parts": [{"request": request, "want": reply_subset(reply)}]}


@pytest.mark.parametrize("nudge", NUDGES)
def test_nudged_ints_keep_their_parity(nudge):
    args = (40, 16, [7, 2], {"d_model": 12})
    nudged = _nudge(args, *nudge)
    assert nudged[0] % 2 == 0 and nudged[1] % 2 == 0 and nudged[2][1] % 2 == 0 and nudged[3]["d_model"] % 2 == 0
    assert [x % 2 for x in nudged[2]] == [1, 0]


def test_a_nudged_pe_check_keeps_an_even_d_model_and_the_tutorial_pe_passes_it():
    ns = pe_namespace()
    recorded = {"test": {"id": "test_pe_small"}, "data": wire.encode(
        {"op": "call", "name": "sinusoidal_positional_encoding", "args": (7, 2), "kwargs": {}, "seed": 0})}
    nudged = nudge_records([recorded], ns, secret={__import__("hashlib").sha256(recorded["data"]).hexdigest()})
    assert nudged, "nothing nudged"
    _, part = nudged[0]
    assert part["request"]["args"][1] % 2 == 0, part["request"]["args"]
    check = {"name": "nudged", "parts": [part]}
    assert verify_checks({"checks": [check]}, {"the reference": ns, "the tutorial": tutorial_pe(ns)}) == []


def test_the_release_refuses_a_public_check_that_a_known_correct_variant_fails():
    """An odd d_model (what the old nudge by one made of 16) fails the tutorial's PE: refused, named."""
    ns = pe_namespace()
    checks = {"checks": [pe_check(ns, 41, 16), pe_check(ns, 41, 17)]}
    refused = verify_checks(checks, {"the reference": ns, "the tutorial PE": tutorial_pe(ns)})
    assert len(refused) == 1 and refused[0].startswith("the tutorial PE: PE(41, 17)"), refused


@pytest.mark.parametrize("chapter", chapters())
def test_known_correct_variants_define_their_function(chapter):
    for v in load_variants(chapter):
        assert re.search(rf"^(def|class) {v.function}\b", v.code.strip(), re.M), f"{v.name} defines no {v.function}"


# ---------------------------------------------------------------- one rule for the reference's weights
class Reference(nn.Module):
    def __init__(self):
        super().__init__()
        self.token, self.norm = nn.Embedding(5, 4), nn.LayerNorm(4)


class WithBuffer(Reference):  # Hugging Face's style: a position_ids buffer of its own
    def __init__(self):
        super().__init__()
        self.register_buffer("position_ids", torch.arange(5)[None])


class Renamed(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.norm = nn.Embedding(5, 4), nn.LayerNorm(4)


def test_weights_load_strict_on_parameters_and_non_strict_on_buffers():
    weights = {k: v + 1 for k, v in Reference().state_dict().items()}
    m = WithBuffer()
    load_weights(m, weights)
    assert torch.equal(m.token.weight, weights["token.weight"])
    assert torch.equal(m.position_ids, torch.arange(5)[None])  # its own value kept
    with pytest.raises(RuntimeError, match=r"no reference weight for the parameters tok\.weight.*"
                                           r"no parameter for the reference weights token\.weight"):
        load_weights(Renamed(), weights)
    with pytest.raises(RuntimeError, match="size mismatch"):
        load_weights(Reference(), {**weights, "norm.weight": torch.ones(3)})


def test_graded_reference_modules_keep_no_persistent_buffer():
    """The weights rule needs a reference state_dict of parameters only."""
    found = []
    for chapter in chapters():
        for cell in read_solution(chapter).cells:
            if cell.metadata.get("nbgrader", {}).get("solution"):
                found += [f"{chapter}: {m}" for m in re.findall(r"register_buffer\([^)]*\)", cell.source)
                          if "persistent=False" not in m]
    assert not found, found


# ---------------------------------------------------------------- docstrings that say what is graded
# Rule sentences of graded docstrings that no hint of their graders mentions (course/coverage.py), each
# reviewed: where it is graded, or why not.
REVIEWED = {
    ("03_transformer", "beam_search_until_done", "Returns the best finished (tokens without BOS, EOS included if "
     "emitted; score)."): "graded by test_beam_until_done (the result, tokens and score)",
    ("05_gpt", "filter_logits", "Top-k first (top_k >= 1, else ValueError): keep the logits >= the k-th largest "
     "of the row (ties at the k-th value all stay)."): "graded by test_filter_top_k_below_one_raises (ValueError), "
                                                         "test_filter_top_k_ties and test_filter_top_k_then_top_p",
    ("05_gpt", "prefix_matching_score", "A query position i *repeats* if tokens[b, j] == tokens[b, i] for some "
     "earlier j < i."): "graded by test_prefix_matching_matches_reference (its hint: the earlier positions j < i "
                        "with the same token; named mistakes: j <= i, only the latest occurrence)",
    ("05_gpt", "prefix_matching_score", "The result is, per head, the mean of that score over every repeating "
     "position of every sequence (0 if no position repeats)."): "graded by test_prefix_matching_matches_reference "
     "(pooled over the batch; named mistakes: every position, per-sequence means) and test_prefix_matching_no_repeats "
     "(0, not NaN)",
}


@pytest.mark.parametrize("chapter", chapters())
def test_every_rule_a_docstring_states_is_mentioned_by_a_hint_or_reviewed(chapter):
    """A review aid: a new docstring sentence with "must", "raise", "if" or an Error that no hint mentions
    fails here until it is graded (with a hint that names it) or added to REVIEWED with the reason."""
    from course.coverage import unmentioned
    found = {(chapter, function, sentence) for function, sentence in unmentioned(chapter)}
    new = sorted(found - set(REVIEWED))
    assert not new, "docstring rules no hint mentions (grade them, or review them into REVIEWED):\n" + \
        "\n".join(f"  {f}: {s}" for _, f, s in new)
    stale = sorted(k for k in REVIEWED if k[0] == chapter and k not in found)
    assert not stale, f"REVIEWED entries no longer found (remove them): {stale}"


def test_the_review_aid_finds_an_unmentioned_rule():
    from course.coverage import rule_sentences
    source = 'def f(x):\n    """Doubles x. Raises KeyError if x is a wombat. Returns a float."""\n'
    assert rule_sentences(source) == ["Raises KeyError if x is a wombat."]
