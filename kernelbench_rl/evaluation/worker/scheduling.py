"""Who may use the evaluation worker's device, when, and with how many bytes.

Children compile and warm up in parallel; correctness and timing hold the device one at a time
(`DeviceQueue`); timed trials run with no warm-up beside them (`QuietGate`); device memory is handed
out by bytes against a budget (`MemoryBudget`), and an evaluation that ran out of memory beside
others runs again with the device to itself (`SharedOrAlone`). Also where the worker's CPU cores go.
"""

from __future__ import annotations

import collections
import contextlib
import gc
import itertools
import os
import sys
import threading
import time
from typing import Any, Callable

import torch

from kernelbench_rl.evaluation.worker import memory as footprints
from kernelbench_rl.evaluation.host_share import by_physical_core, sysfs_topology, host_share, share_of

# GPU memory per child: a pre-started one holds a bare CUDA context, one serving an evaluation also cuBLAS's
# and cuDNN's handles and workspaces (H100, torch 2.11: 526 and 722 MiB, bench/RESULTS.md).
WARM_CONTEXT_BYTES = 560 << 20
LOADED_CONTEXT_BYTES = 768 << 20
# Of the device memory free when the worker starts, the share evaluations may plan with (the rest is
# headroom for the driver, fragmentation and what no plan counts).
USABLE_FRACTION = 0.92
# Timing waits at most this long for warm-ups under way in other children to finish (a Triton JIT can
# take seconds); past it, the trial runs and the overlap is recorded.
QUIET_WAIT_S = 5.0
# With at least this many cores in the worker's share of its host, two are kept for whoever holds the device section
# (a delayed launch counts in a 1 ms trial); compiling children run on the rest of the share.
QUIET_CORES_MIN_CPUS = 8
# A plan needing more than this share of the budget is "big": its child is killed and reaped before its
# bytes go back to the budget, and it is admitted only once the device shows them free (a killed child
# holding 20 GiB releases it asynchronously; admitting the next one at once ran it out of memory).
BIG_PLAN_FRACTION = 0.25
FREE_WAIT_S = 30.0
# A wait for free memory releases this process's own cached blocks (and cyclic garbage holding tensors) once dying
# children have had this long to let go: the cache cannot shrink by waiting, and an H200's sizing once sat out the
# whole FREE_WAIT_S for blocks this process could give back at once.
OWN_CACHE_GRACE_S = 0.5


class _Ticket:
    """A place in the budget's queue (compared by identity), and whether its holder sizes a problem."""

    __slots__ = ("sizing",)

    def __init__(self, sizing: bool) -> None:
        self.sizing = sizing


