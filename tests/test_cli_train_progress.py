"""`train` says up front what a step does and, for a config sized for a GPU on a CPU, that it takes minutes; its
progress reports each problem as it is judged, with the time left, also as plain lines under --no-progress."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernelbench_rl.commands.train import describe_plan
from kernelbench_rl.compose import build_run_parts
from kernelbench_rl.config import load_config

REPO = Path(__file__).resolve().parents[1]


def test_the_default_config_on_a_cpu_says_what_a_step_costs(monkeypatch):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    plan, note = describe_plan(build_run_parts(load_config("default", [])))
    assert plan.startswith("plan: 100 steps; each samples 8 problems x 8 answers = 64 answers of up to 3072 tokens "
                           "by the local backend on the CPU, judged by Triton's CPU interpreter")
    assert note.startswith("note: up to 196,608 tokens per step sampled on the CPU: expect minutes per step")
    small = describe_plan(build_run_parts(load_config("default", ["sampling.group_size=4", "training.batch_problems=2",
                                                                   "sampling.max_tokens=400"])))
    assert len(small) == 1  # sized for a laptop: no warning


def test_no_progress_still_prints_a_line_per_problem_and_per_step(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TINKER_API_KEY"} | {"PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "kernelbench_rl.cli", "train", "--no-progress", "--stop-after", "1",
         "policy.backend=local", "policy.base_model=local:tiny", "problems.ids=[L1/19,L1/20]", "problems.levels=[1]",
         "sampling.group_size=2", "training.batch_problems=2", "sampling.max_tokens=8", "training.steps=3",
         "eval.device=cpu", "eval.size=small", "rag.enabled=false", "run_id=lines", f"db_path={tmp_path / 'kb.duckdb'}",
         f"log_dir={tmp_path / 'logs'}"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert any(line.startswith("plan: 3 steps; each samples 2 problems x 2 answers = 4 answers of up to 8 tokens")
               for line in lines)
    assert "lines: step 0: sampling" in lines
    judged = [line for line in lines if line.startswith("lines: step 0: ") and "problems judged" in line]
    assert [line.split("problems judged")[0] for line in judged] == ["lines: step 0: 1/2 ", "lines: step 0: 2/2 "]
    assert "per step" in judged[0] and "left" in judged[0]  # an estimate from the first problem on
    step_line = next(line for line in lines if line.startswith("lines: step 0 · "))
    assert "reward" in step_line and "per step, " in step_line
