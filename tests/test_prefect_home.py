"""One Prefect home: a flow the pipeline launcher starts (Prefect's ephemeral API, no server up) records its run and
artifact where `serve` looks, so the real server started on that home shows them; with a `serve` up, the launcher
sends the flow to that server instead."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from deployments.server import LocalPrefect, free_port
from kernelbench_rl.prefect_home import project_prefect_env, serve_state_file

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
FLOW = '''
import sys
from prefect import flow
from prefect.artifacts import create_markdown_artifact


@flow(name=sys.argv[1])
def tiny() -> None:
    create_markdown_artifact(key=sys.argv[1], markdown="curves")


tiny()
'''


def clean_env(tmp_path: Path, port: int) -> dict[str, str]:
    """This process's environment without any Prefect API or home: what a user's shell has for `make run`."""
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "PREFECT_HOME", "PREFECT_PROFILES_PATH")}
    return {**env, "KBRL_PREFECT_PORT": str(port), "PYTHONPATH": str(tmp_path), "HOME": str(tmp_path / "home")}


def launch_flow(tmp_path: Path, env: dict[str, str], name: str) -> None:
    """`tinyflow NAME` through the pipeline's own launcher (`_launch` execs it with the project's Prefect env)."""
    (tmp_path / "tinyflow.py").write_text(FLOW)
    done = subprocess.run(
        [sys.executable, "-c", f"from kernelbench_rl.commands.pipeline import _launch; _launch('tinyflow', [{name!r}])"],
        cwd=tmp_path, env={**env, "PYTHONPATH": f"{REPO}{os.pathsep}{tmp_path}"}, capture_output=True, text=True,
        timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def runs_and_artifacts(api_url: str) -> tuple[set[str], set[str]]:
    runs = httpx.post(f"{api_url}/flows/filter", json={}, timeout=30).json()
    artifacts = httpx.post(f"{api_url}/artifacts/filter", json={}, timeout=30).json()
    return {r["name"] for r in runs}, {a["key"] for a in artifacts}


def test_the_pipelines_home_is_the_one_serve_shows(tmp_path: Path) -> None:
    port = free_port()
    env = clean_env(tmp_path, port)
    home = tmp_path / "runs" / "prefect"
    assert project_prefect_env(env, cwd=tmp_path) == {"PREFECT_HOME": str(home)}  # no serve up: the ephemeral API
    from deployments.serve import arg_parser

    cwd = Path.cwd()
    os.chdir(tmp_path)
    try:
        assert arg_parser().parse_args(["--port", str(port)]).prefect_home == home  # serve's default home
    finally:
        os.chdir(cwd)

    launch_flow(tmp_path, env, "training-smoke")  # no server up: Prefect's ephemeral API on the project's home
    assert (home / "prefect.db").is_file()

    with LocalPrefect(prefect_home=home, port=port, log_dir=tmp_path / "logs") as served:
        served.start_server()
        flows, artifacts = runs_and_artifacts(served.api_url)
        assert "training-smoke" in flows and "training-smoke" in artifacts

        # A serve is up (its state file, its pid alive): the next flow goes to its API, not to an ephemeral one.
        state = serve_state_file(port)
        state.write_text(f'{{"pid": {os.getpid()}, "port": {port}}}')
        try:
            assert project_prefect_env(env, cwd=tmp_path)["PREFECT_API_URL"] == served.api_url
            launch_flow(tmp_path, env, "while-served")
        finally:
            state.unlink(missing_ok=True)
        flows, artifacts = runs_and_artifacts(served.api_url)
        assert "while-served" in flows and "while-served" in artifacts


def test_a_prefect_home_of_the_users_own_is_kept(tmp_path: Path) -> None:
    env = {**clean_env(tmp_path, free_port()), "PREFECT_HOME": str(tmp_path / "mine")}
    assert project_prefect_env(env, cwd=tmp_path) == {}
