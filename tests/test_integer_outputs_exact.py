"""Integer outputs (counts, hashes, indices, quantised values) are judged exactly, whatever the suite's float
tolerance: a value off by one is wrong however large the value is.

Small integers off by one cannot tell exact equality from a float tolerance (1 is past atol + rtol * 10 for
every suite), so these cases use values where a tolerance would hide the error: large magnitudes (rtol times a
billion is a hundred thousand), values past float32's 24-bit mantissa (2**24 + 1 casts to 2**24), and narrow
dtypes at the top of their range (kernrl's tolerance allows 5 around 255).
"""

from __future__ import annotations

import pytest
import torch

from kernelbench_rl.evaluation.sandbox import outputs, wire
from kernelbench_rl.evaluation.verdict import checks, fused_compare
from kernelbench_rl.evaluation.result import ErrorCategory, tolerance_for

# Every suite's float tolerance, and none at all: none of them applies to integers.
TOLERANCES = {f"{suite}-{precision}": tolerance_for(suite, precision)
              for suite in ("kernelbench", "kernrl") for precision in ("fp32", "bf16")}
TOLERANCES["no-tolerance"] = (0.0, 0.0)

INTEGER_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


def _top_of_range(dtype: torch.dtype, n: int = 64) -> torch.Tensor:
    """n distinct values just under the dtype's maximum, the largest magnitudes it holds."""
    top = torch.iinfo(dtype).max
    return (torch.arange(n, dtype=torch.int64) + (top - n + 1)).to(dtype)


def _off_by_one(ref: torch.Tensor, where: int = 7) -> torch.Tensor:
    got = ref.clone()
    got.view(-1)[where] -= 1
    return got


@pytest.mark.parametrize("tolerance", TOLERANCES.values(), ids=TOLERANCES.keys())
@pytest.mark.parametrize("dtype", INTEGER_DTYPES, ids=lambda d: str(d).removeprefix("torch."))
def test_a_large_integer_off_by_one_is_a_mismatch(dtype, tolerance):
    ref = _top_of_range(dtype)
    atol, rtol = tolerance
    assert checks.compare_outputs([ref], [ref.clone()], atol, rtol).ok
    outcome = checks.compare_outputs([ref], [_off_by_one(ref)], atol, rtol)
    assert outcome.category == ErrorCategory.MISMATCH, (dtype, tolerance, outcome)
    assert "1 of 64" in outcome.message and "integer outputs must be equal" in outcome.message


@pytest.mark.parametrize("tolerance", TOLERANCES.values(), ids=TOLERANCES.keys())
def test_hashes_past_float32_precision_are_compared_exactly(tolerance):
    # 2**24 + 1 and 2**24 are the same float32; 2**53 + 1 and 2**53 the same float64.
    ref = torch.tensor([2**24 + 1, 2**31 + 3, 2**53 + 1, 10**12 + 39], dtype=torch.int64)
    for position in range(ref.numel()):
        outcome = checks.compare_outputs([ref], [_off_by_one(ref, position)], *tolerance)
        assert outcome.category == ErrorCategory.MISMATCH, (position, outcome)


def test_an_integer_beside_a_float_output_is_still_exact():
    values = torch.linspace(-1.0, 1.0, 32)
    counts = torch.full((4,), 1_000_000, dtype=torch.int64)
    reference = wire.flatten_outputs((values, counts))
    atol, rtol = tolerance_for("kernrl", "fp32")
    assert checks.compare_outputs(reference, outputs.plain_outputs((values + 0.01, counts.clone())), atol, rtol).ok
    outcome = checks.compare_outputs(reference, outputs.plain_outputs((values.clone(), counts + 1)), atol, rtol)
    assert outcome.category == ErrorCategory.MISMATCH and outcome.message.startswith("output 1 ")


def test_a_python_int_result_is_exact():
    atol, rtol = tolerance_for("kernrl", "fp32")
    reference = wire.flatten_outputs(10**9)
    assert checks.compare_outputs(reference, outputs.plain_outputs(10**9), atol, rtol).ok
    assert checks.compare_outputs(reference, outputs.plain_outputs(10**9 + 1), atol, rtol).category \
        == ErrorCategory.MISMATCH


def test_integers_never_take_the_fused_tolerance_path():
    """The fused comparison applies a tolerance; on a GPU an integer output must not reach it."""
    assert all(dtype.is_floating_point for dtype in fused_compare.FUSED_DTYPES)


@pytest.mark.gpu
def test_a_large_integer_off_by_one_is_a_mismatch_on_the_gpu():
    atol, rtol = tolerance_for("kernrl", "fp32")
    for dtype in INTEGER_DTYPES:
        ref = _top_of_range(dtype).cuda()
        assert checks.compare_outputs([ref], [ref.clone()], atol, rtol).ok
        assert checks.compare_outputs([ref], [_off_by_one(ref)], atol, rtol).category == ErrorCategory.MISMATCH
