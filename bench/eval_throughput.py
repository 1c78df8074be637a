"""Evaluator throughput against a naive, KernelBench-style harness, on one device.

A fixed mix of candidates (known-correct solutions from KernelBench/solutions/ and mutants of them
that are wrong, crash or hang) runs through our Evaluator (warm pool) and through
bench/naive_harness.py (a fresh process per candidate, sequential) with the same trial counts and the
same per-candidate timeout. Prints candidates per minute for both, the ratio, our overhead per
candidate beyond the floor (compile + the GPU time of the trials themselves, from
EvalResult.phase_seconds and runtime_ms), and whether both harnesses get the verdicts right on the
correct solutions and the wrong mutants. Writes the figures as JSON.

    python bench/eval_throughput.py --out bench/results/throughput_h100.json          # GPU, full mix
    python bench/eval_throughput.py --quick                                            # GPU, small mix
    python bench/eval_throughput.py --device cpu --quick                               # offline smoke
"""

from __future__ import annotations

import argparse
import ast
import json
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "bench"))

# ---------------------------------------------------------------- mutants (AST edits of a solution)


def _jit_functions(tree: ast.Module) -> list[ast.FunctionDef]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            for deco in node.decorator_list:
                text = ast.unparse(deco)
                if "jit" in text or "autotune" in text:
                    found.append(node)
                    break
    return found


def _stores(fn: ast.FunctionDef) -> list[ast.Call]:
    return [n for n in ast.walk(fn) if isinstance(n, ast.Call) and ast.unparse(n.func).endswith("store") and len(n.args) >= 2]


