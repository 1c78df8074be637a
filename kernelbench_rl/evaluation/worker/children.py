"""The worker's candidate processes: starting, handing out, retiring and reaping them, and talking to one.

Every candidate runs in a fresh child forked from a zygote (a forkserver that imported torch and triton
but never initialised CUDA), pre-started so one is ready when a request comes. A child that served a
job is killed; a reaper thread waits for it and removes its directory off the evaluation's path. The
child's side of the conversation is child.py.
"""

from __future__ import annotations

import collections
import contextlib
import multiprocessing
import os
import queue
import shutil
import signal
import sys
import threading
import time
import traceback
from typing import Any

import torch

from kernelbench_rl.evaluation import trace
from kernelbench_rl.evaluation.sandbox import sandbox, wire
from kernelbench_rl.evaluation.verdict import faults
from kernelbench_rl.evaluation.worker import leftovers, scheduling, startup
from kernelbench_rl.evaluation.worker import memory as footprints
from kernelbench_rl.evaluation.sandbox.child import READY_EVENT, child_main
from kernelbench_rl.evaluation.verdict.faults import Fault
from kernelbench_rl.evaluation.result import ErrorCategory, Flag

# Children may read our package (they run its code), never the rest of the checkout around it.
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
START_TIMEOUT_S = 60.0


def _switched_on(name: str) -> bool:
    """A switch that is on unless its environment variable says 0, off, no or false."""
    return os.environ.get(name, "on").strip().lower() not in ("0", "off", "no", "false")


def _concurrent_starts() -> int:
    text = os.environ.get("KBRL_EVAL_CHILD_STARTS", "2").strip()
    return max(0, int(text)) if text.isdigit() else 2


# Pre-started children starting CUDA at once (KBRL_EVAL_CHILD_STARTS; 0: all at once). The driver creates contexts
# about one at a time (0.25 s each on an H200 beside a pool's start): a pool's 18 started together were all ready only
# after 3-4 s, and a cold folder's first candidates waited that long for theirs. Paced, the first are ready in a
# fraction of a second and the rest follow in order.
CONCURRENT_STARTS = _concurrent_starts()
# Whether a pre-start waits for the timing under way (or waiting) to end before it begins (a context's creation beside a
# timed trial spread its calls, and the pairing that follows costs a second); one already starting is not waited for.
STARTS_YIELD = _switched_on("KBRL_EVAL_CHILD_STARTS_YIELD")
STARTS_YIELD_MAX_S = 5.0  # beside a long run of timings the pool still fills
# A child slower than this to start (from its fork: the zygote's own start, seconds under load, does not count) no
# longer holds the next one back.
PACING_WAIT_S = 10.0
# Children an evaluation takes at most: its candidate's and, on a GPU, its reference's (a baseline or a side-by-side
# timing in a child of its own; a resident one is reused, so this is an upper bound).
CHILDREN_PER_JOB = 2
SPARE_CHILDREN = 1  # beyond what the evaluations in hand and queued can take: a retry's, a late arrival's
IDLE_REFILL_S = 2.0  # with no evaluation in hand this long, the pool fills up again for the next batch


# Whether the pool pre-starts only what the evaluations in hand and queued can take (KBRL_EVAL_CHILD_DEMAND). A cold
# folder of 8 problems made about 18 contexts it never used, most of them while its sections timed; a context's
# creation beside a timed trial spreads its calls.
DEMAND_AWARE = _switched_on("KBRL_EVAL_CHILD_DEMAND")


def _started(starting: list[Child]) -> list[Child]:
    """Those of `starting` still starting (each for at most PACING_WAIT_S from its spawn); the others are traced."""
    now = time.perf_counter()
    still = []
    for child in starting:
        if child.starting() and now - child.started_at - child.spawn_s < PACING_WAIT_S:
            still.append(child)
        else:
            trace.record("prestart", "child_start", child.started_at, now, pid=child.pid)
    return still


class Demand:
    """What one evaluation may still take from the pool (see ChildPool.job_arrived)."""

    def __init__(self) -> None:
        self.children_left = CHILDREN_PER_JOB
        self.closed = False


