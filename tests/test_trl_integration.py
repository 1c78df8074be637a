"""TRL's GRPOTrainer on our environment: the example script trains the shipped tiny model one step
on the CPU in its own process, with Kevin-style two-turn episodes through our rollout_func, and
the episodes' turns land in DuckDB as the env server writes them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernelbench_rl.store import Store

REPO = Path(__file__).resolve().parents[1]


def test_adapter_imports_without_trl():
    # The adapter itself never imports trl (it is an optional extra); only the example does.
    code = "import sys; import kernelbench_rl.integrations.trl as t; assert 'trl' not in sys.modules; print(t.__name__)"
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_grpo_example_trains_one_multi_turn_step_on_the_cpu(tmp_path):
    pytest.importorskip("trl")
    db = tmp_path / "trl.duckdb"
    done = subprocess.run([sys.executable, "examples/trl_grpo_tiny.py", "--multi-turn", "--db", str(db),
                           "--output-dir", str(tmp_path / "out")],
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
                          timeout=500)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "trained 1 step(s)" in done.stdout
    turns = Store(db).fetchall("SELECT step, turn, format_ok, error_category FROM rollouts ORDER BY step, turn")
    # two prompts (one step, two generations each), two turns each: the tiny model never writes a kernel
    assert [(s, t) for s, t, *_ in turns] == [(0, 0), (0, 1), (1, 0), (1, 1)]
