"""Chapter 03's translation run: does the committed record hold what the page quotes, do the token
batches keep to their budget, does a translation not depend on the batch it is decoded in, and does
the chapter keep within its share of the checkpoint budget?"""
from __future__ import annotations

import pytest
import torch

import attnkit.checkpoints as registry
import course.checkpoints as checkpoints

CHAPTER = "03_transformer"
BUDGET_03 = 5 * 2**20      # this chapter's share of the 30 MB for every chapter's weights
SHORT_STEPS = 500          # the page's short run


@pytest.fixture(scope="module")
def declared():
    """The chapter's checkpoints, declared by running its checkpoint cells (graded cells + the
    translation cell) in this process."""
    return checkpoints.declare(CHAPTER)


def test_the_record_holds_what_the_page_quotes(declared):
    """Greedy and beam BLEU and chrF with their intervals, a validation loss at every report, the
    seconds: are they there, and is the committed run longer than the page's short run?"""
    r = declared["transformer_fr"].record()
    for key in ("greedy", "beam"):
        for metric in ("bleu", "chrf"):
            m = r["metrics"]
            assert m[f"{key}_{metric}_low"] <= m[f"{key}_{metric}"] <= m[f"{key}_{metric}_high"], key + metric
    assert r["kwargs"]["steps"] > SHORT_STEPS and r["seconds"] > 0
    assert [e["step"] for e in r["log"]][-1] == r["kwargs"]["steps"]
    assert all(e["valid_loss"] > 0 and e["seconds"] > 0 for e in r["log"])
    assert "averaged_valid_loss" in r["log"][-1]


def test_token_batches_keep_to_their_budget_and_hold_each_pair_once_a_pass(declared):
    """Rows x longest row <= max_tokens in every batch; one pass over the batches holds every pair."""
    ns = declared["transformer_fr"].train.__globals__          # the namespace the cells ran in
    pairs = [([1] * (i % 17 + 1), [2] * (i % 23 + 2)) for i in range(300)]
    stream = ns["token_batches"](pairs, 200, torch.Generator().manual_seed(0))
    seen = []
    while len(seen) < len(pairs):
        batch = next(stream)
        assert len(batch) * max(max(len(x), len(y)) for x, y in batch) <= 200
        seen += batch
    assert sorted(map(str, seen)) == sorted(map(str, pairs))


def test_a_translation_does_not_depend_on_the_batch_it_is_decoded_in(declared):
    """Padding is masked: each test sentence translated alone equals it translated among others."""
    ns = declared["transformer_fr"].train.__globals__
    model = declared["transformer_fr"].load(check_code=False)
    sentences = [p.src for p in ns["FR_TEST"][:12]]
    together = ns["translate_mt"](model, sentences)
    alone = [ns["translate_mt"](model, [s])[0] for s in sentences]
    assert together == alone


def test_the_chapter_keeps_to_its_share_of_the_budget():
    used = sum(p.stat().st_size for p in (registry.DATA / CHAPTER).glob("*") if p.is_file())
    assert used <= BUDGET_03, f"{used / 2**20:.2f} MB of checkpoints for {CHAPTER}, over its 5 MB"
