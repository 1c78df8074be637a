"""Mutation testing (mutmut) over the code whose mistakes cost most quietly: the verdict's comparison, the
reward, GRPO's credit assignment and what a resumed run removes.

mutmut (configured in pyproject.toml, [tool.mutmut]) copies the package into ./mutants/, makes one small change
at a time in the functions below (an operator, a constant, a condition, an argument dropped) and runs the
focused tests that reach that function; a change no test notices "survives". The run is bounded to these
functions and their focused test files, so it fits a shared 2-core machine (`make mutation`, tens of minutes).

Each module runs as its own `mutmut run` (mutmut runs the mutants with the cheapest tests first, so in one run for
all, the verdict's comparison, reached by the most tests, came last), each with an optional time budget
(--module-budget-s: past it the module's run is interrupted and its unreached mutants are counted as not checked).
mutmut forks every mutant's test run from a process that has already run torch: with torch's OpenMP thread pool
started, a forked child's first parallel op waits forever, and every mutant that no early test killed was reported as a
time-out after mutmut's wall limit. The runs get one OpenMP thread (OMP_NUM_THREADS=1), so no pool exists to inherit.
Starts afresh (mutants/ removed) unless --resume.

Prints a table (score per module: killed / (killed + survived + timeouts)), each survivor with its diff, and
writes JSON with --out. Exit 0 whatever the score: survivors are read and answered (a test, or a reason), not
gated on.
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402 - after the path set-up above

REPO = harness.REPO

# Module label -> mutmut's names of the functions mutated (x_<function>, xǁ<Class>ǁ<method>).
TARGETS: dict[str, list[str]] = {
    "verdict (evaluation/verdict/checks.py)": [
        "kernelbench_rl.evaluation.verdict.checks.x_compare_outputs__mutmut_*",
        "kernelbench_rl.evaluation.verdict.checks.x__tie_tolerant_fault__mutmut_*",
        "kernelbench_rl.evaluation.verdict.checks.x_declared_index_outputs__mutmut_*",
        "kernelbench_rl.evaluation.verdict.checks.x_inputs_unmodified__mutmut_*",
    ],
    "reward (rewards/shaping.py, returns.py)": [
        "kernelbench_rl.rewards.shaping.x_score__mutmut_*",
        "kernelbench_rl.rewards.shaping.x_bounded_log_speedup__mutmut_*",
        "kernelbench_rl.rewards.shaping.x_is_hack__mutmut_*",
        "kernelbench_rl.rewards.returns.*",
    ],
    "GRPO advantages (training/grpo.py)": [
        "kernelbench_rl.training.grpo.x_score_group__mutmut_*",
        "kernelbench_rl.training.grpo.x_build_datums__mutmut_*",
    ],
    "resume (store/db.py discard_steps_after)": [
        "kernelbench_rl.store.db.x\u01c1Store\u01c1discard_steps_after__mutmut_*",
    ],
}
COUNTED = ("killed", "survived", "timeout")  # the score's denominator; "no tests" is listed apart


def module_of(name: str) -> str | None:
    return next((label for label, patterns in TARGETS.items() if any(fnmatch.fnmatchcase(name, p) for p in patterns)),
                None)


# One thread for torch's OpenMP and MKL pools in mutmut and its forked test runs (see the module's docstring).
MUTMUT_ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _mutmut_exe() -> str:
    return shutil.which("mutmut", path=str(Path(sys.executable).parent)) or "mutmut"


def mutmut(*args: str, timeout_s: float | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([_mutmut_exe(), *args], cwd=REPO, capture_output=True, text=True, timeout=timeout_s,
                          env=MUTMUT_ENV)


def run_module(patterns: list[str], max_children: int | None, budget_s: float | None) -> tuple[int, bool, str]:
    """`mutmut run` over one module's functions: (exit code, stopped at the budget, output's tail). Past the budget
    mutmut gets SIGINT, which keeps the verdicts it has (they are read back from mutants/)."""
    extra = ["--max-children", str(max_children)] if max_children else []
    proc = subprocess.Popen([_mutmut_exe(), "run", *extra, *patterns], cwd=REPO, env=MUTMUT_ENV, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        out, _ = proc.communicate(timeout=budget_s)
        return proc.returncode, False, out[-3000:]
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        return 0, True, out[-3000:]


def results() -> dict[str, str]:
    """Every mutant's status as `mutmut results --all true` prints it (name: status)."""
    proc = mutmut("results", "--all", "true")
    found = {}
    for line in proc.stdout.splitlines():
        match = re.match(r"\s*(\S+): (.+)$", line)
        if match:
            found[match.group(1)] = match.group(2).strip()
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    parser.add_argument("--only", help="one module label's start (verdict, reward, GRPO, resume)")
    parser.add_argument("--no-run", action="store_true", help="report the last run's results without running")
    parser.add_argument("--resume", action="store_true",
                        help="keep mutants/ (mutmut's copy, its test map and timings) instead of starting afresh")
    parser.add_argument("--module-budget-s", type=float, default=None,
                        help="stop each module's run after this many seconds (default: no bound)")
    parser.add_argument("--max-children", type=int, default=None,
                        help="mutants tested at once (default: mutmut's, the CPU count)")
    return harness.run_main(run, parser.parse_args(argv))


