"""`kernelbench-rl`: the command line. Each area registers its commands from `commands/`."""

from __future__ import annotations

import sys

import typer

from kernelbench_rl.commands import evaluate, pipeline, problems, rag, sql, train
from kernelbench_rl.errors import UserError

app = typer.Typer(
    name="kernelbench-rl",
    help="Train language models with RL to write fast, correct GPU kernels (KernelBench-style).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

for module in (problems, sql, evaluate, rag, train, pipeline):
    module.register(app)


def main() -> None:
    """Entry point: user errors become one sentence and an exit code, never a traceback."""
    try:
        app(standalone_mode=False)
    except UserError as exc:
        typer.secho(f"error: {exc}", err=True, fg=typer.colors.RED)
        sys.exit(exc.exit_code)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        typer.secho("aborted", err=True)
        sys.exit(130)
    except Exception as exc:  # click usage errors arrive here in non-standalone mode
        import click

        if isinstance(exc, click.exceptions.ClickException):
            exc.show()
            sys.exit(exc.exit_code)
        raise


if __name__ == "__main__":
    main()
