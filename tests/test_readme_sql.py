"""The example queries of docs/store.md (and any in the README) run against the schema (`kernelbench-rl sql` answers them)."""

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernelbench_rl.cli import app
from kernelbench_rl.store import Store

REPO = Path(__file__).resolve().parents[1]
DOCS_WITH_QUERIES = [REPO / "README.md", REPO / "docs" / "store.md"]


def _readme_queries() -> list[str]:
    text = "\n".join(path.read_text() for path in DOCS_WITH_QUERIES)
    blocks = re.findall(r"```sql\n(.*?)```", text, flags=re.S)
    queries = []
    for block in blocks:
        for chunk in re.split(r";\s*\n", block):
            sql = "\n".join(line for line in chunk.splitlines() if not line.strip().startswith("--")).strip()
            if sql:
                queries.append(sql.rstrip(";"))
    return queries


def test_readme_has_example_queries():
    assert len(_readme_queries()) >= 5
    assert "docs/store.md" in (REPO / "README.md").read_text()  # the README leads to them


@pytest.mark.parametrize("sql", _readme_queries(), ids=lambda q: q.split("FROM")[0][:40])
def test_readme_query_runs(tmp_path, sql):
    db = tmp_path / "kb.duckdb"
    Store(db).init()
    result = CliRunner().invoke(app, ["sql", sql, "--db", str(db), "--json"])
    assert result.exit_code == 0, result.output


def test_readme_queries_name_problems_the_smoke_run_trains():
    """After `make run`, a documented query about one problem returns its rows: the problem is one the smoke run trains."""
    from flows.common import build_config
    from kernelbench_rl.commands.pipeline import SMOKE_OVERRIDES, pipeline_arg_parser

    defaults = pipeline_arg_parser().parse_args([])
    cfg = build_config(defaults.config, SMOKE_OVERRIDES, run_id=defaults.run_id, db_path="unused.duckdb",
                       log_dir="unused", train_steps=defaults.train_steps,
                       levels=[int(x) for x in defaults.levels.split(",")], num_problems=defaults.num_problems)
    named = {pid for sql in _readme_queries() for pid in re.findall(r"problem_id = '([^']+)'", sql)}
    assert named, "docs/store.md has no per-problem query"
    assert named <= set(cfg.problems.ids), (named, cfg.problems.ids)
