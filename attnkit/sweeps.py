"""A chapter's sweep of short runs (a scaling study): declared by the page, run by
`python -m course sweeps NN`, committed as JSON records, read by the page.

    from attnkit.sweeps import sweep

    @sweep("05_gpt", configs=[dict(d_model=32, seed=0), dict(d_model=64, seed=0)])
    def scaling_run(d_model: int, seed: int) -> dict:
        '''One run of the sweep; its record (anything JSON can hold).'''
        ...

    scaling_run.results()     # the committed records, in the order of `configs`, each with its config

The command runs the chapter's graded cells, its checkpoint cells and its sweep cells in a fresh
process, then runs each config whose record is missing or was made by other code (or every config,
with --force), and writes `attnkit/sweeps_data/NN_name/<name>.json` after each run, so an interrupted
sweep keeps what it finished. A record is keyed by its config; it holds the hash of the code that
made it (those cells, with the `configs=` of the decorators left out, and the attnkit modules they
reach), so adding a config runs that config only.
"""
from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

DATA = Path(os.environ.get("ATTNKIT_SWEEPS_DIR", Path(__file__).resolve().parent / "sweeps_data"))
SWEEPS: dict[str, "Sweep"] = {}   # "NN_name/name" -> sweep, in the order the notebook declares them


class StaleSweep(UserWarning):
    """Some committed records were made by other code than the chapter's current code."""


def config_key(config: dict) -> str:
    """The key of a config's record: its JSON, keys sorted."""
    return json.dumps(config, sort_keys=True)


@dataclass
class Sweep:
    """`fn(**config)` for every config in `configs`; its records stored in one JSON file."""

    chapter: str
    name: str
    fn: Callable[..., Any]
    configs: list[dict] = field(default_factory=list)

    @property
    def key(self) -> str:
        return f"{self.chapter}/{self.name}"

    @property
    def path(self) -> Path:
        return DATA / self.chapter / f"{self.name}.json"

    def __call__(self, *args, **kwargs):
        """One run, here and now (the page may call it for a single config)."""
        return self.fn(*args, **kwargs)

    def stored(self) -> dict[str, dict]:
        """Every committed record, by config key (more than `configs` may hold)."""
        return json.loads(self.path.read_text())["runs"] if self.path.exists() else {}

    def results(self, check_code: bool = True) -> list[dict]:
        """The committed record of every config, in order, each with its "config"; an error if one is missing."""
        runs = self.stored()
        missing = [c for c in self.configs if config_key(c) not in runs]
        if missing:
            raise FileNotFoundError(f"{len(missing)} of {len(self.configs)} runs of {self.key} have no record "
                                    f"(first: {missing[0]}): run `python -m course sweeps {self.chapter[:2]}` "
                                    f"and commit {self.path}")
        out = [dict(runs[config_key(c)], config=c) for c in self.configs]
        if check_code:
            current = current_code_hash(self.chapter)
            stale = [r for r in out if current is not None and r.get("code_hash") != current]
            if stale:
                warnings.warn(f"{len(stale)} runs of {self.key} were made by other code (the chapter's hash is "
                              f"now {current}): `python -m course sweeps {self.chapter[:2]}` re-runs them",
                              StaleSweep, stacklevel=2)
        return out

    def store(self, config: dict, record: dict) -> None:
        """Write one config's record into the sweep's file (the others kept)."""
        runs = self.stored()
        runs[config_key(config)] = record
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps({"chapter": self.chapter, "name": self.name,
                                         "runs": dict(sorted(runs.items()))}, indent=1, sort_keys=True) + "\n")


def sweep(chapter: str, *, configs: list[dict]) -> Callable[[Callable], Sweep]:
    """Declare `fn(**config)` as one of `chapter`'s sweeps (named after the function)."""
    if not configs or not all(isinstance(c, dict) for c in configs):
        raise ValueError("configs must be a non-empty list of dicts (keyword arguments of the function)")
    keys = [config_key(c) for c in configs]
    if len(set(keys)) != len(keys):
        raise ValueError("configs holds the same config twice")

    def register(fn: Callable) -> Sweep:
        s = Sweep(chapter, fn.__name__, fn, [dict(c) for c in configs])
        s.__doc__ = fn.__doc__
        SWEEPS[s.key] = s
        return s
    return register


def current_code_hash(chapter: str) -> str | None:
    """The hash of the chapter's sweep code now, or None where the course's tools are absent."""
    try:
        from course.sweeps import code_hash
        return code_hash(chapter)
    except (ImportError, FileNotFoundError):
        return None
