"""Outputs of every kind: floats within the problem suite's tolerance, integers and booleans exactly, tuples
element by element, Python scalars, tie-tolerant index outputs where a problem declares them, and candidates
whose class is named Model (kernrl's convention).

The comparison and the trivial candidates are tested directly; a few verdicts go through the real sandboxed
evaluator on the CPU (Triton's interpreter) with its static policy on.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from kernelbench_rl.evaluation.sandbox import outputs, wire
from kernelbench_rl.evaluation.source import extract
from kernelbench_rl.evaluation.static_policy import candidate_class
from kernelbench_rl.evaluation.verdict import checks, discrimination
from kernelbench_rl.evaluation.result import ErrorCategory, EvalRequest, EvalSettings, tolerance_for
from kernelbench_rl.evaluation.static_policy import check_static
from kernelbench_rl.problems import Problem

KB_ATOL, KB_RTOL = tolerance_for("kernelbench", "fp32")
KR_ATOL, KR_RTOL = tolerance_for("kernrl", "fp32")


# -- the comparison ---------------------------------------------------------------------------------------------
def test_suite_tolerances():
    assert tolerance_for("kernelbench", "fp32") == (1e-4, 1e-4)
    assert tolerance_for("kernelbench", "bf16") == (1e-2, 1e-2)
    assert tolerance_for("kernrl", "fp32") == (0.05, 0.02)
    assert tolerance_for("kernrl", "fp16") == (0.05, 0.02)
    with pytest.raises(ValueError):
        tolerance_for("elsewhere", "fp32")


def test_integer_outputs_must_be_equal():
    ref = torch.arange(100, dtype=torch.int64)
    assert checks.compare_outputs([ref], [ref.clone()], KR_ATOL, KR_RTOL).ok
    off_by_one = ref.clone()
    off_by_one[17] += 1
    # No tolerance applies, not even kernrl's atol of 0.05 (an int off by one is 1 away; a hash off by 1 is wrong).
    outcome = checks.compare_outputs([ref], [off_by_one], KR_ATOL, KR_RTOL)
    assert outcome.category == ErrorCategory.MISMATCH
    assert "1 of 100" in outcome.message and "integer" in outcome.message


def test_complex_outputs_are_judged_on_both_parts():
    # An FFT's output: a wrong imaginary part is as wrong as a wrong real part.
    ref = torch.fft.fft(torch.randn(64, generator=torch.Generator().manual_seed(0)))
    assert checks.compare_outputs([ref], [ref.clone()], KR_ATOL, KR_RTOL).ok
    assert checks.compare_outputs([ref], [ref.conj().resolve_conj()], KR_ATOL, KR_RTOL).category == ErrorCategory.MISMATCH
    real_only = torch.complex(ref.real, torch.zeros_like(ref.imag))
    outcome = checks.compare_outputs([ref], [real_only], KR_ATOL, KR_RTOL)
    assert outcome.category == ErrorCategory.MISMATCH and "differs" in outcome.message


def test_boolean_outputs_must_be_equal():
    ref = torch.rand(64) > 0.5
    assert checks.compare_outputs([ref], [ref.clone()], KB_ATOL, KB_RTOL).ok
    flipped = ref.clone()
    flipped[3] = ~flipped[3]
    outcome = checks.compare_outputs([ref], [flipped], KB_ATOL, KB_RTOL)
    assert outcome.category == ErrorCategory.MISMATCH and "boolean" in outcome.message
    assert checks.compare_outputs([ref], [ref.to(torch.uint8)], KB_ATOL, KB_RTOL).category == ErrorCategory.DTYPE


def test_a_tuple_of_float_and_int_is_judged_element_by_element():
    values = torch.randn(4, 8)
    counts = (values > 0).sum(dim=1)
    reference = wire.flatten_outputs((values, counts))
    assert checks.compare_outputs(reference, outputs.plain_outputs((values + 1e-6, counts.clone())), KB_ATOL, KB_RTOL).ok
    wrong_counts = outputs.plain_outputs((values.clone(), counts + 1))
    outcome = checks.compare_outputs(reference, wrong_counts, KB_ATOL, KB_RTOL)
    assert outcome.category == ErrorCategory.MISMATCH and outcome.message.startswith("output 1 ")
    wrong_values = outputs.plain_outputs((values + 1.0, counts.clone()))
    assert checks.compare_outputs(reference, wrong_values, KB_ATOL, KB_RTOL).message.startswith("output 0 ")
    swapped = outputs.plain_outputs((counts.clone(), values.clone()))
    assert not checks.compare_outputs(reference, swapped, KB_ATOL, KB_RTOL).ok


def test_python_scalars_travel_as_zero_dim_tensors():
    # A reference that returns a Python int (a count) or bool; the candidate may return a 0-d tensor of that dtype.
    for reference_value, right, wrong in ((42, torch.tensor(42), 41), (True, torch.tensor(True), False),
                                          (2.5, torch.tensor(2.5), 2.6)):
        reference = wire.flatten_outputs(reference_value)
        assert reference[0].dim() == 0
        assert checks.compare_outputs(reference, outputs.plain_outputs(reference_value), KB_ATOL, KB_RTOL).ok
        assert checks.compare_outputs(reference, outputs.plain_outputs(right), KB_ATOL, KB_RTOL).ok
        assert not checks.compare_outputs(reference, outputs.plain_outputs(wrong), KB_ATOL, KB_RTOL).ok
    # A count returned as a float is another dtype, not a close value.
    assert checks.compare_outputs(wire.flatten_outputs(3), outputs.plain_outputs(3.0), KB_ATOL, KB_RTOL).category \
        == ErrorCategory.DTYPE


def test_kernrl_tolerance_accepts_what_kernelbench_refuses():
    generator = torch.Generator().manual_seed(0)
    ref = torch.randn(256, generator=generator) * 4
    near = ref + 0.03  # within kernrl's atol 0.05, far outside KernelBench's 1e-4
    assert checks.compare_outputs([ref], [near], KR_ATOL, KR_RTOL).ok
    assert checks.compare_outputs([ref], [near], KB_ATOL, KB_RTOL).category == ErrorCategory.MISMATCH
    assert checks.compare_outputs([ref], [ref + 0.2], KR_ATOL, KR_RTOL).category == ErrorCategory.MISMATCH
    # Defences hold at the wider tolerance: NaN where the reference is finite, and zeros for a tiny-scale output.
    nan = ref.clone()
    nan[0] = float("nan")
    assert "NaN" in checks.compare_outputs([ref], [nan], KR_ATOL, KR_RTOL).message
    # Every value ~1e-3 and the largest ~1e-2 whatever the seed, so the whole output is under atol=0.05 and only the
    # scale rule can refuse zeros (unit-variance logits put one value past atol in about one draw of five).
    tiny = torch.softmax(torch.randn(64, 1024, generator=generator) * 0.5, dim=1)
    zeros = checks.compare_outputs([tiny], [torch.zeros_like(tiny)], KR_ATOL, KR_RTOL)
    assert zeros.category == ErrorCategory.MISMATCH and "scale" in zeros.message
    assert checks.compare_outputs([tiny], [tiny.clone()], KR_ATOL, KR_RTOL).ok


# -- tie-tolerant index outputs ---------------------------------------------------------------------------------
def test_tied_argsort_indices_pass_only_where_the_problem_opts_in():
    x = torch.tensor([[3.0, 1.0, 1.0, 2.0, 1.0]])
    ref = torch.argsort(x, dim=-1, stable=True)  # [[1, 2, 4, 3, 0]]
    other_tie_order = torch.tensor([[4, 1, 2, 3, 0]])
    declared = checks.declared_index_outputs({0: (0, -1)})
    assert not checks.compare_outputs([ref], [other_tie_order], KB_ATOL, KB_RTOL).ok  # exact by default
    assert checks.compare_outputs([ref], [other_tie_order], KB_ATOL, KB_RTOL, index_outputs=declared, inputs=[x]).ok
    # Valid indices of the wrong values, a repeated index, an index out of range: all wrong.
    for wrong, words in ((torch.tensor([[1, 2, 3, 4, 0]]), "other values"),
                         (torch.tensor([[1, 1, 4, 3, 0]]), "twice"),
                         (torch.tensor([[1, 2, 4, 3, 5]]), "outside")):
        outcome = checks.compare_outputs([ref], [wrong], KB_ATOL, KB_RTOL, index_outputs=declared, inputs=[x])
        assert outcome.category == ErrorCategory.MISMATCH and words in outcome.message


def test_tied_topk_indices_beside_their_values():
    x = torch.tensor([[5.0, 7.0, 7.0, 1.0], [2.0, 2.0, 2.0, 9.0]])
    values, indices = torch.topk(x, 2, dim=1)
    declared = checks.declared_index_outputs({1: [0, 1]})
    swapped = indices.clone()
    swapped[0] = swapped[0].flip(0)  # 7 and 7: either order is a right answer
    assert checks.compare_outputs([values, indices], [values.clone(), swapped], KB_ATOL, KB_RTOL,
                                  index_outputs=declared, inputs=[x]).ok
    other_two = indices.clone()
    other_two[1, 1] = 2 if int(indices[1, 1]) != 2 else 0  # row 1's second value 2.0 sits at 0, 1 and 2
    assert checks.compare_outputs([values, indices], [values.clone(), other_two], KB_ATOL, KB_RTOL,
                                  index_outputs=declared, inputs=[x]).ok
    wrong = indices.clone()
    wrong[1] = torch.tensor([1, 0])  # 2.0 and 2.0, where the top two are 9.0 and 2.0
    outcome = checks.compare_outputs([values, indices], [values.clone(), wrong], KB_ATOL, KB_RTOL,
                                     index_outputs=declared, inputs=[x])
    assert outcome.category == ErrorCategory.MISMATCH and "output 1" in outcome.message


def test_a_malformed_index_declaration_is_refused():
    for bad in ([0, 1], {0: 1}, {"0": (0, 1)}, {0: (0, 1, 2)}, {0: (-1, 0)}):
        with pytest.raises(ValueError):
            checks.declared_index_outputs(bad)
    assert checks.declared_index_outputs(None) == {}


# -- trivial candidates with integer and boolean outputs ----------------------------------------------------------
def test_trivial_candidates_run_on_integer_and_boolean_outputs():
    x = torch.randint(0, 10, (32,))
    # Integer output equal to its input (an identity on ints): "the first input returned" passes.
    assert "the first input returned" in discrimination.trivial_passes([x.clone()], [x], [x + 1], KB_ATOL, KB_RTOL)
    # An all-False mask: zeros pass; an all-True one: ones pass; a count that never varies: the memorised constant.
    never = torch.zeros(32, dtype=torch.bool)
    assert "zeros" in discrimination.trivial_passes([never], [x], [never], KB_ATOL, KB_RTOL)
    assert "ones" in discrimination.trivial_passes([~never], [x], [~never], KB_ATOL, KB_RTOL)
    constant = torch.full((4,), 7, dtype=torch.int64)
    assert "a constant (another seed's mean)" in discrimination.trivial_passes([constant], [x], [constant.clone()],
                                                                               KB_ATOL, KB_RTOL)
    # A real mask and real counts: nothing trivial passes.
    mask, counts = x > 4, torch.bincount(x, minlength=10)
    assert discrimination.trivial_passes([mask, counts], [x], [~mask, counts + 1], KB_ATOL, KB_RTOL) == []


# -- Model as the candidate's class ----------------------------------------------------------------------------
def test_as_model_new_renames_only_the_candidates_own_model():
    source = ('import torch\n'
              'class Model(torch.nn.Module):\n'
              '    def __init__(self):\n'
              '        super(Model, self).__init__()  # Model stays in comments\n'
              '        self.note = "Model"\n'
              '    def forward(self, x):\n'
              '        return x.Model if False else x\n')
    renamed = candidate_class.as_model_new(source)
    assert "class ModelNew(torch.nn.Module):" in renamed
    assert "super(ModelNew, self)" in renamed
    assert '"Model"' in renamed and "x.Model" in renamed and "# Model stays" in renamed
    assert renamed.count("\n") == source.count("\n")
    both = source + "\nclass ModelNew(Model):\n    pass\n"
    assert candidate_class.as_model_new(both) == both  # ModelNew is defined: the candidate; Model is left alone
    assert candidate_class.as_model_new("Model = 3\n") == "Model = 3\n"  # not a class


def test_extraction_accepts_a_response_whose_class_is_model():
    response = "Here it is:\n```python\n" + MODEL_NAMED_CANDIDATE + "\n```\n"
    found = extract.extract_kernel(response, "triton")
    assert found.format_ok, found.reason
    assert not extract.extract_kernel("```python\nimport triton\nx = 1\n```", "triton").format_ok


def test_static_policy_judges_a_candidate_named_model_as_model_new():
    assert check_static(MODEL_NAMED_CANDIDATE, "triton", reference_source=PROBLEM_SOURCE).ok
    # The reference's own computation under the name Model is still torch compute, not a kernel.
    lazy = PROBLEM_SOURCE.split("def get_inputs")[0]
    report = check_static(lazy, "triton", reference_source=PROBLEM_SOURCE)
    assert not report.ok


# -- verdicts through the sandboxed evaluator ----------------------------------------------------------------------
PROBLEM_SOURCE = '''
import torch
import torch.nn as nn

ROWS, COLS = 8, 64


class Model(nn.Module):
    """y = 2x + 1, the count of positive values per row, and the mask x > 0.5."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x * 2.0 + 1.0, (x > 0).sum(dim=1), x > 0.5


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
'''

KERNEL = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def rows_kernel(x_ptr, y_ptr, count_ptr, mark_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    inside = offs < n
    x = tl.load(x_ptr + row * n + offs, mask=inside, other=0.0)
    tl.store(y_ptr + row * n + offs, x * 2.0 + 1.0 + SHIFT, mask=inside)
    tl.store(mark_ptr + row * n + offs, x > 0.5, mask=inside)
    tl.store(count_ptr + row, tl.sum((x > 0.0).to(tl.int64), axis=0) + EXTRA)


class CLASS_NAME(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        rows, n = x.shape
        y = torch.empty_like(x)
        counts = torch.empty(rows, dtype=torch.int64, device=x.device)
        marks = torch.empty((rows, n), dtype=torch.bool, device=x.device)
        rows_kernel[(rows,)](x, y, counts, marks, n, BLOCK=triton.next_power_of_2(n))
        return y, counts, marks
'''


