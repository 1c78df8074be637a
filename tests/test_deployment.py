"""A real local Prefect server: deploy from prefect.yaml, trigger through the API as the UI does,
let a real process worker run it, then check the rows in DuckDB."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deployments.server import free_port
from kernelbench_rl.commands.pipeline import SMOKE_OVERRIDES

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]


def _trigger_and_wait(api_url: str, deployment: str, parameters: dict, timeout_s: float) -> str:
    """POST /deployments/{id}/create_flow_run (what the UI's Run button does), then poll the state.

    The client is pointed at the test server through Prefect's settings context: once Prefect is
    imported, later changes to os.environ are not seen.
    """
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    async def go() -> str:
        async with get_client() as client:
            dep = await client.read_deployment_by_name(deployment)
            run = await client.create_flow_run_from_deployment(dep.id, parameters=parameters)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout_s
            while loop.time() < deadline:
                run = await client.read_flow_run(run.id)
                if run.state is not None and run.state.is_final():
                    return run.state.type.value
                await asyncio.sleep(2)
            return "TIMEOUT"

    with temporary_settings(updates={PREFECT_API_URL: api_url}):
        return asyncio.run(go())


def test_pipeline_deployment_runs_from_a_real_server(tmp_path):
    """`make serve` as a user starts it (kernelbench-rl serve: server, deployments, worker), the pipeline
    and the shipped nightly schedule run through it, a second serve is refused, and Ctrl-C stops it all."""
    from kernelbench_rl.store import Store
    from test_serve import answers, processes_with_home, start_serve, stop_and_check, wait_for_line

    db = tmp_path / "kbrl.duckdb"
    home, port = tmp_path / "prefect", free_port()
    api_url = f"http://127.0.0.1:{port}/api"
    serve = start_serve(home, port)
    try:
        started = wait_for_line(serve, "Prefect UI")
        assert answers(port)
        # Server and worker: serve starts the worker before it prints the UI line, and on a loaded machine the
        # worker's exec (where its environment, PREFECT_HOME included, becomes its own) can come a moment later.
        deadline = time.monotonic() + 30
        while len(processes_with_home(home)) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(processes_with_home(home)) >= 2, processes_with_home(home)
        # `prefect deploy`'s own "start a worker" hints are not repeated (serve starts the worker).
        assert "worker start" not in started
        assert "deployed: ingest-corpus/ingest-corpus, nightly-eval/nightly-eval, pipeline/pipeline" in started
        # A second serve on the same port says what runs there, starts nothing and fails.
        second = subprocess.run(
            [sys.executable, "-m", "kernelbench_rl.cli", "serve", "--port", str(port), "--prefect-home",
             str(tmp_path / "other")], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
            capture_output=True, text=True, timeout=120)
        assert second.returncode == 3, second.stderr + second.stdout  # busy (README's exit codes)
        assert f"A Prefect server already answers on http://127.0.0.1:{port}" in second.stderr
        assert "started by kernelbench-rl serve" in second.stderr and "worker pid" in second.stderr
        assert not processes_with_home(tmp_path / "other")

        state = _trigger_and_wait(
            api_url,
            "pipeline/pipeline",
            {"run_id": "deploy-test", "db_path": str(db), "log_dir": str(tmp_path / "logs"),
             "train_steps": 1, "num_problems": 2, "eval_samples": 1,
             # The deployment's mechanics, not the smoke run's length: no warm start, short samples.
             "overrides": [*SMOKE_OVERRIDES, "sft.enabled=false", "sampling.max_tokens=96"]},
            timeout_s=900,
        )
        # The shipped nightly schedule, as it fires: its deployment's own parameters (no run named) plus
        # this test's database; it must find the run the pipeline trained.
        nightly = "NOT RUN"
        if state == "COMPLETED":
            nightly = _trigger_and_wait(api_url, "nightly-eval/nightly-eval",
                                        {"db_path": str(db), "samples_per_problem": 1, "max_problems": 1}, timeout_s=600)
        worker_log = (home / "logs" / "worker.log").read_text(errors="replace")
    finally:
        # Ctrl-C: the terminal signals the whole foreground process group; everything serve started stops.
        out = stop_and_check(serve, home, port, "Ctrl-C")
    assert "stopped." in out
    assert state == "COMPLETED", worker_log[-4000:]
    assert nightly == "COMPLETED", worker_log[-4000:]
    store = Store(db)
    assert store.fetchall("SELECT count(*) FROM problems")[0][0] > 0
    assert store.fetchall("SELECT count(*) FROM train_steps WHERE run_id = 'deploy-test'")[0][0] == 1
    assert store.fetchall("SELECT count(*) FROM rollouts WHERE run_id = 'deploy-test'")[0][0] > 0
    assert store.fetchall("SELECT count(*) FROM eval_reports WHERE run_id = 'deploy-test'")[0][0] > 0
    # The pipeline's evaluation and the nightly one: two evaluations of the final checkpoint, both kept.
    assert store.fetchall("SELECT count(DISTINCT eval_id) FROM eval_reports WHERE run_id = 'deploy-test' "
                          "AND checkpoint <> 'base'")[0][0] == 2
