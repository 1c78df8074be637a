"""The curriculum's smaller decisions, each where it could go wrong quietly:

- which stage and level a step was sampled under (given, else its metrics' `stage_index` and `level`, else the
  current ones), and that a step sampled under others, or without a rate at the current level, moves nothing;
- the rate a forced stage watches when it promotes levels (the level's correct rate, not the stage's own);
- `promote_levels=false` keeps the level;
- the words of every event (the rows a resumed run replays), the back-off told in a promotion's reason;
- replay: a manual override and a promotion at the same step, steps from 0 when no event was written;
- the configuration read whole (`from_config`), the start level among the levels that have problems;
- each step's split between earlier levels and the current one."""

from __future__ import annotations

import pytest

from kernelbench_rl.config import load_config
from kernelbench_rl.training.curriculum import Curriculum, CurriculumEvent, stage_thresholds

STAGES = ["format", "compile", "correctness", "speed"]


def cur_at(stage: str = "format", level: int = 1, levels=(1, 2, 3), **kw) -> Curriculum:
    options = {"window": 2, "thresholds": {s: 0.5 for s in STAGES}, "level_threshold": 0.5, **kw}
    return Curriculum(stages=list(STAGES), stage=stage, level=level, levels=list(levels), **options)


def events(cur: Curriculum, steps) -> list[tuple[int, str, str, str]]:
    """Every event of the steps fed in order, as (step, kind, from, to)."""
    found = []
    for step, metrics in steps:
        found += [(e.step, e.kind, e.from_value, e.to_value) for e in cur.observe(step, metrics)]
    return found


# -- which stage and level a step was sampled under ----------------------------------------------------------
def test_a_steps_stage_index_says_which_stage_it_was_sampled_under_the_first_stage_included() -> None:
    cur = cur_at("compile")
    old = {"compile_rate": 1.0, "stage_index": 0.0}  # sampled under format, before the promotion
    assert events(cur, [(0, old), (1, old), (2, old)]) == [] and cur.streak == 0
    now = {"compile_rate": 1.0, "stage_index": 1.0}
    assert events(cur, [(3, now), (4, now)]) == [(4, "stage", "compile", "correctness")]


def test_a_stage_index_out_of_range_or_absent_reads_as_the_current_stage() -> None:
    for index in (float(len(STAGES)), -1.0, None):
        cur = cur_at("compile")
        metrics = {"compile_rate": 1.0, **({} if index is None else {"stage_index": index})}
        assert events(cur, [(0, metrics), (1, metrics)]) == [(1, "stage", "compile", "correctness")], index


def test_a_steps_level_says_which_level_it_was_sampled_under() -> None:
    cur = cur_at("speed", level=2)
    old = {"level": 1.0, "level_2/correct_rate": 0.0, "stage_index": 3.0}  # sampled at level 1 before the move
    assert events(cur, [(0, old), (1, old)]) == [] and cur.streak == 0
    now = {"level": 2.0, "level_2/correct_rate": 1.0, "stage_index": 3.0}
    assert events(cur, [(2, now), (3, now)]) == [(3, "level", "2", "3")]


def test_the_stage_and_level_given_by_the_caller_come_before_the_metrics() -> None:
    cur = cur_at("compile")
    metrics = {"compile_rate": 1.0, "stage_index": 1.0, "level": 1.0}
    for step in range(3):
        assert cur.observe(step, metrics, stage="format") == []
        assert cur.observe(step, metrics, level=2) == []
    assert cur.streak == 0
    assert [e.to_value for e in cur.observe(3, {"compile_rate": 1.0}, stage="compile", level=1)] == []
    assert [e.to_value for e in cur.observe(4, {"compile_rate": 1.0}, stage="compile", level=1)] == ["correctness"]


@pytest.mark.parametrize("skipped", [
    {"compile_rate": 1.0, "stage_index": 0.0},  # sampled under another stage
    {"level_2/compile_rate": 1.0},  # no rate at the current level
])
def test_a_step_that_is_not_judged_moves_nothing_even_with_a_full_window_above_the_threshold(skipped) -> None:
    """A window that would promote (a resumed run whose threshold was lowered) waits for a judged step."""
    cur = cur_at("compile", recent=[1.0, 1.0])
    assert cur.observe(7, dict(skipped)) == []
    assert cur.stage == "compile" and cur.recent == [1.0, 1.0]
    assert [(e.step, e.to_value) for e in cur.observe(8, {"compile_rate": 1.0})] == [(8, "correctness")]


