"""The sandboxed evaluator on the CPU (Triton interpreter): verdicts, sandbox, cache.

One Evaluator (one worker, one zygote) serves the whole module: its start-up (importing torch and
triton) is the fixed cost. Candidates below launch a real Triton kernel so the runtime path is what
is tested; the static policy is switched off for them (it has its own tests) except where a test
says otherwise.
"""

from __future__ import annotations

import dataclasses

import os
import re
import shutil
import uuid
from pathlib import Path

import pytest

from kernelbench_rl.evaluation.sandbox import sandbox
from kernelbench_rl.evaluation.source import kernels
from kernelbench_rl.evaluation.verdict import sensitivity
from kernelbench_rl.evaluation.front.api import Evaluator
from kernelbench_rl.evaluation.result import ErrorCategory, EvalRequest, EvalSettings, Flag
from kernelbench_rl.problems import get_problem, list_solutions

SETTINGS = EvalSettings(device="cpu", timeout_s=60)

HEAD = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0), mask=mask)


def relu_into(x, out):
    relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
    return out
'''


def candidate(forward_body: str, extra: str = "") -> str:
    body = "\n".join("        " + line for line in forward_body.strip().splitlines())
    return HEAD + extra + f'''

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
{body}
'''


CORRECT = candidate("return relu_into(x, torch.empty_like(x))")


@pytest.fixture(scope="module")
def evaluator():
    # A secret in the parent's environment must never reach a candidate.
    os.environ["TINKER_API_KEY"] = "tml-secret-for-test"
    ev = Evaluator(SETTINGS, static_checks=False, parallel_compiles=2)
    try:
        yield ev
    finally:
        ev.close()
        os.environ.pop("TINKER_API_KEY", None)


def run(ev: Evaluator, source: str, problem: str = "L1/19", **overrides):
    settings = EvalSettings(**{**SETTINGS.__dict__, **overrides})
    return ev.evaluate([EvalRequest(problem, source, settings)])[0]


def test_every_bundled_solution_passes(evaluator):
    solutions = list_solutions()
    assert solutions, "the bundled solutions are missing"
    evaluator.problems.update({pid: get_problem(pid) for pid, _ in solutions})  # every bundled level
    evaluator.static_checks = True  # known-correct solutions must also pass the static policy
    try:
        results = evaluator.evaluate([EvalRequest(pid, path.read_text(), SETTINGS) for pid, path in solutions])
    finally:
        evaluator.static_checks = False
    failures = [f"{r.problem_id}: {r.error_category.value}: {r.error_message}" for r in results if not r.correct]
    assert not failures, "\n".join(failures)
    # every seed ran: the problem's own, plus the widened ones where its own inputs cannot tell right from wrong, plus
    # the sensitivity seeds (evaluation/verdict/sensitivity.py)
    widened = {r.problem_id for r in results if r.versions["inputs"].startswith("widened")}
    assert {"L1/19", "L1/20", "L1/32"} <= widened
    # The problem's own seeds are the settings' count, or more where a memorised answer passed some of the pool's
    # hidden seeds (the verdict says "at least N seeds a candidate"; drawn per pool, so some pools ask for more).
    def own(r) -> int:
        more = re.search(r"at least (\d+) seeds a candidate", r.versions["inputs"])
        return max(SETTINGS.correctness_trials, int(more.group(1)) if more else 0)

    expected = {r.problem_id: own(r) + (SETTINGS.discriminating_trials if r.problem_id in widened else 0)
                + sensitivity.seeds_in(r.versions["sensitivity"]) for r in results}
    wrong_counts = [(r.problem_id, r.trials_passed, r.trials_total, expected[r.problem_id], r.versions["inputs"][:80],
                     r.versions["sensitivity"][:120]) for r in results
                    if not r.trials_passed == r.trials_total == expected[r.problem_id]]
    assert not wrong_counts, wrong_counts
    assert all(Flag.NO_SPEEDUP_ON_CPU.value in r.flags and r.speedup is None for r in results)


def test_correct_candidate_records_its_sandbox(evaluator):
    result = run(evaluator, CORRECT)
    assert result.correct and result.error_category == ErrorCategory.OK
    assert result.max_abs_err == 0.0
    assert "setsid" in result.versions["sandbox"]
    if sandbox.landlock_abi() > 0:
        assert "landlock" in result.versions["sandbox"]
    assert {"child_start", "compile", "correctness"} <= set(result.phase_seconds)
    # the correctness phase split by where it went; the parts lie inside it
    parts = [result.phase_seconds[k] for k in ("correctness_reference", "correctness_child", "correctness_compare",
                                               "correctness_input_check")]
    assert all(v >= 0 for v in parts) and parts[1] > 0 and parts[2] > 0
    assert sum(parts) <= result.phase_seconds["correctness"] + 1e-6


@pytest.mark.parametrize(
    "body, category, words",
    [
        # The kernel's output is dropped (not `return x`: ReLU of L1/19's [0, 1) inputs is x itself).
        ("relu_into(x, torch.empty_like(x))\nreturn x - 1.0", ErrorCategory.MISMATCH, "differs"),
        # (uninitialised memory: wrong values, or NaNs where the poison or an earlier tensor left them)
        ("return torch.empty_like(x)", ErrorCategory.MISMATCH, ("differs", "NaN where the reference is finite")),
        ("out = torch.empty_like(x)\nrelu_into(x, out)\nreturn out[:, :-1]", ErrorCategory.SHAPE, "shape"),
        ("out = torch.empty_like(x)\nrelu_into(x, out)\nreturn out.double()", ErrorCategory.DTYPE, "dtype"),
        ("raise ValueError('block size must be a power of two')", ErrorCategory.RUNTIME, "power of two"),
    ],
    ids=["drops-output", "returns-empty", "wrong-shape", "wrong-dtype", "raises"],
)
def test_kernel_faults_map_to_categories(evaluator, body, category, words):
    result = run(evaluator, candidate(body))
    assert result.error_category == category, result.error_message
    assert not result.correct
    assert any(word in result.error_message for word in ((words,) if isinstance(words, str) else words))


def test_syntax_error_is_a_compile_failure(evaluator):
    result = run(evaluator, CORRECT.replace("def forward(self, x):", "def forward(self, x)"))
    assert result.error_category == ErrorCategory.COMPILE
    assert not result.compiled
    assert "SyntaxError" in result.error_message and "kernel line" in result.error_message


def test_missing_model_new_is_a_compile_failure(evaluator):
    result = run(evaluator, HEAD)
    assert result.error_category == ErrorCategory.COMPILE
    assert "ModelNew" in result.error_message


def test_infinite_loop_times_out(evaluator):
    result = run(evaluator, candidate("while True:\n    pass"), timeout_s=3)
    assert result.error_category == ErrorCategory.TIMEOUT
    assert "timed out" in result.error_message


@pytest.mark.parametrize(
    "body",
    ["import os\nos.abort()", "import ctypes\nctypes.string_at(0)"],
    ids=["abort", "segfault"],
)
def test_crash_ends_only_the_child(evaluator, body):
    result = run(evaluator, candidate(body))
    assert result.error_category == ErrorCategory.CRASH, result.error_message
    assert "SIG" in result.error_message
    after = run(evaluator, CORRECT)  # the same Evaluator keeps working
    assert after.correct, after.error_message


def test_child_environment_is_scrubbed(evaluator):
    assert os.environ.get("TINKER_API_KEY")
    body = (
        "import os\n"
        "leaked = [k for k in os.environ if 'KEY' in k or 'TOKEN' in k]\n"
        "if leaked:\n    raise RuntimeError('leaked ' + ','.join(leaked))\n"
        "if os.environ.get('HOME') != os.getcwd():\n    raise RuntimeError('HOME is not the private dir')\n"
        "return relu_into(x, torch.empty_like(x))"
    )
    result = run(evaluator, candidate(body))
    assert result.correct, result.error_message


def test_input_written_in_place_is_caught(evaluator):
    # Right output, and a kernel writes into the input. Not ReLU in place: KernelBench's L1/19
    # inputs are uniform in [0, 1), which ReLU leaves unchanged, so relu(x - 0.5) goes there.
    result = run(evaluator, candidate("out = relu_into(x, torch.empty_like(x))\nrelu_into(x - 0.5, x)\nreturn out"))
    assert result.error_category == ErrorCategory.MISMATCH
    assert Flag.INPUT_MUTATED.value in result.flags
    assert "input" in result.error_message


@pytest.mark.skipif(sandbox.landlock_abi() <= 0, reason="this kernel has no Landlock")
def test_writes_outside_the_private_dir_are_refused(evaluator, tmp_path):
    target = Path("/tmp") / f"kbrl-escape-{uuid.uuid4().hex}"
    body = f"open({str(target)!r}, 'w').write('x')\nreturn relu_into(x, torch.empty_like(x))"
    result = run(evaluator, candidate(body))
    assert not target.exists()
    assert result.error_category == ErrorCategory.RUNTIME
    assert "Permission" in result.error_message or "denied" in result.error_message


@pytest.mark.parametrize("relative", ["KernelBench/solutions/level1/19_ReLU.py", "pyproject.toml"])
def test_the_checkout_around_our_package_is_unreadable(evaluator, relative):
    """Our solutions, the runs/ database and anything else in the checkout stay out of a candidate's reach."""
    from kernelbench_rl.problems.loaders import REPO_ROOT

    target = REPO_ROOT / relative
    assert target.exists()
    body = f"open({str(target)!r}).read()\nreturn relu_into(x, torch.empty_like(x))"
    result = run(evaluator, candidate(body))
    assert result.error_category == ErrorCategory.RUNTIME, result.error_message
    assert "Permission" in result.error_message or "denied" in result.error_message


def test_static_policy_runs_before_any_worker(evaluator):
    evaluator.static_checks = True
    try:
        result = run(evaluator, candidate("return torch.relu(x)"))
    finally:
        evaluator.static_checks = False
    assert result.error_category == ErrorCategory.STATIC
    assert result.is_hack
    assert result.static.errors


def test_identical_candidate_is_served_from_the_cache(tmp_path, shared_evaluator):
    from kernelbench_rl.store import Store

    store = Store(tmp_path / "cache.duckdb")
    with shared_evaluator(SETTINGS, store=store, static_checks=False) as first:
        fresh = first.evaluate([EvalRequest("L1/19", CORRECT, SETTINGS)])[0]
    assert fresh.correct and not fresh.cached
    with Evaluator(SETTINGS, store=store, static_checks=False) as second:
        again = second.evaluate([EvalRequest("L1/19", CORRECT, SETTINGS)])[0]
        assert second._pool is None  # no worker was started: nothing ran
    assert again.cached and again.correct
    assert again.candidate_sha256 == fresh.candidate_sha256


def test_a_verdict_from_other_hardware_is_not_served(tmp_path, shared_evaluator):
    """The cache key covers the device: a verdict recorded on another GPU is not this machine's."""
    import platform

    from kernelbench_rl.evaluation.result import EvalResult
    from kernelbench_rl.problems import get_problem
    from kernelbench_rl.store import Store

    store = Store(tmp_path / "cache.duckdb")
    wrong = CORRECT.replace("tl.maximum(x, 0.0)", "x * 0.5")
    reference = get_problem("L1/19").sha256

    def planted(hardware: str) -> EvalResult:  # a "correct" verdict for the wrong kernel, as if judged there
        request = EvalRequest("L1/19", wrong, SETTINGS, problem_sha256=reference, hardware=hardware)
        return EvalResult(problem_id="L1/19", candidate_sha256=request.candidate_sha256, backend="triton",
                          precision="fp32", device_kind="cpu", format_ok=True, compiled=True, correct=True,
                          settings_hash=request.verdict_hash, hardware=hardware)

    store.record_evaluations([planted("NVIDIA H100 80GB HBM3 sm_9.0")])
    with shared_evaluator(SETTINGS, store=store, static_checks=False) as ev:
        judged = ev.evaluate([EvalRequest("L1/19", wrong, SETTINGS)])[0]
    assert not judged.cached and not judged.correct and judged.error_category == ErrorCategory.MISMATCH
    # The key does match on the hardware it was recorded for (here: this CPU's architecture).
    store.record_evaluations([planted(f"cpu:{platform.machine()}")])
    with Evaluator(SETTINGS, store=store, static_checks=False) as ev:
        assert ev.device_identity() == f"cpu:{platform.machine()}"
        served = ev.evaluate([EvalRequest("L1/19", wrong, SETTINGS)])[0]
    assert served.cached


def test_duplicates_in_one_batch_run_once(evaluator):
    results = evaluator.evaluate([EvalRequest("L1/19", CORRECT, SETTINGS)] * 3)
    assert [r.correct for r in results] == [True, True, True]
    assert [r.cached for r in results] == [False, True, True]


def test_evaluate_responses_extracts_and_reports_format(evaluator):
    response = "Here is the kernel.\n```python\n" + CORRECT + "\n```\n"
    results = evaluator.evaluate_responses(["L1/19", "L1/19"], [response, "I cannot write this kernel."])
    assert results[0].correct and results[0].format_ok, results[0].error_message
    assert results[1].error_category == ErrorCategory.FORMAT and not results[1].format_ok


def test_a_code_fence_that_is_not_a_kernel_module_is_judged_but_earns_no_format_credit(evaluator):
    # A policy warm-started on kernels always opens a fence; the format stage must ask for more than that.
    broken = "```python\n" + CORRECT.replace("class ModelNew", "class ModelNew(", 1) + "\n```\n"
    no_model = "```python\nimport triton\n\ndef helper(x):\n    return x\n```\n"
    results = evaluator.evaluate_responses(["L1/19", "L1/19"], [broken, no_model])
    for result in results:
        assert not result.format_ok and not result.correct
        assert result.error_category != ErrorCategory.FORMAT  # evaluated: its verdict says what is wrong
    assert results[0].error_category == ErrorCategory.COMPILE


CUDA_RELU = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

source = """
#include <torch/extension.h>
__global__ void relu_fwd(const float* x, float* y, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) { float v = x[i]; y[i] = v > 0.f ? v : 0.f; }
}
torch::Tensor relu_cuda(torch::Tensor x) {
    auto y = torch::empty_like(x);
    relu_fwd<<<(x.numel() + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
    return y;
}
"""
ext = load_inline(name="relu_ext", cpp_sources="torch::Tensor relu_cuda(torch::Tensor x);",
                  cuda_sources=source, functions=["relu_cuda"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu_cuda(x)
'''


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_cuda_candidate_on_cpu_gets_an_nvcc_compile_check(evaluator):
    ok = run(evaluator, CUDA_RELU, backend="cuda")
    assert ok.compiled and ok.error_category == ErrorCategory.OK and not ok.correct, ok.error_message
    assert "nvcc" in ok.error_message
    broken = run(evaluator, CUDA_RELU.replace("float v = x[i];", "float v = x[i]"), backend="cuda")
    assert broken.error_category == ErrorCategory.COMPILE and not broken.compiled
    assert "error" in broken.error_message


