"""Crashed runs in Prefect's records: a pipeline that died without a word (SIGKILL, the OOM killer, a lost machine)
leaves its flow runs `Running` on the Prefect server; once the store has found the crash
(kernelbench_rl/store/endings.py), they are set to Crashed, with a message saying how it was found, through Prefect's
REST API.

The library never imports Prefect: this module speaks the API's HTTP routes (`/flow_runs/{id}`, `/flow_runs/filter`,
`/task_runs/filter`, `.../set_state`) with urllib, as `prefect_home.running_serve_api` does for its health check,
and sends `PREFECT_API_KEY` (Bearer) or `PREFECT_API_AUTH_STRING` (Basic) where the environment has them.

The API a flow run reported to may be gone when its crash is found (Prefect's temporary API dies with the pipeline).
Then the mark waits in the flow run's Prefect home (`kbrl-crashed-flow-runs.jsonl` beside `prefect.db`) until an API
of that home is up: a `kernelbench-rl serve` on this machine (seen by any command that opens the store), or the next
`pipeline` (which applies the waiting marks as its flow starts).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: appends without a lock
    fcntl = None  # type: ignore[assignment]

PENDING_NAME = "kbrl-crashed-flow-runs.jsonl"
FINAL_STATES = frozenset({"COMPLETED", "FAILED", "CANCELLED", "CRASHED"})
# Task runs a dead process leaves unfinished (a crash cannot leave them Scheduled or Paused for long, but a dead
# owner can no more end those than Running ones).
UNFINISHED_TASK_STATES = ["RUNNING", "PENDING", "SCHEDULED", "PAUSED", "CANCELLING"]
TIMEOUT_S = 5.0


class ApiUnreachable(OSError):
    """The API did not answer (refused, timed out, a 5xx)."""


def _headers() -> dict[str, str]:
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    auth, key = os.environ.get("PREFECT_API_AUTH_STRING"), os.environ.get("PREFECT_API_KEY")
    if auth:
        headers["Authorization"] = "Basic " + base64.b64encode(auth.encode()).decode()
    elif key:
        headers["Authorization"] = f"Bearer {key}"
    return headers


def _call(api_url: str, method: str, route: str, body: Any = None) -> tuple[int, Any]:
    """(HTTP status, decoded JSON) of one call; ApiUnreachable where the API does not answer or fails (5xx)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(api_url.rstrip("/") + route, data=data, method=method, headers=_headers())
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            text = response.read()
            return response.status, (json.loads(text) if text else None)
    except urllib.error.HTTPError as exc:
        if exc.code >= 500:
            raise ApiUnreachable(f"{api_url} answered {exc.code}") from None
        return exc.code, None
    except (OSError, ValueError) as exc:
        raise ApiUnreachable(f"{api_url} did not answer ({exc})") from None


def answers(api_url: str | None) -> bool:
    """Whether a Prefect API answers at this URL now (its /health)."""
    if not api_url:
        return False
    try:
        status, _ = _call(api_url, "GET", "/health")
    except ApiUnreachable:
        return False
    return status == 200


def _state(kind: str, message: str) -> dict[str, Any]:
    return {"state": {"type": kind, "name": kind.capitalize(), "message": message}, "force": True}


def crash_flow_run(api_url: str, flow_run_id: str, message: str) -> bool:
    """Set the flow run, its subflow runs (at any depth) and their unfinished task runs to Crashed with `message`,
    where they are not finished already. False where this API does not know the flow run (another Prefect database);
    ApiUnreachable where the API does not answer."""
    status, root = _call(api_url, "GET", f"/flow_runs/{flow_run_id}")
    if status == 404 or status == 422 or not isinstance(root, dict):
        return False
    flow_runs, frontier = {flow_run_id: root}, [flow_run_id]
    while frontier:  # subflows: flow runs whose parent task run belongs to a flow run of the tree
        _, children = _call(api_url, "POST", "/flow_runs/filter",
                            {"flow_runs": {"parent_flow_run_id": {"any_": frontier}}, "limit": 200})
        frontier = [child["id"] for child in children or [] if child["id"] not in flow_runs]
        flow_runs.update({child["id"]: child for child in children or []})
    for run_id, run in flow_runs.items():
        if ((run.get("state") or {}).get("type") or "") not in FINAL_STATES:
            _call(api_url, "POST", f"/flow_runs/{run_id}/set_state", _state("CRASHED", message))
    _, tasks = _call(api_url, "POST", "/task_runs/filter", {
        "task_runs": {"flow_run_id": {"any_": list(flow_runs)}, "state": {"type": {"any_": UNFINISHED_TASK_STATES}}},
        "limit": 200})
    for task in tasks or []:
        _call(api_url, "POST", f"/task_runs/{task['id']}/set_state", _state("CRASHED", message))
    return True


