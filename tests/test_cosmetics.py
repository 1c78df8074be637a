"""Small things a new user meets first: warnings, noise, flags, the Run form."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def test_installing_gives_no_licence_warning() -> None:
    from setuptools.config.pyprojecttoml import apply_configuration
    from setuptools.dist import Distribution

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        apply_configuration(Distribution(), str(REPO / "pyproject.toml"))
    assert not [w for w in caught if "license" in str(w.message).lower()]


def test_loading_the_embedding_model_prints_no_load_report(tmp_path: Path) -> None:
    code = "from kernelbench_rl.rag.embed import Embedder; Embedder(None).embed(['def f(): pass']); print('ok')"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=ENV, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr
    assert "LOAD REPORT" not in proc.stderr and "not sharded" not in proc.stderr


def test_a_short_flag_means_one_thing_in_every_command() -> None:
    import typer.main

    from kernelbench_rl.cli import app

    meaning: dict[str, set[str]] = {}

    def walk(command, path: str) -> None:
        for param in getattr(command, "params", []):
            shorts = [o for o in param.opts + param.secondary_opts if o.startswith("-") and not o.startswith("--")]
            longs = [o for o in param.opts if o.startswith("--")]
            for short in shorts:
                meaning.setdefault(short, set()).add(longs[0] if longs else param.name)
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, f"{path} {name}")

    walk(typer.main.get_command(app), "kernelbench-rl")
    # -k is each field's own word: the kernel file where a kernel is judged, top-k where examples are retrieved.
    assert meaning["-k"] == {"--kernel", "--top-k"}
    clashes = {short: longs for short, longs in meaning.items() if len(longs) > 1 and short not in ("-h", "-k")}
    assert not clashes, clashes


def test_every_deployment_parameter_is_described_in_the_run_form() -> None:
    from prefect.flows import load_flow_from_entrypoint

    spec = yaml.safe_load((REPO / "prefect.yaml").read_text())
    for deployment in spec["deployments"]:
        flow = load_flow_from_entrypoint(str(REPO / deployment["entrypoint"]))
        for name, prop in flow.parameters.properties.items():
            assert prop.get("description"), f"{deployment['name']}: parameter {name} has no description"


def test_an_unreachable_hub_fails_at_once(tmp_path: Path) -> None:
    """No HF_HUB_OFFLINE and no network: one quick probe, then the cached-or-nothing load, not ~24 s of retries."""
    from kernelbench_rl.hub import hub_reachable

    if hub_reachable():
        pytest.skip("the hub is reachable from this machine")
    env = {k: v for k, v in ENV.items() if k not in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env["HF_HOME"] = str(tmp_path / "hf")  # an empty cache
    proc = subprocess.run([sys.executable, "-m", "kernelbench_rl.cli", "corpus", "ingest", "--source", "kernelbook",
                           "--db", str(tmp_path / "x.duckdb")], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 2 and "Could not load GPUMODE/KernelBook" in proc.stderr
    assert "Retrying in" not in proc.stderr + proc.stdout, proc.stderr[-2000:]


def test_printed_hints_name_commands_a_shell_finds(tmp_path: Path) -> None:
    """With the environment's bin folder off PATH (make never activates it), hints give the path."""
    code = "from kernelbench_rl.commands.hints import command; print(command('kernelbench-rl')); print(command('prefect'))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**ENV, "PATH": "/usr/bin:/bin"}, cwd=tmp_path)
    names = proc.stdout.split()
    assert [Path(n).name for n in names] == ["kernelbench-rl", "prefect"]
    assert all(Path(n).is_absolute() and Path(n).exists() for n in names), names
