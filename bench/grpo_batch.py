"""A GRPO-shaped evaluation batch against its GPU floor, beside the rules' own GPU work done bare
(bench/mandated_floor.py) on the same problems. One run, each part with its own budget, the JSON rewritten after every
result; bench/README.md ("GRPO-shaped batch") says what each part and figure is. KernelBench's own harness beside
ours: kernelbench_sweep.py kb-harness.

    python bench/grpo_batch.py --problems-root .kb --out grpo.json
    python bench/grpo_batch.py --device cpu --size small --problems L1/19,L2/76 --samples 2   # the machinery only
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import harness  # noqa: E402 - after the path set-up above
import kernelbench_sweep as sweep  # noqa: E402
from harness import BadInput, JsonReport, SweepCandidate, say  # noqa: E402

# Eight problems a level, chosen once and kept so that runs compare: every op family KernelBench's levels 1 and 2
# have (matmul, matvec, norms, pooling, convolution, activation, loss; GEMM/conv with epilogues), all in the bundled
# set too. L1/20 stays out: the pool's warm-up candidate is its solution. L1/19 (4 GiB inputs) comes last of level 1,
# so a budget cut drops it first.
DEFAULT_PROBLEMS = {
    1: ("L1/1", "L1/4", "L1/40", "L1/42", "L1/63", "L1/88", "L1/95", "L1/19"),
    2: ("L2/1", "L2/12", "L2/29", "L2/40", "L2/57", "L2/59", "L2/76", "L2/99"),
}
FLOOR_DEFINITION = (
    "GPU floor of a batch = sum over its candidates of runtime_ms x (correctness calls, widened seeds included "
    "(trials_total) + warm-up calls + timed calls), + for each problem once: baseline_ms x (warm-up + timed calls), "
    "the reference's own timing as the worker does it. Not in it: compiles and imports, the reference's outputs "
    "for the correctness seeds, input generation; a candidate that is not correct counts 0.")


# ---------------------------------------------------------------- problems and candidates


def choose_problems(args: argparse.Namespace, root: Path) -> tuple[dict[int, list[Any]], dict[str, Any], list[str]]:
    """Per level, the problems of the batch; every problem of those levels; notes on substitutions."""
    from kernelbench_rl.problems import parse_problem_id

    notes: list[str] = []
    if args.problems:
        listed, problems = harness.problems_by_id(root, args.problems)
        chosen: dict[int, list[Any]] = {}
        for problem in listed:
            chosen.setdefault(problem.level, []).append(problem)
        return chosen, problems, notes
    levels = harness.parse_levels(args.levels)
    problems = harness.load_root_problems(root, levels)
    chosen = {}
    for level in levels:
        own = [p for p in problems.values() if p.level == level]
        if not own:
            raise BadInput(f"{root} has no problems of level {level} that load.")
        fixed = [problems[i] for i in DEFAULT_PROBLEMS.get(level, ()) if i in problems]
        if len(fixed) < len(DEFAULT_PROBLEMS.get(level, ())) or not fixed:
            # another suite's ids (kernrl's): the first problems of the level in number order, and say so
            fixed = sorted((p for p in own if p.id != "L1/20"), key=lambda p: parse_problem_id(p.id)[1])[: args.per_level]
            notes.append(f"level {level}: " + ("the fixed list is not all in " if level in DEFAULT_PROBLEMS else "no fixed list for it in ")
                         + f"{root}; took its first {len(fixed)} problems")
        chosen[level] = fixed[: args.per_level]
    return chosen, problems, notes


def batch_candidates(problems: list[Any], samples: int, size: str) -> list[SweepCandidate]:
    """Every problem's identity candidate `samples` times, each copy textually distinct (a trailing comment), in
    sample-major order (sample 0 of every problem, then sample 1, ...), as a policy's batch would arrive."""
    base = harness.identity_candidates(problems, size)
    out = []
    for k in range(samples):
        for c in base:
            out.append(SweepCandidate(f"{c.problem_id}/s{k}", c.problem_id, "identity",
                                      c.source.rstrip("\n") + f"\n# sample {k}\n", c.name))
    return out


