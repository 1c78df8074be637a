"""Our evaluator on the real KernelBench, at real size, on one device; and KernelBench's own harness beside it.

Modes (each writes one JSON file, rewritten after every result, so a run cut off keeps what finished):

    identity    reference-as-candidate: every problem's own source with `Model` renamed `ModelNew`, through
                one Evaluator in one `evaluate` call. Identical code must be judged correct and read a speedup
                of 1.00; what is not, is a finding (about the problem, or about us).
    solutions   every bundled solution (KernelBench/solutions/) on the KernelBench problem of the same id,
                static checks on: do our solutions hold on KernelBench's own problem files?
    kb-harness  KernelBench's eval_kernel_against_ref, one fresh process per candidate (as its
                scripts/eval_from_generations.py does), then our Evaluator on exactly the same candidates:
                throughput, verdict agreement, runtime agreement, our overhead beyond the GPU floor.
    selfcheck   does a problem's reference agree with itself (two forwards in one process; two fresh
                processes with the same seed)? Names the failures that are properties of the problem.

    python bench/kernelbench_sweep.py identity --kernelbench-root .kb --levels 1 --out $OUT/kb_identity_l1.json
    python bench/kernelbench_sweep.py kb-harness --kernelbench-root .kb --kb-site /tmp/kb_site --budget-s 360
    python bench/kernelbench_sweep.py selfcheck --kernelbench-root .kb --from-json $OUT/kb_identity_l1.json
    python bench/kernelbench_sweep.py identity --device cpu --size small --problems L1/19,L1/23   # offline smoke

Run on the CPU (`--device cpu --size small`) it exercises the machinery only: no timing, no speedups.
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "bench"))

KB_RESULT_PREFIX = "KB_SWEEP_RESULT "
DEFAULT_HARNESS_SAMPLE = ("L1/19,L1/23,L1/40,L1/47,L1/1,L1/95,"
                          "L2/1,L2/9,L2/12,L2/29,L2/40,L2/59,L2/76,L2/99")
KB_SEED = 42  # the seed KernelBench's harness uses for inputs and weights
# Modules KernelBench's eval.py pulls in at import time (directly or through kernelbench/utils.py) and
# that eval_kernel_against_ref never uses: LLM clients, .env loading, a progress bar, HTTP. Stand-ins
# are installed only for those that are not importable.
KB_UNUSED_MODULES = ("dotenv", "openai", "litellm", "tqdm", "requests")
IDENTITY_BAND = (0.95, 1.05)
IDENTITY_OUTLIER_BAND = (0.8, 1.25)


# What each result's JSON keeps of its `versions`: how it ran (transport, sandbox, profiler warm-up), how it was
# timed (overlap, pairing, allocator and launch diagnostics), and what the profile saw.
_KEPT_VERSIONS = ("transport", "sandbox", "timing_overlap", "profile_error", "timing", "timing_pairing_failed",
                  "timing_diagnostics", "profiler_warmup", "top_kernels", "baseline_timed_in", "baseline_refreshed",
                  "baseline_child_failed", "device_free_gb", "free_wait_released_gb", "gpu", "baseline_gpu", "cores")


class BadInput(Exception):
    """A one-sentence complaint about the command line; the script exits 2 with it."""


# ---------------------------------------------------------------- Model -> ModelNew


def rename_model_class(source: str, old: str = "Model", new: str = "ModelNew") -> str:
    """The source with its class `old` renamed `new`, and every reference to it in code renamed too
    (`super(Model, self)`, `isinstance(x, Model)`, annotations...). Done on the AST and the tokens: names
    inside strings, comments and docstrings are left alone, as are attributes (`x.Model`) and names that
    merely contain it (`ModelHelper`). Everything else in the source is kept character for character."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise ValueError(f"the source is not valid Python (line {exc.lineno}: {exc.msg})") from None
    if not any(isinstance(n, ast.ClassDef) and n.name == old for n in tree.body):
        raise ValueError(f"the source defines no top-level class {old}")
    if any(isinstance(n, (ast.ClassDef, ast.FunctionDef)) and n.name == new for n in ast.walk(tree)):
        raise ValueError(f"the source already defines {new}")
    lines = source.splitlines(keepends=True)

    def char_col(lineno: int, byte_col: int) -> int:  # the AST counts UTF-8 bytes, tokenize characters
        return len(lines[lineno - 1].encode("utf-8")[:byte_col].decode("utf-8", errors="replace"))

    names = {(n.lineno, char_col(n.lineno, n.col_offset)) for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == old}
    class_lines = {n.lineno for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == old}
    global_lines = {n.lineno for n in ast.walk(tree) if isinstance(n, (ast.Global, ast.Nonlocal)) and old in n.names}
    edits: list[tuple[int, int]] = []
    previous = ""
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.NAME and tok.string == old:
            line, col = tok.start
            if ((line, col) in names or (previous == "class" and line in class_lines)
                    or (previous in ("global", "nonlocal", ",") and line in global_lines)):
                edits.append((line, col))
        if tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT):
            previous = tok.string
    for line, col in sorted(edits, reverse=True):
        text = lines[line - 1]
        lines[line - 1] = text[:col] + new + text[col + len(old):]
    renamed = "".join(lines)
    check = ast.parse(renamed)
    left = [n.lineno for n in ast.walk(check) if isinstance(n, ast.Name) and n.id == old]
    if left or not any(isinstance(n, ast.ClassDef) and n.name == new for n in check.body):
        raise ValueError(f"renaming {old} to {new} left references to {old} (line {left[0] if left else '?'})")
    return renamed


# ---------------------------------------------------------------- input checks


def parse_levels(text: str) -> list[int]:
    levels = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if not part.isdigit():
            raise BadInput(f"--levels takes numbers separated by commas (e.g. 1,2,3), not {text!r}.")
        level = int(part)
        if level < 1:
            raise BadInput(f"Levels start at 1, not {level}.")
        levels.append(level)
    if not levels:
        raise BadInput("--levels names no level; give e.g. 1,2,3.")
    return sorted(set(levels))


def parse_problem_ids(text: str) -> list[str]:
    from kernelbench_rl.problems import make_problem_id, parse_problem_id

    ids = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            ids.append(make_problem_id(*parse_problem_id(part)))
        except ValueError:
            raise BadInput(f"{part!r} is not a problem id of the form L<level>/<number>, e.g. L1/19.") from None
    if not ids:
        raise BadInput("--problems names no problem; give ids such as L1/19,L2/1.")
    return list(dict.fromkeys(ids))


def resolve_root(value: str | None) -> Path:
    from kernelbench_rl.errors import UserError
    from kernelbench_rl.problems.loaders import resolve_kernelbench_root

    value = value or os.environ.get("KERNELBENCH_ROOT")
    if not value:
        raise BadInput("No KernelBench root: pass --kernelbench-root DIR (a KernelBench checkout) or set KERNELBENCH_ROOT.")
    try:
        root = resolve_kernelbench_root(value)
    except UserError as exc:
        raise BadInput(str(exc)) from None
    assert root is not None
    return root.resolve()  # the fresh processes run elsewhere


def load_root_problems(root: Path, levels: list[int]) -> dict[str, Any]:
    from kernelbench_rl.errors import UserError
    from kernelbench_rl.problems import load_problems

    try:
        return {p.id: p for p in load_problems(str(root), levels)}
    except UserError as exc:
        raise BadInput(str(exc)) from None


def select_problems(args: argparse.Namespace, root: Path, default_ids: str | None = None) -> tuple[list[Any], dict[str, Any]]:
    """The problems asked for (by --problems, else --levels), in order, and every problem of their levels."""
    from kernelbench_rl.problems import parse_problem_id

    text = args.problems or default_ids
    if text:
        ids = parse_problem_ids(text)
        levels = sorted({parse_problem_id(i)[0] for i in ids})
        problems = load_root_problems(root, levels)
        missing = [i for i in ids if i not in problems]
        if missing:
            raise BadInput(f"No problem {', '.join(missing)} in {root}; its ids run L<level>/<number> as in its file names.")
        chosen = [problems[i] for i in ids]
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