class WorkerStopping(Exception):
    """The orchestrator is gone; no new child may start."""


class Child:
    """One forked sandbox process and its message pipe."""

    def __init__(self, ctx: Any, device: str) -> None:
        self.conn, child_conn = ctx.Pipe(duplex=True)
        self.started_at = time.perf_counter()
        self.rss_limit_mb: float | None = None
        self.device_memory_cap: int | None = None  # the device-memory budget the worker gave it (its job)
        self.workdir = ""
        self.trace_who = ""  # the evaluation it serves, in the trace (trace.py)
        self.announced = False  # its first message was read: its start (and CUDA's) is over
        self.process = ctx.Process(target=child_main, args=(child_conn, device), daemon=False)
        self.process.start()
        child_conn.close()
        self.spawn_s = time.perf_counter() - self.started_at

    @property
    def pid(self) -> int:
        return int(self.process.pid)

    def starting(self) -> bool:
        """Still starting: alive, and nothing from it yet (its first message says its CUDA context is up)."""
        if self.announced:
            return False
        try:
            if self.conn.poll(0):  # (not read here: whoever serves the child reads it)
                return False
        except (EOFError, OSError):
            return False
        return self.process.is_alive()

    def kill(self) -> None:
        self.signal_kill()
        self.reap()

    def signal_kill(self) -> None:
        for kill in (lambda: os.killpg(self.pid, signal.SIGKILL), lambda: os.kill(self.pid, signal.SIGKILL)):
            try:
                kill()
            except (ProcessLookupError, PermissionError, OSError):
                pass

    def reap(self) -> None:
        """Wait for a killed child to exit (a CUDA context takes ~0.1 s to tear down) and close its pipe."""
        self.process.join(timeout=5)
        self.conn.close()

    def rss_mb(self) -> float:
        try:
            with open(f"/proc/{self.pid}/status") as handle:
                for line in handle:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) / 1024.0
        except (OSError, ValueError):
            pass
        return 0.0


