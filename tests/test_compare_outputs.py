"""compare_outputs path by path: the category, the sentence and the max abs error of each verdict, which output a
sentence names, every output looked at, the tolerances times `margin`, and the degenerate-scale and relative (root
mean square) rules at their bounds. Powers of two keep the bounds exact in float32 and float64."""

from __future__ import annotations

import pytest
import torch

from kernelbench_rl.evaluation.result import ErrorCategory
from kernelbench_rl.evaluation.verdict.checks import (
    DEGENERATE_SCALE_FACTOR,
    SMALL_SCALE_FACTOR,
    CheckOutcome,
    compare_outputs,
)

ATOL = RTOL = 1e-4
A = 2.0 ** -10  # an atol whose multiples in the rules are exact


def _f(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


def test_a_wrong_count_is_a_shape_fault_naming_both_counts() -> None:
    outcome = compare_outputs([_f(1.0)], [_f(1.0), _f(1.0)], ATOL, RTOL)
    assert (outcome.category, outcome.message) == (ErrorCategory.SHAPE, "forward returned 2 tensor(s), expected 1")


def test_a_wrong_shape_names_the_output_and_both_shapes() -> None:
    outcome = compare_outputs([torch.zeros(2, 3)], [torch.zeros(3, 2)], ATOL, RTOL)
    assert (outcome.category, outcome.message) == (ErrorCategory.SHAPE, "output has shape (3, 2), expected (2, 3)")
    second = compare_outputs([_f(1.0), torch.zeros(2, 3)], [_f(1.0), torch.zeros(3, 2)], ATOL, RTOL)
    assert (second.category, second.message) == (ErrorCategory.SHAPE, "output 1 has shape (3, 2), expected (2, 3)")


def test_a_wrong_dtype_names_both_dtypes_without_the_module() -> None:
    outcome = compare_outputs([_f(1.0)], [_f(1.0).double()], ATOL, RTOL)
    assert (outcome.category, outcome.message) == (ErrorCategory.DTYPE, "output has dtype float64, expected float32")


@pytest.mark.parametrize("value, kind", [(float("nan"), "NaN"), (float("inf"), "Inf")])
def test_a_non_finite_value_where_the_reference_is_finite_is_a_mismatch(value: float, kind: str) -> None:
    outcome = compare_outputs([_f(1.0, 2.0)], [_f(1.0, value)], ATOL, RTOL)
    assert (outcome.category, outcome.message) == (ErrorCategory.MISMATCH,
                                                   f"output contains {kind} where the reference is finite")


def test_an_elementwise_mismatch_reports_its_count_error_and_tolerance() -> None:
    outcome = compare_outputs([_f(1.0, 2.0, 3.0)], [_f(1.0, 2.5, 3.0)], ATOL, RTOL)
    assert outcome == CheckOutcome(ErrorCategory.MISMATCH, "output differs from the reference at 1 of 3 elements "
                                   "(max abs error 0.5, tolerance atol=0.0001 rtol=0.0001)", max_abs_err=0.5)


def test_a_pass_reports_the_largest_error_over_every_output() -> None:
    small, larger = 2.0 ** -16, 2.0 ** -15  # within atol = 1e-4
    outcome = compare_outputs([_f(1.0, 1.0), _f(4.0)], [_f(1.0, 1.0 + small), _f(4.0 + larger)], ATOL, RTOL)
    assert outcome == CheckOutcome(ErrorCategory.OK, "", max_abs_err=larger)
    assert compare_outputs([_f(1.0)], [_f(1.0)], ATOL, RTOL) == CheckOutcome(ErrorCategory.OK, "", max_abs_err=0.0)


def test_an_empty_or_equal_output_does_not_end_the_look_at_the_next_ones() -> None:
    wrong = compare_outputs([torch.zeros(0), _f(1.0)], [torch.zeros(0), _f(2.0)], ATOL, RTOL)
    assert wrong.category == ErrorCategory.MISMATCH and wrong.message.startswith("output 1 differs")
    ints = torch.tensor([1, 2])
    wrong = compare_outputs([ints, _f(1.0)], [ints.clone(), _f(2.0)], ATOL, RTOL)
    assert wrong.category == ErrorCategory.MISMATCH and wrong.message.startswith("output 1 differs")


def test_a_boolean_mismatch_says_boolean_and_an_integer_one_integer() -> None:
    flags = compare_outputs([torch.tensor([True, False])], [torch.tensor([True, True])], ATOL, RTOL)
    assert flags.message == "output differs from the reference at 1 of 2 elements (boolean outputs must be equal)"
    ints = compare_outputs([torch.tensor([1, 2])], [torch.tensor([1, 3])], ATOL, RTOL)
    assert ints.message == "output differs from the reference at 1 of 2 elements (integer outputs must be equal)"


def test_the_margin_is_one_by_default_and_multiplies_both_tolerances() -> None:
    ref = _f(0.0, 8.0)
    # atol alone: 1.5 atol off, where the reference is 0.
    off_abs = _f(1.5 * A, 8.0)
    assert not compare_outputs([ref], [off_abs], A, 0.0).ok  # the default margin is 1
    assert compare_outputs([ref], [off_abs], A, 0.0, margin=2.0).ok
    # rtol alone: 1.5 rtol off at 8.
    off_rel = _f(0.0, 8.0 * (1 + 1.5 * A))
    assert not compare_outputs([ref], [off_rel], 0.0, A).ok
    assert compare_outputs([ref], [off_rel], 0.0, A, margin=2.0).ok
    wrong = compare_outputs([ref], [_f(0.0, 9.0)], A, A, margin=4.0)
    assert "tolerance atol=0.00390625 rtol=0.00390625" in wrong.message


def test_the_degenerate_scale_rule_at_its_bounds() -> None:
    """An output no larger than DEGENERATE_SCALE_FACTOR x atol must be within 1% x margin of its scale."""
    top = DEGENERATE_SCALE_FACTOR * A  # exactly the bound
    ref = _f(top, 0.0, 0.0, 0.0)
    off = compare_outputs([ref], [_f(top - 2 * A, 0.0, 0.0, 0.0)], A, 2.0 ** -2)  # within atol + rtol x |ref|
    assert off == CheckOutcome(ErrorCategory.MISMATCH, f"output is off by {2 * A:.3g} where the reference's values are "
                               f"at most {top:.3g}: within the elementwise tolerance, but 20% of the output's scale",
                               max_abs_err=2 * A)
    # The error equal to 1% x margin of the scale passes; a margin of 100 makes that the whole scale.
    s = 2.0 ** -7
    exactly = compare_outputs([_f(s, 0.0, 0.0, 0.0)], [_f(2 * s, 0.0, 0.0, 0.0)], A, 2.0 ** -6, margin=100.0)
    assert exactly.ok, exactly.message
    # The margin widens the allowance: 2% of the scale passes at margin 4 (4%), not at margin 1.
    ref = _f(s, s, s, s)
    two_percent = ref + 0.02 * s
    assert compare_outputs([ref], [two_percent], A, 2.0 ** -2, margin=4.0).ok
    assert "of the output's scale" in compare_outputs([ref], [two_percent], A, 2.0 ** -2).message
    # An all-zero reference has no scale to hold a candidate to: within atol passes.
    assert compare_outputs([torch.zeros(4)], [torch.full((4,), A / 2)], A, A).ok


def test_the_relative_rule_at_its_bounds() -> None:
    """Outputs no larger than SMALL_SCALE_FACTOR x atol: the error's root mean square within 10 x rtol x margin of
    the reference's."""
    rtol = 2.0 ** -20
    top = SMALL_SCALE_FACTOR * A  # 0.9765625, exact
    ref = torch.full((8,), top)
    off = ref + 2.0 ** -11  # within atol everywhere, far past 10 x rtol in root mean square
    at_bound = compare_outputs([ref], [off], A, rtol)
    ratio = 2.0 ** -11 / top
    assert at_bound == CheckOutcome(
        ErrorCategory.MISMATCH,
        f"output is off by {ratio:.2%} of its typical size (root mean square) where its values (at most {top:.3g}) are "
        f"small against atol={A:g}: within the elementwise tolerance, but a relative error over {10 * rtol:g} at "
        "this scale", max_abs_err=2.0 ** -11)
    # Larger outputs are left to the elementwise check.
    assert compare_outputs([torch.full((8,), 4.0)], [torch.full((8,), 4.0 + 2.0 ** -11)], A, rtol).ok
    # The error's root mean square equal to the bound passes: 10 x 2^-10 x 2^-4, exact.
    ref = torch.full((8,), 2.0 ** -4)
    equal = ref + 5 * 2.0 ** -13
    assert compare_outputs([ref], [equal], A, A).ok
    # The margin multiplies the bound: twice the bound fails at margin 1 and passes at margin 4.
    twice = ref + 10 * 2.0 ** -13  # within an atol of 2^-9
    assert "is off by 1.95% of its typical size (root mean square)" in compare_outputs([ref], [twice], 2 * A, A).message
    assert compare_outputs([ref], [twice], 2 * A, A, margin=4.0).ok
