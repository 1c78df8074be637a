"""`kernelbench-rl pipeline` and `kernelbench-rl serve`: launchers for the Prefect side.

The library never imports Prefect, so these run the flow modules as subprocesses; the flows
themselves live in flows/ and deployments/.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from typing import Annotated

import typer

from kernelbench_rl.problems.loaders import REPO_ROOT


def pipeline_arg_parser(description: str | None = None) -> argparse.ArgumentParser:
    """The pipeline's command-line options: one definition for `python -m flows.pipeline` and the CLI's help."""
    parser = argparse.ArgumentParser(prog="kernelbench-rl pipeline", description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-id", default="smoke", help="Run id; the same id resumes the run.")
    parser.add_argument("--config", default="default", help="Packaged config (default, raicl, kevin) or a YAML path.")
    parser.add_argument("--db-path", default=os.environ.get("KBRL_DB", "runs/kernelbench_rl.duckdb"),
                        help="DuckDB file (default: $KBRL_DB, else runs/kernelbench_rl.duckdb).")
    parser.add_argument("--log-dir", default="runs/logs", help="TensorBoard logs and checkpoints go under here.")
    parser.add_argument("--train-steps", type=int, default=6, help="Training steps of the curriculum stage.")
    parser.add_argument("--levels", default="1", help="Comma-separated levels.")
    parser.add_argument("--num-problems", type=int, default=0,
                        help="The first N training problems of the levels (0: the config's problems.ids, else all of the train split).")
    parser.add_argument("--eval-samples", type=int, default=2, help="Samples per held-out problem.")
    parser.add_argument("--eval-max-problems", type=int, default=4, help="Held-out problems evaluated.")
    parser.add_argument("--no-index", action="store_true",
                        help="Skip the retrieval index (and so retrieval: prompts get the default one-shot example).")
    parser.add_argument("--real", action="store_true",
                        help="Drop the smoke overrides (tiny local policy, CPU evaluator): use the config as written.")
    parser.add_argument("overrides", nargs="*", help="key=value overrides of the config, e.g. eval.device=cuda")
    return parser


PIPELINE_DESCRIPTION = (
    "Run the pipeline flow: ingest -> index -> SFT warm start -> curriculum training -> checkpoint evaluation. With no arguments "
    "it runs the embedded defaults (CPU, offline, the tiny local policy, Triton's CPU interpreter, Prefect's "
    "ephemeral API, runs/kernelbench_rl.duckdb); the same --run-id resumes a run."
)


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
        help=PIPELINE_DESCRIPTION,
        add_help_option=False,
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    )
    def pipeline(ctx: typer.Context) -> None:
        args = list(ctx.args)
        if "--help" in args or "-h" in args:
            typer.echo(pipeline_arg_parser(description=PIPELINE_DESCRIPTION).format_help())
            raise typer.Exit(0)
        _launch("flows.pipeline", args)

    @app.command("serve")
    def serve(
        port: Annotated[int, typer.Option(help="Port of the Prefect server and UI.")] = 4200,
        no_worker: Annotated[bool, typer.Option("--no-worker", help="Do not start a worker.")] = False,
    ) -> None:
        """Start a local Prefect server (UI on localhost), deploy prefect.yaml and start a process worker."""
        args = ["--port", str(port)] + (["--no-worker"] if no_worker else [])
        _launch("deployments.serve", args)