# ---------------------------------------------------------------- candidates and figures


@dataclass
class SweepCandidate:
    label: str
    problem_id: str
    kind: str  # identity | solution
    source: str
    name: str = ""
    note: str = ""  # e.g. a solution whose file name is not KernelBench's problem name

    @property
    def level(self) -> int:
        return int(self.problem_id.split("/")[0][1:])


def identity_candidates(problems: list[Any], size: str) -> list[SweepCandidate]:
    found = []
    for problem in problems:
        try:
            source = rename_model_class(problem.source_for(size))
        except ValueError as exc:
            raise BadInput(f"{problem.id} ({problem.path}) cannot become a candidate: {exc}.") from None
        found.append(SweepCandidate(f"{problem.id}/identity", problem.id, "identity", source, problem.name))
    return found


def solution_candidates(problems: dict[str, Any], wanted: set[str] | None) -> tuple[list[SweepCandidate], list[dict[str, str]]]:
    """Bundled solutions whose id is a problem of the root; the others come back as skipped."""
    from kernelbench_rl.problems import list_solutions, parse_problem_id

    found: list[SweepCandidate] = []
    skipped: list[dict[str, str]] = []
    levels = {p.level for p in problems.values()}
    for problem_id, path in list_solutions():
        if wanted is not None and problem_id not in wanted:
            continue
        if wanted is None and parse_problem_id(problem_id)[0] not in levels:
            continue
        if problem_id not in problems:
            skipped.append({"problem_id": problem_id, "solution": path.name,
                            "reason": "no problem of this id in the KernelBench root"})
            continue
        problem = problems[problem_id]
        note = "" if path.stem == problem.name else f"solution file {path.name}, KernelBench's problem {problem.name}"
        found.append(SweepCandidate(f"{problem_id}/solution", problem_id, "solution", path.read_text(), problem.name, note))
    return found, skipped


def first_line(text: str, limit: int = 200) -> str:
    for line in (text or "").strip().splitlines():
        if line.strip():
            return line.strip()[:limit]
    return ""


