"""Curriculum: stage promotion over a window, then levels; manual override; replay on resume."""

from __future__ import annotations

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
    assert cur.stage == "correctness"
    cur.stage = "format"  # e.g. the state a resumed run read back before the override was set
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
