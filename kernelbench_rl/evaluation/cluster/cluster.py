"""Evaluation on a Dask cluster, behind the local `Evaluator`'s interface.

    with make_evaluator(settings, cluster="dask://scheduler:8786", store=Store(path)) as ev:
        results = ev.evaluate(requests, on_result=...)

`eval.cluster` (and `--cluster`) picks the engine:

- `local` (default): today's `Evaluator`, a sandboxed pool on this machine.
- `dask://HOST:PORT`: an existing Dask scheduler (dask-cuda workers, dask-jobqueue on SLURM/PBS,
  Kubernetes, a cloud); its workers need this package, torch and triton.
- `dask-local`: a Dask cluster started here, `dask_cuda.LocalCUDACluster` (one worker per GPU)
  when this host has GPUs, else a `distributed.LocalCluster` of CPU workers.

Everything but running the kernels stays on the driver, exactly as in the local evaluator: the
DuckDB verdict cache is read and filled here, static checks run here, workers never open the
store. Each Dask worker hosts one warm sandboxed pool (`dask_worker.EvalPoolPlugin`); requests go
out in a window sized to the slots the cluster advertises and come back as they finish. A worker
lost mid-evaluation has its tasks re-run by the scheduler elsewhere; each request's future
resolves once, so every verdict arrives exactly once.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any

from kernelbench_rl.errors import UserError
from kernelbench_rl.evaluation.front.api import Evaluator
from kernelbench_rl.evaluation.cluster.cluster_spec import DASK_LOCAL, LOCAL, ClusterSpec, parse_cluster
from kernelbench_rl.evaluation.front.pool import READY_TIMEOUT_S
from kernelbench_rl.evaluation.result import EvalSettings

log = logging.getLogger("kernelbench_rl.evaluation.dask")

CONNECT_TIMEOUT_S = 10.0
# Dask re-runs a task whose worker was lost this many times before giving up on it (then: infra).
TASK_RETRIES = 2


def make_evaluator(settings: EvalSettings | None = None, cluster: str | None = LOCAL, **kwargs: Any) -> Evaluator:
    """The evaluator `cluster` asks for: the local pool, or a Dask-backed one with the same interface."""
    spec = parse_cluster(cluster)
    if not spec.is_dask:
        return Evaluator(settings, **kwargs)
    return DaskEvaluator(settings, cluster=spec, **kwargs)


class DaskPool:
    """`WorkerPool`'s submit/wait_ready/close over a Dask cluster whose workers host the real pools."""

    def __init__(self, client: Any, plugin: Any, ready_timeout_s: float = READY_TIMEOUT_S) -> None:
        self.client = client
        self.plugin = plugin
        self.closed = False
        self._queue: queue.Queue[tuple[dict[str, Any], float, Future, list[str] | None] | None] = queue.Queue()
        self._cond = threading.Condition()
        self._in_flight: dict[Any, Future] = {}  # the Dask futures we hold (dropping one cancels its task)
        self._slots = 0
        self._slots_at = 0.0
        self._pin = threading.local()  # see pinned()
        self.ready_timeout_s = ready_timeout_s
        self._feeder = threading.Thread(target=self._feed, daemon=True, name="kbrl-dask-feeder")
        self._feeder.start()

    # -- cluster state ---------------------------------------------------------------------------
    def statuses(self) -> dict[str, dict[str, Any]]:
        from kernelbench_rl.evaluation.cluster.dask_worker import pool_status

        return self.client.run(pool_status, self.plugin.name, on_error="return")

    def wait_ready(self, timeout_s: float | None = None) -> list[dict[str, Any]]:
        """Wait until every worker's pool has started or failed; at least one must be ready.

        Returns the ready pools' infos (`hardware` first); raises UserError, with each worker's reason,
        when none could start."""
        deadline = time.monotonic() + (timeout_s or self.ready_timeout_s)
        statuses: dict[str, Any] = {}
        while time.monotonic() < deadline:
            statuses = {a: s for a, s in self.statuses().items() if isinstance(s, dict)}
            settled = statuses and all(s["state"] in ("ready", "failed") for s in statuses.values())
            if settled:
                break
            time.sleep(0.5)
        ready = [s for s in statuses.values() if s["state"] == "ready"]
        for address, status in statuses.items():
            if status["state"] == "failed":
                log.warning("Dask worker %s takes no evaluations: its pool could not start (%s)", address, status["error"])
        if not ready:
            reasons = "; ".join(f"{a}: {s['error'] or s['state']}" for a, s in sorted(statuses.items()))
            raise UserError(f"No Dask worker could start an evaluation pool ({reasons or 'the cluster has no workers'}).")
        self._slots = sum(int(s["slots"]) for s in ready)
        self._slots_at = time.monotonic()
        return [{"hardware": s["hardware"]} for s in ready]

    def window(self) -> int:
        """Requests held by the scheduler at once: twice the cluster's evaluation slots (refreshed as it changes)."""
        if time.monotonic() - self._slots_at > 5.0:
            try:
                info = self.client.scheduler_info(n_workers=-1)
                self._slots = int(sum(w.get("resources", {}).get(self.plugin.resource, 0)
                                      for w in info.get("workers", {}).values()))
            except Exception:  # noqa: BLE001 - keep the last known figure
                pass
            self._slots_at = time.monotonic()
        return max(2, 2 * self._slots)

    # -- requests --------------------------------------------------------------------------------
    @contextmanager
    def pinned(self, workers: list[str]) -> Iterator[None]:
        """Requests submitted from this thread inside the block run only on these workers (to warm a pool)."""
        self._pin.workers = list(workers)
        try:
            yield
        finally:
            self._pin.workers = None

    def submit(self, payload: dict[str, Any], timeout_s: float) -> Future:
        if self.closed:
            raise RuntimeError("the evaluator is closed")
        future: Future = Future()
        self._queue.put((payload, timeout_s, future, getattr(self._pin, "workers", None)))
        return future

    def _feed(self) -> None:
        from kernelbench_rl.evaluation.cluster.dask_worker import evaluate_on_worker

        while True:
            item = self._queue.get()
            if item is None:
                return
            payload, timeout_s, answer, only_on = item
            with self._cond:
                while not self.closed and len(self._in_flight) >= self.window():
                    self._cond.wait(1.0)
                if self.closed:
                    _answer_once(answer, {"infra": "the evaluator was closed"})
                    continue
            try:
                task = self.client.submit(evaluate_on_worker, payload, timeout_s, self.plugin.name, pure=False,
                                          resources={self.plugin.resource: 1}, retries=TASK_RETRIES,
                                          workers=only_on, allow_other_workers=False,
                                          key=f"kbrl-eval-{str(payload.get('problem_id', '')).replace('/', '_')}-{os.urandom(6).hex()}")
            except Exception as exc:  # noqa: BLE001 - the client lost its scheduler
                _answer_once(answer, {"infra": f"could not submit to the Dask scheduler: {exc}"[:500]})
                continue
            with self._cond:
                self._in_flight[task] = answer
            task.add_done_callback(self._finished)

    def _finished(self, task: Any) -> None:
        with self._cond:
            answer = self._in_flight.pop(task, None)
            self._cond.notify_all()
        if answer is None:
            return
        try:
            if task.status == "finished":
                result = task.result()
            elif task.status == "cancelled":
                result = {"infra": "the Dask task was cancelled (scheduler lost or evaluator closed)"}
            else:
                exc = task.exception()
                result = {"infra": f"Dask worker lost or failed: {type(exc).__name__}: {exc}"[:500]}
        except Exception as exc:  # noqa: BLE001
            result = {"infra": f"Dask task failed: {type(exc).__name__}: {exc}"[:500]}
        _answer_once(answer, result)

    def cancel_pending(self, reason: str = "the caller stopped waiting") -> int:
        """Answer every request not finished yet as infra and cancel its Dask task; the pool stays usable.

        Returns how many were cancelled. Evaluations already running on a worker finish there unseen."""
        drained = []
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is None:
                self._queue.put(None)
                break
            drained.append(item[2])
        with self._cond:
            pending = list(self._in_flight.items())
            self._in_flight.clear()
            self._cond.notify_all()
        self._cancel([task for task, _ in pending])
        drained.extend(answer for _, answer in pending)
        for answer in drained:
            _answer_once(answer, {"infra": reason})
        return len(drained)

    def _cancel(self, tasks: list[Any]) -> None:
        if tasks:
            try:
                self.client.cancel(tasks)  # one call to the scheduler for all of them
            except Exception:  # noqa: BLE001 - a scheduler already gone has nothing to cancel
                pass

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._queue.put(None)
        with self._cond:
            pending = list(self._in_flight.items())
            self._in_flight.clear()
            self._cond.notify_all()
        self._cancel([task for task, _ in pending])
        for _, answer in pending:
            _answer_once(answer, {"infra": "the evaluator was closed"})
        while True:  # requests still queued here
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                _answer_once(item[2], {"infra": "the evaluator was closed"})


