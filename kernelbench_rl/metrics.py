"""Benchmark metrics: pass@k (unbiased), fast_p, rates and geometric-mean speedup.

Definitions follow KernelBench: fast_p is the fraction of problems whose kernel is correct AND
faster than p times the baseline (strictly), over all problems attempted; pass@k uses the
unbiased estimator 1 - C(n-c, k) / C(n, k).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field

FAST_P_THRESHOLDS: tuple[float, ...] = (0.0, 0.5, 0.8, 1.0, 1.5, 2.0)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k samples drawn from n (c of them correct) is correct."""
    if n <= 0 or k <= 0:
        raise ValueError("pass@k needs n > 0 and k > 0")
    if c < 0 or c > n:
        raise ValueError("pass@k needs 0 <= c <= n")
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples per problem, got {n}")
    if n - c < k:
        return 1.0
    # 1 - prod_{i=n-c+1}^{n} (1 - k/i): numerically stable form of the binomial ratio.
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


@dataclass(frozen=True)
class SampleOutcome:
    """What metrics need from one evaluated sample."""

    problem_id: str
    compiled: bool
    correct: bool
    speedup: float | None  # only counted when correct and verified; None on CPU
    # False when the sample got no verdict on its kernel (infra, too large, the model server failing): it is left
    # out of every rate instead of counting as wrong.
    judged: bool = True


def fast_p(best_speedups: Sequence[float | None], p: float) -> float:
    """Fraction of problems whose (best correct) speedup is strictly above p; None = not correct."""
    if not best_speedups:
        return 0.0
    return sum(1 for s in best_speedups if s is not None and s > p) / len(best_speedups)


def geometric_mean(values: Iterable[float]) -> float | None:
    vals = [v for v in values if v is not None and v > 0]
    if not vals:
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


@dataclass
class BenchmarkSummary:
    num_problems: int
    samples_per_problem: int
    compile_rate: float
    correct_rate: float
    pass_at_k: dict[str, float] = field(default_factory=dict)
    fast_p: dict[str, float] = field(default_factory=dict)  # only when speedups were measured
    geomean_speedup: float | None = None  # over correct samples with a measured speedup
    unjudged_samples: int = 0  # samples with no verdict on their kernel, left out of every figure above
    problems_without_verdict: int = 0  # problems none of whose samples was judged (left out of num_problems)

    def to_dict(self) -> dict:
        return asdict(self)


def summarize(outcomes: Sequence[SampleOutcome], ks: Sequence[int] = (1, 5, 10)) -> BenchmarkSummary:
    """Summarise samples of several problems (any number of samples per problem). Samples without a verdict on
    their kernel are counted apart and left out: pass@k of a problem uses its judged samples only."""
    unjudged = [o for o in outcomes if not o.judged]
    unjudged_problems = {o.problem_id for o in unjudged}
    outcomes = [o for o in outcomes if o.judged]
    by_problem: dict[str, list[SampleOutcome]] = {}
    for outcome in outcomes:
        by_problem.setdefault(outcome.problem_id, []).append(outcome)
    num_samples = len(outcomes)
    per_problem_n = min((len(v) for v in by_problem.values()), default=0)
    pass_k: dict[str, float] = {}
    for k in ks:
        if by_problem and all(len(v) >= k for v in by_problem.values()):
            values = [pass_at_k(len(v), sum(o.correct for o in v), k) for v in by_problem.values()]
            pass_k[f"pass@{k}"] = sum(values) / len(values)
    speedups_measured = any(o.speedup is not None for o in outcomes)
    best: list[float | None] = []
    for samples in by_problem.values():
        correct_speedups = [o.speedup for o in samples if o.correct and o.speedup is not None]
        best.append(max(correct_speedups) if correct_speedups else None)
    return BenchmarkSummary(
        num_problems=len(by_problem),
        samples_per_problem=per_problem_n,
        compile_rate=sum(o.compiled for o in outcomes) / num_samples if num_samples else 0.0,
        correct_rate=sum(o.correct for o in outcomes) / num_samples if num_samples else 0.0,
        pass_at_k=pass_k,
        fast_p={f"fast_{p:g}": fast_p(best, p) for p in FAST_P_THRESHOLDS} if speedups_measured else {},
        geomean_speedup=geometric_mean(o.speedup for o in outcomes if o.correct and o.speedup is not None),
        unjudged_samples=len(unjudged),
        problems_without_verdict=len(unjudged_problems - set(by_problem)),
    )
