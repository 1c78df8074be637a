"""Where an evaluation's host time goes around its GPU work: the per-call costs the phase accounting points at.

Each part is timed in isolation on the GPU, a median of repeats:
- the allocator counters read twice per timed call (`torch.cuda.memory_stats_as_nested_dict`);
- the L2 flush and the full-device synchronise of every timed call;
- the output poisoning before each correctness seed (`child._poison_allocator`), with the sandbox's memory cap;
- one profiled forward (`child._profile`) of a small model;
- a CUDA IPC hand-off as the worker receives one (a child process shares a fresh output; the worker opens it,
  snapshots it, closes it), split into open, clone and close, at three sizes; and the first hand-off from each of
  several fresh processes against their later ones (the evaluator meets a new child per candidate).
The poisoning and the profile report their first call in the process (a fresh child's) beside the median after.
Last, the same small steps (a flush and synchronise, a forward and synchronise, a poisoning, a profiled forward) while
other processes do what an evaluation's other children do beside a device section: start CUDA contexts, run GPU
work, take device memory and exit, keep every core busy (`--contention`); with them a matmul timed as a candidate's
call is (its median, spread and slowest of 120); and that matmul's first calls after the device sat idle.

    python bench/host_overhead_probe.py --out bench/results/host_overhead_probe.json
"""

from __future__ import annotations

import argparse
import base64
import multiprocessing
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
import report  # noqa: E402 - after the path set-up above


