"""`kernelbench-rl eval` and `eval-dir` through the installed entry point."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from kernelbench_rl.problems import SOLUTIONS_ROOT

RELU = SOLUTIONS_ROOT / "level1" / "19_ReLU.py"


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "KBRL_DB": str((cwd or Path.cwd()) / "cli.duckdb")}
    return subprocess.run(
        [sys.executable, "-m", "kernelbench_rl.cli", *args], capture_output=True, text=True, timeout=300, cwd=cwd, env=env,
    )


def test_eval_json_prints_exactly_one_result(tmp_path):
    proc = cli("eval", "--problem", "L1/19", "--kernel", str(RELU), "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)  # the whole stdout is one JSON object
    assert result["correct"] is True and result["error_category"] == "ok"
    assert result["problem_id"] == "L1/19"


def test_eval_missing_kernel_or_unknown_problem_is_one_sentence(tmp_path):
    missing = cli("eval", "--problem", "L1/19", "--kernel", str(tmp_path / "nope.py"), cwd=tmp_path)
    assert missing.returncode != 0 and "No kernel file" in missing.stderr and "Traceback" not in missing.stderr
    unknown = cli("eval", "--problem", "L1/9999", "--kernel", str(RELU), cwd=tmp_path)
    assert unknown.returncode != 0 and "No problem L1/9999" in unknown.stderr and "Traceback" not in unknown.stderr


def test_eval_dir_writes_kernelbench_results_and_duckdb(tmp_path):
    generations = tmp_path / "gens"
    generations.mkdir()
    source = RELU.read_text()
    (generations / "level_1_problem_19_sample_0_kernel.py").write_text(source)
    # Wrong: x * 0.5, not the identity (ReLU of KernelBench's inputs, uniform in [0, 1), is the identity).
    (generations / "level_1_problem_19_sample_1_kernel.py").write_text(source.replace("tl.maximum(x, 0.0)", "x * 0.5"))
    (generations / "notes.txt").write_text("ignored")
    db = tmp_path / "evals.duckdb"
    proc = cli("eval-dir", str(generations), "--level", "1", "--db", str(db), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    results = json.loads((generations / "eval_results.json").read_text())
    assert list(results) == ["19"]
    entries = results["19"]
    assert [e["sample_id"] for e in entries] == [0, 1]
    assert [e["correctness"] for e in entries] == [True, False]
    assert all({"sample_id", "compiled", "correctness", "metadata", "runtime", "runtime_stats"} <= set(e) for e in entries)
    from kernelbench_rl.store import Store

    rows = Store(db).fetchall("SELECT correct FROM evaluations ORDER BY correct", read_only=True)
    assert [r[0] for r in rows] == [False, True]
