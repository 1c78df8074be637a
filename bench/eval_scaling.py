"""Evaluation throughput on 1, 2, 4 ... GPUs of one host, the same candidate mix, in one run: through Dask and through
the plain evaluator (one worker process per GPU, no Dask), and where the time goes when it does not scale.

The mix is eval_throughput.py's without hangs, repeated `--repeat` times, every copy a distinct kernel. Each
configuration gets a fresh engine (`--engine dask`: dask-cuda's LocalCUDACluster and a `DaskEvaluator`; `plain`:
`Evaluator(num_workers=N)`), a warm-up pass (each problem's solution on each worker) before the clock, then the whole
mix at once: the wall until the last verdict, or the verdicts of a `--window-s` window with the queue kept full.
Prints candidates per minute and the ratio to 1 GPU, whether the verdicts agree, and where the time goes (per GPU its
device section's share of the wall, the phases' means, the host's CPU, the driver's and each worker process's CPU).
`--kill-check` SIGKILLs a Dask worker mid-batch and counts lost and duplicated verdicts. JSON: `--out-dir`/scaling.json.

    python bench/eval_scaling.py --out-dir bench/results/scaling --kill-check          # GPU host, 1 vs 2 GPUs, Dask
    python bench/eval_scaling.py --engine plain --gpus 1,2,4 --window-s 60 --out-dir $OUT   # a 4-GPU node, no Dask
    python bench/eval_scaling.py --device cpu --engine plain --gpus 1,2 --out-dir /tmp/scaling   # the machinery only
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402 - after the path set-up above
from eval_throughput import Candidate, mix_for  # noqa: E402
from harness import say  # noqa: E402

# A hang measures the timeout, not throughput: it would pin both walls to the same floor.
SCALING_KINDS = ("correct", "wrong_constant", "off_by_one", "missing_bias", "raises", "illegal_access")


# ---------------------------------------------------------------- clusters


def start_cluster(device: str, workers: int, threads: int) -> tuple[Any, str]:
    """A fresh Dask cluster of `workers` workers on this host: (cluster, what it is)."""
    if device == "cpu":
        from distributed import LocalCluster

        return (LocalCluster(n_workers=workers, threads_per_worker=threads, processes=True, dashboard_address=None,
                             memory_limit=0),
                f"distributed.LocalCluster({workers} CPU workers)")
    devices = ",".join(str(i) for i in range(workers))
    try:
        from dask_cuda import LocalCUDACluster

        return (LocalCUDACluster(CUDA_VISIBLE_DEVICES=devices, threads_per_worker=threads, dashboard_address=None,
                                 memory_limit=0),
                f"dask_cuda.LocalCUDACluster(CUDA_VISIBLE_DEVICES={devices})")
    except Exception as exc:  # noqa: BLE001 - no dask_cuda, or one that cannot start here
        # What LocalCUDACluster does, by hand: one nanny per GPU, its GPU first in CUDA_VISIBLE_DEVICES.
        from distributed import Nanny, Scheduler, SpecCluster

        ids = devices.split(",")
        spec = {
            f"gpu{i}": {"cls": Nanny, "options": {"nthreads": threads, "memory_limit": 0, "env": {
                "CUDA_VISIBLE_DEVICES": ",".join(ids[i:] + ids[:i])}}}
            for i in range(workers)
        }
        scheduler = {"cls": Scheduler, "options": {"dashboard_address": None}}
        return SpecCluster(workers=spec, scheduler=scheduler), f"SpecCluster, one nanny per GPU (no dask_cuda: {exc})"


def _copy(candidate: Candidate, copy: int, settings: Any, request_id: str) -> Any:
    """The request for copy number `copy` of `candidate`: a trailing comment makes each copy a distinct kernel, so none
    is deduplicated."""
    from kernelbench_rl.evaluation.result import EvalRequest

    return EvalRequest(candidate.problem_id, f"{candidate.source}\n# scaling copy {copy}\n", settings, request_id=request_id)


# ---------------------------------------------------------------- one configuration


def run_configuration(engine: str, workers: int, candidates: list[Candidate], args: argparse.Namespace, db: str,
                      kill_check: bool) -> dict[str, Any]:
    from kernelbench_rl.evaluation.front.api import Evaluator
    from kernelbench_rl.evaluation.cluster.cluster import DaskEvaluator

    settings = harness.eval_settings(args)
    store = None
    try:  # baselines shared through DuckDB, as in training; the GPU image has no duckdb (each worker times its own)
        from kernelbench_rl.store import Store

        store = Store(db)
    except ImportError:
        pass
    t0 = time.perf_counter()
    cluster = None
    tag = f"[{engine}, {workers} GPU(s)]" if args.device == "cuda" else f"[{engine}, {workers} worker(s)]"
    figures: dict[str, Any] = {"engine": engine, "workers": workers}
    try:
        if engine == "dask":
            cluster, what = start_cluster(args.device, workers, args.threads)
            evaluator = DaskEvaluator(settings, cluster=cluster.scheduler_address, store=store,
                                      ready_timeout_s=args.ready_timeout)
        else:
            what = f"Evaluator(num_workers={workers}): one worker process per GPU, no Dask"
            evaluator = Evaluator(settings, num_workers=workers, store=store)
        figures["cluster"] = what
        with evaluator:
            evaluator.start()
            if engine == "dask":
                statuses = evaluator.pool.statuses()
                figures["pools"] = statuses
                figures["slots"] = sum(int(s.get("slots", 0)) for s in statuses.values())
                where = ", ".join(f"{a} {s.get('hardware')} {s.get('state')}" for a, s in statuses.items())
            else:
                infos = evaluator.pool.wait_ready()
                figures["pools"] = [{"hardware": i.get("hardware"), "gpu": (i.get("versions") or {}).get("gpu"),
                                     "cores": (i.get("versions") or {}).get("cores")} for i in infos]
                figures["slots"] = workers * evaluator.in_flight
                where = "; ".join(f"GPU {p['gpu']} ({p['cores']})" for p in figures["pools"])
            figures["pool_start_s"] = round(time.perf_counter() - t0, 2)
            say(f"{tag} {what}: ready in {figures['pool_start_s']} s, {figures['slots']} evaluation slots: {where}")
            # Warm-up: each problem's solution on each worker (distinct copies, so none is deduplicated): every worker
            # has its references and baselines before the clock starts. Dask pins them to each worker; the plain
            # pool's shared queue spreads N copies of each over its N workers (most, not surely all, see each problem).
            problems = {c.problem_id: c for c in candidates if c.kind == "correct"}
            t_warm = time.perf_counter()
            if engine == "dask":
                def warm(w: int, address: str) -> list[Any]:
                    with evaluator.pool.pinned([address]):
                        return evaluator.evaluate([_copy(c, -1 - w, settings, f"warm/{pid}/{w}") for pid, c in problems.items()])

                with ThreadPoolExecutor(max(1, len(statuses))) as threads:
                    warmed = [r for done in threads.map(warm, range(len(statuses)), sorted(statuses)) for r in done]
            else:
                warmed = evaluator.evaluate([_copy(c, -1 - w, settings, f"warm/{pid}/{w}")
                                             for w in range(workers) for pid, c in problems.items()])
            figures["warmup_s"] = round(time.perf_counter() - t_warm, 2)
            say(f"{tag} warm-up: {len(warmed)} evaluations in {figures['warmup_s']} s "
                f"(each problem on each worker), {sum(r.correct for r in warmed)} correct")
            figures.update(measure(evaluator, engine, candidates, settings, args, tag))
            if kill_check and engine == "dask":
                figures["kill_check"] = kill_mid_batch(evaluator, candidates, settings, args)
            harness.save_worker_logs(evaluator, str(Path(args.out_dir) / "scaling_worker_logs.txt"), 60,
                                     title=f"{engine}, {workers} worker(s)")
    finally:
        if cluster is not None:
            try:
                cluster.close(timeout=60)
            except Exception as exc:  # noqa: BLE001 - the figures are what matter
                say(f"cluster close: {type(exc).__name__}: {exc}")
    return figures


def measure(evaluator: Any, engine: str, candidates: list[Candidate], settings: Any, args: argparse.Namespace,
            tag: str) -> dict[str, Any]:
    """The measured batch: the whole mix `--repeat` times at once, its wall (or the verdicts of `--window-s`), and where
    the time went meanwhile (TimeAccount, per-GPU figures)."""
    requests = [_copy(c, copy, settings, f"{c.label}#{copy}") for copy in range(args.repeat) for c in candidates]
    calls: Counter[int] = Counter()
    done_at: dict[int, float] = {}
    got: dict[int, Any] = {}
    # The static policy runs on the driver whatever the engine (and every mutant passes it): off for the measured
    # batch, so the clock times the evaluation alone.
    evaluator.static_checks = False
    account = TimeAccount(eval_worker_pids(evaluator, engine))
    t_mix = time.perf_counter()

    def seen(index: int, result: Any) -> None:
        calls.update([index])
        done_at.setdefault(index, time.perf_counter() - t_mix)
        got.setdefault(index, result)

    if args.window_s:
        # Throughput over a fixed window with more work queued than it can finish: no tail, and the same device time
        # for every configuration. What is unfinished at the end is cancelled (Dask) or left to the pool's close
        # (plain: the evaluate call is not waited for).
        runner = threading.Thread(target=lambda: evaluator.evaluate(requests, on_result=seen), daemon=True)
        runner.start()
        runner.join(args.window_s)
        wall = float(args.window_s)
        spent = account.stop(wall)
        if engine == "dask":
            evaluator.pool.cancel_pending("the measurement window closed")
            runner.join(120)
        counted = [i for i, at in list(done_at.items()) if at <= wall]
        if len(counted) == len(requests):  # the queue ran dry inside the window: its wall is the last verdict's
            wall = max(done_at.values())
            say(f"{tag} every queued candidate finished inside the window: raise --repeat")
    else:
        evaluator.evaluate(requests, on_result=seen)
        wall = time.perf_counter() - t_mix
        spent = account.stop(wall)
        counted = list(range(len(requests)))
    evaluator.static_checks = True
    in_window = [(i, got[i]) for i in sorted(counted) if i in got]
    counted_ok = [(i, r) for i, r in in_window if r.error_category.value != "infra"]
    figures = {
        "candidates": len(counted_ok), "submitted": len(requests), "wall_s": round(wall, 2), "window": bool(args.window_s),
        "per_minute": round(60.0 * len(counted_ok) / wall, 2) if wall > 0 else None,
        "infra": sum(r.error_category.value == "infra" for _, r in in_window),
        "correct": sum(bool(r.correct) for _, r in in_window),
        "verdicts": {requests[i].request_id: [r.error_category.value, bool(r.correct)] for i, r in counted_ok},
        "duplicated_callbacks": sum(1 for n in calls.values() if n > 1),
        "per_gpu": per_gpu(counted_ok, wall),
        "phase_means_s": phase_means(counted_ok),
        "time_account": spent,
    }
    say(f"{tag} {len(counted_ok)} verdicts in {wall:.1f} s"
        f"{' (window; ' + str(len(requests)) + ' queued)' if args.window_s else ''}: "
        f"{figures['per_minute']} per minute, {figures['correct']} correct, {figures['infra']} infra")
    for card, row in figures["per_gpu"].items():
        say(f"{tag}   GPU {card}: {row['verdicts']} verdicts, device section busy {row['device_busy']:.0%} of the wall")
    say(f"{tag}   host CPU busy {spent['host_cpu_busy']:.0%}; driver process {spent['driver_cpu_cores']:.2f} cores; "
        f"evaluation workers {', '.join(f'{c:.2f}' for c in spent['eval_worker_cpu_cores'])} cores each")
    return figures


# With --budget-s: a configuration's start, warm-up and close until one has been measured, and the shortest window.
OVERHEAD_GUESS_S = 45.0
MIN_WINDOW_S = 10.0


# The phases of a verdict (its result's phase_seconds) that say where its time went: CPU-side work in its child
# (compile, build, first_call), waits (compile_wait for a compile slot, device_wait for the device), the device section.
PHASES = ("compile_wait", "compile", "build", "first_call", "device_wait", "device_section", "worker_total")


def per_gpu(results: list[tuple[int, Any]], wall: float) -> dict[str, dict[str, Any]]:
    """Per card that timed them (versions' `gpu`): verdicts, and the share of the wall its device sections took."""
    cards: dict[str, dict[str, Any]] = {}
    for _, result in results:
        card = str(result.versions.get("gpu") or "?")
        row = cards.setdefault(card, {"verdicts": 0, "device_section_s": 0.0})
        row["verdicts"] += 1
        row["device_section_s"] += float(result.phase_seconds.get("device_section", 0.0))
    for row in cards.values():
        row["device_section_s"] = round(row["device_section_s"], 2)
        row["device_busy"] = round(row["device_section_s"] / wall, 3) if wall > 0 else 0.0
    return dict(sorted(cards.items()))


def phase_means(results: list[tuple[int, Any]]) -> dict[str, float]:
    out = {}
    for phase in PHASES:
        values = [float(r.phase_seconds[phase]) for _, r in results if phase in r.phase_seconds]
        if values:
            out[phase] = round(sum(values) / len(values), 3)
    return out


def _cpu_seconds(pid: int) -> float | None:
    """User and system CPU seconds of a process so far (/proc), None when it is gone."""
    fields = harness.proc_stat(pid)
    return None if fields is None else (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _host_jiffies() -> tuple[int, int]:
    """(busy, total) CPU time of the whole host so far (/proc/stat); (0, 0) where unreadable."""
    try:
        with open("/proc/stat") as handle:
            values = [int(v) for v in handle.readline().split()[1:]]
    except (OSError, ValueError):
        return 0, 0
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle and iowait
    return sum(values) - idle, sum(values)


class TimeAccount:
    """Where the CPU went during a measurement: the whole host's busy share, the driver process (the client, and a
    local Dask cluster's scheduler, which runs in it), and each evaluation worker process (its own Python: one that
    stays near a full core limits its GPU however many GPUs there are)."""

    def __init__(self, worker_pids: list[int]) -> None:
        self.worker_pids = list(worker_pids)
        self.host = _host_jiffies()
        self.driver = _cpu_seconds(os.getpid()) or 0.0
        self.workers = [_cpu_seconds(pid) for pid in self.worker_pids]

    def stop(self, wall: float) -> dict[str, Any]:
        busy, total = _host_jiffies()
        driver = _cpu_seconds(os.getpid()) or 0.0
        workers = []
        for pid, before in zip(self.worker_pids, self.workers):
            after = _cpu_seconds(pid)
            workers.append(round((after - before) / wall, 2) if before is not None and after is not None and wall > 0 else 0.0)
        return {
            "host_cpu_busy": round((busy - self.host[0]) / max(1, total - self.host[1]), 3),
            "host_cpus": os.cpu_count(),
            "driver_cpu_cores": round((driver - self.driver) / wall, 2) if wall > 0 else 0.0,
            "eval_worker_cpu_cores": workers,
        }


def _pool_pids(plugin_name: str, dask_worker: Any = None) -> list[int]:
    """(On a Dask worker, through Client.run.) The evaluation worker processes of its pool."""
    plugin = (dask_worker.plugins if dask_worker is not None else {}).get(plugin_name)
    pool = getattr(plugin, "pool", None)
    return list(pool.worker_pids) if pool is not None else []


def eval_worker_pids(evaluator: Any, engine: str) -> list[int]:
    if engine != "dask":
        return list(evaluator.pool.worker_pids)
    try:
        found = evaluator.client.run(_pool_pids, evaluator.plugin.name, on_error="return")
    except Exception:  # noqa: BLE001 - the account goes without them
        return []
    return [pid for pids in found.values() if isinstance(pids, list) for pid in pids]


def where_the_time_goes(one: dict[str, Any], many: dict[str, Any]) -> dict[str, Any]:
    """Configuration `many` against 1 GPU: how close to linear, and which figures moved (the readings say which
    limit they point at)."""
    n = many["workers"]
    ratio = many["per_minute"] / one["per_minute"] if one.get("per_minute") and many.get("per_minute") else None
    busy_one = [r["device_busy"] for r in one.get("per_gpu", {}).values()]
    busy_many = [r["device_busy"] for r in many.get("per_gpu", {}).values()]
    out: dict[str, Any] = {
        "ratio": round(ratio, 3) if ratio else None, "efficiency": round(ratio / n, 3) if ratio else None,
        "device_busy_per_gpu": {"1": busy_one, str(n): busy_many},
        "phase_growth": {p: round(many["phase_means_s"][p] / one["phase_means_s"][p], 2)
                         for p in PHASES if one.get("phase_means_s", {}).get(p) and p in many.get("phase_means_s", {})},
        "host_cpu_busy": {"1": one["time_account"]["host_cpu_busy"], str(n): many["time_account"]["host_cpu_busy"]},
        "driver_cpu_cores": {"1": one["time_account"]["driver_cpu_cores"], str(n): many["time_account"]["driver_cpu_cores"]},
        "max_eval_worker_cpu_cores": {k: max(c["time_account"]["eval_worker_cpu_cores"] or [0.0])
                                      for k, c in (("1", one), (str(n), many))},
    }
    readings = []
    if ratio and ratio >= 0.9 * n:
        readings.append(f"scales: {ratio:.2f}x on {n} GPUs")
    mean_one = sum(busy_one) / len(busy_one) if busy_one else 0.0
    mean_many = sum(busy_many) / len(busy_many) if busy_many else 0.0
    if mean_one and mean_many < 0.8 * mean_one:
        readings.append(f"each GPU's device section busy {mean_many:.0%} of the wall against {mean_one:.0%} alone: the "
                        "GPUs wait for work (compiles on the host's CPU, the worker's own Python, or the scheduler/client)")
    slower = {p: g for p, g in out["phase_growth"].items() if p in ("compile", "build", "first_call") and g >= 1.25}
    if slower:
        readings.append("CPU-side phases slower than on 1 GPU (" + ", ".join(f"{p} {g}x" for p, g in slower.items())
                        + "): the host's CPU is shared")
    if out["host_cpu_busy"][str(n)] >= 0.85:
        readings.append(f"the host's CPU is saturated ({out['host_cpu_busy'][str(n)]:.0%} of all cores busy)")
    if out["driver_cpu_cores"][str(n)] >= 0.8:
        readings.append(f"the driver process (client, and a local Dask scheduler) used {out['driver_cpu_cores'][str(n)]:.2f} "
                        "cores: it may be what feeds the GPUs too slowly")
    if out["max_eval_worker_cpu_cores"][str(n)] >= 0.8:
        readings.append(f"an evaluation worker process used {out['max_eval_worker_cpu_cores'][str(n)]:.2f} cores: its "
                        "own Python (GIL) limits its GPU")
    out["readings"] = readings or ["no single figure stands out"]
    return out


def kill_mid_batch(evaluator: Any, candidates: list[Candidate], settings: Any, args: argparse.Namespace) -> dict[str, Any]:
    """SIGKILL a busy worker once a quarter of a batch is in; count lost and duplicated verdicts."""
    client = evaluator.client
    pids = client.run(os.getpid)
    batch = candidates[: args.kill_limit] if args.kill_limit else candidates
    requests = [_copy(c, 1000, settings, f"kill/{c.label}") for c in batch]
    calls: Counter[int] = Counter()
    killed: dict[str, Any] = {}

    def killer() -> None:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            busy = {w: len(t) for w, t in client.processing().items() if t}
            if busy and sum(calls.values()) >= max(1, len(requests) // 4):
                victim = max(busy, key=busy.get)
                killed.update({"worker": victim, "pid": pids.get(victim), "in_flight_there": busy[victim],
                               "verdicts_before": sum(calls.values())})
                os.kill(pids[victim], signal.SIGKILL)
                return
            time.sleep(0.05)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    t0 = time.perf_counter()
    results = evaluator.evaluate(requests, on_result=lambda i, _r: calls.update([i]))
    wall = time.perf_counter() - t0
    thread.join(timeout=1)
    lost = [i for i in range(len(requests)) if calls[i] == 0 or results[i].error_category.value == "infra"]
    duplicated = [i for i, n in calls.items() if n > 1]
    report = {"killed": killed, "requests": len(requests), "verdicts": sum(calls.values()), "lost": len(lost),
              "duplicated": len(duplicated), "wall_s": round(wall, 2),
              "lost_labels": [requests[i].request_id for i in lost][:20],
              "infra_messages": sorted({results[i].error_message for i in lost if results[i].error_message})[:5]}
    say(f"kill check: killed {killed.get('worker', 'nothing')} with {killed.get('in_flight_there', 0)} evaluations "
        f"on it; {report['verdicts']} verdicts for {len(requests)} requests, {report['lost']} lost, "
        f"{report['duplicated']} duplicated")
    return report


def _gpu_count() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:  # noqa: BLE001
        return 0


def parse_gpus(text: str | None, workers: int) -> list[int]:
    """--gpus "1,2,4" (default: 1 and --workers), ascending, 1 always first (the ratios' base)."""
    return sorted({1, *(harness.parse_numbers(text, "--gpus", "1,2,4") if text else [workers])})


def compare_with_one(summary: dict[str, Any], engine: str, runs: dict[str, Any]) -> None:
    """Each configuration of `engine` against its 1-GPU run: the ratio, where the time goes, verdicts that differ."""
    one = runs.get("1", {})
    for key, run in runs.items():
        if key == "1" or "per_minute" not in run or "per_minute" not in one:
            continue
        account = summary["where_the_time_goes"].setdefault(engine, {})[key] = where_the_time_goes(one, run)
        summary["ratios"].setdefault(engine, {})[key] = account["ratio"]
        both = sorted(set(one["verdicts"]) & set(run["verdicts"]))
        mismatched = [(k, one["verdicts"][k], run["verdicts"][k]) for k in both if one["verdicts"][k] != run["verdicts"][k]]
        summary["verdicts_agree"].setdefault(engine, {})[key] = {"compared": len(both), "agree": not mismatched,
                                                                  "mismatches": mismatched[:20]}


def print_summary(summary: dict[str, Any], engines: list[str]) -> None:
    say("")
    harness.print_table(["engine, GPUs", "verdicts", "wall s", "per min", "ratio", "slots"], [
        [f"{engine}, {key}" + ("" if "per_minute" in run else f" failed: {run.get('error')}"), run.get("candidates"),
         run.get("wall_s"), run.get("per_minute"), summary["ratios"].get(engine, {}).get(key), run.get("slots")]
        for engine in engines for key, run in summary["runs"][engine].items()])
    for engine in engines:
        for key, account in summary["where_the_time_goes"].get(engine, {}).items():
            agree = summary["verdicts_agree"][engine][key]
            say(f"{engine} 1 -> {key}: {account['ratio']}x ({account['efficiency']} of linear); verdicts agree on the "
                f"{agree['compared']} both finished: {agree['agree']}; " + "; ".join(account["readings"]))
        kill = summary["runs"][engine].get(str(max(summary["configurations"])), {}).get("kill_check")
        if kill:
            say(f"kill check ({engine}): {kill['lost']} lost, {kill['duplicated']} duplicated of {kill['requests']}")


def run(args: argparse.Namespace) -> int:
    gpus = parse_gpus(args.gpus, args.workers)
    args.size = None  # real on cuda, small on cpu
    args.repeat = args.repeat or (12 if args.window_s else 4 if args.device == "cuda" else 3)
    if args.device == "cuda" and _gpu_count() < max(gpus):
        raise harness.BadInput(f"This host has {_gpu_count()} GPU(s) and {max(gpus)} are needed (or use --device cpu).")
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    candidates = mix_for(args, SCALING_KINDS)
    say(f"{len(candidates)} candidates x {args.repeat}: " + ", ".join(c.label for c in candidates))
    engines = ["plain", "dask"] if args.engine == "both" else [args.engine]
    summary: dict[str, Any] = {
        "device": args.device, "host": platform.node(), "cpus": os.cpu_count(), "gpus": _gpu_count(),
        "environment": harness.environment(args.device),
        "mix": [c.label for c in candidates], "repeat": args.repeat, "trials": args.correctness_trials,
        "timing_trials": args.timing_trials, "window_s": args.window_s, "configurations": gpus, "runs": {},
        "ratios": {}, "where_the_time_goes": {}, "verdicts_agree": {},
    }
    report = harness.JsonReport(str(out_dir / "scaling.json"), lambda: summary)
    planned = [(engine, workers) for engine in engines for workers in gpus]
    overheads: list[float] = []  # seconds each configuration took beyond its window (start, warm-up, close)
    window_cap = args.window_s
    with tempfile.TemporaryDirectory(prefix="kbrl-scaling-") as tmp:
        for engine in engines:
            runs = summary["runs"].setdefault(engine, {})
            for workers in gpus:
                planned.pop(0)
                if args.budget_s and window_cap:
                    # What is left, shared between this configuration and those after it, less each one's overhead.
                    left = harness.left_of(args.budget_s, args)
                    overhead = 1.25 * max(overheads) if overheads else OVERHEAD_GUESS_S  # more GPUs start slower
                    args.window_s = round(min(window_cap, max(MIN_WINDOW_S, left / (len(planned) + 1) - overhead)), 1)
                    say(f"[{engine}, {workers}] window {args.window_s} s ({left:.0f} s left for {len(planned) + 1} "
                        f"configuration(s), {overhead:.0f} s overhead each)")
                mark = time.perf_counter()
                db = str(Path(tmp) / f"scaling_{engine}_{workers}.duckdb")  # each run computes its own baselines
                try:
                    runs[str(workers)] = run_configuration(engine, workers, candidates, args, db,
                                                           kill_check=args.kill_check and workers == max(gpus) > 1)
                    runs[str(workers)]["window_s"] = args.window_s
                    overheads.append(time.perf_counter() - mark - (args.window_s or 0.0))
                except Exception as exc:  # noqa: BLE001 - the other configurations still count
                    runs[str(workers)] = {"engine": engine, "workers": workers, "error": f"{type(exc).__name__}: {exc}"[:300]}
                    say(f"[{engine}, {workers}] failed: {runs[str(workers)]['error']}")
                report.write()
            compare_with_one(summary, engine, runs)
            report.write()
    say(f"wrote {out_dir / 'scaling.json'}")
    print_summary(summary, engines)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    harness.add_trials(parser, correctness=5, warmup=3, timing=None, timeout=None)  # timed 100 (cuda) or 3 (cpu); timeout 60 or 30 s
    parser.add_argument("--engine", choices=["dask", "plain", "both"], default="dask",
                        help="dask: a LocalCUDACluster, one worker per GPU; plain: Evaluator(num_workers=N), one worker "
                             "process per GPU, no Dask; both: each, plain first")
    parser.add_argument("--workers", type=int, default=2, help="workers (GPUs) of the scaled configuration")
    parser.add_argument("--gpus", default=None, help="the configurations, e.g. 1,2,4 (default: 1 and --workers)")
    parser.add_argument("--quick", action="store_true", help="the smaller mix (GPU)")
    parser.add_argument("--repeat", type=int, default=None, help="copies of the mix per run (default 4 cuda, 3 cpu)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N candidates of the mix")
    parser.add_argument("--threads", type=int, default=32, help="threads per Dask worker (>= its evaluation slots)")
    parser.add_argument("--ready-timeout", type=float, default=240.0, help="seconds for the pools to start")
    parser.add_argument("--kill-check", action="store_true", help="then SIGKILL a Dask worker mid-batch and count verdicts")
    parser.add_argument("--kill-limit", type=int, default=None, help="candidates in the kill batch (default: the mix)")
    parser.add_argument("--window-s", type=float, default=None,
                        help="measure verdicts finished in this many seconds with the queue kept full (repeat is "
                             "raised to keep it full) instead of the wall of the whole mix")
    parser.add_argument("--budget-s", type=float, default=None,
                        help="with --window-s (then a cap): share this many seconds out among the configurations, each "
                             "window what is left after the others' start, warm-up and close")
    parser.add_argument("--out-dir", default="bench/results/eval_scaling", help="scaling.json goes here")
    return harness.run_main(run, parser.parse_args(argv))

if __name__ == "__main__":
    raise SystemExit(main())
