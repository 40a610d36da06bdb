"""Book pages: each chapter's solution executed, then its solutions cleared (outputs kept).

The page a reader sees is the exercise notebook with the solution's outputs
as "expected output". Executed pages are cached by a hash of their inputs.
"""
from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from course.exercises import ROOT, SOLUTIONS, chapters, clear_solutions, read_solution, render

PAGES = ROOT / "book" / "chapters"
CHECKPOINTS_DATA = ROOT / "attnkit" / "checkpoints_data"   # the longer runs a page loads (attnkit.checkpoints)
SWEEPS_DATA = ROOT / "attnkit" / "sweeps_data"             # the sweeps' records a page reads (attnkit.sweeps)


def repository_url() -> str:
    """The public repository's address: `repository.url` in _config.yml, its one setting."""
    import yaml
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    return config["repository"]["url"].rstrip("/")


REPO = repository_url().removeprefix("https://github.com/")  # GitHub owner/name
# The badge images are served by the book itself (book/_static), so they show offline.
BADGES = """\
```{{admonition}} Work through this chapter
:class: tip
[![Open in Colab](../_static/colab-badge.svg)](https://colab.research.google.com/github/{repo}/blob/main/exercises/{chapter}.ipynb)
[![Binder](../_static/binder-badge.svg)](https://mybinder.org/v2/gh/{repo}/main?labpath=exercises%2F{chapter}.ipynb)
[Download the exercise notebook](https://raw.githubusercontent.com/{repo}/main/exercises/{chapter}.ipynb)

The code cells below are the exercise notebook: each `raise NotImplementedError()` is yours to
write. The outputs shown are those of the reference solution, so you know what to expect.
Cells that train or draw are tagged `skip-grading`; the autograder does not run them.
```
"""


# Pinned packages whose versions change what an executed page shows (the kernel's numbers,
# figures, the clearing of solutions). Book-only tools (jupyter-book, playwright...) are left out.
RUNTIME_PINS = ("torch", "numpy", "matplotlib", "tqdm", "nbclient", "ipykernel", "jupytext", "nbgrader")


def runtime_pins() -> str:
    """The `name==version` lines of requirements.txt for RUNTIME_PINS, comments dropped."""
    pins = []
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        spec = line.split("#")[0].strip()
        if spec.split("==")[0] in RUNTIME_PINS:
            pins.append(spec)
    return "\n".join(sorted(pins))


def source_hash(chapter: str) -> str:
    """A hash of what the executed page depends on: the chapter, the attnkit modules it imports,
    the code that executes and clears it (course/exercises.py), the runtime pins and, where there
    is one, the record of the chapter's claims check (tests/claims/), whose verdicts the page shows,
    and the records of its checkpoints (each holds its weights' checksum), which the page loads,
    and of its sweeps (attnkit/sweeps_data/), which it reads. Not references.bib nor the badges: they do not change the executed notebook."""
    from course.deps import digest
    record = ROOT / "tests" / "claims" / f"{chapter}.json"   # the claims check the page reports
    extra = [record] if record.exists() else []
    extra += sorted((CHECKPOINTS_DATA / chapter).glob("*.json"))
    extra += sorted((SWEEPS_DATA / chapter).glob("*.json"))
    inner = digest([SOLUTIONS / f"{chapter}.py", ROOT / "course" / "exercises.py", *extra])
    return hashlib.sha256(f"{inner}\n{runtime_pins()}".encode()).hexdigest()[:16]


def _badge_cell(chapter: str) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_markdown_cell(BADGES.format(repo=REPO, chapter=chapter))
    cell.id = "badges"
    return cell


def _refresh_badges(path: Path, chapter: str) -> None:
    """Rewrite a cached page's badge cell if the repository or the template changed (no execution)."""
    nb = nbformat.read(path, as_version=4)
    fresh = _badge_cell(chapter)
    for i, cell in enumerate(nb.cells):
        if cell.get("id") == "badges" and cell.source != fresh.source:
            nb.cells[i] = fresh
            path.write_text(render(nb))


