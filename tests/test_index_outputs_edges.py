"""Tie-tolerant index outputs at their edges: dims counted from the end, int32 indices, NaN and integer sources,
an element picked twice in a pair, a declaration that names no usable input, and the sentences a malformed
declaration gets. (The main cases are in tests/test_output_kinds.py.)"""

from __future__ import annotations

import pytest
import torch

from kernelbench_rl.evaluation.verdict import checks
from kernelbench_rl.evaluation.result import ErrorCategory

ATOL = RTOL = 1e-4


def _judge(ref, got, declared, inputs):
    return checks.compare_outputs([ref], [got], ATOL, RTOL, index_outputs=checks.declared_index_outputs(declared),
                                  inputs=inputs)


def test_a_dim_counted_from_the_end_reaches_the_first_dim():
    x = torch.tensor([[2.0, 7.0], [2.0, 1.0]])  # column 0 ties
    ref = torch.argsort(x, dim=0, stable=True)  # column 0: [0, 1]
    other = ref.clone()
    other[:, 0] = torch.tensor([1, 0])
    assert _judge(ref, other, {0: (0, -2)}, [x]).ok
    assert _judge(ref, other, {0: (0, 0)}, [x]).ok


@pytest.mark.parametrize("dim", [2, -3])
def test_a_dim_the_input_does_not_have_is_a_mismatch_not_an_error(dim):
    x = torch.tensor([[3.0, 1.0, 1.0]])
    ref = torch.argsort(x, dim=-1, stable=True)
    outcome = _judge(ref, torch.tensor([[2, 1, 0]]), {0: (0, dim)}, [x])
    assert outcome.category == ErrorCategory.MISMATCH and "has no such dim" in outcome.message


def test_without_the_inputs_a_declared_output_must_be_equal():
    x = torch.tensor([[3.0, 1.0, 1.0]])
    ref = torch.argsort(x, dim=-1, stable=True)
    for inputs in (None, []):  # no inputs, or none at the declared position
        outcome = _judge(ref, torch.tensor([[2, 1, 0]]), {0: (0, -1)}, inputs)
        assert outcome.category == ErrorCategory.MISMATCH and "has no such dim" in outcome.message


def test_int32_indices_are_judged_like_int64_and_narrower_ones_are_not_indices():
    x = torch.tensor([[3.0, 1.0, 1.0]])
    ref = torch.argsort(x, dim=-1, stable=True).to(torch.int32)  # [[1, 2, 0]]
    other = torch.tensor([[2, 1, 0]], dtype=torch.int32)
    assert _judge(ref, other, {0: (0, -1)}, [x]).ok
    narrow = _judge(ref.to(torch.int16), other.to(torch.int16), {0: (0, -1)}, [x])
    assert narrow.category == ErrorCategory.MISMATCH and "has no such dim" in narrow.message


def test_nan_ties_are_ties_and_a_nan_for_a_number_is_not():
    x = torch.tensor([[float("nan"), 1.0, float("nan")]])
    assert _judge(torch.tensor([[0, 1, 2]]), torch.tensor([[2, 1, 0]]), {0: (0, -1)}, [x]).ok
    wrong = _judge(torch.tensor([[1, 0, 2]]), torch.tensor([[0, 1, 2]]), {0: (0, -1)}, [x])
    assert wrong.category == ErrorCategory.MISMATCH and "at 2 of 3 positions" in wrong.message


def test_integer_sources_tie_too():
    x = torch.tensor([[4, 9, 4]])
    ref = torch.argsort(x, dim=-1, stable=True)  # [[0, 2, 1]]
    assert _judge(ref, torch.tensor([[2, 0, 1]]), {0: (0, -1)}, [x]).ok
    wrong = _judge(ref, torch.tensor([[1, 0, 2]]), {0: (0, -1)}, [x])
    assert wrong.category == ErrorCategory.MISMATCH and "other values" in wrong.message and "at 2 of 3" in wrong.message


def test_one_element_picked_twice_from_a_tied_pair_is_refused():
    x = torch.tensor([[5.0, 5.0]])
    ref = torch.tensor([[0, 1]])
    outcome = _judge(ref, torch.tensor([[1, 1]]), {0: (0, -1)}, [x])
    assert outcome.category == ErrorCategory.MISMATCH and "twice" in outcome.message


def test_a_malformed_declaration_says_what_is_wrong():
    with pytest.raises(ValueError, match=r"KBRL_INDEX_OUTPUTS must be a dict \{output: \(input, dim\)\}"):
        checks.declared_index_outputs([0, 1])
    with pytest.raises(ValueError, match=r"KBRL_INDEX_OUTPUTS entry 0: 1 is not output: \(input, dim\)"):
        checks.declared_index_outputs({0: 1})
