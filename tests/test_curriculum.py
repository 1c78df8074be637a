"""Curriculum: stage promotion on a smoothed rate, then levels; fallback; manual override; replay on resume."""

from __future__ import annotations

import json

import pytest

from kernelbench_rl.compose import build_run_parts
from kernelbench_rl.config import load_config
from kernelbench_rl.training.curriculum import Curriculum


def make(*overrides: str, levels=(1, 2)) -> Curriculum:
    cfg = load_config("default", ["curriculum.window=2", "curriculum.threshold=0.5", *overrides])
    return Curriculum.from_config(cfg.curriculum, list(levels))


def test_stage_promotes_on_the_mean_of_a_full_window() -> None:
    cur = make()
    assert cur.stage == "format"
    assert cur.observe(0, {"format_rate": 0.9}) == []  # the window is not full yet
    assert cur.observe(1, {"format_rate": 0.0}) == []  # mean 0.45
    assert cur.observe(2, {"format_rate": 0.6}) == []  # mean 0.3
    events = cur.observe(3, {"format_rate": 0.7})  # mean 0.65
    assert [(e.kind, e.from_value, e.to_value, e.step) for e in events] == [("stage", "format", "compile", 3)]
    assert cur.stage == "compile"
    # the compile stage watches the compile rate, not the format rate
    assert cur.observe(4, {"format_rate": 1.0, "compile_rate": 0.0}) == []


def test_a_rate_hovering_at_its_threshold_promotes() -> None:
    """A streak rule waits for a lucky run of steps; the mean of the window does not."""
    cur = make("curriculum.threshold=null", "curriculum.window=4", "curriculum.start_stage=compile")
    rates = [0.55, 0.7, 0.5, 0.65]  # around the compile threshold (0.6); half the steps are under it
    events = [e for step, rate in enumerate(rates) for e in cur.observe(step, {"compile_rate": rate})]
    assert [(e.to_value, e.step) for e in events] == [("correctness", 3)]


def test_each_stage_has_its_own_threshold_and_a_fallback() -> None:
    cur = make("curriculum.threshold=null", "curriculum.start_stage=correctness", "curriculum.max_steps_per_stage=6")
    assert cur.watched_rate() == ("level_1/correct_rate", 0.35)
    events = [e for step in range(6) for e in cur.observe(step, {"correct_rate": 0.1})]
    assert [(e.to_value, e.step) for e in events] == [("speed", 5)] and "max_steps_per_stage" in events[0].reason
    # the last stage promotes levels on the level's own correct rate, never by the stage's fallback
    assert cur.watched_rate() == ("level_1/correct_rate", 0.5)
    assert all(cur.observe(step, {"correct_rate": 0.9, "level_1/correct_rate": 0.1}) == [] for step in range(6, 20))


def test_defaults_reach_speed_on_a_climbing_run_and_leave_a_plateau() -> None:
    """The replayed traces (bench/RESULTS.md, "Curriculum promotion") without noise: the old rule (0.8 for 5 steps in a row) reached
    neither the speed stage on a correct rate climbing from 0.2 to 0.6, nor left compile at a flat 0.6."""
    def run(trace) -> list[tuple[str, int]]:
        cur = Curriculum.from_config(load_config("default").curriculum, [1])
        return [(e.to_value, e.step) for step in range(200) for e in cur.observe(step, trace(step))]

    def climbing(step: int) -> dict[str, float]:
        return {"format_rate": min(0.3 + step / 15, 0.95), "compile_rate": min(0.3 + 0.55 * step / 60, 0.85),
                "correct_rate": 0.2 + 0.4 * min(step / 200, 1.0)}

    def flat(step: int) -> dict[str, float]:
        return {"format_rate": min(0.3 + step / 15, 0.95), "compile_rate": 0.6, "correct_rate": 0.6}

    assert [stage for stage, _ in run(climbing)] == ["compile", "correctness", "speed"]
    assert [stage for stage, _ in run(flat)][:3] == ["compile", "correctness", "speed"]


