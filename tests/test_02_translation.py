"""Chapter 02's translation runs: are the two committed runs at equal compute, does the record hold
what chapter 03 quotes as its baseline, does a translation not depend on the batch it is decoded in,
and does the chapter keep within its share of the checkpoint budget?"""
from __future__ import annotations

import json

import pytest
import torch

import attnkit.checkpoints as registry
import course.checkpoints as checkpoints

CHAPTER = "02_attention"
BUDGET_02 = 4 * 2**20      # this chapter's share of the 30 MB for every chapter's weights


@pytest.fixture(scope="module")
def declared():
    """The chapter's checkpoints, declared by running its checkpoint cells (graded cells + the
    translation cell) in this process."""
    return checkpoints.declare(CHAPTER)


def test_the_rnn_attention_record_holds_what_chapter_03_quotes():
    """Chapter 03 reads test BLEU, test chrF and the training seconds from this file: are they there?"""
    r = json.loads(registry.DATA.joinpath(CHAPTER, "rnn_attention.json").read_text())
    for metric in ("test_bleu", "test_chrf"):
        assert r["metrics"][f"{metric}_low"] <= r["metrics"][metric] <= r["metrics"][f"{metric}_high"], metric
    assert r["seconds"] > 0 and r["kwargs"]["steps"] > 0


def test_with_and_without_attention_are_trained_at_equal_compute(declared):
    """Same code, steps, training arguments, sizes and initial weights: only `attention` differs."""
    att, no_att = declared["rnn_attention"], declared["rnn_no_attention"]
    a, b = att.record(), no_att.record()
    assert a["kwargs"] == b["kwargs"] and a["code_hash"] == b["code_hash"]
    assert [r["step"] for r in a["log"]] == [r["step"] for r in b["log"]]
    torch.manual_seed(0)
    m1 = att.build()
    torch.manual_seed(0)
    m2 = no_att.build()
    assert m1.attention and not m2.attention
    s1, s2 = m1.state_dict(), m2.state_dict()
    assert s1.keys() == s2.keys() and all(torch.equal(s1[k], s2[k]) for k in s1)


def test_a_translation_does_not_depend_on_the_batch_it_is_decoded_in(declared):
    """Padding is masked: each test sentence translated alone equals it translated among others."""
    chapter = declared["rnn_attention"].train.__globals__     # the namespace the cells ran in
    translate, model = chapter["translate"], declared["rnn_attention"].load(check_code=False)
    sentences = [p.src for p in chapter["FR_TEST"][:12]]
    together = translate(model, sentences)
    alone = [translate(model, [s])[0] for s in sentences]
    assert together == alone


def test_the_chapter_keeps_to_its_share_of_the_budget():
    used = sum(p.stat().st_size for p in (registry.DATA / CHAPTER).glob("*") if p.is_file())
    assert used <= BUDGET_02, f"{used / 2**20:.2f} MB of checkpoints for {CHAPTER}, over its 4 MB"
