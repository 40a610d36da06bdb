"""The student release: `make release` (`python -m course.release`) writes `_build/release/`.

A repository students can be given: their exercise notebooks, the provided
`attnkit` package, the grading harness (`autograder/harness/`, copied as a
package) and each chapter's public checks, and nothing of the solutions or
the hidden graders.

Public checks are recorded here, not written by hand: the chapter's hidden
graders run in this process against the reference solution, with every seed
shifted (`autograder.harness.seeds.shifted_seeds`: `offset.SEED_OFFSET`, and `torch.manual_seed`
while a grader builds its inputs), behind a stand-in for the student process that records each
request they send and answers it with the reference. Requests the graders
also send with their own seeds (inputs that do not depend on a seed) are
dropped, so no public check uses a hidden grader's inputs; a function whose
inputs no seed draws gets them nudged instead (ints moved by even steps, so
that an even d_model stays even). The reference's replies are the expected
values; the replies of the chapter's known-wrong variants (tests/mistakes/)
on the same requests name known mistakes. Public checks are a subset of
grading: the release is refused if one fails a known-correct implementation,
which the hidden graders give full marks (the reference, the alternative
solution in tests/alternatives/, the variants in other styles in
tests/variants/). All of it is saved with `torch.save` as plain tensors,
numbers and strings, and read back with `torch.load(weights_only=True)`.
"""
from __future__ import annotations

import argparse
import hashlib
import importlib
import io
import json
import re
import shutil
import sys
import time
import tokenize
import types
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat
import pytest
import torch

from autograder.harness import wire
from autograder.harness.check import GradingFailure
from autograder.harness.notebook import read_submission
from autograder.harness.plugin import GradingPlugin
from autograder.harness.replay import FORMAT, check_reply
from autograder.harness.sandbox import Limits
from autograder.harness.seeds import real_seeds, shifted_seeds
from autograder.harness.student import StudentError, StudentProcess, clean_reply
from autograder.harness.worker import answer, run_cells, seed_all
from course.exercises import ROOT, chapters, exercise_notebook, render

OUT = ROOT / "_build" / "release"
SEED_SHIFT = 7919  # added to every grader seed to draw the public inputs
MAX_CHECKS = 3  # public checks per graded function (one per hidden test, the first ones)
MAX_PARTS = 3  # requests per public check
MAX_REQUEST_BYTES = 256 * 1024
REPLY_FIELDS = ("value", "grads", "attrs", "param_grads")


# ---------------------------------------------------------------- recording the graders' requests
def reference_namespace(chapter: str, extra_code: str | None = None, path: Path | None = None) -> dict:
    """The names the solution notebook (or the notebook at `path`) defines, skip-grading cells skipped,
    `extra_code` appended."""
    cells = list(read_submission(path or ROOT / "solutions" / f"{chapter}.py", chapter).cells)
    if extra_code is not None:
        cells.append({"cell_type": "code", "source": extra_code, "tags": []})
    ns, errors = run_notebook(f"reference_{chapter}", cells)
    if errors:
        raise RuntimeError(f"the reference of {chapter} fails in cell {errors[0]['cell']}: {errors[0]['message']}")
    return ns


def run_notebook(name: str, cells: list) -> tuple[dict, list[dict]]:
    """(the names `cells` define, their errors), skip-grading cells skipped, from seed 0 as a student
    process runs them; the cells are kept in the namespace (`__cells__`) for `mistaken_namespace`."""
    ns: dict = {"__name__": name, "__cells__": cells}
    seed_all(0)
    with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()), real_seeds():
        errors = run_cells(cells, {"skip-grading"}, ns)
    return ns, errors


def reply_subset(reply: dict) -> dict:
    """The parts of a reply a public check compares."""
    return {k: reply[k] for k in REPLY_FIELDS if reply.get(k) not in (None, [], {})}


