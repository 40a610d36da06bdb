"""A chapter's model trained longer than a notebook can: declared by the chapter, trained by
`python -m course checkpoints NN`, committed small, and loaded by the page in one call.

    from attnkit.checkpoints import checkpoint

    def build() -> nn.Module:                       # the model, from the chapter's current classes
        return GPT(vocab_size=len(VOCAB), d_model=128, n_layers=4)

    def evaluate(model: nn.Module) -> dict:         # its metrics, on the CPU, from fixed data
        return {"val_loss": ...}

    @checkpoint("05_gpt", build=build, evaluate=evaluate, steps=20_000)
    def char_lm(model: nn.Module, steps: int, device: torch.device) -> list[dict]:
        '''Train `model` (on `device`) in place; return the training log, one dict per report.'''
        ...

    char_lm(char_lm.build(), steps=300, device=pick_device())   # the notebook's own short run
    model = char_lm.load()        # the committed longer run: strict load into build()'s model
    char_lm.record()              # its log, metrics, seconds, device, versions and code hash

The keyword arguments after `evaluate` are the longer run's (`steps=20_000`); the command calls
`char_lm(build(), device=<a GPU if present, else the CPU>, **those)`, stores the weights in float16
(`attnkit/checkpoints_data/NN_name/<name>.pt`, read with `torch.load(weights_only=True)`), then
loads them back into a fresh `build()` on the CPU and records what `evaluate` gives on them, so the
recorded metrics are those of the committed weights (`<name>.json`, beside the log).

The cell that defines a `@checkpoint` function holds everything it needs (build, evaluate, data),
like an `@experiment` cell: the command runs the graded cells and those cells only.
"""
from __future__ import annotations

import hashlib
import json
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

DATA = Path(os.environ.get("ATTNKIT_CHECKPOINTS_DIR", Path(__file__).resolve().parent / "checkpoints_data"))
BUDGET_BYTES = 30 * 2**20      # every chapter's committed weights together
CHECKPOINTS: dict[str, "Checkpoint"] = {}   # "NN_name/name" -> checkpoint, in the order the notebook declares them


class StaleCheckpoint(UserWarning):
    """The committed weights were trained by other code than the chapter's current code."""


class CheckpointMismatch(RuntimeError):
    """The committed weights do not fit the model `build()` makes from the current classes."""


@dataclass
class Checkpoint:
    """A chapter's longer run: `train(model, device=, **kwargs)` on `build()`, scored by `evaluate`."""

    chapter: str
    name: str
    train: Callable[..., Any]
    build: Callable[[], nn.Module]
    evaluate: Callable[[nn.Module], dict]
    kwargs: dict = field(default_factory=dict)
    tolerance: float = 1e-4    # how far a re-measured metric may move (relative, and absolute near 0)

    @property
    def key(self) -> str:
        return f"{self.chapter}/{self.name}"

    @property
    def weights_path(self) -> Path:
        return DATA / self.chapter / f"{self.name}.pt"

    @property
    def record_path(self) -> Path:
        return DATA / self.chapter / f"{self.name}.json"

    def __call__(self, *args, **kwargs):
        """The training function itself: the notebook's short run calls it."""
        return self.train(*args, **kwargs)

    def record(self) -> dict:
        """The committed record: metrics, log, seconds, device, versions, code hash."""
        if not self.record_path.exists():
            raise FileNotFoundError(f"no committed checkpoint {self.key}: run `python -m course checkpoints "
                                    f"{self.chapter[:2]}` and commit {self.record_path.parent}")
        return json.loads(self.record_path.read_text())

    def load(self, check_code: bool = True) -> nn.Module:
        """The committed weights in a fresh `build()` (CPU, float32, eval mode), loaded strictly.

        Warns (StaleCheckpoint) when the chapter's code has changed since they were trained, where the
        course's tools are at hand to tell (the repository; not a student's pip install).
        """
        record = self.record()
        state = read_weights(self.weights_path, record.get("sha256"))
        model = self.build()
        load_strict(model, state, self.key)
        if check_code:
            current = current_code_hash(self.chapter)
            if current is not None and current != record.get("code_hash"):
                warnings.warn(f"checkpoint {self.key} was trained by other code (hash {record.get('code_hash')}, "
                              f"the chapter's is now {current}): `python -m course checkpoints "
                              f"{self.chapter[:2]}` retrains it", StaleCheckpoint, stacklevel=2)
        return model.eval()


def checkpoint(chapter: str, *, build: Callable[[], nn.Module], evaluate: Callable[[nn.Module], dict],
               tolerance: float = 1e-4, **kwargs) -> Callable[[Callable], Checkpoint]:
    """Declare `fn(model, device=, **kwargs)` as `chapter`'s longer run (named after the function)."""
    def register(fn: Callable) -> Checkpoint:
        ck = Checkpoint(chapter, fn.__name__, fn, build, evaluate, dict(kwargs), tolerance)
        ck.__doc__ = fn.__doc__
        CHECKPOINTS[ck.key] = ck
        return ck
    return register


# ---------------------------------------------------------------- weights on disk
def half_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The model's state dict on the CPU, floating tensors in float16; tied tensors stay shared."""
    out, seen = {}, {}
    for name, t in model.state_dict().items():
        key = (t.data_ptr(), t.dtype, tuple(t.shape))
        if key not in seen:
            t = t.detach().cpu()
            seen[key] = t.to(torch.float16) if t.is_floating_point() else t.clone()
        out[name] = seen[key]
    return out


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def read_weights(path: Path, sha256: str | None = None) -> dict[str, torch.Tensor]:
    """A committed state dict (weights only), its checksum checked against the record's."""
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: the record has no weights beside it")
    if sha256 is not None and file_sha256(path) != sha256:
        raise CheckpointMismatch(f"{path} does not match the checksum of its record: retrain and commit both")
    return torch.load(path, map_location="cpu", weights_only=True)


def load_strict(model: nn.Module, state: dict[str, torch.Tensor], key: str = "checkpoint") -> None:
    """`state` into `model`, every name and shape matching, cast to the model's dtypes; a clear error if not."""
    own = model.state_dict()
    missing, unexpected = sorted(own.keys() - state.keys()), sorted(state.keys() - own.keys())
    shapes = [f"{k}: model {tuple(own[k].shape)}, weights {tuple(state[k].shape)}"
              for k in sorted(own.keys() & state.keys()) if own[k].shape != state[k].shape]
    if missing or unexpected or shapes:
        parts = [f"missing {', '.join(missing[:8])}" if missing else "",
                 f"unexpected {', '.join(unexpected[:8])}" if unexpected else "",
                 f"other shapes ({'; '.join(shapes[:4])})" if shapes else ""]
        raise CheckpointMismatch(f"the weights of {key} do not fit the current classes: "
                                 + "; ".join(p for p in parts if p)
                                 + ". Parameter names come from the attribute names the docstrings give.")
    model.load_state_dict({k: v.to(own[k].dtype) for k, v in state.items()}, strict=True)


def current_code_hash(chapter: str) -> str | None:
    """The hash of the chapter's checkpoint code now, or None where the course's tools are absent."""
    try:
        from course.checkpoints import code_hash
        return code_hash(chapter)
    except (ImportError, FileNotFoundError):
        return None


def committed() -> list[Path]:
    """Every committed checkpoint record, `checkpoints_data/NN_name/<name>.json`."""
    return sorted(DATA.glob("[0-9][0-9]_*/*.json"))


def committed_bytes() -> int:
    """The size of every committed checkpoint file together."""
    return sum(p.stat().st_size for p in DATA.glob("[0-9][0-9]_*/*") if p.is_file())
