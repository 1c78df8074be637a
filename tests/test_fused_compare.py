"""The fused one-pass output comparison judges exactly as the torch path.

On the GPU the worker compares fp32/fp16/bf16 outputs with one Triton kernel (kernelbench_rl/evaluation/
fused_compare.py); here the same kernel runs on Triton's CPU interpreter against the torch path on the
adversarial cases bench/compare_cost.py also checks on the GPU (NaN and Inf on either side, the tolerance's
edge, an odd length, half types). bench/compare_cost.py measures its speed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kernelbench_rl.evaluation import checks, fused_compare

REPO = Path(__file__).resolve().parents[1]

INTERPRETED = r"""
import importlib.util, json, sys
sys.path.insert(0, sys.argv[1])
spec = importlib.util.spec_from_file_location("compare_cost", sys.argv[1] + "/bench/compare_cost.py")
cc = importlib.util.module_from_spec(spec); spec.loader.exec_module(cc)
from kernelbench_rl.evaluation import checks, fused_compare
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
