"""`kernelbench-rl`: the command line. Each area registers its commands from `commands/`."""

from __future__ import annotations

import sys

import typer

from kernelbench_rl.commands import env, evaluate, pipeline, problems, profile, rag, sft, sql, train
from kernelbench_rl.commands import eval_model
from kernelbench_rl.errors import UserError

app = typer.Typer(
    name="kernelbench-rl",
    help="Train language models with RL to write fast, correct GPU kernels (KernelBench-style).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

for module in (problems, sql, evaluate, profile, rag, sft, train, pipeline):
    module.register(app)
for module in (env, eval_model):  # interoperability
    module.register(app)


def main() -> None:
    """Entry point: user errors become one sentence and an exit code, never a traceback.

    Click runs in standalone mode, so usage errors print usage and exit 2 as usual.
    """
    try:
        app()
    except UserError as exc:
        typer.secho(f"error: {exc}", err=True, fg=typer.colors.RED)
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
