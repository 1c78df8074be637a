"""The curriculum's level moves at their edges: a demotion goes back one level (the highest level below, whatever
the levels are), and a mean rate exactly at a threshold is enough (promotion at `>=`, demotion at `<=`), where the
next float on the other side is not."""

from __future__ import annotations

import math
import random

import pytest

from kernelbench_rl.training.curriculum import Curriculum

STAGES = ["format", "compile", "correctness", "speed"]


def at_last_stage(levels, level: int, *, window: int = 2, level_threshold: float = 0.5,
                  demote_threshold: float | None = 0.25) -> Curriculum:
    """The speed stage (levels are watched) at `level`, no step limit and no back-off: only the rates decide."""
    return Curriculum(stages=list(STAGES), stage="speed", level=level, levels=sorted(levels), window=window,
                      level_threshold=level_threshold, max_steps_per_level=0, demote_threshold=demote_threshold,
                      demotion_backoff=0)


def feed(cur: Curriculum, rates, first_step: int = 0):
    """Each rate a judged step at the curriculum's level then; every level change, as (step, from, to)."""
    moves = []
    for step, rate in enumerate(rates, start=first_step):
        metrics = {f"level_{cur.level}/correct_rate": rate, "stage_index": float(STAGES.index(cur.stage)),
                   "level": float(cur.level)}
        moves += [(e.step, int(e.from_value), int(e.to_value)) for e in cur.observe(step, metrics) if e.kind == "level"]
    return moves


# -- where a demotion goes --------------------------------------------------------------------------------
def test_with_three_levels_a_demotion_goes_back_one_level_not_to_the_first():
    cur = at_last_stage([1, 2, 3], 3)
    assert feed(cur, [0.0, 0.0]) == [(1, 3, 2)]
    assert cur.level == 2 and cur.demoted_from == {3}
    assert feed(cur, [0.0, 0.0], first_step=2) == [(3, 2, 1)]  # and from 2, one more
    assert feed(cur, [0.0] * 4, first_step=4) == []  # the first level has nowhere lower to go


def test_a_demotion_from_the_middle_level_goes_to_the_one_below_and_leaves_the_top_alone():
    cur = at_last_stage([1, 2, 3], 2)
    assert feed(cur, [0.1, 0.2]) == [(1, 2, 1)]
    assert cur.demoted_from == {2} and cur.demotions == {2: 1}


def test_a_demotion_goes_to_the_highest_level_below_for_any_levels_and_window():
    """Property, over seeded random cases: levels with gaps (1, 3, 5, ...), any starting level above the lowest,
    any window; a full window at or under the demotion line moves exactly once, to max(level below)."""
    rng = random.Random(20261128)
    for _ in range(300):
        levels = sorted(rng.sample(range(1, 10), rng.randint(2, 6)))
        start = rng.choice(levels[1:])
        window = rng.randint(1, 6)
        demote = rng.choice([0.0, 0.05, 0.25, 0.5])
        cur = at_last_stage(levels, start, window=window, level_threshold=0.75, demote_threshold=demote)
        rates = [rng.uniform(0.0, demote) for _ in range(window)]
        below = max(level for level in levels if level < start)
        case = (levels, start, window, demote, rates)
        assert feed(cur, rates) == [(window - 1, start, below)], case
        assert cur.level == below, case


# -- a mean exactly at a threshold ----------------------------------------------------------------------------
@pytest.mark.parametrize("rates", [[0.5, 0.5], [0.25, 0.75], [1.0, 0.0]], ids=["flat", "mixed", "extremes"])
def test_a_mean_exactly_at_the_level_threshold_promotes(rates):
    cur = at_last_stage([1, 2, 3], 1, window=2, level_threshold=0.5, demote_threshold=None)
    assert feed(cur, rates) == [(1, 1, 2)]


def test_a_mean_just_under_the_level_threshold_does_not_promote():
    under = math.nextafter(0.5, 0.0)
    cur = at_last_stage([1, 2], 1, window=2, level_threshold=0.5, demote_threshold=None)
    assert feed(cur, [under] * 6) == []
    assert cur.level == 1


def test_a_mean_exactly_at_the_demotion_line_demotes_and_just_above_it_stays():
    at = at_last_stage([1, 2, 3], 3, window=2, demote_threshold=0.25)
    assert feed(at, [0.125, 0.375]) == [(1, 3, 2)]  # mean 0.25 exactly
    above = at_last_stage([1, 2, 3], 3, window=2, demote_threshold=0.25)
    assert feed(above, [math.nextafter(0.25, 1.0)] * 6) == []
    assert above.level == 3


def test_a_demotion_line_of_zero_demotes_only_a_level_where_nothing_was_correct():
    cur = at_last_stage([1, 2], 2, window=3, demote_threshold=0.0)
    assert feed(cur, [0.0, 0.0, 1 / 64]) == []  # one correct sample in the window keeps the level
    assert feed(cur, [0.0, 0.0, 0.0], first_step=3) == [(5, 2, 1)]


@pytest.mark.parametrize("stage, rate_key", [("format", "format_rate"), ("compile", "compile_rate"),
                                             ("correctness", "correct_rate")])
def test_a_stage_promotes_at_its_threshold_exactly_and_not_a_float_under(stage, rate_key):
    def stage_curriculum() -> Curriculum:
        return Curriculum(stages=list(STAGES), stage=stage, level=1, levels=[1], window=2,
                          thresholds={name: 0.75 for name in STAGES}, max_steps_per_stage=0)

    exact = stage_curriculum()
    assert exact.observe(0, {f"level_1/{rate_key}": 0.5}) == []
    events = exact.observe(1, {f"level_1/{rate_key}": 1.0})  # mean 0.75
    assert [(e.kind, e.from_value, e.to_value) for e in events] == [("stage", stage, STAGES[STAGES.index(stage) + 1])]
    under = stage_curriculum()
    for step in range(6):
        assert under.observe(step, {f"level_1/{rate_key}": math.nextafter(0.75, 0.0)}) == []
    assert under.stage == stage