# ---------------------------------------------------------------- figures


def gpu_floor(records: list[dict[str, Any]], settings: dict[str, Any]) -> dict[str, Any]:
    """The GPU time the batch's work needs at the least (FLOOR_DEFINITION), split into its two parts."""
    warm, timed = settings["warmup_trials"], settings["timing_trials"]
    candidates_s = sum((r["runtime_ms"] or 0.0) * (r["trials_total"] + warm + timed) / 1000.0
                       for r in records if r["correct"] and r["runtime_ms"])
    baseline_ms: dict[str, float] = {}
    for r in records:
        if r.get("baseline_ms"):
            baseline_ms.setdefault(r["problem_id"], r["baseline_ms"])
    baselines_s = sum(ms * (warm + timed) / 1000.0 for ms in baseline_ms.values())
    return {"candidates_s": round(candidates_s, 3), "baselines_s": round(baselines_s, 3),
            "total_s": round(candidates_s + baselines_s, 3), "problems_with_baseline": len(baseline_ms)}


def phase_breakdown(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Each phase key of EvalResult.phase_seconds summed over the candidates and its median per candidate (a
    candidate without the key counts 0); waits overlap other candidates' work, so sums can exceed the wall."""
    keys = sorted({k for r in records for k in r["phase_seconds"]})
    summed = {k: round(sum(r["phase_seconds"].get(k, 0.0) for r in records), 3) for k in keys}
    median = {k: round(statistics.median(r["phase_seconds"].get(k, 0.0) for r in records), 4) for k in keys} if records else {}
    return {"summed_s": dict(sorted(summed.items(), key=lambda kv: -kv[1])), "median_per_candidate_s": median}


def slowest(records: list[dict[str, Any]], count: int = 5) -> list[dict[str, Any]]:
    def latency(r: dict[str, Any]) -> float:
        return r["phase_seconds"].get("worker_total", 0.0)

    return [{"label": r["label"], "worker_total_s": round(latency(r), 3), "runtime_ms": r["runtime_ms"],
             "finished_at_s": r["finished_at_s"], "phase_seconds": r["phase_seconds"]}
            for r in sorted(records, key=latency, reverse=True)[:count]]


def timing_ways(records: list[dict[str, Any]]) -> dict[str, Any]:
    """How the batch was timed: candidates timed again side by side, those judged against a baseline a side-by-side
    timing refreshed, and where each problem's baseline was timed (a child running the reference, or the worker)."""
    homes: dict[str, str] = {}
    for r in records:
        home = (r.get("versions") or {}).get("baseline_timed_in")
        if home:
            homes.setdefault(r["problem_id"], home)
    return {
        "paired": sum(1 for r in records if str((r.get("versions") or {}).get("timing", "")).startswith("paired")),
        "baseline_refreshed": sum(1 for r in records if (r.get("versions") or {}).get("baseline_refreshed")),
        "baselines_timed_in": {home: sorted(p for p, h in homes.items() if h == home) for home in sorted(set(homes.values()))},
    }


def summarise_level(records: list[dict[str, Any]], group: dict[str, Any], settings: dict[str, Any],
                    planned: int) -> dict[str, Any]:
    wall = group.get("wall_s")
    floor = gpu_floor(records, settings)
    return {
        "planned": planned, "finished": len(records), "budget_cut": bool(group.get("budget_cut")),
        "not_finished": group.get("not_finished", []), "error": group.get("error"),
        "wall_s": wall, "gpu_floor": floor,
        "wall_over_floor": harness.rnd(wall / floor["total_s"], 2) if wall and floor["total_s"] else None,
        "candidates_per_min": harness.rnd(60.0 * len(records) / wall, 2) if wall and records else None,
        "wall_per_candidate_s": harness.rnd(wall / len(records), 3) if wall and records else None,
        "floor_per_candidate_s": harness.rnd(floor["total_s"] / len(records), 3) if records else None,
        "overhead_per_candidate_s": harness.rnd((wall - floor["total_s"]) / len(records), 3) if wall and records else None,
        "correct": sum(1 for r in records if r["correct"]),
        "all_correct": bool(records) and all(r["correct"] for r in records) and len(records) == planned,
        "not_correct": [{"label": r["label"], "category": r["category"], "message": r["message"]}
                        for r in records if not r["correct"]],
        "cached": sum(1 for r in records if r["cached"]),
        "speedup": harness.speedup_distribution(records),
        "timing_ways": timing_ways(records),
        "phases": phase_breakdown(records),
        "slowest": slowest(records),
    }


def with_mandated(summary: dict[str, Any], mandated: dict[str, Any], name: str) -> dict[str, Any]:
    """A level's summary with the bare loop's figures beside it: the rules' own GPU work over the floor (as the bare
    loop measured both), and this batch's wall over the bare loop's."""
    bare = (mandated.get("levels") or {}).get(name) or {}
    wall, bare_wall = summary.get("wall_s"), bare.get("bare_wall_s")
    summary["mandated"] = {
        "bare_wall_s": bare_wall, "bare_over_floor": bare.get("bare_over_floor"), "complete": bare.get("complete"),
        "wall_over_bare": harness.rnd(wall / bare_wall, 2) if wall and bare_wall else None,
    }
    return summary


def run_mandated(args: argparse.Namespace, chosen: dict[int, list[Any]]) -> dict[str, Any]:
    """bench/mandated_floor.py on this run's problems and trial counts, in a fresh process (its device memory is
    gone before the pool starts); its report, or why there is none."""
    ids = ",".join(p.id for level in sorted(chosen) for p in chosen[level])
    with tempfile.TemporaryDirectory(prefix="mandated_") as folder:
        out = os.path.join(folder, "mandated.json")
        command = [sys.executable, str(BENCH / "mandated_floor.py"), "--problems", ids, "--samples", str(args.samples),
                   "--device", args.device, "--size", args.size, "--out", out,
                   "--correctness-trials", str(args.correctness_trials), "--warmup-trials", str(args.warmup_trials),
                   "--timing-trials", str(args.timing_trials)]
        if args.problems_root:
            command += ["--problems-root", args.problems_root]
        started = time.perf_counter()
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=args.mandated_budget_s)
        except subprocess.TimeoutExpired:
            return {"status": "cut", "reason": f"past its budget of {args.mandated_budget_s:.0f} s"}
        for line in done.stdout.splitlines():
            say(f"bare  {line}")
        if done.returncode != 0 or not os.path.exists(out):
            tail = (done.stderr.strip().splitlines() or ["no message"])[-1]
            return {"status": "failed", "reason": f"exit {done.returncode}: {tail}"[:300]}
        report = json.loads(Path(out).read_text())
    report.update(status="done", process_wall_s=round(time.perf_counter() - started, 2))
    return report


