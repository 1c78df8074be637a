"""Resume through the orchestrator: SIGKILL the pipeline flow process during training, start the
same command again, and check that no row is lost or duplicated and the steps are contiguous."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from kernelbench_rl.store import Store
from prefect_session import shared_prefect_api

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
RUN_ID = "resume-test"
STEPS = 5
BATCH_PROBLEMS = 2
GROUP_SIZE = 2
ROWS_PER_STEP = BATCH_PROBLEMS * GROUP_SIZE  # single turn: one rollout row per sample


@pytest.fixture(scope="session")
def prefect_api() -> Iterator[str]:
    with shared_prefect_api() as url:
        yield url


def _pipeline_cmd(tmp_path: Path) -> list[str]:
    return [sys.executable, "-m", "flows.pipeline", "--run-id", RUN_ID, "--train-steps", str(STEPS),
            "--db-path", str(tmp_path / "kb.duckdb"), "--log-dir", str(tmp_path / "logs"), "--no-index",
            "--num-problems", "3", "--eval-samples", "1", "--eval-max-problems", "1",
            f"sampling.group_size={GROUP_SIZE}", "sampling.max_tokens=32",
            f"training.batch_problems={BATCH_PROBLEMS}", "rag.enabled=false", "sft.enabled=false"]


def _env(tmp_path: Path, api_url: str) -> dict[str, str]:
    # The flow processes report to the session's test server (no ephemeral server per process).
    return {**os.environ, "PREFECT_API_URL": api_url, "PREFECT_HOME": str(tmp_path / "prefect"),
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1",
            "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180", "PYTHONUNBUFFERED": "1"}


def _progress(db: Path) -> tuple[int, int]:
    """(steps recorded, rollout rows of a step still under way)."""
    if not db.exists():
        return 0, 0
    try:
        row = Store(db).fetchall(
            "SELECT (SELECT count(*) FROM train_steps WHERE run_id = $run), "
            "(SELECT count(*) FROM rollouts WHERE run_id = $run AND step NOT IN "
            "(SELECT step FROM train_steps WHERE run_id = $run))", {"run": RUN_ID}, read_only=True)[0]
    except duckdb.CatalogException:  # the flow has created the file but not yet its tables
        return 0, 0
    return int(row[0]), int(row[1])


def test_killed_pipeline_resumes_without_lost_or_duplicate_rows(prefect_api: str, tmp_path: Path) -> None:
    db = tmp_path / "kb.duckdb"
    env = _env(tmp_path, prefect_api)
    first_log = tmp_path / "first.log"
    with first_log.open("wb") as out:
        proc = subprocess.Popen(_pipeline_cmd(tmp_path), cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            deadline = time.monotonic() + 240
            while time.monotonic() < deadline:
                if proc.poll() is not None:
                    pytest.fail(f"the flow exited ({proc.returncode}) before it was killed:\n"
                                f"{first_log.read_text(errors='replace')[-4000:]}")
                done, partial = _progress(db)
                # Best: step 1 has landed and step 2 has written some of its rollouts (stale rows the
                # re-done step must replace); a missed window still kills a run with steps to go.
                if (done >= 2 and partial > 0) or done >= STEPS - 2:
                    break
                time.sleep(0.3)
            else:
                pytest.fail(f"step 1 never landed:\n{first_log.read_text(errors='replace')[-4000:]}")
        finally:
            os.killpg(proc.pid, signal.SIGKILL)  # the flow and everything it started (evaluator workers)
            proc.wait()

    store = Store(db)
    # Resume trusts the newest checkpoint row, which lands after its step's train_steps row: a kill
    # between the two re-does that step, so the checkpoint (not train_steps) says where the run resumes.
    killed_at = store.fetchall("SELECT max(step) FROM checkpoints WHERE run_id = ?", [RUN_ID])[0][0]
    assert killed_at < STEPS - 1, "the run finished before it could be killed"
    assert store.fetchall("SELECT status FROM runs WHERE run_id = ?", [RUN_ID])[0][0] == "running"

    second = subprocess.run(_pipeline_cmd(tmp_path), cwd=REPO, env=env, capture_output=True, text=True, timeout=400)
    output = second.stdout + second.stderr
    assert second.returncode == 0, output[-6000:]
    assert f"resumes after checkpoint step {killed_at}" in output, output[-6000:]

    # Steps 0..N-1, each exactly once.
    steps = [r[0] for r in store.fetchall("SELECT step FROM train_steps WHERE run_id = ? ORDER BY step", [RUN_ID])]
    assert steps == list(range(STEPS))
    # Every step holds its full batch of rollouts and rewards, each natural key once, and nothing else.
    for table in ("rollouts", "rewards"):
        per_step = store.fetchall(
            f"SELECT step, count(*), count(DISTINCT (problem_id, sample_index, turn)) FROM {table} "
            "WHERE run_id = ? GROUP BY step ORDER BY step", [RUN_ID])
        assert per_step == [(s, ROWS_PER_STEP, ROWS_PER_STEP) for s in range(STEPS)], table
    unmatched = store.fetchall(
        "SELECT count(*) FROM rollouts r FULL OUTER JOIN rewards w USING (run_id, step, problem_id, sample_index, turn) "
        "WHERE r.run_id = ? AND (r.step IS NULL OR w.step IS NULL)", [RUN_ID])[0][0]
    assert unmatched == 0
    # A re-done step samples the same problems it sampled before the kill (deterministic per step).
    assert store.fetchall("SELECT count(DISTINCT problem_id) FROM rollouts WHERE run_id = ? AND step = ?",
                          [RUN_ID, killed_at + 1])[0][0] == BATCH_PROBLEMS
    missing_blobs = store.fetchall(
        "SELECT count(*) FROM rollouts r LEFT JOIN blobs b ON b.sha256 = r.completion_sha256 "
        "WHERE r.run_id = ? AND b.sha256 IS NULL", [RUN_ID])[0][0]
    assert missing_blobs == 0

    checkpoints = store.query("SELECT name, step, state_path, sampler_path FROM checkpoints WHERE run_id = ? "
                              "ORDER BY step", [RUN_ID]).to_dicts()
    assert [c["step"] for c in checkpoints] == list(range(STEPS))  # the smoke overrides checkpoint every step
    # rows keep paths relative to the run's folder (a copied runs/ resumes from its own files)
    run_dir = tmp_path / "logs" / RUN_ID
    assert all(not Path(c["state_path"]).is_absolute() for c in checkpoints)
    assert all((run_dir / c["state_path"]).exists() and (run_dir / c["sampler_path"]).exists() for c in checkpoints)

    run = store.query("SELECT status, last_step FROM runs WHERE run_id = ?", [RUN_ID]).to_dicts()
    assert run == [{"status": "finished", "last_step": STEPS - 1}]
    final = f"step_{STEPS - 1:06d}"
    assert store.fetchall("SELECT count(*) FROM eval_reports WHERE run_id = ? AND checkpoint = ? AND level IS NULL",
                          [RUN_ID, final])[0][0] == 1


# Run the curriculum flow in a fresh process; with CRASH_AT_STEP set, the process dies abruptly
# (os._exit, as a SIGKILL would) after that step's checkpoint is saved and before its train_steps row.
_CURRICULUM_SCRIPT = """
import os, sys
from kernelbench_rl.training.metrics import TensorBoardLogger