def _answer_once(future: Future, answer: dict[str, Any]) -> None:
    if not future.done():
        try:
            future.set_result(answer)
        except Exception:  # noqa: BLE001 - set concurrently: the first answer stands
            pass


class DaskEvaluator(Evaluator):
    """`Evaluator` whose kernels run on a Dask cluster; cache, static checks and DuckDB stay here."""

    def __init__(self, settings: EvalSettings | None = None, *, cluster: ClusterSpec | str = DASK_LOCAL,
                 dask_workers: int | None = None, connect_timeout_s: float = CONNECT_TIMEOUT_S,
                 ready_timeout_s: float = READY_TIMEOUT_S, **kwargs: Any) -> None:
        parallel, in_flight, warm = (kwargs.pop(k, None) for k in ("parallel_compiles", "in_flight", "warm_children"))
        super().__init__(settings, **kwargs)
        self.cluster = parse_cluster(cluster) if isinstance(cluster, str) else cluster
        if not self.cluster.is_dask:
            raise ValueError("DaskEvaluator needs a Dask cluster; use Evaluator for eval.cluster=local")
        self.dask_workers = dask_workers or self.num_workers
        self.connect_timeout_s = connect_timeout_s
        self.ready_timeout_s = ready_timeout_s
        # Unset sizes are worked out by each worker on its own host (see dask_worker.EvalPoolPlugin).
        self._pool_sizes = {"parallel_compiles": parallel, "in_flight": in_flight, "warm_children": warm}
        self._client: Any = None
        self._local_cluster: Any = None
        self._dask_pool: DaskPool | None = None
        self.plugin: Any = None  # the workers' pool plugin, once registered

    @property
    def address(self) -> str:
        return self._client.scheduler.address if self._client is not None else self.cluster.address

    @property
    def client(self) -> Any:
        return self._client

    @property
    def pool(self) -> DaskPool:  # type: ignore[override]
        with self._pool_lock:
            if self._dask_pool is None:
                self._dask_pool = self._connect()
                infos = self._dask_pool.wait_ready(self.ready_timeout_s)
                self._hardware = str(infos[0].get("hardware", "")) if infos else ""
            return self._dask_pool

    def _baseline_for(self, problem: Any, settings: EvalSettings) -> dict[str, Any] | None:
        # Tagged with the hardware it was looked up for: a worker on another GPU model ignores it.
        baseline = super()._baseline_for(problem, settings)
        return {**baseline, "hardware": self._hardware} if baseline else None

    def start(self) -> DaskEvaluator:
        _ = self.pool
        return self

    def _connect(self) -> DaskPool:
        try:
            from distributed import Client
        except ImportError as exc:
            raise UserError("eval.cluster on Dask needs dask and distributed: pip install 'dask[distributed]'.") from exc
        from kernelbench_rl.evaluation.cluster.dask_worker import EvalPoolPlugin

        if self.cluster.kind == DASK_LOCAL:
            address = _surrounding_scheduler() or ""
            if address:  # already on a Dask worker (a Prefect task on DaskTaskRunner): use that cluster
                self._client = self._open_client(address)
            else:
                self._local_cluster = start_local_cluster(self.settings.device, self.dask_workers)
                self._client = self._open_client(self._local_cluster.scheduler_address)
        else:
            self._client = self._open_client(self.cluster.address)
        plugin = self.plugin = EvalPoolPlugin(self.settings.device, worker_args=self.worker_args, **self._pool_sizes)
        # One registration per pool shape; a second evaluator on the same cluster reuses the warm pools.
        registered = self._client.run_on_scheduler(_plugin_names)
        if plugin.name not in registered:
            self._client.register_plugin(plugin, name=plugin.name)
        return DaskPool(self._client, plugin, self.ready_timeout_s)

    def _open_client(self, address: str) -> Any:
        from distributed import Client

        try:
            return Client(address, timeout=self.connect_timeout_s, set_as_default=False)
        except (OSError, TimeoutError) as exc:
            raise UserError(f"Could not reach the Dask scheduler at {address} within {self.connect_timeout_s:.0f} s; "
                            "start it (dask scheduler) or fix eval.cluster / --cluster.") from exc

    def close(self) -> None:
        if self._dask_pool is not None:
            self._dask_pool.close()
            self._dask_pool = None
        if self._client is not None:
            try:
                self._client.close(timeout=10)
            except Exception:  # noqa: BLE001 - a scheduler already gone
                pass
            self._client = None
        if self._local_cluster is not None:
            try:
                self._local_cluster.close(timeout=30)
            except Exception:  # noqa: BLE001
                pass
            self._local_cluster = None


