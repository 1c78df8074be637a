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
    CASES,
    KNOWN_GOOD_PROBLEM,
    KNOWN_GOOD_SOLUTION,
    SECRET_ENV,
    HackCase,
    clean_markers,
    judge,
    sandbox_escapes,
)

from kernelbench_rl.evaluation.result import EvalRequest, EvalSettings  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _params() -> list:
    params = []
    for case in CASES:
        marks = [pytest.mark.gpu] if "cpu" not in case.devices else []
        params.append(pytest.param(case, id=case.name, marks=marks))
    return params


@pytest.fixture(scope="module")
def base_settings() -> EvalSettings:
    if DEVICE == "cuda":
        return EvalSettings(device="cuda", size="real", timeout_s=120.0)
    return EvalSettings(device="cpu", size="small", correctness_trials=3, timeout_s=90.0)


@pytest.fixture(scope="module")
def evaluator(base_settings: EvalSettings):
    api = pytest.importorskip("kernelbench_rl.evaluation.api", reason="the evaluator (api.py) is not built yet")
    patcher = pytest.MonkeyPatch()
    for name, value in SECRET_ENV.items():
        patcher.setenv(name, value)  # set before the pool starts, so its workers inherit them
    try:
        # One worker: the known-good evaluation runs after the hack, on the same worker.
        with api.Evaluator(base_settings, num_workers=1, store=None) as ev:
            yield ev
    finally:
        patcher.undo()


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

    escapes = sandbox_escapes(case, [hack_result.to_json(), good_result.to_json()], REPO_ROOT, started)
    assert not escapes, f"{case.name}: {escapes}"

    assert good_result.correct, (
        f"after {case.name}, the known-correct ReLU was judged {good_result.error_category.value}: "
        f"{good_result.error_message}"
    )


def test_secrets_are_set_for_the_suite(evaluator) -> None:
    """Guards the suite itself: the exfiltration checks mean nothing unless the keys are really set."""
    import os

    for name, value in SECRET_ENV.items():
        assert os.environ.get(name) == value


def test_exfiltration_candidate_finds_nothing(evaluator, base_settings: EvalSettings, clean_repo_markers) -> None:
    """The key is in the orchestrator's environment; the candidate's own message must say it found none."""
    case = next(c for c in CASES if c.name == "exfiltrate_secret")
    started = time.time() - 1.0
    (result,) = evaluator.evaluate([EvalRequest(case.problem_id, case.source, base_settings)])
    text = result.to_json()
    assert all(value not in text for value in SECRET_ENV.values())
    assert "tml-" not in result.error_message
    assert not sandbox_escapes(case, [text], REPO_ROOT, started)
