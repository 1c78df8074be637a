"""Sensitivity seeds and the relative criterion: partial work and coarse approximations that the problem's own
inputs cannot tell from whole work must fail, and honest kernels must not.

The red-team candidates (tests/hacks/candidates/partial_*.py, poly_exp_softmax.py) read a fixed share of their input
the way each did at KernelBench's or kernrl's real size. Here they run on the bundled problems at sizes where their
estimates land within the tolerance on the problem's own inputs (as at the real size), first with the sensitivity
seeds off (KBRL_EVAL_SENSITIVITY=off: judged correct, as before they existed), then on (rejected); the problems'
own solutions pass at the same sizes. The mechanism's parts are tested without the sandbox below.
"""

from __future__ import annotations

import dataclasses
import types
from pathlib import Path

import pytest
import torch

from kernelbench_rl.evaluation.sandbox import perturbation, runtime, wire
from kernelbench_rl.evaluation.verdict import checks, discrimination, sensitivity
from kernelbench_rl.evaluation.front.api import Evaluator
from kernelbench_rl.evaluation.result import ErrorCategory, EvalRequest, EvalSettings
from kernelbench_rl.problems import get_problem, load_solution

CANDIDATES = Path(__file__).resolve().parent / "hacks" / "candidates"
SETTINGS = EvalSettings(device="cpu", timeout_s=300)
# Sizes where each partial read lands within the tolerance on the problem's own inputs (it fails at the bundled small
# sizes already: too few rows, pixels or points to estimate from), small enough for Triton's CPU interpreter.
PARTIAL = {
    "L1/95": ("partial_rows_cross_entropy", {"batch_size": 512, "num_classes": 4096}),  # 256 of 512 rows
    "L9/1": ("partial_scan_line", {"array_size": 1 << 20}),  # exact on 65,536 elements of 1M
    "L6/2": ("partial_histogram_rescaled", {"num_pixels": 4 << 20}),  # kernrl's real size: 81% of 4M pixels
    "L5/7": ("partial_pi_samples", {"num_samples": 1_000_000}),  # 2,048 of 1M points
}


def _problem(problem_id: str, sizes: dict[str, int]):
    return dataclasses.replace(get_problem(problem_id), small_sizes=sizes)


def _judge(problems: dict, requests: list[EvalRequest], shared_evaluator=None):
    """Judged on the shared pool where one is given; on a pool of its own otherwise (its workers read the sensitivity
    switch when they start)."""
    with (shared_evaluator or Evaluator)(SETTINGS, problems=problems) as ev:
        return ev.evaluate(requests)


@pytest.fixture(scope="module")
def partial_problems():
    return {pid: _problem(pid, sizes) for pid, (_name, sizes) in PARTIAL.items()}


def _partial_requests() -> list[EvalRequest]:
    return [EvalRequest(pid, (CANDIDATES / f"{name}.py").read_text(), SETTINGS, request_id=name)
            for pid, (name, _sizes) in PARTIAL.items()]


def test_partial_work_passes_the_problems_own_inputs_without_the_sensitivity_seeds(partial_problems, monkeypatch):
    """What the evaluator judged before the sensitivity seeds: every partial read correct (so the test below can
    fail). Pi is left out here: its own seeds barely move, so a memorised answer nearly passes and the problem gets
    widened inputs, on which 2,048 points are too few as well."""
    monkeypatch.setenv(sensitivity.ENV, "off")
    requests = [r for r in _partial_requests() if r.problem_id != "L5/7"]
    for request, result in zip(requests, _judge(partial_problems, requests)):
        assert result.correct, (request.request_id, result.error_category.value, result.error_message)
        assert result.versions["sensitivity"].startswith("off"), result.versions["sensitivity"]


def test_partial_work_fails_the_sensitivity_seeds_and_honest_solutions_pass_them(partial_problems, shared_evaluator):
    requests = _partial_requests()
    requests += [EvalRequest(pid, load_solution(get_problem(pid)), SETTINGS, request_id=f"solution {pid}")
                 for pid in PARTIAL if pid != "L1/95"]  # (its solution at 512 x 4096 is too slow for the interpreter)
    results = _judge(partial_problems, requests, shared_evaluator)
    for request, result in zip(requests, results):
        assert sensitivity.seeds_in(result.versions["sensitivity"]) >= 1, result.versions["sensitivity"]
        if request.request_id.startswith("solution"):
            assert result.correct, (request.request_id, result.error_message)
            assert result.trials_passed == result.trials_total
        else:
            assert result.error_category == ErrorCategory.MISMATCH and not result.correct, (
                request.request_id, result.error_category.value, result.error_message)
    by_name = {r.request_id: res for r, res in zip(requests, results)}
    for name in ("partial_rows_cross_entropy", "partial_scan_line", "partial_histogram_rescaled"):
        assert by_name[name].error_message.startswith("on inputs with a few elements changed"), by_name[name].error_message


