"""Every `kernelbench-rl ...` line in the README's and docs/' shell blocks parses with the real CLI.

Running them all would need a GPU, a Prefect server and hours; parsing them with the very command tree
`kernelbench-rl` runs catches what drifts in docs: a command renamed, an option dropped or misspelt, a
value a choice no longer offers, a required argument left out. Config overrides (`key=value`) are checked
against the config schema too. Optional parts written `[--flag VALUE]` are parsed as if given, and
`a|b` takes its first alternative.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer

from kernelbench_rl.cli import app
from kernelbench_rl.config import load_config
from kernelbench_rl.errors import UserError

try:  # the click that typer runs on: its own copy where it carries one
    from typer._click.exceptions import UsageError
except ImportError:
    from click.exceptions import UsageError

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"```(\w*)\n(.*?)```", re.S)
SHELL = {"", "bash", "sh", "shell", "console"}
# Config overrides: `section.key=value` words of train, pipeline, sft and eval-model.
OVERRIDE = re.compile(r"^[a-z_]+(\.[a-z_]+)+=")


def documented_commands() -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        for lang, body in FENCE.findall(page.read_text()):
            if lang not in SHELL:
                continue
            for line in body.replace("\\\n", " ").splitlines():
                line = line.strip().removeprefix("$ ")
                if re.match(r"^(\.venv/bin/)?kernelbench-rl( |$)", line):
                    found.append((page.relative_to(REPO).as_posix(), line.split(" #")[0].strip()))
    return found


def words_of(line: str) -> list[str]:
    words = []
    for word in shlex.split(line)[1:]:
        if OVERRIDE.match(word):
            words.append(word)  # its brackets are a YAML list: problems.levels=[1]
            continue
        word = word.strip("[]")  # an optional part: [--level 1]
        if word:
            words.append(word.split("|")[0])
    return words


def parse(words: list[str]):
    """The context the CLI would build for these words, its subcommands followed; raises as the CLI would."""
    command, context, name = typer.main.get_command(app), None, "kernelbench-rl"
    while True:
        context = command.make_context(name, list(words), parent=context)
        if not hasattr(command, "resolve_command"):
            return context
        rest = [*getattr(context, "_protected_args", []), *context.args]
        if not rest:
            return context
        name, command, words = command.resolve_command(context, rest)


COMMANDS = documented_commands()


def test_the_docs_show_commands():
    assert len(COMMANDS) >= 30  # the scan itself works: README and docs/ hold dozens


@pytest.mark.parametrize("page, line", COMMANDS, ids=[f"{page}:{line[:60]}" for page, line in COMMANDS])
def test_documented_command_parses(page, line):
    try:
        context = parse(words_of(line))
    except typer.Exit as done:
        assert done.exit_code == 0, f"{line} exits {done.exit_code} while parsing"
        return  # --help and friends
    overrides = [w for w in context.params.get("overrides") or [] if OVERRIDE.match(w)]
    if overrides:
        load_config(context.params.get("config") or "default", overrides)  # unknown keys and bad values raise


@pytest.mark.parametrize("line, says", [("kernelbench-rl problems list --bogus", "No such option: --bogus"),
                                        ("kernelbench-rl problemz list", "No such command 'problemz'"),
                                        ("kernelbench-rl train --nonsense x", "No such option: --nonsense")])
def test_a_drifted_command_is_caught(line, says):
    """The CLI's own usage error, naming the drifted word: not any exception the parsing might raise."""
    with pytest.raises(UsageError, match=re.escape(says)):
        parse(words_of(line))


def test_a_drifted_override_is_caught():
    context = parse(words_of("kernelbench-rl train problems.levelz=[1]"))
    with pytest.raises(UserError, match=r"^Unknown config key problems\.levelz;"):
        load_config(context.params.get("config") or "default", context.params["overrides"])
