"""A GRPO-shaped evaluation batch against its GPU floor, beside the rules' own GPU work done bare
(bench/mandated_floor.py), a cold eval-dir-style folder and KernelBench's own harness on the same problems. One run,
each part with its own budget, the JSON rewritten after every result; bench/README.md ("GRPO-shaped batch") says what
each part and figure is.

    python bench/grpo_batch.py --problems-root .kb --kb-site /tmp/kb_site --duck-site /tmp/duck_site --out grpo.json
    python bench/grpo_batch.py --device cpu --size small --problems L1/19,L2/76 --samples 2   # the machinery only
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
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
# set too. L1/20 stays out: the pool's warm-up candidate is its solution. L1/19 comes last of level 1 because
# KernelBench's harness spends 60-90 s on it (its inputs are built on the CPU), so a budget cut drops it first.
DEFAULT_PROBLEMS = {
    1: ("L1/1", "L1/4", "L1/40", "L1/42", "L1/63", "L1/88", "L1/95", "L1/19"),
    2: ("L2/1", "L2/12", "L2/29", "L2/40", "L2/57", "L2/59", "L2/76", "L2/99"),
}
# Problems KernelBench's harness spent 60-120 s on at real size on an H100 (bench/results/kb_harness_*): it builds
# their multi-GiB inputs on the CPU.
KB_SLOW = frozenset({"L1/19", "L1/23", "L1/47"})
COLD_RESULT_PREFIX = "GRPO_COLD_RESULT "
FLOOR_DEFINITION = (
    "GPU floor of a batch = sum over its candidates of runtime_ms x (correctness calls, widened seeds included "
    "(trials_total) + warm-up calls + timed calls), + for each problem once: baseline_ms x (warm-up + timed calls), "
    "the reference's own timing as the worker does it. Not in it: compiles and imports, the reference's outputs "
    "for the correctness seeds, input generation; a candidate that is not correct counts 0.")


# ---------------------------------------------------------------- problems and candidates


def resolve_root(value: str | None) -> Path:
    """The problem source (a KernelBench checkout or kernrl's folder), else the bundled set."""
    return harness.resolve_root(value, bundled=True)


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
    import subprocess

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


# ---------------------------------------------------------------- part 1: the warm batch


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


# ---------------------------------------------------------------- part 2: cold folder, eval-dir's way


def generation_file_name(problem: Any) -> str:
    """eval-dir's naming: KernelBench's level_{L}_problem_{P}_sample_{S}_kernel.py for L<l>/<n> ids, else
    kernrl's {id}_sample_{S}_kernel.py."""
    from kernelbench_rl.problems import parse_problem_id

    try:
        level, number = parse_problem_id(problem.id)
        return f"level_{level}_problem_{number}_sample_0_kernel.py"
    except ValueError:
        return f"{problem.id}_sample_0_kernel.py"


def run_cold(args: argparse.Namespace, root: Path, problems: list[Any], level: int) -> dict[str, Any]:
    """A fresh process evaluates a folder of one candidate per problem as eval-dir does; wall from start to exit."""
    out: dict[str, Any] = {"status": "not run", "level": level, "problems": [p.id for p in problems]}
    with tempfile.TemporaryDirectory(prefix="grpo_cold_") as work:
        folder = Path(work) / "generations"
        folder.mkdir()
        for cand, problem in zip(harness.identity_candidates(problems, args.size), problems):
            (folder / generation_file_name(problem)).write_text(cand.source)
        spec = {"folder": str(folder), "level": level, "root": str(root), "db": str(Path(work) / "cold.duckdb"),
                "device": args.device, "size": args.size, "timeout_s": args.timeout,
                "correctness_trials": args.correctness_trials, "timing_trials": args.timing_trials,
                "warmup_trials": args.warmup_trials, "warm_children": args.warm_children,
                "in_flight": args.in_flight, "parallel_compiles": args.parallel_compiles}
        spec_path = Path(work) / "cold_spec.json"
        spec_path.write_text(json.dumps(spec))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (args.duck_site, str(BENCH.parent), os.environ.get("PYTHONPATH")) if p)
        found, wall, tail, timed_out = harness.run_child([str(Path(__file__).resolve()), "--cold-child", str(spec_path)],
                                                       env, work, args.cold_budget_s, result_prefix=COLD_RESULT_PREFIX)
    if found is None:
        out["status"] = "failed"
        out["reason"] = (f"cut at its budget of {args.cold_budget_s:.0f} s" if timed_out else
                         f"the process ended with no result ({tail})")
        return out
    if found.get("skipped"):
        out.update(status="skipped", reason=found["skipped"])
        return out
    out.update(found)
    out["status"] = "done"
    out["process_wall_s"] = round(wall, 2)
    return out