class MemoryBudget:
    """Bytes of device memory the children may hold at once, handed out first come, first served.

    Children warm up (Triton JIT, one forward) in parallel outside the exclusive device section; on a
    smaller GPU, or with level-1 problems whose inputs and outputs reach GiBs, several of them at once
    could run the device out of memory and turn a correct kernel into an OOM verdict. A request larger
    than the whole budget waits until it can run alone.

    `capacity` is fixed when the worker starts; another process on the device (a policy sampled and
    trained beside the evaluator) may take memory after that. With `free_probe` (the device's free
    bytes now), each admission also fits what the device shows free: what this budget has admitted plus
    `usable_fraction` of the free bytes. Waiting requests look again every `poll_s`, since memory that
    another process gives back wakes nobody. A request with nothing else admitted always runs: the
    device cannot get freer by this worker's doing, and an out-of-memory then is judged alone (never the
    candidate's within its budget).
    """

    def __init__(self, capacity: int, free_probe: Callable[[], int] | None = None,
                 usable_fraction: float = USABLE_FRACTION, poll_s: float = 0.1) -> None:
        self.capacity = max(1, capacity)
        self.used = 0
        self.free_probe = free_probe
        self.usable_fraction = usable_fraction
        self.poll_s = poll_s
        self._cond = threading.Condition()
        self._queue: collections.deque[_Ticket] = collections.deque()

    def available(self) -> int:
        """Bytes a new request may be admitted with now (the caller holds no lock; a snapshot)."""
        with self._cond:
            return max(0, self._capacity_now() - self.used)

    def _capacity_now(self) -> int:
        if self.free_probe is None:
            return self.capacity
        return min(self.capacity, self.used + int(self.usable_fraction * max(0, self.free_probe())))

    def _admissible(self, ticket: _Ticket, nbytes: int) -> bool:
        return self._queue[0] is ticket and (self.used == 0 or self.used + nbytes <= self._capacity_now())

    def next_is_sizing(self) -> bool:
        """Whether the next request to be admitted sizes a problem (and so takes the whole budget: nobody allocates
        before it does)."""
        with self._cond:
            return bool(self._queue) and self._queue[0].sizing

    @contextlib.contextmanager
    def hold(self, nbytes: int, sizing: bool = False):
        nbytes = max(0, min(int(nbytes), self.capacity))
        ticket = _Ticket(sizing)
        with self._cond:
            self._queue.append(ticket)
            try:
                while not self._admissible(ticket, nbytes):
                    self._cond.wait(timeout=self.poll_s if self.free_probe is not None else None)
            except BaseException:
                self._queue.remove(ticket)  # never admitted: those behind it must not wait on it
                self._cond.notify_all()
                raise
            self._queue.popleft()
            self.used += nbytes
            self._cond.notify_all()
        try:
            yield
        finally:
            with self._cond:
                self.used -= nbytes
                self._cond.notify_all()


class QuietGate:
    """Timed trials run with no other child's GPU work beside them.

    Warm-ups and model construction in other children (Triton JIT, one forward, parameter init) take
    the gate shared; timing (the candidate's trials, the baseline's) takes it alone. Writer-preferring:
    once timing waits, new warm-ups wait behind it. Timing waits at most `max_wait_s` for those already
    under way (a JIT can take seconds) and reports whether it ran quiet."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._noisy = 0
        self._quiet = False
        self._waiting = 0
        self._owner: int | None = None  # the thread holding it quiet: its nested sections pass through

    def _held_here(self) -> bool:
        return self._quiet and self._owner == threading.get_ident()

    @contextlib.contextmanager
    def noisy(self):
        if self._held_here():  # the quiet section's own untimed work
            yield
            return
        with self._cond:
            self._cond.wait_for(lambda: not self._quiet and self._waiting == 0)
            self._noisy += 1
        try:
            yield
        finally:
            with self._cond:
                self._noisy -= 1
                self._cond.notify_all()

    def wait_for_no_timing(self, max_wait_s: float) -> bool:
        """Wait (at most `max_wait_s`) until no timing holds the gate or waits for it, taking nothing: for work that
        should not begin beside a timing but need not hold one back either. True when none is under way."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._quiet and self._waiting == 0, timeout=max_wait_s)

    @contextlib.contextmanager
    def quiet(self, max_wait_s: float = QUIET_WAIT_S):
        """Yields True when no warm-up ran beside the section's start, False when it gave up waiting. Inside a
        quiet section of the same thread it yields True at once (a whole device section held quiet holds its
        timed trials quiet too)."""
        if self._held_here():
            yield True
            return
        with self._cond:
            self._waiting += 1
            try:
                calm = self._cond.wait_for(lambda: self._noisy == 0 and not self._quiet, timeout=max_wait_s)
                if not calm:  # give up on the warm-ups, but never share with another timing
                    self._cond.wait_for(lambda: not self._quiet)
            finally:
                self._waiting -= 1
            self._quiet = True
            self._owner = threading.get_ident()
        try:
            yield calm
        finally:
            with self._cond:
                self._quiet = False
                self._owner = None
                self._cond.notify_all()


