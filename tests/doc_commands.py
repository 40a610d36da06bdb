"""The shell commands of a Markdown document, for the tests that run them (tests/test_doc_commands.py,
tests/docs/test_student_commands.py).

The rule, simple and strict:
- every fenced code block carries a language; an unlabelled fence is an error (it could hide a command);
- `bash`, `sh`, `shell` and `console` blocks are commands: every line that is not blank and not a
  comment, a line ending in `\\` joined with the next;
- `ipython` blocks are notebook cells: their `!` lines are commands (the `!` dropped);
- other languages (`python`, `yaml`, `text`...) and MyST directives' own text are not run; code
  fences inside a directive are read like any other.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>[^\n`]*)\n"
                   r"(?P<body>.*?)^(?P=indent)(?P=fence)[ \t]*$", re.M | re.S)
SHELL = {"bash", "sh", "shell", "console"}
NOT_RUN = {"python", "yaml", "text", "json", "toml", "ini"}


@dataclass(frozen=True)
class Command:
    kind: str  # "bash" (a shell block) or "ipython" (a `!` line of a notebook cell)
    text: str
    line: int  # where its block starts in the document (1-based)


@dataclass(frozen=True)
class Block:
    info: str
    body: str
    line: int


def blocks(text: str, offset: int = 0) -> list[Block]:
    """Every fenced block, directives' inner fences included, in document order."""
    found = []
    for m in FENCE.finditer(text):
        line = offset + text.count("\n", 0, m.start()) + 1
        indent = m.group("indent")
        body = "\n".join(ln[len(indent):] if ln.startswith(indent) else ln.lstrip()
                         for ln in m.group("body").split("\n"))
        info = m.group("info").strip()
        found.append(Block(info, body, line))
        if info.startswith("{"):
            found += blocks(body, line)
    return found


def lines_of(body: str) -> list[str]:
    out, pending = [], ""
    for raw in body.split("\n"):
        line = pending + raw.strip() if pending else raw.strip()
        if line.endswith("\\"):
            pending = line[:-1].rstrip() + " "
            continue
        pending = ""
        if line and not line.startswith("#"):
            out.append(line)
    return out


def commands(text: str) -> list[Command]:
    """The document's commands, in order (see the module's rule). ValueError on an unlabelled fence."""
    out = []
    for block in blocks(text):
        lang = block.info.split()[0].lower() if block.info else ""
        if not lang:
            raise ValueError(f"line {block.line}: a code fence without a language (say bash, python, text...)")
        if lang in SHELL:
            out += [Command("bash", line, block.line) for line in lines_of(block.body)]
        elif lang == "ipython":
            out += [Command("ipython", line[1:].strip(), block.line) for line in lines_of(block.body)
                    if line.startswith("!")]
        elif not (lang.startswith("{") or lang in NOT_RUN or lang == "ipython"):
            raise ValueError(f"line {block.line}: code fence language {lang!r}: is it run or not? "
                             f"(tests/doc_commands.py)")
    return out


# ---------------------------------------------------------------- running them
SERVER = re.compile(r"^jupyter (lab|notebook)\b")
CHECK = re.compile(r"\bpython3? -m attnkit check (\S+)")


def session_script(cmds: list[Command], solve: bool = False) -> str:
    """One bash session (`set -e`) that runs `cmds` in order, each announced as `@@ N: command`.

    - `jupyter lab ...`/`jupyter notebook ...` runs through $DOC_SERVE (tests/docs/serve_check.py):
      the server must serve the notebook it names and start a kernel for it, then it is stopped;
    - with `solve`, the notebook of each `python -m attnkit check NB` is first replaced by the solved
      one in $DOC_SOLVED (the student's work: each check must then pass);
    - `ipython` commands (cells on Colab) run in the folder $DOC_COLAB, as a notebook uploaded there.
    """
    import shlex
    out = ["set -e", 'doc_solve() { mkdir -p "$(dirname "$1")"; cp "$DOC_SOLVED/$(basename "$1")" "$1"; }']
    for i, c in enumerate(cmds, 1):
        text = c.text
        if SERVER.match(text):
            text = f'"$DOC_PY" "$DOC_SERVE" {text}'
        check = CHECK.search(text)
        if solve and check:
            text = f"doc_solve {check.group(1)} && {text}"
        if c.kind == "ipython":
            text = f'(mkdir -p "$DOC_COLAB" && cd "$DOC_COLAB" && {text})'
        out += [f"echo {shlex.quote(f'@@ {i}: {c.text}')}", text]
    out.append("echo '@@ all commands succeeded'")
    return "\n".join(out) + "\n"


def failed_command(output: str) -> str:
    """The last command a session announced (the one that failed, when it did not finish)."""
    announced = [ln for ln in output.splitlines() if ln.startswith("@@ ")]
    return announced[-1] if announced else "(none ran)"
