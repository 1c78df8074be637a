"""Asynchronous training (training.max_steps_off_policy): every step trained once and in order, sampled by
weights at most N steps behind (recorded, and checked against the service's own view), errors raised on
the main thread, and a run killed or stopped with a step prefetched resumes with exact rows."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kernelbench_rl.compose import build_run_parts
from kernelbench_rl.config import load_config
from kernelbench_rl.evaluation.result import ErrorCategory, EvalResult
from kernelbench_rl.store import Store
from kernelbench_rl.training import run_training

try:
    from tests.tinker_standin import StandinServiceClient, StandinTrainingClient
except ImportError:
    from tinker_standin import StandinServiceClient, StandinTrainingClient

REPO = Path(__file__).resolve().parents[1]
STEPS = 5
GROUP = 2
STEP_TABLES = ("train_steps", "rollouts", "rewards", "curriculum_events", "checkpoints")


def _config(tmp_path: Path, lag: int, *extra: str):
    return load_config("default", [
        f"db_path={tmp_path / 'kb.duckdb'}", f"log_dir={tmp_path / 'logs'}", "policy.backend=tinker",
        "policy.base_model=Qwen/Qwen3-8B", "policy.lora_rank=4", f"training.steps={STEPS}",
        "training.batch_problems=1", f"sampling.group_size={GROUP}", "sampling.max_tokens=4",
        "training.checkpoint_every=2", "problems.ids=L1/19", "problems.levels=[1]", "problems.holdout_fraction=0",
        "run_id=async", "rewards.truncated=keep", "curriculum.enabled=false", "sft.enabled=false",
        "training.learning_rate=1.0", f"training.max_steps_off_policy={lag}", *extra])


def _service(monkeypatch: pytest.MonkeyPatch) -> StandinServiceClient:
    from kernelbench_rl.policy import PolicyConfig, make_service_client

    monkeypatch.setenv("TINKER_API_KEY", "tml-test-key")
    return make_service_client(PolicyConfig(backend="tinker", base_model="Qwen/Qwen3-8B"),
                               client_factory=StandinServiceClient)


class Judge:
    """Sample 0 of each group is well formed and sample 1 is not, so every step has a reward spread and
    trains. Each call notes how many optimizer steps the service had run by then."""

    def __init__(self, service: StandinServiceClient, fail_at_call: int | None = None) -> None:
        self.service = service
        self.fail_at_call = fail_at_call
        self.optim_steps_seen: list[int] = []

    def __call__(self, problem_ids, responses):
        if self.fail_at_call is not None and len(self.optim_steps_seen) == self.fail_at_call:
            raise RuntimeError("the evaluator broke")
        self.optim_steps_seen.append(sum(
            kind == "optim_step" for client in self.service.training_clients for kind, _ in client.requests))
        return [EvalResult(problem_id=pid, candidate_sha256="x", backend="triton", precision="fp32", device_kind="cpu",
                           format_ok=i % GROUP == 0,
                           error_category=ErrorCategory.COMPILE if i % GROUP == 0 else ErrorCategory.FORMAT)
                for i, pid in enumerate(problem_ids)]


def _slow_training(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """Training that takes a while, as on the service, so that a prefetched rollout overlaps it."""
    original = StandinTrainingClient.forward_backward

    def forward_backward(self, *args, **kwargs):
        time.sleep(seconds)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(StandinTrainingClient, "forward_backward", forward_backward)


def _step_rows(store: Store) -> list[dict]:
    return store.query("SELECT step, staleness, sampler_step, num_trained, metrics_json FROM train_steps "
                       "ORDER BY step").to_dicts()


@pytest.mark.parametrize("lag", [1, 2])
def test_each_step_is_trained_once_in_order_by_weights_at_most_n_steps_behind(tmp_path, monkeypatch, lag) -> None:
    _slow_training(monkeypatch, 0.3)
    service = _service(monkeypatch)
    judge = Judge(service)
    summary = run_training(build_run_parts(_config(tmp_path, lag), policy_beside=True), progress=False, evaluate_fn=judge, service_client=service)
    assert summary.finished and summary.steps_run == STEPS
    store = Store(tmp_path / "kb.duckdb")
    rows = _step_rows(store)
    assert [r["step"] for r in rows] == list(range(STEPS))
    assert all(r["num_trained"] == GROUP for r in rows), "the judge gives every step a reward spread"
    # Each step trained exactly once: one forward_backward and one optim_step per step, in one client.
    (client,) = service.training_clients
    assert [kind for kind, _ in client.requests] == ["forward_backward", "optim_step"] * STEPS
    # Step k is queued while step k-lag trains (or, first, with the run's starting weights) ...
    expected = [min(step, lag) for step in range(STEPS)]
    assert [r["staleness"] for r in rows] == expected
    assert [r["sampler_step"] for r in rows] == [None if step - s - 1 < 0 else step - s - 1
                                                 for step, s in zip(range(STEPS), expected)]
    # ... and the service agrees: step k (one sample call each) was sampled by weights that had seen
    # k - staleness optimizer steps, never fewer than k - lag.
    assert len(service.sample_log) == STEPS
    assert [step - seen for step, seen in enumerate(service.sample_log)] == expected
    # The datum keeps the sampler's logprobs: the trainer's differ from them exactly when the step is stale.
    for r in rows:
        metrics = json.loads(r["metrics_json"])
        assert metrics["off_policy/staleness"] == r["staleness"]
        kl = metrics["optim/kl_sample_train_v2"]
        assert (kl > 0) if r["staleness"] else (kl == 0), (r["step"], kl)
    # Prefetched rollouts were evaluated while an earlier step trained.
    assert any(seen < step for step, seen in enumerate(judge.optim_steps_seen))
    for table in ("rollouts", "rewards"):
        assert store.fetchall(f"SELECT step, count(*) FROM {table} GROUP BY step ORDER BY step") == [
            (step, GROUP) for step in range(STEPS)], table
    assert [r[0] for r in store.fetchall("SELECT step FROM checkpoints ORDER BY step")] == [1, 3, 4]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logged = {}
    for path in (tmp_path / "logs" / "async" / "tensorboard").glob("events.out.tfevents.*"):
        acc = EventAccumulator(str(path))
        acc.Reload()
        logged.update({e.step: e.value for e in acc.Scalars("off_policy/staleness")})
    assert [logged[step] for step in range(STEPS)] == expected


def test_zero_keeps_the_synchronous_loop(tmp_path, monkeypatch) -> None:
    service = _service(monkeypatch)
    judge = Judge(service)
    threads_before = {t.name for t in threading.enumerate()}
    summary = run_training(build_run_parts(_config(tmp_path, 0), policy_beside=True), progress=False, evaluate_fn=judge, service_client=service)
    assert summary.finished
    assert not any(t.name.startswith("kbrl-prefetch") for t in threading.enumerate() if t.name not in threads_before)
    rows = _step_rows(Store(tmp_path / "kb.duckdb"))
    assert [r["staleness"] for r in rows] == [0] * STEPS
    assert [r["sampler_step"] for r in rows] == [None, 0, 1, 2, 3]
    assert service.sample_log == list(range(STEPS))  # step k sampled by the weights of all k earlier steps
    assert judge.optim_steps_seen == list(range(STEPS))  # and evaluated after step k-1 trained
    assert all(json.loads(r["metrics_json"])["optim/kl_sample_train_v2"] == 0 for r in rows)


def test_an_error_in_a_prefetched_rollout_is_raised_on_the_main_thread(tmp_path, monkeypatch) -> None:
    service = _service(monkeypatch)
    with pytest.raises(RuntimeError, match="the evaluator broke"):
        run_training(build_run_parts(_config(tmp_path, 1), policy_beside=True), progress=False, evaluate_fn=Judge(service, fail_at_call=3),
                     service_client=service)
    store = Store(tmp_path / "kb.duckdb")
    (status, last_step), = store.fetchall("SELECT status, last_step FROM runs")
    assert status == "failed" and last_step == 2
    # Nothing of the step that failed (or of any later one) is left behind.
    for table in ("rollouts", "rewards", "train_steps"):
        assert store.fetchall(f"SELECT DISTINCT step FROM {table} ORDER BY step") == [(0,), (1,), (2,)], table


def test_a_stopped_invocation_prefetches_nothing_it_will_not_train(tmp_path, monkeypatch) -> None:
    service = _service(monkeypatch)
    cfg = _config(tmp_path, 1)
    first = run_training(build_run_parts(cfg, policy_beside=True), progress=False, evaluate_fn=Judge(service), service_client=service, stop_after_steps=2)
    assert first.last_step == 1 and len(service.sample_log) == 2
    store = Store(tmp_path / "kb.duckdb")
    assert store.fetchall("SELECT max(step) FROM rollouts")[0][0] == 1
    second = run_training(build_run_parts(cfg, policy_beside=True), progress=False, evaluate_fn=Judge(service), service_client=service)
    assert second.resumed_from_step == 1 and second.finished
    rows = _step_rows(store)
    # The resumed run samples each step with the weights the live run had queued it with (lag_samplers.json), so its
    # steps are one behind as an uninterrupted run's are (it once sampled its first step with the checkpoint's: 0).
    assert [r["staleness"] for r in rows] == [0, 1, 1, 1, 1]
    assert store.fetchall("SELECT count(*), count(DISTINCT (step, sample_index)) FROM rollouts")[0] == (
        STEPS * GROUP, STEPS * GROUP)


def test_a_promotion_applies_from_the_first_step_queued_after_it(tmp_path, monkeypatch) -> None:
    """Step 1 is queued before step 0's rates promote the stage, so it keeps the old stage; step 2 has the new one.
    A resumed run replays the same state."""
    service = _service(monkeypatch)

    def judge(problem_ids, responses):  # every answer well formed, none compiles: format -> compile at step 0
        return [EvalResult(problem_id=pid, candidate_sha256="x", backend="triton", precision="fp32", device_kind="cpu",
                           format_ok=True, error_category=ErrorCategory.COMPILE) for pid in problem_ids]

    cfg = _config(tmp_path, 1, "curriculum.enabled=true", "curriculum.window=1", "curriculum.threshold=0.5")
    first = run_training(build_run_parts(cfg, policy_beside=True), progress=False, evaluate_fn=judge, service_client=service, stop_after_steps=3)
    assert first.stage == "compile"
    store = Store(tmp_path / "kb.duckdb")
    assert store.fetchall("SELECT step, to_value FROM curriculum_events") == [(0, "compile")]
    assert [r[0] for r in store.fetchall("SELECT stage FROM train_steps ORDER BY step")] == ["format", "format", "compile"]
    assert {r[0] for r in store.fetchall("SELECT DISTINCT stage FROM rollouts WHERE step = 1")} == {"format"}
    second = run_training(build_run_parts(cfg, policy_beside=True), progress=False, evaluate_fn=judge, service_client=service)
    assert second.finished and second.stage == "compile"
    assert [r[0] for r in store.fetchall("SELECT stage FROM train_steps ORDER BY step")] == [
        "format", "format", "compile", "compile", "compile"]


# -- real processes: SIGKILL and SIGTERM with a step prefetched ------------------------------------
def _cli(tmp_path: Path, steps: int) -> list[str]:
    return [sys.executable, "-m", "kernelbench_rl.cli", "train", "--config", "default", "--no-progress",
            f"db_path={tmp_path / 'kb.duckdb'}", f"log_dir={tmp_path / 'logs'}", "policy.backend=local",
            "policy.base_model=local:tiny", "policy.lora_rank=4", f"training.steps={steps}",
            "training.batch_problems=2", f"sampling.group_size={GROUP}", "sampling.max_tokens=8",
            "training.checkpoint_every=1", "problems.ids=L1/19,L1/20", "problems.levels=[1]",
            "problems.holdout_fraction=0", "eval.device=cpu", "run_id=async-cli", "rewards.truncated=keep",
            "training.max_steps_off_policy=1"]


def _prefetched(db: Path, pid: int) -> bool:
    """Process `pid` owns the run (so it has dropped what an earlier attempt left), and a step's rollouts
    are in while that step is not trained yet."""
    if not db.exists():
        return False
    try:
        owner, rolled, trained = Store(db, busy_timeout_s=1).fetchall(
            "SELECT (SELECT max(owner_pid) FROM runs), (SELECT max(step) FROM rollouts), "
            "(SELECT max(step) FROM train_steps)", read_only=True)[0]
    except Exception:  # noqa: BLE001 - the run holds the file (or has not made the tables): look again
        return False
    return owner == pid and rolled is not None and trained is not None and rolled > trained


def _start_and_wait_for_prefetch(tmp_path: Path, steps: int) -> subprocess.Popen:
    proc = subprocess.Popen(_cli(tmp_path, steps), cwd=REPO, env={**os.environ, "PYTHONUNBUFFERED": "1"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 240
    while not _prefetched(tmp_path / "kb.duckdb", proc.pid):
        if proc.poll() is not None:
            pytest.fail(f"training exited early ({proc.returncode}): {proc.stderr.read()[-3000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail("no step was prefetched in time")
        time.sleep(0.05)
    return proc


def _assert_exact(store: Store, steps: int) -> None:
    assert [r[0] for r in store.fetchall("SELECT step FROM train_steps ORDER BY step")] == list(range(steps))
    expected = steps * 2 * GROUP
    for table in ("rollouts", "rewards"):
        rows = store.fetchall(f"SELECT count(*), count(DISTINCT (step, problem_id, sample_index, turn)) FROM {table}")
        assert rows[0] == (expected, expected), table
    assert [r[0] for r in store.fetchall("SELECT step FROM checkpoints ORDER BY step")] == list(range(steps))
    assert all(s <= 1 for (s,) in store.fetchall("SELECT staleness FROM train_steps"))


def test_sigkill_then_sigterm_with_a_step_prefetched_leave_exact_rows(tmp_path: Path) -> None:
    """One run killed (SIGKILL) and then stopped (SIGTERM), each while a step is prefetched and not trained,
    and finished by a third invocation: every step once, every row once."""
    steps = 5
    proc = _start_and_wait_for_prefetch(tmp_path, steps)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()
    store = Store(tmp_path / "kb.duckdb")
    last_trained = store.fetchall("SELECT max(step) FROM train_steps")[0][0]
    assert last_trained < steps - 1, "the run finished before it could be killed"
    assert store.fetchall("SELECT max(step) FROM rollouts")[0][0] > last_trained  # the killed run's prefetch

    # The resumed run drops those rows, and is itself stopped with a step prefetched.
    proc = _start_and_wait_for_prefetch(tmp_path, steps)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-3000:]
    (status, last_step), = store.fetchall("SELECT status, last_step FROM runs")
    # The signal may land while a step saves its checkpoint: that step did not finish (last_step None: none did).
    last = -1 if last_step is None else last_step
    assert status == "stopped" and last < steps - 1
    assert store.fetchall("SELECT max(step) FROM checkpoints")[0][0] == last_step
    for table in STEP_TABLES:  # the prefetched, untrained step (and any unfinished one) left nothing behind
        assert store.fetchall(f"SELECT count(*) FROM {table} WHERE step > ?", [last])[0][0] == 0, table

    rerun = subprocess.run(_cli(tmp_path, steps), cwd=REPO, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stdout[-2000:] + rerun.stderr[-3000:]
    _assert_exact(store, steps)


def test_a_step_sampled_before_a_level_promotion_never_counts_for_the_new_level(tmp_path, monkeypatch) -> None:
    """Level 1 always right, levels 2 and 3 always wrong. Step 0 promotes level 1 -> 2; step 1 was queued before
    that and holds level 1's problems: it must not count as level 2's (its level-1 rate of 1.0 once promoted
    level 2 -> 3 although level 2's rate is 0)."""
    service = _service(monkeypatch)
    third = next(p.stem for p in (Path(__file__).resolve().parents[1] / "KernelBench" / "level3").glob("*.py"))

    def judge(problem_ids, responses):
        return [EvalResult(problem_id=pid, candidate_sha256="x", backend="triton", precision="fp32", device_kind="cpu",
                           format_ok=True, compiled=True, correct=pid.startswith("L1/"),
                           error_category=ErrorCategory.OK if pid.startswith("L1/") else ErrorCategory.MISMATCH)
                for pid in problem_ids]

    cfg = _config(tmp_path, 1, "curriculum.enabled=true", "curriculum.start_stage=speed", "curriculum.window=1",
                  "curriculum.demote_threshold=null", "problems.levels=[1,2,3]",
                  f"problems.ids=[L1/19,L2/1,L3/{third.split('_')[0]}]")
    run_training(build_run_parts(cfg, policy_beside=True), progress=False, evaluate_fn=judge, service_client=service)
    store = Store(tmp_path / "kb.duckdb")
    assert store.fetchall("SELECT step, kind, from_value, to_value FROM curriculum_events") == [(0, "level", "1", "2")]
    assert [r[0] for r in store.fetchall("SELECT level FROM train_steps ORDER BY step")] == [1, 1, 2, 2, 2]
