"""Resume is exact: a run restarts from its last checkpoint with no row of a later step left behind."""

from __future__ import annotations

import json
import subprocess
import sys
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


# -- the curriculum and the samples of a resumed asynchronous run are the live run's -----------------------------
# A script run as its own process: trains the run with a judge that depends only on the answer's text (so the same
# answers get the same verdicts in any process) and, when asked, sends itself a real signal right after a step.
RUN_SCRIPT = r'''
import hashlib, os, signal, sys
from kernelbench_rl.compose import build_run_parts
from kernelbench_rl.config import load_config
from kernelbench_rl.evaluation.result import ErrorCategory, EvalResult
from kernelbench_rl.training import run_training
from kernelbench_rl.training.loop import TrainingRun

db, logs, kill_after, signame = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]

def judge(problem_ids, responses):
    out = []
    for pid, text in zip(problem_ids, responses):
        h = int(hashlib.sha256(text.encode()).hexdigest(), 16) % 4
        out.append(EvalResult(problem_id=pid, candidate_sha256="x", backend="triton", precision="fp32",
                              device_kind="cpu", format_ok=h > 0, compiled=h > 1, correct=h > 2,
                              error_category=[ErrorCategory.FORMAT, ErrorCategory.COMPILE, ErrorCategory.MISMATCH,
                                              ErrorCategory.OK][h]))
    return out

cfg = load_config("default", [
    f"db_path={db}", f"log_dir={logs}", "policy.backend=local", "policy.base_model=local:tiny", "policy.lora_rank=4",
    "training.steps=8", "training.batch_problems=2", "sampling.group_size=4", "sampling.max_tokens=6",
    "sampling.temperature=1.0", "training.checkpoint_every=1", "training.learning_rate=0.05",
    "problems.ids=L1/19,L1/20", "problems.levels=[1]", "problems.holdout_fraction=0", "run_id=resume-exact",
    "rewards.truncated=keep", "sft.enabled=false", "curriculum.window=1", "curriculum.threshold=1.0",
    "curriculum.max_steps_per_stage=1", "training.max_steps_off_policy=1"])

def on_step(result):
    if result.step == kill_after:
        os.kill(os.getpid(), getattr(signal, signame))

run = TrainingRun(build_run_parts(cfg, policy_beside=True), evaluate_fn=judge, on_step=on_step)
with run:
    while not run.finished:
        run.step()
'''

# Columns that say when or how long, not what: they differ between any two runs.
_WHEN = {"created_at", "updated_at", "sampling_s", "eval_s", "train_s"}


def _rows(db: Path, table: str) -> list[tuple]:
    store = Store(db)
    columns = [r[0] for r in store.fetchall("SELECT column_name FROM information_schema.columns WHERE table_name = ? "
                                            "ORDER BY ordinal_position", [table]) if r[0] not in _WHEN]
    rows = store.dicts(f"SELECT {', '.join(columns)} FROM {table} ORDER BY ALL")
    for row in rows:
        if "metrics_json" in row and row["metrics_json"]:
            metrics = json.loads(row["metrics_json"])
            row["metrics_json"] = {k: v for k, v in metrics.items() if not k.startswith(("time/", "throughput/"))}
    return [tuple(sorted(row.items())) for row in rows]


def _run(tmp: Path, kill_after: int = -1, signame: str = "SIGKILL") -> subprocess.CompletedProcess:
    tmp.mkdir(parents=True, exist_ok=True)
    return subprocess.run([sys.executable, "-c", RUN_SCRIPT, str(tmp / "kb.duckdb"), str(tmp / "logs"),
                           str(kill_after), signame], cwd=Path(__file__).resolve().parents[1],
                          capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize(("kill_after", "signame"), [(2, "SIGKILL"), (4, "SIGINT")])
def test_a_resumed_asynchronous_run_promotes_and_samples_as_the_live_one(tmp_path: Path, kill_after: int,
                                                                        signame: str) -> None:
    """A real process signals itself right after step `kill_after`, whose rates promoted the stage (a stage a step:
    window 1, one judged step each); the re-run resumes from that step's checkpoint. With one step of lag the live
    run had queued the next step with the weights and the stage of the step before: the resumed run must too, so
    its promotions, samples and every row equal those of a run never interrupted. (It sampled that step with the
    checkpoint's own weights and its new stage: the promotion landed a step early and the rewards differed.)"""
    live = _run(tmp_path / "live")
    assert live.returncode == 0, live.stderr[-3000:]
    killed = _run(tmp_path / "cut", kill_after, signame)
    assert killed.returncode != 0, "the run finished before its signal"
    cut = Store(tmp_path / "cut" / "kb.duckdb")
    assert cut.fetchall("SELECT max(step) FROM checkpoints")[0][0] == kill_after
    assert cut.fetchall("SELECT count(*) FROM curriculum_events WHERE step = ?", [kill_after])[0][0] == 1
    resumed = _run(tmp_path / "cut")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    live_db, cut_db = tmp_path / "live" / "kb.duckdb", tmp_path / "cut" / "kb.duckdb"
    assert Store(live_db).fetchall("SELECT step, to_value FROM curriculum_events ORDER BY step") == \
        cut.fetchall("SELECT step, to_value FROM curriculum_events ORDER BY step")
    for table in ("curriculum_events", "train_steps", "rollouts", "rewards"):
        assert _rows(cut_db, table) == _rows(live_db, table), table
