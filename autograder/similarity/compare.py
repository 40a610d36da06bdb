"""Pairs of submissions ranked by how much code they share, with copydetect's winnowing.

copydetect (MIT, pure Python) implements MOSS's method: the code is tokenized with Pygments,
every name becomes `V` (functions `F`, classes `O`), strings `S`, and comments and whitespace are
dropped, so renaming and reformatting change nothing; fingerprints are hashes of the k-grams of
that text, winnowed; the starter's fingerprints are boilerplate and never count. A pair's
similarity in one submission is the share of its fingerprinted tokens found in the other.
"""
from __future__ import annotations

import io
from dataclasses import dataclass, field
from itertools import combinations

import numpy as np
from copydetect import CodeFingerprint
from copydetect.utils import get_copied_slices

NOISE = 25  # k: the shortest match that counts, in characters of normalised code (copydetect's default)
GUARANTEE = 25  # every match this long is found (window = GUARANTEE - NOISE + 1)


@dataclass
class Entry:
    """One submission: who, which file, and the code compared (`code`: "" when nothing was written)."""

    name: str
    student: str
    path: str
    sha256: str
    chapter: str | None
    code: str = ""
    problem: str = ""  # why it could not be read, if it could not


@dataclass
class Pair:
    """Two submissions of one chapter and what they share."""

    a: Entry
    b: Entry
    share_a: float  # of a's code, the part found in b
    share_b: float
    tokens: int  # matched tokens of normalised code
    slices: tuple = field(repr=False, default=((), ()))  # (starts, ends) of the matches in a's and b's code

    @property
    def similarity(self) -> float:
        """The larger share: a copy of part of a long notebook still ranks high."""
        return max(self.share_a, self.share_b)

    @property
    def identical_file(self) -> bool:
        return bool(self.a.sha256) and self.a.sha256 == self.b.sha256


def fingerprint(name: str, code: str, boilerplate: np.ndarray | None = None) -> CodeFingerprint:
    """copydetect's fingerprint of `code`, with flat arrays for `compare` (each winnowed position and its hash)."""
    fp = CodeFingerprint(f"{name}.py", NOISE, GUARANTEE - NOISE + 1, boilerplate=boilerplate,
                         language="python", fp=io.StringIO(code))
    fp.positions = np.array([i for ids in fp.hash_idx.values() for i in ids], dtype=np.int64)
    fp.position_hashes = np.array([h for h, ids in fp.hash_idx.items() for _ in ids], dtype=np.int64)
    fp.unique_hashes = np.array(sorted(fp.hash_idx), dtype=np.int64)
    return fp


def shares(a: CodeFingerprint, b: CodeFingerprint) -> tuple[int, tuple[float, float], tuple]:
    """copydetect's `compare_files(a, b)`, with the overlap found by one `np.isin` per side: copydetect
    builds an array per shared hash (9 ms a pair, 3 minutes for a class of 200), this takes ~0.3 ms."""
    slices = [get_copied_slices(x.positions[np.isin(x.position_hashes, y.unique_hashes)], NOISE)
              for x, y in ((a, b), (b, a))]
    if len(slices[0][0]) == 0:
        return 0, (0.0, 0.0), (np.array([]), np.array([]))
    tokens = [int(np.sum(s[1] - s[0])) for s in slices]
    share = tuple(t / x.token_coverage if len(x.filtered_code) else 0.0 for t, x in zip(tokens, (a, b)))
    for s, x in zip(slices, (a, b)):  # positions in the normalised code -> in the code as written
        if len(x.offsets):
            s += x.offsets[:, 1][np.clip(np.searchsorted(x.offsets[:, 0], s), 0, x.offsets.shape[0] - 1)]
    return tokens[0], share, tuple(slices)


def boilerplate_of(code: str) -> np.ndarray:
    """Every fingerprint of the starter's code (window 1: all of them), as copydetect wants them."""
    return np.unique(np.array(list(fingerprint("starter", code).hashes), dtype=np.int64))


def ranked(pairs: list[Pair]) -> list[Pair]:
    """Most similar first (ties: more matched tokens first)."""
    return sorted(pairs, key=lambda p: (-p.similarity, -p.tokens, p.a.name, p.b.name))


def pairs_of(entries: list[Entry], starter_code: str) -> list[Pair]:
    """Every pair of `entries` (one chapter) of two different students, most similar first."""
    boilerplate = boilerplate_of(starter_code)
    prints = {e.name: fingerprint(e.name, e.code, boilerplate) for e in entries if e.code}
    pairs = []
    for a, b in combinations([e for e in entries if e.name in prints], 2):
        if a.student == b.student:
            continue
        tokens, (share_a, share_b), slices = shares(prints[a.name], prints[b.name])
        pairs.append(Pair(a, b, float(share_a), float(share_b), int(tokens), slices))
    return ranked(pairs)
