"""Options and checks of command-line values shared by several commands (and the flows that take the same parameters)."""

from __future__ import annotations

import argparse
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from kernelbench_rl.errors import UserError


def check_max_problems(value: int | None, option: str = "--max-problems") -> None:
    """A limit on the problems evaluated is a count of at least 1 (None: no limit).

    0 or less is a mistake, never "all": a list sliced by it would give every problem (0) or drop some (-1)."""
    if value is not None and value < 1:
        raise UserError(f"{option} must be at least 1 (a number of problems), not {value}.")


ProblemsRootOption = Annotated[
    Optional[Path],
    typer.Option(
        "--problems-root", "--kernelbench-root",
        help="Where problems come from: a KernelBench checkout (its root or its KernelBench/ folder) or kernrl's "
        "problems folder (or the kernrl folder holding problems/); defaults to $KBRL_PROBLEMS_ROOT, then "
        "$KERNELBENCH_ROOT, else the bundled set. --kernelbench-root is its older name.",
        show_default=False,
    ),
]


def argparse_as_typer(parser: argparse.ArgumentParser, run: Callable[[list[str]], None]) -> Callable[..., None]:
    """A typer command function whose options are `parser`'s (one definition, and the help of every other command):
    calling it rebuilds the command line as `parser` reads it and passes it to `run`."""
    parameters, annotations, to_argv = [], {}, []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        name = action.dest
        if not action.option_strings:  # a positional list (nargs="*"): key=value overrides
            kind, info = Optional[list[str]], typer.Argument(None, help=action.help, show_default=False)
            to_argv.append((True, lambda value: list(value or [])))
        elif isinstance(action, argparse._StoreTrueAction):
            kind, info = bool, typer.Option(False, *action.option_strings, help=action.help)
            to_argv.append((False, lambda value, flag=action.option_strings[0]: [flag] if value else []))
        else:
            kind = Optional[action.type or str] if action.default is None else (action.type or str)
            info = typer.Option(action.default, *action.option_strings, help=action.help,
                                show_default=action.default is not None and "default" not in (action.help or ""))
            to_argv.append((False, lambda value, flag=action.option_strings[0], default=action.default:
                            [] if value == default else [flag, str(value)]))
        parameters.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=info, annotation=kind))
        annotations[name] = kind

    def command(**values: Any) -> None:
        argv: list[str] = []
        overrides: list[str] = []
        for parameter, (positional, convert) in zip(parameters, to_argv, strict=True):
            (overrides if positional else argv).extend(convert(values[parameter.name]))
        run(argv + overrides)

    command.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    command.__annotations__ = annotations
    return command
