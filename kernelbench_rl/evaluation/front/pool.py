"""Orchestrator side: a pool of long-lived evaluation workers (one per GPU; one on the CPU).

Each worker is `python -m kernelbench_rl.evaluation.worker.boot` (the worker's entry point: it decides the
uid and starts the zygote before the worker's imports) started with a scrubbed environment
and spoken to in JSON lines. A worker that dies (or hangs past a watchdog) is replaced and each of
its in-flight requests is retried once, then answered as ErrorCategory.INFRA: a lost worker is
never the kernel's fault. A worker whose reference phase runs past its budget is killed on purpose
(reference_budget.py): that problem's requests get a no-verdict answer, the others run again freely.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
import weakref
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from kernelbench_rl.evaluation.worker import reference_budget, startup, tempdirs
from kernelbench_rl.evaluation import host_share
from kernelbench_rl.evaluation.sandbox.sandbox import scrubbed_env

PACKAGE_PARENT = startup.PACKAGE_PARENT
MAX_ATTEMPTS = 2  # the first try and one retry
READY_TIMEOUT_S = 180.0
STOP_GRACE_S = 10.0  # a closing pool's wait for each worker's orderly stop before it kills the worker


@dataclass
class _Job:
    tag: int
    payload: dict[str, Any]
    future: Future
    deadline_s: float
    attempts: int = 0
    sent_at: float = 0.0
    problem_key: str = ""  # reference_budget.problem_key of its payload
    reference_phase: str = ""  # the reference phase the worker runs for it now ('' when none)
    phase_started: float = 0.0


class WorkerProcess:
    """One worker subprocess plus the thread that reads its answers."""

    def __init__(self, slot: _Slot, device: str, args: list[str], env: dict[str, str], log_path: str) -> None:
        self.slot = slot
        self.log = open(log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kernelbench_rl.evaluation.worker.boot", "--device", device, *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, env=env, cwd=PACKAGE_PARENT,
            start_new_session=True,
        )
        self.ready = threading.Event()
        self.info: dict[str, Any] = {}
        # The worker's "warm" event: what its start left for after ready (its phases), once that is done too.
        self.warm = threading.Event()
        self.warm_info: dict[str, Any] = {}
        self.failed = ""
        self.dead = False
        self.killed_for_reference = False  # killed by the pool for a reference past its budget, not lost
        self.reader = threading.Thread(target=self._read, name=f"kbrl-eval-reader-{self.proc.pid}", daemon=True)
        self.reader.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            try:
                message = json.loads(raw)
            except ValueError:
                continue
            if message.get("event") == "ready":
                self.info = message
                self.ready.set()
            elif message.get("event") == "warm":
                self.warm_info = message
                self.warm.set()
            elif message.get("event") == "failed":
                self.failed = str(message.get("error", "worker failed to start"))
                self.ready.set()
            elif message.get("event") == "reference":
                self.slot.reference_phase(message)
            elif "id" in message:
                self.slot.answered(self, message)
        self.dead = True
        self.ready.set()
        self.proc.wait()
        self.slot.died(self)

    def send(self, job: _Job, backlog: int) -> None:
        """The request, and how many more wait behind it here (what the worker pre-starts children for)."""
        assert self.proc.stdin is not None
        line = json.dumps({"id": job.tag, "request": job.payload, "backlog": backlog}) + "\n"
        self.proc.stdin.write(line.encode())
        self.proc.stdin.flush()

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, 9)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.kill()
        except ProcessLookupError:
            pass

    def ask_to_stop(self) -> None:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(b'{"cmd": "shutdown"}\n')
            self.proc.stdin.flush()
            self.proc.stdin.close()
        except (OSError, ValueError):
            pass

    def wait_stopped(self) -> bool:
        """After ask_to_stop: wait for the orderly stop (STOP_GRACE_S), kill what is left. False when it had to be
        killed: then its root is still on disk (a worker removes its own only when it stops in order)."""
        try:
            self.proc.wait(timeout=STOP_GRACE_S)
            stopped = True
        except subprocess.TimeoutExpired:
            stopped = False
        self.kill()
        if not stopped:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10.0)  # reaped, so a sweep sees its owner gone
        self.log.close()
        return stopped


@dataclass
class _Slot:
    """One worker position (a GPU): owns the current process and its in-flight jobs."""

    pool: WorkerPool
    index: int
    env: dict[str, str]
    capacity: threading.Semaphore
    inflight: dict[int, _Job] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    worker: WorkerProcess | None = None
    restarts: int = 0
    last_failure: str = ""  # why the last worker process ended (a worker that could not start says why)

    def start(self) -> WorkerProcess:
        log = os.path.join(self.pool.log_dir, f"worker{self.index}.log")
        self.worker = WorkerProcess(self, self.pool.device, self.pool.worker_args, self.env, log)
        return self.worker

    def answered(self, worker: WorkerProcess, message: dict[str, Any]) -> None:
        with self.lock:
            job = self.inflight.pop(int(message["id"]), None)
        if job is None:
            return
        self.capacity.release()
        if "error" in message:
            self.pool.retry_or_fail(job, f"worker error: {message['error']}")
        else:
            job.future.set_result(message)

    def reference_phase(self, message: dict[str, Any]) -> None:
        """The worker started (or ended) a reference phase for a request: the watchdog bounds it."""
        tag = message.get("id")
        with self.lock:
            job = self.inflight.get(tag) if isinstance(tag, int) else None
            if job is not None:
                job.reference_phase = str(message.get("phase") or "")
                job.phase_started = time.monotonic()

    def died(self, worker: WorkerProcess) -> None:
        with self.lock:
            if worker is not self.worker:
                return
            orphans = list(self.inflight.values())
            self.inflight.clear()
            self.worker = None
        for _ in orphans:
            self.capacity.release()
        if not self.pool.closed:
            tempdirs.sweep_stale()  # the dead worker's root (its candidates' folders)
            if not worker.killed_for_reference:  # a kill of ours is no sign of a failing worker
                self.restarts += 1
            if self.restarts <= self.pool.max_restarts:
                self.start()
        reason = worker.failed or f"evaluation worker (pid {worker.pid}) exited with status {worker.proc.returncode}"
        self.last_failure = reason
        for job in orphans:
            if self.pool.answer_if_too_slow(job, worker.info):
                continue
            if worker.killed_for_reference and not self.pool.closed:
                self.pool.jobs.put(job)  # not at fault: another problem's reference was too slow; no retry spent
            else:
                self.pool.retry_or_fail(job, reason)

    def dispatch_loop(self) -> None:
        while True:
            self.capacity.acquire()
            job = self.pool.jobs.get()
            if job is None:
                self.pool.jobs.put(None)  # let the other slots see it too
                return
            current = self.worker
            if self.pool.answer_if_too_slow(job, current.info if current is not None else {}):
                self.capacity.release()
                continue
            with self.lock:
                worker = self.worker
                if worker is None or worker.dead:
                    worker = None
                else:
                    job.sent_at = time.monotonic()
                    job.reference_phase = ""
                    self.inflight[job.tag] = job
            if worker is None:
                self.capacity.release()
                if self.restarts > self.pool.max_restarts:
                    self.pool.retry_or_fail(job, "the evaluation worker keeps dying; giving up on it", final=True)
                else:
                    self.pool.jobs.put(job)
                    time.sleep(0.2)
                continue
            try:
                worker.send(job, self.pool.jobs.qsize())
            except (BrokenPipeError, OSError, ValueError):
                pass  # the reader sees the death and retries the in-flight job


class WorkerPool:
    """Submit worker payloads, get futures of the worker's answers ({"result", "baseline"})."""

    def __init__(
        self,
        device: str = "cpu",
        num_workers: int | None = None,
        *,
        parallel_compiles: int = 2,
        warm_children: int = 1,
        in_flight: int | None = None,
        worker_args: list[str] | None = None,
        max_restarts: int = 5,
        watchdog_slack_s: float = 120.0,
        host_slots: tuple[int, int] | None = None,
    ) -> None:
        """`host_slots`: (the position of this pool's first worker among the workers on this host, how many there are),
        for the share of the host's cores each worker takes (host_share.py); default: this pool's workers are
        the host's, or what KBRL_EVAL_HOST_SHARE says of a one-worker pool."""
        self.device = device
        self.num_workers = num_workers or _default_worker_count(device)
        in_flight = in_flight or parallel_compiles + 1
        # The shape its workers start with (an Evaluator borrowing this pool reads it here), then their command line.
        self.parallel_compiles, self.warm_children, self.in_flight = parallel_compiles, warm_children, in_flight
        self.extra_worker_args = list(worker_args or [])
        self.worker_args = ["--parallel", str(parallel_compiles), "--warm-children", str(warm_children),
                            "--in-flight", str(in_flight), *self.extra_worker_args]
        self.max_restarts = max_restarts
        self.watchdog_slack_s = watchdog_slack_s
        self.closed = False
        self.jobs: queue.Queue[_Job | None] = queue.Queue()
        # Problems whose reference ran past its budget here (reference_budget.problem_key -> the answer's message).
        self.too_slow: dict[str, str] = {}
        self._tags = itertools.count()
        tempdirs.sweep_stale()  # folders of pools and workers that were killed before they could clean up
        self.home = tempdirs.owned_tempdir("home")
        # Removed by close(), or at the interpreter's exit for a pool never closed.
        self._remove_home = weakref.finalize(self, shutil.rmtree, self.home, ignore_errors=True)
        self.log_dir = self.home
        self.slots: list[_Slot] = []
        devices = _worker_devices(self.num_workers) if device == "cuda" else []
        first, on_host = host_slots or _host_slots(self.num_workers)
        for index in range(self.num_workers):
            overrides = {"HOME": self.home, "PYTHONUNBUFFERED": "1", "PYTHONPATH": startup.package_pythonpath()}
            if device == "cuda":
                overrides.update(slot_environment(index, devices, first, on_host))
            slot = _Slot(self, index, scrubbed_env(**overrides), threading.Semaphore(in_flight))
            slot.start()
            self.slots.append(slot)
        self._threads = [threading.Thread(target=s.dispatch_loop, daemon=True, name=f"kbrl-eval-dispatch-{s.index}")
                         for s in self.slots]
        self._threads.append(threading.Thread(target=self._watchdog, daemon=True, name="kbrl-eval-watchdog"))
        for thread in self._threads:
            thread.start()

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> list[dict[str, Any]]:
        infos = []
        for slot in self.slots:
            worker = slot.worker
            if worker is not None:
                worker.ready.wait(timeout_s)
                infos.append(worker.info)
        return infos

    @property
    def worker_pids(self) -> list[int]:
        return [s.worker.pid for s in self.slots if s.worker is not None]

    def submit(self, payload: dict[str, Any], timeout_s: float) -> Future:
        if self.closed:
            raise RuntimeError("the worker pool is closed")
        future: Future = Future()
        self.jobs.put(_Job(next(self._tags), payload, future, deadline_s=3 * timeout_s + self.watchdog_slack_s,
                           problem_key=reference_budget.problem_key(payload)))
        return future

    def answer_if_too_slow(self, job: _Job, worker_info: dict[str, Any]) -> bool:
        """A request of a problem whose reference was found too slow gets its no-verdict answer now."""
        message = self.too_slow.get(job.problem_key)
        if message is None:
            return False
        if not job.future.done():
            job.future.set_result(reference_budget.too_slow_answer(job.payload, message,
                                                                   str(worker_info.get("hardware", ""))))
        return True

    def retry_or_fail(self, job: _Job, reason: str, final: bool = False) -> None:
        job.attempts += 1
        if final or job.attempts >= MAX_ATTEMPTS or self.closed:
            if not job.future.done():
                job.future.set_result({"infra": reason})
        else:
            self.jobs.put(job)

    def _watchdog(self) -> None:
        """A worker that sits on a request far past its timeout is killed (and so replaced); so is one whose
        reference phase runs past its budget, and that problem is remembered as too slow."""
        while not self.closed:
            time.sleep(1.0)
            now = time.monotonic()
            for slot in self.slots:
                with slot.lock:
                    late = any(now - j.sent_at > j.deadline_s for j in slot.inflight.values())
                    slow = next((j for j in slot.inflight.values() if j.reference_phase
                                 and now - j.phase_started > reference_budget.budget_of(j.payload)), None)
                    worker = slot.worker
                if worker is None:
                    continue
                if slow is not None:
                    self.too_slow.setdefault(slow.problem_key, reference_budget.over_budget_message(
                        slow.reference_phase, now - slow.phase_started, reference_budget.budget_of(slow.payload),
                        str(worker.info.get("hardware", ""))))
                    worker.killed_for_reference = True
                    worker.kill()
                elif late:
                    worker.kill()

    def close(self, wait: bool = True) -> None:
        """Stop every worker. `wait=False` asks them and returns at once, for a process's last step: each worker
        stops on its own (its stdin closed: it kills its children, whose CUDA contexts then go, and exits within
        its stop grace), while this process exits. A pool started next in this process would find the device
        memory still held meanwhile, hence the default."""
        if self.closed:
            return
        self.closed = True
        self.jobs.put(None)
        workers = [slot.worker for slot in self.slots if slot.worker is not None]
        for worker in workers:  # every worker stops at once (each tears its children down), then each is waited for
            worker.ask_to_stop()
        stopped_in_order = [worker.wait_stopped() for worker in workers] if wait else []  # each one waited for
        if not all(stopped_in_order):  # a worker past its stop grace left its root (its candidates' folders): swept
            tempdirs.sweep_stale()
        for slot in self.slots:
            for job in list(slot.inflight.values()):
                if not job.future.done():
                    job.future.set_result({"infra": "the evaluator was closed"})
        self._remove_home()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def slot_environment(index: int, devices: list[str], first: int, on_host: int) -> dict[str, str]:
    """What worker `index` of a GPU pool gets in its environment: its own GPU (one of `devices`, in turn) and its share of
    the host's cores (position first + index of on_host)."""
    return {"CUDA_VISIBLE_DEVICES": devices[index % len(devices)],
            host_share.HOST_SHARE_ENV: f"{(first + index) % max(1, on_host)}/{max(1, on_host)}"}


