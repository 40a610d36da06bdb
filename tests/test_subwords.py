"""attnkit.subwords: HF `tokenizers` BPE learns the merges of a plain Python BPE (chapter 06's algorithm),
segments as it does, decodes exactly, and trains deterministically."""
from __future__ import annotations

import hashlib
import heapq
import os
import subprocess
import sys
from collections import Counter, defaultdict

import pytest

pytest.importorskip("tokenizers")
from attnkit import corpora  # noqa: E402
from attnkit.subwords import BOS, EOS, MIN_FREQUENCY, SPECIALS, bpe, translation_bpe  # noqa: E402


def reference_bpe(word_freqs: dict[str, int], alphabet: list[str], num_merges: int, tie: str,
                  min_frequency: int = MIN_FREQUENCY) -> list[tuple[str, str]]:
    """Chapter 06's BPE training, word by word, without `</w>` (the words carry their `▁`): merge the pair
    of largest count, weighted by word frequency, everywhere, left to right; stop below `min_frequency`.
    Ties: tie="ids" to the pair of older symbols (`alphabet` order, then merges in order: HF's rule),
    tie="lexicographic" to the smallest pair of strings (06's rule). Counts are kept up to date word by
    word (a heap with stale entries skipped), which gives the same result as recounting every step."""
    ids = {s: i for i, s in enumerate(alphabet)}
    words = [list(w) for w in word_freqs]
    freqs = list(word_freqs.values())
    counts: Counter = Counter()
    where: dict[tuple, set] = defaultdict(set)
    for i, w in enumerate(words):
        for pair in zip(w, w[1:]):
            counts[pair] += freqs[i]
            where[pair].add(i)

    def key(pair):
        return (ids[pair[0]], ids[pair[1]]) if tie == "ids" else pair
    heap = [(-c, key(p), p) for p, c in counts.items()]
    heapq.heapify(heap)
    merges = []
    while heap and len(merges) < num_merges:
        negc, _, pair = heapq.heappop(heap)
        if counts.get(pair, 0) != -negc:
            continue  # stale entry
        if -negc < min_frequency:
            break
        merges.append(pair)
        new = pair[0] + pair[1]
        ids.setdefault(new, len(ids))
        touched = set()
        for i in list(where[pair]):
            w, f = words[i], freqs[i]
            for p in zip(w, w[1:]):
                counts[p] -= f
                touched.add(p)  # its count fell: its heap entry is stale
            out, j = [], 0
            while j < len(w):
                if j + 1 < len(w) and (w[j], w[j + 1]) == pair:
                    out.append(new)
                    j += 2
                else:
                    out.append(w[j])
                    j += 1
            words[i] = out
            for p in zip(out, out[1:]):
                counts[p] += f
                where[p].add(i)
                touched.add(p)
        for p in touched:
            if counts[p] > 0:
                heapq.heappush(heap, (-counts[p], key(p), p))
        counts.pop(pair, None)
    return merges


def reference_encode(word: str, merges: list[tuple[str, str]]) -> list[str]:
    """Chapter 06's bpe_encode without `</w>`: merge the adjacent pair learned earliest, until none is left."""
    rank = {p: r for r, p in enumerate(merges)}
    symbols = list(word)
    while True:
        ranked = [(rank[p], j) for j, p in enumerate(zip(symbols, symbols[1:])) if p in rank]
        if not ranked:
            return symbols
        r, _ = min(ranked)
        pair, out, j = merges[r], [], 0
        while j < len(symbols):
            if j + 1 < len(symbols) and (symbols[j], symbols[j + 1]) == pair:
                out.append(symbols[j] + symbols[j + 1])
                j += 2
            else:
                out.append(symbols[j])
                j += 1
        symbols = out


@pytest.fixture(scope="module")
def setup():
    tok = translation_bpe("ru")
    texts = [t for p in corpora.parallel("ru", "train") for t in (p.src, p.tgt)]
    freqs = Counter(w for t in texts for w, _ in tok.hf.pre_tokenizer.pre_tokenize_str(t))
    vocab = tok.hf.get_vocab()
    n_alphabet = tok.vocab_size - len(SPECIALS) - len(tok.merges())
    alphabet = sorted(vocab, key=vocab.get)[len(SPECIALS):len(SPECIALS) + n_alphabet]
    return tok, texts, freqs, alphabet


