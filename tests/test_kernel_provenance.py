"""GPU work is credited to the candidate by provenance, never by a kernel's name.

The worker's decision (source/kernels.py: attributed_share) takes plain numbers, a profile's rows and the launches the
child counted of the candidate's own Triton functions (sandbox/launch_record.py), so it is driven here on the CPU with
profiles shaped as an H200 records them; the GPU red team checks the measuring.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from kernelbench_rl.evaluation.source import kernels
from kernelbench_rl.evaluation.timing.decisions import LOW_KERNEL_SHARE, TOKEN_KERNEL_SHARE

# Kernel names PyTorch's and cuBLAS's own kernels carry in a profile (H100/H200, torch 2.x), in the spellings a
# candidate can give a `@triton.jit` function: the bare identifier a profiler shows inside a decorated name.
LIBRARY_NAMES = [
    ("vectorized_elementwise_kernel", "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous "
                                      "namespace)::launch_clamp_scalar(at::TensorIteratorBase&)>(int, float*)"),
    ("gemv2T_kernel_val", "void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false>"
                          "(cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<float const>>, float, float)"),
    ("ampere_sgemm_128x64_nn", "ampere_sgemm_128x64_nn"),
    ("elementwise_kernel", "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::"
                           "native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float>"
                           ">>(at::TensorIteratorBase&, ...)::{lambda(int)#1}>(int, ...)"),
    ("reduce_kernel", "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, "
                      "float, float, float>, unsigned int, float, 4, 4>>(at::native::ReduceOp<float, ...>)"),
    ("cutlass_80_tensorop_s1688gemm_128x128_16x4_nn_align4", "cutlass_80_tensorop_s1688gemm_128x128_16x4_nn_align4"),
]


def _row(name: str, *each_us: float) -> list:
    return [name, len(each_us), float(sum(each_us)), sorted(each_us)]


@pytest.mark.parametrize("own,library", LIBRARY_NAMES, ids=[own for own, _ in LIBRARY_NAMES])
@pytest.mark.parametrize("own_launches", [1, 2])
@pytest.mark.parametrize("same_row", [True, False])
def test_a_kernel_named_after_a_librarys_gets_none_of_its_time(own, library, own_launches, same_row):
    """The candidate launches a token kernel under a library kernel's name; the library does the work. Whether the
    profiler files both under one name or apart, only the token launches are credited."""
    token = [3.0] * own_launches
    heavy = [900.0, 1100.0]
    rows = [_row(own, *token, *heavy)] if same_row and own == library else [_row(own, *token), _row(library, *heavy)]
    launched, own_us, share = kernels.attributed_share(rows, {own: own_launches})
    assert launched == own_launches and own_us == pytest.approx(sum(token))
    assert share < TOKEN_KERNEL_SHARE
    # By name alone (the CUDA backend's rule), the library's time counted as the candidate's.
    if same_row and own == library:
        assert kernels.kernel_share(rows, {own})[2] > LOW_KERNEL_SHARE


def test_an_honest_triton_kernel_is_credited_in_full():
    rows = [_row("relu_kernel", 512.0), _row("softmax_kernel", 40.0, 41.0)]
    launched, own_us, share = kernels.attributed_share(rows, {"relu_kernel": 1, "softmax_kernel": 2})
    assert (launched, own_us, share) == (3, pytest.approx(593.0), pytest.approx(1.0))


def test_a_declared_kernel_never_launched_is_credited_nothing():
    """A name in the source proves nothing: PyTorch's kernel of that name is foreign unless the child saw a launch."""
    rows = [_row("vectorized_elementwise_kernel", 800.0)]
    assert kernels.attributed_share(rows, {}) == (0, 0.0, 0.0)
    assert kernels.attributed_share(rows, {"relu_kernel": 1})[0] == 0


def test_busy_launches_cannot_claim_more_events_than_the_profile_holds():
    rows = [_row("mykernel", 10.0), _row("void at::native::vectorized_elementwise_kernel<4>", 990.0)]
    launched, own_us, share = kernels.attributed_share(rows, {"mykernel": 50})
    assert launched == 1 and own_us == pytest.approx(10.0) and share == pytest.approx(0.01)


def test_an_exact_name_is_credited_before_a_look_alike():
    """Two own kernels, one of whose names a decorated library name contains: the exact event takes the count."""
    rows = [_row("void at::native::copy_kernel<float>", 700.0), _row("copy_kernel", 100.0)]
    launched, own_us, _share = kernels.attributed_share(rows, {"copy_kernel": 1})
    assert launched == 1 and own_us == pytest.approx(100.0)


def test_rows_past_the_listed_events_are_credited_at_the_mean_of_the_rest():
    """A row lists each event up to a cap; credited events past it are the longest ones, at their mean."""
    row = ["k", 6, 6 + 3 * 100.0, [1.0, 2.0, 3.0]]  # 3 listed (1+2+3), 3 more of 100 each
    assert kernels.attributed_share([row], {"k": 4})[1] == pytest.approx(6 + 100.0)
    assert kernels.attributed_share([row], {"k": 6})[1] == pytest.approx(306.0)