def cold_child(spec_path: str) -> None:
    """Inside the fresh process: eval-dir's steps (naming scan, a fresh DuckDB, an Evaluator with the store, one
    batch, eval_results.json), with static checks off for the identity candidates (eval-dir has no switch)."""
    import re

    t_start = time.perf_counter()
    spec = json.loads(Path(spec_path).read_text())
    out: dict[str, Any] = {"phases_s": {}}
    try:
        import duckdb  # noqa: F401 - the store's only engine
    except ImportError as exc:
        print(COLD_RESULT_PREFIX + json.dumps({"skipped": f"duckdb does not import here ({exc}); the GPU suite "
                                                           "installs it from .whl-duck/ into --duck-site"}), flush=True)
        return
    from kernelbench_rl.evaluation import Evaluator
    from kernelbench_rl.evaluation.result import EvalRequest, EvalSettings
    from kernelbench_rl.problems import get_problem
    from kernelbench_rl.store import Store

    out["phases_s"]["imports"] = round(time.perf_counter() - t_start, 3)
    t = time.perf_counter()
    level = spec["level"]
    pattern = re.compile(r"^level_(\d+)_problem_(\d+)_sample_(\d+)_kernel\.py$")
    kernrl = re.compile(r"^(L(\d+)_.+)_sample_(\d+)_kernel\.py$")
    files = []
    for path in sorted(Path(spec["folder"]).iterdir()):
        m = pattern.match(path.name)
        if m and int(m.group(1)) == level:
            files.append((f"L{level}/{int(m.group(2))}", int(m.group(3)), path))
            continue
        m = kernrl.match(path.name)
        if m and int(m.group(2)) == level:
            files.append((m.group(1), int(m.group(3)), path))
    settings = EvalSettings(device=spec["device"], size=spec["size"], timeout_s=spec["timeout_s"],
                            correctness_trials=spec["correctness_trials"], timing_trials=spec["timing_trials"],
                            warmup_trials=spec["warmup_trials"])
    store = Store(spec["db"])
    requests = []
    for pid, _sample, path in files:
        get_problem(pid, spec["root"])  # eval-dir resolves every id before the pool starts
        requests.append(EvalRequest(pid, path.read_text(), settings, request_id=path.name))
    out["phases_s"]["scan_and_problems"] = round(time.perf_counter() - t, 3)
    t = time.perf_counter()
    evaluator = Evaluator(settings, store=store, problems_root=spec["root"], static_checks=False,
                          warm_children=spec.get("warm_children"), in_flight=spec.get("in_flight"),
                          parallel_compiles=spec.get("parallel_compiles"))
    try:
        evaluator.start()
        out["phases_s"]["pool_start_to_ready"] = round(time.perf_counter() - t, 3)
        t = time.perf_counter()
        results = evaluator.evaluate(requests)
        out["phases_s"]["evaluate"] = round(time.perf_counter() - t, 3)
    finally:
        t = time.perf_counter()
        evaluator.close(wait=False)  # as eval-dir does once every verdict is in
        out["phases_s"]["pool_close"] = round(time.perf_counter() - t, 3)
    t = time.perf_counter()
    entries: dict[str, list[dict[str, Any]]] = {}
    for (pid, sample, _path), result in zip(files, results):
        entries.setdefault(pid.split("/")[-1], []).append(
            {"sample_id": sample, "compiled": bool(result.compiled), "correctness": bool(result.correct),
             "runtime": result.runtime_ms if result.runtime_ms is not None else -1.0})
    (Path(spec["folder"]) / "eval_results.json").write_text(json.dumps(entries, indent=2))
    stored = store.count("evaluations")
    out["phases_s"]["results_file"] = round(time.perf_counter() - t, 3)
    out["stored_verdicts"] = int(stored)
    out["verdicts"] = [{"problem_id": r.problem_id, "file": p.name, "category": r.error_category.value,
                        "correct": bool(r.correct), "runtime_ms": r.runtime_ms, "baseline_ms": r.baseline_ms,
                        "speedup": r.speedup, "message": harness.first_line(r.error_message),
                        "worker_total_s": r.phase_seconds.get("worker_total")} for (_pid, _s, p), r in zip(files, results)]
    out["correct"] = sum(1 for r in results if r.correct)
    out["candidates"] = len(results)
    out["in_process_s"] = round(time.perf_counter() - t_start, 3)
    print(COLD_RESULT_PREFIX + json.dumps(out, default=str), flush=True)