class Recorder(StudentProcess):
    """Stands in for the student process: answers each request with the reference, and records it."""

    def __init__(self, ns: dict, seed: int = 0) -> None:
        self.ns, self.seed, self.limits = ns, seed, Limits()
        self.report = {"cells": [], "names": sorted(k for k in ns if not k.startswith("_"))}
        self.load_failure, self.printed, self.bad_cells, self.restarts = None, [], {}, 0
        self.sock = self.pid = None
        self.test: dict | None = None
        self.records: list[dict] = []

    def loaded(self) -> dict:
        return self.report

    def close(self) -> None:
        pass

    def _request(self, req: dict, what: str) -> dict:
        req.setdefault("seed", self.seed)
        req.pop("timeout", None)
        data = wire.encode(req)
        with real_seeds():
            reply = answer(self.ns, wire.decode(data))
        if reply.get("ok") and self.test is not None:
            self.records.append({"test": self.test, "data": data, "reply": reply})
        reply = clean_reply(wire.decode(wire.encode(reply)))  # what a student process's reply becomes
        if not reply["ok"]:
            raise StudentError(self._error_text(reply, what))
        return reply


@dataclass(eq=False)
class RecordingPlugin(GradingPlugin):
    """The graders' plugin with the recorder as `student` and the reference as `ref`."""

    recorder: Any = None
    ref: Any = None
    tests: list = field(default_factory=list)

    def student(self):
        return self.recorder

    def reference(self):
        return self.ref

    def close(self) -> None:
        pass

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item) -> None:
        if getattr(item.function, "needs_cuda", False):
            pytest.skip("public checks run on the CPU")
        info = getattr(item.function, "graded", None)
        self.recorder.test = None if info is None else {"id": item.nodeid, **info}
        if info is not None:
            self.tests.append(self.recorder.test)


def record(chapter: str, ns: dict, offset: int) -> tuple[list[dict], list[dict]]:
    """(records, graded tests) of one run of the chapter's graders against the reference."""
    from autograder.grade import run_graders
    ref = types.SimpleNamespace(**{k: v for k, v in ns.items() if not k.startswith("__")})
    plugin = RecordingPlugin(chapter, [], None, recorder=Recorder(ns), ref=ref)
    with shifted_seeds(offset), redirect_stderr(io.StringIO()):
        run_graders(plugin)
    return plugin.recorder.records, plugin.tests


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _listed(folder: str, chapter: str, name: str) -> list:
    """`name` of tests/<folder>/NN_name.py, [] if the chapter has no such file."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    if not (ROOT / "tests" / folder / f"{chapter}.py").exists():
        return []
    return list(getattr(importlib.import_module(f"tests.{folder}.{chapter}"), name))


def load_mistakes(chapter: str) -> list:
    """The chapter's known-wrong variants (tests/mistakes/NN_name.py), [] if it has none."""
    return _listed("mistakes", chapter, "MISTAKES")


def load_variants(chapter: str) -> list:
    """The chapter's known-correct variants in other styles (tests/variants/NN_name.py), [] if none."""
    return _listed("variants", chapter, "VARIANTS")


def mistaken_namespace(ns: dict, code: str) -> dict | None:
    """The reference's names with a known-wrong (or known-correct) definition executed over them, None if
    it fails. A namespace of `reference_namespace` is run again from its cells, the code appended, as the
    graders' self-test appends it to the notebook: a mistake that patches a class in place
    (`BiLM.contextualize = ...`) patches its own copy, never the reference's. Other namespaces (a few
    functions) are copied, their objects shared."""
    if "__cells__" in ns:
        cells = [*ns["__cells__"], {"cell_type": "code", "source": code, "tags": []}]
        copy, errors = run_notebook(ns["__name__"], cells)
        return None if errors else copy  # a mistake that cannot be defined on its own names nothing
    copy = dict(ns)
    try:
        with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()), real_seeds():
            exec(compile(code, "<mistake>", "exec"), copy)
    except Exception:  # noqa: BLE001 - a mistake that cannot be defined on its own names nothing
        return None
    return copy