def test_earlier_levels_keep_their_share_of_the_problems(tmp_path) -> None:
    from kernelbench_rl.training import TrainingRun

    cfg = load_config("default", ["problems.levels=[1,2]", "problems.holdout_fraction=0", "training.batch_problems=8",
                                  "curriculum.previous_levels_share=0.25", f"db_path={tmp_path / 'kb.duckdb'}"])
    parts = build_run_parts(cfg, policy_beside=True)
    run = TrainingRun(parts)
    run.problems = parts.split.training_problems(parts.audits)
    run.curriculum = Curriculum.from_config(cfg.curriculum, [p.level for p in run.problems])
    assert {p.level for p in run.problems_for_step(0)} == {1}
    run.curriculum.level = 2
    for step in range(3):
        levels = [p.level for p in run.problems_for_step(step)]
        assert sorted(levels) == [1, 1, 2, 2, 2, 2, 2, 2]
        assert run.problems_for_step(step) == run.problems_for_step(step)  # a re-done step samples the same


def test_stages_then_levels() -> None:
    cur = make()
    kinds = []
    for step in range(20):
        kinds += [(e.kind, e.to_value) for e in cur.observe(step, {"format_rate": 1, "compile_rate": 1, "correct_rate": 1})]
    assert kinds == [("stage", "compile"), ("stage", "correctness"), ("stage", "speed"), ("level", "2")]
    assert cur.stage == "speed" and cur.level == 2


def test_level_needs_the_level_threshold() -> None:
    cur = make("curriculum.start_stage=speed", "curriculum.level_threshold=0.9")
    for step in range(5):
        assert cur.observe(step, {"correct_rate": 0.8}) == []
    assert cur.level == 1


def test_force_stage_is_a_manual_event_and_pins_the_stage() -> None:
    cur = make("curriculum.force_stage=correctness")
    assert cur.stage == "format"  # the override takes effect at the start of the next step
    events = cur.apply_override(5)
    assert [(e.kind, e.from_value, e.to_value) for e in events] == [("manual", "format", "correctness")]
    for step in range(6, 12):
        assert all(e.kind != "stage" for e in cur.observe(step, {"correct_rate": 1.0}))
    assert cur.stage == "correctness"


def test_disabled_curriculum_never_promotes() -> None:
    cur = make("curriculum.enabled=false")
    for step in range(10):
        assert cur.observe(step, {"format_rate": 1.0}) == []


def test_replay_restores_stage_level_and_streak() -> None:
    live = make()
    metrics = [{"format_rate": 1.0, "compile_rate": 1.0}] * 2 + [{"format_rate": 1.0, "compile_rate": 0.9}]
    events = []
    for step, m in enumerate(metrics):
        events += [e.row("r") for e in live.observe(step, m)]
    resumed = make()
    resumed.replay(events, list(enumerate(metrics)))
    assert (resumed.stage, resumed.level, resumed.streak) == (live.stage, live.level, live.streak) == ("compile", 1, 1)
    # one more good step promotes both identically
    assert [e.to_value for e in resumed.observe(3, {"compile_rate": 1.0})] == ["correctness"]