class ChildPool:
    """The worker's children: pre-started ones (`warm`), those serving a job (`running`), those being reaped."""

    def __init__(self, device: str, warm_children: int, busy_cores: set[int]) -> None:
        self.device = device
        self.warm_children = warm_children
        self.busy_cores = busy_cores  # where children compile (scheduling.core_split)
        self.ctx = multiprocessing.get_context("forkserver")
        self.ctx.set_forkserver_preload(startup.ZYGOTE_PRELOAD)
        # Killed children are reaped and their directories removed off the evaluation's path: the result
        # goes back while the driver tears the CUDA context down.
        self.reaping: queue.Queue[tuple[Child | None, str | set[int]]] = queue.Queue()  # (a folder, or dead pids)
        self.reaper = threading.Thread(target=self._reap_loop, daemon=True, name="kbrl-reaper")
        self.reaper.start()
        self.warm: collections.deque[Child] = collections.deque()
        self.warm_lock = threading.Lock()
        # What /dev/shm held before any child ran: never swept (children may write there only on a GPU with CUDA IPC).
        self.shared_memory_before = leftovers.shared_memory_entries() if device == "cuda" else set()
        self.children_uid = sandbox.unprivileged_uid() if os.geteuid() == 0 else os.getuid()
        self.running: set[Child] = set()  # children serving a job (killed at once if the orchestrator goes)
        self.stopping = False
        self.closed = False  # shut down: no child is pre-started from now on
        self.filling = False  # the start's background fill is under way (fill_in_background)
        self.making_room = 0  # big evaluations under way: no pre-started child is spawned meanwhile
        # What the evaluations in hand may still take, and how many more the orchestrator has queued (None: it does
        # not say, and the pool keeps `warm_children` ready). Guarded by warm_lock.
        self.jobs_in_hand = 0
        self.children_wanted = 0
        self.backlog: int | None = None
        self.idle_since = time.monotonic()

    def wanted(self) -> int:
        """Pre-started children to keep: `warm_children`, fewer while the evaluations in hand and queued cannot take
        that many. With none in hand the next batch's size is unknown: all of them."""
        with self.warm_lock:
            return self._wanted()

    def _wanted(self) -> int:
        if not DEMAND_AWARE or self.backlog is None or not self.jobs_in_hand:
            return self.warm_children
        return min(self.warm_children, self.children_wanted + CHILDREN_PER_JOB * self.backlog + SPARE_CHILDREN)

    def job_arrived(self, backlog: int | None) -> Demand:
        """An evaluation came in, `backlog` more queued behind it at the orchestrator (None: not said). Pass what this
        returns to `take`, and to `job_left` when the evaluation ends."""
        with self.warm_lock:
            self.jobs_in_hand += 1
            self.children_wanted += CHILDREN_PER_JOB
            self.backlog = max(0, int(backlog)) if isinstance(backlog, int) else None
        self._fill_if_short()  # a batch's first request may have said less than the rest will
        return Demand()

    def job_left(self, demand: Demand) -> None:
        with self.warm_lock:
            if demand.closed:
                return
            demand.closed = True
            self.jobs_in_hand -= 1
            self.children_wanted -= demand.children_left
            demand.children_left = 0
            idle = not self.jobs_in_hand
            if idle:
                self.idle_since = time.monotonic()
        if idle and DEMAND_AWARE and self.backlog is not None:
            timer = threading.Timer(IDLE_REFILL_S, self._refill_if_idle)
            timer.daemon = True
            timer.start()

    def _refill_if_idle(self) -> None:
        """Still nothing in hand: fill up for the next batch (a batch's first takes then find their children)."""
        with self.warm_lock:
            if self.jobs_in_hand or time.monotonic() - self.idle_since < IDLE_REFILL_S - 0.01:
                return
        self._fill_if_short()

    def _fill_if_short(self) -> None:
        """A paced fill, unless one is under way or the pool has what it wants. It does not wait for timings, as the
        start's fill does: beside a batch's run of timings, that held the pool short for seconds and its candidates
        waited for their children's CUDA starts (as a take's replacements never did)."""
        with self.warm_lock:
            if (self.filling or self.closed or self.stopping or self.making_room
                    or len(self.warm) >= self._wanted()):
                return
            self.filling = True  # under the lock: one fill at a time
        self.fill_in_background()

    def prestart(self, count: int | None = None) -> None:
        """Pre-start `count` children (all `warm_children` by default) now; returns once the zygote served them."""
        for _ in range(max(0, self.warm_children if count is None else count)):
            self.warm.append(self._spawn())

    def fill_in_background(self, phases: startup.Phases | None = None, phase: str = "",
                           gate: Any = None) -> threading.Thread:
        """Pre-start children up to `warm_children` off the worker's start (`take` spawns one itself if none is ready
        yet), CONCURRENT_STARTS starting CUDA at a time, each beginning when no timing holds `gate` (a
        scheduling.QuietGate). Stops when the pool stops, is shut down or makes room."""

        def stop() -> bool:
            return self.stopping or self.closed or bool(self.making_room)

        def fill() -> None:
            started = time.perf_counter()
            starting: list[Child] = []
            try:
                while True:
                    if CONCURRENT_STARTS > 0:
                        while len(starting := _started(starting)) >= CONCURRENT_STARTS:
                            if stop():
                                return
                            time.sleep(0.005)
                        if gate is not None and STARTS_YIELD:
                            gate.wait_for_no_timing(STARTS_YIELD_MAX_S)
                    with self.warm_lock:
                        if stop() or len(self.warm) >= self._wanted():
                            self.filling = False  # under the lock: a `take` from now on replaces its child itself
                            return
                        self.warm.append(self._spawn())
                        starting.append(self.warm[-1])
            except Exception:  # noqa: BLE001 - a child that cannot start now is started by `take`, or says why there
                traceback.print_exc(file=sys.stderr)
            finally:
                self.filling = False
                if phases is not None and phase:
                    phases.add(phase, started, time.perf_counter())

        self.filling = True
        thread = threading.Thread(target=fill, daemon=True, name="kbrl-prestart")
        try:
            thread.start()
        except BaseException:
            self.filling = False
            raise
        return thread

    def take(self, demand: Demand | None = None) -> Child:
        """A child for an evaluation (`demand`: what job_arrived returned for it, None when not counted)."""
        with self.warm_lock:
            if self.stopping:
                # The orchestrator is gone: a child started now would run its candidate with nobody to stop it
                # (kill_running has already swept `running`).
                raise WorkerStopping("the evaluation worker is stopping")
            child = None
            while self.warm:
                candidate = self.warm.popleft()
                if candidate.process.is_alive():
                    child = candidate
                    break
                candidate.kill()
            if child is None:
                child = self._spawn()
            if demand is not None and demand.children_left > 0:  # (none left once its evaluation has left)
                demand.children_left -= 1
                self.children_wanted -= 1
            # One replacement per child taken, and one more while the pool is short (after a big evaluation
            # drained it): a burst of 18 CUDA start-ups slowed every start and build beside it to seconds.
            # While the start's background fill runs, it replaces them (this job need not wait for spawns).
            if not self.making_room and not self.filling:
                for _ in range(min(2, self._wanted() - len(self.warm))):
                    self.warm.append(self._spawn())
            self.running.add(child)
        scheduling.pin(child.pid, self.busy_cores)
        return child

    def _spawn(self) -> Child:
        child = self._fork()
        # Its CUDA start (and, once taken, its compile) off the quiet cores, where a timing's thread runs.
        scheduling.pin(child.pid, self.busy_cores)
        return child

    def _fork(self) -> Child:
        try:
            return Child(self.ctx, self.device)
        except (EOFError, OSError, ConnectionError):
            # The forkserver is gone (a candidate may have broken it before its fds were closed): restart it.
            from multiprocessing import forkserver

            stop = getattr(forkserver._forkserver, "_stop", None)
            if stop is not None:
                try:
                    stop()
                except Exception:  # noqa: BLE001
                    pass
            return Child(self.ctx, self.device)

    def retire(self, child: Child, workdir: str) -> leftovers.Swept:
        """Kill a child that served a job, and every process it made (setsid or orphaned: leftovers.sweep), before
        this returns; the reaper waits for the child and removes its directory off this path. Returns what the
        sweep found besides the child itself: a kernel's forward has no business leaving processes behind."""
        swept = leftovers.sweep(child.pid)
        child.signal_kill()
        with self.warm_lock:
            self.running.discard(child)
            live = {other.pid for other in (*self.running, *self.warm)}
        if self.device == "cuda":
            leftovers.sweep_shared_memory(self.children_uid, self.shared_memory_before, live)
        self.reaping.put((child, workdir))
        if swept.pids:
            self.reaping.put((None, swept.pids))
        return swept

    def reap_later(self, child: Child | None, workdir: str) -> None:
        """Hand a killed child (or only a directory) to the reaper."""
        self.reaping.put((child, workdir))

    def kill_running(self) -> None:
        with self.warm_lock:
            # Set under the lock `take` holds: every child is either in `running` now or never started.
            self.stopping = True  # what the killed children's evaluations conclude is not a verdict
            running = list(self.running)
        for child in running:
            leftovers.sweep(child.pid)
            child.kill()

    def make_room(self, drain: bool) -> None:
        """For a big evaluation: with `drain`, kill the pre-started children and spawn none until `room_made`."""
        with self.warm_lock:
            self.making_room += drain
            drained = list(self.warm) if drain else []
            if drain:
                self.warm.clear()
        for child in drained:
            child.signal_kill()
            self.reaping.put((child, ""))

    def room_made(self, drain: bool) -> None:
        with self.warm_lock:
            self.making_room -= drain

    def describe(self) -> str:
        return (f"children running {len(self.running)}, pre-started {len(self.warm)}, "
                f"being reaped {self.reaping.qsize()}")

    def _reap_loop(self) -> None:
        while True:
            child, workdir = self.reaping.get()
            try:
                if child is not None:
                    child.reap()
                if isinstance(workdir, set):  # a sweep's dead processes that came (or come) to this process
                    pending, deadline = workdir, time.monotonic() + 30.0
                    while pending and time.monotonic() < deadline:
                        pending = leftovers.reap(pending)
                        time.sleep(0.02 if pending else 0)
                elif workdir:
                    shutil.rmtree(workdir, ignore_errors=True)
            except Exception:  # noqa: BLE001 - a failed clean-up must not stop the reaper
                traceback.print_exc(file=sys.stderr)
            finally:
                self.reaping.task_done()

    def shutdown(self) -> None:
        """Kill every child still known, pre-started or lent, and wait until all are reaped. One left alive
        would hold this process at exit: multiprocessing joins its non-daemon children then."""
        with self.warm_lock:
            self.closed = True
            left = [*self.warm, *self.running]
            self.warm.clear()
            self.running.clear()
        for child in left:  # all signalled first: their CUDA contexts are torn down side by side, not in turn
            child.signal_kill()
        for child in left:
            child.reap()
        leftovers.sweep(None)  # what killed candidates left behind (orphans adopted by this process)
        self.reaping.join()  # every killed child reaped before the directories go