def build_checks(chapter: str) -> dict:
    """The chapter's public checks (see the module docstring)."""
    ns = reference_namespace(chapter)
    hidden, _ = record(chapter, ns, 0)
    secret = {digest(r["data"]) for r in hidden}
    public, tests = record(chapter, ns, SEED_SHIFT)
    by_test: dict[str, list[dict]] = {}
    for r in public:
        request = wire.decode(r["data"])
        if digest(r["data"]) in secret or request.get("device") or len(r["data"]) > MAX_REQUEST_BYTES:
            continue
        by_test.setdefault(r["test"]["id"], []).append({"request": request, "want": reply_subset(r["reply"])})
    functions = list(dict.fromkeys(t["function"] for t in tests))
    for function in functions:  # inputs that no seed draws (`causal_mask(5)`): nudged instead
        if not any(by_test.get(t["id"]) for t in tests if t["function"] == function):
            nudged = nudge_records([r for r in public if r["test"]["function"] == function], ns, secret)
            for test_id, part in nudged:
                by_test.setdefault(test_id, []).append(part)
    mistakes = load_mistakes(chapter)
    wrong_ns = {id(m): mistaken_namespace(ns, m.code) for m in mistakes}
    alternative = alternative_namespace(chapter)
    if alternative is not None:  # what a second correct solution answers differently is not checkable
        by_test = {test: kept for test, parts in by_test.items()
                   if (kept := [p for p in parts if agrees(alternative, p)])}
    checks, uncovered = [], []
    for function in functions:
        chosen = [t for t in tests if t["function"] == function and by_test.get(t["id"])][:MAX_CHECKS]
        if not chosen:
            uncovered.append(function)
        for k, test in enumerate(chosen, 1):
            parts = by_test[test["id"]][:MAX_PARTS]
            for part in parts:
                part["mistakes"] = named_mistakes(part, [m for m in mistakes if m.function == function], wrong_ns)
            checks.append({"name": f"{function}: public check {k} of {len(chosen)}", "function": function,
                           "hint": test["hint"], "points": 1.0, "parts": parts})
    refused = verify_checks({"checks": checks}, correct_implementations(chapter, ns, alternative))
    return {"format": FORMAT, "chapter": chapter, "checks": checks, "uncovered": uncovered,
            "functions": functions, "refused": refused}


def _nudge(obj: Any, ints: int, flip: bool, text: bool = False, depth: int = 0) -> Any:
    """`obj` with ints (not bools) moved by `ints` (even: see NUDGES), tensors flipped along their last dim
    (`flip`) and strings reversed (`text`)."""
    if isinstance(obj, bool) or obj is None:
        return obj
    if isinstance(obj, str):
        return obj[::-1] if text else obj
    if isinstance(obj, int):
        return obj + ints
    if isinstance(obj, torch.Tensor):
        return obj.flip(-1).clone() if flip and obj.dim() else obj
    if isinstance(obj, (list, tuple)) and depth < 4:
        return type(obj)(_nudge(x, ints, flip, text, depth + 1) for x in obj)
    if isinstance(obj, dict) and depth < 4:
        return {k: _nudge(v, ints, flip, text, depth + 1) for k, v in obj.items()}
    return obj


# Ints move by even steps: a nudged input keeps the parity of the graders' own (an even d_model stays
# even), so that it stays in the domain the hidden graders use.
NUDGES = ((2, False, False), (0, True, False), (2, True, False), (4, False, False), (6, True, False),
          (0, False, True), (2, True, True))


def nudge_records(records: list[dict], ns: dict, secret: set) -> list[tuple[str, dict]]:
    """(test id, part) for requests whose arguments are nudged (`NUDGES`) until they are not a grader's
    own and the reference answers them; one per recorded request at most."""
    out, seen = [], set()
    for r in records:
        request = wire.decode(r["data"])
        if request.get("device"):
            continue
        for nudge in NUDGES:
            new = dict(request, args=_nudge(request.get("args", ()), *nudge),
                       kwargs=_nudge(request.get("kwargs", {}), *nudge))
            data = wire.encode(new)
            if digest(data) in secret or digest(data) in seen:
                continue
            seen.add(digest(data))
            with real_seeds():
                reply = answer(ns, wire.decode(data))
            if reply.get("ok"):
                out.append((r["test"]["id"], {"request": wire.decode(data),
                                              "want": reply_subset(clean_reply(wire.decode(wire.encode(reply))))}))
                break
    return out


def alternative_namespace(chapter: str) -> dict | None:
    """The names the chapter's alternative solution (tests/alternatives/NN_name.py, spliced into the
    exercise notebook) defines; None if the chapter has none."""
    if not (ROOT / "tests" / "alternatives" / f"{chapter}.py").exists():
        return None
    import tempfile
    from course.alternatives import alternative_notebook
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{chapter}.ipynb"
        nbformat.write(alternative_notebook(chapter), path)
        return reference_namespace(chapter, path=path)


