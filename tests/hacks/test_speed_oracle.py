"""The red team's oracle (hack_cases.speed_counts, standard library only, so bench/gpu_redteam.py runs it on a GPU
machine without the package) gives the answer of the code it mirrors (EvalResult.speedup_counts) on every
combination of the evaluator's flags, with and without a speedup, correct or not."""

from __future__ import annotations

from itertools import combinations

from hack_cases import SPEED_DOUBT_FLAGS, speed_counts

from kernelbench_rl.evaluation.result import DOUBT_FLAGS, EvalResult, Flag

SPEEDUPS = (None, 0.0, 0.5, 1.0, 1.5, 9.9, 10.0, 250.0)


def _every_flag_set():
    flags = [flag.value for flag in Flag]
    for size in range(len(flags) + 1):
        yield from combinations(flags, size)


def test_the_oracles_flags_of_doubt_are_the_codes():
    assert SPEED_DOUBT_FLAGS == DOUBT_FLAGS


def test_the_oracle_and_the_code_agree_on_every_flag_combination_and_speedup():
    checked = 0
    disagree = []
    for flags in _every_flag_set():
        for correct in (True, False):
            base = EvalResult("L1/19", "0" * 64, "triton", "fp32", "cuda", correct=correct, flags=list(flags))
            as_dict = base.to_dict()
            for speedup in SPEEDUPS:
                base.speedup = speedup
                as_dict["speedup"] = speedup
                checked += 1
                if speed_counts(as_dict) != base.speedup_counts:
                    disagree.append((flags, correct, speedup, base.speedup_counts))
    assert checked == 2 ** len(Flag) * 2 * len(SPEEDUPS)
    assert not disagree, f"{len(disagree)} disagreements, first: {disagree[:5]}"


def test_each_flag_of_doubt_alone_takes_the_speedup_away_and_reverification_lifts_only_the_excessive_one():
    """The agreement above would also hold for an oracle and a code both wrong the same way: the rule itself, as the
    result module states it."""
    honest = {"correct": True, "speedup": 3.0, "flags": [], "static": {"errors": []}}
    assert speed_counts(honest)
    for flag in sorted(DOUBT_FLAGS):
        assert not speed_counts({**honest, "flags": [flag]}), flag
        assert not speed_counts({**honest, "flags": [flag, "reverified"]}), flag
    assert not speed_counts({**honest, "flags": ["excessive_speedup"]})
    assert speed_counts({**honest, "flags": ["excessive_speedup", "reverified"]})
    assert not speed_counts({**honest, "flags": ["hack"]})
    assert not speed_counts({**honest, "speedup": None})
