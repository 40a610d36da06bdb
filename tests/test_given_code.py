"""Does the given code of every chapter touch a student's graded classes only through what their
docstrings name? (docs/AUTHORING.md: "Given code and the student's classes")

A student's class may call its dropout `drop` and still meet the contract; given code that reads
`layer.dropout` would then fail in their notebook only. This test reads the solution notebooks'
non-exercise cells and finds, for every graded class, (a) given subclasses reading `self.X` that
they do not define themselves and (b) given code reading `obj.X` of an instance `obj = Graded(...)`.
Each such X must be named in the graded class's docstrings, or be part of `nn.Module`.
"""
from __future__ import annotations

import ast
import re

import pytest
from torch import nn

from course.exercises import chapters, read_solution

MODULE_NAMES = set(dir(nn.Module))


def graded_classes(cells) -> dict[str, str]:
    """name -> what each class defined in a graded cell names: its docstrings (class and methods)
    and, as `def NAME`, the methods whose signatures the exercise keeps."""
    out = {}
    for cell in cells:
        if not cell.metadata.get("nbgrader", {}).get("solution"):
            continue
        for node in ast.walk(ast.parse(cell.source)):
            if isinstance(node, ast.ClassDef):
                parts = [node, *(n for n in node.body if isinstance(n, ast.FunctionDef))]
                docs = [ast.get_docstring(n) or "" for n in parts]
                docs += [f"`def {n.name}`" for n in parts[1:]]
                out[node.name] = "\n".join(docs)
    return out


def named(attr: str, doc: str) -> bool:
    """Whether `attr` is nn.Module's or written in backticks in `doc` (`ff`, `self.attn`, `def encode`)."""
    if attr in MODULE_NAMES:
        return True
    return re.search(rf"`[^`\n]*(?<!\w){re.escape(attr)}\b[^`\n]*`", doc) is not None


def subclass_reads(tree: ast.AST, graded: dict[str, str]) -> list[str]:
    """`self.X` reads of given subclasses of graded classes that neither the subclass nor the docstring defines."""
    bad = []
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        bases = [b.id for b in cls.bases if isinstance(b, ast.Name) and b.id in graded]
        if not bases:
            continue
        own = {n.name for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        own |= {n.attr for n in ast.walk(cls) if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)
                and isinstance(n.value, ast.Name) and n.value.id == "self"}
        for n in ast.walk(cls):
            if (isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Load) and isinstance(n.value, ast.Name)
                    and n.value.id == "self" and n.attr not in own
                    and not any(named(n.attr, graded[b]) for b in bases)):
                bad.append(f"{cls.name}(…{bases[0]}) reads self.{n.attr}, which {bases[0]}'s docstring does not name")
    return bad


def instance_reads(tree: ast.AST, graded: dict[str, str]) -> list[str]:
    """`obj.X` reads where `obj = Graded(...)` in given code and X is not named by Graded's docstring."""
    instances = {}
    for n in ast.walk(tree):
        if (isinstance(n, ast.Assign) and isinstance(n.value, ast.Call) and isinstance(n.value.func, ast.Name)
                and n.value.func.id in graded):
            instances.update({t.id: n.value.func.id for t in n.targets if isinstance(t, ast.Name)})
    bad = []
    for n in ast.walk(tree):
        if (isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in instances
                and not named(n.attr, graded[instances[n.value.id]])):
            bad.append(f"{n.value.id}.{n.attr}: {instances[n.value.id]}'s docstring does not name `{n.attr}`")
    return bad


def violations(nb) -> list[str]:
    graded = graded_classes(nb.cells)
    given = "\n\n".join(c.source for c in nb.cells if c.cell_type == "code"
                        and not c.metadata.get("nbgrader", {}).get("solution")
                        and not c.source.lstrip().startswith(("%", "!")))
    tree = ast.parse(given)
    return subclass_reads(tree, graded) + instance_reads(tree, graded)


@pytest.mark.parametrize("chapter", chapters())
def test_given_code_uses_only_what_docstrings_name(chapter):
    bad = violations(read_solution(chapter))
    assert not bad, "given code relies on undocumented attributes of graded classes:\n" + "\n".join(bad)


def test_the_check_finds_an_undocumented_attribute():
    import nbformat
    graded = nbformat.v4.new_code_cell('class Layer(nn.Module):\n    """Attributes `ff` and `norm1`."""\n')
    graded.metadata["nbgrader"] = {"solution": True, "grade_id": "Layer"}
    given = nbformat.v4.new_code_cell("class Pre(Layer):\n    def forward(self, x):\n"
                                      "        return self.dropout(self.ff(self.norm1(x)))\n"
                                      "m = Layer()\nm.norm1\nm.secret\n")
    bad = violations(nbformat.v4.new_notebook(cells=[graded, given]))
    assert any("self.dropout" in b for b in bad) and any("m.secret" in b for b in bad)
    assert not any("norm1" in b or "self.ff" in b for b in bad)