def execute(nb: nbformat.NotebookNode, timeout: int = 900) -> nbformat.NotebookNode:
    """Run every cell (as a reader would) in a fresh kernel started at the repo root."""
    # the kernel's environment, the caller's left alone: no progress bars, and figures drawn
    # inline as a reader's kernel draws them (an inherited MPLBACKEND=Agg would drop every figure);
    # OpenMP threads wait passively: spinning ones stall a 2-thread training on a loaded machine
    # (about 9 s a step, past the cell timeout), and waiting passively changes no result
    env = dict(os.environ, ATTNKIT_PROGRESS="off", OMP_WAIT_POLICY="PASSIVE",
               MPLBACKEND="module://matplotlib_inline.backend_inline")
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(ROOT)}})
    client.execute(env=env)
    return nb


def stderr_outputs(nb: nbformat.NotebookNode) -> list[str]:
    """The start of each stderr stream or error output in `nb`: a page must show none."""
    found = []
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            if out.output_type == "error" or (out.output_type == "stream" and out.name == "stderr"):
                text = out.get("text") or f"{out.get('ename')}: {out.get('evalue')}"
                found.append(f"cell {i}: {text[:200]}")
    return found


def missing_figures(nb: nbformat.NotebookNode) -> list[int]:
    """The code cells that call `plt.show()` but show no image: a page must show its figures."""
    return [i for i, cell in enumerate(nb.cells)
            if cell.cell_type == "code" and "plt.show()" in cell.source
            and not any("image/png" in out.get("data", {}) for out in cell.get("outputs", []))]


def _bare_value(out: dict) -> bool:
    """An `execute_result` with only text/plain, such as the value a `glue(...)` call returns when
    it ends its cell (a rich display, an attention view, has HTML too)."""
    return out.get("output_type") == "execute_result" and set(out.get("data", {})) <= {"text/plain"}


def stray_values(nb: nbformat.NotebookNode) -> list[int]:
    """The code cells that show a bare value: a page shows no stray values."""
    return [i for i, cell in enumerate(nb.cells) if cell.cell_type == "code"
            and any(_bare_value(out) for out in cell.get("outputs", []))]


def nan_glues(nb: nbformat.NotebookNode) -> list[str]:
    """The names a page glues as nan: a measurement the build could not make (chapter 05's and
    06's logit checks glue nan when `transformers`, from requirements-ci.txt, is missing)."""
    from attnkit.glue import glued
    return sorted(name for name, text in glued(nb).items() if text.strip().lower() == "nan")


def refuse_broken_page(chapter: str, nb: nbformat.NotebookNode) -> None:
    """Raise when the page would show stderr, lose a figure, glue nan or show a stray value."""
    if noise := stderr_outputs(nb):
        raise RuntimeError(f"{chapter}: the page would show stderr output, which the book test "
                           "rejects; silence it in the solution:\n" + "\n".join(noise))
    if lost := missing_figures(nb):
        raise RuntimeError(f"{chapter}: cells {lost} call plt.show() but the page has no image "
                           "from them (is MPLBACKEND set to a non-inline backend?)")
    if nans := nan_glues(nb):
        raise RuntimeError(f"{chapter}: the page glues nan for {nans}: a check it could not run "
                           "(install the test-only packages: the transformers line of requirements-ci.txt)")
    if stray := stray_values(nb):
        raise RuntimeError(f"{chapter}: cells {stray} end with a bare value that the page would show; "
                           "assign it (`_ = glue(...)`) or end the cell with another statement")


def build_page(chapter: str, force: bool = False) -> Path:
    """Write `book/chapters/<chapter>.ipynb` unless an up-to-date one is there."""
    PAGES.mkdir(parents=True, exist_ok=True)
    path, digest = PAGES / f"{chapter}.ipynb", source_hash(chapter)
    if path.exists() and not force:
        old = nbformat.read(path, as_version=4)
        if old.metadata.get("course", {}).get("source_hash") == digest:
            _refresh_badges(path, chapter)
            print(f"{chapter}: up to date")
            return path
    started = time.monotonic()
    nb = clear_solutions(execute(read_solution(chapter)), keep_outputs=True)
    refuse_broken_page(chapter, nb)
    nb.metadata["course"]["source_hash"] = digest
    badge = _badge_cell(chapter)
    title_at = next((i for i, c in enumerate(nb.cells) if c.cell_type == "markdown"), -1)
    nb.cells.insert(title_at + 1, badge)
    path.write_text(render(nb))
    print(f"{chapter}: executed in {time.monotonic() - started:.0f} s")
    return path


