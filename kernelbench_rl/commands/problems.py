"""`kernelbench-rl problems list|show`: browse the bundled set or an external KernelBench checkout."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from kernelbench_rl.problems import get_problem, holdout_ids, load_problems, load_solution

problems_app = typer.Typer(help="Browse problems: the bundled set, or a KernelBench checkout.", no_args_is_help=True)

RootOption = Annotated[
    Optional[Path],
    typer.Option(
        "--kernelbench-root",
        help="A KernelBench checkout (its root or its KernelBench/ folder); defaults to $KERNELBENCH_ROOT, "
        "else the bundled set.",
        show_default=False,
    ),
]


def _warn(message: str) -> None:
    Console(stderr=True).print(f"[yellow]note:[/yellow] {message}")


@problems_app.command("list")
def list_problems(
    level: Annotated[Optional[int], typer.Option("--level", "-l", help="Only this level (1, 2 or 3).")] = None,
    kernelbench_root: RootOption = None,
    holdout_fraction: Annotated[float, typer.Option(help="Fraction held out for evaluation.")] = 0.2,
    split_seed: Annotated[int, typer.Option(help="Seed of the train/holdout split.")] = 0,
    ids_only: Annotated[bool, typer.Option("--ids", help="Print only the ids, one per line.")] = False,
) -> None:
    """List problems with their level, name and train/holdout split, then counts per level."""
    levels = [level] if level is not None else None
    problems = load_problems(kernelbench_root, levels=levels, warn=_warn)
    if ids_only:
        for problem in problems:
            typer.echo(problem.id)
        return
    held = holdout_ids(problems, holdout_fraction, split_seed)
    table = Table(title=f"{len(problems)} problems ({problems[0].origin if problems else 'none'})")
    for column in ("id", "name", "split", "solution"):
        table.add_column(column)
    for problem in problems:
        has_solution = problem.origin == "bundled" and load_solution(problem) is not None
        table.add_row(problem.id, problem.name, "holdout" if problem.id in held else "train", "yes" if has_solution else "")
    console = Console()
    console.print(table)
    counts = Counter(p.level for p in problems)
    console.print("  ".join(f"level {lv}: {n}" for lv, n in sorted(counts.items())) + f"  total: {len(problems)}")


@problems_app.command("show")
def show_problem(
    problem_id: Annotated[str, typer.Argument(help="Problem id, e.g. L1/19.")],
    kernelbench_root: RootOption = None,
    small: Annotated[bool, typer.Option("--small", help="Show the source at its small (CPU) sizes.")] = False,
    solution: Annotated[bool, typer.Option("--solution", help="Also show our known-correct solution.")] = False,
) -> None:
    """Print a problem's source (and optionally our solution), verbatim: `> x.py` gives a Python file."""
    problem = get_problem(problem_id, kernelbench_root)
    # Code goes out as it is, whatever the terminal (rich would cut lines at its width when piped);
    # what is not code is a comment, so the output is Python as a whole.
    typer.echo(f"# {problem.id} {problem.name}  ({problem.origin}: {problem.path or '-'})")
    if problem.small_sizes:
        typer.echo(f"# small sizes: {problem.small_sizes}")
    typer.echo(problem.source_for("small" if small else "real").rstrip("\n"))
    if solution:
        text = load_solution(problem) if problem.origin == "bundled" else None
        if text is None:
            typer.echo("# no bundled solution for this problem")
        else:
            typer.echo(f"\n# --- our known-correct solution (ModelNew) for {problem.id} ---")
            typer.echo(text.rstrip("\n"))


def register(app: typer.Typer) -> None:
    app.add_typer(problems_app, name="problems")
