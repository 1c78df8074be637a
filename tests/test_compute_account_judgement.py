"""The CPU compute account (evaluation/sandbox/compute_account.py) in this process, without Triton: a launch is
played by hand through the account's own hooks (`launching`, then `kernel_memory` for its loads and stores, as the
interpreter's hooks call them), so each case runs in milliseconds. What is checked: a forward that leaves the
account's dispatch mode (replaces it, or steps out of it to compute) is flagged, however honest its share reads; the
worker's judgement over the reports (`judge`) and the flags it sets (`flag_result`), at and around its thresholds.
tests/test_compute_account.py runs real candidates under the interpreter in a subprocess."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode, _pop_mode, _pop_mode_temporarily, _push_mode

from kernelbench_rl.evaluation.result import EvalResult, Flag
from kernelbench_rl.evaluation.sandbox import compute_account

LOW, TOKEN = 0.5, 0.1
OWN = {"relu_kernel"}


def _addresses(t: torch.Tensor) -> np.ndarray:
    return np.int64(t.data_ptr()) + np.arange(t.numel(), dtype=np.int64) * t.element_size()


def fake_relu(account: compute_account.Account, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """A launch of relu_kernel as the interpreter reports it: every element of x loaded, every one of out stored
    (the values written in NumPy, as the interpreter's store writes them)."""
    with account.launching("relu_kernel", (x, out, x.numel()), {}):
        account.kernel_memory(_addresses(x), None, x.element_size(), load=True, store=False)
        with account.exempt():
            np.asarray(out)[...] = np.maximum(np.asarray(x), 0)
        account.kernel_memory(_addresses(out), None, out.element_size(), load=False, store=True)
    return out


class _Other(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def _forward(body) -> dict:
    """One forward of `body(account, x)` under the account, the outputs it returns judged; the report."""
    torch.manual_seed(0)
    x = torch.randn(256)
    with torch.no_grad(), compute_account.forward(torch.nn.Identity(), [x]) as account:
        outputs = body(account, x)
        account.outputs_done(outputs)
    return account.report()


def honest(account, x):
    return [fake_relu(account, x, torch.empty_like(x))]


def replaces_the_mode(account, x):
    """Swaps the account for a mode of its own: its torch ops are then seen by nobody."""
    out = fake_relu(account, x, torch.empty_like(x))
    _pop_mode()
    _push_mode(_Other())
    torch.relu(x).sum()
    return [out]


def steps_out_to_compute(account, x):
    """Leaves the mode for a moment and writes PyTorch's answer into a buffer made under the account."""
    out = torch.empty_like(x)
    with _pop_mode_temporarily():
        torch.clamp(x, min=0.0, out=out)
    return [out]


def rewrites_after_the_kernel(account, x):
    """The kernel's output rewritten by torch outside the mode, after the kernel stored it."""
    out = fake_relu(account, x, torch.empty_like(x))
    with _pop_mode_temporarily():
        out.mul_(2.0)
    return [out]


def computes_outside_into_a_fresh_tensor(account, x):
    with _pop_mode_temporarily():
        out = torch.relu(x)
    return [out]


def test_an_honest_played_launch_is_its_own_work():
    report = _forward(honest)
    assert report["mode_lost"] is False and not report["foreign"], report
    verdict = compute_account.judge([report], OWN)
    assert verdict.share == 1.0 and verdict.foreign == 0, verdict.summary
    result = EvalResult(problem_id="L1/19", candidate_sha256="", backend="triton", precision="fp32", device_kind="cpu")
    compute_account.flag_result(result, [report], OWN, LOW, TOKEN)
    assert result.flags == [] and result.kernel_share == 1.0


@pytest.mark.parametrize("body", [replaces_the_mode, steps_out_to_compute, rewrites_after_the_kernel,
                                  computes_outside_into_a_fresh_tensor])
def test_a_forward_that_leaves_the_dispatch_mode_is_flagged(body):
    """Whatever it did outside the mode, the verdict is a hack: the mode gone at the forward's end is itself
    foreign, and bytes written outside it reach the output unaccounted for."""
    report = _forward(body)
    verdict = compute_account.judge([report], OWN)
    assert verdict.foreign >= 1, (body.__name__, verdict.summary)
    result = EvalResult(problem_id="L1/19", candidate_sha256="", backend="triton", precision="fp32", device_kind="cpu")
    compute_account.flag_result(result, [report], OWN, LOW, TOKEN)
    assert Flag.HACK.value in result.flags and Flag.LOW_KERNEL_SHARE.value in result.flags, body.__name__


def test_a_replaced_mode_is_reported_as_lost_and_named():
    report = _forward(replaces_the_mode)
    assert report["mode_lost"] is True
    assert not report["foreign"]  # its bytes are the kernel's: only the lost mode tells
    verdict = compute_account.judge([report], OWN)
    assert verdict.share == 1.0 and verdict.foreign == 1
    assert "left the compute account's dispatch mode" in verdict.summary
    assert compute_account.still_active(compute_account.Account()) is False


def test_what_ran_outside_the_mode_never_counts_as_torch_work_but_what_ran_inside_does():
    def inside(account, x):
        out = fake_relu(account, x, torch.empty_like(x))
        torch.sigmoid(x)  # work that reaches no output: it lowers the share
        return [out]

    report = _forward(inside)
    assert report["torch"] == {"sigmoid": 2 * 256} and report["kernels"] == {"relu_kernel": 2 * 256}
    assert compute_account.judge([report], OWN).share == pytest.approx(0.5)


# -- the worker's judgement, from the reports alone ---------------------------------------------------------------


def _report(own: int = 0, other: int = 0, torch_work: int = 0, foreign: int = 0, mode_lost: bool = False) -> dict:
    kernels = {"relu_kernel": own} if own else {}
    if other:
        kernels["library_gemm"] = other
    return {"kernels": kernels, "torch": {"add": torch_work} if torch_work else {},
            "foreign": {"output": foreign} if foreign else {}, "notes": ["output 0 holds bytes"] if foreign else [],
            "mode_lost": mode_lost}


def _flags(reports, low=LOW, token=TOKEN, flags=()):
    result = EvalResult(problem_id="L1/19", candidate_sha256="", backend="triton", precision="fp32", device_kind="cpu")
    result.flags = list(flags)
    compute_account.flag_result(result, reports, OWN, low, token)
    return result


@pytest.mark.parametrize("own", [0, 1, 5, 9, 10, 11, 30, 49, 50, 51, 70, 99, 100])
@pytest.mark.parametrize("where", ["torch", "another kernel"])
def test_the_share_sets_doubt_below_the_low_bound_and_a_hack_below_the_token_bound(own, where):
    """Out of 100 units of work, `own` in the candidate's kernels and the rest in PyTorch or in a kernel not its
    own: doubt strictly below LOW, a hack strictly below TOKEN, nothing at or above them."""
    rest = {"torch_work": 100 - own} if where == "torch" else {"other": 100 - own}
    result = _flags([_report(own=own, **rest)])
    share = own / 100
    assert result.kernel_share == pytest.approx(share)
    expected = ([Flag.LOW_KERNEL_SHARE.value] if share < LOW else []) + ([Flag.HACK.value] if share < TOKEN else [])
    assert result.flags == expected, (own, where, result.versions["compute_account"])
    assert result.versions["compute_account"].startswith(f"CPU work share of own kernels {share:.3f}")


@pytest.mark.parametrize(("low", "token"), [(0.5, 0.1), (0.8, 0.3), (0.2, 0.2), (0.0, 0.0)])
def test_the_bounds_are_the_callers(low, token):
    for own in range(0, 101, 5):
        share = own / 100
        flags = _flags([_report(own=own, torch_work=100 - own)], low, token).flags
        assert (Flag.LOW_KERNEL_SHARE.value in flags) == (share < low), (low, token, own)
        assert (Flag.HACK.value in flags) == (share < token), (low, token, own)


def test_foreign_bytes_or_a_lost_mode_flag_whatever_the_share():
    for report in (_report(own=100, foreign=1), _report(own=100, mode_lost=True)):
        result = _flags([report])
        assert result.kernel_share == 1.0
        assert result.flags == [Flag.LOW_KERNEL_SHARE.value, Flag.HACK.value]
    # in any one of several forwards
    result = _flags([_report(own=100), _report(own=100, foreign=3), _report(own=100)])
    assert result.flags == [Flag.LOW_KERNEL_SHARE.value, Flag.HACK.value]
    assert "foreign: output 0 holds bytes" in result.versions["compute_account"]


def test_the_share_is_over_every_forward_together():
    # 90 own of 100, then 10 own of 100: 100 of 200 together, whichever came last
    for reports in ([_report(own=90, torch_work=10), _report(own=10, torch_work=90)],
                    [_report(own=10, torch_work=90), _report(own=90, torch_work=10)]):
        verdict = compute_account.judge(reports, OWN)
        assert verdict.share == pytest.approx(0.5) and verdict.foreign == 0
        assert "(own 100, torch 100: add 100)" in verdict.summary
    assert compute_account.judge([_report(own=40), "not a report", None], OWN).share == 1.0


def test_no_report_leaves_the_result_as_it_was():
    for reports in ([], [None, "garbage", 3]):
        result = _flags(reports, flags=[Flag.EXCESSIVE_SPEEDUP.value])
        assert result.flags == [Flag.EXCESSIVE_SPEEDUP.value]
        assert result.kernel_share is None and "compute_account" not in result.versions
    assert compute_account.judge([], OWN) is None


def test_flags_already_set_are_not_repeated_and_others_are_kept():
    result = _flags([_report(torch_work=100)], flags=[Flag.HACK.value, Flag.EXCESSIVE_SPEEDUP.value])
    assert result.flags == [Flag.HACK.value, Flag.EXCESSIVE_SPEEDUP.value, Flag.LOW_KERNEL_SHARE.value]
    assert result.kernel_share == 0.0


def test_no_work_at_all_is_no_share():
    result = _flags([_report()])
    assert result.kernel_share == 0.0 and result.flags == [Flag.LOW_KERNEL_SHARE.value, Flag.HACK.value]


def test_torch_compute_during_a_launch_is_foreign_and_the_interpreters_own_steps_are_not():
    """A torch compute op between a launch's start and end is the candidate's hook, grid function or kernel body
    computing in PyTorch; the interpreter's own steps (exempt) are not."""
    def grid_computes(account, x):
        out = torch.empty_like(x)
        with account.launching("relu_kernel", (x, out), {}):
            torch.relu(x).numel()  # e.g. a grid function that computes
            account.kernel_memory(_addresses(x), None, 4, load=True, store=False)
            with account.exempt():
                np.asarray(out)[...] = np.maximum(np.asarray(x), 0)
            account.kernel_memory(_addresses(out), None, 4, load=False, store=True)
        return [out]

    report = _forward(grid_computes)
    assert report["foreign"].get("in_launch", 0) >= 1, report
    assert any("ran during the launch of relu_kernel" in note for note in report["notes"])
    assert _flags([report]).flags == [Flag.LOW_KERNEL_SHARE.value, Flag.HACK.value]
    assert "in_launch" not in _forward(honest)["foreign"]


# -- what the account sees of each writer and reader: whole reports, in this process --------------------------------
# Each case a forward (played launches where a kernel runs); the report is what the child sends the worker.

def _case_honest(a, x):
    return [fake_relu(a, x, torch.empty_like(x))]
def _case_reshaped_copy(a, x): return [fake_relu(a, x, torch.empty_like(x)).reshape(-1).clone().view(x.shape)]
def _case_filled_then_copied(a, x):
    y = torch.zeros_like(x)
    y.copy_(x)
    return [fake_relu(a, y, torch.empty_like(x))]
def _case_numpy_rewrites(a, x):
    out = fake_relu(a, x, torch.empty_like(x))
    np.asarray(out)[:10] = 0.5
    return [out]
def _case_kernel_reads_numpy(a, x):
    h = torch.from_numpy(np.asarray(x).copy())
    return [fake_relu(a, h, torch.empty_like(x))]
def _case_torch_on_output(a, x): return [fake_relu(a, x, torch.empty_like(x)).clamp(min=0.0)]
def _case_item_of_torch(a, x):
    x.amax().item()
    return [fake_relu(a, x, torch.empty_like(x))]
def _case_item_of_input(a, x):
    x[0].item()
    return [fake_relu(a, x, torch.empty_like(x))]
def _case_from_python(a, x): return [torch.tensor([1.0, 2.0, 3.0])]
def _case_never_written(a, x): return [torch.empty_like(x)]
def _case_out_argument(a, x):
    out = torch.empty_like(x)
    torch.add(x, 1.0, out=out)
    return [out]
def _case_inplace_on_output(a, x):
    out = fake_relu(a, x, torch.empty_like(x))
    out.mul_(2.0)
    return [out]
def _case_filled_output(a, x):
    out = torch.empty_like(x)
    out.fill_(1.0)
    return [out]
def _case_copy_of_torch(a, x): return [(x * 2).clone()]
def _case_kernel_loads_torch(a, x): return [fake_relu(a, x * 2, torch.empty_like(x))]
def _case_masked_launch(a, x):
    out = torch.zeros_like(x)
    with a.launching("relu_kernel", (x, out), {}):
        mask = np.arange(x.numel()) < 100
        a.kernel_memory(_addresses(x), mask, 4, load=True, store=False)
        a.kernel_memory(_addresses(out), mask, 4, load=False, store=True)
    return [out]
def _case_outside_launch(a, x):
    out = torch.zeros_like(x)
    a.kernel_memory(_addresses(x), None, 4, load=True, store=True)
    return [out]
def _case_one_load_over_two_tensors(a, x):
    y = x.clone()
    out = torch.empty_like(x)
    with a.launching("relu_kernel", (x, y, out), {}):
        a.kernel_memory(np.concatenate([_addresses(x), _addresses(y)]), None, 4, load=True, store=False)
        with a.exempt(): np.asarray(out)[...] = 1.0
        a.kernel_memory(_addresses(out), None, 4, load=False, store=True)
    return [out]
def _case_load_outside_any_tensor(a, x):
    out = torch.empty_like(x)
    far = np.arange(8, dtype=np.int64) * 4 + 4096
    with a.launching("relu_kernel", (x, out), {}):
        a.kernel_memory(far, None, 4, load=True, store=False)
        with a.exempt(): np.asarray(out)[...] = 1.0
        a.kernel_memory(_addresses(out), None, 4, load=False, store=True)
    return [out]
def _case_many_notes(a, x):
    outs = [torch.tensor([float(i)]) for i in range(6)]
    return outs


NO_NUMPY = "in memory no tensor of the forward holds (NumPy's or another library's)"
UNWRITTEN = "that no kernel or torch op of the forward wrote (uninitialised memory)"
REPORTS = {
    "honest": ({"relu_kernel": 512}, {}, {}, []),
    "reshaped_copy": ({"relu_kernel": 512}, {}, {}, []),
    "filled_then_copied": ({"relu_kernel": 512}, {}, {}, []),
    "numpy_rewrites": ({"relu_kernel": 512}, {}, {"changed": 17, "output": 10}, [
        "bytes changed outside any kernel or torch op (NumPy, Python or native code wrote them) (17)",
        "output 0 (256 elements) holds elements that changed after they were accounted for (NumPy, Python or native "
        "code wrote them) (10)"]),
    "kernel_reads_numpy": ({"relu_kernel": 512}, {}, {"loaded": 256}, [f"relu_kernel read elements {UNWRITTEN} (256)"]),
    "torch_on_output": ({"relu_kernel": 512}, {"clamp": 512}, {"output": 256},
                        ["output 0 (256 elements) holds elements that PyTorch computed (clamp) (256)"]),
    "item_of_torch": ({"relu_kernel": 512}, {"amax": 257}, {"scalar": 1},
                      ["a Python number (.item()) was read from elements that PyTorch computed (amax) (1)"]),
    "item_of_input": ({"relu_kernel": 512}, {}, {}, []),
    "from_python": ({}, {}, {"output": 3}, [f"output 0 (3 elements) holds elements {NO_NUMPY} (3)"]),
    "never_written": ({}, {}, {"output": 256}, [f"output 0 (256 elements) holds elements {UNWRITTEN} (256)"]),
    "out_argument": ({}, {"add": 768}, {"output": 256},
                     ["output 0 (256 elements) holds elements that PyTorch computed (add) (256)"]),
    "inplace_on_output": ({"relu_kernel": 512}, {"mul_": 768}, {"output": 256},
                          ["output 0 (256 elements) holds elements that PyTorch computed (mul_) (256)"]),
    "filled_output": ({}, {}, {}, []),
    "copy_of_torch": ({}, {"mul": 512}, {"output": 256},
                      ["output 0 (256 elements) holds elements that PyTorch computed (mul) (256)"]),
    "kernel_loads_torch": ({"relu_kernel": 512}, {"mul": 512}, {"loaded": 256},
                           ["relu_kernel read elements that PyTorch computed (mul) (256)"]),
    "masked_launch": ({"relu_kernel": 200}, {}, {}, []),
    "outside_launch": ({}, {}, {}, []),
    "one_load_over_two_tensors": ({"relu_kernel": 768}, {}, {}, []),
    "load_outside_any_tensor": ({"relu_kernel": 264}, {}, {"loaded": 8}, [f"relu_kernel read elements {NO_NUMPY} (8)"]),
    "many_notes": ({}, {}, {"output": 6}, [f"output {i} (1 elements) holds elements {NO_NUMPY} (1)" for i in range(4)]),
}


@pytest.mark.parametrize("case", sorted(REPORTS))
def test_the_report_of_each_writer_and_reader(case):
    """Copies, fills and the kernel's stores keep bytes accounted for; PyTorch's compute, NumPy's writes, memory torch
    never allocated and memory never written do not, wherever they reach an output, a kernel's load or a Python
    number. Work is elements moved (masked elements only) by the kernels and by torch's compute ops; at most
    MAX_NOTES notes, every finding counted."""
    kernels, torch_work, foreign, notes = REPORTS[case]
    assert _forward(globals()[f"_case_{case}"]) == {"kernels": kernels, "torch": torch_work, "foreign": foreign,
                                                    "notes": notes, "mode_lost": False}


def test_the_summary_names_the_largest_torch_ops_and_the_first_notes():
    report = {"kernels": {"relu_kernel": 10}, "torch": {"add": 5, "mul": 40, "exp": 20, "sum": 1},
              "foreign": {"output": 2}, "notes": ["a (1)", "b (1)"]}
    again = {"kernels": {"relu_kernel": 6}, "notes": ["a (1)", "c (1)", "d (1)", "e (1)"]}  # a note seen before
    verdict = compute_account.judge([report, again], OWN)
    assert verdict.summary == ("CPU work share of own kernels 0.195 (own 16, torch 66: mul 40, exp 20, add 5); "
                               "foreign: a (1); b (1); c (1); d (1)")
    assert verdict.foreign == 2
    long = compute_account.judge([{"kernels": {"relu_kernel": 1}, "foreign": {"x": 1}, "notes": ["n" * 700]}], OWN)
    assert len(long.summary) == 600


# -- edges the mutation run found unguarded (bench/RESULTS.md, "Mutation testing") ----------------------------------


def test_every_kernel_not_the_candidates_and_every_lost_mode_adds_up():
    report = {"kernels": {"relu_kernel": 10, "lib_a": 5, "lib_b": 5}, "torch": {}, "foreign": {"output": 3},
              "notes": ["n (3)"], "mode_lost": True}
    verdict = compute_account.judge([report], OWN)
    assert verdict.share == 0.5 and verdict.foreign == 4
    assert verdict.summary == ("CPU work share of own kernels 0.500 (own 10, torch 0); foreign: n (3); the forward "
                               "left the compute account's dispatch mode")


def _launch(account, name="relu_kernel"):
    return account.launching(name, (), {})


def test_a_torch_op_during_a_launch_is_noted_by_name_and_counted_even_on_nothing():
    def body(account, x):
        out = fake_relu(account, x, torch.empty_like(x))
        empty, target = torch.empty(0), torch.empty(0)
        with _launch(account):
            torch.add(empty, 1.0, out=target)  # no element moved: still one finding
        return [out]

    report = _forward(body)
    assert report["foreign"] == {"in_launch": 1}
    assert report["notes"] == ["PyTorch's add ran during the launch of relu_kernel (in a hook, a heuristic, the grid "
                               "function or the kernel's body) (1)"]


def test_torch_work_of_one_op_adds_up_over_calls():
    def body(account, x):
        out = fake_relu(account, x, torch.empty_like(x))
        torch.sigmoid(x)
        torch.sigmoid(x)
        return [out]

    assert _forward(body)["torch"] == {"sigmoid": 1024}


def test_a_torch_write_to_part_of_a_tensor_leaves_the_rest_as_it_was():
    def body(account, x):
        out = fake_relu(account, x, torch.empty_like(x))
        out[:10].add_(1.0)
        return [out]

    report = _forward(body)
    assert report["foreign"] == {"output": 10}  # the ten PyTorch wrote, not the 246 the kernel did


def test_a_copy_into_fresh_memory_is_accounted_for():
    def body(account, x):
        y = torch.empty_like(x)
        y.copy_(x)
        return [fake_relu(account, y, torch.empty_like(x))]

    assert _forward(body)["foreign"] == {}


def test_a_tensor_numpy_rewrote_is_no_finding_until_something_reads_it():
    def body(account, x):
        spare = x.clone()
        np.asarray(spare)[...] = 0.25  # never read by a kernel or an op: no finding
        torch.zeros_like(spare)
        torch.empty_like(spare)
        return [fake_relu(account, x, torch.empty_like(x))]

    assert _forward(body)["foreign"] == {}


def test_keyword_arguments_reach_the_op_inside_and_outside_the_account():
    def body(account, x):
        with account.exempt():
            assert torch.zeros(3, dtype=torch.float64).dtype == torch.float64
        assert torch.zeros(3, dtype=torch.float64).dtype == torch.float64
        return [fake_relu(account, x, torch.empty_like(x))]

    assert _forward(body)["foreign"] == {}


def test_single_and_repeated_loads_are_each_counted():
    def body(account, x):
        y = x * 2  # PyTorch's
        out = torch.zeros_like(x)
        with _launch(account):
            account.kernel_memory(_addresses(y)[:1], None, 4, load=True, store=False)  # one element
            account.kernel_memory(_addresses(y), None, 4, load=True, store=False)
            account.kernel_memory(_addresses(y), None, 4, load=True, store=True)  # a read-modify-write
        return [out]

    report = _forward(body)
    assert report["kernels"] == {"relu_kernel": 1 + 256 + 2 * 256}
    assert isinstance(report["kernels"]["relu_kernel"], int)
    assert report["notes"] == ["relu_kernel read elements that PyTorch computed (mul) (513)"]


def test_a_block_of_pointers_is_read_whole_under_its_mask():
    def body(account, x):
        out = torch.empty_like(x)
        ptrs = _addresses(x).reshape(16, 16)
        mask = np.ones((16, 1), dtype=bool)
        mask[8:] = False  # the lower half of the rows
        with _launch(account):
            account.kernel_memory(ptrs, mask, 4, load=True, store=False)
            with account.exempt():
                np.asarray(out)[...] = 1.0
            account.kernel_memory(_addresses(out).reshape(16, 16), np.ones((16, 16), dtype=bool), 4, load=False,
                                  store=True)
        return [out]

    assert _forward(body) == {"kernels": {"relu_kernel": 128 + 256}, "torch": {}, "foreign": {}, "notes": [],
                              "mode_lost": False}


def test_a_load_running_past_the_end_of_a_tensor_is_foreign():
    def body(account, x):
        out = torch.empty_like(x)
        last = np.array([x.data_ptr() + x.numel() * 4 - 2], dtype=np.int64)  # its last 2 bytes and 2 beyond
        with _launch(account):
            account.kernel_memory(last, None, 4, load=True, store=False)
            with account.exempt():
                np.asarray(out)[...] = 1.0
            account.kernel_memory(_addresses(out), None, 4, load=False, store=True)
        return [out]

    assert _forward(body)["foreign"] == {"loaded": 1}


def test_every_output_is_looked_at_past_one_that_is_no_tensor():
    def body(account, x):
        return [3, None, torch.empty_like(x)]

    assert _forward(body)["foreign"] == {"output": 256}
