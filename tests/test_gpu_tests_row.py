"""bench/gpu_tests_row.py: the GPU tests' JUnit XML as a row of bench/RESULTS.md, failures named."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import gpu_tests_row  # noqa: E402

XML = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" tests="3">
<testcase classname="tests.test_evaluator" name="test_gpu_timing_and_hack_flags" time="40.5" />
<testcase classname="tests.hacks.test_hacks" name="test_hack[oom_gpu]" time="12.0"><failure message="x">y</failure></testcase>
<testcase classname="tests.test_policy_local" name="test_one_rl_step" time="0.1"><skipped message="no trl" /></testcase>
</testsuite></testsuites>"""


def test_a_row_counts_the_outcomes_and_names_what_did_not_pass(tmp_path):
    path = tmp_path / "gpu_tests.xml"
    path.write_text(XML)
    line = gpu_tests_row.row(path, "abc1234", "NVIDIA H100 80GB HBM3", "2026-11-28")
    assert line.startswith("| the tests marked gpu, 2026-11-28 (`bash bench/device_suite.sh gpu-tests`, code at abc1234)")
    assert "| NVIDIA H100 80GB HBM3 |" in line and line.endswith(" |") and line.count(" | ") == 2
    assert "**1 passed, 1 failed, 1 skipped** in 53 s" in line
    assert "failed: test_hacks::test_hack[oom_gpu]" in line and "skipped: test_policy_local::test_one_rl_step" in line
    assert "test_gpu_timing_and_hack_flags" not in line  # passed tests are counted, not listed


def test_a_missing_file_is_one_line_and_exit_2(tmp_path):
    done = subprocess.run([sys.executable, str(REPO / "bench" / "gpu_tests_row.py"), str(tmp_path / "none.xml")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "usage:" in done.stderr


def test_help_says_what_it_reads_and_exits_0():
    done = subprocess.run([sys.executable, str(REPO / "bench" / "gpu_tests_row.py"), "--help"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and "JUnit XML" in done.stdout and "gpu_tests_row.py $OUT/gpu_tests.xml" in done.stdout
