"""Draw the course map on the home page: the eight chapters and what each one needs first.

Run `.venv/bin/python book/course_map.py` after changing the chapters; it writes
book/_static/course_map.svg (committed; no network, matplotlib only).
"""
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

CHAPTERS = {  # number: (title, position (x, y))
    "01": ("seq2seq\nbeam search", (0, 1)),
    "02": ("attention\nBahdanau, Luong", (1, 1)),
    "03": ("Transformer", (2, 1)),
    "04": ("ELMo\nbiLM, scalar mix", (1, 0)),
    "05": ("GPT\ndecoder-only LM", (3, 2)),
    "06": ("BERT\nmasked LM", (3, 1)),
    "07": ("Transformer-XL\nXLNet", (3, 0)),
    "08": ("Reformer\nLSH, reversible", (4, 1)),
}
PREREQUISITES = [("01", "02"), ("02", "03"), ("01", "04"), ("03", "05"), ("03", "06"),
                 ("04", "06"), ("03", "07"), ("05", "07"), ("03", "08")]


def draw(path: Path) -> None:
    fig, ax = plt.subplots(figsize=(9, 3.6))
    for a, b in PREREQUISITES:
        (xa, ya), (xb, yb) = CHAPTERS[a][1], CHAPTERS[b][1]
        ax.annotate("", xy=(xb - 0.33, yb), xytext=(xa + 0.33, ya),
                    arrowprops=dict(arrowstyle="->", color="#888", lw=1.2))
    for num, (title, (x, y)) in CHAPTERS.items():
        ax.text(x, y, f"{num}\n{title}", ha="center", va="center", fontsize=9,
                bbox=dict(boxstyle="round,pad=0.4", fc="#e8f1fa", ec="#1f77b4"))
    ax.set_xlim(-0.5, 4.5)
    ax.set_ylim(-0.5, 2.5)
    ax.axis("off")
    ax.set_title("Chapters and their prerequisites (an arrow: read this one first)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, metadata={"Date": None})
    plt.close(fig)


if __name__ == "__main__":
    draw(Path(__file__).resolve().parent / "_static" / "course_map.svg")