# ---------------------------------------------------------------- the warm batch


class WarmBatch:
    """One pool, started and warmed before any clock; one `evaluate` call per level. A level cut by its budget
    leaves work in the pool, so the next level gets a fresh pool (started outside its clock too)."""

    def __init__(self, args: argparse.Namespace, root: Path, problems: dict[str, Any], on_record: Any) -> None:
        self.args, self.root, self.problems, self.on_record = args, root, problems, on_record
        self.run: sweep.OursRun | None = None
        self.levels: dict[str, dict[str, Any]] = {}  # name -> {"group", "records", "planned", "pool_startup_s"}
        self.pools: list[dict[str, Any]] = []

    def _fresh_pool(self) -> None:
        if self.run is not None:
            self.run.close()
        self.run = sweep.OursRun(self.args, self.root, self.problems, static_checks=False, on_record=self.on_record)
        self.run.start()
        self.pools.append({"startup_s": harness.rnd(self.run.startup_s, 2), "info": self.run.info})

    def run_level(self, name: str, candidates: list[SweepCandidate], budget_s: float | None) -> None:
        if self.run is None:
            self._fresh_pool()
        assert self.run is not None
        first = len(self.run.records)
        entry = {"planned": len(candidates), "pool": len(self.pools) - 1, "records": []}
        self.levels[name] = entry
        group = self.run.run_group(name, candidates, budget_s)
        entry["group"] = group
        entry["records"] = list(self.run.records[first:])  # frozen: a cut batch's late results are not its own
        if group.get("budget_cut") or group.get("error"):
            self.run.close()
            self.run = None

    def records(self, name: str) -> list[dict[str, Any]]:
        entry = self.levels.get(name)
        if entry is None:
            return []
        if "group" not in entry and self.run is not None:  # still running: what has finished so far
            return [r for r in self.run.records if r["label"].startswith(name + "/")]
        return entry["records"]

    def close(self) -> None:
        if self.run is not None:
            self.run.close()
            self.run = None


