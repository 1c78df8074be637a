"""`kernelbench-rl sql "SELECT ..."`: ask the run database anything, read-only, even during a run."""

from __future__ import annotations

import json
import re
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
    max_rows: Annotated[int, typer.Option("--max-rows", help="Rows shown in the table view (CSV and JSON give all).")] = 100,
    busy_timeout: Annotated[
        float, typer.Option("--busy-timeout", help="Seconds to keep retrying while another process writes.")
    ] = 30.0,
) -> None:
    """Run read-only SQL against the run database and print the result (a plain table, CSV or JSON)."""
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
        typer.echo(plain_table(frame.columns, frame.rows(), max_rows))


def _cell(value) -> str:
    """One value as the table shows it: NULL, a number in a few significant digits, nested values as JSON, and text
    cut at TABLE_STRING_WIDTH (CSV and JSON give everything)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (dict, list, tuple)):
        value = json.dumps(_plain(value))
    text = " ".join(str(value).split()) if isinstance(value, str) else str(value)
    return text if len(text) <= TABLE_STRING_WIDTH else text[:TABLE_STRING_WIDTH - 1] + "…"


def plain_table(columns: list[str], rows: list[tuple], max_rows: int) -> str:
    """A plain-text table: a header, a rule, one line per row (numbers right-aligned), then the row count."""
    shown = [[_cell(v) for v in row] for row in rows[:max(max_rows, 0)]]
    def is_number(value) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool)

    values = [[row[i] for row in rows if row[i] is not None] for i in range(len(columns))]
    numeric = [bool(column) and all(is_number(v) for v in column) for column in values]
    widths = [max([len(name), *(len(r[i]) for r in shown)]) for i, name in enumerate(columns)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if num else c.ljust(w) for c, w, num in zip(cells, widths, numeric)).rstrip()

    out = [line(list(columns)), "  ".join("-" * w for w in widths), *(line(r) for r in shown)]
    more = len(rows) - len(shown)
    if more > 0:
        out.append(f"… {more} more row{'s' if more != 1 else ''} (--max-rows N shows more; --csv and --json give all)")
    out.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(out)

def register(app: typer.Typer) -> None:
    """Add `sql` to the top-level app."""
    app.command("sql")(sql)