# -- what is watched -------------------------------------------------------------------------------------------
def test_a_forced_stage_that_promotes_levels_watches_the_levels_correct_rate() -> None:
    cur = cur_at("format", force_stage="format", promote_levels=True)
    assert cur.watched_rate() == ("level_1/correct_rate", 0.5)
    bad_format = {"level_1/correct_rate": 1.0, "level_1/format_rate": 0.0}
    assert events(cur, [(0, bad_format), (1, bad_format)]) == [(1, "level", "1", "2")]
    cur = cur_at("format", force_stage="format", promote_levels=True)
    good_format = {"level_1/correct_rate": 0.0, "level_1/format_rate": 1.0}
    assert events(cur, [(0, good_format), (1, good_format)]) == []


def test_without_level_promotion_the_last_stage_keeps_its_level() -> None:
    cur = cur_at("speed", level=2, promote_levels=False, demote_threshold=0.2, max_steps_per_level=3)
    assert events(cur, [(step, {"level_2/correct_rate": 1.0}) for step in range(6)]) == []
    assert events(cur, [(step, {"level_2/correct_rate": 0.0}) for step in range(6, 12)]) == []
    assert cur.level == 2


def test_a_stage_without_its_own_threshold_promotes_at_0_8() -> None:
    cur = cur_at("compile", thresholds={})
    assert cur.watched_rate() == ("level_1/compile_rate", 0.8)
    assert events(cur, [(0, {"compile_rate": 0.79}), (1, {"compile_rate": 0.79})]) == []
    cur = cur_at("compile", thresholds={})
    assert events(cur, [(0, {"compile_rate": 0.81}), (1, {"compile_rate": 0.81})]) == [(1, "stage", "compile",
                                                                                        "correctness")]


# -- the events' words --------------------------------------------------------------------------------------------
def test_an_events_row_has_the_curriculum_events_columns() -> None:
    event = CurriculumEvent(4, "level", "1", "2", "why")
    assert event.row("r1") == {"run_id": "r1", "step": 4, "kind": "level", "from_value": "1", "to_value": "2",
                               "reason": "why"}


def test_every_move_says_why_in_its_reason() -> None:
    cur = cur_at("compile", max_steps_per_stage=3)
    [stage] = [e for step in range(2) for e in cur.observe(step, {"compile_rate": 0.75})]
    assert stage.reason == "mean level_1/compile_rate of the last 2 steps 0.750 >= 0.5"
    cur = cur_at("compile", max_steps_per_stage=3)
    [fallback] = [e for step in range(3) for e in cur.observe(step, {"compile_rate": 0.0})]
    assert (fallback.step, fallback.reason) == (2, "3 steps in the stage (curriculum.max_steps_per_stage)")
    cur = cur_at("speed", demote_threshold=0.1, max_steps_per_level=4, level=2)
    [up] = [e for step in range(2) for e in cur.observe(step, {"level_2/correct_rate": 0.625})]
    assert up.reason == "mean level_2/correct_rate of the last 2 steps 0.625 >= 0.5"  # no back-off to tell
    cur = cur_at("speed", demote_threshold=0.1, max_steps_per_level=4, level=1)
    [limit] = [e for step in range(4) for e in cur.observe(step, {"level_1/correct_rate": 0.25})]
    assert limit.reason == "4 steps at the level (curriculum.max_steps_per_level)"
    cur = cur_at("speed", level=2, demote_threshold=0.1)
    [down] = [e for step in range(2) for e in cur.observe(step, {"level_2/correct_rate": 0.0})]
    assert down.reason == "mean level_2/correct_rate of the last 2 steps 0.000 <= 0.1 (curriculum.demote_threshold)"


def test_a_promotion_after_a_back_off_says_how_long_it_waited() -> None:
    cur = cur_at("speed", level=2, demote_threshold=0.1, demotion_backoff=3)
    assert events(cur, [(0, {"level_2/correct_rate": 0.0}), (1, {"level_2/correct_rate": 0.0})]) == [
        (1, "level", "2", "1")]
    assert cur.backoff_steps(2) == 3 and cur.backoff_steps(1) == 0 and cur.backoff_steps(3) == 0
    moves = [e for step in range(2, 6) for e in cur.observe(step, {"level_1/correct_rate": 1.0})]
    assert [(e.step, e.to_value) for e in moves] == [(4, "2")]
    assert moves[0].reason == ("mean level_1/correct_rate of the last 2 steps 1.000 >= 0.5, after a back-off of 3 "
                               "steps (curriculum.demotion_backoff)")