def _times_ms(fn, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        begin = time.perf_counter()
        fn()
        times.append((time.perf_counter() - begin) * 1000.0)
    return times


def _median_ms(fn, repeats: int) -> float:
    return round(statistics.median(_times_ms(fn, repeats)), 4)


def _first_and_median_ms(fn, repeats: int) -> dict[str, float]:
    """The first call in this process (what a fresh child per candidate pays) and the median of the rest."""
    times = _times_ms(fn, repeats)
    return {"first": round(times[0], 4), "median_after": round(statistics.median(times[1:] or times), 4)}


def _sharer(conn, sizes_mb: list[int], repeats: int) -> None:
    import torch

    from kernelbench_rl.evaluation import wire

    torch.cuda.init()
    for size_mb in sizes_mb:
        for _ in range(repeats):
            output = torch.empty(size_mb << 18, dtype=torch.float32, device="cuda").fill_(1.0)  # a fresh output
            torch.cuda.synchronize()
            keep = wire.send_tensors(conn, "checked", {"outputs": [output]}, True, {})
            conn.recv_bytes()  # the worker's next command releases it
            del keep, output
    conn.send_bytes(b"done")


def _opened(meta: dict) -> Any:
    """The worker's side of a hand-off: the shared output opened from its IPC handle (float32, as `_sharer` sends)."""
    import torch
    from torch.multiprocessing.reductions import rebuild_cuda_tensor

    ipc = meta["ipc"]
    return rebuild_cuda_tensor(
        torch.Tensor, torch.Size(meta["shape"]), tuple(ipc["stride"]), ipc["tensor_offset"], torch.UntypedStorage,
        torch.float32, ipc["device"], base64.b64decode(ipc["handle"]), ipc["size_bytes"], ipc["offset_bytes"],
        False, base64.b64decode(ipc["ref_handle"]), ipc["ref_offset"],
        base64.b64decode(ipc["event_handle"]) if ipc.get("event_handle") else None, ipc["event_sync"])


def _hand_off(parent: Any) -> dict[str, float]:
    """Receives one hand-off as the worker does (open, snapshot, close), then lets the sharer go on; its parts in ms."""
    import torch

    from kernelbench_rl.evaluation import wire

    meta = wire.recv_json(parent)["groups"]["outputs"][0]
    t0 = time.perf_counter()
    shared = _opened(meta)
    t1 = time.perf_counter()
    copy = shared.clone()
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    del shared
    t3 = time.perf_counter()
    del copy
    parent.send_bytes(b"next")
    return {"open": 1000.0 * (t1 - t0), "clone": 1000.0 * (t2 - t1), "close": 1000.0 * (t3 - t2),
            "whole": 1000.0 * (t3 - t0)}


def _sharing(sizes_mb: list[int], repeats: int) -> tuple[Any, Any]:
    """A fresh process sharing `repeats` outputs of each size in turn; (our end of its pipe, the process)."""
    context = multiprocessing.get_context("spawn")
    parent, child_end = context.Pipe()
    process = context.Process(target=_sharer, args=(child_end, sizes_mb, repeats))
    process.start()
    return parent, process


def _first_contacts(processes: int, per_process: int, size_mb: int) -> dict[str, float]:
    """IPC hand-offs from fresh processes, as the worker meets a new child per candidate: the first from each
    process against the later ones (medians over the processes)."""
    first, later = [], []
    for _ in range(processes):
        parent, process = _sharing([size_mb], per_process)
        for index in range(per_process):
            (first if index == 0 else later).append(_hand_off(parent)["whole"])
        parent.recv_bytes()
        process.join(timeout=30)
    return {"processes": processes, "first_ms": round(statistics.median(first), 3),
            "later_ms": round(statistics.median(later), 3) if later else None}


def _ipc_parts(sizes_mb: list[int], repeats: int) -> dict[str, dict[str, float]]:
    parent, process = _sharing(sizes_mb, repeats)
    parts: dict[str, dict[str, list[float]]] = {}
    for size_mb in sizes_mb:
        rows = parts.setdefault(f"{size_mb}MB", {"open": [], "clone": [], "close": [], "whole": []})
        for _ in range(repeats):
            for part, ms in _hand_off(parent).items():
                rows[part].append(ms)
    parent.recv_bytes()
    process.join(timeout=30)
    return {size: {part: round(statistics.median(values), 3) for part, values in row.items()}
            for size, row in parts.items()}


# What other processes do beside a device section, each as a looping `python -c` program.
_BACKGROUNDS = {
    # fresh processes starting CUDA one after another, as pre-started children do
    "cuda_starts": ("import subprocess, sys\n"
                    "while True: subprocess.run([sys.executable, '-c', "
                    "'import torch; torch.cuda.init(); torch.empty(1, device=\"cuda\")'])"),
    # GPU work of another context, as other children's builds and first forwards are
    "gpu_work": ("import torch\n"
                 "a = torch.randn(4096, 4096, device='cuda')\n"
                 "while True:\n"
                 "    for _ in range(4): a = torch.tanh(a @ a / 64)\n"
                 "    torch.cuda.synchronize()"),
    # processes that take a few GiB of device memory and exit, as retired children do
    "cuda_exits": ("import subprocess, sys\n"
                   "while True: subprocess.run([sys.executable, '-c', "
                   "'import torch; x = torch.empty(2 << 30, dtype=torch.uint8, device=\"cuda\").fill_(1); "
                   "torch.cuda.synchronize()'])"),
    # every core busy, as compiling children are
    "cpu_busy": "while True: pass",
}
_HOW_MANY = {"cuda_starts": 4, "gpu_work": 2, "cuda_exits": 4, "cpu_busy": 0}  # 0: one per core


def _spread_pct(times_ms: list[float]) -> float:
    """IQR over median, in percent, as the evaluator judges a timing's spread (timing.TimingRecord)."""
    from kernelbench_rl.evaluation.timing import TimingRecord

    record = TimingRecord(times_ms=times_ms)
    return 100.0 * record.iqr_ms / record.median_ms


def _event_times_ms(calls: int) -> list[float]:
    """A 4096 x 4096 matmul (about 2.8 ms on an H200, as L1/1) timed as a candidate's call is: event to event
    around it, the device synchronised first."""
    import torch

    a = torch.randn(4096, 4096, device="cuda")
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(calls):
        torch.cuda.synchronize()
        start.record()
        a @ a
        torch.cuda.synchronize()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return times


def _after_idle(gaps_s: tuple[float, ...] = (0.05, 0.3, 1.5), rounds: int = 4) -> dict[str, Any]:
    """The same timed matmul right after the device sat idle for each gap: the median of each call position over
    `rounds` (do the first calls after an idle gap read slower, as a clock that dropped would make them?), and the
    spread of calls 4-53 (after the evaluator's 3 warm-up calls)."""
    out: dict[str, Any] = {}
    for gap in gaps_s:
        positions: list[list[float]] = []
        spreads = []
        for _ in range(rounds):
            time.sleep(gap)
            times = _event_times_ms(53)
            positions.append(times)
            after = times[3:]
            spreads.append(_spread_pct(after))
        by_position = [round(statistics.median(p[i] for p in positions), 3) for i in range(53)]
        out[f"idle_{gap}s"] = {"first_8_calls_ms": by_position[:8], "calls_4_to_53_median_ms": round(statistics.median(
            t for p in positions for t in p[3:]), 3), "calls_4_to_53_spread_pct": round(statistics.median(spreads), 2)}
    return out


def _steps(model: Any, x: Any, flush: Any, repeats: int) -> dict[str, float]:
    """The small steps a device section is made of, medians in ms."""
    import torch

    from kernelbench_rl.evaluation import child

    with torch.no_grad():
        forward = _median_ms(lambda: (model(x), torch.cuda.synchronize()), repeats)
    timed = _event_times_ms(4 * repeats)
    return {"timed_matmul_median": round(statistics.median(timed), 4),
            "timed_matmul_iqr_pct": round(_spread_pct(timed), 2),
            "timed_matmul_max": round(max(timed), 4),
            "flush_and_sync": _median_ms(lambda: (flush.fill_(1), torch.cuda.synchronize()), repeats),
            "forward_and_sync": forward,
            "poison_48MB": _median_ms(lambda: child._poison_allocator(48 << 20), repeats),
            "profiled_forward": _median_ms(lambda: child._profile(model, [x]), max(5, repeats // 3))}


def _under_contention(model: Any, x: Any, flush: Any, repeats: int, settle_s: float) -> dict[str, dict[str, float]]:
    """`_steps` alone, then beside each background of `_BACKGROUNDS` (its processes started `settle_s` before)."""
    import os
    import subprocess

    out = {"alone": _steps(model, x, flush, repeats)}
    for name, program in _BACKGROUNDS.items():
        count = _HOW_MANY[name] or os.cpu_count() or 1
        others = [subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                  for _ in range(count)]
        try:
            time.sleep(settle_s)
            out[f"beside_{name}_x{count}"] = _steps(model, x, flush, repeats)
        finally:
            for other in others:
                other.kill()
            for other in others:
                other.wait()
        # a killed cuda_starts loop's last child still finishes its start: let it, before the next figures
        time.sleep(3.0)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30, help="calls per median (default 30)")
    parser.add_argument("--ipc-sizes-mb", default="4,64,512",
                        help="output sizes of the IPC hand-off, comma-separated MB (default 4,64,512)")
    parser.add_argument("--fresh-processes", type=int, default=5,
                        help="fresh sharing processes for the first-contact IPC figure (default 5)")
    parser.add_argument("--contention", action=argparse.BooleanOptionalAction, default=True,
                        help="also time the small steps beside other processes' CUDA starts, GPU work and busy cores "
                             "(default on)")
    parser.add_argument("--settle-s", type=float, default=4.0,
                        help="seconds the other processes run before the contention figures (default 4)")
    parser.add_argument("--out", default=None, help="also write the figures to this JSON file")
    args = parser.parse_args()
    import torch

    from kernelbench_rl.evaluation import child, timing

    if not torch.cuda.is_available():
        print("host_overhead_probe: needs a CUDA GPU", file=sys.stderr)
        return 2
    from torch.multiprocessing import reductions  # noqa: F401 - loaded before any hand-off is timed
    torch.cuda.init()
    results: dict[str, object] = {"date": time.strftime("%Y-%m-%d"), "gpu": torch.cuda.get_device_name(),
                                  "torch": torch.__version__, "repeats_per_median": args.repeats}
    results["memory_stats_ms"] = _median_ms(lambda: torch.cuda.memory_stats_as_nested_dict("cuda"), args.repeats)
    flush = timing.l2_flush_buffer("cuda")
    results["l2_flush_and_sync_ms"] = _median_ms(lambda: (flush.fill_(1), torch.cuda.synchronize()), args.repeats)
    results["idle_sync_ms"] = _median_ms(torch.cuda.synchronize, args.repeats)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024)).cuda()
    x = torch.randn(256, 1024, device="cuda")
    with torch.no_grad():
        model(x)
    torch.cuda.synchronize()
    results["profile_one_forward_ms"] = _first_and_median_ms(lambda: child._profile(model, [x]), max(5, args.repeats // 3))
    with torch.no_grad():
        results["plain_forward_and_sync_ms"] = _median_ms(lambda: (model(x), torch.cuda.synchronize()), args.repeats)
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, (24 << 30) / total))  # a sandbox-like cap
    for poison_mb in (48, 512):
        results[f"poison_{poison_mb}MB_ms"] = _first_and_median_ms(lambda: child._poison_allocator(poison_mb << 20),
                                                                   args.repeats)
    torch.cuda.set_per_process_memory_fraction(1.0)
    results["ipc_ms"] = _ipc_parts([int(s) for s in args.ipc_sizes_mb.split(",")], args.repeats)
    results["ipc_first_contact"] = _first_contacts(args.fresh_processes, 4, 64)
    results["timed_matmul_after_idle"] = _after_idle()
    if args.contention:
        results["steps_ms_under_contention"] = _under_contention(model, x, flush, args.repeats, args.settle_s)
    report.show(results, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
