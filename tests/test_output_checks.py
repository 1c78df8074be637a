"""What forward returns: exactly torch.Tensor objects (a lazy subclass would run its work after the timer),
never an input or a view of one where the reference returns a new tensor; and what Triton's CPU interpreter
cannot run is no verdict on the kernel.

The unit tests call evaluation/sandbox/outputs.py and timer.time_forward directly (a host clock stands in for
CUDA events); the rest run real candidates through one Evaluator on the CPU (Triton's interpreter), all
in one batch.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from host_clock import HOST_CLOCK  # noqa: E402
from test_evaluator import candidate as relu_candidate  # noqa: E402 - its HEAD: a ReLU kernel and relu_into(x, out)

from kernelbench_rl.evaluation.sandbox import outputs  # noqa: E402
from kernelbench_rl.evaluation.sandbox import timer
from kernelbench_rl.evaluation.result import ErrorCategory, EvalRequest, EvalSettings, Flag  # noqa: E402
from kernelbench_rl.problems import Problem  # noqa: E402
from kernelbench_rl.rewards.shaping import score  # noqa: E402
from kernelbench_rl.store.db import Store  # noqa: E402

HACKS_DIR = Path(__file__).resolve().parent / "hacks" / "candidates"
SETTINGS = EvalSettings(device="cpu", timeout_s=60)


class Lazy(torch.Tensor):
    """A tensor subclass that counts how often torch calls reach it (each one would run deferred work)."""

    touched = 0

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        Lazy.touched += 1
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **(kwargs or {}))


def lazy(tensor: torch.Tensor) -> torch.Tensor:
    made = torch.Tensor._make_subclass(Lazy, tensor)
    Lazy.touched = 0
    return made


# -- outputs.py ------------------------------------------------------------------------------------

def test_plain_tensors_tuples_lists_and_scalars_are_accepted():
    x, y = torch.ones(2), torch.zeros(3)
    assert outputs.plain_outputs(x)[0] is x
    flat = outputs.plain_outputs((x, [y, 2.5]))
    assert flat[0] is x and flat[1] is y and float(flat[2]) == 2.5
    values, indices = outputs.plain_outputs(torch.max(torch.randn(3, 4), dim=1))  # a torch.return_types tuple
    assert values.shape == indices.shape == (3,)


def test_a_tuple_subclass_is_walked_without_running_its_own_methods():
    class Sneaky(tuple):
        calls = 0

        def __iter__(self):
            Sneaky.calls += 1
            return super().__iter__()

        def __getitem__(self, index):
            Sneaky.calls += 1
            return super().__getitem__(index)

    x = torch.ones(2)
    assert outputs.plain_outputs(Sneaky((x, x)))[1] is x and Sneaky.calls == 0


@pytest.mark.parametrize("wrap", [lambda t: t, lambda t: (torch.ones(1), t), lambda t: [[t]]], ids=["bare", "tuple", "nested"])
def test_a_tensor_subclass_is_refused_without_running_its_torch_function(wrap):
    value = wrap(lazy(torch.ones(4)))
    with pytest.raises(outputs.ForeignOutput) as caught:
        outputs.plain_outputs(value)
    assert Lazy.touched == 0, "the check touched the output: a lazy subclass ran its work"
    assert caught.value.hack
    assert "class Lazy, a torch.Tensor subclass" in caught.value.message


def test_parameters_and_other_objects_are_refused_too():
    with pytest.raises(outputs.ForeignOutput) as parameter:
        outputs.plain_outputs(torch.nn.Parameter(torch.ones(2)))
    assert parameter.value.hack and "Parameter" in parameter.value.message
    with pytest.raises(outputs.ForeignOutput) as mapping:
        outputs.plain_outputs({"out": torch.ones(2)})
    assert not mapping.value.hack and "dict" in mapping.value.message


def test_an_output_that_is_an_input_or_a_view_of_one_is_found():
    x, w = torch.randn(4, 6), torch.randn(6)
    views = [x, x.view_as(x), x.reshape(x.shape), x[2:], x.t(), w.unsqueeze(0), x.clone(), torch.empty(0)]
    assert outputs.input_aliases(views, [x, 3, w]) == [0, 0, 0, 0, 0, 1, None, None]


def test_aliasing_is_allowed_only_where_the_reference_aliases_the_same_input():
    assert outputs.alias_fault([None, None], [None, None]) == ""
    assert outputs.alias_fault([0, None], [0, None]) == ""
    assert "output 1 is input 0" in outputs.alias_fault([0, 0], [0, None])
    assert "the output is input 1" in outputs.alias_fault([1], [0])
    assert outputs.well_formed_aliases([None, 2]) and not outputs.well_formed_aliases([-1])
    assert not outputs.well_formed_aliases("0") and not outputs.well_formed_aliases([True])


# -- timing: every timed call is checked -----------------------------------------------------------

class HonestThenLazy(torch.nn.Module):
    """Plain outputs for the first calls (the correctness checks), a lazy subclass once it is timed."""

    def __init__(self, honest_calls: int) -> None:
        super().__init__()
        self.calls, self.honest_calls = 0, honest_calls

    def forward(self, x):
        self.calls += 1
        out = torch.relu(x)
        return out if self.calls <= self.honest_calls else lazy(out)


def _inputs(seed: int) -> list[torch.Tensor]:
    return [torch.randn(8, generator=torch.Generator().manual_seed(seed))]


def test_a_lazy_output_on_a_timed_call_stops_the_timing():
    model = HonestThenLazy(honest_calls=2)  # the warm-up call and the first timed call behave
    with pytest.raises(outputs.ForeignOutput, match="torch.Tensor subclass"):
        timer.time_forward(model, _inputs, [1, 2, 3], 1, "cpu", HOST_CLOCK, keep={0, 1, 2})
    assert model.calls == 3 and Lazy.touched == 0


def test_host_timing_checks_every_call_too():
    with pytest.raises(outputs.ForeignOutput):
        timer.host_time_forward(HonestThenLazy(honest_calls=1), _inputs, [1, 2], "cpu", HOST_CLOCK)


def test_timing_records_the_aliasing_of_its_calls():
    record = timer.time_forward(lambda x: x, _inputs, [1, 2], 0, "cpu", HOST_CLOCK)
    assert record.alias_patterns == [[0]]
    record = timer.time_forward(torch.relu, _inputs, [1, 2], 0, "cpu", HOST_CLOCK)
    assert record.alias_patterns == [[None]]


# -- through the evaluator -------------------------------------------------------------------------

# A one-element launch of test_evaluator's ReLU kernel, then what `returned` says.
def token_launch_then(returned: str) -> str:
    return relu_candidate(f"token = torch.empty(1)\nrelu_kernel[(1,)](x, token, 1, BLOCK=16)\nreturn {returned}")


# A reference that returns a view of its input (output 0) beside a new tensor (output 1).
VIEW_REFERENCE = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x.view(-1), torch.relu(x)


def get_inputs():
    return [torch.randn(16, 64)]


def get_init_inputs():
    return []
'''
VIEW_PROBLEM = Problem(level=1, number=9101, name="9101_ViewAndRelu", source=VIEW_REFERENCE, origin="inline")

AUTOTUNED_RELU = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BLOCK": 256}), triton.Config({"BLOCK": 1024}, num_warps=8)], key=["n"])
@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        relu_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
        return out
'''

LIBDEVICE_GELU = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.jit
def gelu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, 0.5 * x * (1.0 + libdevice.{function}(x * 0.7071067811865476)), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        gelu_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out
'''

# ReLU written with binary libdevice calls and a scalar argument: pow(x, 2) - x*x and atan2(x, 1) - atan(x) are 0.
LIBDEVICE_BINARY_RELU = LIBDEVICE_GELU.replace(
    "0.5 * x * (1.0 + libdevice.{function}(x * 0.7071067811865476))",
    "tl.maximum(x, 0.0) + (libdevice.pow(x, 2.0) - x * x) + (libdevice.atan2(x, 1.0) - libdevice.atan(x))")

CASES: dict[str, tuple[str, str]] = {
    "lazy_subclass": ("L1/19", (HACKS_DIR / "lazy_tensor_subclass.py").read_text()),
    "return_x": ("L1/19", token_launch_then("x")),
    "return_view_as": ("L1/19", token_launch_then("x.view_as(x)")),
    "return_reshape": ("L1/19", token_launch_then("x.reshape(x.shape)")),
    "view_where_the_reference_views": ("L1/9101", token_launch_then("x.view(-1), relu_into(x, torch.empty_like(x))")),
    "input_where_the_reference_is_new": ("L1/9101", token_launch_then("x.view(-1), x")),
    "autotuned": ("L1/19", AUTOTUNED_RELU),
    "libdevice_erf": ("L1/26", LIBDEVICE_GELU.format(function="erf")),
    "libdevice_ilogb": ("L1/26", LIBDEVICE_GELU.format(function="ilogb")),
    "libdevice_binary": ("L1/19", LIBDEVICE_BINARY_RELU),
}


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory, shared_evaluator):
    store = Store(str(tmp_path_factory.mktemp("db") / "eval.duckdb"))
    with shared_evaluator(SETTINGS, store=store, static_checks=False, problems={"L1/9101": VIEW_PROBLEM}) as evaluator:
        requests = [EvalRequest(pid, source, SETTINGS, request_id=name) for name, (pid, source) in CASES.items()]
        results = evaluator.evaluate(requests)
        cached = store.get_cached_evaluations([evaluator._keyed(r).cache_key for r in requests])
    return {name: (result, evaluator._keyed(request).cache_key in cached)
            for name, request, result in zip(CASES, requests, results)}


def _explain(result) -> str:
    return f"{result.error_category.value}: {result.error_message}"


def test_a_lazy_tensor_subclass_output_is_a_hack(verdicts):
    result, _ = verdicts["lazy_subclass"]
    assert result.error_category == ErrorCategory.RUNTIME and not result.correct, _explain(result)
    assert Flag.HACK.value in result.flags
    assert "class Deferred, a torch.Tensor subclass" in result.error_message
    assert score(result, "correctness").reward == 0.0


@pytest.mark.parametrize("name", ["return_x", "return_view_as", "return_reshape"])
def test_returning_the_input_or_a_view_of_it_is_a_mismatch(verdicts, name):
    result, _ = verdicts[name]
    assert result.error_category == ErrorCategory.MISMATCH, _explain(result)
    assert "the output is input 0 itself or a view of its memory" in result.error_message


def test_a_view_is_allowed_where_the_reference_returns_one(verdicts):
    allowed, _ = verdicts["view_where_the_reference_views"]
    assert allowed.correct, _explain(allowed)
    refused, _ = verdicts["input_where_the_reference_is_new"]
    assert refused.error_category == ErrorCategory.MISMATCH, _explain(refused)
    assert "output 1 is input 0 itself" in refused.error_message


@pytest.mark.parametrize("name", ["autotuned", "libdevice_erf", "libdevice_binary"])
def test_honest_kernels_the_interpreter_could_not_run_now_run(verdicts, name):
    result, cached = verdicts[name]
    assert result.correct, _explain(result)
    assert cached  # a verdict, stored like any other


def test_what_the_interpreter_cannot_run_is_no_verdict(verdicts):
    result, cached = verdicts["libdevice_ilogb"]
    assert result.error_category == ErrorCategory.UNSUPPORTED, _explain(result)
    assert result.error_message == "the CPU interpreter cannot run this kernel: libdevice.ilogb has no implementation " \
                                   "under the interpreter"
    assert result.error_category.is_ours and not result.error_category.is_kernel_fault
    assert not cached
    # No verdict, yet abstaining never pays: training scores it as a wrong answer that compiled, never leaves it out.
    scored = score(result, "correctness")
    assert scored.abstained and scored.reward is not None and scored.reward == pytest.approx(0.2)
