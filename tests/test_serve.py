"""`make serve` (kernelbench-rl serve) against real processes: SIGTERM stops what it started.

Ctrl-C with the server, the worker and flow runs up, and a second serve on a served port, are checked
in tests/test_deployment.py, which starts one serve for all of it (a server start is the slow part)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from deployments.server import free_port

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]


def processes_with_home(home: Path) -> list[int]:
    """Live processes started for this PREFECT_HOME (found through their environment, like `ps e`)."""
    marker = f"PREFECT_HOME={home}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                env = handle.read().split(b"\0")
            with open(f"/proc/{entry}/stat") as handle:
                state = handle.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in env and state != "Z":
            found.append(int(entry))
    return found


def answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/health", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def start_serve(home: Path, port: int) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), "KBRL_PREFECT_HOME": str(home)}
    return subprocess.Popen(
        [sys.executable, "-m", "kernelbench_rl.cli", "serve", "--port", str(port), "--prefect-home", str(home)],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,  # its own process group, as a terminal's foreground job
    )


def wait_for_line(proc: subprocess.Popen, needle: str, timeout_s: float = 300) -> str:
    seen = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
        if needle in line:
            return "".join(seen)
    raise AssertionError(f"no {needle!r} in serve's output:\n{''.join(seen)[-3000:]}")


def stop_and_check(proc: subprocess.Popen, home: Path, port: int, how: str) -> str:
    if how == "SIGINT":  # Ctrl-C: the terminal signals the whole foreground process group
        os.killpg(proc.pid, signal.SIGINT)
    else:
        proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    deadline = time.monotonic() + 30
    while (processes_with_home(home) or answers(port)) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = processes_with_home(home)
    for pid in left:  # do not leave them to the next test
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert not left, f"{how} left processes running: {left}"
    assert not answers(port), f"{how} left the server answering on {port}"
    return out


def test_sigterm_during_start_up_stops_the_server(tmp_path: Path) -> None:
    """SIGTERM to the command (not the group) reaches serve, which stops the server it had started."""
    home, port = tmp_path / "prefect", free_port()
    proc = start_serve(home, port)
    try:
        wait_for_line(proc, "starting Prefect server")
        deadline = time.monotonic() + 60
        while not processes_with_home(home) and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(1)
    finally:
        out = stop_and_check(proc, home, port, "SIGTERM")
    assert "received SIGTERM" in out and "stopped." in out