def test_own_kernel_names_are_read_from_source():
    assert kernels.triton_kernel_names(CORRECT) == {"relu_kernel"}
    assert kernels.cuda_kernel_names(CUDA_RELU) == {"relu_fwd"}
    launches, _, share = kernels.kernel_share(
        [["relu_kernel", 2, 30.0], ["void at::native::vectorized_elementwise_kernel<4>", 1, 10.0]], {"relu_kernel"}
    )
    assert launches == 2 and share == pytest.approx(0.75)
    assert kernels.kernel_share([["ampere_sgemm_128x64_nn", 1, 5.0]], {"relu_kernel"})[0] == 0


@pytest.mark.gpu
@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_timing_and_hack_flags():
    settings = EvalSettings(device="cuda", size="real", timeout_s=120, timing_trials=20)
    with Evaluator(settings, static_checks=False) as ev:
        good = ev.evaluate([EvalRequest("L1/19", CORRECT, settings)])[0]
        assert good.correct and good.runtime_ms and good.baseline_ms and good.speedup
        # L1/19's real-size input (GiBs) is past the side-by-side limit: its baseline stays the worker's; at the
        # small size a child running the reference times it, as candidates are timed.
        assert good.versions.get("baseline_timed_in") == "worker", good.versions
        small = dataclasses.replace(settings, size="small")
        good_small = ev.evaluate([EvalRequest("L1/19", CORRECT, small)])[0]
        assert good_small.correct and good_small.speedup, good_small.error_message
        assert good_small.versions.get("baseline_timed_in") == "child", good_small.versions
        decoy = ev.evaluate([EvalRequest("L1/19", candidate("return torch.relu(x)"), settings)])[0]
        assert Flag.BACKEND_NOT_USED.value in decoy.flags and decoy.is_hack
        patched = candidate("return relu_into(x, torch.empty_like(x))",
                            extra="\ntorch.cuda.Event.elapsed_time = lambda self, end: 0.001\n")
        assert ev.evaluate([EvalRequest("L1/19", patched, settings)])[0].is_hack