def send(child: Child, message: dict[str, Any], phase: str) -> None:
    """A command to the child; a child that died meanwhile is a verdict on how it died, not our error."""
    try:
        wire.send_json(child.conn, message)
    except (BrokenPipeError, ConnectionResetError, EOFError, OSError):
        raise faults.death_fault(child, phase) from None


def timeout_message(timeout_s: float, phase: str) -> str:
    """What a timeout says: the seconds it had, or that its time had run out before this step began."""
    if timeout_s <= 0:
        return f"timed out while {phase}: the evaluation's time limit had run out before this step began"
    return f"timed out after {timeout_s:.0f} s while {phase}" if timeout_s >= 10 else \
        f"timed out after {timeout_s:.1f} s while {phase}"


def expect(child: Child, events: set[str], timeout_s: float, phase: str) -> dict[str, Any]:
    """Wait for the next message, enforcing the deadline and the memory limit by killing."""
    deadline = time.monotonic() + max(0.0, timeout_s)
    limit_mb = child.rss_limit_mb or float(os.environ.get("KBRL_EVAL_RSS_LIMIT_MB", "0")) or None
    while True:
        remaining = deadline - time.monotonic()
        try:
            # (Polled once more at the deadline: an answer already in the pipe is taken, not killed.)
            ready = child.conn.poll(min(0.25, max(0.0, remaining)))
        except (EOFError, OSError):
            raise faults.death_fault(child, phase) from None
        if not ready and remaining <= 0:
            child.kill()
            raise Fault(ErrorCategory.TIMEOUT, timeout_message(timeout_s, phase))
        if ready:
            try:
                message = wire.recv_json(child.conn)
            except (EOFError, OSError):
                raise faults.death_fault(child, phase) from None
            except wire.ProtocolError as exc:
                raise Fault(ErrorCategory.RUNTIME, f"the kernel's process sent a malformed message ({exc})") from None
            event = message.get("event")
            first = not getattr(child, "announced", False)
            child.announced = True
            if trace.enabled():
                trace.record_child(trace.who_of(child), child.pid, message)
            if event == READY_EVENT and first and READY_EVENT not in events:
                continue  # its start is over; only as its first message (a stream of them would outlast the deadline)
            if event in events:
                return message
            if event == "error":
                category = str(message.get("category", "runtime"))
                text = str(message.get("message", ""))[:700]
                if isinstance(message.get("device_oom"), dict):
                    raise faults.child_oom_fault(text, message["device_oom"], child.device_memory_cap,
                                                 _device_free_without(child))
                if category == "infra" and phase == "starting the sandbox":
                    # Before the candidate's code was imported: the sandbox itself could not start.
                    raise Fault(ErrorCategory.INFRA, f"the sandbox could not start: {text}"[:500])
                category = category if category in ("compile", "runtime", "unsupported") else "runtime"
                raise Fault(ErrorCategory(category), text, (Flag.HACK.value,) if message.get("hack") is True else ())
            raise Fault(ErrorCategory.RUNTIME, f"unexpected message {event!r} while {phase}")
        if limit_mb and child.rss_mb() > limit_mb:
            child.kill()
            raise Fault(ErrorCategory.CRASH, f"used more than {limit_mb:.0f} MB of host memory while {phase}")