def agrees(ns: dict, part: dict) -> bool:
    """Whether the names in `ns` (the alternative solution) pass this recorded request: a request on
    which two correct solutions differ (a grader that compares only part of an output) is dropped."""
    with real_seeds():
        reply = answer(ns, wire.decode(wire.encode(part["request"])))
    if not reply.get("ok"):
        return False
    try:
        check_reply(clean_reply(wire.decode(wire.encode(reply))), part)
    except GradingFailure:
        return False
    return True


def named_mistakes(part: dict, mistakes: list, wrong_ns: dict) -> dict:
    """{mistake name: its reply} for the known mistakes whose reply differs from the reference's."""
    found = {}
    for m in mistakes:
        ns = wrong_ns.get(id(m))
        if ns is None or m.name in found:
            continue
        with real_seeds():
            reply = answer(ns, wire.decode(wire.encode(part["request"])))
        if not reply.get("ok"):
            continue
        reply = clean_reply(wire.decode(wire.encode(reply)))
        try:
            check_reply(reply, part)
        except GradingFailure:
            found[m.name] = reply_subset(reply)
    return found


def correct_implementations(chapter: str, ns: dict, alternative: dict | None) -> dict[str, dict]:
    """{who: names} of every known-correct implementation of the chapter: the reference, the alternative
    solution and each known-correct variant (tests/variants/) over the reference's names."""
    found = {"the reference": ns}
    if alternative is not None:
        found["the alternative solution"] = alternative
    for v in load_variants(chapter):
        variant_ns = mistaken_namespace(ns, v.code)
        if variant_ns is None:
            raise RuntimeError(f"{chapter}: the known-correct variant of {v.function} ({v.name}) fails to run")
        found[f"the variant of {v.function} ({v.name})"] = variant_ns
    return found


def verify_checks(data: dict, implementations: dict[str, dict]) -> list[str]:
    """'who: check: why' for every public check that a known-correct implementation ({who: names}) fails:
    a public check stricter than the hidden graders, which they all get full marks from. Cheap: each
    request is answered in this process."""
    failed = []
    for who, ns in implementations.items():
        for check in data["checks"]:
            for part in check["parts"]:
                with real_seeds():
                    reply = answer(ns, wire.decode(wire.encode(part["request"])))
                try:
                    if not reply.get("ok"):
                        raise GradingFailure(f"raised {reply.get('type')}: {reply.get('message')}")
                    check_reply(clean_reply(wire.decode(wire.encode(reply))), part)
                except GradingFailure as exc:
                    failed.append(f"{who}: {check['name']}: {str(exc).splitlines()[0][:300]}")
                    break
    return failed


# ---------------------------------------------------------------- the release folder
HARNESS = ROOT / "autograder" / "harness"
IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", ".ipynb_checkpoints", "checks")
PINNED = ("torch", "numpy", "matplotlib", "tqdm", "ipykernel",  # what exercises and attnkit import
          "sacrebleu", "tokenizers",  # attnkit.metrics and attnkit.subwords
          "ipywidgets",  # tqdm.auto draws its bars with it in Jupyter
          "jupyterlab")  # what students open the notebooks with


def requirements() -> str:
    """The release's pinned requirements: the instructor repository's pins of what students need."""
    pins = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        m = re.match(r"([A-Za-z0-9_.-]+)==(\S+)", line.strip())
        if m:
            pins[m.group(1).lower()] = m.group(2)
    lines = ["# Pinned as in the course's own repository; `pip install -r requirements.txt`, then `pip install -e .`"]
    lines += [f"{name}=={pins[name]}" for name in PINNED if name in pins]
    return "\n".join(lines) + "\n"


PYPROJECT = """[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "attention-course-student"
version = "{version}"
description = "Attention: from seq2seq to Reformer - the exercises, the helpers and the public checks"
requires-python = ">=3.10"
license = {{text = "MIT"}}

[tool.setuptools]
packages = ["attnkit", "attnkit.checks", "autograder", "autograder.harness"]

[tool.setuptools.package-data]
"attnkit" = ["corpora_data/*", "checkpoints_data/*/*", "sweeps_data/*/*"]
"attnkit.checks" = ["*.pt"]
"""

AUTOGRADER_INIT = '''"""The course autograder's harness, as shipped to students: `autograder.harness` runs a notebook in a
sandbox and checks it (`python -m attnkit check NOTEBOOK`). The hidden graders are not part of it."""
'''