def run(args: argparse.Namespace) -> int:
    if shutil.which("mutmut", path=str(Path(sys.executable).parent)) is None:
        raise harness.BadInput("mutmut is not installed in this environment: pip install -e '.[mutation]'")
    labels = [label for label in TARGETS if not args.only or label.lower().startswith(args.only.lower())]
    if not labels:
        raise harness.BadInput(f"--only {args.only!r} names none of: {', '.join(TARGETS)}")
    started = time.monotonic()
    wall_by_label: dict[str, float] = {}
    stopped: list[str] = []
    if not args.no_run:
        if not args.resume:
            shutil.rmtree(REPO / "mutants", ignore_errors=True)
        for label in labels:
            t0 = time.monotonic()
            code, at_budget, tail = run_module(TARGETS[label], args.max_children, args.module_budget_s)
            wall_by_label[label] = round(time.monotonic() - t0)
            if code != 0:
                print(tail, file=sys.stderr)
                print(f"mutmut run failed for {label} (its output above)", file=sys.stderr)
                return 1
            if at_budget:
                stopped.append(label)
                print(f"{label}: stopped at its budget of {args.module_budget_s:g} s", file=sys.stderr)
    wall_s = time.monotonic() - started
    statuses = {name: status for name, status in results().items() if module_of(name) in labels}
    table = []
    for label in labels:
        mine = {n: s for n, s in statuses.items() if module_of(n) == label}
        counts = {status: sum(s == status for s in mine.values()) for status in sorted(set(mine.values()))}
        judged = sum(counts.get(s, 0) for s in COUNTED)
        killed = counts.get("killed", 0) + counts.get("timeout", 0)
        table.append({"module": label, "mutants": len(mine), **counts, "wall_s": wall_by_label.get(label),
                      "stopped_at_budget": label in stopped,
                      "score": round(killed / judged, 3) if judged else None,
                      "survivors": sorted(n for n, s in mine.items() if s == "survived"),
                      "no_tests": sorted(n for n, s in mine.items() if s == "no tests")})
    harness.print_table(["module", "mutants", "killed", "timeout", "survived", "no tests", "score"], [
        [row["module"], row["mutants"], *(row.get(k, 0) for k in ("killed", "timeout", "survived", "no tests")),
         None if row["score"] is None else f"{row['score']:.1%}"] for row in table])
    for row in table:
        for name in row["survivors"] + row["no_tests"]:
            shown = mutmut("show", name).stdout
            diff = [line for line in shown.splitlines() if line.startswith(("-", "+")) and not line.startswith(("---", "+++"))]
            print(f"\n{'survived' if name in row['survivors'] else 'no tests'}: {name}\n  " + "\n  ".join(diff))
    harness.write_json(args.out, {"date": time.strftime("%Y-%m-%d"), "machine": platform.node(),
                                  "cpus": len(os.sched_getaffinity(0)), "wall_s": round(wall_s), "modules": table})
    return 0


if __name__ == "__main__":
    sys.exit(main())
