"""On a host of several GPUs a candidate's speedup is against a baseline timed on its own card.

The evaluator hands every request the problem's last known baseline, whichever worker (card) timed it; two cards of
one model differ by their clocks and their neighbours, and a baseline timed on one read against a candidate timed on
another is not identical code's 1.00. Each verdict records both cards (`versions["gpu"]`, `versions["baseline_gpu"]`).
"""

from __future__ import annotations

import types

from kernelbench_rl.evaluation import host_share
from kernelbench_rl.evaluation.timing import decisions
from kernelbench_rl.evaluation.front.api import Evaluator
from kernelbench_rl.evaluation.timing.decisions import BASELINE_IN_CHILD, same_gpu, usable_baseline
from kernelbench_rl.evaluation.worker.candidate_timing import CandidateTiming
from kernelbench_rl.evaluation.result import EvalRequest, EvalSettings
from kernelbench_rl.evaluation.worker.scheduling import QuietGate
from kernelbench_rl.problems.loaders import get_problem
from kernelbench_rl.store.db import Store

CARD_A = "0 GPU-aaaaaaaa-0000-0000-0000-000000000000"
CARD_B = "1 GPU-bbbbbbbb-0000-0000-0000-000000000000"
H100 = "NVIDIA H100 80GB HBM3"


def timing_on(card: str, alone_on_host: bool) -> CandidateTiming:
    """The timing step of a worker whose candidates run on `card`, its baselines timed in a child."""
    timing = CandidateTiming(references=None, quiet_gate=QuietGate(), transport="ipc", hardware=H100,
                             reference_child=lambda *a: None, give_back=lambda *a: None,
                             home_for=lambda state: BASELINE_IN_CHILD)
    timing.gpu, timing.alone_on_host = card, alone_on_host
    return timing


def needs_own_baseline(timing: CandidateTiming, known: dict | None) -> bool:
    state = types.SimpleNamespace(baselines={})  # this worker has timed none of the problem's
    return timing.needs_baseline(state, EvalSettings(device="cuda"), {"baseline": known})


def test_a_baseline_timed_on_one_card_is_not_used_for_a_candidate_timed_on_another():
    known = {"eager_ms": 1.0, "eager_spread_ms": 0.01, "timed_in": BASELINE_IN_CHILD, "gpu": CARD_A}
    assert not needs_own_baseline(timing_on(CARD_A, alone_on_host=False), known)  # its own card: reused
    assert needs_own_baseline(timing_on(CARD_B, alone_on_host=False), known)  # another card: timed again there
    assert needs_own_baseline(timing_on(CARD_B, alone_on_host=True), known)  # whatever else is on the host
    assert needs_own_baseline(timing_on("", alone_on_host=True), known)  # a worker that cannot name its card


def test_the_same_card_is_known_by_its_uuid_whatever_its_index():
    renumbered = "3 " + CARD_A.split()[1]  # (another CUDA_VISIBLE_DEVICES numbering of the host)
    assert same_gpu(CARD_A, renumbered) and not same_gpu(CARD_A, CARD_B) and not same_gpu("", "")
    known = {"eager_ms": 1.0, "timed_in": BASELINE_IN_CHILD, "gpu": renumbered}
    assert not needs_own_baseline(timing_on(CARD_A, alone_on_host=False), known)


def test_a_stored_baseline_that_names_no_card_stands_only_for_a_worker_alone_on_its_host():
    stored = {"eager_ms": 1.0, "eager_spread_ms": 0.01, "timed_in": BASELINE_IN_CHILD}
    assert not needs_own_baseline(timing_on(CARD_A, alone_on_host=True), stored)
    assert needs_own_baseline(timing_on(CARD_A, alone_on_host=False), stored)
    # where it was timed still counts: a worker's own baseline never stands for a child's
    assert not usable_baseline({**stored, "timed_in": "worker"}, BASELINE_IN_CHILD, CARD_A, True)


def test_a_worker_told_it_shares_its_host_is_not_alone(monkeypatch):
    monkeypatch.setenv(host_share.HOST_SHARE_ENV, "1/4")
    assert not CandidateTiming(None, QuietGate(), "ipc", H100, lambda *a: None, lambda *a: None).alone_on_host
    monkeypatch.delenv(host_share.HOST_SHARE_ENV)
    assert CandidateTiming(None, QuietGate(), "ipc", H100, lambda *a: None, lambda *a: None).alone_on_host


def test_the_verdict_names_the_card_of_its_baseline():
    assert decisions.baseline_gpu({"eager_ms": 1.0, "gpu": CARD_B}) == CARD_B
    assert decisions.baseline_gpu({"eager_ms": 1.0}).startswith("not recorded")


def test_the_store_keeps_a_baseline_per_gpu_model_and_the_card_in_memory_only(tmp_path):
    """A worker's fresh baseline names its card; the DuckDB row has no column for it (baselines are per GPU model
    there), the evaluator's memory keeps it."""
    problem = get_problem("L1/19")
    store = Store(tmp_path / "runs.duckdb")
    evaluator = Evaluator(EvalSettings(device="cuda"), store=store)
    evaluator._hardware = H100
    request = EvalRequest(problem.id, "", evaluator.settings)
    fresh = {"eager_ms": 2.5, "eager_spread_ms": 0.02, "compile_ms": None, "timed_in": BASELINE_IN_CHILD, "gpu": CARD_A}
    store.upsert("baselines", [evaluator._remember_baseline(request, problem, H100, fresh)])  # as an answer's is
    assert evaluator._baseline_for(problem, evaluator.settings)["gpu"] == CARD_A
    evaluator.baselines.clear()  # a later evaluator: the store's row
    stored = evaluator._baseline_for(problem, evaluator.settings)
    assert stored["eager_ms"] == 2.5 and "gpu" not in stored
