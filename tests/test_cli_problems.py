"""The `problems` CLI: listing, showing, and one-sentence errors with non-zero exits."""

import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from kernelbench_rl.cli import app
from kernelbench_rl.problems import get_problem, load_problems

runner = CliRunner()


def _write_checkout(root: Path, per_level: dict[int, int]) -> None:
    template = (
        "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
        "        return x * {k}\n\nN = 8\n\ndef get_inputs():\n    return [torch.rand(N)]\n\n"
        "def get_init_inputs():\n    return []\n"
    )
    for level, count in per_level.items():
        folder = root / "KernelBench" / f"level{level}"
        folder.mkdir(parents=True)
        for number in range(1, count + 1):
            (folder / f"{number}_Op{number}.py").write_text(template.format(k=number + 1))


def test_list_shows_bundled_levels_and_counts():
    result = runner.invoke(app, ["problems", "list"])
    assert result.exit_code == 0, result.output
    counts = {}
    for problem in load_problems():
        counts[problem.level] = counts.get(problem.level, 0) + 1
    output = " ".join(result.output.split())  # the table's footer may wrap at any width
    for level, count in counts.items():
        assert f"level {level}: {count}" in output
    assert "L1/19" in result.output


def test_list_external_checkout_counts_levels_1_to_3_and_skips_level4(tmp_path):
    _write_checkout(tmp_path, {1: 5, 2: 4, 3: 3, 4: 2})
    result = runner.invoke(app, ["problems", "list", "--kernelbench-root", str(tmp_path), "--ids"])
    assert result.exit_code == 0, result.output
    ids = [line for line in result.output.splitlines() if line.startswith("L")]
    assert len(ids) == 12
    assert not any(i.startswith("L4/") for i in ids)
    assert "Level 4 is skipped" in result.output


def test_show_prints_source_and_small_sizes():
    result = runner.invoke(app, ["problems", "show", "L1/19", "--small"])
    assert result.exit_code == 0, result.output
    assert "class Model" in result.output
    small_dim = get_problem("L1/19").small_sizes["dim"]
    assert f"dim = {small_dim}" in result.output  # the small size is substituted


def _run_cli(*args: str) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).parent / "kernelbench-rl"
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=120)


def test_unknown_problem_is_one_sentence_and_nonzero_exit():
    proc = _run_cli("problems", "show", "L1/9999")
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "L1/9999" in proc.stderr


def test_missing_root_and_malformed_file_fail_cleanly(tmp_path):
    proc = _run_cli("problems", "list", "--kernelbench-root", str(tmp_path / "nope"))
    assert proc.returncode != 0 and "Traceback" not in proc.stderr and "does not exist" in proc.stderr

    _write_checkout(tmp_path, {1: 2})
    (tmp_path / "KernelBench" / "level1" / "3_Broken.py").write_text("def oops(:\n")
    proc = _run_cli("problems", "list", "--kernelbench-root", str(tmp_path))
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "3_Broken.py" in proc.stderr and "not valid Python" in proc.stderr


def test_usage_error_prints_usage_not_a_traceback():
    proc = _run_cli("no-such-command")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and "No such command" in proc.stderr


def test_superseded_old_files_are_ignored_and_real_duplicates_are_an_error(tmp_path):
    _write_checkout(tmp_path, {3: 2})
    level3 = tmp_path / "KernelBench" / "level3"
    (level3 / "2_Op2_OLD.py").write_text((level3 / "2_Op2.py").read_text())
    problems = load_problems(tmp_path, levels=[3])
    assert [p.name for p in problems] == ["1_Op1", "2_Op2"]

    (level3 / "2_Another.py").write_text((level3 / "2_Op2.py").read_text())
    proc = _run_cli("problems", "list", "--kernelbench-root", str(tmp_path))
    assert proc.returncode != 0 and "both claim problem number 2" in proc.stderr and "Traceback" not in proc.stderr


def test_show_writes_code_verbatim_when_piped(tmp_path):
    """`problems show L1/20 --solution > x.py` gives runnable Python with every line whole, at any width."""
    import os

    from kernelbench_rl.problems import load_solution

    problem = get_problem("L1/20")
    env = {**os.environ, "COLUMNS": "40", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.run([sys.executable, "-m", "kernelbench_rl.cli", "problems", "show", "L1/20", "--solution"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    compile(proc.stdout, "x.py", "exec")  # valid Python as a whole
    lines = set(proc.stdout.splitlines())
    for source in (problem.source_for("real"), load_solution(problem)):
        assert all(line in lines for line in source.splitlines())
    assert max(len(line) for line in load_solution(problem).splitlines()) > 40  # a line the width would have cut


def test_a_level_the_source_lacks_is_one_sentence_not_an_empty_table(tmp_path):
    _write_checkout(tmp_path, {1: 2, 2: 1})
    for command in (["problems", "list"], ["problems", "audit"]):
        proc = _run_cli(*command, "--level", "11", "--problems-root", str(tmp_path))
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert proc.stderr.strip().splitlines() == [
            f"error: Level 11 has no problems in {tmp_path / 'KernelBench'}; its levels are 1, 2."]
    bundled = _run_cli("problems", "list", "--level", "11")
    assert bundled.returncode == 2 and "Level 11 has no problems in the bundled set; its levels are 1, 2, 3" in bundled.stderr


def test_floor_options_without_floor_are_refused_not_ignored():
    proc = _run_cli("problems", "show", "L1/19", "--gpu", "H200")
    assert proc.returncode == 2 and not proc.stdout
    assert proc.stderr.strip().splitlines() == [
        "error: --gpu only goes with --floor; add --floor to print the problem's speed of light, or drop it to print "
        "its source."]