def test_hf_learns_the_merges_of_a_plain_python_bpe(setup):
    """Does HF's BPE trainer learn, merge for merge, what chapter 06's algorithm learns (ties to older symbols)?"""
    tok, _, freqs, alphabet = setup
    assert sorted(alphabet) == sorted({c for w in freqs for c in w})  # every character seen, nothing else
    hf = tok.merges()
    ref = reference_bpe(dict(freqs), alphabet, len(hf), tie="ids")
    assert len(hf) > 3000
    first_diff = next((i for i, (a, b) in enumerate(zip(hf, ref)) if a != b), None)
    assert first_diff is None and len(ref) == len(hf), f"first different merge: #{first_diff}"


def test_hf_segments_held_out_text_as_the_reference_encoder(setup):
    """Do HF's pieces for every valid and test sentence equal chapter 06's encoder replaying the same merges?"""
    tok, _, _, _ = setup
    merges = tok.merges()
    vocab = tok.hf.get_vocab()
    checked = 0
    for p in corpora.parallel("ru", "valid") + corpora.parallel("ru", "test"):
        for text in (p.src, p.tgt):
            words = [w for w, _ in tok.hf.pre_tokenizer.pre_tokenize_str(text)]
            if any(c not in vocab for w in words for c in w):
                continue  # an unseen character: HF gives <unk>, the reference keeps the character
            expected = [piece for w in words for piece in reference_encode(w, merges)]
            assert tok.pieces(text) == expected, text
            checked += 1
    assert checked > 900


def test_chapter_06_tie_rule_differs_only_from_a_tie_on(setup):
    """Where does 06's rule (ties to the smallest pair of strings) first depart from HF's, and is it at a tie?"""
    tok, texts, freqs, alphabet = setup
    hf = tok.merges()
    lex = reference_bpe(dict(freqs), alphabet, len(hf), tie="lexicographic")
    first = next(i for i, (a, b) in enumerate(zip(hf, lex)) if a != b)
    # both are a most frequent pair at that step: replay the common merges and count
    state = reference_bpe(dict(freqs), alphabet, first, tie="ids")
    assert state == hf[:first]
    words = {tuple(reference_encode(w, state)): f for w, f in freqs.items()}
    counts = Counter()
    for w, f in words.items():
        for pair in zip(w, w[1:]):
            counts[pair] += f
    assert counts[hf[first]] == counts[lex[first]] == max(counts.values())
    held_out = [w for p in corpora.parallel("ru", "test") for t in (p.src, p.tgt)
                for w, _ in tok.hf.pre_tokenizer.pre_tokenize_str(t)]
    same = sum(reference_encode(w, hf) == reference_encode(w, lex) for w in held_out) / len(held_out)
    print(f"06's tie rule departs from HF's at merge {first} of {len(hf)} (a tie at count {counts[hf[first]]}); "
          f"{same:.1%} of test words are segmented the same")
    assert same > 0.8


def test_decode_inverts_encode():
    """Does decode(encode(s)) give s back for held-out sentences, and do BOS/EOS wrap the ids?"""
    tok = translation_bpe("ru")
    vocab = tok.hf.get_vocab()
    texts = [t for p in corpora.parallel("ru", "test") for t in (p.src, p.tgt)
             if all(c in vocab or c == " " for c in t.replace(" ", "▁"))]
    assert len(texts) > 500
    for t in texts:
        ids = tok.encode(t, bos=True, eos=True)
        assert ids[0] == BOS and ids[-1] == EOS and BOS not in ids[1:-1]
        assert tok.decode(ids) == t
    with pytest.raises(TypeError, match="encode_batch"):
        tok.encode(["a list"])


def test_training_is_deterministic():
    """Does training give the same tokenizer, byte for byte, twice and with HF's threads on?"""
    texts = [t for p in corpora.parallel("fr", "train") for t in (p.src, p.tgt)]
    assert bpe(texts, 3000).hf.to_str() == bpe(texts, 3000).hf.to_str()
    code = ("import hashlib; from attnkit.subwords import translation_bpe; "
            "print(hashlib.sha256(translation_bpe('ru').hf.to_str().encode()).hexdigest())")
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "true", "RAYON_NUM_THREADS": "2"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == hashlib.sha256(translation_bpe("ru").hf.to_str().encode()).hexdigest()
