"""Resume is exact: a run restarts from its last checkpoint with no row of a later step left behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelbench_rl.compose import build_run_parts
from kernelbench_rl.config import load_config
from kernelbench_rl.evaluation.result import ErrorCategory, EvalResult
from kernelbench_rl.store import Store
from kernelbench_rl.training import run_training

STEP_TABLES = ("train_steps", "rollouts", "rewards", "curriculum_events", "checkpoints")


class Killed(Exception):
    """Stands for SIGKILL: raised after a step's rows land, before the next checkpoint."""


def _config(tmp_path: Path, *extra: str):
    return load_config("default", [
        f"db_path={tmp_path / 'kb.duckdb'}", f"log_dir={tmp_path / 'logs'}", "policy.backend=local",
        "policy.base_model=local:tiny", "policy.lora_rank=4", "training.steps=6", "training.batch_problems=1",
        "sampling.group_size=2", "sampling.max_tokens=4", "training.checkpoint_every=3", "problems.ids=L1/19",
        "problems.levels=[1]", "problems.holdout_fraction=0", "run_id=exact", "rewards.truncated=keep",
        "curriculum.window=1", "curriculum.threshold=0.5", "sft.enabled=false", *extra])


def _judge(well_formed_steps: set[int], calls: list[int]):
    """Answers are well formed only at the given steps (counted by evaluation calls, one per step here)."""
    def judge(problem_ids, responses):
        step = len(calls)
        calls.append(step)
        return [EvalResult(problem_id=pid, candidate_sha256="x", backend="triton", precision="fp32",
                           device_kind="cpu", format_ok=step in well_formed_steps,
                           error_category=ErrorCategory.COMPILE if step in well_formed_steps else ErrorCategory.FORMAT)
                for pid in problem_ids]
    return judge


def test_resume_discards_every_row_written_after_the_checkpoint(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    store = Store(cfg.db_path)

    def kill_after_step_4(result) -> None:
        if result.step == 4:
            raise Killed()

    from kernelbench_rl.training.loop import TrainingRun

    # Steps 0-4; the checkpoint is at step 2; step 4's answers promote format -> compile; killed after step 4.
    run = TrainingRun(build_run_parts(cfg, policy_beside=True), evaluate_fn=_judge({4}, []), on_step=kill_after_step_4)
    with pytest.raises(Killed), run:
        while not run.finished:
            run.step()
    assert store.fetchall("SELECT step, to_value FROM curriculum_events") == [(4, "compile")]
    assert store.fetchall("SELECT max(step) FROM train_steps")[0][0] == 4
    assert [r[0] for r in store.fetchall("SELECT step FROM checkpoints ORDER BY step")] == [2]

    # The resumed attempt starts after step 2 and, this time, no answer is well formed: step 4's promotion
    # (and every row of steps 3 and 4) belongs to a state that no longer exists.
    summary = run_training(build_run_parts(cfg, policy_beside=True), progress=False, evaluate_fn=_judge(set(), []), stop_after_steps=1)
    assert summary.resumed_from_step == 2 and summary.last_step == 3 and summary.stage == "format"
    for table in STEP_TABLES:
        assert store.fetchall(f"SELECT count(*) FROM {table} WHERE step > 3")[0][0] == 0, table
    assert store.fetchall("SELECT count(*) FROM curriculum_events")[0][0] == 0
    assert [r[0] for r in store.fetchall("SELECT step FROM train_steps ORDER BY step")] == [0, 1, 2, 3]
    per_step = 1 * 2  # problems x group size
    assert store.fetchall("SELECT count(*) FROM rollouts")[0][0] == 4 * per_step
    assert store.fetchall("SELECT count(*) FROM rewards")[0][0] == 4 * per_step

    # And the run resumed again is where the live run was: the format stage, no promotion replayed.
    final = run_training(build_run_parts(cfg, policy_beside=True), progress=False, evaluate_fn=_judge(set(), []))
    assert final.resumed_from_step == 3 and final.finished and final.stage == "format"
    assert store.fetchall("SELECT count(*), count(DISTINCT step) FROM train_steps")[0] == (6, 6)