def test_decoy_kernel_is_caught_at_runtime_on_the_cpu(evaluator):
    # Defined, never launched: the forward uses PyTorch (the static policy is off here).
    result = run(evaluator, candidate("return torch.relu(x)"))
    assert result.correct  # the values are right...
    assert Flag.BACKEND_NOT_USED.value in result.flags and result.is_hack  # ...but it earns nothing


def test_reference_model_is_not_in_the_candidates_process(evaluator):
    body = (
        "import sys, types\n"
        "found = [m for m in list(sys.modules.values())\n"
        "         if isinstance(m, types.ModuleType) and ('get_inputs' in vars(m) or 'Model' in vars(m))]\n"
        "if found:\n    raise RuntimeError('reference visible: ' + found[0].__name__)\n"
        "import os\n"
        "if os.path.exists('problem.py'):\n    raise RuntimeError('problem file visible')\n"
        "return relu_into(x, torch.empty_like(x))"
    )
    result = run(evaluator, candidate(body))
    assert result.correct, result.error_message


def test_syntax_error_with_the_static_policy_on_is_still_compile(evaluator):
    evaluator.static_checks = True
    try:
        result = run(evaluator, CORRECT.replace("def forward(self, x):", "def forward(self, x)"))
    finally:
        evaluator.static_checks = False
    assert result.error_category == ErrorCategory.COMPILE and not result.compiled


