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


def test_eval_dir_gives_each_bad_file_its_own_verdict_and_goes_on(tmp_path):
    """A non-UTF-8 file and a file naming a problem that does not exist do not abandon the folder."""
    generations = tmp_path / "gens"
    generations.mkdir()
    (generations / "level_1_problem_19_sample_0_kernel.py").write_text(RELU.read_text())
    (generations / "level_1_problem_19_sample_1_kernel.py").write_bytes("# caf\u00e9\n".encode("latin-1") + b"\xff\xfe\x00")
    (generations / "level_1_problem_999_sample_0_kernel.py").write_text(RELU.read_text())
    db = tmp_path / "evals.duckdb"
    proc = cli("eval-dir", str(generations), "--level", "1", "--db", str(db), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "Traceback" not in proc.stderr + proc.stdout
    results = json.loads((generations / "eval_results.json").read_text())
    assert sorted(results) == ["19", "999"]
    by_sample = {e["sample_id"]: e for e in results["19"]}
    assert by_sample[0]["correctness"] is True
    assert by_sample[1]["correctness"] is False and by_sample[1]["metadata"]["error_category"] == "format"
    assert "not UTF-8" in by_sample[1]["metadata"]["error"]
    assert results["999"][0]["metadata"]["error_category"] == "unknown_problem"
    # The summary names the files that failed and why.
    assert "1/3 correct" in proc.stdout
    assert "level_1_problem_19_sample_1_kernel.py: format" in proc.stdout
    assert "level_1_problem_999_sample_0_kernel.py: unknown_problem" in proc.stdout
    from kernelbench_rl.store import Store

    rows = Store(db).fetchall("SELECT error_category FROM evaluations ORDER BY error_category", read_only=True)
    assert [r[0] for r in rows] == ["format", "ok"]


def test_eval_on_a_binary_or_latin1_file_is_a_format_verdict(tmp_path):
    latin1 = tmp_path / "latin1.py"
    latin1.write_bytes("# na\u00efve kernel\nimport torch\n".encode("latin-1"))
    binary = tmp_path / "kernel.so"
    binary.write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)))
    for path in (latin1, binary):
        as_json = cli("eval", "-p", "L1/19", "-k", str(path), "--json", cwd=tmp_path)
        assert as_json.returncode == 1, as_json.stderr
        assert "Traceback" not in as_json.stderr
        result = json.loads(as_json.stdout)
        assert result["error_category"] == "format" and "not UTF-8" in result["error_message"]
        plain = cli("eval", "-p", "L1/19", "-k", str(path), cwd=tmp_path)
        assert plain.returncode == 1 and "Traceback" not in plain.stderr + plain.stdout
        assert "format" in plain.stdout


def test_eval_exit_codes_and_bad_timeout(tmp_path):
    wrong = tmp_path / "wrong.py"
    wrong.write_text(RELU.read_text().replace("tl.maximum(x, 0.0)", "x * 0.5"))
    judged = cli("eval", "-p", "L1/19", "-k", str(wrong), "--json", cwd=tmp_path)
    assert judged.returncode == 1 and json.loads(judged.stdout)["error_category"] == "mismatch"
    for bad in ("-5", "0"):
        proc = cli("eval", "-p", "L1/19", "-k", str(RELU), "--timeout", bad, cwd=tmp_path)
        assert proc.returncode == 2 and "--timeout must be a positive number" in proc.stderr
        assert "Traceback" not in proc.stderr
