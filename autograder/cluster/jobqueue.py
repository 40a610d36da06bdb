"""Workers started through a batch system: `--cluster slurm` (or pbs, sge) with dask-jobqueue.

The cluster's settings (partition, account, cores, memory, walltime, the
Python of the course's venv, ...) come from Dask's configuration, section
`jobqueue.<kind>`: ~/.config/dask/jobqueue.yaml, DASK_JOBQUEUE__* variables, or
the YAML file given with `--cluster-config FILE`. A worked Slurm file: see
"Slurm, from a login node" in book/instructors/cluster.md. Each batch job runs
`processes` Dask workers of one thread each.
"""
from __future__ import annotations

from pathlib import Path

KINDS = {"slurm": "SLURMCluster", "pbs": "PBSCluster", "sge": "SGECluster"}


class JobqueueError(RuntimeError):
    """dask-jobqueue is missing or its configuration is unusable."""


def load_config(path: str | Path | None) -> None:
    """Merge a YAML file (the same layout as ~/.config/dask/jobqueue.yaml) into Dask's configuration."""
    if not path:
        return
    import dask.config
    import yaml
    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise JobqueueError(f"cannot read the cluster configuration {path}: {exc}") from None
    if not isinstance(data, dict) or "jobqueue" not in data:
        raise JobqueueError(f"{path} has no `jobqueue:` section (see \"Slurm, from a login node\" in "
                            "book/instructors/cluster.md)")
    dask.config.update(dask.config.config, dask.config.expand_environment_variables(data), priority="new")


def make_cluster(kind: str, config_file: str | Path | None = None, tls: bool = False, **overrides):
    """A dask-jobqueue cluster object for `kind` (no batch job submitted yet: call .scale).

    tls: encrypt and authenticate every connection (mutual TLS) with the certificates named in
    Dask's configuration, `distributed.comm.tls` (ca-file; scheduler, worker and client cert and
    key); the worker's files are passed on its command line, so they must be readable on the nodes.
    """
    if kind not in KINDS:
        raise JobqueueError(f"--cluster {kind}: expected one of {', '.join(KINDS)}")
    try:
        import dask_jobqueue
    except ImportError:
        raise JobqueueError("--cluster needs dask-jobqueue: `pip install -r requirements.txt`") from None
    load_config(config_file)
    import dask.config
    settings = dask.config.get(f"jobqueue.{kind}", {})
    if not settings.get("cores") or not settings.get("memory"):
        raise JobqueueError(f"set jobqueue.{kind}.cores and .memory in the Dask configuration or in "
                            "--cluster-config FILE (see \"Slurm, from a login node\" in "
                            "book/instructors/cluster.md)")
    if tls:
        from distributed.security import Security
        if not dask.config.get("distributed.comm.tls.ca-file", None):
            raise JobqueueError("--tls needs distributed.comm.tls.ca-file and the scheduler's, workers' and "
                                "client's cert and key in the Dask configuration (see \"TLS (hosts on a shared "
                                "network)\" in book/instructors/cluster.md)")
        overrides = {"security": Security(), "protocol": "tls://", **overrides}
    return getattr(dask_jobqueue, KINDS[kind])(**overrides)


def start_cluster(kind: str, jobs: int, config_file: str | Path | None = None, tls: bool = False):
    """Submit `jobs` batch jobs of workers; returns the cluster (close it when the batch ends)."""
    cluster = make_cluster(kind, config_file, tls)
    cluster.scale(jobs=jobs)
    return cluster