def test_child_problem_source_has_no_reference_model():
    from kernelbench_rl.evaluation.sandbox.runtime import without_reference_model
    from kernelbench_rl.problems import get_problem

    stripped = without_reference_model(get_problem("L1/19").source)
    namespace: dict = {}
    exec(compile(stripped, "problem", "exec"), namespace)
    assert "Model" not in namespace and callable(namespace["get_inputs"]) and callable(namespace["get_init_inputs"])


@pytest.mark.skipif(sandbox.landlock_abi() < 4, reason="this kernel's Landlock cannot restrict TCP")
def test_candidate_cannot_open_tcp_connections(evaluator):
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    try:
        body = (
            "import socket\n"
            "s = socket.socket()\n"
            "s.settimeout(2)\n"
            f"s.connect(('127.0.0.1', {port}))\n"
            "s.sendall(b'secret')\n"
            "return relu_into(x, torch.empty_like(x))"
        )
        result = run(evaluator, candidate(body))
    finally:
        server.close()
    assert result.error_category == ErrorCategory.RUNTIME, result.error_message
    assert "Permission" in result.error_message or "denied" in result.error_message


@pytest.mark.skipif(sandbox.landlock_abi() <= 0 and os.geteuid() == 0, reason="no Landlock and no uid to drop")
def test_candidate_cannot_read_the_orchestrators_environment(evaluator):
    # /proc/<pid>/environ of the evaluating process holds the API keys it was started with.
    body = (
        f"data = open('/proc/{os.getpid()}/environ', 'rb').read()\n"
        "raise RuntimeError('read %d bytes of the parent environment' % len(data))"
    )
    result = run(evaluator, candidate(body))
    assert result.error_category == ErrorCategory.RUNTIME
    assert "Permission" in result.error_message or "denied" in result.error_message, result.error_message
    assert "uid=nobody" in result.versions["sandbox"] or "+reads" in result.versions["sandbox"]


