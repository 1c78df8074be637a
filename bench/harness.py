"""What every benchmark here shares, so that each script holds only its own question.

- the command line: `--device/--size`, trial counts, the pool's knobs, budgets, `--out`; `run_main` turns a
  `BadInput` into one line and exit 2, and puts the CPU on Triton's interpreter;
- the JSON: `environment()` (date, commit, GPU, versions) and `JsonReport`, rewritten whole after each result so a
  run cut off keeps what finished;
- the problems and candidates: a KernelBench/kernrl root or the bundled set, ids and levels, the reference as its own
  candidate (`Model` renamed `ModelNew`), the bundled solutions;
- a started and warmed `Evaluator` (`Pool`) and one `evaluate` call under a budget, with the workers' log tails;
- the small figures (rounding, percentiles, the identical-code band) and a fresh child process with a result line.

Scripts import it as `import harness` after putting this folder on `sys.path` (it puts the repository there).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
for _path in (str(BENCH), str(REPO)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

IDENTITY_BAND = (0.95, 1.05)
IDENTITY_OUTLIER_BAND = (0.8, 1.25)
WARMUP_PROBLEM = "L1/20"  # the pool's warm-up candidate is its solution, at small size; no benchmark times it
FLOOR_DEFINITION = (
    "floor per candidate = compile (import) + build (construction, incl. a CUDA extension's nvcc) + first_call "
    "(Triton JIT) + runtime_ms x (correctness + warm-up + timed calls) for correct candidates + the timeout for hangs"
)


class BadInput(Exception):
    """A one-sentence complaint about the command line; the script exits 2 with it."""


def say(text: str) -> None:
    print(text, flush=True)


# ---------------------------------------------------------------- small figures


def rnd(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def percentile(values: list[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (q in [0, 100])."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def first_line(text: str, limit: int = 200) -> str:
    return next((line.strip()[:limit] for line in (text or "").strip().splitlines() if line.strip()), "")


def speedup_distribution(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Identical code: baseline / candidate should read 1.00."""
    timed = [r for r in records if r.get("correct") and r.get("speedup")]
    values = [r["speedup"] for r in timed]
    if not values:
        return {"count": 0, "note": "no speedups (not timed: CPU, or nothing correct)"}
    (low, high), (out_low, out_high) = IDENTITY_BAND, IDENTITY_OUTLIER_BAND
    return {
        "count": len(values), "median": rnd(statistics.median(values)), "p5": rnd(percentile(values, 5)),
        "p95": rnd(percentile(values, 95)), "min": rnd(min(values)), "max": rnd(max(values)),
        "share_within_0.95_1.05": rnd(sum(1 for v in values if low <= v <= high) / len(values)),
        "outside_0.8_1.25": [{"label": r["label"], "speedup": rnd(r["speedup"]), "runtime_ms": rnd(r.get("runtime_ms"), 4),
                              "baseline_ms": rnd(r.get("baseline_ms"), 4)}
                             for r in sorted(timed, key=lambda r: r["speedup"]) if not out_low <= r["speedup"] <= out_high],
    }


def speedup_text(sp: dict[str, Any]) -> str:
    """speedup_distribution's figures in one line."""
    if not sp.get("count"):
        return sp.get("note", "no speedups")
    outside = ", ".join(f"{r['label']} {r['speedup']}" for r in sp["outside_0.8_1.25"]) or "none"
    return (f"identical-code speedup over {sp['count']} timed: median {sp['median']}, p5 {sp['p5']}, p95 {sp['p95']}, "
            f"within [0.95, 1.05] {sp['share_within_0.95_1.05']}; outside [0.8, 1.25]: {outside}")


def ratios(pairs: list[tuple[str, float]]) -> dict[str, Any]:
    """Ratios per candidate (label, value): how many, their median and range, and each one."""
    if not pairs:
        return {"candidates": 0}
    values = [v for _, v in pairs]
    return {"candidates": len(values), "median": rnd(statistics.median(values)), "min": rnd(min(values)),
            "max": rnd(max(values)), "per_candidate": {label: rnd(v) for label, v in pairs}}