def test_an_override_is_a_manual_event_at_its_step_naming_the_setting() -> None:
    cur = cur_at("format", force_stage="correctness", recent=[0.1])
    [event] = cur.apply_override(9)
    assert event == CurriculumEvent(9, "manual", "format", "correctness", "curriculum.force_stage")
    assert cur.stage == "correctness" and cur.recent == [] and cur.apply_override(10) == []


# -- replay -------------------------------------------------------------------------------------------------------
def test_replay_takes_a_manual_override_before_a_promotion_of_the_same_step() -> None:
    """The loop applies an override at the start of a step and a promotion at its end: replayed in that order
    whatever order the rows come in."""
    rows = [CurriculumEvent(5, "stage", "correctness", "speed", "rate").row("r"),
            CurriculumEvent(5, "manual", "format", "correctness", "curriculum.force_stage").row("r")]
    for order in (rows, rows[::-1]):
        cur = cur_at("format")
        cur.replay(order, [])
        assert cur.stage == "speed"
    cur = cur_at("format")
    cur.replay([rows[1]], [])
    assert cur.stage == "correctness"  # a manual event alone sets the stage too


def test_replay_without_events_judges_every_step_from_the_first() -> None:
    cur = cur_at("compile", window=3)
    cur.replay([], [(0, {"compile_rate": 0.2}), (1, {"compile_rate": 0.4}), (2, {"compile_rate": 0.6})])
    assert cur.recent == [0.2, 0.4, 0.6]
    cur.replay([CurriculumEvent(1, "stage", "format", "compile", "x").row("r")],
               [(0, {"compile_rate": 0.2}), (1, {"compile_rate": 0.4}), (2, {"compile_rate": 0.6})])
    assert cur.recent == [0.6]  # only the steps after the last event


def test_a_replayed_demotion_is_remembered_and_a_promotion_is_not_one() -> None:
    cur = cur_at("speed")
    cur.replay([CurriculumEvent(3, "level", "1", "2", "up").row("r"), CurriculumEvent(8, "level", "2", "3", "up").row("r"),
                CurriculumEvent(12, "level", "3", "2", "down").row("r")], [])
    assert cur.level == 2 and cur.demoted_from == {3} and cur.demotions == {3: 1}


# -- configuration and batch split ---------------------------------------------------------------------------------
def test_from_config_reads_every_setting() -> None:
    cfg = load_config("default", [
        "curriculum.start_stage=compile", "curriculum.start_level=2", "curriculum.window=3",
        "curriculum.enabled=false", "curriculum.force_stage=correctness", "curriculum.promote_levels=false",
        "curriculum.level_threshold=0.7", "curriculum.max_steps_per_stage=9", "curriculum.max_steps_per_level=11",
        "curriculum.demote_threshold=0.15", "curriculum.demotion_backoff=4", "curriculum.previous_levels_share=0.3",
    ]).curriculum
    cur = Curriculum.from_config(cfg, [3, 2, 2, 1])
    assert (cur.stages, cur.stage, cur.level, cur.levels) == (STAGES, "compile", 2, [1, 2, 3])
    assert (cur.window, cur.enabled, cur.force_stage, cur.promote_levels) == (3, False, "correctness", False)
    assert (cur.level_threshold, cur.max_steps_per_stage, cur.max_steps_per_level) == (0.7, 9, 11)
    assert (cur.demote_threshold, cur.demotion_backoff, cur.previous_levels_share) == (0.15, 4, 0.3)
    assert cur.thresholds == stage_thresholds(cfg) == {"format": 0.8, "compile": 0.6, "correctness": 0.35,
                                                       "speed": 0.5}


@pytest.mark.parametrize("start, levels, expected", [
    (2, [1, 2, 3], 2), (1, [2, 3], 2), (4, [2, 3], 2), (2, [3, 5], 3), (3, [], 3)])
def test_the_start_level_is_the_configured_one_when_it_has_problems_else_the_lowest_that_has(start, levels,
                                                                                           expected) -> None:
    cfg = load_config("default", [f"curriculum.start_level={start}"]).curriculum
    assert Curriculum.from_config(cfg, levels).level == expected


@pytest.mark.parametrize("batch, share, has_previous, expected", [
    (8, 0.25, True, (2, 6)), (8, 0.25, False, (0, 8)), (10, 0.3, True, (3, 7)), (7, 0.5, True, (4, 3)),
    (8, 0.0, True, (0, 8)), (1, 0.25, True, (0, 1))])
def test_a_steps_problems_are_split_between_earlier_levels_and_the_current_one(batch, share, has_previous,
                                                                              expected) -> None:
    cur = cur_at("speed", previous_levels_share=share)
    assert cur.problem_counts(batch, has_previous) == expected
    assert sum(cur.problem_counts(batch, has_previous)) == batch