def test_loop_records_promotions_and_a_resumed_run_keeps_its_stage(tmp_path) -> None:
    """Real policy (tiny, local) and store; the judge is a stand-in because the random tiny model never
    writes a kernel: it calls every answer well formed, so the format stage is passed at once."""
    from kernelbench_rl.evaluation.result import ErrorCategory, EvalResult
    from kernelbench_rl.store import Store
    from kernelbench_rl.training import run_training

    def judge(problem_ids, responses):
        return [EvalResult(problem_id=pid, candidate_sha256="x", backend="triton", precision="fp32", device_kind="cpu",
                           format_ok=True, error_category=ErrorCategory.COMPILE) for pid in problem_ids]

    overrides = [f"db_path={tmp_path / 'kb.duckdb'}", f"log_dir={tmp_path / 'logs'}", "policy.backend=local",
                 "policy.base_model=local:tiny", "policy.lora_rank=4", "training.steps=3", "training.batch_problems=1",
                 "sampling.group_size=2", "sampling.max_tokens=4", "problems.ids=L1/19", "problems.levels=[1]",
                 "problems.holdout_fraction=0", "curriculum.window=1", "curriculum.threshold=0.5", "run_id=cur",
                 "env.mode=kevin", "env.turns=2", "rewards.truncated=keep",  # 4 tokens cut every answer
                 # synchronous: a promotion applies from the very next step (tests/test_async_training.py
                 # covers the asynchronous rule, one step later)
                 "training.max_steps_off_policy=0"]
    cfg = load_config("default", overrides)
    first = run_training(build_run_parts(cfg, policy_beside=True), progress=False, evaluate_fn=judge, stop_after_steps=2)
    assert (first.steps_run, first.last_step, first.finished) == (2, 1, False)
    assert first.stage == "compile"  # promoted after step 0; compile rate 0 keeps it there
    store = Store(cfg.db_path)
    events = store.query("SELECT step, kind, from_value, to_value FROM curriculum_events").to_dicts()
    assert events == [{"step": 0, "kind": "stage", "from_value": "format", "to_value": "compile"}]
    assert [r[0] for r in store.fetchall("SELECT stage FROM train_steps ORDER BY step")] == ["format", "compile"]
    turns = {r[0] for r in store.fetchall("SELECT DISTINCT turn FROM rollouts")}
    assert turns == {0, 1}
    metrics = json.loads(store.fetchall("SELECT metrics_json FROM train_steps WHERE step = 0")[0][0])
    assert metrics["turn_1/format_rate"] == 1.0 and metrics["level_1/reward_mean"] == 1.0

    second = run_training(build_run_parts(cfg, policy_beside=True), progress=False, evaluate_fn=judge)
    assert second.resumed_from_step == 1 and second.first_step == 2 and second.finished
    assert store.fetchall("SELECT stage FROM train_steps WHERE step = 2")[0][0] == "compile"

    forced = load_config("default", overrides + ["training.steps=4", "run_id=cur", "curriculum.force_stage=correctness"])
    # a different config with the same explicit run id continues that run; the override is a manual event
    third = run_training(build_run_parts(forced, policy_beside=True), progress=False, evaluate_fn=judge)
    assert third.first_step == 3 and third.stage == "correctness"
    manual = store.query("SELECT from_value, to_value FROM curriculum_events WHERE kind = 'manual'").to_dicts()
    assert manual == [{"from_value": "compile", "to_value": "correctness"}]


# -- rates from the samples being judged; missing is not zero ----------------------------------------
def _step_metrics(verdicts_by_level: dict[int, list[dict]], stage: str = "format", level: int = 1) -> dict[str, float]:
    """A step's metrics as the loop computes them (training.metrics.step_metrics over scored groups), with
    the stage and level it was sampled under."""
    from kernelbench_rl.envs import EnvSpec
    from kernelbench_rl.envs.kernel_env import EnvGroupBuilder
    from kernelbench_rl.evaluation.result import EvalResult
    from kernelbench_rl.problems import get_problem
    from kernelbench_rl.training.grpo import score_group
    from kernelbench_rl.training.metrics import step_metrics
    from kernelbench_rl.training.rollouts import GroupRollout

    groups, samples = [], []
    for index, (lv, verdicts) in enumerate(sorted(verdicts_by_level.items())):
        problem = get_problem("L1/19" if lv == 1 else "L2/1")
        builder = EnvGroupBuilder(problem, len(verdicts), EnvSpec())
        envs = builder()
        for env, verdict in zip(envs, verdicts, strict=True):
            env.add_completion("p", [1, 2, 3], "c", [4, 5], [-0.5, -0.25], "stop")
            env.add_result(EvalResult(problem_id=problem.id, candidate_sha256="x", backend="triton", precision="fp32",
                                      device_kind="cpu", **verdict))
        group = GroupRollout(index, builder, envs)
        groups.append(group)
        samples += score_group(group, stage, gamma=0.4, baseline="loo", speedup_cap=8.0)
    metrics, _ = step_metrics(groups, samples)
    metrics.update({"stage_index": float(["format", "compile", "correctness", "speed"].index(stage)), "level": float(level)})
    return metrics


def _formatted(share: float) -> list[dict]:
    from kernelbench_rl.evaluation.result import ErrorCategory

    n = 10
    return [dict(format_ok=i < share * n, error_category=ErrorCategory.COMPILE) for i in range(n)]


def _infra() -> list[dict]:
    from kernelbench_rl.evaluation.result import ErrorCategory

    return [dict(error_category=ErrorCategory.INFRA, error_message="worker lost")] * 10


