"""Shared test settings: offline, no telemetry, interpreter mode for Triton on CPU machines."""

import os

import pytest

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

_GPU_DESELECTED: list[str] = []

# The test files that take longest, longest first (seconds of each file run alone with --durations on a 2-core
# machine, docs/testing.md). `make test` hands whole files to its two workers in collection order
# (--dist loadfile --no-loadscope-reorder): the long files start first and the many short ones fill in at the end,
# instead of a long file starting last with the other worker idle. Only the order: a file missing here runs after
# these, and a stale entry costs balance, never a test.
LONGEST_FILES = (
    "test_faults_stops.py",
    "test_openai_policy.py",
    "test_dask_evaluator.py",
    "test_deployment.py",
    "test_evaluator_pool.py",
    "test_faults_prefect.py",
    "test_faults_damage.py",
    "test_flow_resume.py",
    "test_export.py",
    "test_evaluator.py",
    "test_async_training.py",
    "test_openenv_server.py",
    "test_flows.py",
    "test_solutions.py",
    "test_sft.py",
    "test_small_sizes.py",
    "test_rag_retrieval.py",
    "test_run_ownership.py",
    "test_training.py",
    "test_curriculum.py",
)


class SharedCpuPool:
    """One warm CPU evaluation pool per test process (each pytest-xdist worker has its own), started at first use
    with the default shape for device="cpu" and lent to the evaluators of tests that do not care whose pool it is
    (a pool's start costs seconds of CPU). A pool that was closed, or whose worker kept dying past its restarts, is
    replaced by a fresh one at the next borrow."""

    def __init__(self) -> None:
        self._pool = None
        self.started = 0

    @property
    def pool(self):
        from kernelbench_rl.evaluation.front.pool import WorkerPool, pool_shape

        current = self._pool
        if current is not None and not current.closed and all(s.restarts <= current.max_restarts for s in current.slots):
            return current
        if current is not None:
            current.close()
        parallel, in_flight, warm = pool_shape("cpu")
        self._pool = WorkerPool("cpu", parallel_compiles=parallel, in_flight=in_flight, warm_children=warm)
        self.started += 1
        return self._pool

    def evaluator(self, settings=None, **kwargs):
        """An Evaluator on the shared pool: the Evaluator's own arguments but none of a pool's shape (its settings'
        device must be "cpu"); closing it leaves the pool running."""
        from kernelbench_rl.evaluation.front.api import Evaluator
        from kernelbench_rl.evaluation.result import EvalSettings

        return Evaluator(settings or EvalSettings(device="cpu"), pool=self.pool, **kwargs)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None


@pytest.fixture(scope="session")
def shared_cpu_pool():
    """This test process's shared CPU pool (SharedCpuPool), closed at the end of the run."""
    lender = SharedCpuPool()
    yield lender
    lender.close()


@pytest.fixture(scope="session")
def shared_evaluator(shared_cpu_pool):
    """`shared_evaluator(settings, **evaluator_kwargs)`: an Evaluator that borrows the shared CPU pool. For tests that
    build a CPU evaluator of the default shape and neither own, stop, count nor inspect its workers."""
    return shared_cpu_pool.evaluator


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def _longest_first(items) -> None:
    """Files in LONGEST_FILES first, in its order; the rest after them as collected."""
    rank = {name: position for position, name in enumerate(LONGEST_FILES)}
    order = {id(item): (rank.get(item.path.name, len(rank)), index) for index, item in enumerate(items)}
    items.sort(key=lambda item: order[id(item)])


@pytest.hookimpl(trylast=True)  # after pytest's own reordering by fixture scope, so the files' order stands
def pytest_collection_modifyitems(config, items):
    """Tests marked `gpu` need a CUDA device: where there is none they are not run at all (deselected, named in
    the summary), instead of each showing as a skip that hides the skips which mean something."""
    _longest_first(items)
    gpu = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu or _cuda_available():
        return
    gpu_ids = {id(item) for item in gpu}
    items[:] = [item for item in items if id(item) not in gpu_ids]
    config.hook.pytest_deselected(items=gpu)
    _GPU_DESELECTED.extend(item.nodeid for item in gpu)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """pytest-xdist: each worker collected on its own; its deselected GPU tests come back with its output."""
    _GPU_DESELECTED.extend(getattr(node, "workeroutput", {}).get("gpu_deselected", []))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    names = sorted(set(_GPU_DESELECTED))
    if names:
        terminalreporter.write_line(f"{len(names)} GPU test(s) not run: no CUDA device here "
                                    "(bash bench/device_suite.sh gpu-tests runs them on a GPU machine)")


def pytest_sessionfinish(session, exitstatus):
    """A multiprocessing child a test left alive holds the interpreter at exit (multiprocessing joins its
    non-daemon children then): the run would hang after its summary. Kill such children and fail the run."""
    workeroutput = getattr(session.config, "workeroutput", None)  # set in a pytest-xdist worker
    if workeroutput is not None:
        workeroutput["gpu_deselected"] = list(_GPU_DESELECTED)
    import multiprocessing

    left = []
    for child in multiprocessing.active_children():
        child.join(timeout=2.0)  # one being reaped right now is not a leak
        if child.is_alive():
            left.append(child)
            child.kill()
            child.join(timeout=5.0)
    if left:
        names = ", ".join(f"{child.name} (pid {child.pid})" for child in left)
        print(f"\nthe tests left {len(left)} child process(es) alive, killed now: {names}")
        session.exitstatus = 1


def pytest_unconfigure(config):
    """The run is over: should the interpreter's exit hang (a thread or process nobody stopped), print where every
    thread stands and exit non-zero after two minutes, instead of holding CI until its limit with nothing said."""
    import faulthandler
    import sys

    if "mutmut" in sys.modules:  # the mutation run calls pytest again and again in one process (make mutation)
        return
    faulthandler.dump_traceback_later(120, exit=True, file=sys.__stderr__)