# ---------------------------------------------------------------- part 3: KernelBench's harness


def run_kb(args: argparse.Namespace, root: Path, chosen: dict[int, list[Any]], state: dict[str, Any],
           on_record: Any) -> None:
    """One identity sample per problem through KernelBench's eval_kernel_against_ref, a process each, levels
    alternating, none launched that would end past the budget (estimated from the mean so far)."""
    if args.device != "cuda":
        state.update(status="skipped", reason="KernelBench's eval_kernel_against_ref asserts CUDA; this run is on the CPU")
        return
    if args.no_kb:
        state.update(status="skipped", reason="--no-kb")
        return
    try:
        src_dir = sweep.kb_source_dir(root)
        state["preflight"] = sweep.kb_preflight(src_dir, args)
    except BadInput as exc:
        state.update(status="skipped", reason=str(exc))
        return
    candidates = sweep.order_by_level([c for level in sorted(chosen) for c in harness.identity_candidates(chosen[level], args.size)])
    # levels alternate; the problems its harness takes 60-120 s on go last, so a cut costs the fewest problems
    candidates = [c for c in candidates if c.problem_id not in KB_SLOW] + [c for c in candidates if c.problem_id in KB_SLOW]
    budget = args.kb_budget_s
    if budget is None and args.total_budget_s is not None:
        budget = max(0.0, args.total_budget_s - (time.perf_counter() - args.script_start) - 5.0)
    state.update(status="running", planned=[c.label for c in candidates], budget_s=harness.rnd(budget, 1),
                 settings={**sweep.kb_settings(args), "trial_counts": "the same as ours in this run"})

    def progress(seconds: float) -> None:
        state["wall_s"] = round(seconds, 2)
        on_record()

    references = {p.id: p for ps in chosen.values() for p in ps}
    state["not_reached"] = sweep.run_kb_side(candidates, references, src_dir, args, budget, state["records"], progress)
    state["status"] = "done"


def kb_comparison(kb_state: dict[str, Any], warm_levels: dict[str, Any], cold: dict[str, Any]) -> dict[str, Any]:
    """KernelBench's seconds per candidate over ours in the warm batch, per level; and its wall on the cold part's
    problems over the cold part's process wall."""
    records = kb_state.get("records", [])
    out: dict[str, Any] = {"per_level": {}}
    for name, summary in warm_levels.items():
        kb = [r for r in records if f"L{r['level']}" == name]
        ours = summary.get("wall_per_candidate_s")
        kb_per = statistics.mean(r["wall_s"] for r in kb) if kb else None
        bare_wall = (summary.get("mandated") or {}).get("bare_wall_s")
        bare = bare_wall / summary["finished"] if bare_wall and summary.get("finished") else None
        out["per_level"][name] = {
            "kb_candidates": len(kb), "kb_correct": sum(1 for r in kb if r["correctness"]),
            "kb_s_per_candidate": harness.rnd(kb_per, 2), "ours_warm_s_per_candidate": ours,
            "kb_over_ours_warm": harness.rnd(kb_per / ours, 2) if kb_per and ours else None,
            # the most any evaluator that follows the rules could reach here: the bare loop's wall a candidate
            "kb_over_bare": harness.rnd(kb_per / bare, 2) if kb_per and bare else None,
            "kb_not_correct": [{"label": r["label"], "error": harness.first_line(r["error"])} for r in kb if not r["correctness"]],
            # a cut leaves its mean over fewer problems than our batch covers
            "kb_not_reached": [label for label in kb_state.get("not_reached", []) if label.startswith(name + "/")],
        }
    if cold.get("status") == "done":
        wanted = {f"{pid}/identity" for pid in cold["problems"]}
        kb = [r for r in records if r["label"] in wanted]
        kb_wall = sum(r["wall_s"] for r in kb)
        entry: dict[str, Any] = {"problems": len(wanted), "kb_reached": len(kb), "kb_wall_s": round(kb_wall, 2),
                                 "cold_process_wall_s": cold["process_wall_s"]}
        if kb and len(kb) == len(wanted):
            entry["kb_over_cold"] = harness.rnd(kb_wall / cold["process_wall_s"], 2)
        elif kb:
            # not every problem reached: per candidate, the cold wall spread evenly
            entry["kb_over_cold_per_candidate"] = harness.rnd((kb_wall / len(kb)) / (cold["process_wall_s"] / len(wanted)), 2)
            entry["note"] = "KernelBench's harness did not reach every problem: ratio of seconds per candidate"
        out["cold"] = entry
    out["note"] = ("kb_over_ours_warm = KernelBench's mean process wall per candidate (Python start, imports, its "
                   "reference and candidate, timing, exit) over our warm batch's wall per candidate (the level's "
                   "evaluate call over its candidates); kb_over_bare = the same over the bare loop of the rules' GPU "
                   "work (bench/mandated_floor.py) a candidate; kb_over_cold = its summed wall on the cold part's problems "
                   "over the cold process's wall (start to exit, pool start included)")
    return out


