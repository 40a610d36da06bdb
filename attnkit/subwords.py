"""Subword tokenization for the real-language chapters: byte-pair encoding trained on a corpus's
training split, with Hugging Face `tokenizers` (the library of the field's models, written in Rust).

    from attnkit.subwords import translation_bpe, PAD, BOS, EOS
    tok = translation_bpe("ru")                  # joint English+Russian BPE, 4,000 pieces
    ids = tok.encode("Open a file", eos=True)    # list[int]
    tok.pieces("Open a file")                    # ['▁Open', '▁a', '▁file']
    tok.decode(ids)                              # 'Open a file' (special ids dropped)

Why this one. The algorithm is chapter 06's BPE (Sennrich et al., 2016): count adjacent symbol
pairs over words weighted by frequency, merge the most frequent, repeat; encode by replaying the
merges in order. `tests/test_subwords.py` checks that the merges HF learns here are the ones a
plain Python BPE learns, merge for merge. Two details differ from 06's exercise, both the field's:
- word boundaries are marked SentencePiece-style, by a `▁` that starts each word (HF's `Metaspace`),
  not by a final `</w>` symbol. Decoding is then exact: `decode(encode(s)) == s` for text with
  single spaces and no character unseen in training (an unseen character becomes `<unk>`);
- ties between pairs of equal count go to the pair of older symbols (HF numbers symbols as they
  are made); 06 sends them to the lexicographically smallest pair. The two rules give the same
  merges until the first tie they break differently (the test measures how much it changes).
HF trains in a fraction of a second on the parallel corpus (about 2 s on the prose), so
tokenizers are trained when first asked for and kept for the session, not committed.
Training is deterministic: the same corpus gives the same merges, whatever the thread count.
"""
from __future__ import annotations

import json
import os
from functools import lru_cache
from typing import Iterable, Sequence

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # no threads: no warning after a fork

SPECIALS = ("<pad>", "<unk>", "<s>", "</s>")
PAD, UNK, BOS, EOS = range(4)  # their ids in every tokenizer made here
MIN_FREQUENCY = 2  # a pair seen once is not merged: it would only memorise one word


class Subwords:
    """A trained BPE tokenizer: text to ids and back. `hf` is the underlying `tokenizers.Tokenizer`."""

    def __init__(self, hf) -> None:
        self.hf = hf

    @property
    def vocab_size(self) -> int:
        return self.hf.get_vocab_size()

    def encode(self, text: str, bos: bool = False, eos: bool = False) -> list[int]:
        """The ids of `text`'s pieces, with BOS first and/or EOS last if asked."""
        if not isinstance(text, str):
            raise TypeError(f"encode takes one string, not {type(text).__name__} (encode_batch takes a list)")
        return [BOS] * bos + self.hf.encode(text).ids + [EOS] * eos

    def encode_batch(self, texts: Sequence[str], bos: bool = False, eos: bool = False) -> list[list[int]]:
        return [[BOS] * bos + e.ids + [EOS] * eos for e in self.hf.encode_batch(list(texts))]

    def decode(self, ids: Iterable[int]) -> str:
        """The text of `ids`; PAD, BOS and EOS are dropped (UNK shows as `<unk>`)."""
        ids = [int(i) for i in ids]
        return self.hf.decode([i for i in ids if i not in (PAD, BOS, EOS)], skip_special_tokens=False)

    def pieces(self, text: str) -> list[str]:
        """The pieces `text` is cut into (`▁` marks the start of a word)."""
        return self.hf.encode(text).tokens

    def merges(self) -> list[tuple[str, str]]:
        """The merges, in the order learned (the model, as in chapter 06)."""
        return [tuple(m) for m in json.loads(self.hf.to_str())["model"]["merges"]]

    def __repr__(self) -> str:
        return f"Subwords(BPE, {self.vocab_size} pieces)"


def bpe(texts: Iterable[str], vocab_size: int = 4000, min_frequency: int = MIN_FREQUENCY) -> Subwords:
    """Train a BPE tokenizer on `texts`: at most `vocab_size` pieces (the 4 specials, every character
    seen, then merges of pairs seen at least `min_frequency` times)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    hf = Tokenizer(models.BPE(unk_token="<unk>"))
    hf.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    hf.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                  special_tokens=list(SPECIALS), show_progress=False)
    hf.train_from_iterator(list(texts), trainer)
    return Subwords(hf)


@lru_cache(maxsize=None)
def translation_bpe(lang: str = "ru", vocab_size: int = 4000) -> Subwords:
    """One joint BPE for both sides of `corpora.parallel(lang)`, trained on its train split only
    (sources and targets together, so that names and code shared by both get the same pieces)."""
    from attnkit.corpora import parallel
    return bpe([t for p in parallel(lang, "train") for t in (p.src, p.tgt)], vocab_size)


@lru_cache(maxsize=None)
def prose_bpe(vocab_size: int = 8000) -> Subwords:
    """A BPE for English prose, trained on `corpora.prose("train")`."""
    from attnkit.corpora import prose
    return bpe([d.text for d in prose("train")], vocab_size)