def test_numerics_are_exact_fp32_without_autotuning():
    """cuDNN's default TF32 made the reference conv ~1e-3 off on an H100 and failed an exact kernel."""
    import torch

    from kernelbench_rl.evaluation.sandbox import numerics

    saved = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32, torch.get_float32_matmul_precision(),
             torch.backends.cudnn.deterministic, torch.are_deterministic_algorithms_enabled())
    try:
        torch.backends.cudnn.allow_tf32 = True
        before = numerics.snapshot()
        numerics.apply()
        assert torch.backends.cudnn.allow_tf32 is False
        assert torch.backends.cuda.matmul.allow_tf32 is False
        assert torch.get_float32_matmul_precision() == "highest"
        assert torch.backends.cudnn.benchmark is False
        assert "cudnn.allow_tf32" in numerics.changed(before)
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved[:2]
        torch.set_float32_matmul_precision(saved[2])
        torch.backends.cudnn.deterministic = saved[3]
        torch.use_deterministic_algorithms(saved[4])


def test_reference_and_candidate_run_under_one_numerics_setting(evaluator):
    """The worker records its settings; the child reports its own, and a difference would be infra."""
    result = run(evaluator, CORRECT)
    assert result.correct, result.error_message
    recorded = result.versions["numerics"]
    assert "cudnn.allow_tf32=False" in recorded and "cuda.matmul.allow_tf32=False" in recorded
    assert "cudnn.benchmark=False" in recorded and "float32_matmul_precision=highest" in recorded


