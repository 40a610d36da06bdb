"""A generated corpus for chapter 06 (BERT): documents whose entity tags depend on context.

Every document has a topic (four filler words it uses) and three names, each
with a type for the whole document: PER, LOC or ORG. A name has a usual type
(its "home", as *Paris* is usually a place): in a document it takes that type
with probability ``HOME_P``, else one of the other two. So the word alone
gives a good guess, and only its context settles it: a cue word (``mr``,
``visited``, ``shares``, ...) up to three words before or after it. A cue's
own side and distance vary, so a tagger needs both directions.

This serves three purposes in the chapter: sentences for masked-LM
pre-training, consecutive sentences of a document for next-sentence
prediction (a sentence of the same document shares its topic and names), and
a token-tagging task (O/PER/LOC/ORG) for feature extraction.
"""
from __future__ import annotations

import random

SPECIALS = ["[PAD]", "[CLS]", "[SEP]", "[MASK]", "[UNK]"]
PAD, CLS, SEP, MASK, UNK = range(5)
TAGS = ["O", "PER", "LOC", "ORG"]
NAMES = ["zorba", "kell", "amara", "tovin", "ressa", "bolan", "mirek", "odile", "fenna", "garro",
         "ilsa", "juno", "kasper", "lumo", "nadia", "orrin", "pella", "quill"]
CUES = {  # type -> (cues before the name, cues after it)
    "PER": (["mr", "dr", "uncle"], ["said", "smiled", "laughed"]),
    "LOC": (["in", "near", "visited"], ["flooded", "borders", "hosted"]),
    "ORG": (["shares", "joined", "sued"], ["inc", "hired", "merged"]),
}
FILLERS = ["the", "old", "big", "quiet", "today", "again", "river", "market", "train", "winter",
           "music", "bread", "garden", "paper", "stone", "cloud", "storm", "coffee", "dance",
           "school"]
HOME_P = 0.75
WORDS = SPECIALS + FILLERS + NAMES + [c for b, a in CUES.values() for c in b + a] + ["and"]
WORD_ID = {w: i for i, w in enumerate(WORDS)}


def _pick(seq: list, g: random.Random):
    return seq[g.randrange(len(seq))]


def _chunk(name: str, kind: str, topic: list[str], g: random.Random) -> tuple[list[str], list[str]]:
    """Fillers, a name with its cue on one side (0 to 2 fillers between), fillers."""
    before, after = CUES[kind]
    gap = [_pick(topic, g) for _ in range(g.randrange(3))]
    if g.random() < 0.5:
        core, tags = [_pick(before, g)] + gap + [name], ["O"] * (1 + len(gap)) + [kind]
    else:
        core, tags = [name] + gap + [_pick(after, g)], [kind] + ["O"] * (1 + len(gap))
    pre = [_pick(topic, g) for _ in range(g.randrange(2))]
    post = [_pick(topic, g) for _ in range(g.randrange(2))]
    return pre + core + post, ["O"] * len(pre) + tags + ["O"] * len(post)


def _type(name: str, g: random.Random) -> str:
    """A name's usual type (its home) with probability HOME_P, else another one."""
    home = list(CUES)[NAMES.index(name) % 3]
    if g.random() < HOME_P:
        return home
    return _pick([t for t in CUES if t != home], g)


def _sentence(people: dict[str, str], topic: list[str], g: random.Random):
    words, tags = [], []
    for k in range(1 + int(g.random() < 0.4)):
        if k:
            words.append("and")
            tags.append("O")
        name = _pick(list(people), g)
        w, t = _chunk(name, people[name], topic, g)
        words += w
        tags += t
    return words, tags


def documents(n_docs: int, seed: int, min_sents: int = 4,
              max_sents: int = 6) -> list[list[tuple[list[str], list[str]]]]:
    """`n_docs` documents, each a list of (words, tags) sentences, drawn from `seed`."""
    g = random.Random(seed)
    docs = []
    for _ in range(n_docs):
        topic = g.sample(FILLERS, 4)
        names = g.sample(NAMES, 3)
        people = {n: _type(n, g) for n in names}
        n = g.randint(min_sents, max_sents)
        docs.append([_sentence(people, topic, g) for _ in range(n)])
    return docs


def ids(words: list[str]) -> list[int]:
    """Word ids (every word of the corpus is in `WORDS`)."""
    return [WORD_ID[w] for w in words]


def tag_ids(tags: list[str]) -> list[int]:
    return [TAGS.index(t) for t in tags]
