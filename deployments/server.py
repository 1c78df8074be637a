"""Start and stop a local Prefect server, its process work pool, deployments and a worker.

Used by `make serve` (deployments/serve.py) and by the deployment test, so both exercise the
same path a user takes: a real `prefect server start`, `prefect deploy --all` from prefect.yaml,
and a real `prefect worker start` that runs flows in subprocesses.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
WORK_POOL = "kbrl-local"


def prefect_env(api_url: str, prefect_home: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for every Prefect process we start: offline, no telemetry, this server."""
    env = dict(os.environ)
    env.update(
        {
            "PREFECT_API_URL": api_url,
            "PREFECT_HOME": str(prefect_home),
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "DO_NOT_TRACK": "1",
            "PREFECT_UI_API_URL": api_url,
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "KBRL_REPO_ROOT": str(REPO_ROOT),
        }
    )
    env.update(extra or {})
    return env


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex((host, port)) == 0


def server_answers(port: int, host: str = "127.0.0.1") -> bool:
    """A Prefect API answers its health check on this port."""
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/api/health", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _prefect_cli() -> list[str]:
    exe = Path(sys.executable).with_name("prefect")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "prefect"]


@dataclass
class LocalPrefect:
    """A real Prefect server (and optionally a worker) on localhost, owned by this object."""

    prefect_home: Path
    port: int = 4200
    host: str = "127.0.0.1"
    extra_env: dict[str, str] = field(default_factory=dict)
    log_dir: Path | None = None
    _server: subprocess.Popen | None = None
    _worker: subprocess.Popen | None = None

    @property
    def api_url(self) -> str:
        return f"http://{self.host}:{self.port}/api"

    @property
    def ui_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        return prefect_env(self.api_url, self.prefect_home, self.extra_env)

    def _log(self, name: str):
        if self.log_dir is None:
            return subprocess.DEVNULL
        self.log_dir.mkdir(parents=True, exist_ok=True)
        return open(self.log_dir / f"{name}.log", "ab")

    @property
    def server_pid(self) -> int | None:
        return self._server.pid if self._server is not None else None

    @property
    def worker_pid(self) -> int | None:
        return self._worker.pid if self._worker is not None else None

    def server_running(self) -> bool:
        return self._server is not None and self._server.poll() is None

    def start_server(self, timeout_s: float = 180.0) -> None:
        if port_in_use(self.port, self.host):
            # Otherwise the health check below would answer for whatever holds the port.
            raise RuntimeError(f"port {self.port} is already in use; pass another port")
        self.prefect_home.mkdir(parents=True, exist_ok=True)
        self._server = subprocess.Popen(
            [*_prefect_cli(), "server", "start", "--host", self.host, "--port", str(self.port)],
            env=self.env, stdout=self._log("server"), stderr=subprocess.STDOUT, start_new_session=True,
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._server.poll() is not None:
                raise RuntimeError(f"prefect server exited with code {self._server.returncode} before it was healthy")
            try:
                with urllib.request.urlopen(f"{self.api_url}/health", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"prefect server did not become healthy within {timeout_s:.0f} s")

    def run_cli(self, *args: str, timeout_s: float = 300.0, check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            [*_prefect_cli(), "--no-prompt", *args], env=self.env, cwd=REPO_ROOT,
            capture_output=True, text=True, timeout=timeout_s,
        )
        if check and proc.returncode != 0:
            raise RuntimeError(f"`prefect {' '.join(args)}` failed ({proc.returncode}): {proc.stdout[-2000:]}{proc.stderr[-2000:]}")
        return proc

    def ensure_work_pool(self) -> None:
        proc = self.run_cli("work-pool", "inspect", WORK_POOL, check=False)
        if proc.returncode != 0:
            self.run_cli("work-pool", "create", WORK_POOL, "--type", "process")

    def deploy(self, names: list[str] | None = None) -> str:
        """`prefect deploy` from prefect.yaml: every deployment, or only those named."""
        if not names:
            return self.run_cli("deploy", "--all").stdout
        args: list[str] = []
        for name in names:
            args += ["--name", name]
        return self.run_cli("deploy", *args).stdout

    def start_worker(self) -> None:
        self._worker = subprocess.Popen(
            [*_prefect_cli(), "worker", "start", "--pool", WORK_POOL, "--type", "process"],
            env=self.env, cwd=REPO_ROOT, stdout=self._log("worker"), stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def stop(self, grace_s: float = 20.0) -> None:
        """Stop the worker and the server (their whole process groups), together, escalating to SIGKILL."""
        # The worker stops on SIGINT, not promptly on SIGTERM (REFERENCE.md).
        started = [(proc, sig) for proc, sig in ((self._worker, signal.SIGINT), (self._server, signal.SIGTERM))
                   if proc is not None]
        for proc, sig in started:
            if proc.poll() is None:
                _signal_group(proc.pid, sig)
        deadline = time.monotonic() + grace_s
        for proc, _ in started:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for proc, _ in started:
            # Children of the group (uvicorn, flow runs) may outlive their leader: the whole group goes.
            _signal_group(proc.pid, signal.SIGKILL)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass

    def __enter__(self) -> LocalPrefect:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