# -- marks waiting for an API of their Prefect home --------------------------------------------------------------
def pending_path(home: str | os.PathLike[str]) -> Path:
    return Path(home) / PENDING_NAME


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[int]:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)


def _has_marks(path: Path) -> bool:
    try:
        return path.stat().st_size > 0
    except OSError:
        return False


def queue(home: str | os.PathLike[str], mark: dict[str, Any]) -> None:
    """Keep a mark ({flow_run_id, message, ...}) until an API of `home` is up."""
    path = pending_path(home)
    with _locked(path) as fd:
        os.lseek(fd, 0, os.SEEK_END)
        os.write(fd, (json.dumps(mark, sort_keys=True) + "\n").encode())


def pending(home: str | os.PathLike[str]) -> list[dict[str, Any]]:
    path = pending_path(home)
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    marks = []
    for line in lines:
        with contextlib.suppress(ValueError):
            mark = json.loads(line)
            if isinstance(mark, dict) and mark.get("flow_run_id"):
                marks.append(mark)
    return marks


def apply_pending(home: str | os.PathLike[str], api_url: str | None) -> int:
    """The marks waiting in `home` that this API knows, applied; the rest keep waiting. Returns how many were applied;
    nothing is raised (an API that stops answering leaves the marks for the next one)."""
    path = pending_path(home)
    if not api_url or not _has_marks(path):
        return 0
    applied = 0
    try:
        with _locked(path) as fd:
            left = []
            for mark in pending(home):
                try:
                    done = crash_flow_run(api_url, mark["flow_run_id"], mark.get("message") or "Crashed.")
                except ApiUnreachable:
                    done = False
                if done:
                    applied += 1
                else:
                    left.append(mark)
            data = "".join(json.dumps(mark, sort_keys=True) + "\n" for mark in left).encode()
            os.ftruncate(fd, 0)  # (the file stays: a mark queued while this one waited for the lock goes on to it)
            os.pwrite(fd, data, 0)
    except OSError:
        return applied
    return applied


def report_crash(flow_run_id: str, message: str, *, api_url: str | None, home: str | None) -> str:
    """Mark the flow run Crashed through the first API that knows it: the one it reported to, else a `serve` up on
    this machine; where none does, the mark waits in its home. Returns "marked", "queued" or "lost" (no API knows it
    and it had no home to wait in)."""
    from kernelbench_rl.prefect_home import running_serve_api, serve_port

    candidates = [api_url] if answers(api_url) else []
    with contextlib.suppress(Exception):  # a serve's state file or port we cannot read: no candidate
        serve = running_serve_api(serve_port())
        if serve and serve not in candidates:
            candidates.append(serve)
    for candidate in candidates:
        try:
            if crash_flow_run(candidate, flow_run_id, message):
                return "marked"
        except ApiUnreachable:
            continue
    if not home:
        return "lost"
    try:
        queue(home, {"flow_run_id": flow_run_id, "message": message, "api_url": api_url})
    except OSError:
        return "lost"
    return "queued"


def apply_waiting_marks(homes: set[str]) -> int:
    """Marks waiting in these homes, applied through a `serve` up on this machine (none up: nothing is done)."""
    waiting = [home for home in homes if home and _has_marks(pending_path(home))]
    if not waiting:
        return 0
    from kernelbench_rl.prefect_home import running_serve_api, serve_port

    try:
        serve = running_serve_api(serve_port())
    except Exception:  # noqa: BLE001 - no serve to ask
        return 0
    return sum(apply_pending(home, serve) for home in waiting) if serve else 0
