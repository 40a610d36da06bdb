"""Does chapter 04's committed longer run (the biLM on real text) keep to the chapter's share of the
checkpoint budget, and does its record hold what the page reads?"""
from __future__ import annotations

import json

import attnkit.checkpoints as registry

SHARE_BYTES = 4 * 2**20     # chapter 04's share of registry.BUDGET_BYTES (issue 44)


def test_chapter_04_checkpoints_fit_its_share():
    files = [p for p in (registry.DATA / "04_elmo").glob("*") if p.is_file()]
    assert files, "no committed checkpoint for 04_elmo: run `python -m course checkpoints 04`"
    total = sum(p.stat().st_size for p in files)
    assert total <= SHARE_BYTES, f"04_elmo's checkpoints take {total / 2**20:.1f} MB, over its 4 MB share"


def test_the_real_bilm_record_has_what_the_page_reads():
    """The page plots the log (CPU seconds, validation loss) and quotes the metric and the steps."""
    record = json.loads((registry.DATA / "04_elmo" / "real_bilm.json").read_text())
    assert "ch04_real_val_loss" in record["metrics"]
    assert record["log"][-1]["step"] == record["kwargs"]["steps"]
    assert all({"step", "loss", "val_loss", "cpu_s"} <= r.keys() for r in record["log"])
