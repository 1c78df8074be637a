"""Dask worker side: each worker hosts one warm sandboxed `WorkerPool` for its GPU(s) (or its CPU).

The pool is started by a worker plugin when the worker joins (and again when a lost worker's
nanny restarts it), lives as long as the worker, and serves every evaluation task sent there. A
worker advertises the resource `EvalPoolPlugin.resource` (one unit per evaluation it can hold in
flight) only once its pool is ready, so the scheduler sends evaluation tasks nowhere else: a
worker whose pool cannot start keeps its reason in `pool_status` and takes no evaluation.

Like the rest of the worker side this imports only the standard library, `distributed` and the
pool (never DuckDB or Prefect): the store stays on the driver.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import threading
from typing import Any

from distributed import WorkerPlugin, get_worker

from kernelbench_rl.evaluation.front.pool import WorkerPool, _default_worker_count, pool_shape

log = logging.getLogger("kernelbench_rl.evaluation.dask")

# Set on a Dask worker to pin how many GPUs its pool drives; else one when CUDA_VISIBLE_DEVICES is set
# (dask-cuda gives each worker its own GPU first in that list), every visible GPU otherwise.
GPUS_PER_WORKER_ENV = "KBRL_GPUS_PER_WORKER"


def gpus_for_this_worker() -> tuple[int, int]:
    """(GPUs this worker's pool drives, GPUs on this host that share its CPU cores)."""
    visible = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    on_host = len(visible) or _default_worker_count("cuda")
    pinned = os.environ.get(GPUS_PER_WORKER_ENV, "").strip()
    if pinned.isdigit() and int(pinned) > 0:
        return int(pinned), on_host
    return (1 if visible else on_host), on_host


def host_position() -> int:
    """Where this worker's GPU stands among its host's (its share of the host's cores, host_share.py): dask-cuda gives
    each worker the host's GPUs with its own first, so its place in their sorted list; 0 with nothing visible."""
    visible = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    if not visible:
        return 0
    ordered = sorted(visible, key=lambda d: (not d.isdigit(), int(d) if d.isdigit() else 0, d))
    return ordered.index(visible[0])


def _share_all_cores() -> None:
    """Let this thread (and the pool processes it starts) use every core the process may use.

    dask-cuda pins each worker to the cores nearest its GPU, which can leave two GPUs' pools on the same
    half of the machine and the other half idle; the pool sizes itself by its share of all cores instead,
    as the local evaluator does, and each of its workers then takes its own share of them (host_share.py). The kernel
    keeps the mask inside any cpuset the process is confined to."""
    try:
        os.sched_setaffinity(0, range(os.cpu_count() or 1))
    except (AttributeError, OSError, ValueError):
        pass


class PoolStartFailure(Exception):
    """The evaluation pool's worker process did not become ready (its own reason is the message)."""


class EvalPoolPlugin(WorkerPlugin):
    """Starts a sandboxed evaluation pool on each Dask worker and keeps it warm across tasks."""

    def __init__(self, device: str, *, parallel_compiles: int | None = None, in_flight: int | None = None,
                 warm_children: int | None = None, worker_args: list[str] | None = None) -> None:
        self.device = device
        self.parallel_compiles = parallel_compiles
        self.in_flight = in_flight
        self.warm_children = warm_children
        self.worker_args = list(worker_args or [])
        spec = json.dumps([device, parallel_compiles, in_flight, warm_children, self.worker_args])
        digest = hashlib.sha256(spec.encode()).hexdigest()[:10]
        # The name keys the plugin on the scheduler; the resource routes tasks to pools of this shape only.
        self.name = f"kbrl-eval-pool-{device}-{digest}"
        self.resource = f"kbrl-eval-{device}-{digest}"
        self._reset()

    def _reset(self) -> None:
        self.pool: WorkerPool | None = None
        self._starting: WorkerPool | None = None
        self.state = "new"  # new | starting | ready | failed | closed
        self.error = ""
        self.info: dict[str, Any] = {}
        self.slots = 0

    def __getstate__(self) -> dict[str, Any]:
        # Only the configuration travels to the workers; each builds its own pool.
        keep = ("device", "parallel_compiles", "in_flight", "warm_children", "worker_args", "name", "resource")
        return {k: self.__dict__[k] for k in keep}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()

    # -- worker hooks --------------------------------------------------------------------------
    def setup(self, worker: Any) -> None:
        # The pool takes seconds to minutes to start (torch import, CUDA init): never on the event loop.
        self.state = "starting"
        threading.Thread(target=self._start, args=(worker,), daemon=True, name="kbrl-eval-pool-start").start()

    def teardown(self, worker: Any) -> None:
        self.state = "closed"
        for pool in (self.pool, self._starting):  # a pool still starting is stopped too
            if pool is not None:
                pool.close()
        self.pool = self._starting = None

    def _start(self, worker: Any) -> None:
        pool = None
        try:
            _share_all_cores()
            gpus, on_host = (gpus_for_this_worker() if self.device == "cuda" else (1, 1))
            # Compile slots from this worker's share of the host's cores (one share per GPU on the host).
            parallel, in_flight, warm = pool_shape(self.device, on_host, self.parallel_compiles,
                                                   self.in_flight, self.warm_children)
            # Each worker's share of the host's cores is its own (its GPU's place among the host's): two pools on one
            # host never keep the same cores for their timing.
            slots = (host_position(), on_host) if self.device == "cuda" else None
            pool = self._starting = WorkerPool(self.device, gpus, parallel_compiles=parallel, warm_children=warm,
                                               in_flight=in_flight, worker_args=self.worker_args, host_slots=slots)
            infos = pool.wait_ready()
            if not infos or not all(infos):
                reasons = {s.last_failure or (s.worker.failed if s.worker is not None else "") for s in pool.slots}
                reason = "; ".join(sorted(r for r in reasons if r)) or "its evaluation worker did not become ready"
                raise PoolStartFailure(reason)
            if self.state == "closed":
                pool.close()
                return
            self.pool, self.info, self.slots = pool, dict(infos[0]), gpus * in_flight
            self.state = "ready"
            advertise = worker.set_resources(**{self.resource: float(self.slots)})
            asyncio.run_coroutine_threadsafe(advertise, worker.loop.asyncio_loop).result(timeout=60)
            log.info("kernelbench-rl evaluation pool ready on %s: %s, %d slot(s)", worker.address,
                     self.info.get("hardware", "?"), self.slots)
        except Exception as exc:  # noqa: BLE001 - reported through pool_status; the worker takes no work
            self.state = "failed"
            self.error = (str(exc) if isinstance(exc, PoolStartFailure) else f"{type(exc).__name__}: {exc}")[:500]
            log.error("kernelbench-rl evaluation pool could not start on %s: %s",
                      getattr(worker, "address", "?"), self.error)
            if pool is not None:
                pool.close()
            self.pool = None


def pool_status(plugin_name: str, dask_worker: Any = None) -> dict[str, Any]:
    """This worker's pool: state, slots, error and hardware (for `Client.run`)."""
    plugin = (dask_worker.plugins if dask_worker is not None else {}).get(plugin_name)
    if plugin is None:
        return {"state": "absent", "error": "the evaluation plugin is not registered on this worker", "slots": 0}
    return {"state": plugin.state, "error": plugin.error, "slots": plugin.slots,
            "hardware": plugin.info.get("hardware", ""), "pid": os.getpid()}


def pool_log_tail(plugin_name: str, lines: int = 100, dask_worker: Any = None) -> str:
    """The last lines of this worker's pool logs (for `Client.run`: a remote pool's trouble, read from the driver)."""
    plugin = (dask_worker.plugins if dask_worker is not None else {}).get(plugin_name)
    pool = getattr(plugin, "pool", None)
    if pool is None:
        return f"(no pool: {getattr(plugin, 'state', 'absent')} {getattr(plugin, 'error', '')})"
    tails = []
    for name in sorted(os.listdir(pool.log_dir)):
        if name.endswith(".log"):
            with open(os.path.join(pool.log_dir, name), errors="replace") as handle:
                tails.append(f"== {name}\n" + "".join(handle.readlines()[-lines:]))
    return "\n".join(tails)


def evaluate_on_worker(payload: dict[str, Any], timeout_s: float, plugin_name: str) -> dict[str, Any]:
    """A Dask task: one evaluation on this worker's warm pool; the pool's answer ({"result"} or {"infra"})."""
    plugin = get_worker().plugins.get(plugin_name)
    if plugin is None or plugin.pool is None:
        # The resource is advertised only with a ready pool, so this is a pool lost since: let Dask retry.
        raise RuntimeError(f"the evaluation pool on this worker is not ready ({getattr(plugin, 'state', 'absent')})")
    baseline = payload.get("baseline")
    if baseline:
        # A baseline timed on other hardware (a mixed cluster) is not this GPU's: time our own.
        measured_on = baseline.pop("hardware", "")
        if measured_on and measured_on != plugin.info.get("hardware"):
            payload = {**payload, "baseline": None}
    return plugin.pool.submit(payload, timeout_s).result()