def _plugin_names(dask_scheduler: Any = None) -> list[str]:
    return list(getattr(dask_scheduler, "worker_plugins", {}) or {})


def _surrounding_scheduler() -> str | None:
    try:
        from distributed import get_worker

        return get_worker().scheduler.address
    except (ImportError, ValueError):
        return None


def local_gpu_count() -> int:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip()])
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:  # noqa: BLE001
        return 0


def start_local_cluster(device: str, n_workers: int | None = None) -> Any:
    """`dask-local`: one dask-cuda worker per GPU when evaluating on GPUs, else CPU workers.

    Workers get as many threads as their pools hold evaluations (a thread waits on each); the
    dashboard is off (it needs bokeh, and nobody looks at a throwaway cluster's)."""
    gpus = local_gpu_count() if device == "cuda" else 0
    if gpus:
        try:
            from dask_cuda import LocalCUDACluster
        except ImportError as exc:
            raise UserError("eval.cluster=dask-local on GPUs needs dask-cuda: pip install 'kernelbench-rl[cluster-gpu]'.") from exc
        # No memory limit: the pools' processes hold the memory, and Dask must not pause a worker for theirs.
        return LocalCUDACluster(n_workers=n_workers or gpus, threads_per_worker=32, dashboard_address=None, memory_limit=0)
    from distributed import LocalCluster

    cores = os.cpu_count() or 2
    return LocalCluster(n_workers=n_workers or max(1, min(4, cores // 2)), threads_per_worker=8,
                        processes=True, dashboard_address=None, memory_limit=0)
