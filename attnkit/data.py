"""Synthetic, translation-like string tasks generated in code (no downloads).

Each task returns a list of (source, target) string pairs. A `Vocab` maps
characters to ids and back; `encode_batch` pads a batch (batch first).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
MONTHS = ["january", "february", "march", "april", "may", "june", "july",
          "august", "september", "october", "november", "december"]
ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
        "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen",
        "seventeen", "eighteen", "nineteen"]
TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]


def _randint(lo: int, hi: int, g: torch.Generator) -> int:
    """A uniform integer in [lo, hi] drawn from `g`."""
    return int(torch.randint(lo, hi + 1, (1,), generator=g))


def reversal_pairs(n: int, min_len: int = 3, max_len: int = 12, alphabet: str = "abcdefghij",
                   noise: float = 0.0, generator: torch.Generator | None = None) -> list[tuple[str, str]]:
    """Source: random letters; target: the letters reversed.

    With `noise > 0`, each source letter is replaced by '#' with that
    probability and the target keeps the original letter (the model must
    copy what it can and guess the rest).
    """
    g = generator or torch.Generator().manual_seed(0)
    pairs = []
    for _ in range(n):
        length = _randint(min_len, max_len, g)
        word = "".join(alphabet[_randint(0, len(alphabet) - 1, g)] for _ in range(length))
        src = "".join("#" if noise and float(torch.rand(1, generator=g)) < noise else c for c in word)
        pairs.append((src, word[::-1]))
    return pairs


def number_words(k: int) -> str:
    """English words for 0 <= k < 1000, e.g. 342 -> 'three hundred forty two'."""
    if not 0 <= k < 1000:
        raise ValueError(f"number_words takes 0 <= k < 1000, got {k}")
    words = []
    if k >= 100:
        words += [ONES[k // 100], "hundred"]
        k %= 100
        if k == 0:
            return " ".join(words)
    if k >= 20:
        words.append(TENS[k // 10])
        if k % 10:
            words.append(ONES[k % 10])
    else:
        words.append(ONES[k])
    return " ".join(words)


def number_pairs(n: int, generator: torch.Generator | None = None) -> list[tuple[str, str]]:
    """Source: a number in words; target: its digits ('forty two' -> '42')."""
    g = generator or torch.Generator().manual_seed(0)
    return [(number_words(k), str(k)) for k in (_randint(0, 999, g) for _ in range(n))]


def date_pairs(n: int, generator: torch.Generator | None = None) -> list[tuple[str, str]]:
    """Source: '17 april 2023'; target: '2023-04-17' (a reordering task)."""
    g = generator or torch.Generator().manual_seed(0)
    pairs = []
    for _ in range(n):
        year, month, day = _randint(1950, 2049, g), _randint(1, 12, g), _randint(1, 28, g)
        pairs.append((f"{day} {MONTHS[month - 1]} {year}", f"{year}-{month:02d}-{day:02d}"))
    return pairs


@dataclass
class Vocab:
    """Character vocabulary with <pad>=0, <bos>=1, <eos>=2, <unk>=3."""

    chars: str
    itos: list[str] = field(init=False)
    stoi: dict[str, int] = field(init=False)

    def __post_init__(self) -> None:
        self.itos = [PAD, BOS, EOS, UNK] + sorted(set(self.chars))
        self.stoi = {s: i for i, s in enumerate(self.itos)}

    @classmethod
    def from_texts(cls, texts: list[str]) -> "Vocab":
        """The vocabulary of every character in `texts`."""
        return cls("".join(texts))

    pad_id = property(lambda self: 0)
    bos_id = property(lambda self: 1)
    eos_id = property(lambda self: 2)
    unk_id = property(lambda self: 3)

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, text: str, bos: bool = False, eos: bool = False) -> list[int]:
        """Ids of `text`, optionally wrapped in <bos> ... <eos>."""
        ids = [self.stoi.get(c, self.unk_id) for c in text]
        return ([self.bos_id] if bos else []) + ids + ([self.eos_id] if eos else [])

    def decode(self, ids: list[int] | torch.Tensor) -> str:
        """Text of `ids`, stopping at <eos> and skipping <bos>/<pad>."""
        out = []
        for i in (ids.tolist() if isinstance(ids, torch.Tensor) else ids):
            if i == self.eos_id:
                break
            if i not in (self.bos_id, self.pad_id):
                out.append(self.itos[i] if 0 <= i < len(self.itos) else UNK)
        return "".join(out)

    def encode_batch(self, texts: list[str], bos: bool = False, eos: bool = False) -> torch.Tensor:
        """A (B, T) long tensor of padded ids."""
        return pad_sequences([self.encode(t, bos, eos) for t in texts], self.pad_id)


def pad_sequences(seqs: list[list[int]], pad_id: int) -> torch.Tensor:
    """Right-pad lists of ids into a (B, T) long tensor."""
    if not seqs:
        raise ValueError("pad_sequences needs at least one sequence")
    width = max(len(s) for s in seqs)
    out = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, :len(s)] = torch.tensor(s, dtype=torch.long)
    return out


def batches(pairs: list[tuple[str, str]], batch_size: int, generator: torch.Generator):
    """Yield shuffled (sources, targets) lists forever."""
    while True:
        order = torch.randperm(len(pairs), generator=generator).tolist()
        for start in range(0, len(order) - batch_size + 1, batch_size):
            chunk = [pairs[i] for i in order[start:start + batch_size]]
            yield [s for s, _ in chunk], [t for _, t in chunk]
