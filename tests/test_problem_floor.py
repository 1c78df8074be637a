"""The physical floor of a problem: bytes and FLOPs counted by hand for elementwise, reduction, matmul, conv and
attention problems, the GPU peak table, and `problems show --floor`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kernelbench_rl.problems import get_problem
from kernelbench_rl.evaluation.timing.floor import GPU_PEAKS, gpu_peaks, sol_fraction, source_floor

H100 = GPU_PEAKS["H100 SXM"]

_TEMPLATE = """import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
{init}
    def forward(self, {args}):
        return {expr}


def get_inputs():
    return [{inputs}]


def get_init_inputs():
    return []
"""


def floor_of(expr: str, inputs: str, args: str = "x", init: str = "", precision: str = "fp32", gpu: str = "H100"):
    return source_floor(_TEMPLATE.format(expr=expr, inputs=inputs, args=args, init=init), precision, gpu)


def test_elementwise_reads_and_writes_once_and_is_memory_bound():
    f = floor_of("torch.relu(x)", "torch.rand(4096, 393216)")
    n = 4096 * 393216 * 4
    assert (f.bytes_read, f.bytes_written, f.bytes, f.flops) == (n, n, 2 * n, 0)
    assert f.bound == "memory" and f.uncounted_ops == ["relu"]
    assert f.floor_ms == pytest.approx((2 * n - H100.l2_bytes) / 3.35e12 * 1e3)
    assert 3.8 <= f.floor_ms <= 4.3


def test_a_reduction_writes_only_its_result_and_small_writes_may_stay_in_l2():
    f = floor_of("x.sum(dim=1)", "torch.rand(1024, 8192)")
    assert f.bytes_read == 1024 * 8192 * 4 and f.bytes_written == 1024 * 4
    assert f.dram_bytes == f.bytes_read  # 4 KiB of output fits the L2


def test_matmul_is_compute_bound_at_two_m_n_k_flops_on_the_tf32_peak_for_fp32():
    m, k, n = 4096, 8192, 2048
    f = floor_of("torch.matmul(a, b)", f"torch.rand({m}, {k}), torch.rand({k}, {n})", args="a, b")
    assert f.flops == 2 * m * n * k
    assert f.bytes == (m * k + k * n + m * n) * 4
    assert f.bound == "compute" and f.arithmetic == "tf32"
    assert f.compute_ms == pytest.approx(2 * m * n * k / H100.flops_per_s["tf32"] * 1e3)
    half = floor_of("torch.matmul(a, b)", f"torch.rand({m}, {k}), torch.rand({k}, {n})", args="a, b", precision="bf16")
    assert half.bytes == f.bytes // 2 and half.arithmetic == "bf16"
    assert half.compute_ms == pytest.approx(f.compute_ms / 2, rel=1e-3)


def test_conv_counts_its_weights_and_two_flops_per_multiply_add():
    f = floor_of("self.conv(x)", "torch.rand(8, 16, 64, 64)",
                 init="        self.conv = nn.Conv2d(16, 32, 3, bias=False)\n")
    out_hw = 62 * 62
    assert f.flops == 2 * 8 * 32 * out_hw * 16 * 3 * 3
    assert f.weight_bytes == 32 * 16 * 3 * 3 * 4
    assert f.bytes_read == 8 * 16 * 64 * 64 * 4 + f.weight_bytes
    assert f.bytes_written == 8 * 32 * out_hw * 4


def test_attention_counts_both_products():
    b, h, s, d = 4, 8, 1024, 64
    f = floor_of("F.scaled_dot_product_attention(q, k, v)", ", ".join([f"torch.rand({b}, {h}, {s}, {d})"] * 3),
                 args="q, k, v")
    assert f.flops == 2 * (2 * b * h * s * s * d)  # Q K^T and P V
    assert f.bytes == 4 * b * h * s * d * 4


def test_the_peak_table_knows_devices_by_the_names_torch_reports():
    assert gpu_peaks("NVIDIA H100 80GB HBM3").name == "H100 SXM"
    assert gpu_peaks("NVIDIA H100 PCIe").name == "H100 PCIe"
    assert gpu_peaks("NVIDIA H200").dram_bytes_per_s == pytest.approx(4.8e12)
    assert gpu_peaks("NVIDIA A100-SXM4-80GB").name == "A100"
    for peaks in GPU_PEAKS.values():
        assert peaks.source and peaks.flops_per_s["fp32"] < peaks.flops_per_s.get("tf32", float("inf"))
    with pytest.raises(KeyError, match="no peak figures"):
        gpu_peaks("V100")
    assert sol_fraction(3.8, 4.0) == pytest.approx(0.95) and sol_fraction(None, 4.0) is None


def test_problems_show_floor_prints_json_for_relu_at_real_size():
    done = subprocess.run([sys.executable, "-m", "kernelbench_rl.cli", "problems", "show", "L1/19", "--floor", "--gpu",
                           "H100", "--json"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    problem = get_problem("L1/19")
    assert data["problem_id"] == "L1/19" and data["bound"] == "memory" and data["gpu"] == "H100 SXM"
    elements = 4096 * 393216  # the bundled ReLU keeps KernelBench's real size
    assert "batch_size = 4096" in problem.source and data["bytes"] == 2 * 4 * elements == 12884901888
    assert 3.8 <= data["floor_ms"] <= 4.3
    bad = subprocess.run([sys.executable, "-m", "kernelbench_rl.cli", "problems", "show", "L1/19", "--floor", "--gpu",
                          "V100"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "no peak figures for GPU 'V100'" in bad.stderr and "Traceback" not in bad.stderr


def _relu_floor():
    return floor_of("torch.relu(x)", "torch.rand(4096, 393216)")


def test_a_time_under_the_floor_is_flagged_only_past_the_margin():
    from kernelbench_rl.evaluation.timing.floor import BELOW_FLOOR_MARGIN, speed_of_light

    f = _relu_floor()
    honest = speed_of_light(f, 4.3, 4.4)
    assert not honest["below_floor"] and honest["sol_fraction"] == pytest.approx(f.floor_ms / 4.3)
    assert honest["achieved_bytes_per_s"] == pytest.approx(f.dram_bytes / 4.3e-3)
    assert honest["reference_sol_fraction"] == pytest.approx(f.floor_ms / 4.4)
    within_the_peaks_error = speed_of_light(f, f.floor_ms * (1 - BELOW_FLOOR_MARGIN / 2), 4.4)
    assert not within_the_peaks_error["below_floor"]
    half_the_work = speed_of_light(f, f.floor_ms / 2, 4.4)  # a kernel that skips half of it
    assert half_the_work["below_floor"] and half_the_work["sol_fraction"] == pytest.approx(2.0)


def test_a_result_under_the_floor_earns_no_speed_reward_and_its_figures_reach_duckdb(tmp_path):
    from kernelbench_rl.evaluation.timing.floor import speed_of_light
    from kernelbench_rl.evaluation.result import EvalResult, Flag
    from kernelbench_rl.rewards.shaping import score
    from kernelbench_rl.store import Store

    def timed(runtime_ms: float) -> EvalResult:
        sol = speed_of_light(_relu_floor(), runtime_ms, 4.4)
        flags = [Flag.BELOW_SPEED_OF_LIGHT.value] if sol["below_floor"] else []
        return EvalResult(problem_id="L1/19", candidate_sha256=f"k{runtime_ms}", backend="triton", precision="fp32",
                          device_kind="cuda", format_ok=True, compiled=True, correct=True, runtime_ms=runtime_ms,
                          baseline_ms=4.4, speedup=4.4 / runtime_ms, flags=flags, speed_of_light=sol, settings_hash="s")

    honest, skipping = timed(4.0), timed(1.9)
    assert honest.speedup_counts and not skipping.speedup_counts
    assert score(honest, "speed").components["speed"] > 0
    assert score(skipping, "speed").components["faster"] == 0 and score(skipping, "speed").components["speed"] == 0
    store = Store(tmp_path / "x.duckdb")
    store.record_evaluations([honest, skipping])
    rows = store.fetchall("SELECT round(sol_fraction, 3), bound, floor_ms > 3.8 FROM evaluations ORDER BY sol_fraction",
                          read_only=True)
    assert rows == [(round(3.8306 / 4.0, 3), "memory", True), (round(3.8306 / 1.9, 3), "memory", True)]
    assert EvalResult.from_json(skipping.to_json()).sol_fraction == pytest.approx(3.8306 / 1.9, rel=1e-3)


def test_the_profile_and_the_speed_of_light_reach_the_refinement_feedback_only_when_asked():
    from kernelbench_rl.config import load_config
    from kernelbench_rl.envs.feedback import refinement_feedback
    from kernelbench_rl.compose import run_settings
    from kernelbench_rl.evaluation.source import kernels
    from kernelbench_rl.evaluation.timing.floor import speed_of_light
    from kernelbench_rl.evaluation.result import EvalResult

    profile = kernels.profile_rows([["add_kernel", 1, 610.0], ["relu_kernel", 1, 390.0], ["memset", 2, 3.0]])
    assert [row[0] for row in profile] == ["add_kernel", "relu_kernel", "memset"]
    result = EvalResult(problem_id="L1/19", candidate_sha256="k", backend="triton", precision="fp32", device_kind="cuda",
                        format_ok=True, compiled=True, correct=True, trials_passed=3, trials_total=3, runtime_ms=4.3,
                        baseline_ms=4.4, speedup=4.4 / 4.3, profile=profile,
                        speed_of_light=speed_of_light(_relu_floor(), 4.3, 4.4))
    plain = refinement_feedback("code", "", result)
    assert "Speed of light" not in plain and "GPU kernels" not in plain
    shown = refinement_feedback("code", "", result, profile=True)
    assert "GPU kernels per forward (4 launches): add_kernel 61%, 0.610 ms x1; relu_kernel 39%" in shown
    assert "Speed of light: 0.89 of the memory-bound floor (3.83 ms on H100 SXM: 12.8 GB, 0 GFLOP)" in shown
    assert not run_settings(load_config("kevin")).env.feedback_profile
    assert run_settings(load_config("kevin", ["env.feedback.profile=true"])).env.feedback_profile


def test_profile_needs_a_gpu_and_says_so_in_one_sentence():
    done = subprocess.run([sys.executable, "-m", "kernelbench_rl.cli", "profile", "-p", "L1/19", "-k",
                           "KernelBench/solutions/level1/19_ReLU.py"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "no CUDA GPU is visible" in done.stderr and "Traceback" not in done.stderr


def test_the_roofline_plot_draws_a_runs_best_kernels(tmp_path):
    from kernelbench_rl.evaluation.timing.floor import speed_of_light
    from kernelbench_rl.evaluation.result import EvalResult
    from kernelbench_rl.evaluation.timing.roofline import best_timed, roofline_plot

    matmul = floor_of("torch.matmul(a, b)", "torch.rand(4096, 4096), torch.rand(4096, 4096)", args="a, b")

    def result(problem: str, floor, ms: float, correct: bool = True) -> EvalResult:
        return EvalResult(problem_id=problem, candidate_sha256=f"{problem}{ms}", backend="triton", precision="fp32",
                          device_kind="cuda", correct=correct, runtime_ms=ms, speed_of_light=speed_of_light(floor, ms, ms))

    results = [result("L1/19", _relu_floor(), 4.4), result("L1/19", _relu_floor(), 5.0),
               result("L1/1", matmul, 0.5), result("L1/1", matmul, 0.3, correct=False)]
    best = best_timed(results)
    assert best["L1/19"].runtime_ms == 4.4 and best["L1/1"].runtime_ms == 0.5  # wrong kernels never count
    png = roofline_plot(results, tmp_path / "roofline.png")
    assert png.read_bytes()[:4] == b"\x89PNG" and png.stat().st_size > 10_000
    assert roofline_plot([], tmp_path / "empty.png").stat().st_size > 0  # CPU runs: a note, not an error


def test_eval_dir_entries_carry_the_speed_of_light_when_timed():
    from kernelbench_rl.commands.evaluate import _kernelbench_entry
    from kernelbench_rl.evaluation.timing.floor import speed_of_light
    from kernelbench_rl.evaluation.result import EvalResult

    timed = EvalResult(problem_id="L1/19", candidate_sha256="k", backend="triton", precision="fp32", device_kind="cuda",
                       correct=True, runtime_ms=4.4, baseline_ms=4.4, speed_of_light=speed_of_light(_relu_floor(), 4.4, 4.4))
    entry = _kernelbench_entry(0, timed)["metadata"]
    assert entry["bound"] == "memory" and entry["sol_fraction"] == pytest.approx(3.8306 / 4.4, rel=1e-3)
    untimed = EvalResult(problem_id="L1/19", candidate_sha256="k", backend="triton", precision="fp32", device_kind="cpu")
    assert "sol_fraction" not in _kernelbench_entry(0, untimed)["metadata"]


def test_an_evaluation_artifact_carries_the_roofline_when_kernels_were_timed(tmp_path):
    from kernelbench_rl.evaluation.timing.floor import speed_of_light
    from kernelbench_rl.evaluation.result import EvalResult
    from kernelbench_rl.metrics import SampleOutcome, summarize
    from kernelbench_rl.training.checkpoint_eval import CheckpointReport, report_markdown

    outcomes = [SampleOutcome("L1/19", True, True, 1.0)]
    timed = EvalResult(problem_id="L1/19", candidate_sha256="k", backend="triton", precision="fp32", device_kind="cuda",
                       correct=True, runtime_ms=4.4, speed_of_light=speed_of_light(_relu_floor(), 4.4, 4.4))
    gpu = CheckpointReport("r", "step_1", "holdout", outcomes, summarize(outcomes, (1,)), timed=[timed])
    cpu = CheckpointReport("r", "base", "holdout", outcomes, summarize(outcomes, (1,)))
    _, markdown, _ = report_markdown([cpu, gpu], tmp_path, "nightly")
    assert "![speedups](data:image/png;base64," in markdown and "![roofline](data:image/png;base64," in markdown
    assert (tmp_path / "nightly-roofline.png").exists()
    _, cpu_only, _ = report_markdown([cpu], tmp_path, "cpu")
    assert "roofline" not in cpu_only  # nothing timed on the CPU: no empty plot


def test_the_warm_up_leaves_later_floors_unchanged_and_says_why_it_failed():
    from kernelbench_rl.evaluation.timing import floor as floors

    relu = get_problem("L1/19").source
    before = source_floor(relu, "fp32", "NVIDIA H100 80GB HBM3")
    assert floors.warm_up("NVIDIA H100 80GB HBM3") == "ok"
    assert source_floor(relu, "fp32", "NVIDIA H100 80GB HBM3") == before
    assert floors.warm_up("a GPU nobody knows").startswith(("ValueError", "KeyError", "LookupError", "UserError"))


def test_a_problems_floor_is_worked_out_once_and_kept_on_its_state():
    import types

    from kernelbench_rl.evaluation.worker.candidate_timing import CandidateTiming

    calls = []
    timing = CandidateTiming.__new__(CandidateTiming)  # floor_for needs only the hardware's name
    timing.hardware = "NVIDIA H100 80GB HBM3"
    timing.floor_service = None  # worked out in this process (tests/test_floor_service.py: the helper's way)
    module = types.ModuleType("relu")
    exec(compile(get_problem("L1/19").source, "<relu>", "exec"), module.__dict__)
    state = types.SimpleNamespace(floors={}, module=module)
    original = module.get_inputs
    module.get_inputs = lambda: calls.append(1) or original()
    first = timing.floor_for(state, "fp32")
    assert timing.floor_for(state, "fp32") is first and calls == [1]
    broken = types.SimpleNamespace(floors={}, module=types.ModuleType("empty"))
    assert "AttributeError" in timing.floor_for(broken, "fp32")  # why there is none, kept as text