def _device_free_without(child: Child) -> int | None:
    """The device's free memory read by the worker itself once `child` is gone (it reported a device OOM and is done):
    a fact its own process cannot forge. None where there is no CUDA device or it cannot be read."""
    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    child.signal_kill()
    child.process.join(timeout=5)
    try:
        return int(torch.cuda.mem_get_info()[0])
    except RuntimeError:
        return None


def receive(child: Child, header: dict[str, Any], reference: list[torch.Tensor] | None,
            input_bytes: int, transport: str) -> dict[str, list[torch.Tensor]]:
    limit = 64 << 30
    if reference is not None:
        limit = 4 * sum(r.numel() * r.element_size() for r in reference) + 2 * input_bytes + (256 << 20)
    try:
        return wire.receive_tensors(child.conn, header, limit, child.workdir if transport == "file" else None,
                                    snapshot_ipc_max_bytes=footprints.SNAPSHOT_MAX_BYTES)
    except wire.ProtocolError as exc:
        raise Fault(ErrorCategory.RUNTIME, f"the kernel's process sent malformed results ({exc})") from None
    except (EOFError, OSError):
        raise faults.death_fault(child, "sending results") from None


def host_memory_limit_mb(limit_mb: int, transport: str, tensor_bytes: int) -> float:
    """Resident host memory a GPU child may hold before it is killed (its address space cannot be capped:
    the CUDA driver maps far more than it uses). Over CUDA IPC tensors never touch host memory, so the
    sandbox's limit stands as set; through files or the pipe, room for two copies of them is added."""
    if transport == "ipc":
        return float(limit_mb)
    return float(limit_mb + ((2 * tensor_bytes) >> 20))


