"""bench/fault_matrix.py through its own functions: one cheap cell of the matrix reports the row it should, a
process left behind or a lost row fails its cell and the script's exit code, and --only names real cells."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from kernelbench_rl.errors import ExitCode

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "bench" / "fault_matrix.py"


def _load_script():
    spec = importlib.util.spec_from_file_location("fault_matrix", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


matrix = _load_script()


def test_a_truncated_database_cell_reports_one_sentence_code_5_and_nothing_lost(tmp_path: Path) -> None:
    cells = matrix.run_matrix(matrix.select(["truncated x kb.duckdb (sql)"]), tmp_path)
    assert [c.name for c in cells] == ["truncated x kb.duckdb (sql)"]
    cell, = cells
    assert (cell.exit, cell.rows_lost, cell.processes_left, cell.lines) == (ExitCode.DAMAGED, 0, 0, 1), cell
    assert cell.ok and cell.failures() == []
    assert "kb.duckdb" in cell.message and "damaged" in cell.message
    assert "| truncated x kb.duckdb (sql) | 5 (5) | 0 | 0 | 1 (1) |" in matrix.markdown_table(cells)

    # The same row with a lost row is a failed cell, named under the table.
    lost = dataclasses.replace(cell, rows_lost=3)
    assert not lost.ok and lost.failures() == ["rows lost: 3"]
    assert "**no**" in matrix.markdown_table([lost]) and "rows lost: 3" in matrix.markdown_table([lost])


def test_a_process_outliving_its_command_is_counted(tmp_path: Path, monkeypatch) -> None:
    """A command that leaves a process in a session of its own (as a daemon does) and exits: processes left 1."""
    monkeypatch.setattr(matrix, "GRACE_S", 1.0)
    code = ("import subprocess, sys, time\n"
            # stdio to /dev/null, as a daemon's: holding the command's pipes would only hold the readers 30 s each
            "p = subprocess.Popen(['sleep', '300'], start_new_session=True, stdin=subprocess.DEVNULL,\n"
            "                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
            "print(p.pid, flush=True)\ntime.sleep(2)\nprint('one line', file=sys.stderr)\nsys.exit(7)\n")
    cell = matrix.Cell("daemon", ExitCode.DISK_FULL)
    out, err = matrix.run_command(cell, [sys.executable, "-c", code])
    left = int(out[0])
    try:
        assert (cell.exit, cell.lines, err) == (7, 1, ["one line\n"])
        assert cell.processes_left == 1
        cell.rows_lost = 0
        assert cell.failures() == ["processes left: 1"]
    finally:
        os.kill(left, signal.SIGKILL)

    tidy = matrix.Cell("tidy", 0)
    matrix.run_command(tidy, [sys.executable, "-c", "import subprocess; subprocess.run(['true'])"])
    assert tidy.processes_left == 0 and tidy.exit == 0 and tidy.lines == 0


def test_the_script_exits_1_on_a_failed_cell_and_2_on_an_only_naming_none(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(matrix, "become_subreaper", lambda: False)  # not this test process
    failing = matrix.Cell("leaky", 0, exit=0, rows_lost=0, processes_left=2, lines=1)
    monkeypatch.setattr(matrix, "matrix", lambda: [("leaky", lambda fixtures, work: failing)])
    out = tmp_path / "report.json"
    assert matrix.main(["--out", str(out), "--keep", str(tmp_path / "work")]) == 1
    row, = json.loads(out.read_text())["cells"]
    assert (row["name"], row["ok"], row["failures"]) == ("leaky", False, ["processes left: 2"])
    assert matrix.main(["--only", "no such cell"]) == 2


def test_only_picks_cells_by_part_of_their_names() -> None:
    names = [name for name, _ in matrix.select(["SIGTERM", "index.faiss"])]
    assert names == ["SIGTERM x sft", "SIGTERM x train", "SIGTERM x pipeline", "garbled x index.faiss (retrieve)",
                     "garbled x index.faiss (index build)", "garbled in place x index.faiss (retrieve)",
                     "garbled in place x index.faiss (index build)"]
    everything = [name for name, _ in matrix.select([])]
    assert len(everything) == len(set(everything)) == 41
    listed = subprocess.run([sys.executable, str(SCRIPT), "--list", "--only", "kb.duckdb"], capture_output=True,
                            text=True, timeout=300)
    assert listed.returncode == 0 and listed.stdout.split("\n")[0] == "truncated x kb.duckdb (sql)"
