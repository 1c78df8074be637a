"""The suite's profiler (tests/cpu_profile.py) counts a test's subprocesses' CPU and tells waiting from work."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.cpu_profile import report

REPO = Path(__file__).resolve().parents[1]

SAMPLE = '''
import subprocess, sys, time

import pytest

def test_works_in_a_subprocess():
    code = "import time\\nt = time.thread_time()\\nwhile time.thread_time() - t < 0.4: pass"
    subprocess.run([sys.executable, "-c", code], check=True)

def test_waits():
    time.sleep(0.6)

@pytest.mark.heavy(reason="test_serve.py is in HEAVY")
def test_marked_heavy():
    pass
'''


def test_a_tests_subprocess_cpu_is_its_own_and_a_sleep_is_waiting(tmp_path: Path) -> None:
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    out = tmp_path / "profile"
    env = {**os.environ, "CPU_PROFILE_OUT": str(out)}
    env.pop("PYTEST_XDIST_WORKER", None)
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-c", os.devnull, "--rootdir", str(tmp_path),
                          "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "tests.cpu_profile",
                          str(tmp_path / "test_sample.py")], cwd=REPO, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    (record,) = [json.loads(p.read_text()) for p in out.glob("*.json")]
    rows = {nodeid.split("::")[1]: row for nodeid, row in record["tests"].items()}
    work_wall, work_cpu, work_reason = rows["test_works_in_a_subprocess"]
    wait_wall, wait_cpu, _ = rows["test_waits"]
    assert work_reason is None and rows["test_marked_heavy"][2] == "test_serve.py is in HEAVY"
    assert work_cpu >= 0.35  # the subprocess's 0.4 s of CPU, counted for the test that started it
    assert wait_wall - wait_cpu >= 0.4  # asleep: waiting, not work
    text = report(out)
    assert "test_sample.py" in text and "tests by waiting" in text
    assert text.index("test_waits") > text.index("tests by waiting")
    kinds = text[text.index("by what the tests start"):text.index("files by CPU")]
    assert "2 tests  fast tier: starts nothing" in kinds  # the two unmarked tests, under the fast tier's name
    assert "1 tests  servers and processes killed or signalled on purpose" in kinds  # its HEAVY entry's kind
