"""The timed calls launch the candidate's own kernels as often as a profiled forward does (decisions.launches_verdict).

A kernel that reads the profiler's state (`torch._C._autograd._profiler_enabled()`) can launch its own Triton kernel
when profiled and call PyTorch when timed: the GPU time is alike on both sides, so only the count of its own launches
tells. The child counts them over each timed block; the worker sums the blocks (LaunchTally) and sets them against the
profiled forwards' records. Driven here with recorded and synthetic launch records; the GPU red team runs the case.
"""

from __future__ import annotations

import itertools

import pytest

from kernelbench_rl.evaluation.result import DOUBT_FLAGS, Flag
from kernelbench_rl.evaluation.timing.decisions import LaunchTally, launches_verdict
from kernelbench_rl.rewards import PRESETS, reward_floor, score
from kernelbench_rl.evaluation.result import ErrorCategory, EvalResult

DISAGREE = [Flag.LAUNCHES_DISAGREE.value, Flag.HACK.value]


def test_an_honest_kernel_launching_alike_on_every_call_passes_and_says_what_was_counted() -> None:
    flags, note = launches_verdict({"relu_kernel": 53}, 53, [{"relu_kernel": 1}, {"relu_kernel": 1}])
    assert flags == [] and "53 timed forwards" in note and "relu_kernel" in note


@pytest.mark.parametrize("per_forward,forwards", list(itertools.product((1, 2, 3), (1, 4, 53))))
def test_any_launch_missing_from_any_timed_forward_is_a_hack(per_forward: int, forwards: int) -> None:
    profiled = [{"a": per_forward, "b": 1}]
    whole = {"a": per_forward * forwards, "b": forwards}
    assert launches_verdict(whole, forwards, profiled)[0] == []
    for name in whole:  # one launch short, of either kernel
        short = {**whole, name: whole[name] - 1}
        flags, note = launches_verdict(short, forwards, profiled)
        assert flags == DISAGREE and name in note


def test_the_library_swap_launches_nothing_of_its_own_when_timed() -> None:
    flags, note = launches_verdict({}, 53, [{"relu_kernel": 1}, {"relu_kernel": 1}])
    assert flags == DISAGREE and "relu_kernel 0 of 53" in note


def test_more_launches_when_timed_gain_nothing_and_pass() -> None:
    assert launches_verdict({"k": 200, "extra": 7}, 53, [{"k": 1}])[0] == []


def test_the_profiled_forward_that_launched_least_sets_the_expectation() -> None:
    # Two profiled forwards, one launching twice (a kernel's first call tuned beside it): the lower count is expected
    assert launches_verdict({"k": 53}, 53, [{"k": 2}, {"k": 1}])[0] == []
    assert launches_verdict({"k": 52}, 53, [{"k": 2}, {"k": 1}])[0] == DISAGREE


@pytest.mark.parametrize("timed,forwards,profiled", [
    (None, 53, [{"k": 1}]),          # the child sent no record (the hook could not be installed)
    ({"k": 0}, 0, [{"k": 1}]),       # no timed forward
    ({}, 53, []),                    # nothing profiled
    ({}, 53, [None, None]),          # the profiles came without a record
    ({}, 53, [{}]),                  # no own Triton launch profiled: a CUDA candidate
])
def test_no_verdict_where_nothing_was_recorded(timed, forwards, profiled) -> None:
    assert launches_verdict(timed, forwards, profiled) == ([], "")


def test_the_tally_sums_every_timed_block_and_forgets_nothing() -> None:
    tally = LaunchTally()
    tally.add({"k": 50, "j": 50}, 50)   # the solo block: 3 warm-ups and 47 trials
    tally.add({"k": 4}, 4)              # a side-by-side block
    assert tally.launches == {"k": 54, "j": 50} and tally.forwards == 54
    assert launches_verdict(tally.launches, tally.forwards, [{"k": 1, "j": 1}])[0] == DISAGREE  # j skipped a block
    assert launches_verdict(tally.launches, tally.forwards, [{"k": 1}])[0] == []


@pytest.mark.parametrize("record,forwards", [(None, 5), ({"k": 5}, None), ({"k": 5}, -1), ({"k": 5}, True),
                                             ("k", 5)])
def test_a_block_without_a_usable_record_leaves_no_verdict(record, forwards) -> None:
    tally = LaunchTally()
    tally.add({"k": 5}, 5)
    tally.add(record, forwards)
    tally.add({"k": 5}, 5)
    assert tally.launches is None
    assert launches_verdict(tally.launches, tally.forwards, [{"k": 1}]) == ([], "")


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_the_flag_costs_the_whole_reward_under_every_preset(preset: str) -> None:
    verdict = EvalResult(problem_id="L1/19", candidate_sha256="x", backend="triton", precision="fp32",
                         device_kind="cuda", format_ok=True, compiled=True, correct=True, speedup=1.02,
                         flags=DISAGREE, error_category=ErrorCategory.OK)
    assert Flag.LAUNCHES_DISAGREE.value in DOUBT_FLAGS
    assert score(verdict, preset).reward == reward_floor(preset)


def test_a_kernel_missing_from_one_profiled_forward_is_expected_at_none_per_forward() -> None:
    # The profiled forward that launched a kernel least sets what the timed calls owe: none, where one never did
    assert launches_verdict({"a": 53}, 53, [{"a": 1, "b": 1}, {"a": 1}]) == (
        [], "own launches agree over 53 timed forwards (a, b)")


def test_one_timed_forward_missing_its_only_launch_is_caught() -> None:
    assert launches_verdict({}, 1, [{"k": 1}])[0] == DISAGREE


def test_the_note_names_each_short_kernel_with_what_it_launched_and_owed() -> None:
    flags, note = launches_verdict({"a": 52, "b": 10}, 53, [{"a": 1, "b": 1}])
    assert flags == DISAGREE
    assert note == ("the timed calls launched fewer own kernels than the profiled forward, over 53 forwards: "
                    "a 52 of 53; b 10 of 53")


def test_the_note_is_bounded() -> None:
    names = {f"kernel_with_a_long_name_{i}": 1 for i in range(40)}
    flags, note = launches_verdict({}, 53, [names])
    assert flags == DISAGREE and len(note) == 300


def test_a_block_of_no_forwards_adds_nothing_and_keeps_the_tally() -> None:
    tally = LaunchTally()
    tally.add({}, 0)
    tally.add({"k": 5}, 5)
    assert tally.launches == {"k": 5} and tally.forwards == 5
