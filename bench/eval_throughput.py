"""Evaluator throughput on one device.

A fixed mix of candidates (known-correct solutions from KernelBench/solutions/ and mutants of them
that are wrong, crash or hang) runs through our Evaluator (warm pool), the whole mix in one call:
candidates per minute, our overhead per candidate beyond the floor (harness.FLOOR_DEFINITION), and
whether the verdicts are right on the correct solutions, the wrong mutants and the faults. The
comparison with KernelBench's own harness is `kernelbench_sweep.py kb-harness`.

    python bench/eval_throughput.py --out bench/results/throughput_h100.json          # GPU, full mix
    python bench/eval_throughput.py --quick                                            # GPU, small mix
    python bench/eval_throughput.py --device cpu --quick                               # offline smoke
"""

from __future__ import annotations

import argparse
import ast
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402 - after the path set-up above
from harness import FLOOR_DEFINITION, say  # noqa: E402,F401 - FLOOR_DEFINITION: also this module's name for it

# ---------------------------------------------------------------- mutants (AST edits of a solution)


def _jit_functions(tree: ast.Module) -> list[ast.FunctionDef]:
    return [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)
            and any("jit" in ast.unparse(d) or "autotune" in ast.unparse(d) for d in node.decorator_list)]


def _stores(fn: ast.FunctionDef) -> list[ast.Call]:
    return [n for n in ast.walk(fn) if isinstance(n, ast.Call) and ast.unparse(n.func).endswith("store") and len(n.args) >= 2]


def _forward(tree: ast.Module) -> ast.FunctionDef | None:
    return next((item for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "ModelNew"
                 for item in node.body if isinstance(item, ast.FunctionDef) and item.name == "forward"), None)


def _last_store(tree: ast.Module) -> ast.Call | None:
    stores = [s for fn in _jit_functions(tree) for s in _stores(fn)]
    return stores[-1] if stores else None


def mutate_wrong_constant(source: str) -> str | None:
    """The final store writes value * 1.001 + 0.001: a wrong constant in the epilogue."""
    tree = ast.parse(source)
    store = _last_store(tree)
    if store is None:
        return None
    store.args[1] = ast.parse(f"({ast.unparse(store.args[1])}) * 1.001 + 0.001", mode="eval").body
    return ast.unparse(tree)


def mutate_off_by_one(source: str) -> str | None:
    """The first bound check `a < n` in a kernel becomes `a < n - 1`: the last element is skipped."""
    tree = ast.parse(source)
    for fn in _jit_functions(tree):
        for node in ast.walk(fn):
            if (isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Lt)
                    and not isinstance(node.comparators[0], ast.Constant)):
                node.comparators[0] = ast.BinOp(left=node.comparators[0], op=ast.Sub(), right=ast.Constant(1))
                return ast.unparse(tree)
    return None


def mutate_missing_bias(source: str) -> str | None:
    """Drop the bias from the kernel's epilogue: `acc + bias[None, :]` -> `acc`, where `bias` is a
    value loaded through a pointer whose name mentions bias."""
    tree = ast.parse(source)
    changed = False
    for fn in _jit_functions(tree):
        loaded = set()
        for node in ast.walk(fn):
            if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                    and isinstance(node.value, ast.Call) and ast.unparse(node.value.func).endswith("load")
                    and "bias" in ast.unparse(node.value.args[0]).lower()):
                loaded.add(node.targets[0].id)
        if not loaded:
            continue

        def uses_loaded(expr: ast.AST) -> bool:
            return any(isinstance(n, ast.Name) and n.id in loaded for n in ast.walk(expr))

        class DropBias(ast.NodeTransformer):
            def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
                nonlocal changed
                self.generic_visit(node)
                if isinstance(node.op, ast.Add) and not changed:
                    for keep, drop in ((node.left, node.right), (node.right, node.left)):
                        if uses_loaded(drop) and not uses_loaded(keep):
                            changed = True
                            return keep
                return node

        DropBias().visit(fn)
        if changed:
            break
    return ast.unparse(tree) if changed else None


def _prepend_to_forward(source: str, statements: str) -> str | None:
    tree = ast.parse(source)
    forward = _forward(tree)
    if forward is None:
        return None
    forward.body[:0] = ast.parse(statements).body
    return ast.unparse(tree)


def mutate_raise(source: str) -> str | None:
    return _prepend_to_forward(source, "raise RuntimeError('mutant: the launch configuration is invalid')")