LICENSE = """MIT License

Copyright (c) the authors of the course "Attention: from seq2seq to Reformer"

Permission is hereby granted, free of charge, to any person obtaining a copy
of this software and associated documentation files (the "Software"), to deal
in the Software without restriction, including without limitation the rights
to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
SOFTWARE.
"""

README = """# Attention: from seq2seq to Reformer - exercises

The exercise notebooks of the open course "Attention: from seq2seq to
Reformer", with the helper package they use (`attnkit`) and a public
self-check for each chapter. The book itself, with every chapter's text and
figures, is published separately; its page "Working through the exercises"
also explains Colab and Binder.

## Set up

With Python 3.11 (3.10 or newer), in this folder:

```bash
python3 -m venv .venv
. .venv/bin/activate
pip install -r requirements.txt
pip install -e .
```

`requirements.txt` pins the versions the course was tested with, JupyterLab
included; a CPU build of torch is enough. On Colab, open a notebook from
`exercises/`: its first cell installs what it needs.

## Work on an exercise

```bash
jupyter lab exercises/02_attention.ipynb
```

Read the chapter, and replace each `raise NotImplementedError()` with your
code. Keep the names, the arguments and the return values the docstrings
give: the checks call them. (The classic notebook works too:
`pip install notebook`, then `jupyter notebook`.)

## Check your work

```bash
python -m attnkit check exercises/02_attention.ipynb
```

runs your notebook as "Restart & Run All" would (cells tagged
`skip-grading`, which train or draw, are skipped), in a sandbox
(bubblewrap where it is installed, a child process otherwise), then calls
your functions on fixed inputs and compares with the reference solution's
answers. It prints a table of points per function, then each failed check
with its feedback (a known mistake is named when your output matches one)
and a hint. The exit code is 0 only when every check passes.

**Passing the public checks does not mean passing the hidden graders.**
The graders your instructor runs use other inputs and test more: edge
cases, other dtypes and shapes, gradients, the GPU. The public checks tell
you whether the idea is right; they are not the grade.

Chapters and their public checks: {chapters}.

## Hand it in

Hand in the notebook file itself (`exercises/02_attention.ipynb`), under its
own name, the way your instructor says: Gradescope, your LMS, or nbgrader.
Run "Restart Kernel and Run All Cells" and the check first: the grader runs
the notebook from the top in a fresh process, as the check does.

## What is here

| path | what |
|---|---|
| `exercises/` | one notebook per chapter, with the exercises to fill in |
| `attnkit/` | provided helpers (data, training loop, plots, devices); `attnkit/corpora_data/` holds the real-language corpora (their licences in its `NOTICE.txt`); `attnkit/checks/` holds the public checks' recorded inputs and expected values, read with `torch.load(weights_only=True)` |
| `autograder/harness/` | the course's grading harness: notebook reader, sandbox, checks, results |

Released under the MIT licence (LICENSE).
"""


CACHE = ROOT / "_build" / "public-checks"
VERIFIED = ROOT / "tests" / "public_checks.json"  # committed: {chapter: the key and summary of its verified checks}
RECORDING_VERSION = 4  # bump when the way checks are recorded changes: it invalidates the cache


def inputs_key(chapter: str) -> str:
    """A hash of everything a chapter's public checks are computed from (this file included)."""
    files = [ROOT / "solutions" / f"{chapter}.py", ROOT / "autograder" / "graders" / f"test_{chapter}.py",
             ROOT / "autograder" / "graders" / "conftest.py", ROOT / "tests" / "mistakes" / f"{chapter}.py",
             ROOT / "tests" / "alternatives" / f"{chapter}.py", ROOT / "tests" / "variants" / f"{chapter}.py",
             Path(__file__), ROOT / "autograder" / "grade.py",
             *sorted(HARNESS.glob("*.py")), *sorted((ROOT / "attnkit").glob("*.py"))]
    h = hashlib.sha256(f"recording {RECORDING_VERSION}".encode())
    for f in files:
        h.update(f.name.encode() + b"\0" + (f.read_bytes() if f.exists() else b"-") + b"\0")
    return h.hexdigest()[:16]


