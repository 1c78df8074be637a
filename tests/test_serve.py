"""`make serve` (kernelbench-rl serve) against real processes: SIGTERM or SIGINT to its pid stops what it started.

Ctrl-C (the terminal's SIGINT to the whole process group) with the server, the worker and flow runs up, and a
second serve on a served port, are checked in tests/test_deployment.py, which starts one serve for all of it
(a server start is the slow part)."""

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
    """Stop serve `how`: "Ctrl-C" (SIGINT to its process group, as a terminal sends it), or "SIGINT" / "SIGTERM"
    to its pid alone (what a supervisor, `kill` or a debugger sends); then nothing it started may be left."""
    if how == "Ctrl-C":
        os.killpg(proc.pid, signal.SIGINT)
    else:
        proc.send_signal(getattr(signal, how))
    try:
        out = proc.communicate(timeout=120)[0] or ""  # nothing when the test closed serve's output
    except subprocess.TimeoutExpired:
        out = f"serve did not exit within 120 s of {how}"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
    deadline = time.monotonic() + 30
    while (processes_with_home(home) or answers(port)) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = processes_with_home(home)
    for pid in left:  # do not leave them to the next test
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert not left, f"{how} left processes running: {left}\n{out[-3000:]}"
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


def wait_until_served(proc: subprocess.Popen, port: int) -> None:
    wait_for_line(proc, "starting Prefect server")
    deadline = time.monotonic() + 300
    while not answers(port) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
    assert answers(port), "the Prefect server never answered"


@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM"])
def test_a_signal_to_the_pid_alone_stops_serve_and_its_server(tmp_path: Path, how: str) -> None:
    """A supervisor holds serve's pid and signals that process only: it stops the server it started and exits."""
    home, port = tmp_path / "prefect", free_port()
    proc = start_serve(home, port)
    try:
        wait_until_served(proc, port)
    finally:
        out = stop_and_check(proc, home, port, how)
    assert f"received {how}" in out and "stopped." in out, out[-3000:]


def test_a_closed_output_does_not_keep_serve_from_stopping(tmp_path: Path) -> None:
    """`serve | tee log`, and the same Ctrl-C ends tee first: serve's messages go nowhere, its stop still happens."""
    home, port = tmp_path / "prefect", free_port()
    proc = start_serve(home, port)
    try:
        wait_until_served(proc, port)
    finally:
        proc.stdout.close()
        stop_and_check(proc, home, port, "SIGTERM")
