"""`kernelbench-rl export`: a run's (or a filter's) rollouts as a Hugging Face dataset folder or parquet files."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from kernelbench_rl.commands.options import ProblemsRootOption
from kernelbench_rl.errors import UserError


def export_command(
    out: Annotated[Path, typer.Option("--out", "-o", help="The folder to write (README.md, the dataset card, included).")],
    run_id: Annotated[Optional[list[str]], typer.Option("--run-id", help="Only this run's rollouts (repeatable; default: every run).")] = None,
    problem: Annotated[Optional[list[str]], typer.Option("--problem", help="Only this problem, any id form (repeatable).")] = None,
    level: Annotated[Optional[list[int]], typer.Option("--level", help="Only this level (repeatable).")] = None,
    suite: Annotated[Optional[str], typer.Option("--suite", help="Only this suite: kernelbench or kernrl.")] = None,
    stage: Annotated[Optional[str], typer.Option("--stage", help="Only rollouts scored under this stage or preset.")] = None,
    correct_only: Annotated[bool, typer.Option("--correct-only", help="Only turns whose kernel was judged correct.")] = False,
    include_holdout: Annotated[bool, typer.Option("--include-holdout", help="Also holdout problems (left out by default, so "
                                                  "evaluation problems never leak into others' training).")] = False,
    fmt: Annotated[str, typer.Option("--format", help="datasets (a save_to_disk folder: datasets.load_from_disk) or parquet "
                                     "(the hub's layout: datasets.load_dataset).")] = "datasets",
    limit: Annotated[Optional[int], typer.Option("--limit", help="At most this many rows.")] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace --out if it exists.")] = False,
    db: Annotated[Optional[Path], typer.Option("--db", help="The DuckDB file; defaults to $KBRL_DB, else runs/kernelbench_rl.duckdb.",
                                               show_default=False)] = None,
    problems_root: ProblemsRootOption = None,
) -> None:
    """Write rollouts (prompt, completion, kernel, verdict, reward, speedup, problem and suite, hardware, versions) as a
    dataset with its card; `corpus ingest --source trajectories --path OUT` reads it back for `sft`."""
    from kernelbench_rl.store import Store
    from kernelbench_rl.trajectories import FORMATS, TrajectoryFilter, prepare_output, trajectory_rows, write_dataset
    from kernelbench_rl.writable import check_writable_folder

    if fmt not in FORMATS:
        raise UserError(f"--format must be one of {', '.join(FORMATS)}, not {fmt!r}.")
    if suite is not None and suite not in ("kernelbench", "kernrl"):
        raise UserError(f"--suite must be kernelbench or kernrl, not {suite!r}.")
    if limit is not None and limit < 1:
        raise UserError(f"--limit must be at least 1, not {limit}.")
    wanted = TrajectoryFilter(run_ids=list(run_id or []), problems=list(problem or []), levels=list(level or []),
                              suite=suite, stage=stage, correct_only=correct_only, include_holdout=include_holdout,
                              limit=limit)
    check_writable_folder(out, "the export folder")  # before the rows are read: a read-only --out is one sentence
    store = Store(db)
    root = str(problems_root) if problems_root is not None else None
    export = trajectory_rows(store, wanted, problems_root=root)
    if not export.rows:
        left = ", ".join(f"{reason} {n}" for reason, n in sorted(export.left_out.items()))
        raise UserError(f"No rollouts in {store.path} match ({wanted.describe()}" + (f"; left out: {left}" if left else "")
                        + "); nothing was written.")
    prepare_output(out, overwrite)
    write_dataset(export, out, fmt, source=str(store.path), wanted=wanted)  # type: ignore[arg-type]
    correct = sum(1 for row in export.rows if row["correct"])
    left = ", ".join(f"{reason} {n}" for reason, n in sorted(export.left_out.items())) or "nothing"
    typer.echo(f"wrote {len(export.rows)} rows ({correct} correct) to {out} as {fmt}, with README.md; left out: {left}")


def register(app: typer.Typer) -> None:
    """Add this area's commands to the top-level app."""
    app.command("export")(export_command)
