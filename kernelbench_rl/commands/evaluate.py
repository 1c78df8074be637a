"""`kernelbench-rl eval` (one kernel file) and `kernelbench-rl eval-dir` (KernelBench-named generations)."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from contextlib import nullcontext
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from kernelbench_rl.commands.options import ProblemsRootOption
from kernelbench_rl.errors import UserError
from kernelbench_rl.evaluation.result import ErrorCategory, EvalRequest, EvalResult, EvalSettings

# `eval`'s exit codes (README, "The evaluator"): scripts can tell a wrong kernel from a usage mistake.
EXIT_CORRECT = 0
EXIT_NOT_CORRECT = 1  # judged: format, static, compile, runtime, timeout, crash, mismatch, shape or dtype
EXIT_USAGE = 2  # bad arguments, unknown problem, missing file (UserError)
EXIT_NO_VERDICT = 4  # no verdict on the kernel: our infrastructure failed, or the problem is too large here

_GENERATION_RE = re.compile(r"^level_(\d+)_problem_(\d+)_sample_(\d+)_kernel\.py$")
_KERNRL_GENERATION_RE = re.compile(r"^(L(\d+)_.+)_sample_(\d+)_kernel\.py$")


def _number_in(kernrl_id: str) -> int | str:
    """The problem number of a kernrl id (L1_23_Softmax -> 23), else the id itself (a prefix without one)."""
    parts = kernrl_id.split("_")
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else kernrl_id

DeviceOption = Annotated[str, typer.Option("--device", help="cpu (Triton interpreter, correctness only) or cuda.")]
BackendOption = Annotated[str, typer.Option("--backend", help="triton or cuda.")]
PrecisionOption = Annotated[str, typer.Option("--precision", help="fp32, fp16 or bf16.")]
DbOption = Annotated[Optional[Path], typer.Option("--db", help="DuckDB file for the verdict cache (default: none for eval).")]
ClusterOption = Annotated[str, typer.Option("--cluster", help=(
    "Where kernels run: local (this machine's pool), dask-local (a Dask cluster started here: one worker per GPU) "
    "or dask://HOST:PORT (an existing Dask scheduler)."))]
RootOption = ProblemsRootOption


def _settings(device: str, backend: str, precision: str, timeout_s: float, size: str | None,
              cluster: str = "local") -> EvalSettings:
    if device not in ("cpu", "cuda"):
        raise UserError(f"--device must be cpu or cuda, not {device!r}.")
    if backend not in ("triton", "cuda"):
        raise UserError(f"--backend must be triton or cuda, not {backend!r}.")
    if precision not in ("fp32", "fp16", "bf16"):
        raise UserError(f"--precision must be fp32, fp16 or bf16, not {precision!r}.")
    if not timeout_s > 0:
        raise UserError(f"--timeout must be a positive number of seconds, not {timeout_s:g}.")
    if size not in (None, "small", "real"):
        raise UserError(f"--size must be small or real, not {size!r}.")
    require_visible_gpu(device, cluster, "--device cuda", "--device cpu")
    chosen = size or ("small" if device == "cpu" else "real")
    return EvalSettings(backend=backend, precision=precision, device=device, size=chosen, timeout_s=timeout_s)  # type: ignore[arg-type]


def require_visible_gpu(device: str, cluster: str, asked: str = "eval.device=cuda", instead: str = "eval.device=cpu") -> None:
    """Evaluating on CUDA where no GPU is visible is refused at start, in one sentence: every sample would come back
    without a verdict. A Dask cluster's GPUs are not this machine's to see."""
    from kernelbench_rl.evaluation.cluster.cluster_spec import parse_cluster

    if device != "cuda" or parse_cluster(cluster).kind == "dask":
        return
    try:
        import torch

        available = torch.cuda.is_available()
    except Exception:  # noqa: BLE001
        available = False
    if not available:
        raise UserError(f"{asked} needs a CUDA GPU, and none is visible; use {instead}.")


def require_config_gpu(config) -> None:
    """`require_visible_gpu` for a run's configuration (`eval.device`; auto picks the CPU where no GPU is seen)."""
    require_visible_gpu(config.eval.device, config.eval.cluster)


