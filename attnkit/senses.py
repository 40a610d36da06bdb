"""A generated corpus of sentences with ambiguous words (chapter 04, ELMo).

A tiny grammar writes sentences on one of two topics, *river* or *money*.
Every word carries its part of speech, and the ambiguous words carry a sense:

* "bank" is always a noun; its sense (river or money) is the topic of the
  sentence, so only the context words tell the senses apart;
* "stick", "fish", "watch" and "duck" are nouns in a noun phrase (after a
  determiner or an adjective) and verbs after the subject: their part of
  speech is fixed by the syntax around them.

`Sentence.words`, `.tags` (part of speech) and `.senses` (the topic at every
"bank", None elsewhere) are aligned lists. Nothing here is a graded exercise.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

DET = ["the", "a", "this", "my", "our"]
PRON = ["we", "they", "you", "i"]
PREP = ["near", "by", "with", "behind", "at"]
GENERAL = {
    "NOUN": ["man", "woman", "dog", "child", "friend", "teacher"],
    "VERB": ["saw", "found", "liked", "visited", "left", "passed"],
    "ADJ": ["old", "big", "small", "nice", "red"],
}
TOPICS = {
    "river": {
        "NOUN": ["river", "boat", "water", "shore", "reeds", "fisherman", "stream", "bank", "stick", "fish", "duck"],
        "VERB": ["rowed", "crossed", "swam", "fish", "duck", "stick"],
        "ADJ": ["muddy", "wet", "green", "quiet", "steep"],
    },
    "money": {
        "NOUN": ["money", "loan", "cash", "account", "teller", "coin", "clerk", "bank", "watch", "cheque"],
        "VERB": ["deposited", "borrowed", "counted", "saved", "lent", "watch", "stick"],
        "ADJ": ["rich", "safe", "costly", "private", "busy"],
    },
}
AMBIGUOUS_POS = ("stick", "fish", "watch", "duck")
SENSE_WORD = "bank"
TAGS = ["DET", "ADJ", "NOUN", "VERB", "PREP", "PRON"]
SENSES = ["river", "money"]


@dataclass
class Sentence:
    words: list[str]
    tags: list[str]
    senses: list[str | None]
    topic: str


def _pick(items: list[str], g: torch.Generator) -> str:
    return items[int(torch.randint(len(items), (1,), generator=g))]


def _coin(p: float, g: torch.Generator) -> bool:
    return float(torch.rand(1, generator=g)) < p


def _word(tag: str, topic: str, g: torch.Generator, p_topic: float = 0.8) -> str:
    """A word of part of speech `tag`, from the topic's list with probability p_topic."""
    lists = TOPICS[topic] if _coin(p_topic, g) else GENERAL
    return _pick(lists[tag], g)


def _noun_phrase(topic: str, g: torch.Generator, noun: str | None = None) -> list[tuple[str, str]]:
    """DET [ADJ] NOUN."""
    out = [(_pick(DET, g), "DET")]
    if _coin(0.4, g):
        out.append((_word("ADJ", topic, g), "ADJ"))
    out.append((noun or _word("NOUN", topic, g), "NOUN"))
    return out


def sentence(g: torch.Generator, bank: bool | None = None) -> Sentence:
    """One sentence: SUBJ VERB NP [PREP NP], SUBJ a pronoun or a noun phrase.

    With `bank` True, "bank" is the noun of the object or of the prepositional
    phrase; None: with probability 0.5.
    """
    topic = _pick(SENSES, g)
    bank = _coin(0.5, g) if bank is None else bank
    bank_slot = int(torch.randint(2, (1,), generator=g)) if bank else -1
    subj = [(_pick(PRON, g), "PRON")] if _coin(0.5, g) else _noun_phrase(topic, g)
    words = subj + [(_word("VERB", topic, g), "VERB")]
    words += _noun_phrase(topic, g, SENSE_WORD if bank_slot == 0 else None)
    if bank_slot == 1 or _coin(0.6, g):
        words += [(_pick(PREP, g), "PREP")] + _noun_phrase(topic, g, SENSE_WORD if bank_slot == 1 else None)
    ws, ts = [w for w, _ in words], [t for _, t in words]
    return Sentence(ws, ts, [topic if w == SENSE_WORD else None for w in ws], topic)