def kernel(class_name: str = "ModelNew", shift: str = "0.0", extra: str = "0") -> str:
    return (KERNEL.replace("CLASS_NAME", class_name).replace("+ SHIFT", f"+ {shift}")
            .replace("+ EXTRA", f"+ {extra}"))


MODEL_NAMED_CANDIDATE = kernel("Model")


@dataclass(frozen=True)
class SuiteProblem(Problem):
    suite: str = "kernelbench"


KERNELBENCH_PROBLEM = SuiteProblem(level=1, number=9201, name="9201_Rows", source=PROBLEM_SOURCE, origin="inline")
KERNRL_PROBLEM = SuiteProblem(level=1, number=9202, name="9202_Rows", source=PROBLEM_SOURCE, origin="inline",
                              suite="kernrl")
SETTINGS = EvalSettings(device="cpu", timeout_s=90)


@pytest.fixture(scope="module")
def evaluator(shared_evaluator):
    ev = shared_evaluator(SETTINGS, problems={p.id: p for p in (KERNELBENCH_PROBLEM, KERNRL_PROBLEM)})
    try:
        yield ev
    finally:
        ev.close()


def test_verdicts_on_float_int_and_bool_outputs(evaluator):
    requests = [EvalRequest(KERNELBENCH_PROBLEM.id, source, SETTINGS) for source in (
        kernel(), kernel(extra="1"), kernel("Model"), kernel(shift="0.01"))]
    right, off_by_one, named_model, shifted = evaluator.evaluate(requests)
    assert right.correct, right.error_message
    assert right.versions["suite"] == "kernelbench"
    assert right.versions["tolerance"].startswith("kernelbench fp32: floats atol=0.0001 rtol=0.0001")
    assert off_by_one.error_category == ErrorCategory.MISMATCH and "output 1" in off_by_one.error_message
    assert named_model.correct, named_model.error_message  # kernrl's convention: the class is named Model
    assert shifted.error_category == ErrorCategory.MISMATCH and "output 0" in shifted.error_message


def test_the_kernrl_suite_judges_floats_by_its_own_tolerance(evaluator):
    shifted, off_by_one = evaluator.evaluate([EvalRequest(KERNRL_PROBLEM.id, kernel("Model", shift="0.01"), SETTINGS),
                                              EvalRequest(KERNRL_PROBLEM.id, kernel("Model", extra="1"), SETTINGS)])
    assert shifted.correct, shifted.error_message
    assert shifted.versions["suite"] == "kernrl"
    assert "atol=0.05 rtol=0.02" in shifted.versions["tolerance"]
    assert off_by_one.error_category == ErrorCategory.MISMATCH  # integers stay exact in every suite
