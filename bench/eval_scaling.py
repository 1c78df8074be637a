"""Evaluation throughput on 1 GPU and on 2 GPUs through Dask, the same candidate mix, in one run.

The mix is bench/eval_throughput.py's (bundled solutions and mutants of them that are wrong or
fault), repeated `--repeat` times with a comment that makes every copy a distinct kernel (nothing is
deduplicated or served from a cache). Each configuration gets a fresh Dask cluster on this host
(dask-cuda's LocalCUDACluster, one worker per GPU; a plain LocalCluster of CPU workers with
`--device cpu`) and a `DaskEvaluator` on it. Before the clock starts, a warm-up pass evaluates each
problem's solution once per worker, so baselines (kept in a temporary DuckDB file, as in training)
and reference outputs exist on every worker, as they do after an RL run's first step; then the
whole mix goes out at once and the wall until the last verdict is the figure. Prints candidates per
minute on 1 and on N workers and their ratio, checks that both runs reached the same verdicts, and
with `--kill-check` SIGKILLs one worker in the middle of a further batch on the N-worker cluster and
counts lost (no verdict, or `infra`) and duplicated (more than one) verdicts. JSON under `--out-dir`.

    python bench/eval_scaling.py --out-dir bench/results/scaling --kill-check          # GPU host, 1 vs 2 GPUs
    python bench/eval_scaling.py --device cpu --out-dir /tmp/scaling --kill-check      # offline smoke, tiny mix
    python bench/eval_scaling.py --device cpu --parity --out-dir /tmp/scaling          # verdicts: local vs Dask
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "bench"))

from eval_throughput import CPU_MIX, FULL_MIX, QUICK_MIX, Candidate, build_mix  # noqa: E402

# A hang measures the timeout, not throughput: it would pin both walls to the same floor.
SCALING_KINDS = ("correct", "wrong_constant", "off_by_one", "missing_bias", "raises", "illegal_access")


def say(text: str) -> None:
    print(text, flush=True)


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


def _distinct(candidate: Candidate, copy: int) -> str:
    return f"{candidate.source}\n# scaling copy {copy}\n"


# ---------------------------------------------------------------- one configuration


def run_configuration(workers: int, candidates: list[Candidate], args: argparse.Namespace, db: str,
                      kill_check: bool) -> dict[str, Any]:
    from kernelbench_rl.evaluation.cluster import DaskEvaluator
    from kernelbench_rl.evaluation.result import EvalRequest

    settings = _settings(args)
    store = None
    try:  # baselines shared through DuckDB, as in training; the GPU image has no duckdb (each worker times its own)
        from kernelbench_rl.store import Store

        store = Store(db)
    except ImportError:
        pass
    t0 = time.perf_counter()
    cluster, what = start_cluster(args.device, workers, args.threads)
    figures: dict[str, Any] = {"workers": workers, "cluster": what}
    try:
        evaluator = DaskEvaluator(settings, cluster=cluster.scheduler_address, store=store,
                                  ready_timeout_s=args.ready_timeout)
        with evaluator:
            evaluator.start()
            statuses = evaluator.pool.statuses()
            figures["pools"] = statuses
            figures["slots"] = sum(int(s.get("slots", 0)) for s in statuses.values())
            figures["pool_start_s"] = round(time.perf_counter() - t0, 2)
            say(f"[{workers} worker(s)] {what}: pools ready in {figures['pool_start_s']} s, "
                f"{figures['slots']} evaluation slots: " + ", ".join(
                    f"{a} {s.get('hardware')} {s.get('state')}" for a, s in statuses.items()))
            # Warm-up: each problem's solution on each worker (pinned there; distinct copies, so none is
            # deduplicated): every worker has its references and baselines before the clock starts.
            problems = {c.problem_id: c for c in candidates if c.kind == "correct"}
            t_warm = time.perf_counter()
            warmed: list[Any] = []

            def warm(w: int, address: str) -> None:
                with evaluator.pool.pinned([address]):
                    warmed.extend(evaluator.evaluate([
                        EvalRequest(pid, _distinct(c, -1 - w), settings, request_id=f"warm/{pid}/{w}")
                        for pid, c in problems.items()]))

            threads = [threading.Thread(target=warm, args=(w, a), daemon=True) for w, a in enumerate(sorted(statuses))]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            figures["warmup_s"] = round(time.perf_counter() - t_warm, 2)
            say(f"[{workers} worker(s)] warm-up: {len(warmed)} evaluations in {figures['warmup_s']} s "
                f"(each problem on each worker), {sum(r.correct for r in warmed)} correct")

            requests, labels = [], []
            for copy in range(args.repeat):
                for c in candidates:
                    requests.append(EvalRequest(c.problem_id, _distinct(c, copy), settings, request_id=f"{c.label}#{copy}"))
                    labels.append(c.label)
            calls: Counter[int] = Counter()
            done_at: dict[int, float] = {}
            # The static policy runs on the driver whatever the cluster (and every mutant passes it): off for
            # the measured batch, so the clock times the cluster alone.
            evaluator.static_checks = False
            t_mix = time.perf_counter()

            def seen(index: int, _result: Any) -> None:
                calls.update([index])
                done_at.setdefault(index, time.perf_counter() - t_mix)

            if args.window_s:
                # Throughput over a fixed window with more work queued than it can finish: no tail, and the
                # same device time for every configuration. What is unfinished at the end is cancelled.
                box: list[Any] = []
                runner = threading.Thread(target=lambda: box.append(evaluator.evaluate(requests, on_result=seen)),
                                          daemon=True)
                runner.start()
                runner.join(args.window_s)
                evaluator.pool.cancel_pending("the measurement window closed")
                runner.join(120)
                results = box[0] if box else []
                wall = float(args.window_s)
                counted = [i for i, at in done_at.items() if at <= wall]
                if len(counted) == len(requests):  # the queue ran dry inside the window: its wall is the last verdict's
                    wall = max(done_at.values())
                    say(f"[{workers} worker(s)] every queued candidate finished inside the window: raise --repeat")
            else:
                results = evaluator.evaluate(requests, on_result=seen)
                wall = time.perf_counter() - t_mix
                counted = list(range(len(requests)))
            in_window = [(i, results[i]) for i in sorted(counted) if i < len(results)]
            counted_ok = [(i, r) for i, r in in_window if r.error_category.value != "infra"]
            figures.update({
                "candidates": len(counted_ok), "submitted": len(requests), "wall_s": round(wall, 2),
                "window": bool(args.window_s),
                "per_minute": round(60.0 * len(counted_ok) / wall, 2) if wall > 0 else None,
                "infra": sum(r.error_category.value == "infra" for _, r in in_window),
                "correct": sum(bool(r.correct) for _, r in in_window),
                "verdicts": {requests[i].request_id: [r.error_category.value, bool(r.correct)] for i, r in counted_ok},
                "duplicated_callbacks": sum(1 for n in calls.values() if n > 1),
            })
            say(f"[{workers} worker(s)] {len(counted_ok)} verdicts in {wall:.1f} s"
                f"{' (window; ' + str(len(requests)) + ' queued)' if args.window_s else ''}: "
                f"{figures['per_minute']} per minute, {figures['correct']} correct, {figures['infra']} infra")
            evaluator.static_checks = True
            if kill_check:
                figures["kill_check"] = kill_mid_batch(evaluator, candidates, settings, args)
            _save_pool_logs(evaluator, Path(args.out_dir) / "scaling_worker_logs.txt", workers)
    finally:
        try:
            cluster.close(timeout=60)
        except Exception as exc:  # noqa: BLE001 - the figures are what matter
            say(f"cluster close: {type(exc).__name__}: {exc}")
    return figures


def _save_pool_logs(evaluator: Any, path: Path, workers: int) -> None:
    from kernelbench_rl.evaluation.dask_worker import pool_log_tail

    try:
        tails = evaluator.client.run(pool_log_tail, evaluator.plugin.name, 60, on_error="return")
    except Exception as exc:  # noqa: BLE001
        tails = {"?": f"could not read the pools' logs: {exc}"}
    with open(path, "a") as handle:
        for address, text in tails.items():
            handle.write(f"#### {workers} worker(s): {address}\n{text}\n")


def kill_mid_batch(evaluator: Any, candidates: list[Candidate], settings: Any, args: argparse.Namespace) -> dict[str, Any]:
    """SIGKILL a busy worker once a quarter of a batch is in; count lost and duplicated verdicts."""
    from kernelbench_rl.evaluation.result import EvalRequest

    client = evaluator.client
    pids = client.run(os.getpid)
    batch = candidates[: args.kill_limit] if args.kill_limit else candidates
    requests = [EvalRequest(c.problem_id, _distinct(c, 1000), settings, request_id=f"kill/{c.label}") for c in batch]
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


def parity(args: argparse.Namespace, out_dir: Path) -> dict[str, Any]:
    """Every bundled solution and every red-team case of this device through the local Evaluator and
    through a DaskEvaluator on a 2-worker cluster: the same verdicts (category, correct, flags)?"""
    import dataclasses

    sys.path.insert(0, str(REPO_ROOT / "tests"))
    from hacks.hack_cases import CASES

    from kernelbench_rl.evaluation.api import Evaluator
    from kernelbench_rl.evaluation.cluster import DaskEvaluator
    from kernelbench_rl.evaluation.result import EvalRequest
    from kernelbench_rl.problems import list_solutions

    base = _settings(args)
    requests = [EvalRequest(pid, path.read_text(), base, request_id=f"solution/{pid}") for pid, path in list_solutions()]
    for case in CASES:
        if args.device in case.devices:
            settings = dataclasses.replace(base, **case.settings_overrides())
            requests.append(EvalRequest(case.problem_id, case.source, settings, request_id=f"hack/{case.name}"))

    def verdict(r: Any) -> list[Any]:
        return [r.error_category.value, bool(r.correct), sorted(r.flags)]

    t0 = time.perf_counter()
    with Evaluator(base) as local:
        expected = local.evaluate(requests)
    local_s = time.perf_counter() - t0
    cluster, what = start_cluster(args.device, 2, args.threads)
    try:
        t0 = time.perf_counter()
        with DaskEvaluator(base, cluster=cluster.scheduler_address, ready_timeout_s=args.ready_timeout) as dask_ev:
            got = dask_ev.evaluate(requests)
        dask_s = time.perf_counter() - t0
    finally:
        cluster.close(timeout=60)
    rows = [{"request": q.request_id, "local": verdict(a), "dask": verdict(b)} for q, a, b in zip(requests, expected, got)]
    mismatches = [r for r in rows if r["local"] != r["dask"]]
    report = {"cluster": what, "requests": len(requests), "agree": len(rows) - len(mismatches),
              "mismatches": mismatches, "local_s": round(local_s, 1), "dask_s": round(dask_s, 1), "rows": rows}
    (out_dir / "parity.json").write_text(json.dumps(report, indent=2))
    say(f"parity: {report['agree']}/{len(requests)} verdicts agree between the local and the Dask evaluator "
        f"({sum(r.startswith('solution/') for r in (q.request_id for q in requests))} bundled solutions, "
        f"{sum(r.startswith('hack/') for r in (q.request_id for q in requests))} red-team cases; "
        f"local {local_s:.0f} s, Dask {dask_s:.0f} s incl. start-up)")
    for row in mismatches:
        say(f"  differs: {row['request']}: local {row['local']} dask {row['dask']}")
    return report


def _settings(args: argparse.Namespace) -> Any:
    from kernelbench_rl.evaluation.result import EvalSettings

    size = "real" if args.device == "cuda" else "small"
    return EvalSettings(device=args.device, size=size, correctness_trials=args.trials,
                        timing_trials=args.timing_trials, warmup_trials=3, timeout_s=args.timeout)


def _gpu_count() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:  # noqa: BLE001
        return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--workers", type=int, default=2, help="workers (GPUs) of the scaled configuration")
    parser.add_argument("--quick", action="store_true", help="the smaller mix (GPU)")
    parser.add_argument("--repeat", type=int, default=None, help="copies of the mix per run (default 4 cuda, 3 cpu)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N candidates of the mix")
    parser.add_argument("--trials", type=int, default=5, help="correctness trials")
    parser.add_argument("--timing-trials", type=int, default=None, help="default 100 (cuda), 3 (cpu)")
    parser.add_argument("--timeout", type=float, default=None, help="per-phase timeout (default 60 cuda, 30 cpu)")
    parser.add_argument("--threads", type=int, default=32, help="threads per Dask worker (>= its evaluation slots)")
    parser.add_argument("--ready-timeout", type=float, default=240.0, help="seconds for the pools to start")
    parser.add_argument("--kill-check", action="store_true", help="then SIGKILL a worker mid-batch and count verdicts")
    parser.add_argument("--kill-limit", type=int, default=None, help="candidates in the kill batch (default: the mix)")
    parser.add_argument("--window-s", type=float, default=None,
                        help="measure verdicts finished in this many seconds with the queue kept full (repeat is "
                             "raised to keep it full) instead of the wall of the whole mix")
    parser.add_argument("--parity", action="store_true",
                        help="only compare verdicts: bundled solutions and red-team cases, local vs Dask (parity.json)")
    parser.add_argument("--out-dir", default="bench/results/eval_scaling", help="scaling.json goes here")
    args = parser.parse_args(argv)
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    args.repeat = args.repeat or (12 if args.window_s else 4 if args.device == "cuda" else 3)
    args.timing_trials = args.timing_trials or (100 if args.device == "cuda" else 3)
    args.timeout = args.timeout or (60.0 if args.device == "cuda" else 30.0)
    if args.device == "cuda" and _gpu_count() < args.workers:
        say(f"this host has {_gpu_count()} GPU(s); {args.workers} are needed (or use --device cpu)")
        return 2
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if args.parity:
        return 0 if not parity(args, out_dir)["mismatches"] else 1
    base = CPU_MIX if args.device == "cpu" else (QUICK_MIX if args.quick else FULL_MIX)
    mix = [(pid, tuple(k for k in kinds if k in SCALING_KINDS)) for pid, kinds in base]
    candidates = build_mix(mix, warn=lambda text: say(f"warning: {text}"))
    if args.limit:
        candidates = candidates[: args.limit]
    say(f"{len(candidates)} candidates x {args.repeat}: " + ", ".join(c.label for c in candidates))

    summary: dict[str, Any] = {
        "device": args.device, "host": platform.node(), "cpus": os.cpu_count(), "gpus": _gpu_count(),
        "mix": [c.label for c in candidates], "repeat": args.repeat, "trials": args.trials,
        "timing_trials": args.timing_trials, "runs": {},
    }

    def write() -> None:
        path = out_dir / "scaling.json"
        path.write_text(json.dumps(summary, indent=2, default=str))
        say(f"wrote {path}")

    with tempfile.TemporaryDirectory(prefix="kbrl-scaling-") as tmp:
        for workers in (1, args.workers):
            db = str(Path(tmp) / f"scaling_{workers}.duckdb")  # each run computes its own baselines
            summary["runs"][str(workers)] = run_configuration(workers, candidates, args, db,
                                                              kill_check=args.kill_check and workers > 1)
            write()
    one, many = summary["runs"]["1"], summary["runs"][str(args.workers)]
    summary["ratio"] = round(many["per_minute"] / one["per_minute"], 3) if one.get("per_minute") else None
    both = sorted(set(one["verdicts"]) & set(many["verdicts"]))
    mismatched = [(k, one["verdicts"][k], many["verdicts"][k]) for k in both if one["verdicts"][k] != many["verdicts"][k]]
    summary["verdicts_compared"] = len(both)
    summary["verdicts_agree"] = not mismatched
    summary["verdict_mismatches"] = mismatched[:20]
    write()
    say("")
    say(f"{'configuration':34s} {'candidates':>10s} {'wall s':>8s} {'per min':>8s} {'slots':>6s}")
    for key in ("1", str(args.workers)):
        run = summary["runs"][key]
        say(f"{run['cluster'][:34]:34s} {run['candidates']:>10d} {run['wall_s']:>8.1f} {run['per_minute']:>8.1f} "
            f"{run['slots']:>6d}")
    say(f"throughput ratio {args.workers} : 1 = {summary['ratio']}x; verdicts agree on the {len(both)} candidates "
        f"both runs finished: {summary['verdicts_agree']}")
    kill = many.get("kill_check")
    if kill:
        say(f"kill check: {kill['lost']} lost, {kill['duplicated']} duplicated of {kill['requests']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