def test_profile_rows_and_top_kernels_read_rows_with_their_events():
    rows = [_row("a", 1.0, 2.0), _row("b", 10.0)]
    assert kernels.profile_rows(rows) == [["b", 1, 10.0], ["a", 2, 3.0]]
    assert kernels.top_kernels(rows).startswith("b x1")


def test_the_child_counts_launches_of_the_candidates_own_triton_functions_only(tmp_path):
    """sandbox/launch_record.py wraps JITFunction.run: a launch of a function of the candidate's module counts under
    its name; a warm-up (compile only) and a function of another module do not. Run in a fresh interpreter with
    JITFunction.run replaced by a stand-in (the real one needs a GPU driver)."""
    kernel = "import triton\n\n\n@triton.jit\ndef vectorized_elementwise_kernel(x):\n    pass\n"
    (tmp_path / "own.py").write_text(kernel)
    (tmp_path / "other.py").write_text(kernel)
    script = textwrap.dedent(f"""
        import os
        os.environ.pop("TRITON_INTERPRET", None)
        from triton.runtime.jit import JITFunction
        ran = []
        JITFunction.run = lambda self, *a, **k: ran.append(self.fn.__name__)
        from kernelbench_rl.evaluation.sandbox import launch_record, runtime
        assert launch_record.snapshot() is None
        assert launch_record.install() and launch_record.install()
        mine = runtime.load_module_from_file({str(tmp_path / "own.py")!r}, launch_record.CANDIDATE_MODULE)
        theirs = runtime.load_module_from_file({str(tmp_path / "other.py")!r}, "torch_like")
        mine.vectorized_elementwise_kernel[(1,)](1)
        mine.vectorized_elementwise_kernel.run(1, grid=(1,), warmup=False)
        mine.vectorized_elementwise_kernel.run(1, grid=(1,), warmup=True)
        theirs.vectorized_elementwise_kernel[(1,)](1)
        assert launch_record.snapshot() == {{"vectorized_elementwise_kernel": 2}}, launch_record.snapshot()
        assert len(ran) == 4
        launch_record.reset()
        assert launch_record.snapshot() == {{}}
        print("ok")
    """)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_a_profile_with_more_gpu_work_than_the_timed_calls_disagrees():
    """A kernel that does its own work only when profiled (the profiler's state is readable in its process) and
    something faster otherwise reads more GPU time profiled than timed; an honest one reads about the same or less
    (its timed calls flush L2 first)."""
    from kernelbench_rl.evaluation.timing.decisions import profile_agrees_with_timing

    assert profile_agrees_with_timing(3.0, 1.0)[0]  # the profile saw 3 ms of work, the timed calls took 1 ms
    assert not profile_agrees_with_timing(1.1, 1.0)[0]
    assert not profile_agrees_with_timing(0.9, 1.0)[0]
    assert not profile_agrees_with_timing(0.04, 0.01)[0]  # tiny kernels: within the slack
    assert not profile_agrees_with_timing(5.0, None)[0]  # nothing timed: nothing to compare
    disagrees, text = profile_agrees_with_timing(2.0, 1.0)
    assert disagrees and "2.00x" in text


def test_share_flags_and_how_many_forwards_are_profiled():
    from kernelbench_rl.evaluation.result import Flag
    from kernelbench_rl.evaluation.timing.decisions import profile_count, share_flags

    assert share_flags(0, 0.0) == [Flag.BACKEND_NOT_USED.value, Flag.HACK.value]
    assert share_flags(3, 0.05) == [Flag.LOW_KERNEL_SHARE.value, Flag.HACK.value]
    assert share_flags(3, 0.3) == [Flag.LOW_KERNEL_SHARE.value]
    assert share_flags(3, 0.9) == []
    assert profile_count(0.001) == 2 and profile_count(1.0) == 1 and profile_count(None) == 1


def test_on_the_cpu_a_candidate_whose_own_triton_kernels_never_ran_is_a_hack():
    """verdict/correctness.py: cpu_backend_flags, from the launches the child counted in the checked calls."""
    from kernelbench_rl.evaluation.result import Flag
    from kernelbench_rl.evaluation.verdict.correctness import cpu_backend_flags

    unused = [Flag.BACKEND_NOT_USED.value, Flag.HACK.value]
    assert cpu_backend_flags({"relu_kernel": 3}, {"relu_kernel"}) == []
    assert cpu_backend_flags({"relu_kernel": 0, "torch_add": 2}, {"relu_kernel"}) == unused  # defined, never launched
    assert cpu_backend_flags({}, {"relu_kernel"}) == unused
    assert cpu_backend_flags({"relu_kernel": 1}, set()) == unused  # no kernel of its own at all
