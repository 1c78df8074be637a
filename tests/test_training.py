"""The GRPO loop: credit assignment, datums, a real local-backend run, and kill -9 + resume via the CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernelbench_rl.compose import build_run_parts
from kernelbench_rl.config import load_config
from kernelbench_rl.envs import EnvSpec
from kernelbench_rl.envs.kernel_env import EnvGroupBuilder
from kernelbench_rl.evaluation.result import ErrorCategory, EvalResult, Flag
from kernelbench_rl.problems import get_problem
from kernelbench_rl.store import Store
from kernelbench_rl.training import build_datums, run_training, sample_to_datum, score_group
from kernelbench_rl.training.metrics import step_metrics
from kernelbench_rl.training.rollouts import GroupRollout

REPO = Path(__file__).resolve().parents[1]


def result(category=ErrorCategory.FORMAT, **kw) -> EvalResult:
    fields = dict(problem_id="L1/19", candidate_sha256="x", backend="triton", precision="fp32", device_kind="cuda")
    fields.update(kw)
    return EvalResult(error_category=category, **fields)


COMPILED = dict(category=ErrorCategory.MISMATCH, format_ok=True, compiled=True)
CORRECT = dict(category=ErrorCategory.OK, format_ok=True, compiled=True, correct=True, speedup=1.0)


def finished_group(per_sample_results: list[list[dict]], turns: int) -> GroupRollout:
    builder = EnvGroupBuilder(get_problem("L1/19"), len(per_sample_results), EnvSpec(turns=turns))
    envs = builder()
    for env, results in zip(envs, per_sample_results):
        for r in results:
            env.add_completion("p", [1, 2, 3], "c", [4, 5], [-0.5, -0.25], "stop")
            env.add_result(result(**r))
    return GroupRollout(0, builder, envs)


def test_kevin_returns_are_discounted_and_baselined_per_turn() -> None:
    group = finished_group([
        [{}, COMPILED, CORRECT],            # sample 0 improves over its turns
        [COMPILED, COMPILED, COMPILED],     # sample 1 stays compiled
    ], turns=3)
    samples = score_group(group, "correctness", gamma=0.4, baseline="loo", speedup_cap=8.0)
    by = {(s.sample_index, s.turn): s for s in samples}
    r0 = [by[0, t].reward for t in range(3)]
    assert r0[0] == 0.0 and r0[1] == pytest.approx(0.2) and r0[2] == pytest.approx(1.0)
    assert by[0, 0].return_value == pytest.approx(0.0 + 0.4 * 0.2 + 0.16 * 1.0)
    assert by[0, 2].return_value == pytest.approx(1.0)
    # leave-one-out with two samples: my return minus the other's return at the same turn
    for t in range(3):
        assert by[0, t].advantage == pytest.approx(by[0, t].return_value - by[1, t].return_value)
        assert by[0, t].advantage == pytest.approx(-by[1, t].advantage)
    assert all(s.trainable for s in samples)


def test_constant_groups_are_dropped_after_metrics() -> None:
    group = finished_group([[{}], [{}], [{}]], turns=1)  # three format failures: no signal
    samples = score_group(group, "format", gamma=0.4, baseline="loo", speedup_cap=8.0)
    assert all(s.dropped_constant and not s.trainable for s in samples)
    assert build_datums(samples) == []
    metrics, _ = step_metrics([group], samples)
    assert metrics["num_samples"] == 3 and metrics["num_trained"] == 0 and metrics["num_dropped_constant"] == 3
    assert metrics["reward_mean"] == 0.0 and metrics["format_rate"] == 0.0


def test_hacks_and_unverified_speedups_in_metrics() -> None:
    hack = dict(category=ErrorCategory.OK, format_ok=True, compiled=True, correct=True, speedup=3.0, flags=[Flag.HACK.value])
    fishy = dict(category=ErrorCategory.OK, format_ok=True, compiled=True, correct=True, speedup=40.0,
                 flags=[Flag.EXCESSIVE_SPEEDUP.value])
    group = finished_group([[hack], [fishy], [CORRECT], [COMPILED]], turns=1)
    samples = score_group(group, "speed", gamma=0.4, baseline="group_mean", speedup_cap=8.0)
    metrics, speedups = step_metrics([group], samples)
    assert metrics["hack_rate"] == 0.25 and metrics["correct_rate"] == 0.25  # only the honest correct one
    assert speedups == [1.0]
    assert samples[0].reward == 0.0
    assert sum(s.advantage for s in samples) == pytest.approx(0.0)


def test_speedup_geomean_over_counted_speedups_only() -> None:
    fast = {**CORRECT, "speedup": 2.0}
    faster = {**CORRECT, "speedup": 8.0}
    fishy = {**CORRECT, "speedup": 40.0, "flags": [Flag.EXCESSIVE_SPEEDUP.value]}
    group = finished_group([[fast], [faster], [fishy], [COMPILED]], turns=1)
    metrics, speedups = step_metrics([group], score_group(group, "speed", gamma=0.4, baseline="loo", speedup_cap=8.0))
    assert sorted(speedups) == [2.0, 8.0]
    assert metrics["speedup_geomean"] == pytest.approx(4.0)
    assert metrics["fast_1.5_rate"] == 0.5 and metrics["fast_5_rate"] == 0.25
    compiled_only = finished_group([[COMPILED], [COMPILED]], turns=1)
    metrics, _ = step_metrics([compiled_only], score_group(compiled_only, "speed", gamma=0.4, baseline="loo",
                                                           speedup_cap=8.0))
    assert "speedup_geomean" not in metrics


def test_datum_matches_the_cookbook_layout() -> None:
    group = finished_group([[COMPILED], [{}]], turns=1)
    sample = score_group(group, "compile", gamma=0.4, baseline="loo", speedup_cap=8.0)[0]
    datum = sample_to_datum(sample)
    assert datum.model_input.to_ints() == [1, 2, 3, 4]  # prompt + completion[:-1]
    inputs = {k: v.tolist() for k, v in ((k, t.to_torch()) for k, t in datum.loss_fn_inputs.items())}
    assert inputs["target_tokens"] == [2, 3, 4, 5]
    assert inputs["logprobs"] == pytest.approx([0.0, 0.0, -0.5, -0.25])
    assert inputs["advantages"] == pytest.approx([0.0, 0.0, sample.advantage, sample.advantage])
    assert sample.advantage > 0


def _overrides(tmp_path: Path, steps: int) -> list[str]:
    return [f"db_path={tmp_path / 'kb.duckdb'}", f"log_dir={tmp_path / 'logs'}", "policy.backend=local",
            "policy.base_model=local:tiny", "policy.lora_rank=4", f"training.steps={steps}",
            "training.batch_problems=2", "sampling.group_size=2", "sampling.max_tokens=8",
            "training.checkpoint_every=1", "problems.ids=L1/19,L1/20", "problems.levels=[1]",
            "problems.holdout_fraction=0", "eval.device=cpu", "run_id=test-run",
            # 8 tokens cut every completion; these tests are about the loop, so the verdicts count as they are
            "rewards.truncated=keep"]


def test_loop_trains_when_rewards_differ(tmp_path: Path) -> None:
    """The policy and store are real; the random tiny model never writes a kernel, so a stand-in
    judge (honouring Evaluator.evaluate_responses) rewards completions by a token pattern instead."""
    # Four samples a group: sampling is seeded per request (a resumed run samples what the live one did), so which
    # groups mix is fixed by the seeds; with two a group, every group of both steps came out constant.
    cfg = load_config("default", _overrides(tmp_path, 2) + ["curriculum.enabled=false", "sampling.group_size=4"])

    def judge(problem_ids, responses):
        # even-length responses count as "well formed": a property the tiny model varies on
        return [result(format_ok=len(r) % 2 == 0, problem_id=pid) for pid, r in zip(problem_ids, responses)]

    summary = run_training(build_run_parts(cfg, policy_beside=True), progress=False, evaluate_fn=judge)
    assert summary.steps_run == 2 and summary.finished
    store = Store(cfg.db_path)
    steps = store.query("SELECT step, loss, num_trained, metrics_json FROM train_steps ORDER BY step").to_dicts()
    assert [s["step"] for s in steps] == [0, 1]
    trained = [s for s in steps if s["num_trained"] > 0]
    assert trained, "expected at least one step with differing rewards over 8 samples"
    assert all(s["loss"] is not None for s in trained)
    rewards = store.query("SELECT reward, advantage, components_json FROM rewards").to_dicts()
    assert len(rewards) == 2 * 2 * 4 and {r["reward"] for r in rewards} <= {0.0, 1.0}
    # 8 tokens cut every completion: each rollout says so, and so do the step rows, TensorBoard and the summary
    assert store.fetchall("SELECT DISTINCT stop_reason FROM rollouts") == [("length",)]
    assert [r[0] for r in store.fetchall("SELECT truncated_rate FROM train_steps ORDER BY step")] == [1.0, 1.0]
    assert all(json.loads(r["components_json"])["truncated"] for r in rewards)
    assert summary.truncated_rate == 1.0
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logged = []
    for path in (tmp_path / "logs" / "test-run" / "tensorboard").glob("events.out.tfevents.*"):
        acc = EventAccumulator(str(path))
        acc.Reload()
        if "truncated_rate" in acc.Tags()["scalars"]:
            logged += [e.value for e in acc.Scalars("truncated_rate")]
    assert logged == [1.0, 1.0]


def _train_cmd(tmp_path: Path, steps: int) -> list[str]:
    return [sys.executable, "-m", "kernelbench_rl.cli", "train", "--config", "default", "--no-progress",
            *_overrides(tmp_path, steps)]


def test_kill_and_resume_via_cli(tmp_path: Path) -> None:
    """SIGKILL `kernelbench-rl train` after step 0's rows land; the same command resumes with no duplicates."""
    db = tmp_path / "kb.duckdb"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(_train_cmd(tmp_path, 3), cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"training exited early ({proc.returncode}): {proc.stdout.read().decode()[-3000:]}")
            # A step's checkpoint row is its last write, so once it exists the step is complete.
            if db.exists() and Store(db).count("checkpoints") >= 1:
                break
            time.sleep(0.2)
        else:
            pytest.fail("step 0 never landed")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    store = Store(db)
    # The resume starts after the newest checkpoint; a later step's rows (a step trained but not yet
    # checkpointed, or rolled out ahead by the asynchronous loop) are the killed attempt's and go.
    done_before = store.fetchall("SELECT max(step) FROM checkpoints")[0][0]
    assert done_before < 2, "the run finished before it could be killed"
    assert store.fetchall("SELECT status FROM runs WHERE run_id = 'test-run'")[0][0] == "running"

    rerun = subprocess.run(_train_cmd(tmp_path, 3), cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stdout[-2000:] + rerun.stderr[-3000:]
    assert f"resumed after step {done_before}" in rerun.stdout

    assert [r[0] for r in store.fetchall("SELECT step FROM train_steps ORDER BY step")] == [0, 1, 2]
    expected = 3 * 2 * 2  # steps x problems x group size, one turn
    for table in ("rollouts", "rewards"):
        rows = store.fetchall(f"SELECT count(*), count(DISTINCT (step, problem_id, sample_index, turn)) FROM {table}")[0]
        assert rows == (expected, expected), table
    checkpoints = store.query("SELECT step, state_path, sampler_path FROM checkpoints ORDER BY step").to_dicts()
    assert [c["step"] for c in checkpoints] == [0, 1, 2]
    run_dir = tmp_path / "logs" / "test-run"  # rows keep paths relative to the run's folder
    assert all(not Path(c["state_path"]).is_absolute() for c in checkpoints)
    assert all((run_dir / c["state_path"]).exists() and (run_dir / c["sampler_path"]).exists() for c in checkpoints)
    run = store.query("SELECT status, last_step, stage, config_json FROM runs").to_dicts()[0]
    assert run["status"] == "finished" and run["last_step"] == 2 and run["stage"] == "format"
    assert json.loads(run["config_json"])["training"]["steps"] == 3
    # every rollout's prompt and completion are stored blobs
    missing = store.fetchall("SELECT count(*) FROM rollouts r LEFT JOIN blobs b ON b.sha256 = r.prompt_sha256 "
                             "WHERE b.sha256 IS NULL")[0][0]
    assert missing == 0
    events = list((tmp_path / "logs" / "test-run" / "tensorboard").glob("events.out.tfevents.*"))
    assert events, "no TensorBoard event files"

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    steps_logged = set()
    for path in events:
        acc = EventAccumulator(str(path))
        acc.Reload()
        if "reward_mean" in acc.Tags()["scalars"]:
            steps_logged |= {e.step for e in acc.Scalars("reward_mean")}
    assert steps_logged == {0, 1, 2}


def test_tinker_backend_is_one_config_change_away(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same loop on the `tinker` backend (the SDK's interface, served by the stand-in because
    the service cannot be reached from tests): trains, checkpoints to tinker:// paths, resumes."""
    try:
        from tests.tinker_standin import StandinServiceClient
    except ImportError:
        from tinker_standin import StandinServiceClient
    from kernelbench_rl.policy import PolicyConfig, make_service_client

    monkeypatch.setenv("TINKER_API_KEY", "tml-test-key")
    overrides = [o for o in _overrides(tmp_path, 2) if not o.startswith(("policy.", "run_id"))]
    cfg = load_config("default", overrides + ["policy.backend=tinker", "run_id=tinker-run"])

    def service():
        return make_service_client(PolicyConfig(backend="tinker", base_model="Qwen/Qwen3-8B"),
                                   client_factory=StandinServiceClient)

    def judge(problem_ids, responses):
        return [result(format_ok=len(r) % 2 == 0, problem_id=pid) for pid, r in zip(problem_ids, responses)]

    first = run_training(build_run_parts(cfg, policy_beside=True), progress=False, evaluate_fn=judge, service_client=service(), stop_after_steps=1)
    assert first.steps_run == 1 and not first.finished
    second = run_training(build_run_parts(cfg, policy_beside=True), progress=False, evaluate_fn=judge, service_client=service())
    assert second.resumed_from_step == 0 and second.finished
    store = Store(cfg.db_path)
    checkpoints = store.query("SELECT step, backend, state_path, sampler_path FROM checkpoints ORDER BY step").to_dicts()
    assert [(c["step"], c["backend"]) for c in checkpoints] == [(0, "tinker"), (1, "tinker")]
    assert all(c["state_path"].startswith("tinker://") for c in checkpoints)
    steps = store.query("SELECT step, num_trained, loss FROM train_steps ORDER BY step").to_dicts()
    assert [s["step"] for s in steps] == [0, 1]
    assert any(s["num_trained"] > 0 and s["loss"] is not None for s in steps)


# -- the step's groups, tokens and abstentions, as tinker-cookbook reports them ---------------------------------
def _two_problem_groups(first: list[dict], second: list[dict]) -> list[GroupRollout]:
    groups = []
    for index, (problem, per_sample) in enumerate((("L1/19", first), ("L1/20", second))):
        builder = EnvGroupBuilder(get_problem(problem), len(per_sample), EnvSpec(turns=1))
        envs = builder()
        for env, r in zip(envs, per_sample, strict=True):
            env.add_completion("p", [1, 2, 3], "c", [4, 5], [-0.5, -0.25], "stop")
            env.add_result(result(**{"problem_id": problem, **r}))
        groups.append(GroupRollout(index, builder, envs))
    return groups


def test_group_fractions_tokens_and_abstentions_per_problem() -> None:
    infra = dict(category=ErrorCategory.INFRA)
    unsupported = dict(category=ErrorCategory.UNSUPPORTED, format_ok=True)
    mixed, all_good = [CORRECT, COMPILED, CORRECT, infra], [CORRECT, CORRECT, CORRECT, unsupported]
    groups = _two_problem_groups(mixed, all_good)
    samples = [s for g in groups for s in score_group(g, "correctness", gamma=0.4, baseline="loo", speedup_cap=8.0)]
    metrics, _ = step_metrics(groups, samples, "correctness")
    # L1/20: three right answers and one the interpreter could not run (scored as wrong: abstaining never pays), so
    # its rewards differ and it trains too
    assert metrics["by_group/frac_mixed"] == 1.0 and metrics["by_group/num_groups"] == 2
    assert metrics["abstain_rate/L1/19"] == 0.25 and metrics["abstain_rate/L1/20"] == 0.25
    assert metrics["abstain_rate"] == 0.25
    assert metrics["prompt_tokens"] == 8 * 3 and metrics["completion_tokens"] == 8 * 2
    assert metrics["prompt_tokens_mean"] == 3.0

    groups = _two_problem_groups([CORRECT] * 4, [COMPILED] * 4)
    samples = [s for g in groups for s in score_group(g, "correctness", gamma=0.4, baseline="loo", speedup_cap=8.0)]
    metrics, _ = step_metrics(groups, samples, "correctness")
    assert (metrics["by_group/frac_mixed"], metrics["by_group/frac_all_good"], metrics["by_group/frac_all_bad"]) == \
        (0.0, 0.5, 0.5)
    # in the compile stage the same compiled-but-wrong group reached what the stage rewards
    samples = [s for g in groups for s in score_group(g, "compile", gamma=0.4, baseline="loo", speedup_cap=8.0)]
    metrics, _ = step_metrics(groups, samples, "compile")
    assert metrics["by_group/frac_all_good"] == 1.0


def test_fast_rates_only_where_something_was_timed() -> None:
    """On the CPU no kernel is timed: fast_p is left out, not written as 0 (which reads as 'none was faster')."""
    untimed = dict(CORRECT, speedup=None)
    group = finished_group([[untimed], [COMPILED]], turns=1)
    metrics, _ = step_metrics([group], score_group(group, "speed", gamma=0.4, baseline="loo", speedup_cap=8.0))
    assert not any(key.startswith("fast_") for key in metrics)
    timed = finished_group([[CORRECT], [COMPILED]], turns=1)
    metrics, _ = step_metrics([timed], score_group(timed, "speed", gamma=0.4, baseline="loo", speedup_cap=8.0))
    assert metrics["fast_0.5_rate"] == 0.5 and metrics["fast_1_rate"] == 0.0


def test_the_loop_writes_group_token_and_time_figures_to_tensorboard_and_the_row(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    def judge(problem_ids, responses):  # even-length answers are well formed: the tiny model varies on it
        return [EvalResult(problem_id=pid, candidate_sha256="x", backend="triton", precision="fp32", device_kind="cpu",
                           format_ok=len(r) % 2 == 0, error_category=ErrorCategory.FORMAT)
                for pid, r in zip(problem_ids, responses)]

    cfg = load_config("default", [
        f"db_path={tmp_path / 'kb.duckdb'}", f"log_dir={tmp_path / 'logs'}", "policy.backend=local",
        "policy.base_model=local:tiny", "policy.lora_rank=4", "training.steps=2", "training.batch_problems=2",
        "sampling.group_size=4", "sampling.max_tokens=8", "problems.ids=L1/19,L1/20", "problems.levels=[1]",
        "problems.holdout_fraction=0", "rewards.truncated=keep", "curriculum.enabled=false", "sft.enabled=false",
        "rewards.preset=format", "training.checkpoint_every=1", "run_id=figures"])
    run_training(build_run_parts(cfg, policy_beside=True), progress=False, evaluate_fn=judge)
    rows = Store(cfg.db_path).fetchall("SELECT metrics_json FROM train_steps ORDER BY step")
    wanted = {"by_group/frac_mixed", "by_group/frac_all_good", "by_group/frac_all_bad", "prompt_tokens",
              "completion_tokens", "throughput/sampled_tokens_per_s", "time/step_s", "time/checkpoint_s",
              "abstain_rate", "abstain_rate/L1/19", "abstain_rate/L1/20"}
    for (metrics_json,) in rows:
        metrics = json.loads(metrics_json)
        assert wanted <= set(metrics), wanted - set(metrics)
        assert metrics["time/step_s"] >= metrics["time/checkpoint_s"] > 0
        if metrics["num_trained"]:
            assert metrics["throughput/trained_tokens_per_s"] > 0
    events = EventAccumulator(str(tmp_path / "logs" / "figures" / "tensorboard"))
    events.Reload()
    assert {"by_group/frac_mixed", "throughput/sampled_tokens_per_s", "time/step_s"} <= set(events.Tags()["scalars"])
