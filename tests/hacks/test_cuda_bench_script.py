"""bench/gpu_cuda_backend.py offline: its candidates test what they claim to (the runtime cases pass the
static policy, the hacks do not), its judge reads results right, and its --device cpu mode runs."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "bench"))

import gpu_cuda_backend  # noqa: E402
from gpu_cuda_backend import CASES, judge, selected_cases  # noqa: E402

from kernelbench_rl.evaluation.kernels import cuda_source_strings  # noqa: E402
from kernelbench_rl.evaluation.result import ErrorCategory, EvalResult  # noqa: E402
from kernelbench_rl.evaluation.static_policy import HACK_RULES, check_static, fired_rules, is_hack  # noqa: E402
from kernelbench_rl.problems import get_problem  # noqa: E402

REFERENCE = get_problem("L1/19").source
RUNTIME_CASES = [name for name, (_src, exp) in CASES.items() if exp.static_clean]
HACK_CASES = [name for name, (_src, exp) in CASES.items() if exp.hack]


def test_the_brief_cases_exist() -> None:
    assert {"relu_correct", "relu_wrong", "relu_compile_error", "relu_illegal_access", "relu_correct_again",
            "cublas_in_cuda_source"} <= set(CASES)
    assert CASES["relu_correct_again"][0] == CASES["relu_correct"][0]  # same source: a build-cache hit
    assert CASES["relu_correct_again"][1].second_call and CASES["relu_correct_again"][1].build_cache == "hit"
    assert HACK_CASES and all(not CASES[name][1].static_clean for name in HACK_CASES)


@pytest.mark.parametrize("name", RUNTIME_CASES)
def test_runtime_cases_are_statically_clean(name: str) -> None:
    source, _expectation = CASES[name]
    report = check_static(source, "cuda", reference_source=REFERENCE)
    assert report.errors == [], report.errors
    assert "getCurrentCUDAStream()" in source  # launched on the stream the timer measures


@pytest.mark.parametrize("name", HACK_CASES)
def test_hack_cases_are_rejected_by_a_hack_rule(name: str) -> None:
    source, _expectation = CASES[name]
    report = check_static(source, "cuda", reference_source=REFERENCE)
    assert report.errors and is_hack(report)
    assert fired_rules(report) & HACK_RULES


def test_compile_error_is_only_in_the_cuda_string() -> None:
    correct, broken = CASES["relu_correct"][0], CASES["relu_compile_error"][0]
    ast.parse(broken)  # the Python module itself is fine
    broken_cuda, correct_cuda = cuda_source_strings(broken), cuda_source_strings(correct)
    assert len(broken_cuda) == len(correct_cuda) == 1
    assert "float v = x[i]\n" in broken_cuda[0] and "float v = x[i];" in correct_cuda[0]
    # Nothing else differs: only the missing semicolon (and the extension name) separates the two.
    assert broken_cuda[0].replace("float v = x[i]\n", "float v = x[i];\n") == correct_cuda[0]


def test_illegal_access_and_wrong_cases_differ_from_the_correct_one_only_in_the_kernel_body() -> None:
    correct_cuda = cuda_source_strings(CASES["relu_correct"][0])[0]
    assert "(1LL << 36)" in cuda_source_strings(CASES["relu_illegal_access"][0])[0]
    assert "0.1f" in cuda_source_strings(CASES["relu_wrong"][0])[0] and "0.1f" not in correct_cuda


def _result(category: str, correct: bool, **extra: Any) -> EvalResult:
    return EvalResult(problem_id="L1/19", candidate_sha256="x", backend="cuda", precision="fp32", device_kind="cuda",
                      error_category=ErrorCategory(category), correct=correct, **extra)


def test_judge_reads_results() -> None:
    ok = CASES["relu_correct"][1]
    assert judge(ok, _result("ok", True, speedup=1.1, versions={"build_cache": "miss"})) == []
    assert judge(ok, _result("ok", True, speedup=None, versions={"build_cache": "miss"})) == ["no speedup reported"]
    again = CASES["relu_correct_again"][1]
    assert any("build_cache" in p for p in judge(again, _result("ok", True, speedup=1.0, versions={"build_cache": "miss"})))
    illegal = CASES["relu_illegal_access"][1]
    assert judge(illegal, _result("crash", False)) == [] and judge(illegal, _result("runtime", False)) == []
    assert judge(illegal, _result("infra", False))
    hack = CASES["cublas_in_cuda_source"][1]
    assert judge(hack, _result("static", False, flags=["hack"])) == []
    assert "no hack flag" in judge(hack, _result("static", False))


def test_only_adds_what_a_case_depends_on() -> None:
    assert selected_cases(["relu_correct_again"]) == ["relu_correct", "relu_correct_again"]
    assert selected_cases(None) == list(CASES)


def test_gpu_path_with_a_stand_in_evaluator(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """run_gpu's plumbing: two evaluate calls (the cache-hit case second), one judged line per case."""
    calls: list[list[str]] = []
    answers = {"relu_correct": ("ok", True), "relu_wrong": ("mismatch", False), "relu_compile_error": ("compile", False),
               "relu_illegal_access": ("crash", False), "cublas_in_cuda_source": ("static", False),
               "kernel_never_launched": ("static", False), "relu_correct_again": ("ok", True)}

    class StandInEvaluator:
        def __init__(self, settings: Any, **kwargs: Any) -> None:
            assert settings.backend == "cuda" and settings.device == "cuda" and settings.size == "real"
            assert kwargs["store"] is None

        def __enter__(self) -> StandInEvaluator:
            return self

        def __exit__(self, *exc: Any) -> None:
            pass

        def evaluate(self, requests: list[Any]) -> list[EvalResult]:
            calls.append([r.request_id for r in requests])
            out = []
            for r in requests:
                category, correct = answers[r.request_id]
                cache = "hit" if len(calls) == 2 else "miss"
                out.append(_result(category, correct, speedup=1.0 if correct else None, hardware="Stand-in GPU",
                                   flags=["hack"] if category == "static" else [],
                                   versions={"build_cache": cache} if category in ("ok", "mismatch") else {},
                                   phase_seconds={"compile": 40.0 if cache == "miss" else 2.0, "worker_total": 50.0}))
            return out

    import kernelbench_rl.evaluation.api as api

    monkeypatch.setattr(api, "Evaluator", StandInEvaluator)
    rows, hardware = gpu_cuda_backend.run_gpu(list(CASES), 240.0)
    assert calls[1] == ["relu_correct_again"] and "relu_correct_again" not in calls[0] and len(calls) == 2
    assert hardware == "Stand-in GPU"
    assert all(row["pass"] for row in rows), [row for row in rows if not row["pass"]]
    printed = capsys.readouterr().out
    assert printed.count("PASS ") == len(CASES)
    assert "miss compile=40.0s" in printed and "hit compile=2.0s" in printed


def test_cpu_mode_runs_the_static_checks_of_every_candidate(tmp_path: Path) -> None:
    out = tmp_path / "cuda_backend.json"
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "bench" / "gpu_cuda_backend.py"), "--device", "cpu",
                           "--out", str(out)], capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    for name in CASES:
        assert sum(line.startswith("PASS ") and f" {name} " in line for line in lines) == 1, (name, proc.stdout)
    assert f"{len(CASES)}/{len(CASES)} cases pass on cpu" in proc.stdout
    assert out.exists()

