"""`eval.cluster` / `--cluster` values: where evaluations run (parsed without importing Dask)."""

from __future__ import annotations

from dataclasses import dataclass

from kernelbench_rl.errors import UserError

LOCAL = "local"
DASK_LOCAL = "dask-local"
DASK_SCHEME = "dask://"
CLUSTER_HELP = "local (this machine's pool), dask-local (a Dask cluster started here) or dask://HOST:PORT."


@dataclass(frozen=True)
class ClusterSpec:
    kind: str  # local | dask-local | dask
    address: str = ""  # tcp://HOST:PORT for kind == "dask"

    @property
    def is_dask(self) -> bool:
        return self.kind != LOCAL


def parse_cluster(value: str | None) -> ClusterSpec:
    """`local`, `dask-local` or `dask://HOST:PORT` (also `tcp://HOST:PORT`); anything else is a UserError."""
    text = (value or LOCAL).strip()
    if text in (LOCAL, DASK_LOCAL):
        return ClusterSpec(text)
    for scheme in (DASK_SCHEME, "tcp://", "tls://"):
        if text.startswith(scheme):
            hostport = text[len(scheme):]
            host, _, port = hostport.rpartition(":")
            if host and port.isdigit():
                return ClusterSpec("dask", ("tls://" if scheme == "tls://" else "tcp://") + hostport)
    raise UserError(f"eval.cluster (--cluster) must be local, dask-local or dask://HOST:PORT, not {text!r}.")
