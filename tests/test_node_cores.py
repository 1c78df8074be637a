"""Several evaluation workers on one host (one per GPU): each takes its own share of the host's cores.

A worker keeps two "quiet" cores for the thread that times and the candidate's process; compiles run on the rest.
When every worker of a four-GPU host picked the same two (the last of the host's), four timed sections shared them
and identical code read 0.38x-2.23x. The split below is what each worker's `core_split` makes of its share.
"""

from __future__ import annotations

import itertools
import os

import pytest

from kernelbench_rl.evaluation import host_share
from kernelbench_rl.evaluation.cluster import dask_worker
from kernelbench_rl.evaluation.front import pool
from kernelbench_rl.evaluation.worker import scheduling

HOST_CORES = list(range(64))


def smt_topology(cpu: int) -> tuple[int, int]:
    """Two packages of 16 physical cores, two hyperthreads each: CPU c and c + 32 are siblings (Linux's usual
    numbering)."""
    core = cpu % 32
    return core // 16, core


def flat_topology(cpu: int) -> tuple[int, int]:
    return 0, cpu


def splits_through_the_environment(monkeypatch, workers: int, topology) -> list[tuple[set[int], set[int], set[int]]]:
    """Each worker's core_split as the worker makes it: its affinity is the host's cores, its share in the environment
    the pool gave it (`topology` None: the machine's own, which here knows the first cores only)."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(HOST_CORES))
    splits = []
    for position in range(workers):
        monkeypatch.setenv(host_share.HOST_SHARE_ENV, f"{position}/{workers}")
        splits.append(scheduling.core_split("cuda") if topology is None else
                      scheduling.core_split("cuda", topology=topology))
    return splits


@pytest.mark.parametrize("topology", [smt_topology, None])
def test_four_workers_on_one_host_time_on_disjoint_cores(monkeypatch, topology):
    splits = splits_through_the_environment(monkeypatch, 4, topology)
    for (mine_a, quiet_a, busy_a), (mine_b, quiet_b, busy_b) in itertools.combinations(splits, 2):
        assert not mine_a & mine_b  # no core is two workers'
        assert not quiet_a & quiet_b  # above all, not a timing core
    assert set().union(*(mine for mine, _, _ in splits)) == set(HOST_CORES)  # and none is left out
    for mine, quiet, busy in splits:
        assert len(mine) == 16
        assert len(quiet) == 2 and quiet <= mine  # its quiet cores inside its own share
        assert busy == mine - quiet  # its compiles on the rest of its share, never on another's
    if topology is smt_topology:  # a share holds whole physical cores: no worker compiles on a sibling of another's quiet core
        for (mine_a, quiet_a, _), (mine_b, _, busy_b) in itertools.permutations(splits, 2):
            assert not {smt_topology(c) for c in quiet_a} & {smt_topology(c) for c in busy_b}


def test_a_worker_alone_on_its_host_keeps_every_core_and_the_last_two_quiet(monkeypatch):
    monkeypatch.delenv(host_share.HOST_SHARE_ENV, raising=False)
    mine, quiet, busy = scheduling.core_split("cuda", cores=HOST_CORES, topology=flat_topology)
    assert mine == set(HOST_CORES) and quiet == {62, 63} and busy == set(range(62))


def test_more_workers_than_cores_each_get_one_in_turn():
    shares = [host_share.share_of(list(range(4)), position, 6, flat_topology) for position in range(6)]
    assert shares == [[0], [1], [2], [3], [0], [1]]


def test_the_pin_switch_still_leaves_everything_on_every_core(monkeypatch):
    monkeypatch.setenv("KBRL_EVAL_PIN_CORES", "0")
    monkeypatch.setenv(host_share.HOST_SHARE_ENV, "2/4")
    assert scheduling.core_split("cuda", cores=HOST_CORES) == (set(HOST_CORES), set(), set())


@pytest.mark.parametrize("text, expected", [("1/4", (1, 4)), ("", (0, 1)), ("4/4", (0, 1)), ("x/4", (0, 1)),
                                            ("3", (0, 1))])
def test_the_share_setting_is_read_strictly(text, expected):
    assert host_share.host_share(text) == expected


def test_each_worker_of_a_gpu_pool_gets_its_own_gpu_and_share(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    devices = pool._worker_devices(4)
    first, on_host = pool._host_slots(4)
    envs = [pool.slot_environment(index, devices, first, on_host) for index in range(4)]
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["0", "1", "2", "3"]
    assert [e[host_share.HOST_SHARE_ENV] for e in envs] == ["0/4", "1/4", "2/4", "3/4"]


def test_a_one_worker_pool_takes_the_share_it_is_told(monkeypatch):
    """Evaluators started by hand on one host, one GPU each, say which share is theirs."""
    monkeypatch.setenv(host_share.HOST_SHARE_ENV, "2/4")
    assert pool._host_slots(1) == (2, 4)
    assert pool._host_slots(3) == (0, 3)  # a pool of several workers is its host's
    monkeypatch.delenv(host_share.HOST_SHARE_ENV)
    assert pool._host_slots(1) == (0, 1)


def test_compile_slots_are_sized_by_each_workers_share(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(HOST_CORES))
    parallel, in_flight, warm = pool.pool_shape("cuda", 4)
    assert parallel == 8  # half of its 16 cores
    assert 4 * parallel <= len(HOST_CORES)
    assert pool.pool_shape("cuda", 1)[0] == 12  # alone: the cap


@pytest.mark.parametrize("visible, position", [("0,1,2,3", 0), ("2,3,0,1", 2), ("3,0,1,2", 3), ("1,0", 1),
                                                ("GPU-b,GPU-a", 1), ("", 0)])
def test_a_dask_worker_takes_the_share_of_its_gpus_place_on_the_host(monkeypatch, visible, position):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert dask_worker.host_position() == position
