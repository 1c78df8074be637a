"""Is the floor a true floor? Every reference of a problem set timed on the GPU against its physical floor.

    python3 bench/sol_references.py --kernelbench-root .kb --out sol_references.json

For each problem: the reference built on the GPU under the evaluator's numerics (exact fp32), inputs made on the
device, 2 warm-up calls, then the median of 5 calls, each after an L2 flush, timed with CUDA events around a full
synchronise; the floor from evaluation/floor.py for this GPU. A reference faster than its floor (sol_fraction
above 1 + the margin) would mean the floor is wrong for that problem. Prints the distribution per level and writes
every problem's figures. Needs only torch.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import types
from datetime import date
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from kernelbench_rl.evaluation import numerics, runtime, timing  # noqa: E402
from kernelbench_rl.evaluation.floor import BELOW_FLOOR_MARGIN, problem_floor  # noqa: E402
from kernelbench_rl.problems import load_problems  # noqa: E402

CALLS = 5


def time_reference(module: types.ModuleType, flush: torch.Tensor) -> float:
    model = runtime.build_model(module.Model, module, 42, "cuda", "fp32")
    inputs = runtime.make_inputs(module, 7, "cuda", "fp32")
    times = []
    with torch.no_grad():
        for call in range(2 + CALLS):
            flush.fill_(call)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            model(*inputs)
            end.record()
            torch.cuda.synchronize()
            if call >= 2:
                times.append(start.elapsed_time(end))
    del model, inputs
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems-root", "--kernelbench-root", dest="kernelbench_root", default=None,
                        help="a KernelBench checkout or kernrl's problems folder (default: the bundled set)")
    parser.add_argument("--levels", default=None)
    parser.add_argument("--budget-s", type=float, default=500.0, help="stop starting problems after this long")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("error: this times references on a GPU; none is visible", file=sys.stderr)
        return 2
    numerics.apply()
    gpu = torch.cuda.get_device_name(0)
    problems = load_problems(args.kernelbench_root, levels=[int(x) for x in args.levels.split(",")] if args.levels else None)
    flush = timing.l2_flush_buffer("cuda")
    rows, started = [], time.perf_counter()
    for problem in problems:
        if time.perf_counter() - started > args.budget_s:
            rows.append({"problem_id": problem.id, "level": problem.level, "skipped": "budget"})
            continue
        module = types.ModuleType(f"kbrl_sol_{problem.level}_{problem.number}")
        row = {"problem_id": problem.id, "level": problem.level, "name": problem.name}
        try:
            exec(compile(problem.source, f"<{problem.id}>", "exec"), module.__dict__)
            floor = problem_floor(module, "fp32", gpu)
            measured = time_reference(module, flush)
            row.update(floor_ms=floor.floor_ms, bound=floor.bound, measured_ms=measured, sol_fraction=floor.floor_ms / measured,
                       bytes=floor.bytes, flops=floor.flops, uncounted_ops=floor.uncounted_ops[:8])
        except Exception as exc:  # noqa: BLE001 - one problem's failure is a row, not the end of the run
            row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:200]
        finally:
            torch.cuda.empty_cache()
        rows.append(row)
        if len(rows) % 25 == 0:
            print(f"  {len(rows)}/{len(problems)} at {time.perf_counter() - started:.0f} s", flush=True)
    limit = 1 + BELOW_FLOOR_MARGIN
    per_level = {}
    for level in sorted({r["level"] for r in rows}):
        values = sorted(r["sol_fraction"] for r in rows if r["level"] == level and "sol_fraction" in r)
        if not values:
            continue
        per_level[f"L{level}"] = {
            "timed": len(values), "median": round(statistics.median(values), 3), "p10": round(values[len(values) // 10], 3),
            "p90": round(values[int(0.9 * (len(values) - 1))], 3), "max": round(values[-1], 3),
            "above_1": [r["problem_id"] for r in rows if r["level"] == level and r.get("sol_fraction", 0) > 1.0],
            "above_margin": [r["problem_id"] for r in rows if r["level"] == level and r.get("sol_fraction", 0) > limit],
            "errors": [f"{r['problem_id']}: {r['error']}" for r in rows if r["level"] == level and "error" in r]}
    wall = time.perf_counter() - started
    print(f"{len(rows)} references on {gpu}, {wall:.0f} s")
    for level, d in per_level.items():
        print(f"  {level}: {d['timed']} timed, sol median {d['median']}, p10 {d['p10']}, p90 {d['p90']}, max {d['max']}; "
              f"above 1: {d['above_1'] or 'none'}; above 1 + margin: {d['above_margin'] or 'none'}; errors {len(d['errors'])}")
        for error in d["errors"]:
            print(f"    {error}")
    if args.out:
        Path(args.out).write_text(json.dumps({"date": date.today().isoformat(), "device": gpu, "torch": torch.__version__,
                                              "wall_s": round(wall, 1), "margin": BELOW_FLOOR_MARGIN,
                                              "per_level": per_level, "problems": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