def mutate_hang(source: str) -> str | None:
    return _prepend_to_forward(source, "_spin = 0\nwhile _spin >= 0:\n    _spin += 1")


def mutate_illegal_access(source: str) -> str | None:
    """The final store lands 2**36 elements past its pointer: an illegal address on a GPU."""
    tree = ast.parse(source)
    store = _last_store(tree)
    if store is None:
        return None
    store.args[0] = ast.parse(f"({ast.unparse(store.args[0])}) + (1 << 36)", mode="eval").body
    return ast.unparse(tree)


MUTANTS: dict[str, tuple[Callable[[str], str | None], str]] = {
    # kind: (mutation, what a right verdict is)
    "correct": (lambda s: s, "correct"),
    "wrong_constant": (mutate_wrong_constant, "incorrect"),
    "off_by_one": (mutate_off_by_one, "incorrect"),
    "missing_bias": (mutate_missing_bias, "incorrect"),
    "raises": (mutate_raise, "fault"),
    "illegal_access": (mutate_illegal_access, "fault"),
    "hangs": (mutate_hang, "fault"),
}

# The fixed mix: (problem id, kinds). Level-1 elementwise/normalisation/reduction/matmul and level-2
# GEMM/conv fusions at their real sizes.
FULL_MIX: list[tuple[str, tuple[str, ...]]] = [
    ("L1/19", ("correct", "wrong_constant", "off_by_one", "illegal_access")),
    ("L1/23", ("correct", "wrong_constant", "off_by_one")),
    ("L1/40", ("correct", "wrong_constant", "raises")),
    ("L1/47", ("correct", "wrong_constant", "off_by_one")),
    ("L1/1", ("correct", "wrong_constant", "off_by_one")),
    ("L1/88", ("correct", "wrong_constant", "hangs")),
    ("L2/12", ("correct", "wrong_constant", "off_by_one", "missing_bias")),
    ("L2/76", ("correct", "wrong_constant", "missing_bias", "raises")),
    ("L2/29", ("correct", "wrong_constant", "off_by_one", "missing_bias")),
    ("L2/99", ("correct", "wrong_constant", "illegal_access")),
    ("L2/1", ("correct", "wrong_constant", "off_by_one")),
    ("L2/102", ("correct", "wrong_constant", "raises", "hangs")),
]
QUICK_MIX: list[tuple[str, tuple[str, ...]]] = [
    ("L2/76", ("correct", "wrong_constant", "missing_bias")),
    ("L2/12", ("correct", "off_by_one", "raises")),
    ("L1/19", ("correct", "illegal_access")),
    ("L1/23", ("correct", "wrong_constant")),
    ("L2/102", ("correct", "hangs")),
]
CPU_MIX: list[tuple[str, tuple[str, ...]]] = [
    ("L1/19", ("correct", "wrong_constant", "off_by_one", "raises", "hangs")),
    ("L2/76", ("correct", "missing_bias")),
]


@dataclass
class Candidate:
    label: str
    problem_id: str
    kind: str
    expected: str  # correct | incorrect | fault
    source: str


def build_mix(mix: list[tuple[str, tuple[str, ...]]], warn: Callable[[str], None]) -> list[Candidate]:
    from kernelbench_rl.problems import get_problem, load_solution

    candidates: list[Candidate] = []
    for problem_id, kinds in mix:
        try:
            problem = get_problem(problem_id)
            solution = load_solution(problem)
        except Exception as exc:  # a missing solution drops its problem from the mix, loudly
            warn(f"skipping {problem_id}: {type(exc).__name__}: {exc}")
            continue
        if not solution:
            warn(f"skipping {problem_id}: no bundled solution")
            continue
        for kind in kinds:
            mutate, expected = MUTANTS[kind]
            source = mutate(solution)
            if source is None:
                warn(f"skipping {problem_id}/{kind}: the solution has nothing to mutate")
                continue
            candidates.append(Candidate(f"{problem_id}/{kind}", problem_id, kind, expected, source))
    return candidates