def _evaluator(settings: EvalSettings, cluster: str, **kwargs):
    """The local pool, or the Dask-backed evaluator (same interface) when --cluster names one."""
    from kernelbench_rl.evaluation.cluster.cluster_spec import parse_cluster

    if not parse_cluster(cluster).is_dask:
        from kernelbench_rl.evaluation.front.api import Evaluator

        return Evaluator(settings, **kwargs)
    from kernelbench_rl.evaluation.cluster.cluster import make_evaluator

    return make_evaluator(settings, cluster=cluster, **kwargs)


def read_candidate(path: Path) -> tuple[str, str | None]:
    """The file's text, and why it cannot be a candidate (None when it can): a kernel is UTF-8 Python source."""
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        # Keep a text stand-in (its sha256 names this file's contents) for the record.
        return raw.decode("utf-8", errors="replace"), (
            f"{path.name} is not UTF-8 text (byte {exc.start}: {raw[exc.start:exc.start + 1]!r}), so it is no Python source")


def exit_code_for(result: EvalResult) -> int:
    if result.correct:
        return EXIT_CORRECT
    return EXIT_NO_VERDICT if result.error_category.is_ours else EXIT_NOT_CORRECT


def _store(db: Path | None):
    if db is None:
        return None
    from kernelbench_rl.store import Store

    return Store(db)


def _summary(result: EvalResult, console: Console) -> None:
    verdict = "[green]correct[/green]" if result.correct else f"[red]{result.error_category.value}[/red]"
    table = Table(show_header=False, box=None)
    table.add_row("problem", result.problem_id)
    table.add_row("verdict", verdict + (" (cached)" if result.cached else ""))
    table.add_row("compiled", str(result.compiled))
    table.add_row("trials", f"{result.trials_passed}/{result.trials_total}")
    if result.max_abs_err is not None:
        table.add_row("max abs error", f"{result.max_abs_err:.3g}")
    if result.runtime_ms is not None:
        table.add_row("runtime", f"{result.runtime_ms:.4f} ms (IQR {result.runtime_spread_ms or 0:.4f})")
    if result.baseline_ms is not None:
        table.add_row("baseline (eager)", f"{result.baseline_ms:.4f} ms")
    if result.speedup is not None:
        table.add_row("speedup", f"{result.speedup:.2f}x" + ("" if result.speedup_counts else " (does not count)"))
    if result.flags:
        table.add_row("flags", ", ".join(result.flags))
    if result.error_message:
        table.add_row("message", result.error_message)
    if result.static.warnings:
        table.add_row("static warnings", "; ".join(result.static.warnings))
    table.add_row("phases (s)", ", ".join(f"{k}={v:.3f}" for k, v in result.phase_seconds.items()))
    console.print(table)


def eval_command(
    problem: Annotated[str, typer.Option("--problem", "-p", help="Problem id, e.g. L1/19.")],
    kernel: Annotated[Path, typer.Option("--kernel", "-k", help="Python file defining ModelNew.")],
    device: DeviceOption = "cpu",
    backend: BackendOption = "triton",
    precision: PrecisionOption = "fp32",
    as_json: Annotated[bool, typer.Option("--json", help="Print exactly one EvalResult JSON object.")] = False,
    db: DbOption = None,
    problems_root: RootOption = None,
    timeout_s: Annotated[float, typer.Option("--timeout", help="Seconds a phase may take before it is killed.")] = 120.0,
    size: Annotated[Optional[str], typer.Option("--size", help="small or real (default: small on cpu, real on cuda).")] = None,
    cluster: ClusterOption = "local",
) -> None:
    """Evaluate one kernel file against a problem: compile, correctness and (on a GPU) speed.

    A kernel without a verdict (infrastructure, too large, inputs that cannot discriminate, unsupported by the CPU
    interpreter) is never called wrong: it has an exit code of its own (below).
    """
    if not kernel.is_file():
        raise UserError(f"No kernel file {kernel} exists; pass the path of a Python file that defines ModelNew.")
    from kernelbench_rl.problems import get_problem

    settings = _settings(device, backend, precision, timeout_s, size, cluster)
    root = str(problems_root) if problems_root else None
    get_problem(problem, root)  # unknown ids fail here, before any worker starts
    source, unreadable = read_candidate(kernel)
    console = Console(stderr=as_json)
    if unreadable:  # a verdict of its own, without starting a worker
        result = EvalResult.failure(EvalRequest(problem, source, settings), ErrorCategory.FORMAT, unreadable)
    else:
        # --json keeps stdout for the one result object: no spinner.
        progress = nullcontext() if as_json else console.status(f"evaluating {kernel.name} on {problem} ({device})")
        with _evaluator(settings, cluster, store=_store(db), problems_root=root) as ev, progress:
            result = ev.evaluate([EvalRequest(problem, source, settings)])[0]
    if as_json:
        typer.echo(result.to_json())
    else:
        _summary(result, console)
    raise typer.Exit(exit_code_for(result))