def percentile(values: list[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (q in [0, 100])."""
    if not values:
        return None
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    pos = (len(ordered) - 1) * q / 100.0
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def speedup_distribution(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Identical code: baseline / candidate should read 1.00."""
    timed = [r for r in records if r.get("correct") and r.get("speedup")]
    values = [r["speedup"] for r in timed]
    if not values:
        return {"count": 0, "note": "no speedups (not timed: CPU, or nothing correct)"}
    low, high = IDENTITY_BAND
    out_low, out_high = IDENTITY_OUTLIER_BAND
    return {
        "count": len(values), "median": _round(statistics.median(values)), "p5": _round(percentile(values, 5)),
        "p95": _round(percentile(values, 95)), "min": _round(min(values)), "max": _round(max(values)),
        "share_within_0.95_1.05": _round(sum(1 for v in values if low <= v <= high) / len(values)),
        "outside_0.8_1.25": [{"label": r["label"], "speedup": _round(r["speedup"]), "runtime_ms": _round(r.get("runtime_ms"), 4),
                              "baseline_ms": _round(r.get("baseline_ms"), 4)}
                             for r in sorted(timed, key=lambda r: r["speedup"]) if not out_low <= r["speedup"] <= out_high],
    }


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


def environment(device: str) -> dict[str, Any]:
    """Versions from the installed metadata: this process imports neither torch nor triton for it and
    holds no CUDA context (the device's name comes from the pool's workers and KernelBench's metadata)."""
    from importlib import metadata

    info: dict[str, Any] = {"python": platform.python_version(), "machine": platform.machine(), "device": device}
    for package in ("torch", "triton"):
        try:
            info[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            info[package] = None
    try:
        info["repo_commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True,
                                             text=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        info["repo_commit"] = None
    return info


class JsonReport:
    """One JSON file, rewritten whole (through a temporary file) every time something finishes."""

    def __init__(self, path: str | None, build: Callable[[], dict[str, Any]]) -> None:
        self.path = Path(path) if path else None
        self.build = build
        self.lock = threading.Lock()

    def write(self) -> None:
        if self.path is None:
            return
        with self.lock:
            data = self.build()
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(self.path.name + ".tmp")
            tmp.write_text(json.dumps(data, indent=2, default=str))
            os.replace(tmp, self.path)


def say(text: str) -> None:
    print(text, flush=True)


# ---------------------------------------------------------------- our evaluator


def require_cuda(device: str) -> None:
    if device != "cuda":
        return
    import torch

    if not torch.cuda.is_available():
        raise BadInput("--device cuda (the default) needs a GPU and torch sees none here; on a CPU pass "
                       "--device cpu --size small.")


def eval_settings(args: argparse.Namespace) -> Any:
    from kernelbench_rl.evaluation.result import EvalSettings

    return EvalSettings(device=args.device, size=args.size, correctness_trials=args.correctness_trials,
                        timing_trials=args.timing_trials, warmup_trials=args.warmup_trials, timeout_s=args.timeout)


class OursRun:
    """A fresh Evaluator, started (and warmed on a GPU) before any clock; then one `evaluate` call per
    group of candidates, each with its own wall. `records` holds one dict per finished candidate."""

    def __init__(self, args: argparse.Namespace, root: Path, problems: dict[str, Any], static_checks: bool,
                 on_record: Callable[[dict[str, Any]], None]) -> None:
        self.args = args
        self.root = root
        self.problems = problems
        self.static_checks = static_checks
        self.on_record = on_record
        self.settings = eval_settings(args)
        self.records: list[dict[str, Any]] = []
        self.groups: list[dict[str, Any]] = []
        self.startup_s: float | None = None
        self.pool_info: list[dict[str, Any]] = []
        self.evaluator: Any = None

    def start(self) -> None:
        from eval_throughput import _pool_info, _warmup_request

        from kernelbench_rl.evaluation import Evaluator

        t0 = time.perf_counter()
        concurrency = {name: getattr(self.args, name) for name in ("parallel_compiles", "in_flight", "warm_children")
                       if getattr(self.args, name, None) is not None}
        from kernelbench_rl.problems import get_problem

        problems = dict(self.problems)
        if "L1/20" not in problems:  # the warm-up's problem; a kernrl root has none of that id, the bundled set has
            problems["L1/20"] = get_problem("L1/20")
        self.evaluator = Evaluator(self.settings, store=None, kernelbench_root=str(self.root), problems=problems,
                                   static_checks=self.static_checks, **concurrency)
        self.evaluator.start()
        if self.args.device == "cuda" and not self.args.no_warmup:
            # The pool's children and CUDA warmed on a problem outside every sweep, at small size; the
            # swept problems' sizing and baselines still happen on the clock.
            warm = _warmup_request(self.settings)
            if warm is not None:
                result = self.evaluator.evaluate([warm])[0]
                say(f"ours  warm-up (L1/20 solution, small): {result.error_category.value} correct={result.correct}")
        self.startup_s = time.perf_counter() - t0
        self.pool_info = _pool_info(self.evaluator)
        say(f"ours  pool ready in {self.startup_s:.1f} s (not in any wall): {self.pool_info}")

    def close(self) -> None:
        if self.evaluator is not None:
            if getattr(self.args, "worker_logs", None):
                from eval_throughput import _save_worker_logs

                _save_worker_logs(self.evaluator, self.args.worker_logs)
            self.evaluator.close()
            self.evaluator = None

    def run_group(self, name: str, candidates: list[SweepCandidate], budget_s: float | None) -> dict[str, Any]:
        from kernelbench_rl.evaluation.result import EvalRequest

        requests = [EvalRequest(c.problem_id, c.source, self.settings, request_id=f"kb_sweep/{c.label}") for c in candidates]
        group: dict[str, Any] = {"name": name, "planned": len(candidates), "finished": 0, "wall_s": None,
                                 "budget_s": budget_s, "budget_cut": False, "not_finished": []}
        self.groups.append(group)
        done: set[int] = set()
        failure: list[BaseException] = []
        t0 = time.perf_counter()

        def collect(index: int, result: Any) -> None:
            at = time.perf_counter() - t0
            done.add(index)
            record = self._record(candidates[index], result, at)
            self.records.append(record)
            group["finished"] = len(done)
            group["wall_s"] = round(at, 2)
            self._progress(record, len(self.records))
            self.on_record(record)

        def evaluate_all() -> None:
            try:
                self.evaluator.evaluate(requests, on_result=collect)
            except BaseException as exc:  # noqa: BLE001 - reported below
                failure.append(exc)

        runner = threading.Thread(target=evaluate_all, daemon=True, name=f"sweep-{name}")
        runner.start()
        runner.join(budget_s)
        group["wall_s"] = round(time.perf_counter() - t0, 2)
        if runner.is_alive():
            group["budget_cut"] = True
            group["not_finished"] = [candidates[i].label for i in range(len(candidates)) if i not in done]
            say(f"ours  {name}: budget of {budget_s:.0f} s spent with {len(done)} of {len(candidates)} finished; "
                f"the rest are not waited for")
        elif failure:
            group["error"] = f"{type(failure[0]).__name__}: {failure[0]}"[:300]
            say(f"ours  {name}: the evaluation stopped: {group['error']}")
        return group

    def _record(self, cand: SweepCandidate, res: Any, at: float) -> dict[str, Any]:
        from eval_throughput import _compile_s, _queued_s

        s = self.settings
        phases = {k: round(float(v), 4) for k, v in dict(res.phase_seconds).items()}
        calls = s.correctness_trials + s.warmup_trials + s.timing_trials
        # widened seeds (where a problem's own inputs cannot tell right from wrong) are correctness calls too
        gpu_s = (res.runtime_ms or 0.0) * (calls - s.correctness_trials + res.trials_total) / 1000.0 if res.correct else 0.0
        floor = _compile_s(phases) + gpu_s + (s.timeout_s if res.error_category.value == "timeout" else 0.0)
        baseline_gpu_s = baseline_gpu_seconds(res.baseline_ms, phases, calls)
        total = phases.get("worker_total")
        return {
            "label": cand.label, "problem_id": cand.problem_id, "level": cand.level, "name": cand.name, "kind": cand.kind,
            "note": cand.note, "category": res.error_category.value, "correct": bool(res.correct), "message": first_line(res.error_message),
            "trials_passed": res.trials_passed, "trials_total": res.trials_total, "max_abs_err": res.max_abs_err,
            "runtime_ms": res.runtime_ms, "runtime_spread_ms": res.runtime_spread_ms, "baseline_ms": res.baseline_ms,
            "speedup": res.speedup, "flags": list(res.flags), "cached": bool(res.cached), "kernel_share": res.kernel_share,
            "sol_fraction": _round((res.speed_of_light or {}).get("sol_fraction"), 4),
            "reference_sol_fraction": _round((res.speed_of_light or {}).get("reference_sol_fraction"), 4),
            "bound": (res.speed_of_light or {}).get("bound"), "floor_ms": _round((res.speed_of_light or {}).get("floor_ms"), 5),
            "inputs": res.versions.get("inputs", ""),
            "phase_seconds": phases, "floor_s": round(floor, 4), "baseline_gpu_s": round(baseline_gpu_s, 4),
            "latency_overhead_s": None if total is None else round(total - floor, 4),
            "latency_overhead_unqueued_s": None if total is None else round(total - floor - _queued_s(phases), 4),
            "finished_at_s": round(at, 2),
            "versions": {k: v for k, v in res.versions.items() if k in _KEPT_VERSIONS},
        }

    def _progress(self, r: dict[str, Any], count: int) -> None:
        timing = ""
        if r["speedup"] is not None:
            timing = f" speedup {r['speedup']:5.2f} runtime {r['runtime_ms']:.3f} ms"
        msg = f"  {r['message'][:90]}" if not r["correct"] and r["message"] else ""
        say(f"ours  [{count:4d}] {r['label']:22s} {r['category']:9s} correct={str(r['correct']):5s}{timing} "
            f"at {r['finished_at_s']:.1f} s{msg}")

    def meta(self) -> dict[str, Any]:
        return {"pool_startup_s": _round(self.startup_s, 2), "pool_info": self.pool_info, "static_checks": self.static_checks,
                "settings": {"device": self.settings.device, "size": self.settings.size,
                             "correctness_trials": self.settings.correctness_trials,
                             "timing_trials": self.settings.timing_trials, "warmup_trials": self.settings.warmup_trials,
                             "timeout_s": self.settings.timeout_s, "backend": self.settings.backend,
                             "precision": self.settings.precision},
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


def overhead_figures(records: list[dict[str, Any]], wall_s: float | None) -> dict[str, Any]:
    """Our overhead beyond the GPU floor (eval_throughput's definition)."""
    if not records:
        return {}
    floors = [r["floor_s"] for r in records]
    latency = [r["latency_overhead_s"] for r in records if r["latency_overhead_s"] is not None]
    unqueued = [r["latency_overhead_unqueued_s"] for r in records if r["latency_overhead_unqueued_s"] is not None]
    out: dict[str, Any] = {"mean_floor_s": _round(statistics.mean(floors))}
    if wall_s:
        out["wall_per_candidate_s"] = _round(wall_s / len(records))
        out["overhead_per_candidate_s"] = _round(wall_s / len(records) - statistics.mean(floors))
    if latency:
        out["latency_overhead_mean_s"] = _round(statistics.mean(latency))
        out["latency_overhead_median_s"] = _round(statistics.median(latency))
    if unqueued:
        out["latency_overhead_unqueued_median_s"] = _round(statistics.median(unqueued))
    return out


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
        budget = None if args.budget_s is None else max(1.0, args.budget_s - (time.perf_counter() - args.script_start))
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
        "overhead": overhead_figures(records, wall),
        "floor_definition": _floor_definition(),
        "skipped": len(skipped),
    }


def sol_distribution(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Per level: the share of the speed of light the candidates reached (floor / runtime, evaluation/floor.py), and
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


def _floor_definition() -> str:
    from eval_throughput import FLOOR_DEFINITION

    return FLOOR_DEFINITION


def print_sweep(data: dict[str, Any]) -> None:
    s = data["summary"]
    say(f"\n== {data['mode']}: {s['finished']} of {s['planned']} finished"
        f"{' (budget cut)' if s['budget_cut'] else ''}, {s['correct']} correct; wall {s['wall_s']} s, "
        f"{s['candidates_per_min']} candidates/min; pool start-up {data['ours']['pool_startup_s']} s (not in the wall)")
    categories = sorted({c for counts in s["verdicts_by_level"].values() for c in counts})
    say(f"{'level':6s} " + " ".join(f"{c:>9s}" for c in categories))
    for level, counts in s["verdicts_by_level"].items():
        say(f"{level:6s} " + " ".join(f"{counts.get(c, 0):9d}" for c in categories))
    if s["not_correct"]:
        say(f"not correct ({len(s['not_correct'])}):")
        for r in s["not_correct"]:
            say(f"  {r['label']:22s} {r['category']:9s} {r['name'][:40]:40s} {r['message'][:110]}")
    sp = s["speedup"]
    if sp.get("count"):
        label = "identical-code speedup" if data["mode"] == "identity" else "speedup"
        say(f"{label} over {sp['count']} timed: median {sp['median']}, p5 {sp['p5']}, p95 {sp['p95']}, "
            f"range {sp['min']}-{sp['max']}, share within [0.95, 1.05] {sp['share_within_0.95_1.05']}")
        if data["mode"] == "identity" and sp["outside_0.8_1.25"]:
            say("outside [0.8, 1.25]: " + ", ".join(f"{r['label']} {r['speedup']}" for r in sp["outside_0.8_1.25"]))
        if data["mode"] == "solutions":
            for r in sorted(data["per_candidate"], key=lambda r: r["label"]):
                if r["speedup"] is not None:
                    say(f"  {r['label']:22s} {r['speedup']:6.2f}x  ({r['runtime_ms']:.3f} ms vs {r['baseline_ms']:.3f} ms)")
    else:
        say(sp.get("note", "no speedups"))
    for card, d in s.get("speedup_by_gpu", {}).items():
        if d.get("count"):
            say(f"  GPU {card}: {d['verdicts']} verdicts, {d['count']} timed, median {d['median']}, within [0.95, 1.05] "
                f"{d['share_within_0.95_1.05']}, outside [0.8, 1.25] {len(d['outside_0.8_1.25'])}"
                + (f", baseline timed on another card: {', '.join(d['baseline_elsewhere'])}" if d["baseline_elsewhere"] else ""))
    for level, d in s.get("speed_of_light", {}).items():
        say(f"speed of light {level}: {d['count']} timed ({d['memory_bound']} memory-bound), median {d['median']}, "
            f"p90 {d['p90']}, range {d['min']}-{d['max']}; above 1: "
            + (", ".join(f"{x['label']} {x['sol_fraction']}" for x in d["above_1"]) or "none"))
    if s.get("widened_inputs"):
        say(f"widened inputs: {', '.join(s['widened_inputs'])}")
    if s["flags"]:
        say(f"flags: {s['flags']}")
    if s["not_finished"]:
        say(f"not finished ({len(s['not_finished'])}): {', '.join(s['not_finished'][:30])}"
            + (" ..." if len(s["not_finished"]) > 30 else ""))
    if data["skipped"]:
        say(f"skipped or noted: {len(data['skipped'])} (see the JSON's `skipped`)")


# ---------------------------------------------------------------- KernelBench's own harness


def kb_source_dir(root: Path) -> Path:
    """The folder that holds KernelBench's `kernelbench` package (src/), beside its problems."""
    for base in (root, root.parent):
        if (base / "src" / "kernelbench" / "eval.py").is_file():
            return base / "src"
    raise BadInput(f"No src/kernelbench/eval.py next to {root}: kb-harness needs a full KernelBench checkout, not only its problems.")


def kb_child_env(src_dir: Path, kb_site: str | None) -> dict[str, str]:
    env = dict(os.environ)
    parts = [p for p in (kb_site, str(src_dir), os.environ.get("PYTHONPATH")) if p]
    env["PYTHONPATH"] = os.pathsep.join(parts)  # KernelBench's package and its pydantic first
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def run_child(argv: list[str], env: dict[str, str], cwd: str, timeout_s: float,
              result_prefix: str | None = None) -> tuple[dict[str, Any] | None, float, str, bool]:
    """A fresh Python process; returns (the JSON of its last line starting with `result_prefix` (default
    KernelBench's), wall seconds start to exit, stderr tail, timed out)."""
    result_prefix = result_prefix or KB_RESULT_PREFIX
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=cwd,
                            start_new_session=True)
    timed_out = False
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        stdout, stderr = proc.communicate()
    wall = time.perf_counter() - started
    found = None
    for line in stdout.decode(errors="replace").splitlines():
        if line.startswith(result_prefix):
            try:
                found = json.loads(line[len(result_prefix):])
            except json.JSONDecodeError:
                continue
    lines = stderr.decode(errors="replace").strip().splitlines()
    tail = f"exit code {proc.returncode}" + (f", {lines[-1][:300]}" if lines else "")
    return found, wall, tail, timed_out


def kb_preflight(src_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Import KernelBench's eval.py once in a child (stand-ins for its unused imports) before any clock."""
    with tempfile.TemporaryDirectory(prefix="kb_sweep_") as work:
        spec = Path(work) / "spec.json"
        spec.write_text(json.dumps({"import_only": True}))
        found, wall, tail, timed_out = run_child([str(Path(__file__).resolve()), "--kb-child", str(spec)],
                                                 kb_child_env(src_dir, args.kb_site), work, 300.0)
    if found is None or found.get("error"):
        why = (found or {}).get("error") or ("timed out" if timed_out else tail) or "no result"
        raise BadInput(f"KernelBench's eval.py does not import here ({why}); on the GPU machine install its wheels "
                       "(device_suite.sh does) and pass --kb-site.")
    found["wall_s"] = round(wall, 2)
    return found


def order_by_level(candidates: list[SweepCandidate]) -> list[SweepCandidate]:
    """Levels alternate (L1, L2, L1, ...) so that a budget cut leaves both levels in the sample."""
    queues: dict[int, list[SweepCandidate]] = {}
    for c in candidates:
        queues.setdefault(c.level, []).append(c)
    ordered: list[SweepCandidate] = []
    lists = [queues[k] for k in sorted(queues)]
    while any(lists):
        for q in lists:
            if q:
                ordered.append(q.pop(0))
    return ordered


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
    candidates = order_by_level(candidates)
    info = kb_preflight(src_dir, args)
    say(f"kb-harness: {len(candidates)} {args.candidates} candidates; KernelBench's eval.py imports "
        f"(stand-ins for {info.get('stubbed') or 'nothing'}; preflight {info['wall_s']} s, not in any wall)")
    out = args.out or "kb_harness.json"
    env = environment(args.device)
    kb_records: list[dict[str, Any]] = []
    kb_state: dict[str, Any] = {"budget_s": args.budget_s, "budget_cut": False, "not_launched": [], "wall_s": None}
    ours: OursRun | None = None
    cached: OursRun | None = None

    def build() -> dict[str, Any]:
        ours_records = list(ours.records) if ours else []
        summary = summarise_harness(kb_records, ours_records, ours.groups if ours else [])
        if cached is not None:
            summary["baselines_cached"] = summarise_cached(summary, cached.records, cached.groups)
        return {"mode": "kb-harness", "candidates": args.candidates, "kernelbench_root": str(root), "environment": env,
                "kb_settings": kb_settings(args), "kb_preflight": info, "kb": kb_state, "ours": ours.meta() if ours else None,
                "ours_baselines_cached": cached.meta() if cached else None, "summary": summary,
                "floor_definition": _floor_definition(), "skipped": skipped,
                "per_candidate": {"kb": kb_records, "ours": ours_records,
                                  "ours_baselines_cached": list(cached.records) if cached else []}}

    report = JsonReport(out, build)
    report.write()
    # KernelBench's side: one fresh process per candidate, sequential, as its script runs them on one GPU.
    t0 = time.perf_counter()
    for index, cand in enumerate(candidates):
        elapsed = time.perf_counter() - t0
        estimate = statistics.mean(r["wall_s"] for r in kb_records) if kb_records else 0.0
        if args.budget_s is not None and elapsed + estimate > args.budget_s:
            kb_state["budget_cut"] = True
            kb_state["not_launched"] = [c.label for c in candidates[index:]]
            say(f"kb    budget of {args.budget_s:.0f} s would be exceeded ({elapsed:.0f} s spent, about {estimate:.0f} s "
                f"a candidate): {len(candidates) - index} candidates not launched")
            break
        record = run_kb_candidate(cand, problems[cand.problem_id].source_for(args.size), src_dir, args)
        kb_records.append(record)
        kb_state["wall_s"] = round(time.perf_counter() - t0, 2)
        say(f"kb    [{index + 1:3d}] {cand.label:22s} compiled={str(record['compiled']):5s} "
            f"correct={str(record['correctness']):5s} runtime {record['runtime_ms']} ms wall {record['wall_s']:.1f} s"
            + (f"  {record['error'][:90]}" if record["error"] else ""))
        report.write()
    kb_state["wall_s"] = round(time.perf_counter() - t0, 2)
    ran = {r["label"] for r in kb_records}
    same = [c for c in candidates if c.label in ran]
    report.write()
    # Ours on exactly the candidates KernelBench's harness ran; a fresh pool started before the clock.
    if same:
        ours = OursRun(args, root, problems, static_checks=(args.candidates == "solutions"), on_record=lambda _r: report.write())
        try:
            ours.start()
            for level in sorted({c.level for c in same}):
                ours.run_group(f"L{level}", [c for c in same if c.level == level], args.ours_budget_s)
            known = dict(ours.evaluator.baselines)
        finally:
            ours.close()
        if args.cached_baselines and known:
            # As in training and nightly runs, where each problem's baseline is timed once per GPU and kept in
            # DuckDB: a fresh pool (sizing, references and the candidate's timing all redone) that is told
            # the baselines the first pass measured.
            cached = OursRun(args, root, problems, static_checks=(args.candidates == "solutions"),
                             on_record=lambda _r: report.write())
            try:
                cached.start()
                cached.evaluator.baselines.update(known)
                for level in sorted({c.level for c in same}):
                    cached.run_group(f"L{level}", [c for c in same if c.level == level], args.ours_budget_s)
            finally:
                cached.close()
    report.write()
    print_harness(build())
    say(f"wrote {out}")
    return 0


def summarise_cached(summary: dict[str, Any], records: list[dict[str, Any]], groups: list[dict[str, Any]]) -> dict[str, Any]:
    """Our second pass, baselines known: per level its wall, rate and ratio against the same KernelBench side."""
    out: dict[str, Any] = {}
    for level, figures in summary["per_level"].items():
        kb_rate = figures["kb"]["per_min"]
        chosen = records if level == "all" else [r for r in records if f"L{r['level']}" == level]
        walls = [g["wall_s"] or 0.0 for g in groups] if level == "all" else [g["wall_s"] or 0.0 for g in groups if g["name"] == level]
        wall = sum(walls) if walls else None
        rate = 60.0 * len(chosen) / wall if wall and chosen else None
        _floor, ceiling = ratio_ceiling(figures["kb"]["wall_s"], figures["kb"]["candidates"], chosen)
        out[level] = {"candidates": len(chosen), "correct": sum(1 for r in chosen if r["correct"]), "wall_s": _round(wall, 2),
                      "per_min": _round(rate, 2), "throughput_ratio_ours_over_kb": _round(rate / kb_rate, 2) if rate and kb_rate else None,
                      "ratio_ceiling": _round(ceiling, 2),
                      "baseline_s": _round(sum(r["phase_seconds"].get("baseline", 0.0) for r in chosen), 2)}
    return out


def run_resummarise(args: argparse.Namespace) -> int:
    """A kb-harness run's summary recomputed from its records, with the figures added since it was written."""
    try:
        data = json.loads(Path(args.json).read_text())
    except (OSError, ValueError) as exc:
        raise BadInput(f"Cannot read {args.json} as a kb-harness JSON: {exc}") from None
    if data.get("mode") != "kb-harness" or not data.get("ours"):
        raise BadInput(f"{args.json} is not a kb-harness run with our side in it (mode {data.get('mode')!r}).")
    settings = data["ours"]["settings"]
    calls = settings["correctness_trials"] + settings["warmup_trials"] + settings["timing_trials"]
    runs = data["per_candidate"]
    for record in [*runs["ours"], *runs.get("ours_baselines_cached", [])]:
        record.setdefault("baseline_gpu_s", round(baseline_gpu_seconds(record["baseline_ms"], record["phase_seconds"], calls), 4))
    summary = summarise_harness(runs["kb"], runs["ours"], data["ours"]["groups"])
    if data.get("ours_baselines_cached"):
        summary["baselines_cached"] = summarise_cached(summary, runs["ours_baselines_cached"],
                                                       data["ours_baselines_cached"]["groups"])
    data["summary"] = summary
    print_harness(data)
    if args.out:
        Path(args.out).write_text(json.dumps(data, indent=1))
        say(f"wrote {args.out}")
    return 0


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
                              "compiled": False, "correctness": False, "runtime_ms": None, "ref_runtime_ms": None,
                              "kb_speedup": None, "error": "", "timed_out": False, "wall_s": 0.0, "phase_seconds": {}}
    with tempfile.TemporaryDirectory(prefix="kb_sweep_") as work:
        spec = {"original_src": reference, "custom_src": cand.source, "seed": KB_SEED,
                "num_correct_trials": args.correctness_trials, "num_perf_trials": args.timing_trials,
                "backend": "cuda" if cand.kind == "identity" else "triton", "build_dir": str(Path(work) / "build"),
                "exact_fp32": args.kb_exact_fp32}
        (Path(work) / "spec.json").write_text(json.dumps(spec))
        found, wall, tail, timed_out = run_child([str(Path(__file__).resolve()), "--kb-child", str(Path(work) / "spec.json")],
                                                 kb_child_env(src_dir, args.kb_site), work, args.timeout)
    record["wall_s"] = round(wall, 3)
    record["timed_out"] = timed_out
    if found is not None:
        for key in ("compiled", "correctness", "runtime_ms", "ref_runtime_ms", "error", "phase_seconds", "metadata", "numerics"):
            if key in found:
                record[key] = found[key]
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
        ratios = [v for _, v in runtime_ratios]
        gpu_floor, ceiling = ratio_ceiling(kb_wall, len(kb_l), ours_l)
        per_level["all" if level is None else f"L{level}"] = {
            "kb": {"candidates": len(kb_l), "wall_s": round(kb_wall, 2), "per_min": _round(kb_rate, 2),
                   "wall_per_candidate_s": _round(kb_wall / len(kb_l)), "correct": sum(1 for r in kb_l if r["correctness"])},
            "ours": {"candidates": len(ours_l), "wall_s": _round(ours_wall, 2), "per_min": _round(ours_rate, 2),
                     "correct": sum(1 for r in ours_l if r["correct"]), **overhead_figures(ours_l, ours_wall)},
            "throughput_ratio_ours_over_kb": _round(ours_rate / kb_rate, 2) if ours_rate and kb_rate else None,
            "floor_with_baselines_s": _round(gpu_floor, 2),
            "ratio_ceiling": _round(ceiling, 2),
            "agreement": {"both_correct": len(both_correct), "both_wrong": len(both_wrong), "disagree": disagree},
            "runtime_ratio_ours_over_kb": ({"candidates": len(ratios), "median": _round(statistics.median(ratios)),
                                            "min": _round(min(ratios)), "max": _round(max(ratios)),
                                            "per_candidate": {k: _round(v) for k, v in runtime_ratios}}
                                           if ratios else {"candidates": 0}),
        }
    return {"per_level": per_level,
            "note": "KernelBench's runtime is the mean of its timed calls (3 significant digits), ours the median; "
                    "its wall is each process from start to exit (Python start and imports included); ours is each "
                    "level's evaluate call on a started pool (problem sizing and baselines included)."}


def print_harness(data: dict[str, Any]) -> None:
    per_level = data["summary"]["per_level"]
    kb = data["kb"]
    say(f"\n== kb-harness ({data['candidates']} candidates): KernelBench's eval_kernel_against_ref, one process each, "
        f"against ours (pool start-up {data['ours']['pool_startup_s'] if data['ours'] else '-'} s, not in the wall)")
    if kb["budget_cut"]:
        say(f"KernelBench's side stopped at its budget ({kb['budget_s']:.0f} s): {len(kb['not_launched'])} not launched, "
            "ours ran the same subset")
    say(f"{'level':6s} {'n':>3s} {'KB wall':>8s} {'KB/min':>7s} {'our wall':>9s} {'our/min':>8s} {'ratio':>6s} "
        f"{'both ok':>7s} {'both bad':>8s} {'differ':>6s} {'rt ours/KB':>10s} {'our ovh/cand':>12s} {'ceiling':>7s}")
    for level, s in per_level.items():
        rt = s["runtime_ratio_ours_over_kb"]
        ag = s["agreement"]
        say(f"{level:6s} {s['kb']['candidates']:3d} {s['kb']['wall_s']:8.1f} {_fmt(s['kb']['per_min']):>7s} "
            f"{_fmt(s['ours']['wall_s']):>9s} {_fmt(s['ours']['per_min']):>8s} {_fmt(s['throughput_ratio_ours_over_kb']):>6s} "
            f"{ag['both_correct']:7d} {ag['both_wrong']:8d} {len(ag['disagree']):6d} {_fmt(rt.get('median')):>10s} "
            f"{_fmt(s['ours'].get('overhead_per_candidate_s')):>12s} {_fmt(s.get('ratio_ceiling')):>7s}")
        for d in ag["disagree"]:
            say(f"   disagree {d['label']}: KB correct={d['kb_correct']} {d['kb_error'][:60]} | ours {d['ours']} {d['ours_message'][:60]}")
    for level, s in data["summary"].get("baselines_cached", {}).items():
        say(f"{level:6s} baselines cached (a fresh pool told the first pass's baselines): {s['candidates']} candidates, "
            f"{s['correct']} correct, wall {_fmt(s['wall_s'])} s, {_fmt(s['per_min'])}/min, ratio {_fmt(s['throughput_ratio_ours_over_kb'])}, "
            f"ceiling {_fmt(s.get('ratio_ceiling'))}")
    say("ratio = our candidates/min over KernelBench's; rt = our median runtime over KernelBench's mean, on candidates "
        "both judged correct; our overhead per candidate = our wall per candidate - mean floor; ceiling = the ratio "
        "with no overhead at all: KernelBench's wall over the GPU floor of our work, the baselines' timed calls included")
    say(f"floor: {data['floor_definition']}")


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def kb_child(spec_path: str) -> None:
    """Runs inside the fresh process: KernelBench's eval_kernel_against_ref on one candidate."""
    import importlib.util
    import types

    spec = json.loads(Path(spec_path).read_text())
    out: dict[str, Any] = {"compiled": False, "correctness": False, "runtime_ms": None, "ref_runtime_ms": None,
                           "error": "", "phase_seconds": {}}
    def missing(name: str) -> bool:
        try:
            return importlib.util.find_spec(name) is None
        except (ImportError, ValueError):
            return True

    stubbed = []
    for name in KB_UNUSED_MODULES:
        if missing(name):
            module = types.ModuleType(name)
            module.__dict__["__kb_sweep_stand_in__"] = True

            def unused(*_a: Any, _name: str = name, **_k: Any) -> Any:
                raise RuntimeError(f"{_name} is a stand-in in this benchmark")

            if name == "dotenv":
                module.load_dotenv = lambda *a, **k: False
            elif name == "openai":
                module.OpenAI = unused
            elif name == "litellm":
                module.completion = unused
            elif name == "tqdm":
                module.tqdm = unused
            sys.modules[name] = module
            stubbed.append(name)
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


# ---------------------------------------------------------------- selfcheck


def run_selfcheck(args: argparse.Namespace) -> int:
    root = resolve_root(args.kernelbench_root)
    if args.from_json:
        args.problems = ",".join(problems_from_json(args.from_json))
        if not args.problems:
            say(f"{args.from_json} has no candidate that was not correct: nothing to check.")
            return 0
    elif not args.problems:
        raise BadInput("selfcheck needs --problems L1/19,... or --from-json FILE (an identity or solutions run's JSON).")
    chosen, _problems = select_problems(args, root)
    require_cuda(args.device)
    out = args.out or "kb_selfcheck.json"
    records: list[dict[str, Any]] = []
    env = environment(args.device)
    settings = {"device": args.device, "size": args.size, "tolerance": args.tolerance, "seed": KB_SEED,
                "exact_fp32": args.exact_fp32, "deterministic": args.deterministic, "timeout_s": args.timeout}
    report_extra: dict[str, Any] = {"not_checked": []}
    report = JsonReport(out, lambda: {"mode": "selfcheck", "kernelbench_root": str(root), "environment": env,
                                      "settings": settings, "per_problem": records, **report_extra,
                                      "summary": {"checked": len(records),
                                                  "self_consistent": sum(1 for r in records if r["self_consistent"]),
                                                  "not_self_consistent": [r["problem_id"] for r in records
                                                                          if r["self_consistent"] is False],
                                                  "errors": [r["problem_id"] for r in records if r["error"]]}})
    say(f"selfcheck: {len(chosen)} problems on {args.device} at {args.size} size, tolerance {args.tolerance}")
    for index, problem in enumerate(chosen):
        elapsed = time.perf_counter() - args.script_start
        estimate = statistics.mean(r["wall_s"] for r in records) if records else 0.0
        if args.budget_s is not None and elapsed + estimate > args.budget_s:
            skipped = [p.id for p in chosen[index:]]
            report_extra["not_checked"] = skipped
            say(f"self  budget of {args.budget_s:.0f} s would be exceeded: {len(skipped)} problems not checked")
            break
        record = selfcheck_problem(problem, args)
        records.append(record)
        report.write()
        say(f"self  [{index + 1:3d}] {problem.id:8s} {problem.name[:40]:40s} in-process {_fmt_diff(record['in_process_max_abs_diff'])} "
            f"across processes {_fmt_diff(record['cross_process_max_abs_diff'])} -> "
            + ("self-consistent" if record["self_consistent"] else
               ("ERROR " + record["error"][:80]) if record["error"] else f"NOT self-consistent ({record['why']})"))
    report.write()
    say(f"\n== selfcheck: {sum(1 for r in records if r['self_consistent'])} of {len(records)} self-consistent")
    say(f"{'problem':8s} {'name':40s} {'in-process':>11s} {'across':>11s} verdict")
    for r in records:
        verdict = "ok" if r["self_consistent"] else ("error" if r["error"] else r["why"])
        say(f"{r['problem_id']:8s} {r['name'][:40]:40s} {_fmt_diff(r['in_process_max_abs_diff']):>11s} "
            f"{_fmt_diff(r['cross_process_max_abs_diff']):>11s} {verdict}")
    say(f"wrote {out}")
    return 0


def _fmt_diff(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def problems_from_json(path: str) -> list[str]:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise BadInput(f"--from-json {path} could not be read as JSON ({type(exc).__name__}).") from None
    records = data.get("per_candidate") if isinstance(data, dict) else None
    if isinstance(records, dict):  # a kb-harness run: ours
        records = records.get("ours")
    if not isinstance(records, list):
        raise BadInput(f"{path} is not a JSON written by this script's identity or solutions mode (no per_candidate list).")
    from kernelbench_rl.evaluation.result import categories_without_verdict

    ours = set(categories_without_verdict())  # no verdict on the kernel: nothing for a self-check to explain
    return list(dict.fromkeys(r["problem_id"] for r in records if isinstance(r, dict) and not r.get("correct")
                              and r.get("category") not in ours))


def selfcheck_problem(problem: Any, args: argparse.Namespace) -> dict[str, Any]:
    record: dict[str, Any] = {"problem_id": problem.id, "name": problem.name, "in_process_max_abs_diff": None,
                              "in_process_allclose": None, "cross_process_max_abs_diff": None,
                              "cross_process_allclose": None, "self_consistent": None, "why": "", "error": "",
                              "wall_s": None}
    scratch = None  # the first process's outputs (GiBs at real size): /dev/shm where it has the room, else the disk
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        import shutil

        if shutil.disk_usage("/dev/shm").free > 32 << 30:
            scratch = "/dev/shm"
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="kb_selfcheck_", dir=scratch) as work:
        first = Path(work) / "first.pt"
        runs = []
        for step, (save, compare) in enumerate(((str(first), None), (None, str(first)))):
            spec = {"source": problem.source_for(args.size), "device": args.device, "seed": KB_SEED,
                    "tolerance": args.tolerance, "exact_fp32": args.exact_fp32, "deterministic": args.deterministic,
                    "save": save, "compare": compare}
            spec_path = Path(work) / f"spec{step}.json"
            spec_path.write_text(json.dumps(spec))
            env = dict(os.environ)
            if args.device == "cpu":
                env.setdefault("TRITON_INTERPRET", "1")
            found, _wall, tail, timed_out = run_child([str(Path(__file__).resolve()), "--selfcheck-child", str(spec_path)],
                                                      env, work, args.timeout)
            if found is None or found.get("error"):
                record["error"] = ((found or {}).get("error") or (f"timed out after {args.timeout:.0f} s" if timed_out else
                                                                  f"the process ended with no result: {tail}"))[:300]
                break
            runs.append(found)
    record["wall_s"] = round(time.perf_counter() - started, 2)
    if record["error"]:
        return record
    in_diffs = [r["in_process_max_abs_diff"] for r in runs]
    record["in_process_max_abs_diff"] = max(in_diffs, key=lambda v: float("inf") if v is None else v)
    record["in_process_allclose"] = all(r["in_process_allclose"] for r in runs)
    record["cross_process_max_abs_diff"] = runs[1]["cross_process_max_abs_diff"]
    record["cross_process_allclose"] = runs[1]["cross_process_allclose"]
    record["self_consistent"] = bool(record["in_process_allclose"] and record["cross_process_allclose"])
    reasons = []
    if not record["in_process_allclose"]:
        reasons.append("two forwards in one process differ (randomness in forward, e.g. dropout in training mode)")
    if not record["cross_process_allclose"]:
        reasons.append("two processes with the same seed differ (nondeterministic ops or uninitialised memory)")
    record["why"] = "; ".join(reasons)
    notes = [r.get("note") for r in runs if r.get("note")]
    if notes:
        record["note"] = notes[0]
    return record


def selfcheck_child(spec_path: str) -> None:
    """Runs inside a fresh process: the reference built after the seed, two forwards on the same inputs."""
    spec = json.loads(Path(spec_path).read_text())
    out: dict[str, Any] = {"error": ""}
    try:
        _selfcheck_child_run(spec, out)
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        out["error"] = f"{type(exc).__name__}: {exc}"[:300]
    print(KB_RESULT_PREFIX + json.dumps(out, default=str), flush=True)


def _selfcheck_child_run(spec: dict[str, Any], out: dict[str, Any]) -> None:
    import torch

    device = torch.device(spec["device"])
    if spec.get("exact_fp32"):  # no TF32 in matmuls and convolutions, no cuDNN autotuning
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cudnn.benchmark = False
    if spec.get("deterministic"):
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.backends.cudnn.deterministic = True
        torch.use_deterministic_algorithms(True)

    def set_seed(seed: int) -> None:
        torch.manual_seed(seed)
        if torch.cuda.is_available():
            torch.cuda.manual_seed(seed)

    def to_device(values: list[Any]) -> list[Any]:
        return [v.to(device) if isinstance(v, torch.Tensor) else v for v in values]

    namespace: dict[str, Any] = {"__name__": "kb_selfcheck_problem"}
    exec(compile(spec["source"], "<problem>", "exec"), namespace)  # noqa: S102 - a KernelBench reference, not a candidate
    seed = spec["seed"]
    set_seed(seed)
    init_inputs = to_device(list(namespace["get_init_inputs"]()))
    set_seed(seed)
    model = namespace["Model"](*init_inputs).to(device)
    set_seed(seed)
    inputs = to_device(list(namespace["get_inputs"]()))
    with torch.no_grad():
        first = _flatten(model(*inputs))
        if device.type == "cuda":
            torch.cuda.synchronize()
        second = _flatten(model(*inputs))
        if device.type == "cuda":
            torch.cuda.synchronize()
    tol = spec["tolerance"]
    out["in_process_max_abs_diff"], out["in_process_allclose"] = _compare(first, second, tol)
    if spec.get("save"):
        torch.save([t.cpu() if isinstance(t, torch.Tensor) else t for t in first], spec["save"])
    if spec.get("compare"):
        other = torch.load(spec["compare"], map_location=device, weights_only=False)
        out["cross_process_max_abs_diff"], out["cross_process_allclose"] = _compare(first, other, tol)
    if model.training and any(isinstance(m, torch.nn.modules.dropout._DropoutNd) for m in model.modules()):
        out["note"] = "the model has dropout and stays in training mode (as KernelBench builds it)"


def _flatten(value: Any) -> list[Any]:
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _flatten(v)]
    return [value]


def _compare(a: list[Any], b: list[Any], tol: float) -> tuple[float | None, bool]:
    """Worst absolute difference and KernelBench's verdict (torch.allclose, atol = rtol = tol, shapes equal)."""
    import torch

    if len(a) != len(b):
        return None, False
    worst = 0.0
    ok = True
    for x, y in zip(a, b):
        if isinstance(x, torch.Tensor) != isinstance(y, torch.Tensor):
            return None, False
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            if x.shape != y.shape:
                return None, False
            y = y.to(x.device)
            if x.numel():
                diff = (x.double() - y.double()).abs()
                same_nan = torch.isnan(x) & torch.isnan(y)
                diff = torch.where(same_nan, torch.zeros_like(diff), diff)
                worst = max(worst, float(diff.max()))
            ok = ok and bool(torch.allclose(x, y, atol=tol, rtol=tol))
        else:
            ok = ok and x == y
    return worst, ok


# ---------------------------------------------------------------- command line


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kernelbench_sweep.py",
        description="Our evaluator on the real KernelBench (its own problem files, at real size, on one device), and "
                    "KernelBench's own harness beside it. Each mode writes one JSON file (--out), rewritten after every "
                    "result, prints a progress line per candidate and a summary table at the end. Bad input exits 2 with "
                    "one sentence. Internal: --kb-child SPEC and --selfcheck-child SPEC are the fresh processes this "
                    "script starts; never run them by hand.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="On the GPU machine: bash bench/device_suite.sh kb-identity 1 | kb-solutions | kb-harness | kb-selfcheck FILE "
               "(bench/README.md). The CPU (--device cpu --size small) checks the machinery only; it claims no speedups.")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--problems-root", "--kernelbench-root", dest="kernelbench_root", default=None,
                        help="a KernelBench checkout (its root, or its KernelBench/ folder) or kernrl's problems folder; default: $KERNELBENCH_ROOT")
    common.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                        help="cuda (default) times on the GPU; cpu runs the Triton interpreter, no timing (smoke tests)")
    common.add_argument("--size", choices=["real", "small"], default="real",
                        help="real (default): KernelBench's own sizes; small: shrunken constants, for the CPU")
    common.add_argument("--out", default=None, help="JSON output path (default: kb_<mode>.json in the current folder)")
    common.add_argument("--timeout", type=float, default=120.0, help="seconds per candidate (per process in selfcheck)")
    common.add_argument("--levels", default="1,2,3", help="levels to take every problem of (default 1,2,3)")
    common.add_argument("--problems", default=None, help="a subset by id, e.g. L1/19,L2/1 (overrides --levels)")
    common.add_argument("--limit", type=int, default=None, help="only the first N problems (smoke runs)")
    common.add_argument("--sample", type=int, default=None,
                        help="N problems drawn at random from those selected (the same --seed draws the same ones)")
    common.add_argument("--seed", type=int, default=0, help="the seed of --sample's draw (default 0)")

    evaluation = argparse.ArgumentParser(add_help=False)
    evaluation.add_argument("--correctness-trials", type=int, default=5, help="correctness trials (default 5)")
    evaluation.add_argument("--timing-trials", type=int, default=100, help="timed calls (default 100)")
    evaluation.add_argument("--warmup-trials", type=int, default=3, help="warm-up calls before timing (ours; default 3)")
    evaluation.add_argument("--no-warmup", action="store_true",
                            help="skip our pool's warm-up evaluation (L1/20's solution at small size; done on cuda only)")
    evaluation.add_argument("--worker-logs", default=None, help="append the tail of our workers' logs to this file")
    evaluation.add_argument("--parallel-compiles", type=int, default=None,
                            help="our children compiling at once (default: the evaluator's, by cores)")
    evaluation.add_argument("--in-flight", type=int, default=None,
                            help="our evaluations under way at once (default: the evaluator's; 1 with --warm-children 0 "
                                 "runs one child at a time, nothing beside a timed trial: the fidelity control)")
    evaluation.add_argument("--warm-children", type=int, default=None,
                            help="our pre-started children (default: the evaluator's, in-flight + 1 on a GPU)")

    sub = parser.add_subparsers(dest="mode", metavar="MODE", required=True)
    identity = sub.add_parser(
        "identity", parents=[common, evaluation], formatter_class=argparse.RawDescriptionHelpFormatter,
        help="reference-as-candidate over every problem: verdicts, and the identical-code speedup (should read 1.00)",
        description="Every problem's own source, with its Model class renamed ModelNew, as the candidate, through one "
                    "Evaluator in one evaluate call. Identical code must be judged correct with a speedup of 1.00; the "
                    "summary gives verdict counts per level, the problems not judged correct with their messages, and "
                    "the speedup distribution (median, p5/p95, share within [0.95, 1.05], those outside [0.8, 1.25]), "
                    "wall time and candidates/min (pool start-up excluded). Static checks are OFF in this mode: the "
                    "reference uses torch ops, which the static policy rightly rejects in real candidates; the switch "
                    "is for this self-test only.")
    identity.add_argument("--budget-s", type=float, default=None,
                          help="stop waiting once this many seconds have passed since the script started (pool start-up "
                               "included) and write what finished")
    solutions = sub.add_parser(
        "solutions", parents=[common, evaluation],
        help="every bundled solution on the KernelBench problem of the same id (static checks on)",
        description="Every bundled solution in KernelBench/solutions/level*/ evaluated, static checks on, on the problem "
                    "of the same id from --kernelbench-root: a verdict (and on a GPU a speedup) per solution. Solutions "
                    "whose id is not in the root are listed as skipped; --problems/--levels narrow the set.")
    solutions.add_argument("--budget-s", type=float, default=None,
                           help="stop waiting once this many seconds have passed since the script started (pool start-up "
                               "included) and write what finished")
    harness = sub.add_parser(
        "kb-harness", parents=[common, evaluation],
        help="KernelBench's eval_kernel_against_ref (a fresh process per candidate) against ours on the same candidates",
        description="For each candidate a fresh Python process imports KernelBench's src/kernelbench/eval.py and calls "
                    "eval_kernel_against_ref (5 correctness trials, 100 timed calls, measure_performance on, CUDA events, "
                    "fp32), as its scripts/eval_from_generations.py does; its unused imports (dotenv, openai, litellm, and "
                    "tqdm/requests where missing) get stand-ins, pydantic must be installed (--kb-site). Then a fresh "
                    "Evaluator (started before the clock) runs exactly the candidates KernelBench's side ran, one evaluate "
                    "call per level. Per level: candidates/min of each, the ratio ours/KB, verdict agreement, runtime "
                    "ratio on candidates both judged correct, our overhead per candidate beyond its GPU floor. Needs CUDA. "
                    f"Default sample: {DEFAULT_HARNESS_SAMPLE} (levels alternate so a budget cut keeps both).")
    harness.add_argument("--candidates", choices=["identity", "solutions"], default="identity",
                         help="identity (default): the references renamed ModelNew; solutions: our bundled solutions "
                              "for the sample's ids (ids without one are skipped)")
    harness.add_argument("--budget-s", type=float, default=None,
                         help="KernelBench's side launches no candidate that would end past this many seconds "
                              "(estimated from its mean so far) and says so")
    harness.add_argument("--ours-budget-s", type=float, default=None, help="stop waiting for ours after this many seconds per level")
    harness.add_argument("--no-cached-baselines", dest="cached_baselines", action="store_false",
                         help="skip our second pass: a fresh pool told the baselines the first pass measured (as training "
                              "and nightly runs get them from DuckDB); by default it runs and is reported beside the first")
    harness.add_argument("--kb-site", default=os.environ.get("KB_SITE"),
                         help="a folder with KernelBench's pydantic (pip install --target), put on its processes' path "
                              "only (default: $KB_SITE)")
    harness.add_argument("--kb-exact-fp32", action="store_true",
                         help="turn TF32 off in cuBLAS and cuDNN in KernelBench's processes before its harness runs, as "
                              "ours runs fp32 problems; by default its processes keep torch's defaults (cuDNN's TF32 on), "
                              "so a conv solution exact in fp32 can fail its 1e-4 tolerance against a TF32 reference")
    harness.add_argument("--check-imports", action="store_true",
                         help="only check that KernelBench's eval.py imports (works on the CPU), then exit")
    resummarise = sub.add_parser(
        "resummarise", help="recompute and print a kb-harness JSON's summary from its records (figures added since "
                            "it was written included, such as the ratio ceiling); no GPU needed")
    resummarise.add_argument("json", help="a kb-harness run's JSON (e.g. bench/results/kb_harness_fused_s9_h100.json)")
    resummarise.add_argument("--out", default=None, help="also write the JSON with the recomputed summary here")
    selfcheck = sub.add_parser(
        "selfcheck", parents=[common],
        help="does a problem's reference agree with itself? (names failures that are the problem's own)",
        description="For each problem (--problems, or the non-correct ones of an identity/solutions run's JSON with "
                    "--from-json): two fresh processes each build the reference after the same seed (KernelBench's 42), "
                    "draw the same inputs and run two forwards. Reports the worst absolute difference between the two "
                    "forwards of one process (randomness in forward, e.g. dropout in training mode) and between the two "
                    "processes (nondeterministic ops), and whether both pass KernelBench's tolerance (torch.allclose, "
                    "atol = rtol = 1e-4 for fp32): self-consistent or not.")
    selfcheck.add_argument("--from-json", default=None, help="take the non-correct problems of this run's JSON")
    selfcheck.add_argument("--budget-s", type=float, default=None,
                           help="start no problem that would end past this many seconds since the script started")
    selfcheck.add_argument("--tolerance", type=float, default=1e-4, help="atol = rtol (default 1e-4, KernelBench's fp32)")
    selfcheck.add_argument("--exact-fp32", action="store_true",
                           help="no TF32 in matmuls and convolutions and no cuDNN autotuning (how our evaluator runs "
                                "references) instead of torch's defaults (KernelBench's)")
    selfcheck.add_argument("--deterministic", action="store_true",
                           help="also torch.use_deterministic_algorithms(True): does the problem need nondeterministic ops?")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) == 2 and argv[0] == "--kb-child":
        kb_child(argv[1])
        return 0
    if len(argv) == 2 and argv[0] == "--selfcheck-child":
        selfcheck_child(argv[1])
        return 0
    args = build_parser().parse_args(argv)
    if args.mode == "resummarise":
        try:
            return run_resummarise(args)
        except BadInput as exc:
            print(f"error: {exc}", file=sys.stderr, flush=True)
            return 2
    args.script_start = time.perf_counter()
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    try:
        if args.mode == "identity":
            return run_sweep(args, "identity")
        if args.mode == "solutions":
            return run_sweep(args, "solutions")
        if args.mode == "kb-harness":
            return run_kb_harness(args)
        return run_selfcheck(args)
    except BadInput as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
