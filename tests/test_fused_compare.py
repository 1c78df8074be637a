"""The fused one-pass output comparison judges exactly as the torch path.

On the GPU the worker compares fp32/fp16/bf16 outputs with one Triton kernel (kernelbench_rl/evaluation/
fused_compare.py); here the same kernel runs on Triton's CPU interpreter against the torch path on the
adversarial cases below (NaN and Inf on either side, the tolerance's edge, an odd length, half types). Its speed on
the GPU is in bench/RESULTS.md ("output comparison cost").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kernelbench_rl.evaluation.verdict import checks, fused_compare

REPO = Path(__file__).resolve().parents[1]


def adversarial_pairs(device: str, size: int = 1 << 20) -> list[tuple[str, torch.Tensor, torch.Tensor, float, float]]:
    """(case, reference, candidate, atol, rtol): outputs on which a fast comparison could judge otherwise."""
    gen = torch.Generator(device=device).manual_seed(0)
    base = torch.randn(size, generator=gen, device=device)
    cases = [("equal", base, base.clone(), 1e-4, 1e-4),
             ("small noise", base, base + 1e-6 * torch.randn(base.shape, generator=gen, device=device), 1e-4, 1e-4)]
    off = base.clone()
    off[::100] += 1e-3
    cases.append(("1 in 100 off", base, off, 1e-4, 1e-4))
    cases.append(("just inside the tolerance", base, base + (1e-4 + 1e-4 * base.abs()) * 0.999, 1e-4, 1e-4))
    cases.append(("just outside the tolerance", base, base + (1e-4 + 1e-4 * base.abs()) * 1.01, 1e-4, 1e-4))
    ref_nan = base.clone()
    ref_nan[5::77] = float("nan")
    ref_nan[7::99] = float("inf")
    cases.append(("NaN/Inf where the reference has them", ref_nan, ref_nan.clone(), 1e-4, 1e-4))
    got_nan = base.clone()
    got_nan[size // 3] = float("nan")
    cases.append(("NaN where the reference is finite", base, got_nan, 1e-4, 1e-4))
    got_inf = base.clone()
    got_inf[size // 2] = float("-inf")
    cases.append(("-Inf where the reference is finite", base, got_inf, 1e-4, 1e-4))
    got_fin = ref_nan.clone()
    got_fin[7] = 0.0
    cases.append(("finite where the reference is Inf", ref_nan, got_fin, 1e-4, 1e-4))
    cases.append(("zeros", base, torch.zeros_like(base), 1e-4, 1e-4))
    odd = torch.randn(size + 3, generator=gen, device=device)
    cases.append(("odd length", odd, odd + 2e-4, 1e-4, 1e-4))
    for dtype in (torch.float16, torch.bfloat16):
        noisy = (base + 3e-3 * torch.randn(base.shape, generator=gen, device=device)).to(dtype)
        cases.append((f"{str(dtype)[6:]} noise", base.to(dtype), noisy, 1e-2, 1e-2))
    return cases


def judged_alike(fused: tuple, plain: tuple) -> bool:
    """Same count outside tolerance and same non-finite verdict; where finite, the same max error and scale
    (the torch path stops at the first non-finite chunk, so its figures there are partial)."""
    if fused[0] != plain[0] or fused[3] != plain[3]:
        return False
    return bool(fused[3]) or (abs(fused[1] - plain[1]) <= 1e-7 * max(1.0, plain[1]) and fused[2] == plain[2])

INTERPRETED = r"""
import importlib.util, json, sys
sys.path.insert(0, sys.argv[1])
spec = importlib.util.spec_from_file_location("fused_cases", sys.argv[1] + "/tests/test_fused_compare.py")
cc = importlib.util.module_from_spec(spec); spec.loader.exec_module(cc)
checks, fused_compare = cc.checks, cc.fused_compare
fused_compare.usable = lambda ref, got: True  # CPU tensors, on the interpreter
rows = []
for name, ref, got, atol, rtol in cc.adversarial_pairs("cpu", size=int(sys.argv[2])):
    fused = checks._compare_floating(ref, got, atol, rtol)
    plain = checks._compare_floating_torch(ref, got, atol, rtol)
    rows.append({"case": name, "fused": list(fused), "torch": list(plain), "alike": cc.judged_alike(fused, plain),
                 "broken": checks._fused_broken})