def eval_dir_command(
    directory: Annotated[Path, typer.Argument(help="Folder of level_{L}_problem_{P}_sample_{S}_kernel.py files (or "
                                                   "{kernrl id}_sample_{S}_kernel.py, e.g. L1_23_Softmax_sample_0_kernel.py).")],
    level: Annotated[int, typer.Option("--level", "-l", help="Only generations of this level.")],
    device: DeviceOption = "cpu",
    backend: BackendOption = "triton",
    precision: PrecisionOption = "fp32",
    db: Annotated[Optional[Path], typer.Option("--db", help="DuckDB file (default: runs/kernelbench_rl.duckdb).")] = None,
    out: Annotated[Optional[Path], typer.Option("--out", help="eval_results.json path (default: DIR/eval_results.json).")] = None,
    problems_root: RootOption = None,
    timeout_s: Annotated[float, typer.Option("--timeout", help="Seconds a phase may take before it is killed.")] = 120.0,
    batch: Annotated[int, typer.Option("--batch", help=(
        "Kernels sent to the workers at once; verdicts reach DuckDB after each batch. A batch runs as fast "
        "as the pool allows and finishes with its slowest kernel (a hang waits out --timeout)."))] = 64,
    cluster: ClusterOption = "local",
) -> None:
    """Evaluate KernelBench-named generations; write verdicts to DuckDB and a KernelBench-style eval_results.json."""
    if not directory.is_dir():
        raise UserError(f"No directory {directory} exists; pass the folder that holds the generated kernels.")
    files = []
    for path in sorted(directory.iterdir()):
        match = _GENERATION_RE.match(path.name)
        if match and int(match.group(1)) == level:
            files.append((f"L{level}/{int(match.group(2))}", int(match.group(2)), int(match.group(3)), path))
            continue
        # kernrl's ids name a file too: L1_23_Softmax_sample_0_kernel.py, or a unique prefix (L1_23_sample_0_...).
        match = _KERNRL_GENERATION_RE.match(path.name)
        if match and int(match.group(2)) == level:
            files.append((match.group(1), _number_in(match.group(1)), int(match.group(3)), path))
    if not files:
        raise UserError(f"{directory} has no files named level_{level}_problem_<P>_sample_<S>_kernel.py "
                        f"(or L{level}_<kernrl name>_sample_<S>_kernel.py).")
    if batch < 1:
        raise UserError(f"--batch must be at least 1, not {batch}.")
    from kernelbench_rl.problems import get_problem
    from kernelbench_rl.store import Store

    settings = _settings(device, backend, precision, timeout_s, None, cluster)
    root = str(problems_root) if problems_root else None
    store = Store(db) if db else Store()
    # Files that cannot be evaluated get a verdict of their own and the rest go on.
    verdicts: dict[Path, EvalResult] = {}
    runnable = []
    known: dict[str, str | None] = {}
    for pid, number, sample, path in files:
        source, unreadable = read_candidate(path)
        request = EvalRequest(pid, source, settings, request_id=path.name)
        if pid not in known:
            try:
                get_problem(pid, root)  # kernrl's form resolves too (the verdict is filed under our id)
                known[pid] = None
            except UserError as exc:
                known[pid] = str(exc)
        if known[pid] is not None:
            verdicts[path] = EvalResult.failure(request, ErrorCategory.UNKNOWN_PROBLEM, known[pid] or "")
        elif unreadable:
            verdicts[path] = EvalResult.failure(request, ErrorCategory.FORMAT, unreadable)
        else:
            runnable.append((request, path))
    formats = [r for r in verdicts.values() if r.error_category is ErrorCategory.FORMAT]
    if formats:
        store.record_evaluations(formats)
    console = Console()
    if runnable:
        with _evaluator(settings, cluster, store=store, problems_root=root) as ev:
            with Progress(TextColumn("[bold]eval"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console) as bar:
                task = bar.add_task("eval", total=len(runnable))
                for start in range(0, len(runnable), batch):
                    chunk = runnable[start: start + batch]
                    judged = ev.evaluate([request for request, _ in chunk], on_result=lambda _i, _r: bar.advance(task))
                    verdicts.update({path: result for (_, path), result in zip(chunk, judged)})
            from kernelbench_rl.evaluation.front.api import Evaluator

            if isinstance(ev, Evaluator):  # every verdict is in: the workers' teardown need not hold the command up
                ev.close(wait=False)
    results: dict[str, list[dict]] = defaultdict(list)
    for pid, number, sample, path in files:
        results[str(number)].append(_kernelbench_entry(sample, verdicts[path]))
    target = out or directory / "eval_results.json"
    # By problem number; a kernrl name that named no problem (so no number) after them.
    by_number = sorted(results.items(), key=lambda kv: (not kv[0].isdigit(), int(kv[0]) if kv[0].isdigit() else 0, kv[0]))
    ordered = {k: sorted(v, key=lambda e: e["sample_id"]) for k, v in by_number}
    target.write_text(json.dumps(ordered, indent=2))
    correct = sum(e["correctness"] for v in ordered.values() for e in v)
    console.print(f"{correct}/{len(files)} correct; wrote {target}")
    failed = [(path, verdicts[path]) for _, _, _, path in files if not verdicts[path].correct]
    for path, result in failed[:FAILED_FILES_SHOWN]:
        console.print(f"  {path.name}: {result.error_category.value}: {_first_line(result.error_message)}",
                      markup=False, highlight=False)
    if len(failed) > FAILED_FILES_SHOWN:
        console.print(f"  ... and {len(failed) - FAILED_FILES_SHOWN} more not correct (see {target})", markup=False)


FAILED_FILES_SHOWN = 20


def _first_line(text: str, width: int = 160) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line if len(line) <= width else line[: width - 3] + "..."


def _kernelbench_entry(sample: int, result: EvalResult) -> dict:
    """KernelBench's eval_results.json entry: runtime is the mean in its harness; ours is the median."""
    metadata = {
        "hardware": result.hardware, "device": result.device_kind, "error_category": result.error_category.value,
        "flags": result.flags, "max_abs_err": result.max_abs_err, "speedup": result.speedup,
        "baseline_ms": result.baseline_ms, "correctness_trials": f"({result.trials_passed} / {result.trials_total})",
    }
    if result.speed_of_light:  # GPU: the problem's floor and the share of it reached (evaluation/timing/floor.py)
        sol = result.speed_of_light
        metadata.update(sol_fraction=sol.get("sol_fraction"), reference_sol_fraction=sol.get("reference_sol_fraction"),
                        floor_ms=sol.get("floor_ms"), bound=sol.get("bound"))
    if result.error_message:
        metadata["error"] = result.error_message
    stats = {}
    if result.runtime_ms is not None:
        stats = {"median": result.runtime_ms, "iqr": result.runtime_spread_ms, "num_trials": None}
    return {
        "sample_id": sample, "compiled": bool(result.compiled), "correctness": bool(result.correct),
        "metadata": metadata, "runtime": result.runtime_ms if result.runtime_ms is not None else -1.0,
        "runtime_stats": stats,
    }


def register(app: typer.Typer) -> None:
    """Add this area's commands to the top-level app."""
    app.command("eval")(eval_command)
    app.command("eval-dir")(eval_dir_command)