def test_an_all_infra_step_is_not_a_rate_of_zero() -> None:
    """Four steps at 0.9 and one whose every evaluation failed on our side: the window holds the four, and the
    next good step promotes (counted as 0, the infra step made the mean 0.72 and blocked the promotion)."""
    cur = make("curriculum.threshold=0.8", "curriculum.window=5")
    steps = [_step_metrics({1: _formatted(0.9)}), _step_metrics({1: _formatted(0.9)}), _step_metrics({1: _infra()}),
             _step_metrics({1: _formatted(0.9)}), _step_metrics({1: _formatted(0.9)})]
    assert "format_rate" not in steps[2] and "level_1/format_rate" not in steps[2]
    assert [e for step, m in enumerate(steps) for e in cur.observe(step, m)] == []
    assert cur.recent == pytest.approx([0.9] * 4)
    events = cur.observe(5, _step_metrics({1: _formatted(0.9)}))
    assert [(e.to_value, e.step) for e in events] == [("compile", 5)]


def test_infra_steps_do_not_count_toward_the_stage_step_limit() -> None:
    cur = make("curriculum.threshold=0.8", "curriculum.max_steps_per_stage=3")
    low, infra = _step_metrics({1: _formatted(0.1)}), _step_metrics({1: _infra()})
    assert [e for step, m in enumerate([low, infra, infra, low]) for e in cur.observe(step, m)] == []
    assert [e.to_value for e in cur.observe(4, low)] == ["compile"]  # the third judged step


def test_only_the_current_levels_samples_are_judged() -> None:
    """In the last stage at level 2, a step whose level-2 samples all failed on our side has no level-2 rate: the
    level-1 share of the batch (all right) is not level 2's rate."""
    from kernelbench_rl.evaluation.result import ErrorCategory

    right = [dict(format_ok=True, compiled=True, correct=True, error_category=ErrorCategory.OK)] * 4
    cur = make("curriculum.start_stage=speed", "curriculum.window=1", "curriculum.demote_threshold=null",
               levels=(1, 2, 3))
    cur.level = 2
    metrics = _step_metrics({1: right, 2: _infra()}, stage="speed", level=2)
    assert metrics["correct_rate"] == 1.0 and "level_2/correct_rate" not in metrics
    assert cur.observe(0, metrics) == [] and cur.recent == []
    # a step sampled at level 1 (queued before the promotion) is not level 2's either
    assert cur.observe(1, _step_metrics({1: right}, stage="speed", level=1)) == [] and cur.recent == []


def test_the_defaults_reach_speed_and_level_2_within_the_default_steps_on_a_stalled_run() -> None:
    """Nothing improves past a low plateau (format 0.5, compile 0.3, correct 0.1 at every level): the step limits
    still bring the run to the speed stage and to level 2 well inside training.steps (40 steps per stage put speed
    at step 120 of 100)."""
    cfg = load_config("default")
    cur = Curriculum.from_config(cfg.curriculum, [1, 2, 3])
    reached: dict[str, int] = {}
    for step in range(cfg.training.steps):
        rates = {"format_rate": 0.5, "compile_rate": 0.3, "correct_rate": 0.1}
        for event in cur.observe(step, {**rates, **{f"level_{cur.level}/{k}": v for k, v in rates.items()}}):
            reached.setdefault(f"{event.kind}:{event.to_value}", step + 1)
    assert reached["stage:speed"] <= cfg.training.steps // 2
    assert reached["level:2"] < cfg.training.steps


def test_a_level_out_of_reach_is_left_and_reached_again_only_on_its_rate() -> None:
    cur = make("curriculum.start_stage=speed", "curriculum.window=2", "curriculum.max_steps_per_level=3",
               "curriculum.demote_threshold=0.05", "curriculum.demotion_backoff=0", levels=(1, 2))
    events = []
    for step in range(3):  # level 1 at 0.3: promoted by the step limit
        events += cur.observe(step, {"level_1/correct_rate": 0.3})
    for step in range(3, 5):  # level 2 at 0: back to level 1
        events += cur.observe(step, {"level_2/correct_rate": 0.0})
    assert [(e.from_value, e.to_value) for e in events] == [("1", "2"), ("2", "1")]
    assert "demote_threshold" in events[-1].reason and cur.level == 1
    for step in range(5, 12):  # the step limit no longer leads back to a level left by demotion
        assert cur.observe(step, {"level_1/correct_rate": 0.3}) == []
    rows = [e.row("r") for e in events]
    resumed = make("curriculum.start_stage=speed", "curriculum.window=2", "curriculum.max_steps_per_level=3",
                   "curriculum.demote_threshold=0.05", "curriculum.demotion_backoff=0", levels=(1, 2))
    resumed.replay(rows, [(step, {"level_1/correct_rate": 0.3, "stage_index": 3.0, "level": 1.0}) for step in range(5, 12)])
    assert (resumed.level, resumed.demoted_from, len(resumed.recent)) == (1, {2}, 7)
    assert [e.to_value for e in resumed.observe(12, {"level_1/correct_rate": 0.8})] == ["2"]  # its rate still does