# ---------------------------------------------------------------- the run


def level_budget(args: argparse.Namespace) -> float | None:
    """A level's seconds: --warm-budget-s, and no more than what --total-budget-s leaves of the run."""
    return min((b for b in (args.warm_budget_s, harness.left_of(args.total_budget_s, args)) if b is not None),
               default=None)


def run(args: argparse.Namespace) -> int:
    root = harness.resolve_root(args.problems_root, bundled=True)
    chosen, problems, notes = choose_problems(args, root)
    harness.require_cuda(args.device)
    settings = {"device": args.device, "size": args.size, "correctness_trials": args.correctness_trials,
                "warmup_trials": args.warmup_trials, "timing_trials": args.timing_trials, "timeout_s": args.timeout,
                "static_checks": False, "samples_per_problem": args.samples}
    for note in notes:
        say(f"note: {note}")
    say(f"grpo-batch: levels {sorted(chosen)}, {sum(len(v) for v in chosen.values())} problems x {args.samples} samples "
        f"on {args.device} at {args.size} size from {root}")
    say(f"trial counts (the Evaluator's defaults unless flags say otherwise): correctness {args.correctness_trials} "
        f"(+ widened seeds where a problem's inputs cannot tell), warm-up {args.warmup_trials}, timed {args.timing_trials}; "
        f"timeout {args.timeout:.0f} s; static checks off (identity candidates are torch ops)")
    env = harness.environment(args.device)
    out_path = args.out or "grpo_batch.json"
    batches = {f"L{level}": batch_candidates(ps, args.samples, args.size) for level, ps in sorted(chosen.items())}
    warm = WarmBatch(args, root, problems, on_record=lambda _r: report.write())
    mandated: dict[str, Any] = {"status": "not run"}
    date = time.strftime("%Y-%m-%d")

    def warm_summaries() -> dict[str, Any]:
        return {name: with_mandated(summarise_level(warm.records(name), warm.levels[name].get("group", {}), settings,
                                                    len(batches[name])), mandated, name)
                for name in batches if name in warm.levels}

    def build() -> dict[str, Any]:
        return {"mode": "grpo-batch", "date": date, "environment": env, "problems_root": str(root), "settings": settings,
                "problems": {name: [p.id for p in chosen[int(name[1:])]] for name in batches}, "notes": notes,
                "floor_definition": FLOOR_DEFINITION, "mandated": mandated,
                "warm": {"pools": warm.pools, "levels": warm_summaries(),
                         "per_candidate": {name: warm.records(name) for name in batches if name in warm.levels}}}

    report = JsonReport(out_path, build)
    report.write()
    if args.no_mandated:
        mandated.update(status="skipped", reason="--no-mandated")
    else:
        say("\n== the rules' GPU work done bare (bench/mandated_floor.py, a process of its own)")
        mandated.update(run_mandated(args, chosen))
        report.write()
    try:
        for name, candidates in batches.items():
            budget = level_budget(args)
            say(f"\n== warm batch {name}: {len(candidates)} candidates in one evaluate call"
                + (f" (budget {budget:.0f} s)" if budget else ""))
            warm.run_level(name, candidates, budget)
            report.write()
            print_level(name, warm_summaries()[name])
    finally:
        warm.close()
    report.write()
    say(f"floor: {FLOOR_DEFINITION}")
    say(f"wrote {out_path}")
    return 0


