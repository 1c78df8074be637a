"""The resident reference child of paired timing: kept for the same problem's next candidate, retired otherwise.

Real children of the worker's pool (forkserver processes) on the CPU; the pairing itself runs only on a GPU."""

from __future__ import annotations

import tempfile
import time

import pytest

from kernelbench_rl.evaluation.worker.children import ChildPool
from kernelbench_rl.evaluation.worker.paired_reference import ResidentReference


def _dead_soon(child, timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not child.process.is_alive():
            return True
        time.sleep(0.05)
    return False


@pytest.fixture()
def pool():
    children = ChildPool("cpu", warm_children=0, busy_cores=set())
    yield children
    children.shutdown()


def _child(pool: ChildPool):
    child = pool.take()
    child.workdir = tempfile.mkdtemp(prefix="kbrl-paired-test-")
    return child


def test_kept_for_the_same_problem_and_retired_for_another(pool):
    resident = ResidentReference(pool.retire)
    first = _child(pool)
    assert resident.take(("L1/1", 1, "fp32", "small")) is None  # nothing resident yet
    resident.give_back(("L1/1", 1, "fp32", "small"), first, healthy=True)
    assert first.process.is_alive()
    assert resident.take(("L1/1", 1, "fp32", "small")) is first  # the next candidate of the problem reuses it
    resident.give_back(("L1/1", 1, "fp32", "small"), first, healthy=True)
    # Another problem pairs: the resident child goes, the caller starts its own.
    assert resident.take(("L1/2", 1, "fp32", "small")) is None
    assert _dead_soon(first)
    assert first not in pool.running


def test_a_child_that_failed_is_not_kept(pool):
    resident = ResidentReference(pool.retire)
    child = _child(pool)
    resident.give_back(("L1/1", 1, "fp32", "small"), child, healthy=False)
    assert _dead_soon(child)
    assert resident.take(("L1/1", 1, "fp32", "small")) is None


def test_a_dead_resident_child_is_replaced_and_drop_retires(pool):
    resident = ResidentReference(pool.retire)
    child = _child(pool)
    resident.give_back(("L1/1", 1, "fp32", "small"), child, healthy=True)
    child.kill()
    assert _dead_soon(child)
    assert resident.take(("L1/1", 1, "fp32", "small")) is None  # dead: not lent again
    second = _child(pool)
    resident.give_back(("L1/1", 1, "fp32", "small"), second, healthy=True)
    resident.drop()  # a big evaluation needs the room
    assert _dead_soon(second)
    assert resident.take(("L1/1", 1, "fp32", "small")) is None


def test_drop_while_lent_leaves_it_to_its_timing(pool):
    resident = ResidentReference(pool.retire)
    child = _child(pool)
    resident.give_back(("L1/1", 1, "fp32", "small"), child, healthy=True)
    assert resident.take(("L1/1", 1, "fp32", "small")) is child
    resident.drop()  # the running timing still uses it
    assert child.process.is_alive()
    resident.give_back(("L1/1", 1, "fp32", "small"), child, healthy=True)
    assert resident.take(("L1/1", 1, "fp32", "small")) is child


def test_shutdown_kills_a_child_still_lent(pool):
    # A resident child lent to a timing when the worker stops: left alive, it would hold the process at exit.
    resident = ResidentReference(pool.retire)
    child = _child(pool)
    resident.give_back(("L1/1", 1, "fp32", "small"), child, healthy=True)
    assert resident.take(("L1/1", 1, "fp32", "small")) is child
    resident.drop()  # lent: left to its timing, which never gives it back here
    pool.shutdown()
    assert not child.process.is_alive()
    assert not pool.running
