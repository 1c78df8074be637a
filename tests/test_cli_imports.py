"""A command that ends before its work (a bad flag or config key, nothing to do, a listing) imports only what it
needs: never torch, the Tinker SDK, transformers or torch's compiler stack, which take seconds to import, and never
Prefect (kernelbench_rl does not import it at all).

Each case runs the real CLI's `main()` in a fresh interpreter, as `kernelbench-rl ARGS` would, and reports its exit
code, its stderr and the modules the process ended with."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernelbench_rl.errors import ExitCode

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "torch._dynamo", "tinker", "tinker_cookbook", "transformers", "peft", "triton", "prefect")
WATCHED = (*HEAVY, "typer")  # typer: every command imports it, so the report is seen to list what was imported

RUN = """
import json, sys
from kernelbench_rl import cli

args, watched = json.loads(sys.argv[1]), json.loads(sys.argv[2])
sys.argv = ["kernelbench-rl", *args]
code = 0
try:
    cli.main()
except SystemExit as stop:
    code = stop.code if isinstance(stop.code, int) else 1
sys.stdout.flush()
print("\\nmodules:" + json.dumps(sorted(name for name in watched if name in sys.modules)))
sys.exit(code)
"""


def run_cli(args: list[str], cwd: Path) -> tuple[int, str, list[str]]:
    """(exit code, stderr, the WATCHED modules the process ended with) of `kernelbench-rl ARGS`."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "KBRL_DB": str(cwd / "kb.duckdb")}
    env.pop("TINKER_API_KEY", None)
    done = subprocess.run([sys.executable, "-c", RUN, json.dumps(args), json.dumps(WATCHED)], capture_output=True,
                          text=True, timeout=120, cwd=cwd, env=env)
    last = done.stdout.rstrip().splitlines()[-1]
    assert last.startswith("modules:"), done.stdout + done.stderr
    return done.returncode, done.stderr, json.loads(last.removeprefix("modules:"))


OFFLINE = ["--policy", "openai:m", "--base-url", "http://127.0.0.1:9/v1"]

CASES = [
    # (args, exit code, words of its one sentence on stderr)
    (["train", "training.stepz=3"], ExitCode.BAD_INPUT, "Unknown config key training.stepz"),
    (["train", "--config", "kevin", "sampling.group_size=0"], ExitCode.BAD_INPUT, "sampling.group_size"),
    (["sft", "training.stepz=3"], ExitCode.BAD_INPUT, "Unknown config key training.stepz"),
    (["sft", "sft.enabled=false"], ExitCode.OK, None),
    (["eval-model", *OFFLINE, "--max-problems", "0"], ExitCode.BAD_INPUT, "--max-problems must be at least 1"),
    (["eval-model", *OFFLINE, "training.stepz=3"], ExitCode.BAD_INPUT, "Unknown config key training.stepz"),
    (["eval-model", *OFFLINE, "--problems-root", "nowhere", "eval.device=cpu"], ExitCode.BAD_INPUT, "does not exist"),
    (["pipeline", "--eval-samples", "0"], ExitCode.BAD_INPUT, "--eval-samples must be at least 1"),
    (["eval", "--problem", "L1/19", "--kernel", "nope.py"], ExitCode.BAD_INPUT, None),
    (["sql", "--db", "missing.duckdb", "SELECT 1"], ExitCode.BAD_INPUT, "There is no database"),
    (["problems", "list"], ExitCode.OK, None),
]


@pytest.mark.parametrize("args, code, words", CASES, ids=[" ".join(args)[:50] for args, _, _ in CASES])
def test_a_command_that_ends_early_imports_nothing_heavy(tmp_path: Path, args: list[str], code: ExitCode,
                                                         words: str | None) -> None:
    exit_code, stderr, modules = run_cli(args, tmp_path)
    assert exit_code == code, stderr
    if words is not None:
        assert words in stderr and "Traceback" not in stderr, stderr
    assert "typer" in modules
    heavy = [name for name in modules if name in HEAVY]
    assert heavy == [], f"`kernelbench-rl {' '.join(args)}` imported {heavy}"
