"""The check that a candidate left its inputs as it got them (bit for bit; NaN where NaN was), each way of
changing them named in its own sentence. The evaluator's tests reach it through whole evaluations; here it is
checked on its own."""

from __future__ import annotations

import pytest
import torch

from kernelbench_rl.evaluation.verdict.checks import inputs_unmodified


def _inputs() -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return [torch.randn(4, 8, generator=generator), torch.arange(6)]


def test_untouched_inputs_pass():
    original = _inputs()
    assert inputs_unmodified(original, [t.clone() for t in original]) == ""
    assert inputs_unmodified([], []) == ""


def test_an_input_changed_in_place_is_named():
    original = _inputs()
    after = [t.clone() for t in original]
    after[1][3] += 1
    assert inputs_unmodified(original, after) == "forward modified its input 1 in place; inputs must stay unchanged"
    after = [t.clone() for t in original]
    after[0][2, 5] = after[0][2, 5] + 1e-6  # one element, one ulp-scale change: still a change
    assert "its input 0 in place" in inputs_unmodified(original, after)


def test_a_changed_count_shape_or_dtype_is_its_own_sentence():
    original = _inputs()
    assert inputs_unmodified(original, original[:1]) == "the inputs changed in number during forward"
    reshaped = [original[0].reshape(8, 4).clone(), original[1].clone()]
    assert inputs_unmodified(original, reshaped) == "input 0 changed shape or dtype during forward"
    retyped = [original[0].clone(), original[1].to(torch.int32)]
    assert inputs_unmodified(original, retyped) == "input 1 changed shape or dtype during forward"


def test_nan_inputs_left_alone_pass_and_a_nan_input_changed_elsewhere_does_not():
    original = _inputs()
    original[0][0, 0] = float("nan")
    assert inputs_unmodified(original, [t.clone() for t in original]) == ""
    after = [t.clone() for t in original]
    after[0][1, 1] = 0.0
    assert "its input 0 in place" in inputs_unmodified(original, after)
    # A NaN written over a number is a change too.
    after = [t.clone() for t in original]
    after[0][3, 3] = float("nan")
    assert "its input 0 in place" in inputs_unmodified(original, after)
    after = [t.clone() for t in original]
    after[0][0, 0] = 5.0
    assert "its input 0 in place" in inputs_unmodified(original, after)


def test_a_zero_written_over_an_input_nan_is_a_change():
    original = [torch.tensor([float("nan"), 1.0])]
    assert "its input 0 in place" in inputs_unmodified(original, [torch.tensor([0.0, 1.0])])


def test_integer_inputs_never_take_the_nan_path():
    original = [torch.tensor([0, 1, 2])]
    assert "its input 0 in place" in inputs_unmodified(original, [torch.tensor([0, 1, 3])])