def corpus(n: int, generator: torch.Generator | None = None, p_bank: float = 0.3) -> list[Sentence]:
    """`n` sentences; about a fraction `p_bank` of them contain "bank"."""
    g = generator or torch.Generator().manual_seed(0)
    return [sentence(g, _coin(p_bank, g)) for _ in range(n)]


class CharVocab:
    """Words as character ids: <pad>=0, begin-of-word=1, end-of-word=2, unknown char=3."""

    def __init__(self, words: list[str], max_chars: int = 12) -> None:
        self.itos = ["<pad>", "<bow>", "<eow>", "<unk>"] + sorted({c for w in words for c in w})
        self.stoi = {c: i for i, c in enumerate(self.itos)}
        self.max_chars = max_chars

    def __len__(self) -> int:
        return len(self.itos)

    def encode_word(self, word: str) -> list[int]:
        """[<bow>, chars..., <eow>] cut to max_chars and right-padded with 0."""
        ids = [1] + [self.stoi.get(c, 3) for c in word][: self.max_chars - 2] + [2]
        return ids + [0] * (self.max_chars - len(ids))

    def encode(self, sentences: list[list[str]]) -> torch.Tensor:
        """(B, T, max_chars) long; missing words (right padding) are all 0."""
        T = max(len(s) for s in sentences)
        out = torch.zeros(len(sentences), T, self.max_chars, dtype=torch.long)
        for b, s in enumerate(sentences):
            for t, w in enumerate(s):
                out[b, t] = torch.tensor(self.encode_word(w))
        return out


class WordVocab:
    """Word ids for the language model's softmax: <pad>=0, <s>=1, </s>=2, <unk>=3."""

    def __init__(self, words: list[str]) -> None:
        self.itos = ["<pad>", "<s>", "</s>", "<unk>"] + sorted(set(words))
        self.stoi = {w: i for i, w in enumerate(self.itos)}

    pad_id = property(lambda self: 0)

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, sentences: list[list[str]]) -> torch.Tensor:
        """(B, T) long, right-padded with 0."""
        T = max(len(s) for s in sentences)
        out = torch.zeros(len(sentences), T, dtype=torch.long)
        for b, s in enumerate(sentences):
            out[b, : len(s)] = torch.tensor([self.stoi.get(w, 3) for w in s])
        return out


def with_boundaries(words: list[str]) -> list[str]:
    """<s> words </s>: the language model predicts the boundaries too."""
    return ["<s>"] + words + ["</s>"]


def topic_posterior(s: Sentence, p_bank: float = 0.3, p_topic: float = 0.8) -> dict[str, float]:
    """P(topic | the words of `s`) under this generator: the Bayes-optimal reading of the sense.

    Both topics are equally likely a priori. Given the topic, every content word (noun, verb,
    adjective) is drawn from the topic's list with probability `p_topic`, else from the
    general one; the other words (determiners, pronouns, prepositions) and the shape of the
    sentence carry no evidence, except that a "bank" forced into the object or the
    prepositional phrase (a sentence drawn with `bank` True, probability `p_bank` in
    `corpus`) was not drawn from a list. The posterior sums over the ways the sentence could
    have been drawn: no forced "bank", or one forced at either slot.
    """
    def likelihood(topic: str, forced: int | None) -> float:
        p = 1.0
        for i, (w, t) in enumerate(zip(s.words, s.tags)):
            if t in GENERAL and i != forced:
                p *= (p_topic * TOPICS[topic][t].count(w) / len(TOPICS[topic][t])
                      + (1 - p_topic) * GENERAL[t].count(w) / len(GENERAL[t]))
        return p

    verb = s.tags.index("VERB")
    obj = s.tags.index("NOUN", verb)
    has_pp = "PREP" in s.tags
    p_pp = 0.6 if has_pp else 0.4
    ways = [(None, (1 - p_bank) * p_pp)]                      # (forced position, its probability)
    if s.words[obj] == SENSE_WORD:
        ways.append((obj, p_bank * 0.5 * p_pp))
    if has_pp and s.words[-1] == SENSE_WORD:
        ways.append((len(s.words) - 1, p_bank * 0.5))
    joint = {topic: sum(w * likelihood(topic, forced) for forced, w in ways) for topic in SENSES}
    total = sum(joint.values())
    return {topic: v / total for topic, v in joint.items()}
