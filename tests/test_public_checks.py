"""Does every chapter's reference pass its own public checks? `make release` refuses a chapter whose
public checks fail a known-correct implementation; this builds each chapter's checks (cached in
tests/public_checks.json by a hash of their inputs), so that such a chapter turns `make test` red
before a release is tried."""
from __future__ import annotations

import json

import pytest
import torch

import course.release as release
from autograder.harness import wire
from autograder.harness.worker import answer
from course.exercises import chapters


def bilm_request(ns: dict) -> dict:
    """A BiLM forward on fixed weights and characters, as a grader sends it."""
    torch.manual_seed(3)
    m = ns["BiLM"](12, 15, d=6, n_layers=2, n_highway=2, char_dim=5, widths=(1, 2, 3), n_filters=4)
    chars = torch.randint(1, 12, (2, 4, 6), generator=torch.Generator().manual_seed(4))
    return {"op": "module", "name": "BiLM", "init_args": (12, 15),
            "init_kwargs": {"d": 6, "n_layers": 2, "n_highway": 2, "char_dim": 5, "widths": (1, 2, 3), "n_filters": 4},
            "state_dict": m.state_dict(), "args": (chars,), "seed": 0}


def forward(ns: dict, request: dict) -> torch.Tensor:
    reply = answer(ns, wire.decode(wire.encode(request)))
    assert reply["ok"], reply
    return reply["value"]


def test_a_known_mistake_leaves_the_reference_alone():
    # 04's mistake "directions swapped" patches BiLM.contextualize: it must patch its own copy of the class
    ns = release.reference_namespace("04_elmo")
    request = bilm_request(ns)
    before = forward(ns, request)
    mistake = next(m for m in release.load_mistakes("04_elmo") if m.name == "directions swapped")
    wrong = release.mistaken_namespace(ns, mistake.code)
    d = before.shape[-1] // 2
    assert torch.equal(forward(wrong, request), torch.cat([before[..., d:], before[..., :d]], -1))
    assert torch.equal(forward(ns, request), before), "defining a known mistake changed the reference"


def test_a_verified_chapter_is_not_built_again(tmp_path, monkeypatch):
    monkeypatch.setattr(release, "VERIFIED", tmp_path / "public_checks.json")
    monkeypatch.setattr(release, "inputs_key", lambda chapter: "k1")
    built = []

    def build(chapter):
        built.append(chapter)
        return {"format": 1, "chapter": chapter, "checks": [{"parts": [{"mistakes": {"x": 1}}]}],
                "functions": ["f"], "uncovered": [], "refused": []}

    monkeypatch.setattr(release, "build_checks", build)
    monkeypatch.setattr(release, "CACHE", tmp_path / "cache")
    first = release.verified_checks("02_attention")
    assert built == ["02_attention"] and first["key"] == "k1" and first["checks"] == 1
    assert json.loads((tmp_path / "public_checks.json").read_text())["02_attention"] == first
    assert release.verified_checks("02_attention") == first and built == ["02_attention"]  # cached: not built
    monkeypatch.setattr(release, "inputs_key", lambda chapter: "k2")  # an input changed
    assert release.verified_checks("02_attention")["key"] == "k2" and built == ["02_attention"] * 2


def test_a_refused_chapter_is_not_recorded(tmp_path, monkeypatch):
    monkeypatch.setattr(release, "VERIFIED", tmp_path / "public_checks.json")
    monkeypatch.setattr(release, "CACHE", tmp_path / "cache")
    monkeypatch.setattr(release, "build_checks", lambda chapter: {
        "format": 1, "chapter": chapter, "checks": [], "functions": ["f"], "uncovered": [],
        "refused": ["the reference: f: public check 1 of 1: does not match"]})
    with pytest.raises(RuntimeError, match="1 public checks fail a known-correct implementation"):
        release.verified_checks("02_attention")
    assert not (tmp_path / "public_checks.json").exists()


@pytest.mark.parametrize("chapter", chapters())
def test_the_reference_passes_its_public_checks(chapter):
    # builds the chapter's checks when their inputs changed (10-60 s); then `git add tests/public_checks.json`
    record = release.verified_checks(chapter)
    assert record["key"] == release.inputs_key(chapter)
    assert record["checks"] >= record["functions"] > 0
