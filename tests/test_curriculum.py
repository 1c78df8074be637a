"""Curriculum: stage promotion over a window, then levels; manual override; replay on resume."""

from __future__ import annotations

import json

from kernelbench_rl.config import load_config
from kernelbench_rl.training.curriculum import Curriculum


def make(*overrides: str, levels=(1, 2)) -> Curriculum:
    cfg = load_config("default", ["curriculum.window=2", "curriculum.threshold=0.5", *overrides])
    return Curriculum.from_config(cfg.curriculum, list(levels))


def test_stage_promotes_only_after_a_full_window() -> None:
    cur = make()
    assert cur.stage == "format"
    assert cur.observe(0, {"format_rate": 0.9}) == []
    assert cur.observe(1, {"format_rate": 0.2}) == []  # the streak breaks
    assert cur.observe(2, {"format_rate": 0.6}) == []
    events = cur.observe(3, {"format_rate": 0.7})
    assert [(e.kind, e.from_value, e.to_value, e.step) for e in events] == [("stage", "format", "compile", 3)]
    assert cur.stage == "compile"
    # the compile stage watches the compile rate, not the format rate
    assert cur.observe(4, {"format_rate": 1.0, "compile_rate": 0.0}) == []


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
                 "env.mode=kevin", "env.turns=2", "rewards.truncated=keep"]  # 4 tokens cut every answer
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
