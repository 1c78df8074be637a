"""`kernelbench-rl pipeline` and `kernelbench-rl serve`: launchers for the Prefect side.

The library never imports Prefect, so these run the flow modules as subprocesses; the flows
themselves live in flows/ and deployments/.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Annotated, Optional

import typer

from kernelbench_rl.problems.loaders import REPO_ROOT


def _launch(module: str, args: list[str]) -> None:
    env = dict(os.environ)
    env.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    env.setdefault("DO_NOT_TRACK", "1")
    env.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH", "")]))
    try:
        code = subprocess.call([sys.executable, "-m", module, *args], env=env)
    except KeyboardInterrupt:
        code = 130
    raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    @app.command(
        "pipeline",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    )
    def pipeline(
        ctx: typer.Context,
        run_id: Annotated[Optional[str], typer.Option(help="Run id; the same id resumes a run.")] = None,
    ) -> None:
        """Run the whole pipeline flow (ingest, index, curriculum training, checkpoint evaluation).

        With no arguments it runs the embedded defaults: CPU, offline, a tiny local policy, Triton's
        CPU interpreter, Prefect's ephemeral API and runs/kernelbench_rl.duckdb. Extra options are
        passed to the flow (see `python -m flows.pipeline --help`).
        """
        args = list(ctx.args)
        if run_id:
            args = ["--run-id", run_id, *args]
        _launch("flows.pipeline", args)

    @app.command("serve")
    def serve(
        port: Annotated[int, typer.Option(help="Port of the Prefect server and UI.")] = 4200,
        no_worker: Annotated[bool, typer.Option("--no-worker", help="Do not start a worker.")] = False,
    ) -> None:
        """Start a local Prefect server (UI on localhost), deploy prefect.yaml and start a process worker."""
        args = ["--port", str(port)] + (["--no-worker"] if no_worker else [])
        _launch("deployments.serve", args)