def mix_for(args: argparse.Namespace, kinds: tuple[str, ...] | None = None) -> list[Candidate]:
    """The device's mix (`--quick`'s on a GPU), of `kinds` only if given, its first `--limit` candidates; and the
    device's timed calls and timeout where the flags leave them: 100 and 60 s on a GPU, 3 and 30 s on the CPU."""
    args.timing_trials = args.timing_trials or (100 if args.device == "cuda" else 3)
    args.timeout = args.timeout or (60.0 if args.device == "cuda" else 30.0)
    mix = CPU_MIX if args.device == "cpu" else (QUICK_MIX if args.quick else FULL_MIX)
    mix = [(pid, tuple(k for k in wanted if kinds is None or k in kinds)) for pid, wanted in mix]
    return build_mix(mix, warn=lambda text: say(f"warning: {text}"))[: args.limit or None]


# ---------------------------------------------------------------- the pool on the mix


class MixPool(harness.Pool):
    """Our evaluator on the mix: each record also says its kind, the verdict expected and two more overheads."""

    def record(self, cand: Candidate, res: Any, at: float) -> dict[str, Any]:
        record = harness.verdict_record(res, self.settings, at)
        phases, unqueued = record["phase_seconds"], record["latency_overhead_unqueued_s"] or 0.0
        return {
            "label": cand.label, "kind": cand.kind, "expected": cand.expected, **record,
            # ... also without the work done once per (problem, precision, GPU): sizing the problem with its first
            # reference, and the baselines (kept in DuckDB across runs): what a training run sees after its first step.
            "latency_overhead_steady_s": round(unqueued - harness.once_per_problem_s(phases), 4),
            # Exclusive device time beyond the GPU work itself: what bounds throughput once compiles overlap.
            "serial_overhead_s": (round(max(0.0, phases["device_section"] - record["gpu_trials_s"]), 4)
                                  if "device_section" in phases and record["category"] != "timeout" else None),
        }


def run_ours(candidates: list[Candidate], args: argparse.Namespace) -> MixPool:
    """The whole mix to a warm pool at once (as a training step's batch would go); with --budget-s, what has
    finished when it runs out is kept and the rest dropped, so a slow run still reports figures. Returns the closed
    pool: its records, its one group's wall, its start-up and its workers' info."""
    pool = MixPool(args, harness.eval_settings(args), warm=True, num_workers=args.workers)
    try:
        evaluator = pool.start()  # warmed on a problem outside every mix, at small size
        args.parallel_effective, args.in_flight_effective = evaluator.parallel_compiles, evaluator.in_flight
        say(f"ours  {evaluator.parallel_compiles} children compiling at once and {evaluator.in_flight} evaluations "
            f"under way per worker, {evaluator.warm_children} pre-started")
        pool.run_group("mix", candidates, args.budget_s)
    finally:
        pool.close()
    return pool


# ---------------------------------------------------------------- figures


def agreement(verdicts: list[dict[str, Any]]) -> dict[str, Any]:
    """Right verdicts on the correct solutions and the wrong mutants (faults are wrong by definition)."""
    judged = [v for v in verdicts if v["expected"] in ("correct", "incorrect")]
    right = [v for v in judged if v["correct"] == (v["expected"] == "correct")]
    faults = [v for v in verdicts if v["expected"] == "fault"]
    return {
        "judged": len(judged), "right": len(right),
        "wrong_labels": [v["label"] for v in judged if v not in right],
        "faults_rejected": sum(1 for v in faults if not v["correct"]), "faults": len(faults),
    }


