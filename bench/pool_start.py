"""How long the evaluation pool takes to become ready, and where the seconds go.

Starts an Evaluator N times in a row (one worker), each time from `Evaluator.start()` to ready, and
reads the worker's ready event: `startup_seconds` (each step's own seconds) and `startup_timeline`
(each step's [start, end] since the worker process was created, so overlapping steps show as such),
then its "warm" event (what the start leaves for after ready: the comparison kernel's build, the other
pre-started children). Optionally judges one known-correct candidate right after ready, to show the
first candidate pays no start cost of its own.

The first run is cold for our caches (a fresh private cache directory: the same-uid probe runs), the
later ones warm (its pass remembered). The OS page cache is whatever the machine has.

    python bench/pool_start.py --device cuda --runs 4 --out bench/results/pool_start_h100.json
    python bench/pool_start.py --device cpu --runs 3                                      # offline
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from kernelbench_rl.evaluation.api import Evaluator  # noqa: E402
from kernelbench_rl.evaluation.result import EvalRequest, EvalSettings  # noqa: E402


def one_start(settings: EvalSettings, candidate: tuple[str, str] | None, warm_timeout_s: float,
              workers: int | None) -> dict[str, Any]:
    t_construct = time.perf_counter()
    evaluator = Evaluator(settings, num_workers=workers, static_checks=False)  # sizes the pool (may count GPUs)
    construct_s = time.perf_counter() - t_construct
    t0 = time.perf_counter()
    try:
        evaluator.start()
        ready_s = time.perf_counter() - t0
        worker = evaluator.pool.slots[0].worker
        info = dict(worker.info) if worker is not None else {}
        row: dict[str, Any] = {
            "start_to_ready_s": round(ready_s, 3), "evaluator_construct_s": round(construct_s, 3),
            "workers": len(evaluator.pool.slots),
            "worker_ready_after_s": info.get("ready_after_s"),
            "failed": worker.failed if worker is not None else "no worker",
            "transport": info.get("transport"), "ipc_selftest": info.get("ipc_selftest"),
            "same_uid": info.get("same_uid"), "same_uid_probe": info.get("same_uid_probe"),
            "hardware": info.get("hardware"),
            "startup_seconds": info.get("startup_seconds", {}),
            "startup_timeline": info.get("startup_timeline", {}),
        }
        if candidate is not None:
            problem_id, source = candidate
            t1 = time.perf_counter()
            result = evaluator.evaluate([EvalRequest(problem_id, source, settings)])[0]
            row["first_candidate"] = {
                "problem": problem_id, "wall_s": round(time.perf_counter() - t1, 3), "correct": result.correct,
                "category": result.error_category.value, "message": result.error_message[:200],
                "phase_seconds": {k: round(v, 4) for k, v in result.phase_seconds.items()},
            }
        if worker is not None and hasattr(worker, "warm") and worker.warm.wait(warm_timeout_s):
            row["warm_after_s"] = worker.warm_info.get("warm_after_s")
            row["after_ready_seconds"] = worker.warm_info.get("startup_seconds", {})
            row["after_ready_timeline"] = worker.warm_info.get("startup_timeline", {})
        return row
    finally:
        evaluator.close()


def print_row(index: int, row: dict[str, Any]) -> None:
    print(f"run {index}: start -> ready {row['start_to_ready_s']:.2f} s (worker ready {row['worker_ready_after_s']} s "
          f"after its exec); transport {row['transport']}, same-uid {row['same_uid']} ({row['same_uid_probe']})"
          + (f"; FAILED: {row['failed']}" if row["failed"] else ""))
    print(f"    (before start(): Evaluator() {row['evaluator_construct_s']:.2f} s; workers {row['workers']})")
    timeline = row.get("startup_timeline") or {}
    for name, (start, end) in sorted(timeline.items(), key=lambda item: item[1][0]):
        print(f"    {name:<20} {start:7.3f} -> {end:7.3f}  ({end - start:6.3f} s)")
    later = row.get("after_ready_timeline") or {}
    for name, (start, end) in sorted(later.items(), key=lambda item: item[1][0]):
        print(f"    {name:<20} {start:7.3f} -> {end:7.3f}  ({end - start:6.3f} s)  after ready")
    first = row.get("first_candidate")
    if first:
        phases = first["phase_seconds"]
        print(f"    first candidate {first['problem']}: {first['wall_s']:.2f} s, {first['category']}"
              f" (child_start {phases.get('child_start', 0):.3f} s, reference_wait {phases.get('reference_wait', 0):.3f} s,"
              f" device_wait {phases.get('device_wait', 0):.3f} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=1, help="0: one per visible GPU, as the Evaluator's default")
    parser.add_argument("--no-candidate", action="store_true", help="do not judge a candidate after ready")
    parser.add_argument("--keep-cache", action="store_true",
                        help="use the usual private cache directory (a remembered probe stays) instead of a fresh one")
    parser.add_argument("--warm-timeout", type=float, default=60.0)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    fresh_cache = "" if args.keep_cache else tempfile.mkdtemp(prefix="kbrl-pool-start-cache-")  # 0700: trusted
    if fresh_cache:
        os.environ["KBRL_EVAL_CACHE_DIR"] = fresh_cache
        atexit.register(shutil.rmtree, fresh_cache, ignore_errors=True)
    settings = EvalSettings(device=args.device, timeout_s=120)
    candidate = None
    if not args.no_candidate:
        from kernelbench_rl.problems import get_problem, load_solution

        candidate = ("L1/19", load_solution(get_problem("L1/19")))
    rows = []
    for index in range(args.runs):
        row = one_start(settings, candidate, args.warm_timeout, args.workers or None)
        row["run"] = index
        row["cache"] = "cold" if index == 0 and not args.keep_cache else "warm"
        rows.append(row)
        print_row(index, row)
    warm = [r["start_to_ready_s"] for r in rows if r["cache"] == "warm"]
    summary = {
        "date": time.strftime("%Y-%m-%d"), "device": args.device, "host_cpus": os.cpu_count(),
        "hardware": rows[0].get("hardware") if rows else "", "python": platform.python_version(),
        "first_run_ready_s": rows[0]["start_to_ready_s"] if rows else None,
        "warm_runs_ready_median_s": round(statistics.median(warm), 3) if warm else None,
        "warm_runs_ready_max_s": max(warm) if warm else None,
    }
    print(json.dumps(summary))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"summary": summary, "runs": rows}, indent=1))


if __name__ == "__main__":
    main()
