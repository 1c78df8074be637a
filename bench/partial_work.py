"""Partial work at real size: the red team's partial-read candidates and the problems' own solutions, judged with and
without the sensitivity seeds (evaluation/verdict/sensitivity.py), on KernelBench's and kernrl's own problem files.

    python3 bench/partial_work.py --out bench/results/partial_work_h100.json
    python3 bench/partial_work.py --device cpu --size small --sensitivity on     # the machinery only

Cases: cross-entropy from 256 rows (KernelBench's L1/95), a scan exact on a prefix then a line (kernrl's L9/1), a
histogram of 81% of the pixels (kernrl's L6/2), pi from 2,048 points (kernrl's L5/7), a softmax with a polynomial
exp (KernelBench's L1/23); each beside the bundled solution of its problem (an honest kernel: it must stay correct).
Each pass (`off`: KBRL_EVAL_SENSITIVITY=off, as the evaluator judged before the sensitivity seeds; `on`: as it judges
now) starts its own pool. Prints one line per candidate and pass, writes every verdict to --out, and exits 1 when a
partial-work candidate is correct with the seeds on or a solution is not correct.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402 - after the path set-up above

REPO = harness.REPO

from kernelbench_rl.evaluation.verdict import sensitivity  # noqa: E402
from kernelbench_rl.evaluation.front.api import Evaluator  # noqa: E402
from kernelbench_rl.evaluation.result import EvalRequest, EvalSettings  # noqa: E402
from kernelbench_rl.problems import get_problem  # noqa: E402

CANDIDATES = REPO / "tests" / "hacks" / "candidates"
SOLUTIONS = REPO / "KernelBench" / "solutions"
# (problem, whose file: "kernelbench" or "kernrl", partial-work candidate)
CASES = (
    ("L1/95", "kernelbench", "partial_rows_cross_entropy"),
    ("L9/1", "kernrl", "partial_scan_line"),
    ("L6/2", "kernrl", "partial_histogram_rescaled"),
    ("L5/7", "kernrl", "partial_pi_samples"),
    ("L1/23", "kernelbench", "poly_exp_softmax"),
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernelbench-root", default=str(REPO.parent / "shared" / "kernelbench"),
                        help="a KernelBench checkout (its problems: L1/95, L1/23)")
    parser.add_argument("--kernrl-root", default=str(REPO.parent / "shared" / "kernrl" / "problems"),
                        help="kernrl's problems folder (L9/1, L6/2, L5/7)")
    harness.add_device(parser, size=None)
    parser.add_argument("--sensitivity", default="both", choices=("both", "on", "off"), help="which passes to run")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per candidate")
    parser.add_argument("--problems", default="", help="comma-separated subset of " + ",".join(c[0] for c in CASES))
    parser.add_argument("--out", default="", help="JSON report path")
    return parser.parse_args(argv)


def _problems(args: argparse.Namespace) -> dict[str, Any]:
    wanted = {p.strip() for p in args.problems.split(",") if p.strip()}
    roots = {"kernelbench": args.kernelbench_root, "kernrl": args.kernrl_root}
    found = {}
    for problem_id, whose, _candidate in CASES:
        if wanted and problem_id not in wanted:
            continue
        root = roots[whose]
        if not Path(root).is_dir():
            sys.exit(f"{whose}'s problems are not at {root}; pass --{whose}-root.")
        found[problem_id] = get_problem(problem_id, root)
    return found


def _requests(problems: dict[str, Any], settings: EvalSettings) -> list[tuple[str, str, EvalRequest]]:
    out = []
    for problem_id, _whose, candidate in CASES:
        if problem_id not in problems:
            continue
        problem = problems[problem_id]
        out.append(("partial", candidate, EvalRequest(problem_id, (CANDIDATES / f"{candidate}.py").read_text(),
                                                      settings, request_id=candidate)))
        solution = SOLUTIONS / f"level{problem.level}" / f"{problem.name}.py"
        if solution.is_file():
            out.append(("solution", solution.stem, EvalRequest(problem_id, solution.read_text(), settings,
                                                               request_id=f"solution {problem_id}")))
    return out


def _row(kind: str, name: str, request: EvalRequest, result: Any, mode: str) -> dict[str, Any]:
    return {
        "pass": mode, "kind": kind, "candidate": name, "problem": request.problem_id, "correct": bool(result.correct),
        "category": result.error_category.value, "message": result.error_message[:400],
        "trials": [result.trials_passed, result.trials_total], "max_abs_err": result.max_abs_err,
        "sensitivity": result.versions.get("sensitivity", ""), "inputs": result.versions.get("inputs", ""),
        "speedup": result.speedup, "correctness_s": result.phase_seconds.get("correctness"),
        "worker_total_s": result.phase_seconds.get("worker_total"),
    }


def run_pass(mode: str, problems: dict[str, Any], settings: EvalSettings) -> list[dict[str, Any]]:
    """One pool with KBRL_EVAL_SENSITIVITY set to `mode` (its workers read it)."""
    previous = os.environ.get(sensitivity.ENV)
    os.environ[sensitivity.ENV] = mode
    try:
        planned = _requests(problems, settings)
        with Evaluator(settings, problems=problems, static_checks=True) as ev:
            results = ev.evaluate([request for _kind, _name, request in planned])
        rows = [_row(kind, name, request, result, mode) for (kind, name, request), result in zip(planned, results)]
    finally:
        if previous is None:
            os.environ.pop(sensitivity.ENV, None)
        else:
            os.environ[sensitivity.ENV] = previous
    for row in rows:
        verdict = "correct" if row["correct"] else row["category"]
        print(f"[{mode:3s}] {row['problem']:6s} {row['kind']:8s} {row['candidate']:30s} {verdict:12s} "
              f"{row['message'][:110]}", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    size = args.size or ("real" if args.device == "cuda" else "small")
    settings = EvalSettings(device=args.device, size=size, timeout_s=args.timeout)
    problems = _problems(args)
    started = time.perf_counter()
    modes = ("off", "on") if args.sensitivity == "both" else (args.sensitivity,)
    rows = [row for mode in modes for row in run_pass(mode, problems, settings)]
    failures = [f"{r['candidate']} on {r['problem']}: "
                + ("partial work judged correct" if r["kind"] == "partial" else f"the solution is {r['category']}")
                for r in rows if r["pass"] == "on" and (r["correct"] != (r["kind"] == "solution"))]
    report = {
        "device": args.device, "size": size, "wall_s": round(time.perf_counter() - started, 1),
        "environment": harness.environment(args.device),
        "kernelbench_root": args.kernelbench_root, "kernrl_root": args.kernrl_root,
        "rows": rows, "failures": failures, "ok": not failures,
    }
    harness.show(report, args.out, indent=2)
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
