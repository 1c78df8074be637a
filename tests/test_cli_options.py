"""Options shared by several commands are checked alike: one sentence, exit code 2, nothing started."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernelbench_rl.errors import UserError

REPO = Path(__file__).resolve().parents[1]


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kernelbench_rl.cli", *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd, env={**os.environ, "PYTHONPATH": str(REPO)})


@pytest.mark.parametrize("args, option", [
    (["eval-model", "--policy", "openai:m", "--base-url", "http://127.0.0.1:9/v1", "--max-problems", "0"], "--max-problems"),
    (["eval-model", "--policy", "openai:m", "--base-url", "http://127.0.0.1:9/v1", "--max-problems", "-1"], "--max-problems"),
    (["pipeline", "--eval-max-problems", "0"], "--eval-max-problems"),
])
def test_a_problem_limit_below_one_is_refused(tmp_path: Path, args: list[str], option: str) -> None:
    """0 used to evaluate every problem and -1 all but the last (a list slice); both are mistakes."""
    proc = cli(*args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip() == f"error: {option} must be at least 1 (a number of problems), not {args[-1]}."
    assert not (tmp_path / "runs").exists()  # nothing ran: no database, no logs


@pytest.mark.parametrize("flow_name", ["evaluate_checkpoint", "nightly_eval"])
def test_the_evaluation_flows_refuse_it_too(tmp_path: Path, flow_name: str) -> None:
    import flows.evaluate

    flow = getattr(flows.evaluate, flow_name)
    with pytest.raises(UserError, match="max_problems must be at least 1"):
        flow.fn(db_path=str(tmp_path / "kb.duckdb"), max_problems=0)
    assert not (tmp_path / "kb.duckdb").exists()


@pytest.mark.parametrize("flag", ["-k", "--top-k", "-n", "--examples"])
def test_retrieve_takes_top_k_by_its_name_and_by_its_old_one(flag: str) -> None:
    import typer.main

    from kernelbench_rl.cli import app

    retrieve = typer.main.get_command(app).commands["retrieve"]
    context = retrieve.make_context("retrieve", ["--problem", "L1/19", flag, "5"])
    assert context.params["k"] == 5


def test_retrieve_refuses_a_top_k_below_one(tmp_path: Path) -> None:
    proc = cli("retrieve", "--problem", "L1/19", "-k", "0", "--db", str(tmp_path / "kb.duckdb"), cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.strip() == "error: --top-k must be at least 1, not 0."
