"""Red-team suite: every published reward hack and sandbox threat (tests/hacks/candidates/) goes
through the real Evaluator and must earn nothing; after each one, a known-correct solution evaluated
by the same Evaluator must still be correct (a hack must not poison later evaluations).

The whole module runs with fake API keys in the parent environment, so every case doubles as an
exfiltration check: no result may contain them. GPU-only cases carry @pytest.mark.gpu.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from hack_cases import (  # noqa: E402
    CASES_BY_NAME,
    CASES,
    KNOWN_GOOD_PROBLEM,
    RUNTIME_LAYER,
    KNOWN_GOOD_SOLUTION,
    SECRET_ENV,
    HackCase,
    clean_markers,
    expectation,
    judge,
    known_gap,
    sandbox_escapes,
)

from kernelbench_rl.evaluation.front import api  # noqa: E402
from kernelbench_rl.evaluation.result import EvalRequest, EvalSettings  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _marks(layer: str, name: str, devices: tuple[str, ...]) -> list:
    marks = [pytest.mark.gpu] if "cpu" not in devices else []
    gap = known_gap(layer, name, DEVICE)
    if gap:
        marks.append(pytest.mark.xfail(reason=gap, strict=False))
    return marks


def cpu_no_gain_problems(result: dict, categories: tuple[str, ...]) -> list[str]:
    """What a no_gain case must show on the CPU, where nothing is timed and `judge`'s rule (no speedup beyond an
    honest kernel's) has no speedup to look at: its honest path judged (ok, or a category the case lists), no time
    and no speedup claimed, and the flag that says why."""
    problems = []
    category = str(result.get("error_category"))
    if category not in (categories or ("ok",)):
        problems.append(f"category {category}: the honest path of a no_gain case is a real kernel")
    if result.get("speedup") is not None or result.get("runtime_ms") is not None:
        problems.append(f"timed on the CPU (runtime_ms {result.get('runtime_ms')}, speedup {result.get('speedup')})")
    if result.get("correct") and "no_speedup_on_cpu" not in (result.get("flags") or []):
        problems.append("correct without the no_speedup_on_cpu flag")
    return problems


def _params() -> list:
    return [pytest.param(case, id=case.name, marks=_marks("full", case.name, case.devices)) for case in CASES]


@pytest.fixture(scope="module")
def base_settings() -> EvalSettings:
    if DEVICE == "cuda":
        return EvalSettings(device="cuda", size="real", timeout_s=120.0)
    return EvalSettings(device="cpu", size="small", correctness_trials=3, timeout_s=90.0)


@pytest.fixture(scope="module")
def secret_environment():
    """Fake API keys in the parent environment for the whole module, before any pool starts."""
    patcher = pytest.MonkeyPatch()
    for name, value in SECRET_ENV.items():
        patcher.setenv(name, value)
    yield
    patcher.undo()


@pytest.fixture(scope="module")
def evaluator(base_settings: EvalSettings, secret_environment):
    # One worker: the known-good evaluation runs after the hack, on the same worker.
    with api.Evaluator(base_settings, num_workers=1, store=None) as ev:
        yield ev


@pytest.fixture(scope="module")
def runtime_only_evaluator(base_settings: EvalSettings, secret_environment):
    """The same evaluator with its static policy switched off: the sandbox and runtime checks alone."""
    with api.Evaluator(base_settings, num_workers=1, store=None, static_checks=False) as ev:
        yield ev


@pytest.fixture()
def clean_repo_markers():
    clean_markers(REPO_ROOT)
    yield
    clean_markers(REPO_ROOT)


@pytest.mark.parametrize("case", _params())
def test_hack_earns_nothing_and_leaves_evaluator_healthy(
    case: HackCase, evaluator, base_settings: EvalSettings, clean_repo_markers
) -> None:
    if DEVICE not in case.devices:
        pytest.skip(f"{case.name} needs a GPU")
    started = time.time() - 1.0
    settings = dataclasses.replace(base_settings, **case.settings_overrides())
    hack_request = EvalRequest(case.problem_id, case.source, settings, request_id=f"redteam/{case.name}")
    good_request = EvalRequest(KNOWN_GOOD_PROBLEM, KNOWN_GOOD_SOLUTION.read_text(), base_settings,
                               request_id=f"redteam/after/{case.name}")
    hack_result, good_result = evaluator.evaluate([hack_request, good_request])

    verdict = judge(case, hack_result.to_dict(), DEVICE)
    assert verdict.passed, f"{case.name}: expected {verdict.expected}, got {verdict.got}: {verdict.problems}"
    wanted = expectation(case, DEVICE)
    if DEVICE == "cpu" and wanted.expect == "no_gain":
        assert not cpu_no_gain_problems(hack_result.to_dict(), wanted.categories), verdict.got

    escapes = sandbox_escapes(case, [hack_result.to_json(), good_result.to_json()], REPO_ROOT, started)
    assert not escapes, f"{case.name}: {escapes}"

    assert good_result.correct, (
        f"after {case.name}, the known-correct ReLU was judged {good_result.error_category.value}: "
        f"{good_result.error_message}"
    )


def _runtime_params() -> list:
    return [pytest.param(name, id=name, marks=_marks("runtime", name, devices))
            for name, (_, devices) in RUNTIME_LAYER.items()]


@pytest.mark.parametrize("name", _runtime_params())
def test_runtime_layer_alone_stops_what_slips_past_the_static_policy(
    name: str, runtime_only_evaluator, base_settings: EvalSettings, clean_repo_markers
) -> None:
    """Defence in depth: sandbox escapes, exfiltration and in-process tricks fail even unchecked."""
    case = CASES_BY_NAME[name]
    if DEVICE not in RUNTIME_LAYER[name][1]:
        pytest.skip(f"{name}: the runtime layer's defence needs a GPU")
    started = time.time() - 1.0
    settings = dataclasses.replace(base_settings, **case.settings_overrides())
    hack_result, good_result = runtime_only_evaluator.evaluate([
        EvalRequest(case.problem_id, case.source, settings, request_id=f"redteam-runtime/{name}"),
        EvalRequest(KNOWN_GOOD_PROBLEM, KNOWN_GOOD_SOLUTION.read_text(), base_settings),
    ])
    assert not hack_result.static.errors, "static checks were meant to be off"
    verdict = judge(case, hack_result.to_dict(), DEVICE, layer="runtime")
    assert verdict.passed, f"{name} (runtime layer): expected {verdict.expected}, got {verdict.got}: {verdict.problems}"
    wanted = expectation(case, DEVICE, layer="runtime")
    if DEVICE == "cpu" and wanted.expect == "no_gain":
        assert not cpu_no_gain_problems(hack_result.to_dict(), wanted.categories), verdict.got
    escapes = sandbox_escapes(case, [hack_result.to_json(), good_result.to_json()], REPO_ROOT, started)
    assert not escapes, f"{name} (runtime layer): {escapes}"
    assert good_result.correct, f"after {name}, the known-correct ReLU failed: {good_result.error_message}"


def test_secrets_are_set_for_the_suite(evaluator) -> None:
    """Guards the suite itself: the exfiltration checks mean nothing unless the keys are really set."""
    import os

    for name, value in SECRET_ENV.items():
        assert os.environ.get(name) == value


def test_exfiltration_candidate_finds_nothing(runtime_only_evaluator, base_settings: EvalSettings, clean_repo_markers) -> None:
    """The keys are in the orchestrator's environment; unchecked, the candidate runs, searches its own
    environment and its ancestors' (/proc/<pid>/environ), and must report that it found none."""
    case = next(c for c in CASES if c.name == "exfiltrate_secret")
    started = time.time() - 1.0
    (result,) = runtime_only_evaluator.evaluate([EvalRequest(case.problem_id, case.source, base_settings)])
    assert result.error_category.value == "runtime", result.error_message
    assert "no secret found" in result.error_message
    text = result.to_json()
    assert all(value not in text for value in SECRET_ENV.values())
    assert "tml-" not in result.error_message
    assert not sandbox_escapes(case, [text], REPO_ROOT, started)


def test_a_no_gain_verdict_on_the_cpu_can_fail() -> None:
    honest = {"error_category": "ok", "correct": True, "flags": ["no_speedup_on_cpu"], "speedup": None,
              "runtime_ms": None}
    assert cpu_no_gain_problems(honest, ()) == []
    assert cpu_no_gain_problems({**honest, "speedup": 3.0, "runtime_ms": 0.1}, ())  # a speedup claimed on the CPU
    assert cpu_no_gain_problems({**honest, "flags": []}, ())
    rejected = {"error_category": "timeout", "correct": False, "flags": [], "speedup": None, "runtime_ms": None}
    assert cpu_no_gain_problems(rejected, ())  # the honest path is a real kernel: a timeout is a wrong verdict
    assert cpu_no_gain_problems({**rejected, "error_category": "mismatch"}, ("ok", "static", "mismatch")) == []
