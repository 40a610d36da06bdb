"""The hidden graders run in this process against namespaces (no sandbox, no notebook run per grading),
each test's body once per (variant, secret): what the per-student-inputs tests use to check many
secrets affordably.

The student side is course.release's `Recorder` (it answers each request with a namespace, as the
student process would, with real seeds); the reference is the solution's own names. A variant's
inputs for a key are shifted exactly as `PerStudentInputs` shifts a real grading's.
"""
from __future__ import annotations

import io
import types
from collections import defaultdict
from contextlib import redirect_stderr, redirect_stdout

import pytest

from autograder.grade import run_graders
from autograder.harness.seeds import PerStudentInputs
from course.release import (Recorder, RecordingPlugin, alternative_namespace, load_mistakes, load_variants,
                            reference_namespace)


def namespaces(chapter: str, mistakes: bool = True) -> tuple[types.SimpleNamespace, dict[str, tuple[str | None, dict]]]:
    """(the `ref` fixture's names, variants): "solution" and "alternative" (graded on every function),
    each known-correct variant in another style (tests/variants/) and (`mistakes`) each known-wrong
    variant (those two graded on their own function only)."""
    ref_ns = reference_namespace(chapter)
    ref = types.SimpleNamespace(**{k: v for k, v in ref_ns.items() if not k.startswith("__")})
    solution = reference_namespace(chapter)  # the student's own copy: nothing shared with `ref`
    variants: dict[str, tuple[str | None, dict]] = {"solution": (None, solution)}
    alternative = alternative_namespace(chapter)
    if alternative is not None:
        variants["alternative"] = (None, alternative)
    for v in load_variants(chapter):  # appended to the solution notebook, as the graders' self-test does
        variants[f"variant: {v.function}: {v.name}"] = (v.function, reference_namespace(chapter, v.code))
    for m in load_mistakes(chapter) if mistakes else []:  # appended to the solution notebook, as the graders' self-test does
        variants[f"mistake: {m.function}: {m.name}"] = (m.function, reference_namespace(chapter, m.code))
    return ref, variants


class EveryVariant:
    """A pytest plugin: each graded test's body is run once per (variant, key) (a known-wrong variant:
    under the first `mistake_keys` keys only); `failed[(variant, key)]` lists the tests that failed,
    `ran[(variant, key)]` counts those that ran."""

    def __init__(self, chapter: str, recorder: Recorder, variants: dict, keys: list[bytes],
                 mistake_keys: int | None = None) -> None:
        self.chapter, self.recorder, self.variants, self.keys = chapter, recorder, variants, keys
        self.mistake_keys = len(keys) if mistake_keys is None else mistake_keys
        self.failed: dict = defaultdict(list)
        self.ran: dict = defaultdict(int)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_call(self, item):
        function = getattr(item.function, "graded", {}).get("function")
        base = self.recorder.ns
        for name, (only, ns) in self.variants.items():
            if only not in (None, function):
                continue
            self.recorder.ns = ns
            for key in self.keys[:self.mistake_keys] if name.startswith("mistake") else self.keys:
                self.ran[(name, key)] += 1
                try:
                    with PerStudentInputs(key, self.chapter).inputs(item.name):
                        item.runtest()
                except Exception as exc:  # noqa: BLE001 - a failed check, or a student error
                    self.failed[(name, key)].append(f"{item.name}: {type(exc).__name__}: {str(exc)[:200]}")
                self.recorder.records.clear()
        self.recorder.ns = base
        return (yield)


def grade_variants(chapter: str, keys: list[bytes], mistake_keys: int | None = None) -> EveryVariant:
    """Run the chapter's graders once, every variant under every key (known-wrong variants under the
    first `mistake_keys`, none if 0); CUDA tests skipped."""
    ref, variants = namespaces(chapter, mistake_keys != 0)
    recorder = Recorder(variants["solution"][1])
    plugin = RecordingPlugin(chapter, [], None, recorder=recorder, ref=ref)
    every = EveryVariant(chapter, recorder, variants, keys, mistake_keys)
    with redirect_stderr(io.StringIO()), redirect_stdout(io.StringIO()):
        run_graders(plugin, (every,))
    return every
