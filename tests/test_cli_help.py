"""Every command answers --help (a complete help is part of the interface)."""

import pytest
from typer.testing import CliRunner

from kernelbench_rl.cli import app

runner = CliRunner()

COMMANDS = [
    ["problems", "list"], ["problems", "show"], ["sql"], ["eval"], ["eval-dir"], ["corpus", "ingest"],
    ["corpus", "verify"], ["index", "build"], ["retrieve"], ["sft"], ["train"], ["serve"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_command_help(command):
    result = runner.invoke(app, [*command, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage" in result.output and "--help" in result.output


def test_pipeline_help_lists_the_flow_options_without_starting_prefect():
    result = runner.invoke(app, ["pipeline", "--help"])
    assert result.exit_code == 0, result.output
    for option in ("--run-id", "--train-steps", "--levels", "--num-problems", "--real", "overrides"):
        assert option in result.output
