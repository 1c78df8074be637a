"""One Prefect home for the project: what `kernelbench-rl pipeline` (`make run`) records, `kernelbench-rl serve`
(`make serve`) shows.

Both resolve the same PREFECT_HOME: the environment's, else `runs/prefect` under the directory they run in (beside
`runs/kernelbench_rl.duckdb`). A pipeline started while a `serve` is up reports to that server's API; otherwise it
starts Prefect's ephemeral API on the home's database, which a later `serve` opens. This module only computes
environments and paths: the library never imports Prefect.
"""

from __future__ import annotations

import json
import os
import tempfile
import urllib.request
from collections.abc import Mapping
from pathlib import Path

DEFAULT_PORT = 4200
PORT_ENV = "KBRL_PREFECT_PORT"


def prefect_home(env: Mapping[str, str] | None = None, cwd: Path | None = None) -> Path:
    """$PREFECT_HOME if set, else runs/prefect under `cwd` (the current directory): an absolute path."""
    env = os.environ if env is None else env
    if env.get("PREFECT_HOME"):
        return Path(env["PREFECT_HOME"]).expanduser().resolve()
    return ((cwd or Path.cwd()) / "runs" / "prefect").resolve()


def serve_port(env: Mapping[str, str] | None = None) -> int:
    env = os.environ if env is None else env
    return int(env.get(PORT_ENV) or DEFAULT_PORT)


def serve_state_file(port: int) -> Path:
    """Where a `serve` on this port says who it is (one place per user and port, whatever its PREFECT_HOME)."""
    return Path(tempfile.gettempdir()) / f"kernelbench-rl-serve-{os.getuid()}-{port}.json"


def running_serve_api(port: int) -> str | None:
    """The API URL of a `kernelbench-rl serve` that is up on this port (its state file, its pid alive, its server
    answering), else None."""
    from kernelbench_rl.ownership import pid_alive

    try:
        state = json.loads(serve_state_file(port).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(state, dict) or not pid_alive(int(state.get("pid") or 0)):
        return None
    api_url = f"http://127.0.0.1:{port}/api"
    try:
        with urllib.request.urlopen(f"{api_url}/health", timeout=2) as response:
            return api_url if response.status == 200 else None
    except OSError:
        return None


def project_prefect_env(env: Mapping[str, str], cwd: Path | None = None) -> dict[str, str]:
    """The Prefect settings a flow process of the project gets (only those `env` lacks): the project's home (made
    if missing), and the API of a `serve` that is up (else Prefect starts its ephemeral API on that home)."""
    extra = {"PREFECT_HOME": str(prefect_home(env, cwd))}
    # Prefect reads profiles from its home: keep the user's (a `prefect cloud login`, a server of their own).
    profiles = Path("~/.prefect/profiles.toml").expanduser()
    if not env.get("PREFECT_HOME") and profiles.is_file():
        extra["PREFECT_PROFILES_PATH"] = str(profiles)
    if not env.get("PREFECT_API_URL"):
        api_url = running_serve_api(serve_port(env))
        if api_url:
            extra["PREFECT_API_URL"] = api_url
    extra = {key: value for key, value in extra.items() if not env.get(key)}
    if "PREFECT_HOME" in extra and "PREFECT_API_URL" not in extra:
        Path(extra["PREFECT_HOME"]).mkdir(parents=True, exist_ok=True)  # the ephemeral API's database goes there
    return extra