def _worker_devices(num_workers: int) -> list[str]:
    """The GPUs a pool's workers take in turn: CUDA_VISIBLE_DEVICES's entries, else the host's (one a worker up to
    their number)."""
    visible = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    if visible:
        return visible
    return [str(i) for i in range(cuda_device_count() or num_workers)]


def _host_slots(num_workers: int) -> tuple[int, int]:
    """(first position, workers on the host) for a pool told nothing: KBRL_EVAL_HOST_SHARE for a pool of one worker
    (one of several evaluators started by hand on one host), else this pool's workers are the host's."""
    position, count = host_share.host_share()
    if num_workers == 1 and count > 1:
        return position, count
    return 0, num_workers


def default_parallel_compiles(device: str, num_workers: int | None = None) -> int:
    """Children compiling at once per worker: half the CPU cores a worker's share has, 2 to 12.

    Triton's JIT and nvcc are CPU-bound and single-threaded per candidate; the other half of the cores
    goes to ptxas subprocesses, the worker itself and candidates that spin. On the CPU, children also
    run the interpreter, so two is enough there.
    """
    if device != "cuda":
        return 2
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 4
    per_worker = cores // max(1, num_workers or _default_worker_count(device))
    return max(2, min(12, per_worker // 2))


def pool_shape(device: str, num_workers: int | None = None, parallel_compiles: int | None = None,
               in_flight: int | None = None, warm_children: int | None = None) -> tuple[int, int, int]:
    """(parallel compiles, evaluations in flight, warm children) per worker, defaults filled in.

    Shared by the local evaluator and the Dask workers' pools, which size themselves on their own host.
    """
    # Children loading/compiling at once per worker (the exclusive GPU section is separate).
    parallel = parallel_compiles or default_parallel_compiles(device, num_workers)
    # Evaluations under way at once per worker. On a GPU most of them wait for the exclusive device
    # section, holding a child but no CPU: twice the compile slots keeps the CPU compiling while
    # the device is busy, and starts a late hang's timeout clock early. (On the CPU, children
    # compute beside each other, so one beyond the compile slots is enough.)
    in_flight = in_flight or (2 * parallel + 1 if device == "cuda" else parallel + 1)
    # Pre-started children (CUDA context ready) so a burst of requests does not wait on CUDA init.
    # About one per evaluation under way: a child taken now replaces itself at the back of the queue,
    # and with fewer that replacement was taken again before its CUDA init (1-2 s while eight others
    # compile) had finished. On the H100 that wait was 1.0 s of the 1.6 s latency overhead.
    warm = warm_children if warm_children is not None else (in_flight + 1 if device == "cuda" else 1)
    return parallel, in_flight, warm


def _default_worker_count(device: str) -> int:
    if device != "cuda":
        return 1
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        return len([d for d in visible.split(",") if d.strip()])
    return max(1, cuda_device_count())


def cuda_device_count() -> int:
    """The CUDA devices this process sees, from the driver itself (what torch.cuda.device_count asks, without
    importing torch: seconds of an orchestrator's start that needs torch for nothing else). 0 without a driver."""
    import ctypes

    for name in ("libcuda.so.1", "libcuda.so"):
        try:
            driver = ctypes.CDLL(name)
            break
        except OSError:
            continue
    else:
        return 0
    count = ctypes.c_int(0)
    try:
        if driver.cuInit(0) != 0 or driver.cuDeviceGetCount(ctypes.byref(count)) != 0:
            return 0
    except AttributeError:
        return 0
    return max(0, count.value)