def fmt(value: Any) -> str:
    """A figure as a table shows it: '-' for none, a float to two decimals."""
    return "-" if value is None else f"{value:.2f}" if isinstance(value, float) else str(value)


def print_table(columns: list[str], rows: list[list[Any]]) -> None:
    """Rows under their columns' names, each column as wide as its widest cell: columns of figures to the right."""
    cells = [columns, *([fmt(v) for v in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    figures = [all(row[i] is None or isinstance(row[i], (int, float)) for row in rows) for i in range(len(columns))]
    for row in cells:
        say(" ".join(c.rjust(w) if right else c.ljust(w) for c, w, right in zip(row, widths, figures)).rstrip())


def compile_s(phases: dict[str, float]) -> float:
    return phases.get("compile", 0.0) + phases.get("build", 0.0) + phases.get("first_call", 0.0)


def queued_s(phases: dict[str, float]) -> float:
    """Seconds spent waiting for the device (or its memory, or a compile slot) while other candidates used it."""
    return sum(phases.get(k, 0.0) for k in ("device_wait", "memory_wait", "reference_wait", "alone_wait", "compile_wait"))


def once_per_problem_s(phases: dict[str, float]) -> float:
    """Work a problem costs once: its first reference (beyond the wait for it) and its baselines."""
    return max(0.0, phases.get("reference", 0.0) - phases.get("reference_wait", 0.0)) + phases.get("baseline", 0.0)


def verdict_record(res: Any, settings: Any, at: float) -> dict[str, Any]:
    """What a benchmark keeps of one EvalResult: its verdict, its times, and its overhead beyond its own floor
    (FLOOR_DEFINITION; the correctness calls count the widened seeds, `trials_total`). `at`: seconds since the
    evaluate call when it finished."""
    phases = {k: round(float(v), 4) for k, v in dict(res.phase_seconds).items()}
    calls = settings.warmup_trials + settings.timing_trials + res.trials_total
    gpu_s = (res.runtime_ms or 0.0) * calls / 1000.0 if res.correct else 0.0
    floor = compile_s(phases) + gpu_s + (settings.timeout_s if res.error_category.value == "timeout" else 0.0)
    total = phases.get("worker_total")
    return {
        "category": res.error_category.value, "correct": bool(res.correct), "message": first_line(res.error_message),
        "trials_passed": res.trials_passed, "trials_total": res.trials_total, "max_abs_err": res.max_abs_err,
        "runtime_ms": res.runtime_ms, "runtime_spread_ms": res.runtime_spread_ms, "baseline_ms": res.baseline_ms,
        "speedup": res.speedup, "flags": list(res.flags), "cached": bool(res.cached), "phase_seconds": phases,
        "gpu_trials_s": round(gpu_s, 4), "floor_s": round(floor, 4), "finished_at_s": round(at, 2),
        "latency_overhead_s": None if total is None else round(total - floor, 4),
        "latency_overhead_unqueued_s": None if total is None else round(total - floor - queued_s(phases), 4),
    }


def overhead_figures(records: list[dict[str, Any]], wall_s: float | None) -> dict[str, Any]:
    """Our overhead beyond the floor: throughput (wall a candidate less the mean floor) and latency (each candidate's
    worker_total less its floor; unqueued: less its waits for a device other candidates held too)."""
    if not records:
        return {}
    floor = statistics.mean(r["floor_s"] for r in records)
    out: dict[str, Any] = {"mean_floor_s": rnd(floor)}
    if wall_s:
        out["wall_per_candidate_s"] = rnd(wall_s / len(records))
        out["overhead_per_candidate_s"] = rnd(wall_s / len(records) - floor)
    for key in ("latency_overhead_s", "latency_overhead_unqueued_s"):
        out.update(mean_median(records, key))
    return out


def mean_median(records: list[dict[str, Any]], key: str, with_max: bool = False) -> dict[str, float | None]:
    """`key`'s mean and median (and max) over the records that have it, as `<key>_mean_s`, `<key>_median_s` (`_s`
    moved to the end); None where no record has it."""
    values = [r[key] for r in records if r.get(key) is not None]
    stats = {"mean": statistics.mean, "median": statistics.median, **({"max": max} if with_max else {})}
    return {f"{key[:-2]}_{stat}_s": rnd(fn(values)) if values else None for stat, fn in stats.items()}


def alternate_levels(items: list[Any], level_of: Callable[[Any], Any]) -> list[Any]:
    """The items with their levels taking turns (L1, L2, L1, ...), each level's in its own order: a budget cut then
    leaves every level in the sample."""
    queues: dict[Any, list[Any]] = {}
    for item in items:
        queues.setdefault(level_of(item), []).append(item)
    ordered: list[Any] = []
    lists = list(queues.values())
    while any(lists):
        ordered += [q.pop(0) for q in lists if q]
    return ordered


# ---------------------------------------------------------------- the JSON


def command_output(command: list[str], timeout_s: float = 20.0) -> str:
    """A short command's stdout (run in the repository), stripped; empty where it cannot run."""
    try:
        return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=timeout_s).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def gpu_names() -> list[str]:
    """Every GPU's name from nvidia-smi (this process takes no CUDA context for it); none where it cannot run."""
    return [n.strip() for n in command_output(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"]).splitlines()]


def gpu_name(device: str = "cuda") -> str | None:
    """The first GPU's name; None on the CPU."""
    names = gpu_names() if device == "cuda" else []
    return names[0] if names else None


def environment(device: str) -> dict[str, Any]:
    """Date, commit, GPU and versions, from metadata: this process imports neither torch nor triton for it."""
    from importlib import metadata

    info: dict[str, Any] = {"python": platform.python_version(), "machine": platform.machine(), "device": device,
                            "date": time.strftime("%Y-%m-%d"), "gpu": gpu_name(device)}
    for package in ("torch", "triton"):
        try:
            info[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            info[package] = None
    info["repo_commit"] = command_output(["git", "rev-parse", "--short", "HEAD"]) or None
    return info


def write_json(path: str | Path | None, data: Any, indent: int = 2, announce: bool = False) -> None:
    """The file rewritten whole, through a temporary file beside it (a reader never sees half of it); with
    `announce`, a line saying so."""
    if not path:
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=indent, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    if announce:
        say(f"wrote {path}")


def show(figures: dict[str, Any], out: str | None, indent: int = 1) -> None:
    """A script's figures as JSON on stdout and, with --out, in that file too."""
    print(json.dumps(figures, indent=indent, default=str), flush=True)
    write_json(out, figures, indent)


class JsonReport:
    """One JSON file, rewritten whole every time something finishes (any thread)."""

    def __init__(self, path: str | None, build: Callable[[], dict[str, Any]]) -> None:
        self.path, self.build, self.lock = path, build, threading.Lock()

    def write(self, *_ignored: Any) -> None:
        with self.lock:
            write_json(self.path, self.build())


# ---------------------------------------------------------------- the command line


def add_device(parser: argparse.ArgumentParser, size: str | None = "real") -> None:
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                        help="cuda (default) times on the GPU; cpu runs the Triton interpreter and times nothing")
    parser.add_argument("--size", choices=["real", "small"], default=size,
                        help="the problems' real sizes or the small ones a CPU runs"
                             + (f" (default {size})" if size else " (default: real on cuda, small on cpu)"))


def add_trials(parser: argparse.ArgumentParser, **defaults: Any) -> None:
    """Trial counts and the per-candidate timeout; each default the Evaluator's unless given (correctness=, warmup=,
    timing=, timeout=; None leaves the script to choose by device)."""
    from kernelbench_rl.evaluation.result import EvalSettings

    d = EvalSettings()
    for flags, key, kind, own, what in ((("--correctness-trials", "--trials"), "correctness", int, d.correctness_trials,
                                         "correctness trials"),
                                        (("--warmup-trials",), "warmup", int, d.warmup_trials, "warm-up calls"),
                                        (("--timing-trials",), "timing", int, d.timing_trials, "timed calls"),
                                        (("--timeout",), "timeout", float, d.timeout_s, "seconds per candidate")):
        default = defaults.get(key, own)
        parser.add_argument(*flags, type=kind, default=default, help=f"{what} (default {default})")


def add_pool(parser: argparse.ArgumentParser) -> None:
    """The evaluation pool's knobs (each default: the Evaluator's own choice)."""
    parser.add_argument("--parallel-compiles", "--parallel", type=int, default=None, help="children compiling at once per worker")
    parser.add_argument("--in-flight", type=int, default=None, help="evaluations under way at once per worker")
    parser.add_argument("--warm-children", type=int, default=None, help="pre-started children per worker")
    parser.add_argument("--no-warmup", action="store_true", help="skip the pool's warm-up candidate (L1/20's solution, small)")
    parser.add_argument("--worker-logs", default=None, help="append the tail of our workers' logs to this file")


def run_main(run: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """`run(args)` with the clock started, the CPU on Triton's interpreter, and bad input as one line + exit 2."""
    args.script_start = time.perf_counter()
    if getattr(args, "device", None) == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    try:
        return run(args)
    except BadInput as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2


def require_cuda(device: str) -> None:
    if device != "cuda":
        return
    import torch

    if not torch.cuda.is_available():
        raise BadInput("--device cuda (the default) needs a GPU and torch sees none here; on a CPU pass "
                       "--device cpu --size small.")


def eval_settings(args: argparse.Namespace) -> Any:
    from kernelbench_rl.evaluation.result import EvalSettings

    size = args.size or ("real" if args.device == "cuda" else "small")
    return EvalSettings(device=args.device, size=size, correctness_trials=args.correctness_trials,
                        timing_trials=args.timing_trials, warmup_trials=args.warmup_trials, timeout_s=args.timeout)


def left_of(budget_s: float | None, args: argparse.Namespace) -> float | None:
    """What is left of a budget counted from the script's start (at least a second)."""
    return None if budget_s is None else max(1.0, budget_s - (time.perf_counter() - args.script_start))


# ---------------------------------------------------------------- problems and candidates


def parse_numbers(text: str, flag: str, example: str) -> list[int]:
    """Whole numbers of 1 or more separated by commas (levels, GPU counts), ascending, each once."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts or not all(p.isdigit() and int(p) >= 1 for p in parts):
        raise BadInput(f"{flag} takes numbers of 1 or more separated by commas (e.g. {example}), not {text!r}.")
    return sorted({int(p) for p in parts})


def parse_levels(text: str) -> list[int]:
    return parse_numbers(text, "--levels", "1,2,3")


def parse_problem_ids(text: str) -> list[str]:
    from kernelbench_rl.problems import make_problem_id, parse_problem_id

    ids = []
    for part in (p.strip() for p in text.split(",")):
        if part:
            try:
                ids.append(make_problem_id(*parse_problem_id(part)))
            except ValueError:
                raise BadInput(f"{part!r} is not a problem id of the form L<level>/<number>, e.g. L1/19.") from None
    if not ids:
        raise BadInput("--problems names no problem; give ids such as L1/19,L2/1.")
    return list(dict.fromkeys(ids))


def resolve_root(value: str | None, bundled: bool = False) -> Path:
    """A KernelBench checkout or kernrl's problems folder (absolute: fresh processes run elsewhere); without one,
    $KERNELBENCH_ROOT, else (with `bundled`) the bundled set, else bad input."""
    from kernelbench_rl.errors import UserError
    from kernelbench_rl.problems import BUNDLED_ROOT
    from kernelbench_rl.problems.loaders import resolve_kernelbench_root

    value = value or (os.environ.get("KBRL_PROBLEMS_ROOT") if bundled else None) or os.environ.get("KERNELBENCH_ROOT")
    if not value:
        if bundled:
            return BUNDLED_ROOT.resolve()
        raise BadInput("No KernelBench root: pass --kernelbench-root DIR (a KernelBench checkout) or set KERNELBENCH_ROOT.")
    try:
        root = resolve_kernelbench_root(value)
    except UserError as exc:
        raise BadInput(str(exc)) from None
    return (root or BUNDLED_ROOT).resolve()


def load_root_problems(root: Path, levels: list[int]) -> dict[str, Any]:
    from kernelbench_rl.errors import UserError
    from kernelbench_rl.problems import load_problems

    try:
        return {p.id: p for p in load_problems(str(root), levels)}
    except UserError as exc:
        raise BadInput(str(exc)) from None


def problems_by_id(root: Path, text: str) -> tuple[list[Any], dict[str, Any]]:
    """The problems named in `text`, in order, and every problem of their levels."""
    from kernelbench_rl.problems import parse_problem_id

    ids = parse_problem_ids(text)
    problems = load_root_problems(root, sorted({parse_problem_id(i)[0] for i in ids}))
    missing = [i for i in ids if i not in problems]
    if missing:
        raise BadInput(f"No problem {', '.join(missing)} in {root}; its ids run L<level>/<number> as in its file names.")
    return [problems[i] for i in ids], problems


def rename_model_class(source: str) -> str:
    """The reference's source as its own candidate: its class `Model` renamed `ModelNew` wherever the module names it,
    as the evaluator reads a candidate that defines `Model` (evaluation/static_policy/candidate_class.py: names inside
    strings and comments and attributes such as `x.Model` stay); a source that is not valid Python, defines no
    top-level class `Model` or defines `ModelNew` already is refused (ValueError)."""
    from kernelbench_rl.evaluation.static_policy.candidate_class import as_model_new, candidate_class_name

    try:
        found = candidate_class_name(ast.parse(source))
    except SyntaxError as exc:
        raise ValueError(f"the source is not valid Python (line {exc.lineno}: {exc.msg})") from None
    if found != "Model":
        raise ValueError("the source already defines ModelNew" if found else "the source defines no top-level class Model")
    return as_model_new(source)


@dataclasses.dataclass
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
        if (wanted is not None and problem_id not in wanted) or (wanted is None and parse_problem_id(problem_id)[0] not in levels):
            continue
        if problem_id not in problems:
            skipped.append({"problem_id": problem_id, "solution": path.name,
                            "reason": "no problem of this id in the KernelBench root"})
            continue
        problem = problems[problem_id]
        note = "" if path.stem == problem.name else f"solution file {path.name}, KernelBench's problem {problem.name}"
        found.append(SweepCandidate(f"{problem_id}/solution", problem_id, "solution", path.read_text(), problem.name, note))
    return found, skipped


# ---------------------------------------------------------------- the pool


def warmup_request(settings: Any) -> Any:
    from kernelbench_rl.evaluation.result import EvalRequest
    from kernelbench_rl.problems import get_problem, load_solution

    solution = load_solution(get_problem(WARMUP_PROBLEM))
    small = dataclasses.replace(settings, size="small", correctness_trials=1, timing_trials=1, warmup_trials=1)
    return EvalRequest(WARMUP_PROBLEM, solution, small, request_id="bench/warmup") if solution else None


def pool_info(evaluator: Any) -> list[dict[str, Any]]:
    """What each worker said when ready: transport, same-uid probe, IPC self-test."""
    try:
        return [{k: info.get(k) for k in ("transport", "same_uid", "same_uid_probe", "ipc_selftest", "hardware")}
                for info in evaluator.pool.wait_ready(5.0)]
    except Exception as exc:  # noqa: BLE001 - informative only
        return [{"error": f"{type(exc).__name__}: {exc}"[:200]}]


def save_worker_logs(evaluator: Any, path: str | None, tail_lines: int = 200, title: str = "") -> None:
    """Append the tail of every worker's stderr log (removed with the pool) to `path`, under `title` if given; a
    DaskEvaluator's come from the pool on each Dask worker, one tail per Dask worker."""
    pool = getattr(evaluator, "_pool", None)
    if not path or (pool is None and not hasattr(evaluator, "client")):
        return
    tails: dict[str, str] = {}
    if pool is None:
        from kernelbench_rl.evaluation.cluster.dask_worker import pool_log_tail

        try:
            tails = evaluator.client.run(pool_log_tail, evaluator.plugin.name, tail_lines, on_error="return")
        except Exception as exc:  # noqa: BLE001 - informative only
            tails = {"?": f"could not read the pools' logs: {exc}"}
    for log in sorted(Path(pool.log_dir).glob("*.log")) if pool is not None else []:
        with contextlib.suppress(OSError):
            lines = log.read_text(errors="replace").splitlines()[-tail_lines:]
            tails[f"{log} (last {len(lines)} lines)"] = "\n".join(lines)
    with open(path, "a") as out:
        out.write((f"#### {title}\n" if title else "") + "".join(f"==== {name}\n{text}\n" for name, text in tails.items()))


def evaluate_within(evaluator: Any, requests: list[Any], budget_s: float | None,
                    on_result: Callable[[int, Any, float], None]) -> dict[str, Any]:
    """One `evaluate` call for all of `requests` (as a training step's batch arrives), waited for at most `budget_s`;
    `on_result(index, result, seconds since the call)` as each finishes. What is unfinished at the cut is left to the
    pool. Returns the wall, the indices finished, whether the budget cut it, and the error that stopped it, if any."""
    done: set[int] = set()
    failure: list[BaseException] = []
    t0 = time.perf_counter()

    def collect(index: int, result: Any) -> None:
        done.add(index)
        on_result(index, result, time.perf_counter() - t0)

    def evaluate_all() -> None:
        try:
            evaluator.evaluate(requests, on_result=collect)
        except BaseException as exc:  # noqa: BLE001 - reported; the pool closing early lands here too
            failure.append(exc)

    runner = threading.Thread(target=evaluate_all, daemon=True, name="bench-evaluate")
    runner.start()
    runner.join(budget_s)
    return {"wall_s": time.perf_counter() - t0, "done": done, "budget_cut": runner.is_alive(),
            "error": f"{type(failure[0]).__name__}: {failure[0]}"[:300] if failure else None}


def progress_line(r: dict[str, Any], count: int) -> None:
    timing = "" if r["speedup"] is None else f" speedup {r['speedup']:5.2f} runtime {r['runtime_ms']:.3f} ms"
    message = f"  {r['message'][:90]}" if not r["correct"] and r["message"] else ""
    say(f"ours  [{count:4d}] {r['label']:22s} {r['category']:9s} correct={str(r['correct']):5s}{timing} "
        f"at {r['finished_at_s']:.1f} s{message}")


class Pool:
    """A fresh Evaluator, started and warmed (on a GPU, L1/20's solution at small size) before any clock; the
    pool's start-up (`startup_s`) and its workers' ready info (`info`) are reported apart from every wall. Then one
    `evaluate` call per group of candidates (`run_group`), each with its own wall; `records` holds one dict per
    finished candidate, `on_record` hears of each."""

    def __init__(self, args: argparse.Namespace, settings: Any, warm: bool | None = None,
                 on_record: Callable[[dict[str, Any]], None] = lambda _r: None, **evaluator_kwargs: Any) -> None:
        self.args, self.settings, self.kwargs, self.on_record = args, settings, evaluator_kwargs, on_record
        self.warm = settings.device == "cuda" if warm is None else warm
        self.evaluator: Any = None
        self.startup_s: float | None = None
        self.info: list[dict[str, Any]] = []
        self.records: list[dict[str, Any]] = []
        self.groups: list[dict[str, Any]] = []

    def start(self) -> Any:
        from kernelbench_rl.evaluation import Evaluator

        t0 = time.perf_counter()
        knobs = {name: getattr(self.args, name) for name in ("parallel_compiles", "in_flight", "warm_children")
                 if getattr(self.args, name, None) is not None}
        self.evaluator = Evaluator(self.settings, store=None, **knobs, **self.kwargs)
        self.evaluator.start()
        warm = warmup_request(self.settings) if self.warm and not getattr(self.args, "no_warmup", False) else None
        if warm is not None:
            result = self.evaluator.evaluate([warm])[0]
            say(f"ours  warm-up: {result.error_category.value} correct={result.correct} (L1/20 solution, small) "
                f"transport={result.versions.get('transport')} sandbox={result.versions.get('sandbox')}")
        self.startup_s = time.perf_counter() - t0
        self.info = pool_info(self.evaluator)
        say(f"ours  pool ready in {self.startup_s:.1f} s (not in any wall): {self.info}")
        return self.evaluator

    def record(self, cand: Any, res: Any, at: float) -> dict[str, Any]:
        """What `records` keeps of a finished candidate (`at`: seconds since its group's evaluate call)."""
        return {"label": cand.label, "problem_id": cand.problem_id, **verdict_record(res, self.settings, at)}

    def run_group(self, name: str, candidates: list[Any], budget_s: float | None) -> dict[str, Any]:
        """`candidates` (each with a label, a problem_id and a source) in one `evaluate` call, waited for at most
        `budget_s`; the record of each one finished joins `records`. The group's figures (in `groups` too): its wall,
        whether the budget cut it, what did not finish, the error that stopped it."""
        from kernelbench_rl.evaluation.result import EvalRequest

        requests = [EvalRequest(c.problem_id, c.source, self.settings, request_id=f"bench/{c.label}") for c in candidates]
        group: dict[str, Any] = {"name": name, "planned": len(candidates), "finished": 0, "wall_s": None,
                                 "budget_s": budget_s, "budget_cut": False, "not_finished": []}
        self.groups.append(group)

        def collect(index: int, result: Any, at: float) -> None:
            self.records.append(self.record(candidates[index], result, at))
            group["finished"] += 1
            group["wall_s"] = round(at, 2)
            progress_line(self.records[-1], len(self.records))
            self.on_record(self.records[-1])

        ran = evaluate_within(self.evaluator, requests, budget_s, collect)
        group["wall_s"] = round(ran["wall_s"], 2)
        if ran["budget_cut"]:
            group["budget_cut"] = True
            group["not_finished"] = [c.label for i, c in enumerate(candidates) if i not in ran["done"]]
            say(f"ours  {name}: budget of {budget_s:.0f} s spent with {len(ran['done'])} of {len(candidates)} finished; "
                f"the rest are not waited for")
        elif ran["error"]:
            group["error"] = ran["error"]
            say(f"ours  {name}: the evaluation stopped: {group['error']}")
        return group

    def close(self) -> None:
        if self.evaluator is not None:
            save_worker_logs(self.evaluator, getattr(self.args, "worker_logs", None))
            self.evaluator.close()
            self.evaluator = None


# ---------------------------------------------------------------- a fresh process


def proc_stat(pid: int | str) -> list[str] | None:
    """/proc/<pid>/stat after the command name (state, ppid, pgrp, session, ...); None once the pid is gone."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def run_child(argv: list[str], env: dict[str, str], cwd: str, timeout_s: float,
              result_prefix: str) -> tuple[dict[str, Any] | None, float, str, bool]:
    """A fresh Python process (its own session, killed whole at the timeout); returns (the JSON of its last stdout line
    starting with `result_prefix`, wall seconds start to exit, its exit code and last stderr line, timed out)."""
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
    return found, wall, f"exit code {proc.returncode}" + (f", {lines[-1][:300]}" if lines else ""), timed_out