# ---------------------------------------------------------------- the run


def run(args: argparse.Namespace) -> int:
    root = resolve_root(args.problems_root)
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
    kb_state: dict[str, Any] = {"status": "not run", "records": [], "budget_s": args.kb_budget_s, "wall_s": None}
    cold: dict[str, Any] = {"status": "not run"}
    mandated: dict[str, Any] = {"status": "not run"}
    date = time.strftime("%Y-%m-%d")

    def warm_summaries() -> dict[str, Any]:
        return {name: with_mandated(summarise_level(warm.records(name), warm.levels[name].get("group", {}), settings,
                                                    len(batches[name])), mandated, name)
                for name in batches if name in warm.levels}

    def build() -> dict[str, Any]:
        levels = warm_summaries()
        return {"mode": "grpo-batch", "date": date, "environment": env, "problems_root": str(root), "settings": settings,
                "problems": {name: [p.id for p in chosen[int(name[1:])]] for name in batches}, "notes": notes,
                "floor_definition": FLOOR_DEFINITION,
                "warm": {"pools": warm.pools, "levels": levels,
                         "per_candidate": {name: warm.records(name) for name in batches if name in warm.levels}},
                "mandated": mandated, "cold": cold, "kb": {k: v for k, v in kb_state.items() if k != "records"},
                "comparison": kb_comparison(kb_state, levels, cold),
                "per_candidate_kb": kb_state["records"]}

    report = JsonReport(out_path, build)
    report.write()
    if args.no_mandated or args.no_warm:
        mandated.update(status="skipped", reason="--no-mandated" if args.no_mandated else "--no-warm")
    else:
        say("\n== the rules' GPU work done bare (bench/mandated_floor.py, a process of its own)")
        mandated.update(run_mandated(args, chosen))
        report.write()
    try:
        for name, candidates in ({} if args.no_warm else batches).items():
            say(f"\n== warm batch {name}: {len(candidates)} candidates in one evaluate call"
                + (f" (budget {args.warm_budget_s:.0f} s)" if args.warm_budget_s else ""))
            warm.run_level(name, candidates, args.warm_budget_s)
            report.write()
            print_level(name, warm_summaries()[name])
    finally:
        warm.close()
    report.write()
    cold_problems = chosen.get(args.cold_level, [])
    if args.no_cold:
        cold.update(status="skipped", reason="--no-cold")
    elif not cold_problems:
        cold.update(status="skipped", reason=f"no level-{args.cold_level} problem in this run")
    else:
        say(f"\n== cold folder: level {args.cold_level}, {len(cold_problems)} candidates, eval-dir's way in a fresh process")
        cold.update(run_cold(args, root, cold_problems, args.cold_level))
        report.write()
    say("\n== KernelBench's harness: one sample per problem, a fresh process each")
    run_kb(args, root, chosen, kb_state, report.write)
    if kb_state["status"] == "skipped":
        say(f"kb    skipped: {kb_state['reason']}")
    report.write()
    print_comparison(build()["comparison"], cold)
    say(f"floor: {FLOOR_DEFINITION}")
    say(f"wrote {out_path}")
    return 0