def _forward(tree: ast.Module) -> ast.FunctionDef | None:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "ModelNew":
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "forward":
                    return item
    return None


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
    ("L2/9", ("correct", "wrong_constant", "raises", "hangs")),
]
QUICK_MIX: list[tuple[str, tuple[str, ...]]] = [
    ("L2/76", ("correct", "wrong_constant", "missing_bias")),
    ("L2/12", ("correct", "off_by_one", "raises")),
    ("L1/19", ("correct", "illegal_access")),
    ("L1/23", ("correct", "wrong_constant")),
    ("L2/9", ("correct", "hangs")),
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


# ---------------------------------------------------------------- the two harnesses


@dataclass
class HarnessRun:
    name: str
    wall_s: float
    startup_s: float = 0.0
    verdicts: list[dict[str, Any]] = field(default_factory=list)

    def per_minute(self, count: int) -> float:
        return 60.0 * count / self.wall_s if self.wall_s > 0 else float("nan")


def run_ours(candidates: list[Candidate], args: argparse.Namespace, progress: Callable[[str], None]) -> HarnessRun:
    from kernelbench_rl.evaluation import Evaluator
    from kernelbench_rl.evaluation.result import EvalRequest

    settings = _eval_settings(args)
    t0 = time.perf_counter()
    evaluator = Evaluator(settings, num_workers=args.workers, store=None)
    evaluator.__enter__()
    try:
        # Warm the pool (workers, zygotes, CUDA) on a problem outside every mix, at small size, so the
        # measured wall is a warm pool's; the start-up is reported on its own.
        warm = _warmup_request(settings)
        if warm is not None:
            evaluator.evaluate([warm])
        startup = time.perf_counter() - t0
        requests = [EvalRequest(c.problem_id, c.source, settings, request_id=c.label) for c in candidates]
        t0 = time.perf_counter()
        results = evaluator.evaluate(requests)
        wall = time.perf_counter() - t0
    finally:
        evaluator.__exit__(None, None, None)
    run = HarnessRun("ours", wall, startup)
    calls = settings.correctness_trials + settings.warmup_trials + settings.timing_trials
    for cand, res in zip(candidates, results):
        phases = dict(res.phase_seconds)
        gpu_trials_s = (res.runtime_ms or 0.0) * calls / 1000.0 if res.correct else 0.0
        floor = phases.get("compile", 0.0) + gpu_trials_s
        if res.error_category.value == "timeout":
            floor += settings.timeout_s  # waiting out a hang is part of any harness's floor
        run.verdicts.append({
            "label": cand.label, "kind": cand.kind, "expected": cand.expected, "correct": res.correct,
            "category": res.error_category.value, "flags": res.flags, "runtime_ms": res.runtime_ms,
            "baseline_ms": res.baseline_ms, "speedup": res.speedup, "phase_seconds": phases,
            "floor_s": floor, "message": res.error_message[:160],
        })
        progress(f"ours  {cand.label:28s} {res.error_category.value:9s} correct={res.correct}")
    return run


WARMUP_PROBLEM = "L1/20"


def _warmup_request(settings: Any) -> Any:
    import dataclasses

    from kernelbench_rl.evaluation.result import EvalRequest
    from kernelbench_rl.problems import get_problem, load_solution

    solution = load_solution(get_problem(WARMUP_PROBLEM))
    if not solution:
        return None
    small = dataclasses.replace(settings, size="small", correctness_trials=1, timing_trials=1, warmup_trials=1)
    return EvalRequest(WARMUP_PROBLEM, solution, small, request_id="throughput/warmup")


def run_naive(candidates: list[Candidate], args: argparse.Namespace, progress: Callable[[str], None]) -> HarnessRun:
    from naive_harness import NaiveHarness, NaiveSettings

    from kernelbench_rl.problems import get_problem

    settings = _eval_settings(args)
    harness = NaiveHarness(NaiveSettings(
        device=args.device, correctness_trials=settings.correctness_trials, timing_trials=settings.timing_trials,
        warmup_trials=settings.warmup_trials, timeout_s=settings.timeout_s,
    ))
    run = HarnessRun("naive", 0.0)
    t0 = time.perf_counter()
    for cand in candidates:
        problem = get_problem(cand.problem_id)
        res = harness.evaluate(problem.id, problem.source_for(settings.size), cand.source, label=cand.label)
        run.verdicts.append({
            "label": cand.label, "kind": cand.kind, "expected": cand.expected, "correct": res.correct,
            "category": "timeout" if res.timed_out else ("ok" if res.correct else "fail"),
            "runtime_ms": res.runtime_ms, "baseline_ms": res.baseline_ms, "speedup": res.speedup,
            "phase_seconds": res.phase_seconds, "wall_s": res.wall_s, "message": res.error[:160],
        })
        progress(f"naive {cand.label:28s} correct={res.correct} {res.wall_s:6.1f} s {res.error[:60]}")
    run.wall_s = time.perf_counter() - t0
    return run


def _eval_settings(args: argparse.Namespace) -> Any:
    from kernelbench_rl.evaluation.result import EvalSettings

    size = args.size or ("real" if args.device == "cuda" else "small")
    return EvalSettings(device=args.device, size=size, correctness_trials=args.trials, timing_trials=args.timing_trials,
                        warmup_trials=3, timeout_s=args.timeout)


# ---------------------------------------------------------------- figures


def agreement(run: HarnessRun) -> dict[str, Any]:
    """Right verdicts on the correct solutions and the wrong mutants (faults are wrong by definition)."""
    judged = [v for v in run.verdicts if v["expected"] in ("correct", "incorrect")]
    right = [v for v in judged if v["correct"] == (v["expected"] == "correct")]
    faults = [v for v in run.verdicts if v["expected"] == "fault"]
    return {
        "judged": len(judged), "right": len(right),
        "wrong_labels": [v["label"] for v in judged if v not in right],
        "faults_rejected": sum(1 for v in faults if not v["correct"]), "faults": len(faults),
    }


def summarise(candidates: list[Candidate], ours: HarnessRun | None, naive: HarnessRun | None, args: argparse.Namespace) -> dict[str, Any]:
    import torch

    count = len(candidates)
    summary: dict[str, Any] = {
        "device": args.device,
        "device_name": torch.cuda.get_device_name(0) if args.device == "cuda" and torch.cuda.is_available() else platform.machine(),
        "torch": torch.__version__, "mix": "quick" if args.quick else ("cpu" if args.device == "cpu" else "full"),
        "candidates": count, "kinds": {k: sum(1 for c in candidates if c.kind == k) for k in MUTANTS},
        "settings": {"size": _eval_settings(args).size, "correctness_trials": args.trials,
                     "timing_trials": args.timing_trials, "warmup_trials": 3, "timeout_s": args.timeout,
                     "workers": args.workers},
    }
    if ours is not None:
        floors = [v["floor_s"] for v in ours.verdicts]
        per_candidate = ours.wall_s / count
        phase_names = sorted({k for v in ours.verdicts for k in v["phase_seconds"]})
        summary["ours"] = {
            "wall_s": round(ours.wall_s, 2), "pool_startup_s": round(ours.startup_s, 2),
            "per_minute": round(ours.per_minute(count), 2), "wall_per_candidate_s": round(per_candidate, 3),
            "mean_floor_s": round(statistics.mean(floors), 3),
            "overhead_per_candidate_s": round(per_candidate - statistics.mean(floors), 3),
            "mean_phase_seconds": {p: round(statistics.mean(v["phase_seconds"].get(p, 0.0) for v in ours.verdicts), 3)
                                   for p in phase_names},
            "agreement": agreement(ours),
        }
    if naive is not None:
        summary["naive"] = {
            "wall_s": round(naive.wall_s, 2), "per_minute": round(naive.per_minute(count), 2),
            "wall_per_candidate_s": round(naive.wall_s / count, 3), "agreement": agreement(naive),
        }
    if ours is not None and naive is not None:
        summary["throughput_ratio"] = round(ours.per_minute(count) / naive.per_minute(count), 2)
        summary["targets"] = {
            "ratio_at_least_5x": summary["throughput_ratio"] >= 5.0,
            "overhead_below_0.5s": summary["ours"]["overhead_per_candidate_s"] < 0.5,
        }
    summary["per_candidate"] = {
        "ours": ours.verdicts if ours else [], "naive": naive.verdicts if naive else [],
    }
    return summary


def print_table(summary: dict[str, Any]) -> None:
    print(f"\n{summary['candidates']} candidates on {summary['device_name']} ({summary['device']}), "
          f"mix={summary['mix']}, kinds={ {k: v for k, v in summary['kinds'].items() if v} }")
    print(f"{'harness':8s} {'wall s':>8s} {'cand/min':>9s} {'s/cand':>8s} {'right verdicts':>15s} {'faults rejected':>16s}")
    for name in ("ours", "naive"):
        if name in summary:
            s = summary[name]
            a = s["agreement"]
            print(f"{name:8s} {s['wall_s']:8.1f} {s['per_minute']:9.2f} {s['wall_per_candidate_s']:8.2f} "
                  f"{a['right']:>7d}/{a['judged']:<7d} {a['faults_rejected']:>8d}/{a['faults']:<7d}")
    if "throughput_ratio" in summary:
        print(f"throughput ratio (ours / naive): {summary['throughput_ratio']:.2f}x   targets: {summary['targets']}")
    if "ours" in summary:
        o = summary["ours"]
        print(f"ours: pool start + warm-up {o['pool_startup_s']:.1f} s (not in the wall), floor {o['mean_floor_s']:.3f} s/cand, "
              f"overhead beyond the floor {o['overhead_per_candidate_s']:.3f} s/cand")
        print(f"ours: mean phase seconds {o['mean_phase_seconds']}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Evaluator throughput vs a KernelBench-style naive harness.")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--quick", action="store_true", help="a smaller mix")
    parser.add_argument("--size", choices=["real", "small"], default=None, help="default: real on cuda, small on cpu")
    parser.add_argument("--trials", type=int, default=5, help="correctness trials (both harnesses)")
    parser.add_argument("--timing-trials", type=int, default=None, help="timed trials (both); default 100 (cuda), 3 (cpu)")
    parser.add_argument("--timeout", type=float, default=None, help="per-candidate timeout shared by both harnesses")
    parser.add_argument("--workers", type=int, default=None, help="Evaluator workers (default: its own choice)")
    parser.add_argument("--harness", choices=["both", "ours", "naive"], default="both")
    parser.add_argument("--limit", type=int, default=None, help="only the first N candidates of the mix (smoke runs)")
    parser.add_argument("--out", default=None, help="JSON output path")
    args = parser.parse_args(argv)
    if args.timing_trials is None:
        args.timing_trials = 100 if args.device == "cuda" else 3
    if args.timeout is None:
        args.timeout = 60.0 if args.device == "cuda" else 30.0
    if args.device == "cpu":
        import os

        os.environ.setdefault("TRITON_INTERPRET", "1")

    mix = CPU_MIX if args.device == "cpu" else (QUICK_MIX if args.quick else FULL_MIX)

    def say(text: str) -> None:
        print(text, flush=True)

    candidates = build_mix(mix, warn=lambda text: say(f"warning: {text}"))
    if args.limit:
        candidates = candidates[: args.limit]
    say(f"{len(candidates)} candidates: " + ", ".join(c.label for c in candidates))
    ours = run_ours(candidates, args, say) if args.harness in ("both", "ours") else None
    naive = run_naive(candidates, args, say) if args.harness in ("both", "naive") else None
    summary = summarise(candidates, ours, naive, args)
    print_table(summary)
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(summary, indent=2, default=str))
        say(f"wrote {out}")


if __name__ == "__main__":
    main()