def print_level(name: str, s: dict[str, Any]) -> None:
    f, bare, ways = s["gpu_floor"], s.get("mandated") or {}, s.get("timing_ways") or {}
    say(f"{name}: {s['finished']} of {s['planned']} finished{' (budget cut)' if s['budget_cut'] else ''}, "
        f"{s['correct']} correct; wall {s['wall_s']} s, GPU floor {f['total_s']} s (candidates {f['candidates_s']} + "
        f"baselines {f['baselines_s']}), wall/floor {s['wall_over_floor']}, {s['candidates_per_min']} candidates/min; "
        f"a candidate: wall {s['wall_per_candidate_s']} s, floor {s['floor_per_candidate_s']} s, "
        f"overhead {s['overhead_per_candidate_s']} s")
    if bare.get("bare_wall_s") and bare.get("bare_over_floor"):
        say(f"  the rules' GPU work done bare: {bare['bare_wall_s']} s = {bare['bare_over_floor']}x its floor; "
            f"this batch {bare['wall_over_bare']}x the bare loop")
    for r in s["not_correct"]:
        say(f"  not correct: {r['label']} {r['category']} {r['message'][:100]}")
    if s["speedup"].get("count"):
        say(f"  {harness.speedup_text(s['speedup'])}")
    if ways:
        say(f"  timed side by side: {ways['paired']}; judged against a refreshed baseline: {ways['baseline_refreshed']}; "
            f"baselines timed in: {ways['baselines_timed_in'] or '(none timed here)'}")
    top = list(s["phases"]["summed_s"].items())[:10]
    say("  phases summed (s), then the median per candidate: " + ", ".join(
        f"{k} {v} ({s['phases']['median_per_candidate_s'][k]})" for k, v in top))
    for r in s["slowest"]:
        phases = sorted(r["phase_seconds"].items(), key=lambda kv: -kv[1])[:6]
        say(f"  slow: {r['label']:14s} total {r['worker_total_s']} s: " + ", ".join(f"{k} {v}" for k, v in phases))


def add_batch_arguments(parser: argparse.ArgumentParser) -> None:
    """The batch's shape (problems, samples, device, size, trial counts): this script's and mandated_floor.py's."""
    parser.add_argument("--problems-root", "--kernelbench-root", dest="problems_root", default=None,
                        help="a KernelBench checkout or kernrl's problems folder (default: $KBRL_PROBLEMS_ROOT, "
                             "$KERNELBENCH_ROOT, else the bundled set)")
    parser.add_argument("--levels", default="1,2", help="levels (default 1,2), 8 problems each from a fixed list")
    parser.add_argument("--problems", default=None, help="problem ids instead of the fixed list, e.g. L1/19,L2/76")
    parser.add_argument("--per-level", type=int, default=8, help="problems a level from the fixed list (default 8)")
    parser.add_argument("--samples", type=int, default=8, help="distinct samples per problem (default 8)")
    harness.add_device(parser)
    harness.add_trials(parser)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="grpo_batch.py", description=__doc__.split("\n\n")[0],
                                     epilog="On the GPU machine: bash bench/device_suite.sh grpo-batch (bench/README.md).")
    add_batch_arguments(parser)
    harness.add_pool(parser)
    for flag, default, text in (("--warm-budget-s", None, "seconds per level's warm batch"),
                                ("--mandated-budget-s", 150.0, "the bare loop's limit (default 150)"),
                                ("--total-budget-s", None, "the whole run's seconds; a level gets no more than is left")):
        parser.add_argument(flag, type=float, default=default, help=text)
    parser.add_argument("--no-mandated", action="store_true", help="skip the bare loop")
    parser.add_argument("--out", default=None, help="JSON output (default grpo_batch.json)")
    return parser


def check_shape(args: argparse.Namespace) -> None:
    if args.samples < 1 or args.per_level < 1:
        raise BadInput("--samples and --per-level take a number of at least 1.")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return harness.run_main(lambda a: check_shape(a) or run(a), args)


if __name__ == "__main__":
    sys.exit(main())