def cached_checks(chapter: str) -> tuple[dict, Path]:
    """The chapter's public checks (built, verified against the reference, saved), and their file;
    cached in _build/public-checks/ under a hash of their inputs."""
    path = CACHE / f"{chapter}-{inputs_key(chapter)}.pt"
    if path.exists():  # built and verified from these inputs
        data = torch.load(path, weights_only=True)
        if _load_verified().get(chapter, {}).get("key") != inputs_key(chapter):
            record_verified(chapter, data["summary"])
        return data, path
    data = build_checks(chapter)
    if data["refused"]:
        raise RuntimeError(f"{chapter}: {len(data['refused'])} public checks fail a known-correct implementation "
                           "(which the hidden graders give full marks): " + "; ".join(data["refused"][:5]))
    if data["uncovered"]:
        raise RuntimeError(f"{chapter}: no public check for {', '.join(data['uncovered'])}")
    parts = [p for c in data["checks"] for p in c["parts"]]
    data["summary"] = {"functions": len(data["functions"]), "checks": len(data["checks"]), "requests": len(parts),
                       "requests_naming_mistakes": sum(bool(p["mistakes"]) for p in parts)}
    CACHE.mkdir(parents=True, exist_ok=True)
    for old in CACHE.glob(f"{chapter}-*.pt"):
        old.unlink()
    tmp = path.with_suffix(".tmp")
    torch.save({k: data[k] for k in ("format", "chapter", "checks", "functions", "summary")}, tmp)
    tmp.rename(path)
    record_verified(chapter, data["summary"])
    return data, path


def _load_verified() -> dict:
    return json.loads(VERIFIED.read_text()) if VERIFIED.exists() else {}


def record_verified(chapter: str, summary: dict) -> None:
    """Note in tests/public_checks.json that the chapter's checks, built from its current inputs, pass
    every known-correct implementation (commit the file: `make test` then builds nothing)."""
    verified = _load_verified()
    verified[chapter] = {"key": inputs_key(chapter), **summary}
    VERIFIED.write_text(json.dumps(verified, indent=1, sort_keys=True) + "\n")


def verified_checks(chapter: str) -> dict:
    """The record of the chapter's public checks (tests/public_checks.json), built and verified first if
    their inputs changed since (RuntimeError if a known-correct implementation fails one)."""
    record = _load_verified().get(chapter)
    if record is None or record.get("key") != inputs_key(chapter):
        cached_checks(chapter)
        record = _load_verified()[chapter]
    return record


def copy_package(src: Path, dest: Path) -> None:
    shutil.copytree(src, dest, ignore=IGNORE)