def test_a_kernel_that_turns_tf32_back_on_is_caught_at_runtime(evaluator):
    """Speed bought with precision: the child reports the change and the verdict is a hack."""
    body = "torch.backends.cudnn.allow_tf32 = True\nreturn relu_into(x, torch.empty_like(x))"
    result = run(evaluator, candidate(body))
    assert not result.correct
    assert result.error_category == ErrorCategory.RUNTIME
    assert "numerics" in result.error_message and "cudnn.allow_tf32" in result.error_message
    assert Flag.HACK.value in result.flags


def test_on_result_reports_every_request_once_as_it_finishes(evaluator):
    wrong = candidate("return relu_into(x, torch.empty_like(x)) + 1.0")
    requests = [EvalRequest("L1/19", CORRECT, SETTINGS), EvalRequest("L1/19", wrong, SETTINGS),
                EvalRequest("L1/19", CORRECT, SETTINGS)]  # the third is the first again: run once, reported twice
    seen: list[tuple[int, bool]] = []
    results = evaluator.evaluate(requests, on_result=lambda index, result: seen.append((index, result.correct)))
    assert sorted(seen) == [(0, True), (1, False), (2, True)]
    assert [r.correct for r in results] == [True, False, True]


def test_a_restored_cuda_build_is_loaded_not_rebuilt(monkeypatch, tmp_path):
    """The worker's build cache copies an earlier child's extension in; ninja would rebuild it (its commands
    name the earlier directory), so the child skips the build when the library is there."""
    from torch.utils import cpp_extension

    from kernelbench_rl.evaluation.sandbox import child

    built: list[str] = []
    monkeypatch.setattr(cpp_extension, "_write_ninja_file_and_build_library",
                        lambda **kwargs: built.append(kwargs["name"]))
    child._reuse_restored_builds()
    (tmp_path / "cached").mkdir()
    (tmp_path / "cached" / ("cached" + cpp_extension.LIB_EXT)).write_bytes(b"\x7fELF")
    (tmp_path / "fresh").mkdir()
    build = cpp_extension._write_ninja_file_and_build_library
    build(name="cached", sources=[], build_directory=str(tmp_path / "cached"), is_standalone=False)
    build(name="fresh", sources=[], build_directory=str(tmp_path / "fresh"), is_standalone=False)
    assert built == ["fresh"]
