"""Do the provided helpers do what the chapters rely on?"""
from __future__ import annotations

import torch

from attnkit.data import Vocab, date_pairs, number_pairs, number_words, pad_sequences, reversal_pairs
from attnkit.train import TrainConfig, exact_match, train


def test_reversal_pairs_are_reversed_and_seeded():
    a = reversal_pairs(20, 3, 8, generator=torch.Generator().manual_seed(1))
    b = reversal_pairs(20, 3, 8, generator=torch.Generator().manual_seed(1))
    assert a == b
    assert all(t == s[::-1] and 3 <= len(s) <= 8 for s, t in a)


def test_noisy_reversal_keeps_the_clean_target():
    pairs = reversal_pairs(50, 5, 5, noise=0.5, generator=torch.Generator().manual_seed(0))
    assert any("#" in s for s, _ in pairs)
    assert all("#" not in t for _, t in pairs)


def test_number_words():
    assert number_words(0) == "zero"
    assert number_words(342) == "three hundred forty two"
    assert number_words(700) == "seven hundred"
    assert number_words(15) == "fifteen"
    assert all(str(int(t)) == t for _, t in number_pairs(30))


def test_dates_are_reformatted():
    for src, tgt in date_pairs(30):
        day, month, year = src.split()
        assert tgt.startswith(year) and tgt.endswith(f"{int(day):02d}")


def test_vocab_round_trip_and_padding():
    v = Vocab.from_texts(["abc", "cab"])
    ids = v.encode("cab", bos=True, eos=True)
    assert ids[0] == v.bos_id and ids[-1] == v.eos_id
    assert v.decode(ids) == "cab"
    batch = v.encode_batch(["a", "abc"], eos=True)
    assert batch.shape == (2, 4) and batch[0, 2:].eq(v.pad_id).all()
    assert v.decode([v.stoi["z"] if "z" in v.stoi else v.unk_id]) == "<unk>"


def test_pad_sequences_rejects_empty_batch():
    import pytest
    with pytest.raises(ValueError):
        pad_sequences([], 0)


def test_train_reduces_a_loss(monkeypatch):
    monkeypatch.setenv("ATTNKIT_PROGRESS", "off")
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    x, y = torch.randn(64, 3), torch.randn(64, 1)
    losses = train(model, lambda step: ((model(x) - y) ** 2).mean(), TrainConfig(steps=50, lr=0.05))
    assert len(losses) == 50 and losses[-1] < losses[0]


def test_exact_match():
    assert exact_match(["ab", "c"], ["ab", "d"]) == 0.5