def build_release(out: Path = OUT, only: list[str] | None = None, log=print) -> Path:
    """Write the student repository to `out` (replacing it); return `out`."""
    names = only or chapters()
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    (tmp / "exercises").mkdir()
    for chapter in names:
        (tmp / "exercises" / f"{chapter}.ipynb").write_text(render(exercise_notebook(chapter)))
    copy_package(ROOT / "attnkit", tmp / "attnkit")
    (tmp / "attnkit" / "checks").mkdir()
    (tmp / "attnkit" / "checks" / "__init__.py").write_text('"""Public checks: `NN_name.pt`, written by '
                                                            '`make release`."""\n')
    (tmp / "autograder").mkdir()
    (tmp / "autograder" / "__init__.py").write_text(AUTOGRADER_INIT)
    copy_package(HARNESS, tmp / "autograder" / "harness")
    summary = {}
    for chapter in names:
        started = time.monotonic()
        data, cached = cached_checks(chapter)
        shutil.copy2(cached, tmp / "attnkit" / "checks" / f"{chapter}.pt")
        summary[chapter] = data["summary"]
        log(f"{chapter}: {data['summary']['checks']} public checks for {data['summary']['functions']} graded "
            f"functions ({data['summary']['requests']} requests, {data['summary']['requests_naming_mistakes']} "
            f"naming known mistakes) in {time.monotonic() - started:.0f} s")
    version = re.search(r'version = "([^"]+)"', (ROOT / "pyproject.toml").read_text()).group(1)
    (tmp / "pyproject.toml").write_text(PYPROJECT.format(version=version))
    (tmp / "requirements.txt").write_text(requirements())
    (tmp / "LICENSE").write_text(LICENSE)
    (tmp / "README.md").write_text(README.format(chapters=", ".join(f"`{c}`" for c in names)))
    (tmp / ".gitignore").write_text("__pycache__/\n*.egg-info/\n.ipynb_checkpoints/\n")
    (tmp / "release.json").write_text(json.dumps({"chapters": summary}, indent=1) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


# ---------------------------------------------------------------- leaks
MIN_GRADER_CHARS = 20


def code_lines(path: Path) -> set[str]:
    """Distinctive code lines of a Python file: no comments, docstrings, strings alone, imports."""
    source = path.read_text()
    strings_only: set[int] = set()
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        tokens = []
    by_line: dict[int, set] = {}
    for tok in tokens:
        for line in range(tok.start[0], tok.end[0] + 1):
            by_line.setdefault(line, set()).add(tok.type)
    for line, kinds in by_line.items():
        if kinds <= {tokenize.STRING, tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT,
                     tokenize.DEDENT, tokenize.OP} and tokenize.STRING in kinds:
            strings_only.add(line)
    lines = set()
    for number, line in enumerate(source.splitlines(), 1):
        text = re.sub(r"[ \t]+", " ", line.strip())
        if (len(text) >= MIN_GRADER_CHARS and number not in strings_only
                and not text.startswith(("#", "import ", "from ", "@", '"""', "'''"))):
            lines.add(text)
    return lines


def grader_lines() -> set[str]:
    """Code lines of the hidden graders (and their known mistakes) that neither the shipped packages nor
    the exercise notebooks' given code contain (`with torch.no_grad():` is not evidence)."""
    lines: set[str] = set()
    for path in sorted((ROOT / "autograder" / "graders").glob("*.py")):
        lines |= code_lines(path)
    for path in sorted((ROOT / "tests" / "mistakes").glob("[0-9]*.py")):
        lines |= code_lines(path)
    given = shipped_text() + "\n".join(re.sub(r"[ \t]+", " ", c.source) for ch in chapters()
                                      for c in exercise_notebook(ch).cells)
    return {ln for ln in lines if ln not in given}  # what the exercises or the packages show is not secret


def shipped_text() -> str:
    """The provided packages' sources, whitespace squeezed: code the release gives students anyway."""
    return "\n".join(re.sub(r"[ \t]+", " ", p.read_text()) for folder in (ROOT / "attnkit", HARNESS)
                     for p in sorted(folder.rglob("*.py")) if "__pycache__" not in p.parts)


def release_leaks(folder: Path = OUT) -> list[tuple[Path, str]]:
    """(file, what) for everything in the release that must not be there: solution lines (the book's
    leak checker), near-copies of a graded solution in given code, hidden graders' code lines, and files
    or folders of the instructor's side."""
    from course.leaks import find_leaks, near_copies, normalise, notebook_code
    files = [f for f in folder.rglob("*") if f.is_file() and "__pycache__" not in f.parts]
    texts = [f for f in files if f.suffix in {".html", ".ipynb", ".txt", ".md", ".py", ".js", ".json", ".toml"}]
    given = shipped_text()  # a line the provided packages hold is given code, not evidence (`return tokens`)
    leaks = [(p, f"solution line: {ln}") for p, ln in find_leaks(texts) if ln not in given]
    notebooks = {f: notebook_code(f) for f in texts if f.suffix == ".ipynb"}
    leaks += [(p, f"near-copy of the solution of {graded} in code cell {cell}: {len(shared)} statements")
              for p, cell, graded, shared in near_copies(notebooks)]
    needles = grader_lines()
    for path in texts:
        text = normalise(path.read_text(errors="ignore"))
        leaks += [(path, f"grader line: {n}") for n in sorted(needles) if n in text]
    for path in files:
        rel = path.relative_to(folder)
        if rel.parts[0] in ("solutions", "tests", "book", "course", "_build") or "graders" in rel.parts \
                or rel.as_posix().startswith(("autograder/batch", "autograder/exports")) \
                or (rel.parts[0] == "autograder" and len(rel.parts) == 2 and rel.name != "__init__.py"):
            leaks.append((path, "instructor-only file"))
        if path.suffix == ".pt" and not rel.as_posix().startswith(("attnkit/checks/", "attnkit/checkpoints_data/")):
            leaks.append((path, "a tensor file outside the public checks and the trained checkpoints"))
    return leaks


def publish(folder: Path, remote: str, branch: str = "main", message: str | None = None) -> str:
    """Commit `folder` as the whole tree of `branch` on top of what `remote` holds (its history kept,
    nothing of this repository's), and push it; the new commit's id."""
    import subprocess
    import tempfile
    env = {"GIT_AUTHOR_NAME": "course release", "GIT_AUTHOR_EMAIL": "release@localhost",
           "GIT_COMMITTER_NAME": "course release", "GIT_COMMITTER_EMAIL": "release@localhost",
           "PATH": __import__("os").environ.get("PATH", "/usr/bin:/bin"),
           "HOME": __import__("os").environ.get("HOME", "/tmp")}
    with tempfile.TemporaryDirectory(prefix="release-git-") as git_dir:
        git = lambda *a: subprocess.run(["git", f"--git-dir={git_dir}", f"--work-tree={folder}", *a],  # noqa: E731
                                        check=True, capture_output=True, text=True, env=env).stdout.strip()
        git("init", "-q", "-b", branch)
        try:
            git("fetch", "-q", "--depth=1", remote, branch)
            git("reset", "-q", "--soft", "FETCH_HEAD")
        except subprocess.CalledProcessError:
            pass  # an empty remote: the first release
        git("add", "-A", ".")
        source = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True).stdout.strip() or "unknown"
        git("commit", "-q", "--allow-empty", "-m", message or f"Release from the course repository at {source}")
        git("push", "-q", remote, f"HEAD:refs/heads/{branch}")
        point_head(remote, branch)
        return git("rev-parse", "HEAD")