def _code_only(source: str) -> str:
    """A code cell's source with `_ = ` before a call and all whitespace removed: what it computes."""
    import re
    return re.sub(r"\s+", "", re.sub(r"(?m)^_ = ", "", source))


def rerender_page(chapter: str, output_text: list[tuple[str, str]] = ()) -> Path:
    """The committed page with the current solution's text, its outputs kept, without executing.

    For a change of prose, or of code that computes the same thing (`_ = glue(...)` for
    `glue(...)`, a line broken differently), the outputs stay those of the run the page was built
    from, on the machine its claims record was made on: float results differ between machines, so
    re-executing elsewhere would show numbers the record does not hold. A cell added, removed or
    retyped, or code that computes something else, is refused: re-execute (`course pages NN
    --force`). `output_text` (OLD, NEW) pairs allow a changed printed label: a code cell that
    computes something else is accepted only where one OLD is in its printed output, and each OLD
    is replaced by its NEW there."""
    path = PAGES / f"{chapter}.ipynb"
    old = nbformat.read(path, as_version=4)
    badge_at = next(i for i, c in enumerate(old.cells) if c.get("id") == "badges")
    badge = old.cells.pop(badge_at)
    new = clear_solutions(read_solution(chapter), keep_outputs=True)
    if [c.cell_type for c in old.cells] != [c.cell_type for c in new.cells]:
        raise RuntimeError(f"{chapter}: cells were added, removed or retyped since the page was "
                           "built: re-execute it (`python -m course pages NN --force`)")
    unused = dict(output_text)
    for i, (o, n) in enumerate(zip(old.cells, new.cells)):
        if o.source == n.source:
            continue
        printed = "".join(out.get("text", "") for out in o.get("outputs", [])
                          if out.output_type == "stream")
        if o.cell_type == "code" and _code_only(o.source) != _code_only(n.source) \
                and not any(a in printed for a, _ in output_text):
            raise RuntimeError(f"{chapter}: code cell {i} computes something else now: re-execute "
                               "the page (`python -m course pages NN --force`)")
        o.source = n.source
        if o.cell_type == "code":
            o.outputs = [out for out in o.get("outputs", []) if not _bare_value(out)]
            for out in o.outputs:
                for a, b in output_text:
                    if out.output_type == "stream" and a in out.text:
                        out.text = out.text.replace(a, b)
                        unused.pop(a, None)
    if unused:
        raise RuntimeError(f"{chapter}: {sorted(unused)} is in no changed cell's output")
    old.cells.insert(badge_at, badge)
    old.metadata["course"]["source_hash"] = source_hash(chapter)
    refuse_broken_page(chapter, old)
    path.write_text(render(old))
    print(f"{chapter}: re-rendered with its recorded outputs")
    return path


def book_chapters() -> list[str]:
    """The chapters the book lists (_toc.yml): a chapter enters the book when it is finished."""
    import re
    toc = (ROOT / "_toc.yml").read_text()
    listed = set(re.findall(r"book/chapters/(\d\d_\w+)", toc))
    return [ch for ch in chapters() if ch in listed]


def build_pages(force: bool = False, only: list[str] | None = None) -> list[Path]:
    """The page of every chapter in the book, or of the chapters named in `only` (NN or NN_name)."""
    chapters = [ch for ch in book_chapters() if not only or any(ch.startswith(o) for o in only)]
    if only and not chapters:
        raise SystemExit(f"no chapter of the book matches {' '.join(only)}")
    return [build_page(ch, force) for ch in chapters]
