"""Chapter 06's real-text section: its WordPiece vocabulary, and the near-miss negatives of its
fine-tuning task (the page's own cells, run on the reference's graded path)."""
from __future__ import annotations

import random

import pytest

from attnkit import corpora


@pytest.fixture(scope="module")
def ch06() -> dict:
    """The reference's graded path, then the checkpoint cell, the count baselines' cell and the
    fine-tuning data cell."""
    from autograder.reference import load_reference
    from course.exercises import read_solution
    ns = dict(vars(load_reference("06_bert")))
    cells = [c.source for c in read_solution("06_bert").cells if c.cell_type == "code"]
    for marker in ('@checkpoint("06_bert"', "def count_model(", "def near_misses("):
        source = next(s for s in cells if marker in s)
        exec(compile(source, f"<06_bert: {marker}>", "exec"), ns)
    return ns


def test_the_vocabulary_has_one_order_whatever_the_process(ch06):
    """The trainer numbers pieces in an order that changes between processes; the chapter sorts
    them, so the committed weights' ids mean the same pieces on every machine."""
    pieces = ch06["PIECES"]
    assert pieces[:5] == ch06["SPECIALS"]
    assert pieces[5:] == sorted(pieces[5:])
    assert len(pieces) == ch06["WP"].get_vocab_size() == 4000


def test_your_wordpiece_cuts_words_as_the_trained_tokenizer_does(ch06):
    """The graded wordpiece_tokenize with the learned vocabulary gives HF's pieces, word for word."""
    wp, vocab = ch06["WP"], ch06["WP"].get_vocab()
    text = " ".join(d.text for d in corpora.prose("test")[:20])
    words = {w for w, _ in wp.pre_tokenizer.pre_tokenize_str(wp.normalizer.normalize_str(text))}
    assert len(words) > 500
    for w in sorted(words):
        assert ch06["wordpiece_tokenize"](w, vocab) == [t.value for t in wp.model.tokenize(w)], w


@pytest.mark.parametrize("sides", ["none", "left", "both"])
def test_each_count_baseline_is_a_probability_distribution(ch06, sides):
    """Perplexity compares models only if each gives probabilities that sum to 1 over the
    vocabulary: does the smoothed count model, whatever neighbours it sees or backs off from?"""
    prob, train = ch06["count_model"](sides), ch06["PROSE_IDS"]["train"].tolist()
    seen_a, seen_c = train[100], train[102]
    unseen = next(p for p in range(5, len(ch06["PIECES"])) if p not in set(train))
    for left, right in ((seen_a, seen_c), (seen_a, ch06["R_MASK"]), (ch06["R_MASK"], seen_c),
                        (ch06["R_MASK"], ch06["R_SEP"]), (unseen, seen_c), (seen_c, seen_a)):
        total = sum(prob(g, left, right) for g in range(len(ch06["PIECES"])))
        assert total == pytest.approx(1, abs=1e-9), (left, right)


def test_a_near_miss_is_never_the_translation_nor_a_variant_of_it(ch06):
    """Is each negative another pair's translation, and never one of the same folded source or target?"""
    pairs = corpora.parallel("fr", "test")
    neg = ch06["near_misses"](pairs)
    assert len(neg) == len(pairs) and sum(j is None for j in neg) < 0.05 * len(pairs)
    for i, j in enumerate(neg):
        if j is None:  # no string with the same surface: the pair is left out
            continue
        assert j != i
        assert corpora.fold(pairs[j].tgt) != corpora.fold(pairs[i].tgt)
        assert corpora.fold(pairs[j].src) != corpora.fold(pairs[i].src)


def test_a_near_miss_shares_more_words_with_the_source_than_a_random_wrong_translation(ch06):
    """Near misses are hard negatives: on average they share more words with the English source."""
    pairs = corpora.parallel("fr", "test")
    neg, words = ch06["near_misses"](pairs), ch06["words"]
    rng = random.Random(0)
    kept = [i for i, j in enumerate(neg) if j is not None]
    shared_near = sum(len(words(pairs[i].src) & words(pairs[neg[i]].tgt)) for i in kept)
    shared_random = sum(len(words(pairs[i].src) & words(pairs[rng.choice([k for k in range(len(pairs)) if k != i])].tgt))
                        for i in kept)
    assert shared_near > 2 * shared_random


