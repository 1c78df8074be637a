"""The Dask-backed evaluator on a real `distributed.LocalCluster` of two worker processes (CPU, Triton interpreter).

Same verdicts as the local evaluator on the same requests; a worker SIGKILLed mid-batch with every
verdict still arriving exactly once and none lost to `infra`; a scheduler that cannot be reached is
one sentence naming its address; a worker whose pool cannot start takes no work; the DuckDB cache
is read and filled on the driver.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

distributed = pytest.importorskip("distributed")

from hacks.hack_cases import CASES  # noqa: E402
from kernelbench_rl.errors import UserError  # noqa: E402
from kernelbench_rl.evaluation.front.api import Evaluator, EvaluatorProtocol  # noqa: E402
from kernelbench_rl.evaluation.cluster.cluster import DaskEvaluator, make_evaluator  # noqa: E402
from kernelbench_rl.evaluation.cluster.cluster_spec import parse_cluster  # noqa: E402
from kernelbench_rl.evaluation.result import ErrorCategory, EvalRequest, EvalSettings  # noqa: E402
from kernelbench_rl.problems import list_solutions  # noqa: E402

SETTINGS = EvalSettings(device="cpu", size="small", timeout_s=60.0)
SOLUTIONS = {pid: path for pid, path in list_solutions()}
# A spread of verdicts: correct kernels of levels 1 and 2, and hacks stopped statically and at run time.
SOLUTION_IDS = ["L1/19", "L1/1", "L1/23", "L2/1"]
HACK_NAMES = ["torch_op_instead_of_kernel", "inherit_model", "try_except_fallback", "decoy_kernel_never_launched",
              "stale_empty_output", "fp16_compute", "segfault"]


@pytest.fixture(scope="module")
def cluster() -> Iterator[object]:
    local = distributed.LocalCluster(n_workers=2, threads_per_worker=4, processes=True, dashboard_address=None)
    try:
        yield local
    finally:
        local.close()


@pytest.fixture(scope="module")
def dask_evaluator(cluster) -> Iterator[DaskEvaluator]:
    ev = make_evaluator(SETTINGS, cluster=f"dask://{cluster.scheduler_address.removeprefix('tcp://')}")
    assert isinstance(ev, DaskEvaluator)
    try:
        yield ev.start()
    finally:
        ev.close()


def _requests() -> list[EvalRequest]:
    cases = {c.name: c for c in CASES}
    requests = [EvalRequest(pid, SOLUTIONS[pid].read_text(), SETTINGS) for pid in SOLUTION_IDS]
    for name in HACK_NAMES:
        case = cases[name]
        settings = EvalSettings(**{**SETTINGS.__dict__, **case.settings_overrides()})
        requests.append(EvalRequest(case.problem_id, case.source, settings))
    return requests


def _verdict(result) -> tuple:
    return (result.problem_id, result.error_category.value, result.correct, result.compiled, sorted(result.flags),
            result.trials_passed, result.trials_total)


def test_cluster_values_parse_and_a_bad_one_is_one_sentence() -> None:
    assert parse_cluster("local").kind == "local" and not parse_cluster(None).is_dask
    assert parse_cluster("dask-local").kind == "dask-local"
    assert parse_cluster("dask://head:8786").address == "tcp://head:8786"
    with pytest.raises(UserError, match=r"^eval\.cluster \(--cluster\) must be local, dask-local or dask://HOST:PORT, not 'ray://x'\.$"):
        parse_cluster("ray://x")
    assert isinstance(make_evaluator(SETTINGS, cluster="local"), Evaluator)
    assert isinstance(DaskEvaluator(SETTINGS, cluster="dask://head:8786"), EvaluatorProtocol)  # nothing starts yet


def test_same_verdicts_as_the_local_evaluator(dask_evaluator: DaskEvaluator) -> None:
    requests = _requests()
    with Evaluator(SETTINGS) as local:
        expected = local.evaluate(requests)
    streamed: list[int] = []
    got = dask_evaluator.evaluate(requests, on_result=lambda index, _result: streamed.append(index))
    assert [_verdict(r) for r in got] == [_verdict(r) for r in expected]
    assert sorted(streamed) == list(range(len(requests)))
    assert sum(r.correct for r in got) == len(SOLUTION_IDS)  # the hacks earn nothing, the solutions pass
    assert not any(r.error_category == ErrorCategory.INFRA for r in got)


def test_a_worker_killed_mid_batch_loses_and_duplicates_nothing(cluster, dask_evaluator: DaskEvaluator) -> None:
    client = dask_evaluator.client
    pids = client.run(os.getpid)
    # Distinct sources, so nothing is deduplicated or cached: 8 real evaluations over 6 slots.
    base = SOLUTIONS["L1/19"].read_text()
    requests = [EvalRequest("L1/19", base + f"\n# variant {i}\n", SETTINGS) for i in range(8)]
    calls: Counter[int] = Counter()
    killed: list[str] = []

    def kill_a_busy_worker() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            busy = {w: tasks for w, tasks in client.processing().items() if tasks}
            if busy and len(calls) >= 1:  # mid-batch: some verdicts are in, others are running
                victim = next(iter(busy))
                os.kill(pids[victim], signal.SIGKILL)
                killed.append(victim)
                return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_a_busy_worker, daemon=True)
    killer.start()
    results = dask_evaluator.evaluate(requests, on_result=lambda index, _result: calls.update([index]))
    killer.join(timeout=5)
    assert killed, "no worker was busy to kill"
    assert sorted(calls) == list(range(len(requests))) and set(calls.values()) == {1}  # each verdict exactly once
    assert [r.error_category for r in results] == [ErrorCategory.OK] * len(requests), [r.error_message for r in results]
    assert all(r.correct for r in results)
    # The nanny brings the worker back, and its pool rejoins the cluster.
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        statuses = dask_evaluator.pool.statuses()
        if len(statuses) == 2 and all(s["state"] == "ready" for s in statuses.values()):
            break
        time.sleep(0.5)
    assert len(statuses) == 2 and all(s["state"] == "ready" for s in statuses.values()), statuses


def test_verdicts_are_cached_on_the_driver(cluster, tmp_path: Path) -> None:
    from kernelbench_rl.store import Store

    store = Store(tmp_path / "kb.duckdb")
    request = EvalRequest("L1/19", SOLUTIONS["L1/19"].read_text() + "\n# cached\n", SETTINGS)
    with make_evaluator(SETTINGS, cluster=cluster.scheduler_address, store=store) as ev:
        first = ev.evaluate([request])[0]
        second = ev.evaluate([request])[0]
    assert first.correct and not first.cached and second.cached
    assert store.fetchall("SELECT count(*) FROM evaluations")[0][0] == 1


def test_an_unreachable_scheduler_is_one_sentence_naming_it() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    ev = DaskEvaluator(SETTINGS, cluster=f"dask://127.0.0.1:{port}", connect_timeout_s=2)
    with pytest.raises(UserError) as caught:
        ev.evaluate([EvalRequest("L1/19", SOLUTIONS["L1/19"].read_text(), SETTINGS)])
    message = str(caught.value)
    assert f"tcp://127.0.0.1:{port}" in message and message.count(". ") == 0 and message.endswith(".")
    assert "within 2 s" in message  # the connect timeout asked for, not Dask's default
    ev.close()


def test_a_worker_whose_pool_cannot_start_takes_no_work(cluster) -> None:
    # CUDA pools on a machine without a GPU: every worker's pool fails to start and says why.
    cuda = EvalSettings(device="cuda", size="small")
    ev = DaskEvaluator(cuda, cluster=cluster.scheduler_address, static_checks=False, ready_timeout_s=150)
    try:
        with pytest.raises(UserError, match="No Dask worker could start an evaluation pool") as caught:
            ev.start()
        assert "cuda" in str(caught.value).lower() or "gpu" in str(caught.value).lower(), str(caught.value)
        workers = ev.client.scheduler_info(n_workers=-1)["workers"].values()
        assert len(workers) == 2
        # No worker advertises the CUDA pool's resource, so the scheduler sends it no evaluation.
        assert not any(w.get("resources", {}).get(ev.plugin.resource) for w in workers)
    finally:
        ev.close()


# -- the CLI and the flows on the same cluster ----------------------------------------------------------
def _cli(*args: str, cwd: Path) -> "subprocess.CompletedProcess[str]":
    import subprocess
    import sys

    env = {**os.environ, "KBRL_DB": str(cwd / "cli.duckdb"), "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    return subprocess.run([sys.executable, "-m", "kernelbench_rl.cli", *args], capture_output=True, text=True,
                          timeout=300, cwd=cwd, env=env)


def test_eval_cli_runs_on_the_cluster_and_a_bad_cluster_is_one_sentence(cluster, tmp_path: Path) -> None:
    import json

    relu = str(SOLUTIONS["L1/19"])
    address = cluster.scheduler_address.replace("tcp://", "dask://")
    ran = _cli("eval", "--problem", "L1/19", "--kernel", relu, "--cluster", address, "--json", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert json.loads(ran.stdout)["correct"] is True
    bad = _cli("train", "--cluster", "ray://head:1", "training.steps=0", cwd=tmp_path)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "eval.cluster (--cluster) must be local, dask-local or dask://HOST:PORT, not 'ray://head:1'." in bad.stderr


def _ran_a_prefect_task() -> bool:
    import sys

    return "prefect.task_engine" in sys.modules


def test_checkpoint_evaluation_flow_runs_its_tasks_on_dask(cluster, tmp_path: Path) -> None:
    from prefect_session import shared_prefect_api

    with shared_prefect_api() as api_url:
        from flows.evaluate import evaluate_checkpoint
        from kernelbench_rl.store import Store

        client = distributed.Client(cluster.scheduler_address, set_as_default=False)
        try:
            # Tasks on the workers report to the test's Prefect API (a deployment's workers get it from their env).
            client.run(os.environ.__setitem__, "PREFECT_API_URL", api_url)
            db = tmp_path / "kb.duckdb"
            overrides = ["policy.backend=local", "policy.base_model=local:tiny", "sampling.max_tokens=16",
                         "eval.device=cpu", "eval.size=small"]
            table = evaluate_checkpoint(run_id="dask-flow", checkpoint="base", compare_base=True, overrides=overrides,
                                        db_path=str(db), log_dir=str(tmp_path / "logs"), samples_per_problem=1,
                                        split="holdout", max_problems=1, levels=[1],
                                        cluster=cluster.scheduler_address.replace("tcp://", "dask://"))
            # The Prefect task ran in a Dask worker (DaskTaskRunner), not in this process.
            ran_prefect_tasks = client.run(_ran_a_prefect_task)
            assert any(ran_prefect_tasks.values()), ran_prefect_tasks
        finally:
            client.close()
    assert "| metric | base (holdout) |" in table
    reports = Store(db).fetchall("SELECT run_id, checkpoint, split, level FROM eval_reports ORDER BY level NULLS LAST")
    assert reports == [("dask-flow", "base", "holdout", 1), ("dask-flow", "base", "holdout", None)]


def test_the_cluster_setting_is_config_and_leaves_the_run_id_alone() -> None:
    from kernelbench_rl.config import load_config

    default = load_config("default", ["training.steps=3"])
    on_dask = load_config("default", ["training.steps=3", "eval.cluster=dask://head:8786"])
    assert default.eval.cluster == "local" and on_dask.eval.cluster == "dask://head:8786"
    assert on_dask.resolved_run_id() == default.resolved_run_id()  # resuming elsewhere is the same run
    with pytest.raises(UserError, match="must be local, dask-local or dask://HOST:PORT"):
        load_config("default", ["eval.cluster=head:8786"])


def test_an_evaluation_worker_whose_orchestrator_died_during_start_exits(tmp_path: Path) -> None:
    """A Dask worker killed while its pool starts leaves no evaluation worker behind (it used to linger)."""
    import subprocess
    import sys

    from kernelbench_rl.evaluation.front.pool import PACKAGE_PARENT

    from proc_tree import descendants, still_alive_after

    log = open(tmp_path / "worker.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "kernelbench_rl.evaluation.worker.worker_process", "--device", "cpu"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, cwd=PACKAGE_PARENT,
                            env={**os.environ, "PYTHONPATH": PACKAGE_PARENT}, start_new_session=True)
    proc.stdout.close()  # the orchestrator is gone before the worker says it is ready
    started: set[int] = set()  # what the worker started meanwhile (its zygote, warm children), seen while it ran
    try:
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            started |= descendants(proc.pid)
            time.sleep(0.05)
        assert proc.poll() is not None, "the worker still runs 60 s after its orchestrator went away"
        # An orderly stop (main returned after the failed ready), not a crash or a signal
        assert proc.returncode == 0, (proc.returncode, (tmp_path / "worker.log").read_text(errors="replace")[-2000:])
        assert started, "the worker started no zygote: the test no longer stops it mid-start"
        assert still_alive_after(started, 30) == [], "the worker's processes outlived it"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()
