"""`kernelbench-rl profile`: one kernel on a GPU, with the kernels of one forward and the speed-of-light line."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from kernelbench_rl.commands.evaluate import BackendOption, PrecisionOption, RootOption, _settings, read_candidate
from kernelbench_rl.errors import UserError


def profile_command(
    problem_id: Annotated[str, typer.Option("--problem", "-p", help="Problem id, e.g. L1/19.")],
    kernel: Annotated[Path, typer.Option("--kernel", "-k", help="The kernel file (a module defining ModelNew).")],
    backend: BackendOption = "triton",
    precision: PrecisionOption = "fp32",
    problems_root: RootOption = None,
    timeout_s: Annotated[float, typer.Option("--timeout", help="Seconds the candidate may take.")] = 300.0,
    show: Annotated[int, typer.Option("--rows", help="Kernels to list (by GPU time).")] = 12,
) -> None:
    """Judge a kernel on this machine's GPU at the problem's real size and print where its GPU time goes: every
    kernel of one profiled forward with its launches, time and share (yours marked), the share of GPU time in
    your own kernels, and the speed of light: the problem's physical floor on this GPU and how close the kernel
    and PyTorch's reference came to it. Needs a CUDA GPU."""
    from kernelbench_rl.evaluation.source import kernels
    from kernelbench_rl.evaluation.front.api import Evaluator
    from kernelbench_rl.evaluation.result import EvalRequest
    from kernelbench_rl.problems import get_problem

    import torch

    if not torch.cuda.is_available():
        raise UserError("profile times a kernel on a GPU, and no CUDA GPU is visible here; `kernelbench-rl eval "
                        "--device cpu` judges correctness on the CPU.")
    settings = _settings("cuda", backend, precision, timeout_s, "real")
    problem = get_problem(problem_id, problems_root)
    if not kernel.is_file():
        raise UserError(f"No kernel file at {kernel}.")
    source, why_not = read_candidate(kernel)
    if why_not:
        raise UserError(why_not)
    with Evaluator(settings, problems_root=str(problems_root) if problems_root else None,
                   problems={problem.id: problem}) as evaluator:
        (result,) = evaluator.evaluate([EvalRequest(problem.id, source, settings)])
    console = Console()
    verdict = "correct" if result.correct else f"{result.error_category.value}: {result.error_message[:200]}"
    console.print(f"{problem.id} {problem.name} on {result.hardware}: {verdict}")
    if result.runtime_ms:
        console.print(f"  {result.runtime_ms:.4g} ms (reference {result.baseline_ms:.4g} ms, speedup {result.speedup:.3g}x)"
                      + (f", flags: {', '.join(result.flags)}" if result.flags else ""))
    rows = result.profile or []
    if rows:
        own = kernels.own_kernel_names(source, backend)
        total = sum(float(r[2]) for r in rows) or 1.0
        table = Table(title="one profiled forward")
        for column in ("kernel", "yours", "launches", "ms", "share"):
            table.add_column(column, overflow="fold")
        for name, launches, us in rows[:show]:
            table.add_row(name, "yes" if kernels.is_own_kernel(name, own) else "", str(launches), f"{us / 1000:.4f}",
                          f"{us / total:.1%}")
        console.print(table)
        share = f"{result.kernel_share:.1%}" if result.kernel_share is not None else "?"
        console.print(f"  {sum(int(r[1]) for r in rows)} launches per forward; {share} of GPU time in your own kernels")
    elif result.versions.get("profile_error"):
        console.print(f"  no profile: {result.versions['profile_error']}")
    text = kernels.profile_text([], result.speed_of_light)
    if text:
        sol = result.speed_of_light or {}
        console.print(f"  {text}; the reference reached {sol.get('reference_sol_fraction') or 0:.2f}")
        console.print(f"  achieved {(sol.get('achieved_bytes_per_s') or 0) / 1e9:.0f} GB/s and "
                      f"{(sol.get('achieved_flops_per_s') or 0) / 1e12:.1f} TFLOP/s")
    elif result.versions.get("speed_of_light"):
        console.print(f"  {result.versions['speed_of_light']}")
    if not result.correct:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("profile")(profile_command)
