"""Options and checks of command-line values shared by several commands (and the flows that take the same parameters)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from kernelbench_rl.errors import UserError


def check_max_problems(value: int | None, option: str = "--max-problems") -> None:
    """A limit on the problems evaluated is a count of at least 1 (None: no limit).

    0 or less is a mistake, never "all": a list sliced by it would give every problem (0) or drop some (-1)."""
    if value is not None and value < 1:
        raise UserError(f"{option} must be at least 1 (a number of problems), not {value}.")


ProblemsRootOption = Annotated[
    Optional[Path],
    typer.Option(
        "--problems-root", "--kernelbench-root",
        help="Where problems come from: a KernelBench checkout (its root or its KernelBench/ folder) or kernrl's "
        "problems folder (or the kernrl folder holding problems/); defaults to $KBRL_PROBLEMS_ROOT, then "
        "$KERNELBENCH_ROOT, else the bundled set. --kernelbench-root is its older name.",
        show_default=False,
    ),
]
