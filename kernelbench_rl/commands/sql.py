"""`kernelbench-rl sql "SELECT ..."`: ask the run database anything, read-only, even during a run."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Annotated, Optional

import duckdb
import typer

from kernelbench_rl.errors import UserError
from kernelbench_rl.store import Store, default_db_path

# Columns this wide or more are cut in the table view (CSV and JSON give everything).
TABLE_STRING_WIDTH = 60


def _one_sentence(exc: Exception) -> str:
    """DuckDB's message without its LINE/caret block, on one line."""
    paragraph = str(exc).strip().split("\n\n")[0]
    lines = [line.strip() for line in paragraph.splitlines() if line.strip() and not line.startswith("LINE ")]
    text = " ".join(lines)
    text = re.sub(r"[!.]\s+Did you mean", "; did you mean", text).rstrip("!. ")
    return text if text.endswith("?") else text + "."


def _flatten_nested(frame):
    """CSV cannot hold lists or structs: write them as JSON text."""
    import polars as pl

    nested = [name for name, dtype in frame.schema.items() if dtype.is_nested()]
    return frame.with_columns(
        pl.Series(name, [None if v is None else json.dumps(_plain(v)) for v in frame[name].to_list()], dtype=pl.String)
        for name in nested
    )


def _plain(value):
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def sql(
    query: Annotated[str, typer.Argument(help='The SQL to run, e.g. "SELECT * FROM train_steps ORDER BY step".')],
    db: Annotated[
        Optional[Path],
        typer.Option("--db", help="The DuckDB file; defaults to $KBRL_DB, else runs/kernelbench_rl.duckdb.", show_default=False),
    ] = None,
    as_csv: Annotated[bool, typer.Option("--csv", help="Print CSV instead of a table.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list of objects instead of a table.")] = False,
    max_rows: Annotated[int, typer.Option("--max-rows", help="Rows shown in the table view.")] = 100,
    busy_timeout: Annotated[
        float, typer.Option("--busy-timeout", help="Seconds to keep retrying while another process writes.")
    ] = 30.0,
) -> None:
    """Run read-only SQL against the run database and print the result (a table, CSV or JSON)."""
    import polars as pl

    if as_csv and as_json:
        raise UserError("Choose one of --csv and --json, not both.")
    path = db if db is not None else default_db_path()
    if not query.strip():
        raise UserError('The query is empty; pass one, e.g. kernelbench-rl sql "SELECT * FROM train_steps".')
    if not path.is_file():
        raise UserError(f"There is no database at {path}; pass --db or set KBRL_DB to an existing file.")
    try:
        # Locked down: the query reads this database and nothing else, and writes nothing anywhere.
        frame = Store(path, busy_timeout_s=busy_timeout).query(query, locked_down=True)
    except duckdb.Error as exc:
        raise UserError(f"The query failed: {_one_sentence(exc)}") from exc

    if as_json:
        typer.echo(frame.write_json())
    elif as_csv:
        typer.echo(_flatten_nested(frame).write_csv(), nl=False)
    else:
        width = shutil.get_terminal_size(fallback=(160, 24)).columns
        with pl.Config(
            tbl_rows=max_rows,
            tbl_cols=-1,
            tbl_width_chars=width,
            fmt_str_lengths=TABLE_STRING_WIDTH,
            fmt_table_cell_list_len=8,
            tbl_hide_column_data_types=False,
        ):
            typer.echo(str(frame))


def register(app: typer.Typer) -> None:
    """Add `sql` to the top-level app."""
    app.command("sql")(sql)