def test_the_pair_set_is_balanced_and_fits_the_model(ch06):
    ids, seg, labels, rows = ch06["FT_TEST"]
    assert labels.float().mean().item() == 0.5
    assert ids.shape[1] <= ch06["SEQ"] and ids.shape == seg.shape
    assert (ids[:, 0] == ch06["R_CLS"]).all()


def test_macro_f1_does_not_reward_saying_translation_every_time(ch06):
    """A model that calls every pair a translation scores 50% accuracy and a high F1 on that class
    alone; the mean F1 of both classes shows that it learned nothing."""
    import torch
    gold = torch.tensor([1, 1, 1, 1, 0, 0, 0, 0])
    s = ch06["scores"](torch.ones(8, dtype=torch.long), gold)
    assert s["acc"] == 50 and s["said_yes"] == 100
    assert s["f1_yes"] == pytest.approx(200 / 3) and s["f1_no"] == 0
    assert s["macro_f1"] == pytest.approx(100 / 3)
    perfect = ch06["scores"](gold, gold)
    assert perfect["acc"] == perfect["macro_f1"] == 100


def test_an_unknown_fine_tuning_condition_is_refused(ch06):
    with pytest.raises(ValueError, match="condition"):
        ch06["fine_tune_run"](condition="fine tuned", train_pairs=10, seed=0)


def test_every_fine_tuning_run_has_a_record_made_by_the_current_code(ch06):
    """The page reads the sweep's committed records: is there one for every config, made by the
    chapter's code as it is now (else `python -m course sweeps 06` must re-run them)?"""
    from course.sweeps import code_hash
    runs = ch06["fine_tune_run"].results(check_code=False)
    assert len(runs) == len(ch06["fine_tune_run"].configs) >= 9
    assert {r["code_hash"] for r in runs} == {code_hash("06_bert")}
    assert all(0 <= r["acc"] <= 100 and 0 <= r["macro_f1"] <= 100 for r in runs)
    n = len(ch06["FT_TEST"][2])
    for r in runs:  # the paired bootstrap reads `right`: one character a test example
        assert len(r["right"]) == n and set(r["right"]) <= {"0", "1"}
        assert 100 * r["right"].count("1") / n == pytest.approx(r["acc"], abs=1e-4)  # acc: float32


def test_a_near_miss_looks_like_the_true_translation_on_the_surface(ch06):
    """Does every negative end, hold placeholders and capitalise as its pair's translation does
    (so that no surface rule separates them), and is it another string?"""
    rows = ch06["FT_TEST"][3]
    n = len(rows) // 2
    assert n > 300
    for (src, tgt, yes), (src2, miss, no) in zip(rows[:n], rows[n:]):
        assert (yes, no) == (1, 0) and src == src2 and miss != tgt
        assert ch06["surface"](miss) == ch06["surface"](tgt), (tgt, miss)
    same_end = sum((s[-1:] == t[-1:]) == bool(y) for s, t, y in rows) / len(rows)
    assert abs(same_end - 0.5) < 0.05


def test_the_committed_vocabulary_is_one_the_trainer_learns_and_is_checked(ch06, tmp_path):
    """The trainer breaks ties at the last pieces differently between processes, so the page loads
    the committed vocabulary: is it the trainer's but for those ties, and is an edited copy refused?"""
    learned = set(ch06["train_wordpiece"]([d.text for d in corpora.prose("train")]).get_vocab())
    assert len(learned ^ set(ch06["PIECES"])) <= 4
    path = ch06["registry"].DATA / "06_bert" / "prose_wordpiece.txt"
    digest = __import__("hashlib").sha256(path.read_bytes()).hexdigest()
    assert ch06["committed_wordpiece"](path, digest).get_vocab_size() == 4000
    edited = tmp_path / "vocab.txt"
    edited.write_text(path.read_text().replace("##oard\n", "##bo\n"))
    with pytest.raises(ValueError, match="not the vocabulary"):
        ch06["committed_wordpiece"](edited, digest)
