"""pass@k, fast_p and summaries against hand-computed values."""

import math
from itertools import combinations

import pytest

from kernelbench_rl.metrics import SampleOutcome, fast_p, geometric_mean, pass_at_k, summarize


def _pass_at_k_brute_force(n: int, c: int, k: int) -> float:
    samples = [True] * c + [False] * (n - c)
    draws = list(combinations(range(n), k))
    return sum(any(samples[i] for i in d) for d in draws) / len(draws)


@pytest.mark.parametrize("n,c,k", [(5, 0, 1), (5, 1, 1), (5, 2, 3), (10, 3, 5), (6, 6, 2), (8, 1, 8)])
def test_pass_at_k_matches_enumeration(n, c, k):
    assert pass_at_k(n, c, k) == pytest.approx(_pass_at_k_brute_force(n, c, k))


def test_pass_at_k_rejects_too_few_samples():
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 5)


def test_fast_p_is_strict_and_counts_incorrect_as_failures():
    best = [1.0, 2.5, None, 0.6]
    assert fast_p(best, 1.0) == 0.25  # 1.0 is not strictly above 1.0
    assert fast_p(best, 0.5) == 0.75
    assert fast_p(best, 0.0) == 0.75  # fast_0 is the correct rate over problems


def test_summary_per_problem_best_and_geomean():
    outcomes = [
        SampleOutcome("L1/1", True, True, 2.0),
        SampleOutcome("L1/1", True, False, None),
        SampleOutcome("L1/2", False, False, None),
        SampleOutcome("L1/2", True, True, 0.5),
    ]
    summary = summarize(outcomes, ks=(1, 2))
    assert summary.num_problems == 2 and summary.samples_per_problem == 2
    assert summary.compile_rate == 0.75 and summary.correct_rate == 0.5
    assert summary.pass_at_k == {"pass@1": pytest.approx(0.5), "pass@2": pytest.approx(1.0)}
    assert summary.fast_p["fast_1"] == 0.5 and summary.fast_p["fast_0"] == 1.0
    assert summary.geomean_speedup == pytest.approx(math.sqrt(2.0 * 0.5))
    assert geometric_mean([]) is None


def test_cpu_summary_claims_no_speedups():
    summary = summarize([SampleOutcome("L1/1", True, True, None)], ks=(1,))
    assert summary.fast_p == {} and summary.geomean_speedup is None


def test_samples_without_a_verdict_are_left_out_and_counted_never_wrong():
    from kernelbench_rl.metrics import SampleOutcome, summarize

    outcomes = [SampleOutcome("L1/1", True, True, None), SampleOutcome("L1/1", False, False, None, judged=False),
                SampleOutcome("L1/2", False, False, None, judged=False), SampleOutcome("L1/2", False, False, None, judged=False)]
    summary = summarize(outcomes, ks=(1,))
    assert summary.correct_rate == 1.0 and summary.compile_rate == 1.0  # the infra samples are not counted wrong
    assert summary.num_problems == 1 and summary.pass_at_k == {"pass@1": 1.0}  # pass@1 over L1/1's judged sample
    assert (summary.unjudged_samples, summary.problems_without_verdict) == (3, 1)
    nothing = summarize([SampleOutcome("L1/2", False, False, None, judged=False)], ks=(1,))
    assert nothing.num_problems == 0 and nothing.correct_rate == 0.0 and nothing.unjudged_samples == 1