crash_at = os.environ.get("CRASH_AT_STEP")
if crash_at is not None:
    real_log = TensorBoardLogger.log

    def log_then_die(self, step, *args, **kwargs):
        if step == int(crash_at):
            os._exit(137)
        return real_log(self, step, *args, **kwargs)

    TensorBoardLogger.log = log_then_die

from flows.curriculum import curriculum

db, logs, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
curriculum(run_id="window-test", db_path=db, log_dir=logs, train_steps=steps, levels=[1], num_problems=2,
           overrides=["policy.backend=local", "policy.base_model=local:tiny", "policy.lora_rank=4",
                      "sampling.group_size=2", "sampling.max_tokens=16", "training.batch_problems=2",
                      "training.checkpoint_every=1", "eval.device=cpu", "eval.size=small", "rag.enabled=false"])
"""


def test_kill_between_checkpoint_and_step_row_loses_nothing(prefect_api: str, tmp_path: Path) -> None:
    db = tmp_path / "kb.duckdb"
    cmd = [sys.executable, "-c", _CURRICULUM_SCRIPT, str(db), str(tmp_path / "logs"), "3"]
    env = _env(tmp_path, prefect_api)
    crashed = subprocess.run(cmd, cwd=REPO, env={**env, "CRASH_AT_STEP": "1"}, capture_output=True, text=True,
                             timeout=300)
    assert crashed.returncode == 137, (crashed.stdout + crashed.stderr)[-4000:]
    store = Store(db)
    # The checkpoint row is written after the step's rows, so the crashed step has neither.
    assert [r[0] for r in store.fetchall("SELECT step FROM checkpoints ORDER BY step")] == [0]
    assert [r[0] for r in store.fetchall("SELECT step FROM train_steps ORDER BY step")] == [0]

    resumed = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, (resumed.stdout + resumed.stderr)[-4000:]
    assert [r[0] for r in store.fetchall("SELECT step FROM train_steps ORDER BY step")] == [0, 1, 2]
    per_step = store.fetchall("SELECT step, count(*) FROM rollouts GROUP BY step ORDER BY step")
    assert per_step == [(0, 4), (1, 4), (2, 4)]