def local_git_dir(remote: str) -> Path | None:
    """The git directory of a remote on this machine (a bare repository's folder, or a clone's .git)."""
    path = Path(remote.removeprefix("file://"))
    if (path / "HEAD").is_file() and (path / "refs").is_dir():
        return path
    return path / ".git" if (path / ".git" / "HEAD").is_file() else None


def point_head(remote: str, branch: str) -> None:
    """A remote on this machine whose HEAD names a branch it does not have (a fresh `git init --bare`
    names master, git's default) gets HEAD = `branch`, so that `git clone` checks the release out.
    A HEAD naming a branch that exists is the remote owner's choice: it is left alone."""
    import subprocess
    git_dir = local_git_dir(remote)
    if git_dir is None:
        return
    git = lambda *a: subprocess.run(["git", f"--git-dir={git_dir}", *a], capture_output=True, text=True)  # noqa: E731
    head = git("symbolic-ref", "-q", "HEAD").stdout.strip()
    if head and git("rev-parse", "-q", "--verify", head).returncode != 0:
        git("symbolic-ref", "HEAD", f"refs/heads/{branch}")


def students_clone(remote: str, branch: str) -> str:
    """The command that clones the release: `git clone REMOTE`, with `-b BRANCH` unless the remote's HEAD
    names `branch` (a remote elsewhere sets its HEAD itself: GitHub's default branch)."""
    import subprocess
    done = subprocess.run(["git", "ls-remote", "--symref", remote, "HEAD"], capture_output=True, text=True)
    head = re.search(r"^ref: (\S+)\tHEAD$", done.stdout, re.M)
    if head and head.group(1) == f"refs/heads/{branch}":
        return f"git clone {remote}"
    return f"git clone -b {branch} {remote}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course.release", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(OUT), help="the folder to write (default _build/release)")
    parser.add_argument("--chapter", action="append", help="only this chapter (repeatable)")
    parser.add_argument("--publish", metavar="REMOTE", help="then commit the release on top of REMOTE's "
                        "branch and push it (REMOTE: a git URL or path, e.g. the public repository)")
    parser.add_argument("--branch", default="main", help="the branch to publish to (default main)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    out = build_release(Path(args.out), args.chapter)
    leaks = release_leaks(out)
    for path, what in leaks[:50]:
        print(f"LEAK in {path.relative_to(out)}: {what}")
    print(f"wrote {out} in {time.monotonic() - started:.0f} s; {len(leaks)} leaks")
    if leaks:
        return 1
    if args.publish:
        commit = publish(out, args.publish, args.branch)
        print(f"published {out} to {args.publish} ({args.branch}): commit {commit[:12]}")
        print(f"students clone it with: {students_clone(args.publish, args.branch)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
