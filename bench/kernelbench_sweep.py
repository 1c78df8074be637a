"""Our evaluator on the real KernelBench (or kernrl's problems), at real size, on one device; KernelBench's own harness
beside it. Each mode writes one JSON file, rewritten after every result (a run cut off keeps what finished):

    identity    every problem's own source as the candidate (`Model` renamed `ModelNew`) in one `evaluate` call:
                identical code must be judged correct and read a speedup of 1.00
    solutions   every bundled solution on the KernelBench problem of the same id, static checks on
    kb-harness  KernelBench's eval_kernel_against_ref, a fresh process per candidate, then ours on the same candidates

    python bench/kernelbench_sweep.py identity --kernelbench-root .kb --levels 1 --out $OUT/kb_identity_l1.json
    python bench/kernelbench_sweep.py kb-harness --kernelbench-root .kb --kb-site /tmp/kb_site --budget-s 360
    python bench/kernelbench_sweep.py identity --device cpu --size small --problems L1/19,L1/23   # the machinery only

bench/README.md ("KernelBench sweep") says what each figure means.
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
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402 - after the path set-up above
from harness import (  # noqa: E402,F401 - the shared pieces, also this module's names for its tests and callers
    BadInput, JsonReport, SweepCandidate, environment, first_line, identity_candidates, load_root_problems,
    parse_levels, parse_problem_ids, rename_model_class, require_cuda, resolve_root, say,
    solution_candidates, speedup_distribution,
)

_round = harness.rnd
KB_RESULT_PREFIX = "KB_SWEEP_RESULT "
DEFAULT_HARNESS_SAMPLE = ("L1/19,L1/23,L1/40,L1/47,L1/1,L1/95,"
                          "L2/1,L2/9,L2/12,L2/29,L2/40,L2/59,L2/76,L2/99")
KB_SEED = 42  # the seed KernelBench's harness uses for inputs and weights
# Modules KernelBench's eval.py pulls in at import time (directly or through kernelbench/utils.py) and
# that eval_kernel_against_ref never uses: LLM clients, .env loading, a progress bar, HTTP. Stand-ins
# are installed only for those that are not importable.
KB_UNUSED_MODULES = ("dotenv", "openai", "litellm", "tqdm", "requests")
# What a KernelBench child reports of one candidate before it has run (its parent's record starts from it too).
KB_NO_RESULT = {"compiled": False, "correctness": False, "runtime_ms": None, "ref_runtime_ms": None, "error": "",
                "phase_seconds": {}}
# What each result's JSON keeps of its `versions`: how it ran (transport, sandbox, profiler warm-up), how it was
# timed (overlap, pairing, allocator and launch diagnostics), and what the profile saw.
_KEPT_VERSIONS = ("transport", "sandbox", "timing_overlap", "profile_error", "timing", "timing_pairing_failed",
                  "timing_diagnostics", "profiler_warmup", "top_kernels", "baseline_timed_in", "baseline_refreshed",
                  "baseline_child_failed", "device_free_gb", "free_wait_released_gb", "gpu", "baseline_gpu", "cores",
                  "kernel_credit", "profile_vs_timed", "closing_seed")


def select_problems(args: argparse.Namespace, root: Path, default_ids: str | None = None) -> tuple[list[Any], dict[str, Any]]:
    """The problems asked for (by --problems, else --levels), in order, and every problem of their levels."""
    text = args.problems or default_ids
    if text:
        chosen, problems = harness.problems_by_id(root, text)
    else:
        wanted = parse_levels(args.levels)
        problems = load_root_problems(root, wanted)
        empty = [level for level in wanted if not any(p.level == level for p in problems.values())]
        if empty:  # KernelBench's level 4 (Hugging Face downloads) is never loaded; kernrl's levels 4-10 are
            raise BadInput(f"Level {empty[0]} is not supported here: {root} has no problems of it that load.")
        chosen = list(problems.values())
    if getattr(args, "sample", None):
        # A random draw (reproducible by --seed) of what was selected: the same flags draw the same problems.
        import random

        chosen = random.Random(args.seed).sample(chosen, min(args.sample, len(chosen)))
        say(f"sample of {len(chosen)} (seed {args.seed}): {','.join(p.id for p in chosen)}")
    if args.limit is not None:
        chosen = chosen[: max(0, args.limit)]
    return chosen, problems


def speedup_by_gpu(records: list[dict[str, Any]]) -> dict[str, Any]:
    """speedup_distribution per card that timed the candidates (versions' `gpu`), and the verdicts whose baseline was
    timed on another card (none should be)."""
    cards = sorted({r.get("versions", {}).get("gpu", "") for r in records} - {""})
    out: dict[str, Any] = {}
    for card in cards:
        mine = [r for r in records if r.get("versions", {}).get("gpu") == card]
        out[card] = {**speedup_distribution(mine), "verdicts": len(mine),
                     "baseline_elsewhere": [r["label"] for r in mine
                                            if r.get("versions", {}).get("baseline_gpu") not in (None, card)]}
    return out


def verdict_counts(records: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    by_level: dict[str, dict[str, int]] = {}
    for r in records:
        counts = by_level.setdefault(f"L{r['level']}", {})
        counts[r["category"]] = counts.get(r["category"], 0) + 1
    return {level: dict(sorted(c.items())) for level, c in sorted(by_level.items())}


# ---------------------------------------------------------------- our evaluator


class OursRun(harness.Pool):
    """A warmed pool (harness.Pool) on the root's problems; each finished candidate's record adds the speed of light,
    the baseline's GPU time and what its `versions` say of how it ran."""

    def __init__(self, args: argparse.Namespace, root: Path, problems: dict[str, Any], static_checks: bool,
                 on_record: Callable[[dict[str, Any]], None]) -> None:
        from kernelbench_rl.problems import get_problem

        problems = dict(problems)
        if harness.WARMUP_PROBLEM not in problems:  # the warm-up's problem; a kernrl root has none of that id
            problems[harness.WARMUP_PROBLEM] = get_problem(harness.WARMUP_PROBLEM)
        super().__init__(args, harness.eval_settings(args), on_record=on_record, kernelbench_root=str(root),
                         problems=problems, static_checks=static_checks)
        self.static_checks = static_checks

    def record(self, cand: SweepCandidate, res: Any, at: float) -> dict[str, Any]:
        s, sol = self.settings, res.speed_of_light or {}
        record = harness.verdict_record(res, s, at)
        return {
            "label": cand.label, "problem_id": cand.problem_id, "level": cand.level, "name": cand.name, "kind": cand.kind,
            "note": cand.note, **record, "kernel_share": res.kernel_share,
            "sol_fraction": _round(sol.get("sol_fraction"), 4), "reference_sol_fraction": _round(sol.get("reference_sol_fraction"), 4),
            "bound": sol.get("bound"), "floor_ms": _round(sol.get("floor_ms"), 5), "inputs": res.versions.get("inputs", ""),
            "baseline_gpu_s": round(baseline_gpu_seconds(res.baseline_ms, record["phase_seconds"],
                                                         s.warmup_trials + s.timing_trials + s.correctness_trials), 4),
            "versions": {k: v for k, v in res.versions.items() if k in _KEPT_VERSIONS},
        }

    def meta(self) -> dict[str, Any]:
        return {"pool_startup_s": _round(self.startup_s, 2), "pool_info": self.info, "static_checks": self.static_checks,
                "settings": {k: getattr(self.settings, k) for k in ("device", "size", "correctness_trials", "timing_trials",
                                                                    "warmup_trials", "timeout_s", "backend", "precision")},
                "groups": self.groups}


def baseline_gpu_seconds(baseline_ms: float | None, phases: dict[str, float], calls: int) -> float:
    """The reference's own calls when its baseline was timed in this evaluation (cold): GPU time any evaluator
    that reports a speedup must spend too (KernelBench's harness times its reference as well). The worker
    records a `baseline` phase either way; a known baseline is a lookup, while timing one takes at least
    its calls' GPU time, so a phase under half of that was not a timing."""
    gpu_s = (baseline_ms or 0.0) * calls / 1000.0
    return gpu_s if gpu_s > 0 and phases.get("baseline", 0.0) >= 0.5 * gpu_s else 0.0


def ratio_ceiling(kb_wall: float, kb_count: int, ours: list[dict[str, Any]]) -> tuple[float, float | None]:
    """(the GPU floor of our work, baselines timed cold included; the throughput ratio over KernelBench's side
    that an evaluator with no overhead at all would reach on it)."""
    floor = sum(r["floor_s"] + r.get("baseline_gpu_s", 0.0) for r in ours)
    ceiling = kb_wall / floor * len(ours) / kb_count if floor and ours and kb_count else None
    return floor, ceiling


# ---------------------------------------------------------------- identity / solutions


def run_sweep(args: argparse.Namespace, mode: str) -> int:
    root = resolve_root(args.kernelbench_root)
    if mode == "identity":
        chosen, problems = select_problems(args, root)
        candidates = identity_candidates(chosen, args.size)
        skipped: list[dict[str, str]] = []
        static_checks = False
    else:
        wanted = set(parse_problem_ids(args.problems)) if args.problems else None
        levels = sorted({int(i.split("/")[0][1:]) for i in wanted}) if wanted else parse_levels(args.levels)
        problems = load_root_problems(root, [lv for lv in levels if lv in (1, 2, 3)])
        candidates, skipped = solution_candidates(problems, wanted)
        if wanted:
            unknown = sorted(wanted - {c.problem_id for c in candidates} - {s["problem_id"] for s in skipped})
            if unknown:
                raise BadInput(f"No bundled solution for {', '.join(unknown)}; `KernelBench/solutions/level*/` lists those there are.")
        if args.limit is not None:
            candidates = candidates[: max(0, args.limit)]
        static_checks = True
        for s in skipped:
            say(f"skipped {s['problem_id']} ({s['solution']}): {s['reason']}")
        for c in candidates:
            if c.note:
                say(f"note {c.problem_id}: {c.note}")
    if not candidates:
        raise BadInput("Nothing to evaluate: no candidate matches the levels/problems asked for.")
    require_cuda(args.device)
    out = args.out or f"kb_{mode}.json"
    say(f"{mode}: {len(candidates)} candidates from {root} on {args.device} at {args.size} size, "
        f"static checks {'on' if static_checks else 'off (self-test only)'}")
    env = environment(args.device)
    ours: OursRun | None = None

    def build() -> dict[str, Any]:
        records = list(ours.records) if ours else []
        group = ours.groups[0] if ours and ours.groups else {}
        return {"mode": mode, "kernelbench_root": str(root), "environment": env, "planned": len(candidates),
                "ours": ours.meta() if ours else None, "summary": summarise_sweep(records, group, len(candidates), skipped),
                "skipped": skipped, "per_candidate": records}

    report = JsonReport(out, build)
    ours = OursRun(args, root, problems, static_checks, on_record=lambda _r: report.write())
    try:
        ours.start()
        report.write()
        budget = harness.left_of(args.budget_s, args)
        ours.run_group(mode, candidates, budget)
    finally:
        ours.close()
    report.write()
    print_sweep(build())
    say(f"wrote {out}")
    return 0


def summarise_sweep(records: list[dict[str, Any]], group: dict[str, Any], planned: int,
                    skipped: list[dict[str, str]]) -> dict[str, Any]:
    wall = group.get("wall_s")
    return {
        "planned": planned, "finished": len(records), "budget_cut": bool(group.get("budget_cut")),
        "not_finished": group.get("not_finished", []), "wall_s": wall,
        "candidates_per_min": _round(60.0 * len(records) / wall, 2) if wall and records else None,
        "correct": sum(1 for r in records if r["correct"]),
        "verdicts_by_level": verdict_counts(records),
        "not_correct": [{"label": r["label"], "name": r["name"], "category": r["category"], "message": r["message"]}
                        for r in sorted(records, key=lambda r: (r["level"], int(r["problem_id"].split("/")[1])))
                        if not r["correct"]],
        "flags": {f: sum(1 for r in records if f in r["flags"]) for f in sorted({f for r in records for f in r["flags"]})},
        "speedup": speedup_distribution(records),
        "speedup_by_gpu": speedup_by_gpu(records),
        "speed_of_light": sol_distribution(records),
        "widened_inputs": sorted(r["problem_id"] for r in records if r.get("inputs", "").startswith("widened")),
        "overhead": harness.overhead_figures(records, wall),
        "floor_definition": harness.FLOOR_DEFINITION,
        "skipped": len(skipped),
    }


def sol_distribution(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Per level: the share of the speed of light the candidates reached (floor / runtime, evaluation/timing/floor.py), and
    any above 1 (a time under the physical floor: the floor is wrong there, or work was skipped)."""
    out: dict[str, Any] = {}
    for level in sorted({r["level"] for r in records}):
        pairs = [(r["label"], r["sol_fraction"], r.get("bound")) for r in records
                 if r["level"] == level and r.get("sol_fraction") is not None]
        if not pairs:
            continue
        values = sorted(v for _, v, _ in pairs)
        out[f"L{level}"] = {
            "count": len(values), "median": _round(statistics.median(values), 3), "min": _round(values[0], 3),
            "p90": _round(values[int(0.9 * (len(values) - 1))], 3), "max": _round(values[-1], 3),
            "memory_bound": sum(1 for _, _, b in pairs if b == "memory"),
            "above_1": [{"label": lab, "sol_fraction": _round(v, 3)} for lab, v, _ in pairs if v > 1.0]}
    return out


def print_sweep(data: dict[str, Any]) -> None:
    """The summary as a table; the JSON has every figure."""
    s = data["summary"]
    say(f"\n== {data['mode']}: {s['finished']} of {s['planned']} finished{' (budget cut)' if s['budget_cut'] else ''}, "
        f"{s['correct']} correct; wall {s['wall_s']} s, {s['candidates_per_min']} candidates/min; pool start-up "
        f"{data['ours']['pool_startup_s']} s (not in the wall)")
    categories = sorted({c for counts in s["verdicts_by_level"].values() for c in counts})
    harness.print_table(["level", *categories], [[level, *(counts.get(c, 0) for c in categories)]
                                                 for level, counts in s["verdicts_by_level"].items()])
    for r in s["not_correct"]:
        say(f"  not correct: {r['label']:22s} {r['category']:9s} {r['name'][:40]:40s} {r['message'][:110]}")
    say(harness.speedup_text(s["speedup"]))
    for card, d in s.get("speedup_by_gpu", {}).items():
        if d.get("count"):
            say(f"  GPU {card}, {d['verdicts']} verdicts: {harness.speedup_text(d)}; baseline timed on another card: "
                f"{', '.join(d['baseline_elsewhere']) or 'none'}")
    for level, d in s.get("speed_of_light", {}).items():
        say(f"speed of light {level}: {d['count']} timed, median {d['median']}, p90 {d['p90']}, above 1: "
            + (", ".join(f"{x['label']} {x['sol_fraction']}" for x in d["above_1"]) or "none"))
    for key in ("widened_inputs", "flags", "not_finished"):
        if s.get(key):
            say(f"{key.replace('_', ' ')}: {s[key]}")


# ---------------------------------------------------------------- KernelBench's own harness


def kb_source_dir(root: Path) -> Path:
    """The folder that holds KernelBench's `kernelbench` package (src/), beside its problems."""
    for base in (root, root.parent):
        if (base / "src" / "kernelbench" / "eval.py").is_file():
            return base / "src"
    raise BadInput(f"No src/kernelbench/eval.py next to {root}: kb-harness needs a full KernelBench checkout, not only its problems.")


def kb_child_run(spec: Path, src_dir: Path, args: argparse.Namespace, work: str,
                 timeout_s: float) -> tuple[dict[str, Any] | None, float, str, bool]:
    """kb_child on `spec` in a fresh process (harness.run_child), KernelBench's package and its pydantic (--kb-site)
    first on its path."""
    env = {"PYTHONUNBUFFERED": "1", **os.environ}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (args.kb_site, str(src_dir), os.environ.get("PYTHONPATH")) if p)
    return harness.run_child([str(Path(__file__).resolve()), "--kb-child", str(spec)], env, work, timeout_s,
                             KB_RESULT_PREFIX)


def kb_preflight(src_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Import KernelBench's eval.py once in a child (stand-ins for its unused imports) before any clock."""
    with tempfile.TemporaryDirectory(prefix="kb_sweep_") as work:
        spec = Path(work) / "spec.json"
        spec.write_text(json.dumps({"import_only": True}))
        found, wall, tail, timed_out = kb_child_run(spec, src_dir, args, work, 300.0)
    if found is None or found.get("error"):
        why = (found or {}).get("error") or ("timed out" if timed_out else tail) or "no result"
        raise BadInput(f"KernelBench's eval.py does not import here ({why}); on the GPU machine install its wheels "
                       "(device_suite.sh does) and pass --kb-site.")
    found["wall_s"] = round(wall, 2)
    return found


def run_kb_harness(args: argparse.Namespace) -> int:
    root = resolve_root(args.kernelbench_root)
    src_dir = kb_source_dir(root)
    chosen, problems = select_problems(args, root, default_ids=DEFAULT_HARNESS_SAMPLE)
    if args.candidates == "identity":
        candidates = identity_candidates(chosen, args.size)
        skipped: list[dict[str, str]] = []
    else:
        candidates, skipped = solution_candidates(problems, {p.id for p in chosen})
        skipped += [{"problem_id": p.id, "reason": "no bundled solution"} for p in chosen
                    if p.id not in {c.problem_id for c in candidates} and p.id not in {s["problem_id"] for s in skipped}]
        for s in skipped:
            say(f"skipped {s['problem_id']}: {s['reason']}")
    if args.check_imports:
        info = kb_preflight(src_dir, args)
        say(f"KernelBench's eval.py imports with stand-ins for {info.get('stubbed') or 'nothing'} "
            f"(pydantic {info.get('pydantic')}), {info['wall_s']} s")
        return 0
    if args.device != "cuda":
        raise BadInput("kb-harness needs a CUDA GPU: KernelBench's eval_kernel_against_ref asserts torch.cuda.is_available() "
                       "(--check-imports runs on the CPU).")
    require_cuda(args.device)
    if not candidates:
        raise BadInput("Nothing to evaluate: no candidate matches the problems asked for.")
    candidates = harness.alternate_levels(candidates, lambda c: c.level)  # a budget cut keeps every level
    info = kb_preflight(src_dir, args)
    say(f"kb-harness: {len(candidates)} {args.candidates} candidates; KernelBench's eval.py imports "
        f"(stand-ins for {info.get('stubbed') or 'nothing'}; preflight {info['wall_s']} s, not in any wall)")
    out = args.out or "kb_harness.json"
    env = environment(args.device)
    kb_records: list[dict[str, Any]] = []
    kb_state: dict[str, Any] = {"budget_s": args.budget_s, "budget_cut": False, "not_launched": [], "wall_s": None}
    passes: list[OursRun] = []  # ours; then, with --cached-baselines, a fresh pool told the first one's baselines

    def build() -> dict[str, Any]:
        ours, cached = (passes + [None, None])[:2]
        summary = summarise_harness(kb_records, list(ours.records) if ours else [], ours.groups if ours else [])
        if cached is not None:
            summary["baselines_cached"] = summarise_cached(kb_records, cached.records, cached.groups)
        return {"mode": "kb-harness", "candidates": args.candidates, "kernelbench_root": str(root), "environment": env,
                "kb_settings": kb_settings(args), "kb_preflight": info, "kb": kb_state, "ours": ours.meta() if ours else None,
                "ours_baselines_cached": cached.meta() if cached else None, "summary": summary,
                "floor_definition": harness.FLOOR_DEFINITION, "skipped": skipped,
                "per_candidate": {"kb": kb_records, "ours": list(ours.records) if ours else [],
                                  "ours_baselines_cached": list(cached.records) if cached else []}}

    report = JsonReport(out, build)
    report.write()

    started = time.perf_counter()
    for index, cand in enumerate(candidates):  # a fresh process each, one after another, as its scripts run them
        elapsed = time.perf_counter() - started
        estimate = statistics.mean(r["wall_s"] for r in kb_records) if kb_records else 0.0
        if args.budget_s is not None and elapsed + estimate > args.budget_s:  # none launched that would end past it
            kb_state.update(budget_cut=True, not_launched=[c.label for c in candidates[index:]])
            say(f"kb    budget of {args.budget_s:.0f} s would be exceeded ({elapsed:.0f} s spent, about {estimate:.0f} s "
                f"a candidate): {len(candidates) - index} candidates not launched")
            break
        record = run_kb_candidate(cand, problems[cand.problem_id].source_for(args.size), src_dir, args)
        kb_records.append(record)
        say(f"kb    [{index + 1:3d}] {cand.label:22s} compiled={str(record['compiled']):5s} "
            f"correct={str(record['correctness']):5s} runtime {record['runtime_ms']} ms wall {record['wall_s']:.1f} s"
            + (f"  {record['error'][:90]}" if record["error"] else ""))
        kb_state["wall_s"] = round(time.perf_counter() - started, 2)
        report.write()
    same = [c for c in candidates if c.label in {r["label"] for r in kb_records}]
    report.write()
    # Ours on exactly the candidates KernelBench's harness ran, a fresh pool started before the clock; then, as in
    # training and nightly runs (each problem's baseline timed once per GPU and kept in DuckDB), a fresh pool that is
    # told the baselines the first pass measured (sizing, references and the candidates' timing all redone).
    known: dict[Any, Any] = {}
    for told in (False, True) if same else ():
        if told and not (args.cached_baselines and known):
            break
        run = OursRun(args, root, problems, static_checks=(args.candidates == "solutions"), on_record=lambda _r: report.write())
        passes.append(run)
        try:
            run.start()
            run.evaluator.baselines.update(known)
            for level in sorted({c.level for c in same}):
                run.run_group(f"L{level}", [c for c in same if c.level == level], args.ours_budget_s)
            known = dict(run.evaluator.baselines)
        finally:
            run.close()
    report.write()
    print_harness(build())
    say(f"wrote {out}")
    return 0


def summarise_cached(kb: list[dict[str, Any]], records: list[dict[str, Any]], groups: list[dict[str, Any]]) -> dict[str, Any]:
    """Our second pass, baselines known: per level its wall, rate and ratio against the same KernelBench side."""
    out: dict[str, Any] = {}
    for level, f in summarise_harness(kb, records, groups)["per_level"].items():
        chosen = records if level == "all" else [r for r in records if f"L{r['level']}" == level]
        out[level] = {**{k: f["ours"][k] for k in ("candidates", "correct", "wall_s", "per_min")},
                      "throughput_ratio_ours_over_kb": f["throughput_ratio_ours_over_kb"], "ratio_ceiling": f["ratio_ceiling"],
                      "baseline_s": _round(sum(r["phase_seconds"].get("baseline", 0.0) for r in chosen), 2)}
    return out


def kb_settings(args: argparse.Namespace) -> dict[str, Any]:
    return {"function": "kernelbench.eval.eval_kernel_against_ref", "seed_num": KB_SEED,
            "num_correct_trials": args.correctness_trials, "num_perf_trials": args.timing_trials,
            "measure_performance": True, "timing_method": "cuda_event", "precision": "torch.float32",
            "backend": "cuda (identity: exec'd source)" if args.candidates == "identity" else "triton (tempfile import)",
            "check_for_excessive_speedup": "default (True): it also times the reference, 100 more calls per candidate",
            "device": "torch.device('cuda:0')", "timeout_s": args.timeout, "process": "fresh python per candidate",
            "numerics": ("TF32 off in cuBLAS and cuDNN, set before eval_kernel_against_ref (--kb-exact-fp32, as ours runs)"
                         if args.kb_exact_fp32 else "torch's defaults (cuDNN's TF32 on), as its scripts run")}


def run_kb_candidate(cand: SweepCandidate, reference: str, src_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    record: dict[str, Any] = {"label": cand.label, "problem_id": cand.problem_id, "level": cand.level, "name": cand.name,
                              **KB_NO_RESULT, "phase_seconds": {}, "kb_speedup": None, "timed_out": False, "wall_s": 0.0}
    with tempfile.TemporaryDirectory(prefix="kb_sweep_") as work:
        spec = {"original_src": reference, "custom_src": cand.source, "seed": KB_SEED,
                "num_correct_trials": args.correctness_trials, "num_perf_trials": args.timing_trials,
                "backend": "cuda" if cand.kind == "identity" else "triton", "build_dir": str(Path(work) / "build"),
                "exact_fp32": args.kb_exact_fp32}
        (Path(work) / "spec.json").write_text(json.dumps(spec))
        found, wall, tail, timed_out = kb_child_run(Path(work) / "spec.json", src_dir, args, work, args.timeout)
    record["wall_s"] = round(wall, 3)
    record["timed_out"] = timed_out
    if found is not None:
        record.update({k: v for k, v in found.items() if k in (*KB_NO_RESULT, "metadata", "numerics")})
    elif timed_out:
        record["error"] = f"timed out after {args.timeout:.0f} s"
    else:
        record["error"] = f"the process ended with no result: {tail}"
    if record["runtime_ms"] and record["ref_runtime_ms"]:
        record["kb_speedup"] = round(record["ref_runtime_ms"] / record["runtime_ms"], 3)
    return record


def summarise_harness(kb: list[dict[str, Any]], ours: list[dict[str, Any]], groups: list[dict[str, Any]]) -> dict[str, Any]:
    ours_by_label = {r["label"]: r for r in ours}
    levels = sorted({r["level"] for r in kb})
    per_level: dict[str, Any] = {}
    for level in [*levels, None]:
        kb_l = [r for r in kb if level is None or r["level"] == level]
        ours_l = [r for r in ours if level is None or r["level"] == level]
        if not kb_l:
            continue
        kb_wall = sum(r["wall_s"] for r in kb_l)
        if level is None:
            ours_wall = sum(g["wall_s"] or 0.0 for g in groups) if groups else None
        else:
            group = next((g for g in groups if g["name"] == f"L{level}"), None)
            ours_wall = group["wall_s"] if group else None
        kb_rate = 60.0 * len(kb_l) / kb_wall if kb_wall else None
        ours_rate = 60.0 * len(ours_l) / ours_wall if ours_wall and ours_l else None
        both_correct, both_wrong, disagree, runtime_ratios = [], [], [], []
        for r in kb_l:
            o = ours_by_label.get(r["label"])
            if o is None:
                continue
            if r["correctness"] and o["correct"]:
                both_correct.append(r["label"])
                if r["runtime_ms"] and o["runtime_ms"]:
                    runtime_ratios.append((r["label"], o["runtime_ms"] / r["runtime_ms"]))
            elif not r["correctness"] and not o["correct"]:
                both_wrong.append(r["label"])
            else:
                disagree.append({"label": r["label"], "kb_correct": r["correctness"], "kb_error": first_line(r["error"]),
                                 "ours": o["category"], "ours_message": o["message"]})
        gpu_floor, ceiling = ratio_ceiling(kb_wall, len(kb_l), ours_l)
        per_level["all" if level is None else f"L{level}"] = {
            "kb": {"candidates": len(kb_l), "wall_s": round(kb_wall, 2), "per_min": _round(kb_rate, 2),
                   "wall_per_candidate_s": _round(kb_wall / len(kb_l)), "correct": sum(1 for r in kb_l if r["correctness"])},
            "ours": {"candidates": len(ours_l), "wall_s": _round(ours_wall, 2), "per_min": _round(ours_rate, 2),
                     "correct": sum(1 for r in ours_l if r["correct"]), **harness.overhead_figures(ours_l, ours_wall)},
            "throughput_ratio_ours_over_kb": _round(ours_rate / kb_rate, 2) if ours_rate and kb_rate else None,
            "floor_with_baselines_s": _round(gpu_floor, 2),
            "ratio_ceiling": _round(ceiling, 2),
            "agreement": {"both_correct": len(both_correct), "both_wrong": len(both_wrong), "disagree": disagree},
            "runtime_ratio_ours_over_kb": harness.ratios(runtime_ratios),
        }
    return {"per_level": per_level,
            "note": "KernelBench's runtime is the mean of its timed calls (3 significant digits), ours the median; "
                    "its wall is each process from start to exit (Python start and imports included); ours is each "
                    "level's evaluate call on a started pool (problem sizing and baselines included)."}


def print_harness(data: dict[str, Any]) -> None:
    kb = data["kb"]
    say(f"\n== kb-harness ({data['candidates']} candidates): KernelBench's eval_kernel_against_ref, one process each, "
        f"against ours (pool start-up {data['ours']['pool_startup_s'] if data['ours'] else '-'} s, not in the wall)"
        + (f"; KernelBench's side stopped at its budget ({kb['budget_s']:.0f} s)" if kb["budget_cut"] else ""))
    rows = [[level, s["kb"]["candidates"], s["kb"]["wall_s"], s["kb"]["per_min"], s["ours"]["wall_s"], s["ours"]["per_min"],
             s["throughput_ratio_ours_over_kb"], s["agreement"]["both_correct"], s["agreement"]["both_wrong"],
             len(s["agreement"]["disagree"]), s["runtime_ratio_ours_over_kb"].get("median"),
             s["ours"].get("overhead_per_candidate_s"), s.get("ratio_ceiling")] for level, s in data["summary"]["per_level"].items()]
    rows += [[f"{level} baselines cached", s["candidates"], None, None, s["wall_s"], s["per_min"],
              s["throughput_ratio_ours_over_kb"], *[None] * 5, s.get("ratio_ceiling")]
             for level, s in data["summary"].get("baselines_cached", {}).items()]
    harness.print_table(["level", "n", "KB wall", "KB/min", "our wall", "our/min", "ratio", "both ok", "both bad", "differ",
                         "rt ours/KB", "our ovh/cand", "ceiling"], rows)
    for d in (d for level, s in data["summary"]["per_level"].items() if level != "all" for d in s["agreement"]["disagree"]):
        say(f"   disagree {d['label']}: KB correct={d['kb_correct']} {d['kb_error'][:60]} | ours {d['ours']} {d['ours_message'][:60]}")
    say("ratio: our candidates/min over KernelBench's; rt: our median runtime over its mean (both correct); ceiling: "
        f"the ratio with no overhead at all (bench/README.md); floor: {data['floor_definition']}")


def kb_child(spec_path: str) -> None:
    """Runs inside the fresh process: KernelBench's eval_kernel_against_ref on one candidate."""
    import importlib.util
    import types

    spec = json.loads(Path(spec_path).read_text())
    out: dict[str, Any] = {**KB_NO_RESULT, "phase_seconds": {}}
    def missing(name: str) -> bool:
        try:
            return importlib.util.find_spec(name) is None
        except (ImportError, ValueError):
            return True

    def stand_in(name: str) -> types.ModuleType:
        """A module whose every function raises if called (`load_dotenv`, called at import, finds nothing)."""
        def unused(*_a: Any, **_k: Any) -> Any:
            raise RuntimeError(f"{name} is a stand-in in this benchmark")

        def attribute(attr: str) -> Any:
            if attr.startswith("__"):
                raise AttributeError(attr)
            return (lambda *_a, **_k: False) if attr == "load_dotenv" else unused

        module = types.ModuleType(name)
        module.__getattr__ = attribute  # type: ignore[method-assign]
        return module

    stubbed = [name for name in KB_UNUSED_MODULES if missing(name)]
    sys.modules.update({name: stand_in(name) for name in stubbed})
    out["stubbed"] = stubbed
    t = time.perf_counter()
    try:
        import pydantic
        import torch
        from kernelbench.eval import eval_kernel_against_ref

        out["pydantic"] = pydantic.VERSION
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        out["error"] = f"import failed: {type(exc).__name__}: {exc}"[:300]
        print(KB_RESULT_PREFIX + json.dumps(out), flush=True)
        return
    out["phase_seconds"]["import"] = round(time.perf_counter() - t, 3)
    if spec.get("exact_fp32"):
        # Its reference and candidate share this process, so both lose TF32: separates a verdict that differs from
        # ours only by numerics setting from one that differs by judgement.
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    out["numerics"] = {"cuda_matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
                       "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32}
    if spec.get("import_only"):
        import inspect

        wanted = {"original_model_src", "custom_model_src", "seed_num", "num_correct_trials", "num_perf_trials",
                  "measure_performance", "timing_method", "verbose", "build_dir", "device", "backend", "precision"}
        absent = sorted(wanted - set(inspect.signature(eval_kernel_against_ref).parameters))
        if absent:
            out["error"] = f"eval_kernel_against_ref takes no {', '.join(absent)} in this checkout"
        print(KB_RESULT_PREFIX + json.dumps(out), flush=True)
        return
    t = time.perf_counter()
    try:
        result = eval_kernel_against_ref(
            original_model_src=spec["original_src"], custom_model_src=spec["custom_src"], seed_num=spec["seed"],
            num_correct_trials=spec["num_correct_trials"], num_perf_trials=spec["num_perf_trials"],
            measure_performance=True, timing_method="cuda_event", verbose=False, build_dir=spec["build_dir"],
            device=torch.device("cuda:0"), backend=spec["backend"], precision=torch.float32,
        )
        if result is None:
            out["error"] = "eval_kernel_against_ref returned None (its lock-file case: KernelBench would retry)"
        else:
            out["compiled"] = bool(result.compiled)
            out["correctness"] = bool(result.correctness)
            out["runtime_ms"] = result.runtime if result.runtime and result.runtime > 0 else None
            out["ref_runtime_ms"] = result.ref_runtime if result.ref_runtime and result.ref_runtime > 0 else None
            meta = {k: str(v)[:300] for k, v in dict(result.metadata).items()}
            out["metadata"] = meta
            for key in ("compilation_error", "runtime_error", "correctness_issue", "error_during_performance"):
                if key in meta:
                    out["error"] = f"{key}: {meta[key]}"[:300]
                    break
    except Exception as exc:  # noqa: BLE001 - KernelBench's script catches everything here too
        out["error"] = f"{type(exc).__name__}: {exc}"[:300]
    out["phase_seconds"]["eval"] = round(time.perf_counter() - t, 3)
    print(KB_RESULT_PREFIX + json.dumps(out, default=str), flush=True)


# ---------------------------------------------------------------- command line


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kernelbench_sweep.py", description=__doc__.split("\n\n")[0],
        epilog="Bad input exits 2 with one sentence. On the GPU machine: bash bench/device_suite.sh kb-identity 1 | "
               "kb-solutions | kb-harness (bench/README.md). Internal: --kb-child SPEC is the fresh process kb-harness starts.")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--problems-root", "--kernelbench-root", dest="kernelbench_root", default=None,
                        help="a KernelBench checkout (its root, or its KernelBench/ folder) or kernrl's problems folder; "
                             "default: $KERNELBENCH_ROOT")
    harness.add_device(common)
    common.add_argument("--out", default=None, help="JSON output path (default: kb_<mode>.json in the current folder)")
    common.add_argument("--levels", default="1,2,3", help="levels to take every problem of (default 1,2,3)")
    common.add_argument("--problems", default=None, help="a subset by id, e.g. L1/19,L2/1 (overrides --levels)")
    common.add_argument("--limit", type=int, default=None, help="only the first N problems (smoke runs)")
    common.add_argument("--sample", type=int, default=None,
                        help="N problems drawn at random from those selected (the same --seed draws the same ones)")
    common.add_argument("--seed", type=int, default=0, help="the seed of --sample's draw (default 0)")
    harness.add_trials(common, correctness=5, warmup=3, timing=100, timeout=120.0)  # KernelBench's counts
    harness.add_pool(common)
    sub = parser.add_subparsers(dest="mode", metavar="MODE", required=True)
    for mode, text in (("identity", "reference-as-candidate over every problem (static checks off: the reference is "
                                    "torch ops); verdicts and the identical-code speedup, which should read 1.00"),
                       ("solutions", "every bundled solution on the KernelBench problem of the same id (static checks on)")):
        one = sub.add_parser(mode, parents=[common], help=text, description=text)
        one.add_argument("--budget-s", type=float, default=None,
                         help="stop waiting once this many seconds have passed since the script started and write what finished")
    kb = sub.add_parser("kb-harness", parents=[common],
                        help="KernelBench's eval_kernel_against_ref (a fresh process per candidate) against ours on the same candidates",
                        description="KernelBench's own harness as its eval_from_generations.py runs it, then ours on the "
                                    f"candidates it ran, one evaluate call per level. Needs CUDA. Default sample: {DEFAULT_HARNESS_SAMPLE}.")
    kb.add_argument("--candidates", choices=["identity", "solutions"], default="identity",
                    help="identity (default): the references renamed ModelNew; solutions: our bundled solutions")
    kb.add_argument("--budget-s", type=float, default=None,
                    help="KernelBench's side launches no candidate that would end past this (estimated from its mean so far)")
    kb.add_argument("--ours-budget-s", type=float, default=None, help="stop waiting for ours after this many seconds per level")
    kb.add_argument("--no-cached-baselines", dest="cached_baselines", action="store_false",
                    help="skip our second pass, a fresh pool told the first pass's baselines (as training reads them from DuckDB)")
    kb.add_argument("--kb-site", default=os.environ.get("KB_SITE"),
                    help="a folder with KernelBench's pydantic (pip install --target), on its processes' path only (default: $KB_SITE)")
    kb.add_argument("--kb-exact-fp32", action="store_true",
                    help="TF32 off in cuBLAS and cuDNN in KernelBench's processes, as ours runs fp32 (default: torch's defaults)")
    kb.add_argument("--check-imports", action="store_true",
                    help="only check that KernelBench's eval.py imports (works on the CPU), then exit")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) == 2 and argv[0] == "--kb-child":
        kb_child(argv[1])
        return 0
    args = build_parser().parse_args(argv)
    run = run_kb_harness if args.mode == "kb-harness" else (lambda a: run_sweep(a, a.mode))
    return harness.run_main(run, args)


if __name__ == "__main__":
    sys.exit(main())