print("ROWS " + json.dumps(rows))
"""


def test_fused_kernel_judges_as_the_torch_path_on_adversarial_outputs():
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", INTERPRETED, str(REPO), str(3 * fused_compare.BLOCK + 17)],
                          capture_output=True, text=True, timeout=600, env=env, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("ROWS "))[5:])
    by_case = {r["case"]: r for r in rows}
    assert len(rows) >= 13
    assert not any(r["broken"] for r in rows), "the fused kernel fell back to torch: it did not run"
    assert all(r["alike"] for r in rows), [r for r in rows if not r["alike"]]
    # and the cases say what they should, so agreement is not agreement on nothing
    assert by_case["equal"]["fused"][0] == 0
    assert by_case["just outside the tolerance"]["fused"][0] == 3 * fused_compare.BLOCK + 17
    assert by_case["just inside the tolerance"]["fused"][0] == 0
    assert by_case["NaN where the reference is finite"]["fused"][3] == "NaN"
    assert by_case["-Inf where the reference is finite"]["fused"][3] == "Inf"
    assert by_case["NaN/Inf where the reference has them"]["fused"][0] == 0
    assert by_case["finite where the reference is Inf"]["fused"][0] == 1
    assert by_case["zeros"]["fused"][0] > 0


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_the_gpu_the_fused_kernel_judges_the_adversarial_outputs_as_the_torch_path():
    rows = [(name, checks._compare_floating(ref, got, atol, rtol), checks._compare_floating_torch(ref, got, atol, rtol))
            for name, ref, got, atol, rtol in adversarial_pairs("cuda")]
    assert not checks._fused_broken
    assert all(judged_alike(fused, plain) for _, fused, plain in rows), [r for r in rows if not judged_alike(r[1], r[2])]


def test_a_fused_kernel_that_cannot_build_falls_back_to_torch(monkeypatch):
    monkeypatch.setattr(checks, "_fused_broken", False)
    monkeypatch.setattr(fused_compare, "usable", lambda ref, got: True)

    def no_triton(*_a, **_k):
        raise ImportError("No module named 'triton'")

    monkeypatch.setattr(fused_compare, "compare", no_triton)
    ref = torch.randn(1000)
    got = ref.clone()
    got[10] += 1.0
    outcome = checks.compare_outputs([ref], [got], 1e-4, 1e-4)
    assert outcome.category.value == "mismatch" and "1 of 1000" in outcome.message
    assert checks._fused_broken  # not tried again in this process
    assert checks.compare_outputs([ref], [ref.clone()], 1e-4, 1e-4).ok


def test_cpu_outputs_never_take_the_fused_path():
    ref = torch.randn(10)
    assert not fused_compare.usable(ref, ref.clone())
    assert not fused_compare.usable(ref.double(), ref.double())


def test_the_workers_warm_up_builds_both_length_variants_and_never_raises(monkeypatch):
    """The worker warms the kernel before its first candidate (its Triton cache starts empty): both
    specialisations a real output can need, and a kernel that cannot build leaves the torch path in place."""
    monkeypatch.setattr(checks, "_fused_broken", False)
    monkeypatch.setattr(fused_compare, "usable", lambda ref, got: True)
    lengths = []

    def record(ref, got, atol, rtol):
        lengths.append(ref.numel())
        return fused_compare.FusedFigures(bad=0, max_abs_err=0.0, scale=0.0, nonfinite=0, nan=0)

    monkeypatch.setattr(fused_compare, "compare", record)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *_a: None)
    assert not checks.warm_up_comparison("cpu").startswith("failed")
    assert {n % 16 == 0 for n in lengths} == {True, False}

    def no_triton(*_a, **_k):
        raise ImportError("No module named 'triton'")

    monkeypatch.setattr(fused_compare, "compare", no_triton)
    assert checks.warm_up_comparison("cpu").startswith("torch")
    assert checks._fused_broken


def test_a_warm_up_on_a_device_that_is_not_there_is_reported_not_raised():
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is there")
    assert checks.warm_up_comparison("cuda").startswith("failed")


def test_while_the_fused_kernel_builds_in_the_background_comparisons_take_the_torch_path(monkeypatch):
    """The worker builds the kernel beside its first candidates: until the warm-up ends they are judged by the torch
    path (the same verdicts), the warm-up itself runs the fused kernel inside the launch gate, and afterwards the
    fused kernel serves."""
    monkeypatch.setattr(checks, "_fused_broken", False)
    monkeypatch.setattr(fused_compare, "usable", lambda ref, got: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *_a: None)
    fused_calls = []
    gate = {"inside": False}

    def record(ref, got, atol, rtol):
        fused_calls.append(gate["inside"])
        bad = int((~torch.isclose(got.float(), ref.float(), rtol=rtol, atol=atol)).sum())
        return fused_compare.FusedFigures(bad=bad, max_abs_err=float((got - ref).abs().max()), scale=1.0,
                                          nonfinite=0, nan=0)

    monkeypatch.setattr(fused_compare, "compare", record)
    ref = torch.randn(1000)
    got = ref.clone()
    got[3] += 1.0
    checks.defer_fused_comparison()
    try:
        deferred = checks.compare_outputs([ref], [got], 1e-4, 1e-4)
        assert fused_calls == []  # the torch path judged it
        assert deferred.category.value == "mismatch" and "1 of 1000" in deferred.message

        class Gate:
            def __enter__(self):
                gate["inside"] = True

            def __exit__(self, *_exc):
                gate["inside"] = False

        assert not checks.warm_up_comparison("cpu", Gate).startswith("failed")
        assert fused_calls == [True, True]  # both length variants, each inside the gate
        after = checks.compare_outputs([ref], [got], 1e-4, 1e-4)
        assert fused_calls[-1] is False and len(fused_calls) == 3
        assert (after.category, after.message) == (deferred.category, deferred.message)
    finally:
        checks._fused_deferred.clear()


def test_a_failed_background_build_still_ends_the_deferral(monkeypatch):
    monkeypatch.setattr(checks, "_fused_broken", False)
    checks.defer_fused_comparison()
    try:
        if torch.cuda.is_available():
            pytest.skip("a CUDA device is there")
        assert checks.warm_up_comparison("cuda").startswith("failed")
        assert not checks._fused_deferred.is_set()
    finally:
        checks._fused_deferred.clear()
