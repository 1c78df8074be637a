"""`kernelbench-rl`: the command line. Each area registers its commands from `commands/`.

Exit codes come from one table, `errors.ExitCode`; `COMMAND_EXITS` says which of them each command may end with,
and every command's help ends with that list (docs/cli.md shows the same table; a test keeps them in step).
"""

from __future__ import annotations

import sys

if __name__ == "__main__" or sys.argv[0].rsplit("/", 1)[-1].startswith("kernelbench-rl"):  # the command's process
    # Before any heavy import (typer, duckdb, the commands): a Ctrl-C while the command starts is one line and
    # exit 130, never a traceback. (A process that imports this module, a test's, keeps its own handling.)
    from kernelbench_rl.commands.signals import install_startup_stop

    install_startup_stop()

from typing import Annotated, Optional  # noqa: E402

import typer  # noqa: E402

from kernelbench_rl.commands import env, evaluate, pipeline, problems, profile, rag, sft, sql, train  # noqa: E402
from kernelbench_rl.commands import eval_model, export  # noqa: E402
from kernelbench_rl.errors import ExitCode, InfraError, UserError  # noqa: E402

app = typer.Typer(
    name="kernelbench-rl",
    help="Train language models with RL to write fast, correct GPU kernels (KernelBench-style).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},  # subcommands inherit both
)

for module in (problems, sql, evaluate, profile, rag, sft, train, pipeline):
    module.register(app)
for module in (env, eval_model, export):  # interoperability
    module.register(app)

_OK, _FAILED, _BAD, _BUSY, _NO_VERDICT, _STOPPED = (ExitCode.OK, ExitCode.FAILED, ExitCode.BAD_INPUT, ExitCode.BUSY,
                                                     ExitCode.NO_VERDICT, ExitCode.STOPPED)
# The exit codes each command may end with (every command that opens the DuckDB file may find it busy: 3).
COMMAND_EXITS: dict[str, tuple[ExitCode, ...]] = {
    "problems list": (_OK, _BAD),
    "problems show": (_OK, _BAD),
    "problems audit": (_OK, _BAD, _BUSY),
    "sql": (_OK, _BAD, _BUSY),
    "eval": (_OK, _FAILED, _BAD, _BUSY, _NO_VERDICT),
    "eval-dir": (_OK, _BAD, _BUSY),
    "profile": (_OK, _FAILED, _BAD, _BUSY, _NO_VERDICT),
    "corpus ingest": (_OK, _BAD, _BUSY),
    "corpus verify": (_OK, _BAD, _BUSY),
    "index build": (_OK, _BAD, _BUSY),
    "retrieve": (_OK, _BAD, _BUSY),
    "sft": (_OK, _BAD, _BUSY, _STOPPED),
    "train": (_OK, _BAD, _BUSY, _STOPPED),
    "pipeline": (_OK, _FAILED, _BAD, _BUSY, _STOPPED),
    "serve": (_OK, _FAILED, _BAD, _BUSY),
    "env serve": (_OK, _BAD, _BUSY),
    "eval-model": (_OK, _BAD, _BUSY, _NO_VERDICT),
    "export": (_OK, _BAD, _BUSY),
}

# A command that opens the DuckDB file (the ones that may find it busy) may also find it, or the files of a run, damaged,
# unwritable or the disk full.
for _name, _codes in COMMAND_EXITS.items():
    if _BUSY in _codes and _name != "serve":  # `serve`'s busy is its port
        COMMAND_EXITS[_name] = tuple(sorted({*_codes, ExitCode.DAMAGED, ExitCode.UNWRITABLE, ExitCode.DISK_FULL}))
# A Ctrl-C at any moment of a command (its start included) ends it with 130 and one line; `serve` takes Ctrl-C as
# its way to stop the server and worker it started (0).
for _name, _codes in COMMAND_EXITS.items():
    if _name != "serve":
        COMMAND_EXITS[_name] = tuple(sorted({*_codes, _STOPPED}))


def exit_codes_epilog(codes: tuple[ExitCode, ...]) -> str:
    """The last line of a command's help: its exit codes, from the one table."""
    return "Exit codes: " + "; ".join(f"{int(code)} {code.label}" for code in codes) + " (docs/cli.md)."


