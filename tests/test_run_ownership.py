"""A run is owned by one process at a time (real processes, real lock files, a real DuckDB file);
a dead owner's run is marked crashed; `train` says which run it starts or resumes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from kernelbench_rl.compose import build_run_parts
from kernelbench_rl.config import load_config
from kernelbench_rl.store import Store
from kernelbench_rl import ownership
from kernelbench_rl.training.loop import describe_run_start

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def hold(db: Path, run_id: str) -> subprocess.Popen:
    """Another process that owns the run until it is stopped."""
    code = (f"from kernelbench_rl import ownership; ownership.acquire({str(db)!r}, {run_id!r}); "
            "print('owned', flush=True); import time; time.sleep(600)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=ENV)
    assert proc.stdout.readline().strip() == "owned"
    return proc


def test_a_second_process_is_told_who_owns_the_run(tmp_path: Path) -> None:
    db = tmp_path / "kb.duckdb"
    holder = hold(db, "mine")
    try:
        with pytest.raises(ownership.RunBusyError) as err:
            ownership.acquire(db, "mine")
        message = str(err.value)
        assert f"process {holder.pid} on " in message and "'mine'" in message and "\n" not in message
        # Training the run: refused before anything starts (the CLI prints this sentence and exits 3).
        from kernelbench_rl.training import TrainingRun

        cfg = load_config("default", ["run_id=mine", f"db_path={db}", "policy.backend=local", f"log_dir={tmp_path / 'logs'}"])
        with pytest.raises(ownership.RunBusyError, match=f"owned by process {holder.pid}"):
            TrainingRun(build_run_parts(cfg, policy_beside=True)).start()
        assert ownership.RunBusyError.exit_code == 3
        assert not (tmp_path / "logs" / "mine").exists()
        ownership.acquire(db, "other")  # another run is free
        ownership.release(db, "other")
    finally:
        holder.kill()
        holder.wait()
    # The owner died without letting go (SIGKILL): its lock is stale, and the run is free.
    ownership.acquire(db, "mine")
    ownership.acquire(db, "mine")  # re-entrant within the owning process
    ownership.release(db, "mine")
    assert ownership.is_owned(db, "mine")
    ownership.release(db, "mine")
    assert not ownership.is_owned(db, "mine")


def test_runs_whose_owner_is_gone_are_marked_crashed(tmp_path: Path) -> None:
    db = tmp_path / "kb.duckdb"
    store = Store(db)
    alive, dead = hold(db, "alive"), hold(db, "dead")
    store.upsert("runs", [{"run_id": r, "status": "running", "last_step": 3, "owner_pid": p.pid}
                          for r, p in (("alive", alive), ("dead", dead))]
                 + [{"run_id": "done", "status": "finished", "last_step": 9}])
    dead.send_signal(signal.SIGKILL)
    dead.wait()
    try:
        gone = ownership.mark_interrupted_runs(store)
        assert [row["run_id"] for row in gone] == ["dead"]
        status = dict(store.fetchall("SELECT run_id, status FROM runs"))
        assert status == {"alive": "running", "dead": "crashed", "done": "finished"}
    finally:
        alive.kill()
        alive.wait()


def test_train_says_which_run_it_starts_or_resumes(tmp_path: Path) -> None:
    db = tmp_path / "kb.duckdb"
    hashed = load_config("default", [f"db_path={db}", "training.steps=3"])
    store = Store(db)

    def describe_run_start_of(cfg) -> str:
        return describe_run_start(store, cfg.resolved_run_id(), named=bool(cfg.run_id))

    line = describe_run_start_of(hashed)
    assert line.startswith(f"starting a new run {hashed.resolved_run_id()}") and "run_id=NAME" in line
    Store(db).upsert("runs", [{"run_id": hashed.resolved_run_id(), "status": "running", "last_step": 1}])
    # Its owner is gone (no process holds it): reported and recorded as crashed.
    assert describe_run_start_of(hashed) == f"resuming run {hashed.resolved_run_id()} (crashed, last step 1)"
    changed = load_config("default", [f"db_path={db}", "training.steps=4"])
    assert hashed.resolved_run_id() in describe_run_start_of(changed)  # names the runs it could have meant
    named = load_config("default", [f"db_path={db}", "run_id=mine"])
    assert describe_run_start_of(named) == "starting a new run mine"


def test_a_second_pipeline_of_the_same_run_stops_before_any_stage(tmp_path: Path) -> None:
    """Two `make run`s at once: the second says who owns the run and exits non-zero, training nothing."""
    db = tmp_path / "kb.duckdb"
    holder = hold(db, "smoke")
    try:
        proc = subprocess.run([sys.executable, "-m", "kernelbench_rl.cli", "pipeline", "--db-path", str(db),
                               "--log-dir", str(tmp_path / "logs")],
                              capture_output=True, text=True, timeout=300, env=ENV, cwd=tmp_path)
    finally:
        holder.kill()
        holder.wait()
    assert proc.returncode == 3, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert f"owned by process {holder.pid}" in proc.stderr and "Traceback" not in proc.stderr
    assert not db.exists() and not (tmp_path / "logs").exists()


def test_sigterm_to_train_stops_it_like_ctrl_c_with_its_checkpoint_and_status(tmp_path: Path) -> None:
    """A supervisor's SIGTERM to the pid it holds: the run is saved at its last finished step and marked stopped,
    not left 'running' without a checkpoint."""
    import time

    from kernelbench_rl.commands.pipeline import SMOKE_OVERRIDES

    db = tmp_path / "kb.duckdb"
    overrides = [o for o in SMOKE_OVERRIDES if not o.startswith(("rag.", "training.checkpoint_every"))]
    proc = subprocess.Popen(
        [sys.executable, "-m", "kernelbench_rl.cli", "train", "--no-progress", *overrides, "run_id=term",
         f"db_path={db}", f"log_dir={tmp_path / 'logs'}", "training.steps=200", "training.checkpoint_every=1000",
         "rag.enabled=false", "sampling.max_tokens=32"],
        cwd=REPO, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        steps: list = []
        while time.monotonic() < deadline and not steps:
            assert proc.poll() is None, proc.communicate()
            time.sleep(2)
            if db.exists():
                try:
                    steps = Store(db).fetchall("SELECT step FROM train_steps WHERE run_id = 'term'", read_only=True)
                except Exception:  # noqa: BLE001 - the run holds the file for a moment: look again
                    steps = []
        assert steps, "no step finished in time"
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err[-2000:]
    assert "stopped by SIGTERM; its state is saved at step" in err
    status, last_step = Store(db).fetchall("SELECT status, last_step FROM runs WHERE run_id = 'term'")[0]
    assert status == "stopped"
    saved = Store(db).fetchall("SELECT max(step) FROM checkpoints WHERE run_id = 'term'")[0][0]
    assert saved == last_step >= 0  # periodic checkpoints were off: this one is the stop's
