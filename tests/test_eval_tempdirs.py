"""The evaluator's temporary folders: a normal stop removes its own, and those of killed processes (a worker,
an orchestrator) are swept by the next pool that starts or replaces a worker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from kernelbench_rl.evaluation.front import pool as pool_module
from kernelbench_rl.evaluation.front.pool import WorkerPool

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture()
def private_tmp(tmp_path: Path, monkeypatch) -> Path:
    """This test's own temporary directory, for the pool, its workers and any process started here."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
    return tmp_path


def evaluator_folders(directory: Path) -> set[str]:
    return {p.name for p in directory.iterdir() if p.name.startswith("kbrl-eval-")}


def wait_until(condition, timeout_s: float = 120.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.2)
    return condition()


def test_a_killed_workers_folder_goes_when_it_is_replaced_and_a_closed_pool_leaves_none(private_tmp: Path) -> None:
    pool = WorkerPool("cpu", num_workers=1)
    try:
        pool.wait_ready()
        killed = pool.worker_pids[0]
        folders = evaluator_folders(private_tmp)
        assert {name.split("-")[2] for name in folders} == {"home", "worker"}
        killed_root = next(name for name in folders if name.startswith("kbrl-eval-worker-") and f"-{killed}-" in name)
        os.kill(killed, signal.SIGKILL)  # no chance to clean up
        assert wait_until(lambda: pool.worker_pids and pool.worker_pids[0] != killed)
        pool.wait_ready()
        assert killed_root not in evaluator_folders(private_tmp)
        assert len(evaluator_folders(private_tmp)) == 2  # the home and the replacement's root
    finally:
        pool.close()
    assert wait_until(lambda: not evaluator_folders(private_tmp), 120), evaluator_folders(private_tmp)


def test_a_worker_killed_past_its_stop_grace_leaves_no_folder_once_the_pool_has_closed(private_tmp: Path,
                                                                                         monkeypatch) -> None:
    """A worker too busy (or too starved of CPU) to stop within the grace is killed, and cannot remove its root."""
    monkeypatch.setattr(pool_module, "STOP_GRACE_S", 0.5)
    pool = WorkerPool("cpu", num_workers=1)
    try:
        pool.wait_ready()
        stuck = pool.worker_pids[0]
        assert any(f"-{stuck}-" in name for name in evaluator_folders(private_tmp))
        os.kill(stuck, signal.SIGSTOP)  # it cannot read the stop request: past the grace, the pool kills it
    finally:
        pool.close()
    assert not evaluator_folders(private_tmp)  # at once: nothing left for a later pool to sweep


def test_a_killed_orchestrators_folders_are_swept_by_the_next_pool(private_tmp: Path) -> None:
    orchestrator = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom kernelbench_rl.evaluation.front.pool import WorkerPool\n"
         "pool = WorkerPool('cpu', num_workers=1)\npool.wait_ready()\nprint('ready', flush=True)\ntime.sleep(600)\n"],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE, text=True)
    try:
        assert orchestrator.stdout.readline().strip() == "ready"
    finally:
        orchestrator.kill()  # SIGKILL: its pool never closes
        orchestrator.wait()
    # Its worker sees the orchestrator gone and removes its own root; the orchestrator's home is left behind.
    assert wait_until(lambda: evaluator_folders(private_tmp) == {name for name in evaluator_folders(private_tmp)
                                                                  if name.startswith("kbrl-eval-home-")}, 60)
    left = evaluator_folders(private_tmp)
    assert len(left) == 1 and f"-{orchestrator.pid}-" in left.pop()
    pool = WorkerPool("cpu", num_workers=1)
    try:
        assert len(evaluator_folders(private_tmp)) == 1  # its own home only: the dead one's was swept
    finally:
        pool.close()
    assert wait_until(lambda: not evaluator_folders(private_tmp), 120), evaluator_folders(private_tmp)
