"""GPU timing shared by the child (candidate) and the worker (baseline), so both are timed alike.

It runs in the child, so it lives in the sandbox and imports nothing of the worker, the verdict or timing/ (which
decides from the numbers it measures); the worker imports it from here for its baselines.

Every timed call gets new inputs made on the device from a new seed outside the timed region, an L2
flush before it, a start event, the forward, a full-device synchronise (work on side streams or
threads counts), an end event. The timer functions are captured before the candidate is imported
and their identity re-checked after.

Where the new inputs live is the buffer plan, the same for the baseline and the candidate:
`fresh_buffers=True` makes each set while the previous one is alive, so every call sees new
addresses (memoising on data_ptr/_version/shape cannot help); `False` frees the previous set first,
for inputs far larger than the L2 cache (KernelBench's level 1 reaches 6 GiB per tensor), where two
live sets would cost GiBs and caching buys nothing. The values are new either way, so a kernel that
memoises on the address returns stale outputs, which the verified trials catch.

The timed calls are generators (`timed_calls`, `host_timed_calls`) that yield each forward's inputs and receive its
output; `drive` makes the forwards they ask for. In the candidate's process every forward, timed or not, is made by
`drive` from one line of the child (sandbox/child.py), so the stack a forward sees does not tell a timed call from a
checked one; the worker's baseline goes through the same generators and `drive`, so both sides are timed alike.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

import torch

from kernelbench_rl.evaluation.sandbox.outputs import input_aliases, plain_outputs


@dataclass
class Clock:
    """Timer functions captured at a trusted moment (before any candidate code ran)."""

    synchronize: Callable[..., Any]
    event_cls: type
    record: Callable[..., Any]
    elapsed_time: Callable[..., Any]
    event_synchronize: Callable[..., Any]
    perf_counter: Callable[[], float]

    @classmethod
    def capture(cls) -> Clock:
        event_cls = torch.cuda.Event
        return cls(
            synchronize=torch.cuda.synchronize, event_cls=event_cls, record=event_cls.record,
            elapsed_time=event_cls.elapsed_time, event_synchronize=event_cls.synchronize,
            perf_counter=time.perf_counter,
        )

    def tampered(self) -> list[str]:
        """Names of timing functions that no longer are the captured ones (a candidate patched them)."""
        now = Clock.capture()
        return [name for name in ("synchronize", "event_cls", "record", "elapsed_time", "event_synchronize", "perf_counter")
                if getattr(now, name) is not getattr(self, name)]


@dataclass
class TimingRecord:
    times_ms: list[float] = field(default_factory=list)
    kept_outputs: dict[int, list[torch.Tensor]] = field(default_factory=dict)
    # Why a timing may differ between two processes running the same code (see diagnostics()): the host's
    # CPU time launching each forward, and, on a GPU, how many timed calls had to reach cudaMalloc.
    launch_cpu_ms: list[float] = field(default_factory=list)
    # The distinct per-output aliasing (outputs.input_aliases) of the timed calls: a kernel that returns its
    # input only when timed shows here, since its verified outputs may still hold the right values.
    alias_patterns: list[list[int | None]] = field(default_factory=list)
    calls_reaching_malloc: int | None = None
    allocator_retries: int | None = None
    # Calls whose fresh inputs, made outside the events, reached cudaMalloc: time the worker's clock sees and the
    # events do not (timing/decisions.host_clock_check grants it slack only where the kernel's calls did this more).
    inputs_reaching_malloc: int | None = None
    # Host seconds the timed calls spent around the events, by part (inputs, flush, allocator, outputs, keep):
    # where a candidate's timing phase goes beyond its GPU time.
    host_s: dict[str, float] = field(default_factory=dict)

    @property
    def median_ms(self) -> float:
        return float(statistics.median(self.times_ms))

    @property
    def iqr_ms(self) -> float:
        if len(self.times_ms) < 4:
            return 0.0
        q1, _, q3 = statistics.quantiles(self.times_ms, n=4)
        return float(q3 - q1)

    def diagnostics(self) -> dict[str, Any]:
        """A timed call that reaches cudaMalloc (the caching allocator had no free block: a memory cap near
        the process's peak makes it release and re-allocate) pays for the allocation inside the events, and fresh
        inputs that reach it pay outside them; a launch-bound model's time follows the host's CPU time per launch.
        All are recorded for each side."""
        return {
            "timed_calls": len(self.times_ms),
            "calls_reaching_malloc": self.calls_reaching_malloc,
            "allocator_retries": self.allocator_retries,
            "inputs_reaching_malloc": self.inputs_reaching_malloc,
            "launch_cpu_median_ms": round(statistics.median(self.launch_cpu_ms), 4) if self.launch_cpu_ms else None,
            "host_s": {part: round(seconds, 5) for part, seconds in self.host_s.items()},
        }


def merge_diagnostics(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Several blocks' diagnostics as one (counts summed; the launch median is the blocks' median)."""
    def total(key: str) -> int | None:
        values = [p.get(key) for p in parts if isinstance(p.get(key), int)]
        return sum(values) if values else None
    medians = [p["launch_cpu_median_ms"] for p in parts if isinstance(p.get("launch_cpu_median_ms"), (int, float))]
    return {"timed_calls": total("timed_calls") or 0, "calls_reaching_malloc": total("calls_reaching_malloc"),
            "allocator_retries": total("allocator_retries"), "inputs_reaching_malloc": total("inputs_reaching_malloc"),
            "launch_cpu_median_ms": round(statistics.median(medians), 4) if medians else None}


def describe_diagnostics(sides: dict[str, dict[str, Any] | None]) -> str:
    """One line for a result's versions, e.g. "kernel: 0/100 timed calls reached cudaMalloc (0 allocator
    retries), launch CPU 0.41 ms; reference: cached"."""
    parts = []
    for side, diag in sides.items():
        if not diag:
            parts.append(f"{side}: cached")
            continue
        text = f"{side}: "
        if diag.get("calls_reaching_malloc") is not None:
            text += (f"{diag['calls_reaching_malloc']}/{diag.get('timed_calls', 0)} timed calls reached cudaMalloc "
                     f"({diag.get('allocator_retries') or 0} allocator retries), ")
        if diag.get("inputs_reaching_malloc"):
            text += f"{diag['inputs_reaching_malloc']} calls' inputs did, "
        launch = diag.get("launch_cpu_median_ms")
        text += f"launch CPU {launch:.3f} ms" if isinstance(launch, (int, float)) else "launch CPU unknown"
        parts.append(text)
    return "; ".join(parts)


def _allocator_counts(device: torch.device | str) -> Callable[[], tuple[int, int]] | None:
    """(cudaMalloc calls, failed-cudaMalloc retries) so far in this process, or None off a GPU."""
    if torch.device(device).type != "cuda":
        return None
    read = torch.cuda.memory_stats_as_nested_dict  # captured now: a candidate's patch cannot feed it

    def counts() -> tuple[int, int]:
        stats = read(device)
        return int(stats.get("num_device_alloc", 0)), int(stats.get("num_alloc_retries", 0))
    try:
        counts()
    except Exception:  # noqa: BLE001 - a diagnostic: never a reason for a timing to fail
        return None
    return counts


_thread_time = time.thread_time


def l2_flush_buffer(device: torch.device | str) -> torch.Tensor:
    """A buffer twice the L2 size (256 MiB when the size is unknown); writing it evicts L2."""
    try:
        l2_bytes = int(torch.cuda.get_device_properties(device).L2_cache_size)
    except Exception:
        l2_bytes = 0
    nbytes = 2 * l2_bytes if l2_bytes > 0 else 256 << 20
    return torch.empty(nbytes // 4, dtype=torch.int32, device=device)


# A forward's maker: yields each forward's inputs, is sent a one-element list holding that forward's output (which it
# pops: `output = (yield inputs).pop()`), and returns its result.
Calls = Generator[list[Any], list[Any], Any]


def drive(model: Callable[..., Any], calls: Calls) -> Any:
    """Make every forward `calls` asks for (model(*inputs), under no_grad) and return what `calls` returns. A forward
    that raises is thrown into `calls` at its yield, so its cleanup runs as if it had called the model itself.

    The one place the candidate's process calls its model for the worker (sandbox/child.py): keep it one line, and
    what differs between calls (timing events, accounts, poisoning) in the generators. Nothing here holds a forward's
    inputs or output while `calls` runs on (the output goes in a list it pops): it decides what stays alive while the
    next inputs are made, as a loop calling the model itself would."""
    with torch.no_grad():
        try:
            output: list[Any] = []  # (bound from the first forward on: every forward sees the same locals here)
            inputs = next(calls)
            while True:
                try:
                    output = [model(*inputs)]
                except BaseException as exc:  # noqa: BLE001 - the generator's own handling, then up the stack
                    inputs = None
                    inputs = calls.throw(exc)
                    continue
                inputs = None
                inputs = calls.send(output)
        except StopIteration as done:
            return done.value


def time_forward(
    model: Callable[..., Any],
    inputs_for_seed: Callable[[int], list[Any]],
    seeds: list[int],
    warmup: int,
    device: torch.device | str,
    clock: Clock,
    keep: set[int] | None = None,
    fresh_buffers: bool = True,
) -> TimingRecord:
    """Event-timed trials, one per seed; outputs of the trials in `keep` are cloned for verification."""
    return drive(model, timed_calls(inputs_for_seed, seeds, warmup, device, clock, keep, fresh_buffers))


def timed_calls(
    inputs_for_seed: Callable[[int], list[Any]],
    seeds: list[int],
    warmup: int,
    device: torch.device | str,
    clock: Clock,
    keep: set[int] | None = None,
    fresh_buffers: bool = True,
) -> Generator[list[Any], list[Any], TimingRecord]:
    """time_forward's calls, for `drive`: yields each forward's inputs between the events, returns the record."""
    keep = keep or set()
    record = TimingRecord()
    flush = l2_flush_buffer(device)
    allocator = _allocator_counts(device)
    if allocator is not None:
        record.calls_reaching_malloc, record.allocator_retries, record.inputs_reaching_malloc = 0, 0, 0
    start = clock.event_cls(enable_timing=True)
    end = clock.event_cls(enable_timing=True)
    previous: list[Any] | None = None
    host = dict.fromkeys(("warmup", "inputs", "flush", "allocator", "outputs", "keep"), 0.0)
    now = clock.perf_counter
    mark = now()
    for index in range(warmup):
        (yield inputs_for_seed(seeds[index % len(seeds)] ^ 0x5A5A5A)).pop()
    clock.synchronize()
    host["warmup"] = now() - mark
    for index, seed in enumerate(seeds):
        mark = now()
        unmade = allocator() if allocator is not None else None
        host["allocator"] += now() - mark
        mark = now()
        if not fresh_buffers:
            previous = None  # freed before the next set is made: one set alive at a time
        inputs = inputs_for_seed(seed)  # fresh_buffers: allocated while the previous set is alive
        flushed = now()
        flush.fill_(index)
        clock.synchronize()
        counted = now()
        before = allocator() if allocator is not None else None  # host-side, while the device is idle
        if unmade is not None and before is not None:
            record.inputs_reaching_malloc += int(before[0] > unmade[0])
        host["inputs"] += flushed - mark
        host["flush"] += counted - flushed
        host["allocator"] += now() - counted
        clock.record(start)
        launch_start = _thread_time()
        output = (yield inputs).pop()
        launch_cpu = _thread_time() - launch_start
        clock.synchronize()
        clock.record(end)
        clock.event_synchronize(end)
        mark = now()
        # Before anything reads the output: a tensor subclass could run its work when first touched.
        outputs = plain_outputs(output)
        aliases = input_aliases(outputs, inputs)
        if aliases not in record.alias_patterns:
            record.alias_patterns.append(aliases)
        record.times_ms.append(float(clock.elapsed_time(start, end)))
        record.launch_cpu_ms.append(launch_cpu * 1000.0)
        counted = now()
        if before is not None:
            after = allocator()
            record.calls_reaching_malloc += int(after[0] > before[0])
            record.allocator_retries += after[1] - before[1]
        kept = now()
        if index in keep:
            record.kept_outputs[index] = [t.detach().clone() for t in outputs]
        del output, outputs
        previous = inputs
        del inputs
        host["outputs"] += counted - mark
        host["allocator"] += kept - counted
        host["keep"] += now() - kept
    del previous, flush
    record.host_s = host
    return record


def host_time_forward(
    model: Callable[..., Any],
    inputs_for_seed: Callable[[int], list[Any]],
    seeds: list[int],
    device: torch.device | str,
    clock: Clock,
    fresh_buffers: bool = True,
) -> float:
    """Median host-clock time (perf_counter around forward + full synchronise), for re-verification."""
    return drive(model, host_timed_calls(inputs_for_seed, seeds, device, clock, fresh_buffers))


def host_timed_calls(
    inputs_for_seed: Callable[[int], list[Any]],
    seeds: list[int],
    device: torch.device | str,
    clock: Clock,
    fresh_buffers: bool = True,
) -> Generator[list[Any], list[Any], float]:
    """host_time_forward's calls, for `drive`: returns the median in milliseconds."""
    flush = l2_flush_buffer(device)
    times: list[float] = []
    inputs: list[Any] | None = None
    for index, seed in enumerate(seeds):
        if not fresh_buffers:
            inputs = None
        inputs = inputs_for_seed(seed)
        flush.fill_(index)
        clock.synchronize()
        begin = clock.perf_counter()
        output = (yield inputs).pop()
        clock.synchronize()
        times.append((clock.perf_counter() - begin) * 1000.0)
        plain_outputs(output)  # (as in timed_calls: no lazy tensor subclass)
        del output
    return float(statistics.median(times))
