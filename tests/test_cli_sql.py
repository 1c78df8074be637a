"""`kernelbench-rl sql`: through typer's runner and once as the installed command."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernelbench_rl.cli import app
from kernelbench_rl.errors import UserError
from kernelbench_rl.store import Store

REPO = Path(__file__).resolve().parents[1]
runner = CliRunner()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "runs.duckdb"
    store = Store(path)
    store.upsert(
        "train_steps",
        [{"run_id": "r1", "step": s, "stage": "format", "reward_mean": s / 10, "metrics_json": {"k": s}} for s in range(3)],
    )
    store.upsert("embeddings", [{"doc_sha256": "d", "model_id": "m", "dimension": 2, "vector": [0.5, 1.5]}])
    return path


def run_sql(*args: str):
    return runner.invoke(app, ["sql", *args])


def test_table_view_shows_every_column(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    result = run_sql("SELECT run_id, step, stage, reward_mean FROM train_steps ORDER BY step", "--db", str(db))
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        "run_id  step  stage   reward_mean",
        "------  ----  ------  -----------",
        "r1         0  format            0",
        "r1         1  format          0.1",
        "r1         2  format          0.2",
        "(3 rows)",
    ]  # a plain table: no frame repr (shape, dtypes, box)


def test_table_view_says_what_it_left_out(db: Path) -> None:
    result = run_sql("SELECT step, NULL AS missing FROM train_steps ORDER BY step", "--db", str(db), "--max-rows", "1")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        "step  missing", "----  -------", "   0  NULL",
        "… 2 more rows (--max-rows N shows more; --csv and --json give all)", "(3 rows)"]


def test_csv_and_json_give_the_rows(db: Path) -> None:
    query = "SELECT step, reward_mean, metrics_json FROM train_steps ORDER BY step"
    as_csv = run_sql(query, "--db", str(db), "--csv")
    assert as_csv.exit_code == 0, as_csv.output
    rows = list(csv.DictReader(io.StringIO(as_csv.output)))
    assert [r["step"] for r in rows] == ["0", "1", "2"] and rows[2]["metrics_json"] == '{"k": 2}'

    as_json = run_sql(query, "--db", str(db), "--json")
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.output) == [
        {"step": s, "reward_mean": s / 10, "metrics_json": json.dumps({"k": s})} for s in range(3)
    ]


def test_list_columns_survive_csv(db: Path) -> None:
    result = run_sql("SELECT doc_sha256, vector FROM embeddings", "--db", str(db), "--csv")
    assert result.exit_code == 0, result.output
    assert list(csv.reader(io.StringIO(result.output))) == [["doc_sha256", "vector"], ["d", "[0.5, 1.5]"]]


def test_default_database_comes_from_kbrl_db(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KBRL_DB", str(db))
    result = run_sql("SELECT count(*) AS n FROM train_steps", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == [{"n": 3}]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("SELECT * FROM train_step", 'The query failed: Catalog Error: Table with name train_step does not exist; did you mean "train_steps"?'),
        ("SELEC 1", 'The query failed: Parser Error: syntax error at or near "SELEC".'),
        ("DELETE FROM train_steps", "read-only mode."),
    ],
)
def test_sql_errors_are_one_sentence(db: Path, query: str, expected: str) -> None:
    result = run_sql(query, "--db", str(db))
    assert isinstance(result.exception, UserError)
    message = str(result.exception)
    assert message.endswith(expected) and "\n" not in message
    assert Store(db).count("train_steps") == 3


def test_a_missing_database_is_an_error_and_is_not_created(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "none.duckdb"
    result = run_sql("SELECT 1", "--db", str(missing))
    assert isinstance(result.exception, UserError)
    assert str(result.exception) == f"There is no database at {missing}; pass --db or set KBRL_DB to an existing file."
    assert not missing.parent.exists()


def test_csv_and_json_together_are_refused(db: Path) -> None:
    result = run_sql("SELECT 1", "--db", str(db), "--csv", "--json")
    assert isinstance(result.exception, UserError)


LONG_RUN = """
import sys
from pathlib import Path
from kernelbench_rl.store import Store
store, stop = Store(sys.argv[1]), Path(sys.argv[2])
rows = [{"run_id": "r2", "step": s, "stage": "speed"} for s in range(1000)]
store.upsert("train_steps", rows)
print("writing", flush=True)
while not stop.exists():
    store.upsert("train_steps", rows)
"""


def test_sql_gets_in_while_another_process_writes(db: Path, tmp_path: Path) -> None:
    stop = tmp_path / "stop"
    writer = subprocess.Popen([sys.executable, "-c", LONG_RUN, str(db), str(stop)], stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline().strip() == "writing"
        for _ in range(3):
            result = run_sql("SELECT count(*) AS n FROM train_steps", "--db", str(db), "--json", "--busy-timeout", "5")
            assert result.exit_code == 0, result.output
            assert json.loads(result.output) == [{"n": 1003}]
    finally:
        stop.touch()
        writer.wait(timeout=60)
    assert writer.returncode == 0


def installed_command() -> list[str]:
    script = Path(sys.executable).with_name("kernelbench-rl")
    if not script.exists():
        pytest.skip(f"{script} is not installed (pip install -e .)")
    return [str(script)]


def test_the_installed_command_prints_rows_and_exits_non_zero_on_errors(db: Path, tmp_path: Path) -> None:
    command = installed_command()
    env = {**os.environ, "KBRL_DB": str(db), "COLUMNS": "200"}
    ok = subprocess.run(
        [*command, "sql", "SELECT step FROM train_steps ORDER BY step", "--csv"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120,
    )
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.split() == ["step", "0", "1", "2"]

    missing = tmp_path / "missing.duckdb"
    failed = subprocess.run(
        [*command, "sql", "SELECT 1", "--db", str(missing)],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120,
    )
    assert failed.returncode == UserError.exit_code
    assert failed.stderr.strip().splitlines() == [f"error: There is no database at {missing}; pass --db or set KBRL_DB to an existing file."]
    assert not missing.exists()


@pytest.mark.parametrize(
    "query",
    [
        "COPY (SELECT 1) TO '{db}'",  # would overwrite the run database with 4 bytes
        "COPY (SELECT 1) TO '{tmp}/out.csv'",
        "SELECT * FROM read_csv('/etc/passwd')",
        "SELECT * FROM read_text('/etc/hostname')",
        "SELECT * FROM glob('/etc/*')",
        "ATTACH '{tmp}/other.duckdb' AS other",
        "SET enable_external_access = true",
        "INSTALL httpfs",
        "EXPORT DATABASE '{tmp}/export'",
        "CREATE TABLE hijack AS SELECT 1 AS a",
    ],
)
def test_sql_reads_the_database_and_nothing_else(db: Path, query: str) -> None:
    before = db.read_bytes()
    result = run_sql(query.format(db=db, tmp=db.parent), "--db", str(db))
    assert isinstance(result.exception, UserError), result.output
    assert str(result.exception).startswith("The query failed")
    assert db.read_bytes() == before
    assert not (db.parent / "out.csv").exists() and not (db.parent / "export").exists()
    assert not (db.parent / "other.duckdb").exists()
    # The database still opens and holds its rows.
    again = run_sql("SELECT count(*) AS n FROM train_steps", "--db", str(db), "--json")
    assert again.exit_code == 0 and json.loads(again.output) == [{"n": 3}]


def test_empty_query_is_a_usage_error(db: Path) -> None:
    result = run_sql("  ", "--db", str(db))
    assert isinstance(result.exception, UserError) and "The query is empty" in str(result.exception)
