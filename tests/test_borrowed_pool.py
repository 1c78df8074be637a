"""An Evaluator that borrows a running WorkerPool: it judges on the lender's workers, leaves the pool running when it
closes, and refuses a pool of another device or a shape of its own. The tests' shared CPU pool (conftest.py) is
replaced when it can no longer serve."""

from __future__ import annotations

import os
import signal
import time

import pytest

from kernelbench_rl.evaluation.front.api import Evaluator
from kernelbench_rl.evaluation.front.pool import WorkerPool, pool_shape
from kernelbench_rl.evaluation.result import ErrorCategory, EvalRequest, EvalSettings
from kernelbench_rl.problems import get_problem, load_solution

SETTINGS = EvalSettings(device="cpu", timeout_s=60)


def _relu_verdicts(evaluator: Evaluator) -> tuple:
    relu = load_solution(get_problem("L1/19"))
    wrong = relu.replace("tl.maximum(x, 0.0)", "tl.maximum(x, 0.5)")  # a known-wrong twin
    assert wrong != relu
    return tuple(evaluator.evaluate([EvalRequest("L1/19", relu, SETTINGS), EvalRequest("L1/19", wrong, SETTINGS)]))


@pytest.fixture()
def lent_pool():
    pool = WorkerPool("cpu")
    try:
        yield pool
    finally:
        pool.close()


def test_a_borrower_judges_on_the_lenders_workers_and_leaves_them_running(lent_pool: WorkerPool) -> None:
    lent_pool.wait_ready()
    pids = lent_pool.worker_pids
    with Evaluator(SETTINGS, pool=lent_pool) as first:
        right, wrong = _relu_verdicts(first)
        assert first.pool is lent_pool
        # the lender's shape, whatever this evaluator would have chosen on its own
        assert (first.parallel_compiles, first.in_flight, first.warm_children) == pool_shape("cpu")
    assert right.correct and right.error_category is ErrorCategory.OK, right.error_message
    assert not wrong.correct and wrong.error_category is ErrorCategory.MISMATCH, wrong.error_message
    assert not lent_pool.closed and lent_pool.worker_pids == pids
    assert all(os.path.exists(f"/proc/{pid}") for pid in pids)
    with pytest.raises(RuntimeError, match="was closed and its pool was borrowed"):
        first.evaluate([EvalRequest("L1/19", load_solution(get_problem("L1/19")), SETTINGS)])
    second = Evaluator(SETTINGS, pool=lent_pool)
    again, still_wrong = _relu_verdicts(second)
    second.close()
    assert again.correct and not still_wrong.correct, (again.error_message, still_wrong.error_message)
    assert lent_pool.worker_pids == pids and not lent_pool.closed


def test_a_pool_of_another_device_or_a_shape_of_its_own_is_refused(lent_pool: WorkerPool) -> None:
    with pytest.raises(ValueError, match="the borrowed pool runs on cpu and these settings on cuda"):
        Evaluator(EvalSettings(device="cuda"), pool=lent_pool)
    with pytest.raises(ValueError, match="parallel_compiles, worker_args cannot be given with a borrowed pool"):
        Evaluator(SETTINGS, pool=lent_pool, parallel_compiles=4, worker_args=["--prewarm", "off"])
    assert not lent_pool.closed


def test_the_shared_pool_serves_again_after_its_worker_is_killed_or_it_is_closed(shared_cpu_pool) -> None:
    lender = type(shared_cpu_pool)()  # a lender of its own: the run's shared pool is left alone
    try:
        with lender.evaluator(SETTINGS) as ev:
            right, _ = _relu_verdicts(ev)
        assert right.correct, right.error_message
        pool = lender.pool
        killed = pool.worker_pids[0]
        os.kill(killed, signal.SIGKILL)
        deadline = time.monotonic() + 120
        while (not pool.worker_pids or pool.worker_pids[0] == killed) and time.monotonic() < deadline:
            time.sleep(0.2)
        with lender.evaluator(SETTINGS) as ev:  # the pool's replacement worker
            right, wrong = _relu_verdicts(ev)
        assert right.correct and not wrong.correct, (right.error_message, wrong.error_message)
        assert lender.pool is pool and pool.worker_pids[0] != killed and lender.started == 1
        pool.close()  # a test that closes it: the next borrower gets a fresh one
        with lender.evaluator(SETTINGS) as ev:
            right, _ = _relu_verdicts(ev)
        assert right.correct, right.error_message
        assert lender.pool is not pool and lender.started == 2
    finally:
        lender.close()


def test_borrowers_with_different_audits_each_judge_on_their_own_widened_inputs(lent_pool: WorkerPool) -> None:
    """A worker settles a problem's widened inputs per the variant a request hands it: whichever borrower asks first,
    the one whose audit gives L1/26 widened inputs is judged on them (tanh-GELU passes exact GELU's own inputs)."""
    from kernelbench_rl.problems.audit import audited_set

    _, variants = audited_set([get_problem("L1/26"), get_problem("L1/88")])
    assert variants.get("L1/26")
    tanh_gelu = load_solution(get_problem("L1/88"))
    with Evaluator(SETTINGS, pool=lent_pool, static_checks=False) as plain:
        (first,) = plain.evaluate([EvalRequest("L1/26", tanh_gelu, SETTINGS)])
    with Evaluator(SETTINGS, pool=lent_pool, static_checks=False, input_variants=variants) as audited:
        (second,) = audited.evaluate([EvalRequest("L1/26", tanh_gelu, SETTINGS)])
    assert "given by the problem audit" not in first.versions["inputs"], first.versions["inputs"]
    assert "given by the problem audit" in second.versions["inputs"], second.versions["inputs"]
    assert second.error_category == ErrorCategory.MISMATCH, second.error_message