class DeviceQueue:
    """The exclusive device section: first come, first served, except that sizing a new problem (one
    reference forward) goes before every candidate waiting.

    Sizing gates a whole problem's evaluations before they even take a child; behind a queue of
    candidates' timing it cost the problems that came late up to 9 s each on the H200, and a hang
    among them started its timeout that much later."""

    URGENT, NORMAL = 0, 1

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._held = False
        self._waiting: list[tuple[int, int]] = []  # (priority, arrival), smallest served first
        self._arrivals = itertools.count()

    @contextlib.contextmanager
    def hold(self, priority: int = NORMAL):
        ticket = (priority, next(self._arrivals))
        with self._cond:
            self._waiting.append(ticket)
            self._cond.wait_for(lambda: not self._held and min(self._waiting) == ticket)
            self._waiting.remove(ticket)
            self._held = True
        try:
            yield
        finally:
            with self._cond:
                self._held = False
                self._cond.notify_all()


class SharedOrAlone:
    """Evaluations share the device; one that ran out of device memory beside others runs again alone.

    Writer-preferring: once an evaluation waits to run alone, new ones wait behind it, so it cannot starve.
    Running alone drains the pool (up to the slowest in-flight evaluation's timeout), which is why only a
    device OOM earns it.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._sharing = 0
        self._alone = False
        self._waiting_alone = 0

    @contextlib.contextmanager
    def shared(self):
        with self._cond:
            self._cond.wait_for(lambda: not self._alone and self._waiting_alone == 0)
            self._sharing += 1
        try:
            yield
        finally:
            with self._cond:
                self._sharing -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def alone(self):
        with self._cond:
            self._waiting_alone += 1
            self._cond.wait_for(lambda: not self._alone and self._sharing == 0)
            self._waiting_alone -= 1
            self._alone = True
        try:
            yield
        finally:
            with self._cond:
                self._alone = False
                self._cond.notify_all()



def device_budgets(free: int, in_flight: int, warm_children: int, ref_cache_bytes: int, *,
                   reserved_bytes: int = 0, others_hold: int = 0,
                   free_probe: Callable[[], int] | None = None) -> tuple[MemoryBudget, int]:
    """The budget evaluations are admitted against, and the capacity of one that has the device to itself.

    Every child holds a CUDA context; the worker keeps its reference models and cached outputs within
    ref_cache_bytes (evicting the least recently used problems). The rest of `free` is the budget. With the
    device to itself (pre-started children killed, other problems' references dropped), an evaluation still
    shares it with the other evaluations' children, each at most a loaded context.

    reserved_bytes: what another user of the device (a policy trained on it) may hold at its peak; of it,
    what it does not hold yet (beyond `others_hold`, the bytes others held when `free` was read) is kept
    out of the budget, so the evaluator never plans with memory the policy will grow into."""
    free = max(0, free - max(0, reserved_bytes - others_hold))
    contexts = in_flight * LOADED_CONTEXT_BYTES + warm_children * WARM_CONTEXT_BYTES
    memory = MemoryBudget(max(1 << 30, int(USABLE_FRACTION * free) - ref_cache_bytes - contexts), free_probe)
    return memory, max(memory.capacity, int(USABLE_FRACTION * free) - in_flight * LOADED_CONTEXT_BYTES)


def held_by_others(free: int, total: int, own_bytes: int) -> int:
    """Device bytes neither free nor this process's own (its CUDA context and allocator): other processes'."""
    return max(0, total - free - own_bytes)


def admission(memory: MemoryBudget | None, plan: footprints.MemoryPlan | None, kind: str) -> contextlib.AbstractContextManager:
    """Admission by bytes: a warm-up forward, or a device section (the candidate at its budget plus
    the worker's own buffers); what exceeds the whole budget waits until it can run alone."""
    if memory is None or plan is None:
        return contextlib.nullcontext()
    return memory.hold(plan.warm_bytes if kind == "warm" else plan.section_bytes)


def sizing_admission(memory: MemoryBudget | None) -> contextlib.AbstractContextManager:
    # The footprint is unknown until the reference has run once: size it with the device to itself.
    return memory.hold(memory.capacity, sizing=True) if memory is not None else contextlib.nullcontext()


def is_big(memory: MemoryBudget | None, plan: footprints.MemoryPlan | None) -> bool:
    return memory is not None and plan is not None and plan.needed_bytes > BIG_PLAN_FRACTION * memory.capacity


def wait_for_free(nbytes: int, result: Any, holders: Callable[[], str]) -> None:
    """Wait (bounded) until the device really has `nbytes` free; the budget counts what was admitted,
    this sees what dying children and the driver have not given back yet. This process's own cached
    blocks go back after OWN_CACHE_GRACE_S (each cudaFree costs, so not at once). `holders` describes
    the worker's children for the log of a wait that found the device short."""
    t = time.perf_counter()
    free = torch.cuda.mem_get_info()[0]
    released = False
    while free < nbytes and time.perf_counter() - t < FREE_WAIT_S:
        if not released and time.perf_counter() - t >= OWN_CACHE_GRACE_S:
            released = True
            before = free
            _release_own_cache()
            free = torch.cuda.mem_get_info()[0]
            result.versions["free_wait_released_gb"] = f"{(free - before) / 2**30:.1f}"
            continue
        time.sleep(0.05)
        free = torch.cuda.mem_get_info()[0]
    result.phase_seconds["free_wait"] = result.phase_seconds.get("free_wait", 0.0) + time.perf_counter() - t
    if free < nbytes:
        _release_own_cache()
        free = torch.cuda.mem_get_info()[0]
    result.versions["device_free_gb"] = f"{free / 2**30:.1f} (wanted {nbytes / 2**30:.1f})"
    if free < nbytes:
        print(f"[kbrl-worker] {result.problem_id}: waited {time.perf_counter() - t:.1f} s for {nbytes / 2**30:.1f} GiB free, "
              f"{free / 2**30:.1f} free; worker allocated {torch.cuda.memory_allocated() / 2**30:.1f} reserved "
              f"{torch.cuda.memory_reserved() / 2**30:.1f} GiB; {holders()}; largest live tensors {_largest_cuda_tensors()}",
              file=sys.stderr, flush=True)


def _release_own_cache() -> None:
    gc.collect()
    torch.cuda.empty_cache()


def _largest_cuda_tensors(count: int = 4) -> str:
    """Diagnostics for a wait that found the device short: the biggest CUDA tensors this process still
    holds and what refers to them."""
    found = []
    for obj in gc.get_objects():
        try:
            if isinstance(obj, torch.Tensor) and obj.is_cuda:
                found.append(obj)
        except Exception:  # noqa: BLE001 - some objects fail isinstance checks
            continue
    found.sort(key=lambda t: -t.numel() * t.element_size())
    described = []
    for tensor in found[:count]:
        holders = sorted({type(r).__name__ for r in gc.get_referrers(tensor) if r is not found})[:3]
        described.append(f"{tuple(tensor.shape)} {tensor.numel() * tensor.element_size() / 2**30:.1f} GiB held by {holders}")
    del found
    return "; ".join(described) or "none"




def core_split(device: str, cores: list[int] | None = None, share: tuple[int, int] | None = None,
               topology: Callable[[int], tuple[int, int]] = sysfs_topology) -> tuple[set[int], set[int], set[int]]:
    """(the worker's cores, cores kept for its device section's holder, cores for its compiling children); the last two
    empty where no cores are kept. The worker's cores are its share of the host (`share`, default host_share()); the
    quiet ones are its share's last physical core(s), at least two logical CPUs. KBRL_EVAL_PIN_CORES=0 leaves every
    process on all cores (a diagnostic switch for timing studies)."""
    if cores is None:
        cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if os.environ.get("KBRL_EVAL_PIN_CORES", "1") == "0":
        return set(cores), set(), set()
    position, count = share if share is not None else host_share()
    mine = share_of(list(cores), position, count, topology)
    if device != "cuda" or len(mine) < QUIET_CORES_MIN_CPUS:
        return set(mine), set(), set()
    quiet: list[int] = []
    for group in reversed(by_physical_core(mine, topology)):
        if len(quiet) >= 2:
            break
        quiet += group
    return set(mine), set(quiet), set(mine) - set(quiet)


def gpu_identity() -> str:
    """'INDEX UUID' of the GPU this process times on (the first it sees): INDEX its number on the host
    (CUDA_VISIBLE_DEVICES's first entry, 0 where that is unset), UUID the driver's (as nvidia-smi prints it); '' without
    a CUDA device."""
    try:
        if not torch.cuda.is_available():
            return ""
        uuid = str(getattr(torch.cuda.get_device_properties(0), "uuid", "") or "")
    except Exception:  # noqa: BLE001 - no driver: no GPU to name
        return ""
    if uuid and not uuid.startswith("GPU-"):
        uuid = f"GPU-{uuid}"
    visible = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    return f"{visible[0] if visible else '0'} {uuid}".strip()


# Whether the worker's own threads, other than a device section's holder, keep off the quiet cores too
# (KBRL_EVAL_QUIET_CORES): "strict", or "shared" (the default: on every core, where the children that compile are
# not). A timed call's end event follows the host's return from a synchronise, so a descheduled timing thread reads
# as a slower kernel: beside 16 busy cores a 2.75 ms matmul read 3.90 ms with a 55% spread on an H200
# (host_overhead_probe). Yet strict did not tighten a GRPO batch's spreads there (grpo_ab_KBRL_EVAL_QUIET_CORES_*:
# one kernel past 5% on level 1 either way, one against four on level 2) and level 2 took 58.8 s against 52.1 s.
QUIET_CORES_MODE = os.environ.get("KBRL_EVAL_QUIET_CORES", "shared").strip().lower()


def home_cores(all_cores: set[int], busy_cores: set[int]) -> set[int]:
    """Where a worker's threads run outside a device section (QUIET_CORES_MODE)."""
    return set(busy_cores) if busy_cores and QUIET_CORES_MODE == "strict" else set(all_cores)


def pin(pid: int, cores: set[int]) -> None:
    """CPU affinity of a process's main thread (pid 0: the calling thread); best effort."""
    if cores:
        try:
            os.sched_setaffinity(pid, cores)
        except (OSError, AttributeError):
            pass


# How long a thread of the worker may keep the GIL while another waits for it - KBRL_EVAL_SWITCH_INTERVAL_MS (Python's
# default, 5 ms, when unset). The worker's device-section threads block briefly and often (a synchronise, an IPC
# answer) and each time must win the GIL back from a busy thread beside them. On an H200 (2026-11-26) 0.5 ms changed
# nothing measurable: a cold level-2 folder 18.4 and 19.0 s against 18.1 s, the warm level-2 batch 49.1 s against
# 47.6 s; the busy threads that did slow the worker (the speed of light's warm-up) now run in a process of their own.


def apply_switch_interval(setting: str | None = None) -> str:
    """Sets this process's GIL switch interval from `setting` (KBRL_EVAL_SWITCH_INTERVAL_MS when None; empty or
    "default" leaves Python's); returns what is in force, for the worker's versions. A value that is not a number of
    milliseconds in (0, 1000] leaves Python's and says so."""
    raw = (os.environ.get("KBRL_EVAL_SWITCH_INTERVAL_MS", "") if setting is None else setting).strip().lower()
    if raw in ("", "default"):
        return f"{sys.getswitchinterval() * 1e3:g} ms (Python's)"
    try:
        milliseconds = float(raw)
        if not 0 < milliseconds <= 1000:
            raise ValueError
    except ValueError:
        return (f"{sys.getswitchinterval() * 1e3:g} ms (Python's; KBRL_EVAL_SWITCH_INTERVAL_MS={raw!r} is not a number "
                "of milliseconds in (0, 1000])")
    sys.setswitchinterval(milliseconds / 1e3)
    return f"{milliseconds:g} ms"