@contextlib.contextmanager
def stopped(pid: int, settle_s: float = 0.05):
    """The process group `pid` leads (or the process alone) stopped by SIGSTOP for the block, continued after.
    Waits up to `settle_s` until the kernel reports it stopped."""
    send = None
    for candidate in (lambda sig: os.killpg(pid, sig), lambda sig: os.kill(pid, sig)):
        try:
            candidate(signal.SIGSTOP)
            send = candidate
            break
        except OSError:
            continue
    try:
        until = time.monotonic() + settle_s
        while send is not None and time.monotonic() < until and _process_state(pid) not in ("T", "t", "", "Z", "X"):
            time.sleep(0.001)
        yield
    finally:
        if send is not None:
            try:
                send(signal.SIGCONT)
            except OSError:
                pass


def _process_state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def ipc_selftest(ctx: Any, phases: Any, drop_uid: bool, landlock: bool, workdir: str,
                 block_unix_sockets: bool) -> str:
    """Can the worker open CUDA IPC handles from a confined child? ('ok' or why not)."""
    child = None
    try:
        with phases.timed("ipc_selftest"):
            with phases.timed("selftest_child_spawn"):
                child = Child(ctx, "cuda")  # waits for the zygote's imports
            wire.send_json(child.conn, {"cmd": "ipc_selftest", "drop_uid": drop_uid, "uid": sandbox.unprivileged_uid(),
                                        "landlock": landlock,
                                        "workdir": workdir, "block_unix_sockets": block_unix_sockets})
            for _ in range(2):  # its first message says its start is over; the answer follows
                if not child.conn.poll(START_TIMEOUT_S):
                    return "no answer"
                header = wire.recv_json(child.conn)
                if header.get("event") != READY_EVENT:
                    break
            tensors = wire.receive_tensors(child.conn, header, 1 << 20)["t"]
            expected = torch.arange(1024, dtype=torch.float32, device="cuda")
            ok = torch.equal(tensors[0], expected)
            del tensors
            wire.send_json(child.conn, {"cmd": "exit"})
            return "ok" if ok else "wrong values"
    except Exception as exc:  # noqa: BLE001 - any failure means: use files
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:200]
    finally:
        if child is not None:
            child.kill()
