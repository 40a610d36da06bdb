"""A review aid: docstring sentences of graded cells that state a rule ("must", "raise", "if", an Error)
and that no hint of the graders of that function mentions.

A hint mentions a sentence when it holds at least half of the sentence's content words (words of three
letters or more, common words left out). A sentence no hint mentions may still be graded, under other
words; `tests/test_fairness.py` keeps the reviewed ones in an allow-list, so that a new one is looked at.
`python -m course.coverage` prints them.
"""
from __future__ import annotations

import ast
import importlib.util
import re

from course.exercises import chapters, read_solution

RULE = re.compile(r"\b(must|raises?|if)\b|Error\b", re.I)
COMMON = set("the a an of and or to in is are be it its at on for by with as that this from than then each every "
             "all any not no one if must raises raise else when which into their they them have has was were can "
             "may same also only but does do so such".split())
MENTIONED = 0.5  # the share of a sentence's content words a hint must hold


def content_words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z_][a-z0-9_]+", text.lower()) if len(w) >= 3 and w not in COMMON}


def rule_sentences(source: str) -> list[str]:
    """The sentences of the docstrings in a cell's source that state a rule (`RULE`)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    docs = [ast.get_docstring(n) or "" for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    sentences = [s.strip() for d in docs for s in re.split(r"(?<=\.)\s+", re.sub(r"\s+", " ", d))]
    return [s for s in sentences if RULE.search(s)]


def hints(chapter: str) -> dict[str, list[str]]:
    """{graded function: the hints of its tests} of the chapter's hidden graders."""
    from autograder.grade import grader_file
    spec = importlib.util.spec_from_file_location(f"graders_{chapter}", grader_file(chapter))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    found: dict[str, list[str]] = {}
    for test in vars(module).values():
        if hasattr(test, "graded"):
            found.setdefault(test.graded["function"], []).append(test.graded["hint"])
    return found


def unmentioned(chapter: str) -> list[tuple[str, str]]:
    """(graded function, sentence) for every rule sentence of its docstrings that no hint of it mentions."""
    by_function, found = hints(chapter), []
    for cell in read_solution(chapter).cells:
        function = cell.metadata.get("nbgrader", {}).get("grade_id")
        if not function:
            continue
        for sentence in rule_sentences(cell.source):
            words = content_words(sentence)
            share = max((len(words & content_words(h)) / len(words) for h in by_function.get(function, [])),
                        default=0.0) if words else 1.0
            if share < MENTIONED:
                found.append((function, sentence))
    return found


if __name__ == "__main__":
    for ch in chapters():
        for function, sentence in unmentioned(ch):
            print(f"{ch} {function}: {sentence}")