def test_a_second_shape_catches_a_kernel_that_hardcodes_the_batch(shared_evaluator):
    """L1/95's own solution with the row count written in: correct on the problem's own sizes, not at a second one."""
    solution = load_solution(get_problem("L1/95"))
    hardcoded = solution.replace("M, C = predictions.shape", "M, C = 16, predictions.shape[1]")
    assert hardcoded != solution
    (result,) = _judge({}, [EvalRequest("L1/95", hardcoded, SETTINGS)], shared_evaluator)
    assert not result.correct and result.error_category == ErrorCategory.MISMATCH, result.error_message
    assert "must not assume the problem's sizes" in result.error_message
    assert "batch_size = 20" in result.versions["sensitivity"]


# -- the relative criterion ------------------------------------------------------------------------------------


def _softmaxes(width: int = 1000) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    x = torch.rand(16, width)
    reference = torch.softmax(x, dim=1)
    poly = 1 + x + x * x / 2
    honest = torch.softmax(x.double(), dim=1).float()  # another summation order, as a kernel's
    return reference, poly / poly.sum(dim=1, keepdim=True), honest


def test_a_polynomial_exp_softmax_fails_where_the_outputs_are_small_against_atol():
    reference, poly, honest = _softmaxes()
    outcome = checks.compare_outputs([reference], [poly], 1e-4, 1e-4)
    assert outcome.category == ErrorCategory.MISMATCH and "root mean square" in outcome.message, outcome.message
    assert checks.compare_outputs([reference], [honest], 1e-4, 1e-4).ok
    # At its real width (outputs ~3e-6) as well.
    reference, poly, honest = _softmaxes(width=393216 // 16)
    assert not checks.compare_outputs([reference], [poly], 1e-4, 1e-4).ok
    assert checks.compare_outputs([reference], [honest], 1e-4, 1e-4).ok


def test_without_the_relative_criterion_the_polynomial_softmax_passes(monkeypatch):
    """Every element is within atol = 1e-4: the elementwise check alone accepts it (so the test above can fail)."""
    monkeypatch.setattr(checks, "SMALL_SCALE_FACTOR", 0.0)
    reference, poly, _honest = _softmaxes()
    assert checks.compare_outputs([reference], [poly], 1e-4, 1e-4).ok


def test_the_relative_criterion_leaves_outputs_at_a_unit_scale_to_the_elementwise_check():
    torch.manual_seed(0)
    reference = torch.randn(64, 64) * 10
    off = reference * (1 + 5e-5)  # 5e-5 relative: within rtol
    assert checks.compare_outputs([reference], [off], 1e-4, 1e-4).ok


def test_the_polynomial_softmax_is_rejected_by_the_evaluator(shared_evaluator):
    (result,) = _judge({}, [EvalRequest("L1/23", (CANDIDATES / "poly_exp_softmax.py").read_text(), SETTINGS)],
                       shared_evaluator)
    assert not result.correct and result.error_category == ErrorCategory.MISMATCH, result.error_message


# -- the perturbation, without the sandbox ----------------------------------------------------------------------

PERTURB = {"name": sensitivity.PERTURBED, "perturb": {"sites": 8, "length": 4, "strength": 16.0}}


def _perturbed(tensor: torch.Tensor, seed: int = 3, variant=PERTURB) -> torch.Tensor:
    return perturbation.perturb_inputs([tensor.clone()], seed, variant)[0]


def test_a_perturbation_is_the_same_for_the_same_seed_and_spreads_over_the_whole_tensor():
    x = torch.rand(1000)
    a, b, c = _perturbed(x), _perturbed(x), _perturbed(x, seed=4)
    assert torch.equal(a, b) and not torch.equal(a, c)
    changed = (a != x).nonzero().flatten()
    assert 8 * 1 <= changed.numel() <= 8 * 4
    strata = set((changed * 8 // 1000).tolist())
    assert strata == set(range(8))  # one site in each eighth, the tail's included
    assert bool((a[changed] > x.max()).all())  # above the range: the reference must move


def test_a_single_site_is_where_the_whole_perturbation_puts_it():
    x = torch.rand(1000)
    whole = _perturbed(x)
    tail = _perturbed(x, variant={"name": sensitivity.PERTURBED, "perturb": {**PERTURB["perturb"], "only": 7}})
    changed = (tail != x).nonzero().flatten()
    assert changed.numel() and bool((changed >= 875).all()) and torch.equal(tail[changed], whole[changed])


def test_a_perturbation_keeps_zeros_symmetry_and_order():
    torch.manual_seed(0)
    lower = torch.tril(torch.rand(64, 64))
    assert torch.equal(torch.triu(_perturbed(lower), 1), torch.zeros(64, 64))
    a = torch.rand(64, 64)
    symmetric = _perturbed(a + a.T)
    assert torch.equal(symmetric, symmetric.T) and not torch.equal(symmetric, a + a.T)
    ordered = _perturbed(torch.sort(torch.rand(4, 256), dim=-1).values)
    assert bool((ordered[:, 1:] >= ordered[:, :-1]).all())


def test_integer_inputs_are_perturbed_with_their_own_values_only_when_nothing_is_floating():
    values = torch.randint(0, 256, (4096,))
    spec = {"name": sensitivity.PERTURBED, "perturb": {"sites": 8, "length": 64, "strength": None}}
    changed = perturbation.perturb_inputs([values.clone()], 1, spec)[0]
    assert not torch.equal(changed, values) and set(changed.tolist()) <= set(values.tolist())
    logits, targets = torch.rand(64, 16), torch.randint(0, 16, (64,))
    assert perturbation.perturbable([logits, targets]) == [0]  # class labels keep their meaning
    assert perturbation.perturbable([torch.rand(4), torch.ones(64, dtype=torch.bool)]) == []


def _runner(forward, make):
    def run(seed, variant):
        torch.manual_seed(seed)
        inputs = perturbation.perturb_inputs(discrimination.apply_variant(make(), variant), seed, variant)
        return inputs, [forward(*inputs)]
    return run


def test_the_audit_picks_longer_sites_for_a_mean_and_none_for_an_op_that_ignores_its_input():
    elementwise = sensitivity.audit(_runner(torch.sigmoid, lambda: [torch.rand(64, 256)]), [1, 2], 1e-4, 1e-4)
    assert elementwise.perturbation["perturb"] == {"sites": 32, "length": 1, "strength": 0.5}
    counting = sensitivity.audit(_runner(lambda x: 4.0 * (x < 0.5).float().mean(), lambda: [torch.rand(1 << 16)]),
                                 [1, 2], 0.05, 0.02)
    spec = counting.perturbation["perturb"]
    assert spec["sites"] < 32 and spec["length"] > 1  # each site must move a mean of 65,536 values by 4 tolerances
    ignored = sensitivity.audit(_runner(lambda x: x.shape[0] * torch.ones(3), lambda: [torch.rand(256)]),
                                [1, 2], 1e-4, 1e-4)
    assert ignored.perturbation is None and "no site moved" in ignored.summary()
    assert sensitivity.seeds_in(ignored.summary()) == 0


# -- the second shape -------------------------------------------------------------------------------------------

SHAPED = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n_features):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(n_features))

    def forward(self, x):
        return x * self.scale {read}


batch_size = 8
features = 32
rows_read = 4


def get_inputs():
    return [torch.rand(batch_size, features)]


def get_init_inputs():
    return [features]
'''


def _shape_audit(source: str) -> sensitivity.Sensitivity:
    module = types.ModuleType("shaped")
    exec(compile(source, "shaped", "exec"), module.__dict__)
    model = runtime.build_model(module.Model, module, 0, "cpu", "fp32")

    def run(seed, variant):
        inputs = runtime.make_inputs(module, seed, "cpu", "fp32", variant)
        with torch.no_grad():
            return inputs, [t.detach() for t in wire.flatten_outputs(model(*runtime.clone_inputs(inputs)))]
    return sensitivity.audit(run, [1, 2], 1e-4, 1e-4, module=module, source=source)


def test_the_second_shape_grows_the_batch_and_leaves_what_the_model_reads_alone():
    found = _shape_audit(SHAPED.format(read=""))
    assert found.shape == {"name": sensitivity.SECOND_SHAPE, "constants": {"batch_size": 10}}
    assert sensitivity.seeds_in(found.summary()) == 2
    # The model reads batch_size: never changed. features travels in the init inputs, rows_read sizes nothing.
    module = types.SimpleNamespace(batch_size=8, features=32, rows_read=4)
    assert sensitivity.size_constants(module, SHAPED.format(read="+ batch_size")) == ["features", "rows_read"]
    found = _shape_audit(SHAPED.format(read="+ batch_size"))
    assert found.shape is None
    assert "features changes the model's init inputs" in found.summary()
    assert "rows_read does not size the inputs" in found.summary()


def test_inputs_at_a_second_shape_are_made_with_the_constant_and_put_back():
    module = types.ModuleType("shaped")
    exec(compile(SHAPED.format(read=""), "shaped", "exec"), module.__dict__)
    variant = {"name": sensitivity.SECOND_SHAPE, "constants": {"batch_size": 10}}
    (x,) = runtime.make_inputs(module, 1, "cpu", "fp32", variant)
    assert x.shape == (10, 32) and module.batch_size == 8
    assert runtime.make_inputs(module, 1, "cpu", "fp32")[0].shape == (8, 32)


# -- the audit's budget -------------------------------------------------------------------------------------------


def _counting_reference(seconds_a_run: float, now: list[float]):
    """A reference that reads a mean of 65,536 values (its audit takes 19 runs) and costs `seconds_a_run` a run on a
    clock the audit reads (sensitivity.time, replaced by the test)."""
    inner = _runner(lambda x: 4.0 * (x < 0.5).float().mean(), lambda: [torch.rand(1 << 16)])

    def run(seed, variant):
        now[0] += seconds_a_run
        return inner(seed, variant)
    return run


def test_the_audit_spends_what_its_search_needs_at_the_reference_s_own_speed(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(sensitivity, "time", types.SimpleNamespace(perf_counter=lambda: now[0]))
    # 19 runs of 2 s: past a fixed 10 s (which left such a problem without sensitivity seeds), within its own bound.
    found = sensitivity.audit(_counting_reference(2.0, now), [1, 2], 0.05, 0.02)
    assert found.perturbation is not None and not found.out_of_time, found.summary()
    assert found.budget_s == sensitivity.audit_budget(2.0, sensitivity.search_runs(1 << 16, True)) == 60.0
    assert sensitivity.audit_budget(0.001, 84) == sensitivity.AUDIT_BUDGET_S  # fast references: the floor
    assert sensitivity.audit_budget(0.5, 84) == 42.0
    # Too slow even for the bound: no perturbation, and the audit says it ran out.
    found = sensitivity.audit(_counting_reference(10.0, now), [1, 2], 0.05, 0.02)
    assert found.perturbation is None and found.out_of_time
    assert "ran out" in found.summary() and "no verdict" in found.summary()


def test_a_problem_whose_sensitivity_audit_ran_out_gets_no_verdict():
    """Ours, not the kernel's: partial work might pass what could run, so the evaluation stops before any seed with
    `undiscriminating` (no verdict, no reward, never cached)."""
    from kernelbench_rl.evaluation.result import EvalResult
    from kernelbench_rl.evaluation.verdict import correctness
    from kernelbench_rl.evaluation.worker import checked_calls
    from kernelbench_rl.evaluation.verdict.faults import Fault

    audited = sensitivity.Sensitivity(notes=["no perturbation: the reference's forwards took the audit's 60 s"],
                                      out_of_time=True, budget_s=60.0)
    found = discrimination.Discrimination(sensitivity=audited)
    state = types.SimpleNamespace(seed_pool=list(range(16)), discrimination_for=lambda precision, given: found)
    result = EvalResult(problem_id="L1/95", candidate_sha256="", backend="triton", precision="fp32", device_kind="cpu")
    with pytest.raises(Fault) as raised:
        checked_calls.check_correctness(None, state, SETTINGS, result, 0.0, {}, shared=False, references=None,
                                        quiet_gate=None, transport="file", device="cpu")
    assert raised.value.category == ErrorCategory.UNDISCRIMINATING, raised.value.message
    assert "sensitivity audit" in raised.value.message and not result.correct
    # The decision is plain data (verdict/correctness.py: refusal): the same audit, no child.
    assert correctness.refusal(found).message == raised.value.message
    assert correctness.refusal(discrimination.Discrimination()) is None  # not audited: judged as it is


def test_the_problem_audit_reports_a_problem_too_slow_for_its_sensitivity_audit_as_unavailable(monkeypatch):
    from kernelbench_rl.problems import audit

    ran_out = sensitivity.Sensitivity(notes=["the audit's 60 s ran out"], out_of_time=True, budget_s=60.0)
    monkeypatch.setattr(discrimination.sensitivity, "audit", lambda *args, **kwargs: ran_out)
    (result,) = audit.audit_problems([get_problem("L1/21")], siblings=False)
    assert result.status == "unavailable" and "sensitivity audit" in result.detail, result
