"""A real local Prefect server: deploy from prefect.yaml, trigger through the API as the UI does,
let a real process worker run it, then check the rows in DuckDB."""

from __future__ import annotations

import asyncio

import pytest

from deployments.server import LocalPrefect, free_port
from flows.pipeline import SMOKE_OVERRIDES

pytestmark = pytest.mark.slow


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
    from kernelbench_rl.store import Store

    db = tmp_path / "kbrl.duckdb"
    home = tmp_path / "prefect"
    with LocalPrefect(prefect_home=home, port=free_port(), log_dir=home / "logs") as local:
        local.start_server()
        local.ensure_work_pool()
        local.deploy(["pipeline", "nightly-eval"])
        local.start_worker()
        state = _trigger_and_wait(
            local.api_url,
            "pipeline/pipeline",
            {"run_id": "deploy-test", "db_path": str(db), "log_dir": str(tmp_path / "logs"),
             "train_steps": 1, "num_problems": 2, "eval_samples": 1,
             # The deployment's mechanics, not the smoke run's length: no warm start, short samples.
             "overrides": [*SMOKE_OVERRIDES, "sft.enabled=false", "sampling.max_tokens=96"]},
            timeout_s=900,
        )
        worker_log = (home / "logs" / "worker.log").read_text(errors="replace")
    assert state == "COMPLETED", worker_log[-4000:]
    store = Store(db)
    assert store.fetchall("SELECT count(*) FROM problems")[0][0] > 0
    assert store.fetchall("SELECT count(*) FROM train_steps WHERE run_id = 'deploy-test'")[0][0] == 1
    assert store.fetchall("SELECT count(*) FROM rollouts WHERE run_id = 'deploy-test'")[0][0] > 0
    assert store.fetchall("SELECT count(*) FROM eval_reports WHERE run_id = 'deploy-test'")[0][0] > 0