def print_level(name: str, s: dict[str, Any]) -> None:
    f, bare, sp, ways = s["gpu_floor"], s.get("mandated") or {}, s["speedup"], s.get("timing_ways") or {}
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
    if sp.get("count"):
        say(f"  identical-code speedup over {sp['count']}: median {sp['median']}, within [0.95, 1.05] "
            f"{sp['share_within_0.95_1.05']}, outside [0.8, 1.25]: "
            + (", ".join(f"{o['label']} {o['speedup']}" for o in sp["outside_0.8_1.25"]) or "none"))
    if ways:
        say(f"  timed side by side: {ways['paired']}; judged against a refreshed baseline: {ways['baseline_refreshed']}; "
            f"baselines timed in: {ways['baselines_timed_in'] or '(none timed here)'}")
    top = list(s["phases"]["summed_s"].items())[:10]
    say("  phases summed (s), then the median per candidate: " + ", ".join(
        f"{k} {v} ({s['phases']['median_per_candidate_s'][k]})" for k, v in top))
    for r in s["slowest"]:
        phases = sorted(r["phase_seconds"].items(), key=lambda kv: -kv[1])[:6]
        say(f"  slow: {r['label']:14s} total {r['worker_total_s']} s: " + ", ".join(f"{k} {v}" for k, v in phases))


def print_comparison(c: dict[str, Any], cold: dict[str, Any]) -> None:
    if cold.get("status") != "done":
        say(f"cold  {cold.get('status')}: {cold.get('reason', '')}")
    else:
        say(f"cold  {cold['correct']} of {cold['candidates']} correct; process wall {cold['process_wall_s']} s (start to "
            f"exit), pool start to ready {cold['phases_s'].get('pool_start_to_ready')} s; phases {cold['phases_s']}")
    for name, s in c["per_level"].items():
        say(f"{name}: KernelBench {s['kb_s_per_candidate']} s a candidate ({s['kb_candidates']} run, {s['kb_correct']} "
            f"correct), ours warm {s['ours_warm_s_per_candidate']} s: KernelBench/ours {s['kb_over_ours_warm']}, "
            f"KernelBench/bare loop {s['kb_over_bare']}; not reached: {', '.join(s['kb_not_reached']) or 'none'}")
    if "cold" in c:
        s = c["cold"]
        say(f"cold: KernelBench {s['kb_wall_s']} s on {s['kb_reached']} of {s['problems']} problems, our cold process "
            f"{s['cold_process_wall_s']} s: KernelBench/ours {s.get('kb_over_cold', s.get('kb_over_cold_per_candidate'))}")


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
                                ("--cold-budget-s", 120.0, "the cold process's limit (default 120)"),
                                ("--mandated-budget-s", 150.0, "the bare loop's limit (default 150)"),
                                ("--kb-budget-s", None, "KernelBench's harness launches no candidate that would end past "
                                                        "this (default: what --total-budget-s leaves, else none)"),
                                ("--total-budget-s", None, "the whole run's seconds; KernelBench's harness gets what is left")):
        parser.add_argument(flag, type=float, default=default, help=text)
    parser.add_argument("--cold-level", type=int, default=2, help="the level of the cold folder part (default 2)")
    for flag, text in (("--no-cold", "skip the cold folder part"), ("--no-mandated", "skip the bare loop"),
                       ("--no-warm", "skip the warm batch (the cold folder and the harness only)"),
                       ("--no-kb", "skip KernelBench's harness"), ("--kb-exact-fp32", "TF32 off in KernelBench's processes")):
        parser.add_argument(flag, action="store_true", help=text)
    parser.add_argument("--duck-site", default=os.environ.get("DUCK_SITE"),
                        help="a folder with duckdb (pip install --target), on the cold process's path only")
    parser.add_argument("--kb-site", default=os.environ.get("KB_SITE"),
                        help="a folder with KernelBench's pydantic, on its processes' path only")
    parser.add_argument("--out", default=None, help="JSON output (default grpo_batch.json)")
    return parser


def check_shape(args: argparse.Namespace) -> None:
    if args.samples < 1 or args.per_level < 1:
        raise BadInput("--samples and --per-level take a number of at least 1.")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) == 2 and argv[0] == "--cold-child":
        cold_child(argv[1])
        return 0
    args = build_parser().parse_args(argv)
    return harness.run_main(lambda a: check_shape(a) or run(a), args)


if __name__ == "__main__":
    sys.exit(main())