# -- a curriculum that settles: back-off after a demotion --------------------------------------------
def _level_changes(rates: dict[int, float], steps: int = 100, *overrides: str) -> list[tuple[int, str, str]]:
    """The last stage from level 1, flat correct rates per level, one step of asynchronous lag as the loop queues
    steps (step s decided after step s - 2 was observed)."""
    cfg = load_config("default", ["curriculum.start_stage=speed", *overrides])
    cur = Curriculum.from_config(cfg.curriculum, sorted(rates))
    queued = [cur.level, cur.level]
    changes = []
    for step in range(steps):
        level = queued.pop(0)
        metrics = {f"level_{level}/correct_rate": rates[level], "stage_index": 3.0, "level": float(level)}
        changes += [(e.step, e.from_value, e.to_value) for e in cur.observe(step, metrics)]
        queued.append(cur.level)
    return changes


def test_a_level_out_of_reach_is_tried_again_only_after_a_growing_back_off() -> None:
    """Level 1 at 0.6 (above level_threshold), level 2 at 0.03 (under demote_threshold): without a back-off the
    levels swapped every two windows (16 changes in 100 steps); with the default back-off (30 judged steps, doubled
    at each further demotion) there are at most 4, and the run spends most of its steps at level 1."""
    changes = _level_changes({1: 0.6, 2: 0.03})
    assert len(changes) <= 4, changes
    assert [(a, b) for _, a, b in changes] == [("1", "2"), ("2", "1"), ("1", "2"), ("2", "1")][:len(changes)]
    first_demotion, second_promotion = changes[1][0], changes[2][0]
    assert second_promotion - first_demotion >= 30
    assert len(_level_changes({1: 0.6, 2: 0.03}, 100, "curriculum.demotion_backoff=0")) > 10  # the flapping it stops
    # a level that holds is not affected: promoted once, kept
    assert [(a, b) for _, a, b in _level_changes({1: 0.6, 2: 0.3})] == [("1", "2")]


def test_the_back_off_is_replayed_on_resume() -> None:
    live = make("curriculum.start_stage=speed", "curriculum.window=1", "curriculum.demotion_backoff=4",
                "curriculum.max_steps_per_level=0", levels=(1, 2))
    rows, metrics_by_step = [], []
    rates = [0.9, 0.0, 0.9, 0.9, 0.9, 0.9, 0.0, 0.9]  # promote, demote, back off 4 steps, promote, demote
    level_seen = []
    for step, rate in enumerate(rates):
        metrics = {f"level_{live.level}/correct_rate": rate, "stage_index": 3.0, "level": float(live.level)}
        level_seen.append(live.level)
        metrics_by_step.append((step, metrics))
        rows += [e.row("r") for e in live.observe(step, metrics)]
    assert [(r["step"], r["to_value"]) for r in rows] == [(0, "2"), (1, "1"), (5, "2"), (6, "1")]
    assert live.backoff_steps(2) == 8  # the second demotion from level 2 doubled it
    resumed = make("curriculum.start_stage=speed", "curriculum.window=1", "curriculum.demotion_backoff=4",
                   "curriculum.max_steps_per_level=0", levels=(1, 2))
    resumed.replay(rows, metrics_by_step)
    assert (resumed.level, resumed.demotions, resumed.backoff_steps(2)) == (1, {2: 2}, 8)
    assert len(resumed.recent) == 1  # step 7, judged at level 1 after the demotion
    for step in range(8, 14):  # seven judged steps at 0.9 in all: still backing off
        assert resumed.observe(step, {"level_1/correct_rate": 0.9, "stage_index": 3.0, "level": 1.0}) == []
    assert [e.to_value for e in resumed.observe(14, {"level_1/correct_rate": 0.9, "stage_index": 3.0,
                                                       "level": 1.0})] == ["2"]