def _command_infos(typer_app: typer.Typer, prefix: str = ""):
    """(full name, CommandInfo) of every command, groups included ("problems list")."""
    for info in typer_app.registered_commands:
        name = info.name or info.callback.__name__.replace("_", "-")
        yield (prefix + name, info)
    for group in typer_app.registered_groups:
        yield from _command_infos(group.typer_instance, f"{prefix}{group.name} ")


for _name, _info in _command_infos(app):
    _info.epilog = exit_codes_epilog(COMMAND_EXITS.get(_name, (_OK, _BAD, _BUSY)))


def exit_code_tables() -> str:
    """docs/cli.md's tables, from the one table: every code, then the codes of each command."""
    lines = ["| code | meaning | e.g. |", "|---|---|---|"]
    lines += [f"| {int(code)} | {code.meaning} | {code.examples} |" for code in ExitCode]
    lines += ["", "| command | exit codes |", "|---|---|"]
    names = [name for name, _ in _command_infos(app)]
    lines += [f"| `{name}` | {', '.join(str(int(c)) for c in COMMAND_EXITS.get(name, (_OK, _BAD, _BUSY)))} |"
              for name in sorted(names)]
    return "\n".join(lines)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("kernelbench-rl")
    except PackageNotFoundError:
        return "unknown (not installed)"


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"kernelbench-rl {_version()}")
        raise typer.Exit(ExitCode.OK)


@app.callback()
def _root(
    version: Annotated[Optional[bool], typer.Option("--version", callback=_print_version, is_eager=True,
                                                    help="Print the version and exit.")] = None,
) -> None:
    """Train language models with RL to write fast, correct GPU kernels (KernelBench-style)."""


def command_name(argv: list[str]) -> str:
    """The command a command line runs ("sql", "problems list"), for the records it leaves (store/endings.py)."""
    words = [word for word in argv if not word.startswith("-")][:2]
    for count in (2, 1):
        if " ".join(words[:count]) in COMMAND_EXITS:
            return " ".join(words[:count])
    return words[0] if words else ""


def main() -> None:
    """Entry point: user errors and failures of our side become one sentence and an exit code, never a traceback.

    Click runs in standalone mode, so usage errors print usage and exit with ExitCode.BAD_INPUT (2) as usual. A Ctrl-C
    at any moment is exit 130 with one line (while the command starts: install_startup_stop, above). However the
    command ends, every run it owned gets its ending in the store (status, exit code, its sentence:
    store/endings.py).
    """
    import signal

    from kernelbench_rl.commands import signals
    from kernelbench_rl.store import endings

    endings.FOUND_BY = f"`kernelbench-rl {command_name(sys.argv[1:])}`"
    signals.command_started()
    code, reason = int(ExitCode.FAILED), None
    try:
        app()
        code = int(ExitCode.OK)
    except (UserError, InfraError) as exc:
        typer.secho(f"error: {exc}", err=True, fg=typer.colors.RED)
        code, reason = int(exc.exit_code), str(exc)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else int(ExitCode.OK) if exc.code is None else int(ExitCode.FAILED)
    except BaseException:
        # After a Ctrl-C, whatever it surfaced as (KeyboardInterrupt, or a library's own words for it: DuckDB's
        # "Query interrupted") is the stop; anything else is a failure of ours, with its traceback.
        if signals.stop_requested() is None and not isinstance(sys.exc_info()[1], KeyboardInterrupt):
            raise
        code = int(ExitCode.STOPPED)
    finally:
        if code == ExitCode.STOPPED:
            signal_name = signals.signal_name(signals.stop_requested() or signal.SIGINT)
            if signals.stop_line_said() is None:
                typer.echo(f"kernelbench-rl {command_name(sys.argv[1:])}: stopped by {signal_name} before it "
                           "finished; run it again to go on.", err=True)
            reason = reason or signals.stop_line_said() or f"stopped by {signal_name}"
        endings.settle_at_exit(code, reason)
    sys.exit(code)


if __name__ == "__main__":
    main()