def summarise(candidates: list[Candidate], ours: MixPool, args: argparse.Namespace) -> dict[str, Any]:
    summary: dict[str, Any] = {
        "environment": harness.environment(args.device),
        "mix": "quick" if args.quick else ("cpu" if args.device == "cpu" else "full"),
        "candidates": len(candidates), "kinds": {k: sum(1 for c in candidates if c.kind == k) for k in MUTANTS},
        "settings": {"size": harness.eval_settings(args).size, "correctness_trials": args.correctness_trials,
                     "timing_trials": args.timing_trials, "warmup_trials": args.warmup_trials, "timeout_s": args.timeout,
                     "workers": args.workers},
        "floor_definition": FLOOR_DEFINITION,
    }
    verdicts, wall = ours.records, ours.groups[0]["wall_s"]
    if verdicts:
        summary["ours"] = {
            "candidates": len(verdicts), "wall_s": wall, "pool_startup_s": round(ours.startup_s or 0.0, 2),
            "pool_info": ours.info, "per_minute": round(60.0 * len(verdicts) / wall, 2) if wall else None,
            # throughput (wall a candidate less the mean floor) and latency (each one's worker_total less its floor)
            **harness.overhead_figures(verdicts, wall), **harness.mean_median(verdicts, "latency_overhead_steady_s", True),
            "serial_overhead_mean_s": harness.mean_median(verdicts, "serial_overhead_s")["serial_overhead_mean_s"],
            # What sets the wall: the device's busy time, and when the last hang started waiting out its timeout.
            "device_busy_s": round(sum(v["phase_seconds"].get("device_section", 0.0) for v in verdicts), 2),
            "non_hangs_done_at_s": max((v["finished_at_s"] for v in verdicts if v["category"] != "timeout"), default=None),
            "last_hang_started_at_s": max((round(v["finished_at_s"] - v["phase_seconds"].get("worker_total", 0.0), 2)
                                           for v in verdicts if v["category"] == "timeout"), default=None),
            "parallel_compiles": getattr(args, "parallel_effective", None),
            "in_flight": getattr(args, "in_flight_effective", None),
            "mean_phase_seconds": {p: round(statistics.mean(v["phase_seconds"].get(p, 0.0) for v in verdicts), 3)
                                   for p in sorted({k for v in verdicts for k in v["phase_seconds"]})},
            "agreement": agreement(verdicts),
        }
    summary["per_candidate"] = {"ours": verdicts}
    return summary


def print_table(summary: dict[str, Any]) -> None:
    """The figures that answer the question; the JSON has the rest."""
    env = summary["environment"]
    say(f"\n{summary['candidates']} candidates on {env['gpu'] or env['machine']} ({env['device']}), mix={summary['mix']}, "
        f"kinds={ {k: v for k, v in summary['kinds'].items() if v} }")
    o = summary.get("ours")
    if o is None:
        say("no candidate finished")
        return
    harness.print_table(["ran", "wall s", "cand/min", "s/cand", "right verdicts", "faults rejected"],
                        [[o["candidates"], o["wall_s"], o["per_minute"], o.get("wall_per_candidate_s"),
                          f"{o['agreement']['right']}/{o['agreement']['judged']}",
                          f"{o['agreement']['faults_rejected']}/{o['agreement']['faults']}"]])
    say(f"ours: pool start + warm-up {o['pool_startup_s']:.1f} s (not in the wall); floor {o['mean_floor_s']} s/cand; "
        f"overhead beyond it, s/cand: throughput (wall/cand - mean floor) {o['overhead_per_candidate_s']}; latency "
        f"(worker_total - floor) mean {o['latency_overhead_mean_s']}, median {o['latency_overhead_median_s']}; without "
        f"queueing for the device {o['latency_overhead_unqueued_mean_s']}, {o['latency_overhead_unqueued_median_s']}; "
        f"steady state (also without the once-per-problem sizing and baselines) {o['latency_overhead_steady_mean_s']}, "
        f"{o['latency_overhead_steady_median_s']}, max {o['latency_overhead_steady_max_s']}; exclusive device time "
        f"beyond the GPU work {o['serial_overhead_mean_s']}")
    say(f"ours: device busy {o['device_busy_s']} s of the wall; candidates that do not hang all done at "
        f"{o['non_hangs_done_at_s']} s; the last hang started at {o['last_hang_started_at_s']} s; mean phase seconds "
        f"{o['mean_phase_seconds']}")
    say(f"floor: {summary['floor_definition']}")


def run(args: argparse.Namespace) -> int:
    candidates = mix_for(args)
    say(f"{len(candidates)} candidates: " + ", ".join(c.label for c in candidates))
    summary = summarise(candidates, run_ours(candidates, args), args)
    print_table(summary)
    harness.write_json(args.out, summary, announce=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Evaluator throughput on a fixed mix of correct, wrong, crashing and hanging candidates.")
    harness.add_device(parser, size=None)
    harness.add_trials(parser, correctness=5, warmup=3, timing=None, timeout=None)  # timed 100 (cuda) or 3 (cpu); timeout 60 or 30 s
    harness.add_pool(parser)
    parser.add_argument("--quick", action="store_true", help="a smaller mix")
    parser.add_argument("--workers", type=int, default=None, help="Evaluator workers (default: its own choice)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N candidates of the mix (smoke runs)")
    parser.add_argument("--out", default=None, help="JSON output path")
    parser.add_argument("--budget-s", type=float, default=None,
                        help="stop waiting for the evaluator after this many seconds; what finished is reported")
    return harness.run_main(run, parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
