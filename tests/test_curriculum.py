"""Curriculum: stage promotion on a smoothed rate, then levels; fallback; manual override; replay on resume."""

from __future__ import annotations

import json

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
    assert cur.watched_rate() == ("correct_rate", 0.35)
    events = [e for step in range(6) for e in cur.observe(step, {"correct_rate": 0.1})]
    assert [(e.to_value, e.step) for e in events] == [("speed", 5)] and "max_steps_per_stage" in events[0].reason
    # the last stage promotes levels on the level's own correct rate, never by the fallback
    assert cur.watched_rate() == ("level_1/correct_rate", 0.5)
    assert all(cur.observe(step, {"correct_rate": 0.9, "level_1/correct_rate": 0.1}) == [] for step in range(6, 20))


def test_defaults_reach_speed_on_a_climbing_run_and_leave_a_plateau() -> None:
    """The traces of bench/curriculum_sim.py without noise: the old rule (0.8 for 5 steps in a row) reached
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
    from kernelbench_rl.training import TrainingRun, training_problems

    cfg = load_config("default", ["problems.levels=[1,2]", "problems.holdout_fraction=0", "training.batch_problems=8",
                                  "curriculum.previous_levels_share=0.25", f"db_path={tmp_path / 'kb.duckdb'}"])
    run = TrainingRun(cfg)
    run.problems = training_problems(cfg)
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
    first = run_training(cfg, progress=False, evaluate_fn=judge, stop_after_steps=2)
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

    second = run_training(cfg, progress=False, evaluate_fn=judge)
    assert second.resumed_from_step == 1 and second.first_step == 2 and second.finished
    assert store.fetchall("SELECT stage FROM train_steps WHERE step = 2")[0][0] == "compile"

    forced = load_config("default", overrides + ["training.steps=4", "run_id=cur", "curriculum.force_stage=correctness"])
    # a different config with the same explicit run id continues that run; the override is a manual event
    third = run_training(forced, progress=False, evaluate_fn=judge)
    assert third.first_step == 3 and third.stage == "correctness"
    manual = store.query("SELECT from_value, to_value FROM curriculum_events WHERE kind = 'manual'").to_dicts()
    assert manual == [{"from_value": "compile", "to_value": "correctness"}]
