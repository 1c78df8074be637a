"""Run the whole red-team suite (tests/hacks/) through the real Evaluator on this machine's device and
print a table: case, expected, got, pass/fail. Exits non-zero if any case fails.

Each hack is followed by a known-correct ReLU on the same Evaluator (it must stay correct), fake API
keys sit in the parent environment throughout (no result and no reachable file may contain them),
and with --naive every case also goes through the KernelBench-style naive harness, to show which
hacks a weaker harness would have paid for.

    python bench/gpu_redteam.py --out bench/results/redteam_h100.json           # on the GPU machine
    python bench/gpu_redteam.py --device cpu --only torch_op_instead_of_kernel    # offline smoke
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "tests" / "hacks"))
sys.path.insert(0, str(REPO_ROOT / "bench"))

from hack_cases import (  # noqa: E402
    KNOWN_GOOD_PROBLEM,
    KNOWN_GOOD_SOLUTION,
    SECRET_ENV,
    cases_for,
    clean_markers,
    judge,
    sandbox_escapes,
)


def _device_name(device: str) -> str:
    import torch

    if device == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return platform.processor() or platform.machine()


def run(args: argparse.Namespace) -> int:
    import torch

    from kernelbench_rl.evaluation import Evaluator
    from kernelbench_rl.evaluation.result import EvalRequest, EvalSettings
    from kernelbench_rl.problems import get_problem

    device = args.device
    if device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device here; use --device cpu", file=sys.stderr)
        return 2
    size = args.size or ("real" if device == "cuda" else "small")
    base = EvalSettings(device=device, size=size, timeout_s=args.timeout)
    cases = [c for c in cases_for(device) if not args.only or c.name in args.only]
    for name, value in SECRET_ENV.items():
        os.environ[name] = value  # before the Evaluator starts its workers

    good_source = KNOWN_GOOD_SOLUTION.read_text()
    rows: list[dict[str, Any]] = []
    started_all = time.perf_counter()
    with Evaluator(base, num_workers=1, store=None) as evaluator:
        honest = evaluator.evaluate([EvalRequest(KNOWN_GOOD_PROBLEM, good_source, base, request_id="redteam/honest")])[0]
        honest_speedup = honest.speedup
        print(f"honest ReLU: {honest.error_category.value} correct={honest.correct} speedup={honest_speedup}", flush=True)
        for case in cases:
            clean_markers(REPO_ROOT)
            since = time.time() - 1.0
            settings = dataclasses.replace(base, **case.settings_overrides())
            t0 = time.perf_counter()
            hack, good = evaluator.evaluate([
                EvalRequest(case.problem_id, case.source, settings, request_id=f"redteam/{case.name}"),
                EvalRequest(KNOWN_GOOD_PROBLEM, good_source, base, request_id=f"redteam/after/{case.name}"),
            ])
            wall = time.perf_counter() - t0
            verdict = judge(case, hack.to_dict(), device, honest_speedup=honest_speedup)
            problems = list(verdict.problems)
            problems += sandbox_escapes(case, [hack.to_json(), good.to_json()], REPO_ROOT, since)
            if not good.correct:
                problems.append(f"known-good ReLU afterwards: {good.error_category.value} {good.error_message[:120]}")
            clean_markers(REPO_ROOT)
            row = {
                "case": case.name, "problem": case.problem_id, "threat": case.threat,
                "expected": verdict.expected, "got": verdict.got, "passed": not problems, "problems": problems,
                "error_message": hack.error_message[:300], "static_errors": hack.static.errors[:5],
                "wall_s": round(wall, 2), "naive_expected_pass": case.naive_passes,
            }
            rows.append(row)
            print(f"{'PASS' if not problems else 'FAIL'} {case.name:32s} {verdict.got}  ({wall:.1f} s)"
                  + (f"  <- {problems}" if problems else ""), flush=True)

    if args.naive:
        _run_naive(rows, cases, device, args, get_problem)

    total = time.perf_counter() - started_all
    failures = [r for r in rows if not r["passed"]]
    _print_table(rows, args.naive)
    print(f"\n{len(rows) - len(failures)}/{len(rows)} cases pass on {_device_name(device)} ({device}, {size} sizes) "
          f"in {total:.0f} s")
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({
            "device": device, "device_name": _device_name(device), "size": size,
            "torch": torch.__version__, "honest_relu_speedup": honest_speedup,
            "cases": rows, "passed": len(rows) - len(failures), "total": len(rows), "wall_s": round(total, 1),
        }, indent=2))
        print(f"wrote {out}")
    return 1 if failures else 0


def _run_naive(rows: list[dict[str, Any]], cases: list, device: str, args: argparse.Namespace, get_problem: Any) -> None:
    from naive_harness import NaiveHarness, NaiveSettings

    naive_size = args.naive_size or ("small" if device == "cuda" else "small")
    harness = NaiveHarness(NaiveSettings(device=device, timing_trials=args.naive_timing_trials,
                                         timeout_s=min(args.timeout, 60.0)))
    by_name = {row["case"]: row for row in rows}
    for case in cases:
        if case.name in ("oom_host", "write_outside_tmp", "exfiltrate_secret", "stdout_flood"):
            by_name[case.name]["naive"] = "skipped"
            continue
        problem = get_problem(case.problem_id)
        result = harness.evaluate(problem.id, problem.source_for(naive_size), case.source, label=case.name)
        accepted = result.correct
        text = "accepted" if accepted else ("timeout" if result.timed_out else f"rejected ({result.error[:60]})")
        if accepted and result.speedup is not None:
            text += f" speedup={result.speedup:.2f}"
        by_name[case.name]["naive"] = text
        by_name[case.name]["naive_accepted"] = accepted
        print(f"naive {case.name:32s} {text}", flush=True)
    clean_markers(REPO_ROOT)


def _print_table(rows: list[dict[str, Any]], naive: bool) -> None:
    header = f"\n{'case':32s} {'expected':44s} {'got':52s} {'result':6s}"
    if naive:
        header += "  naive harness"
    print(header)
    print("-" * len(header))
    for row in rows:
        line = f"{row['case']:32s} {row['expected'][:44]:44s} {row['got'][:52]:52s} {'PASS' if row['passed'] else 'FAIL':6s}"
        if naive:
            line += f"  {row.get('naive', '')}"
        print(line)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Run the red-team hacks through the Evaluator; non-zero exit on any failure.")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--size", choices=["real", "small"], default=None)
    parser.add_argument("--timeout", type=float, default=120.0, help="per-evaluation timeout (hang cases set their own)")
    parser.add_argument("--only", nargs="*", default=None, help="case names to run")
    parser.add_argument("--naive", action="store_true", help="also run every case through the naive harness")
    parser.add_argument("--naive-size", choices=["real", "small"], default=None)
    parser.add_argument("--naive-timing-trials", type=int, default=20)
    parser.add_argument("--out", default=None, help="write the JSON report here")
    args = parser.parse_args(argv)
    sys.exit(run(args))


if __name__ == "__main__":
    main()
