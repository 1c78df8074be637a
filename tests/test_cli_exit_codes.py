"""Help texts, exit codes and docs/cli.md in step: one table (errors.ExitCode) that the commands exit with, that
every command's help lists, and that docs/cli.md shows."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernelbench_rl import errors
from kernelbench_rl.cli import COMMAND_EXITS, _command_infos, app, exit_code_tables, exit_codes_epilog
from kernelbench_rl.errors import ExitCode

REPO = Path(__file__).resolve().parents[1]
runner = CliRunner()
COMMANDS = sorted(name for name, _ in _command_infos(app))
# "exits 1", "exit code: 3", "exits with code 4": an exit code stated in prose, outside the generated list
STATED_CODE = re.compile(r"(?i)\bexit\w*(?:\s+(?:with|code|codes|status))*:?\s+\d+")


DOCS = REPO / "docs" / "cli.md"
BLOCK = re.compile(r"(<!-- exit codes:[^\n]*-->\n)(.*?)(\n<!-- end of exit codes -->)", re.S)


def test_docs_show_the_clis_own_table():
    block = BLOCK.search(DOCS.read_text())
    assert block, "docs/cli.md lost its exit-code markers"
    assert block.group(2) == exit_code_tables(), (
        "docs/cli.md's exit codes differ from the CLI's: `.venv/bin/python tests/test_cli_exit_codes.py --write` "
        "rewrites them")


def test_every_command_declares_its_exit_codes_from_the_table():
    assert set(COMMAND_EXITS) == set(COMMANDS)
    for name, codes in COMMAND_EXITS.items():
        assert codes and all(isinstance(code, ExitCode) for code in codes), name
        assert ExitCode.OK in codes and ExitCode.BAD_INPUT in codes, name  # every command can be given bad input


def test_every_error_class_exits_with_a_code_of_the_table():
    import kernelbench_rl.ownership  # noqa: F401 - load the error classes the commands raise
    import kernelbench_rl.problems.loaders  # noqa: F401
    import kernelbench_rl.store.db  # noqa: F401

    def subclasses(cls):
        for sub in cls.__subclasses__():
            yield sub
            yield from subclasses(sub)

    found = [cls for base in (errors.UserError, errors.InfraError) for cls in (base, *subclasses(base))]
    assert len(found) >= 6
    for cls in found:
        assert cls.exit_code in {int(code) for code in ExitCode}, cls


@pytest.mark.parametrize("command", COMMANDS)
def test_help_lists_the_commands_exit_codes_and_states_none_in_prose(command):
    short = runner.invoke(app, [*command.split(), "-h"], terminal_width=200)
    long = runner.invoke(app, [*command.split(), "--help"], terminal_width=200)
    assert short.exit_code == long.exit_code == 0, short.output
    assert short.output == long.output and "Usage" in short.output
    flat = " ".join(short.output.replace("│", " ").split())
    epilog = exit_codes_epilog(COMMAND_EXITS[command])
    assert epilog in flat
    assert not STATED_CODE.search(flat.replace(epilog, "")), f"{command}'s help states an exit code in prose"


def test_pipeline_help_has_the_style_of_every_other_command():
    help_text = runner.invoke(app, ["pipeline", "-h"], terminal_width=200).output
    assert "Usage: kernelbench-rl pipeline [OPTIONS]" in help_text and "╭─ Options" in help_text
    for option in ("--run-id", "--train-steps", "--levels", "--num-problems", "--real", "--cluster", "overrides"):
        assert option in help_text
    assert "usage: kernelbench-rl pipeline [-h]" not in help_text  # argparse's style


def test_pipeline_rebuilds_the_command_line_its_flow_reads(monkeypatch):
    from kernelbench_rl.commands import pipeline

    launched = []
    monkeypatch.setattr(pipeline, "_launch", lambda module, args: launched.append((module, args)))
    monkeypatch.setattr("kernelbench_rl.ownership.check_free", lambda *a: None)
    result = runner.invoke(app, ["pipeline", "--run-id", "r1", "--levels", "1", "--no-index", "--train-steps", "2",
                                     "eval.device=cpu"])
    assert result.exit_code == 0, result.output
    module, args = launched[0]
    parsed = pipeline.pipeline_arg_parser().parse_args(args)
    assert module == "flows.pipeline"
    assert (parsed.run_id, parsed.train_steps, parsed.no_index, parsed.real, parsed.overrides) == (
        "r1", 2, True, False, ["eval.device=cpu"])



def test_pipeline_refuses_temperature_zero_before_any_stage_and_only_when_it_trains(monkeypatch):
    """Greedy sampling trains nothing (every answer of a group alike): the pipeline refuses it at its door, before the
    SFT warm start is spent, with one sentence and the bad-input exit; with no RL steps it is only evaluation."""
    from kernelbench_rl.commands import pipeline

    launched = []
    monkeypatch.setattr(pipeline, "_launch", lambda module, args: launched.append((module, args)))
    monkeypatch.setattr("kernelbench_rl.ownership.check_free", lambda *a: None)
    refused = runner.invoke(app, ["pipeline", "--run-id", "r1", "--levels", "1", "--no-index", "--train-steps", "2",
                                  "eval.device=cpu", "sampling.temperature=0"])
    # The command raises the UserError that cli.main turns into one line and the bad-input exit
    assert isinstance(refused.exception, errors.UserError) and not launched
    assert refused.exception.exit_code == ExitCode.BAD_INPUT and "sampling.temperature=0" in str(refused.exception)
    untrained = runner.invoke(app, ["pipeline", "--run-id", "r1", "--levels", "1", "--no-index", "--train-steps", "0",
                                    "eval.device=cpu", "sampling.temperature=0"])
    assert untrained.exit_code == 0, untrained.output
    assert len(launched) == 1

def test_version():
    from importlib.metadata import version

    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"kernelbench-rl {version('kernelbench-rl')}"


def test_serve_on_a_taken_port_exits_busy_as_its_help_says():
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "kernelbench_rl.cli", "serve", "--port", str(port)], cwd=REPO,
                              env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=120)
    assert done.returncode == ExitCode.BUSY and ExitCode.BUSY in COMMAND_EXITS["serve"]
    assert done.stderr.strip().splitlines() == [
        f"error: Port {port} is in use by another program; stop it or pass --port with a free port."]


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:  # rewrite docs/cli.md's tables from the CLI's own
    DOCS.write_text(BLOCK.sub(lambda m: m.group(1) + exit_code_tables() + m.group(3), DOCS.read_text(), count=1))
