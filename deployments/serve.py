"""`make serve`: a local Prefect server with its UI, our deployments and a process worker.

Open the printed URL, pick the `pipeline` deployment and press Run: the form shows its typed
parameters. `nightly-eval` runs on its cron schedule. Ctrl-C, SIGINT or SIGTERM stops the worker and the
server this command started; a second `make serve` on a port that is already served says so and exits.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import time
from pathlib import Path

from deployments.server import LocalPrefect, port_in_use, server_answers
from kernelbench_rl.commands.hints import command
from kernelbench_rl.errors import ExitCode
from kernelbench_rl.ownership import pid_alive
from kernelbench_rl.prefect_home import prefect_home, serve_port, serve_state_file

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Stop(Exception):
    """A stop signal arrived: leave the main loop and stop what we started."""


_stopping = False


def _stop_on_signal(signum, _frame) -> None:
    """The first stop signal leaves the main loop; a second one (Ctrl-C twice) must not cut the clean-up short."""
    global _stopping
    if not _stopping:
        _stopping = True
        raise Stop(signal.Signals(signum).name)


def _say(text: str, *, err: bool = False) -> None:
    """Print, but never fail: a closed terminal or pipe (`serve | tee` stopped by the same Ctrl-C) must not
    keep the stop from stopping the server and the worker."""
    try:
        print(text, file=sys.stderr if err else sys.stdout, flush=True)
    except (OSError, ValueError):
        pass


state_file = serve_state_file  # where a serve on this port says who it is (the pipeline reads it too)


def what_runs_on(port: int) -> str | None:
    """One sentence about what already holds the port, or None when it is free."""
    if not port_in_use(port):
        return None
    owner = ""
    try:
        state = json.loads(state_file(port).read_text())
    except (OSError, ValueError):
        state = {}
    if state:
        if pid_alive(state.get("pid", 0)):
            owner = (f" (started by kernelbench-rl serve, pid {state['pid']}: server pid {state.get('server_pid')}, "
                     f"worker pid {state.get('worker_pid') or 'none'}; stop it with Ctrl-C in its terminal or "
                     f"`kill {state['pid']}`)")
    if server_answers(port):
        return (f"A Prefect server already answers on http://127.0.0.1:{port}{owner}; this serve starts nothing, "
                f"so stop that one or pass --port with a free port.")
    return f"Port {port} is in use by another program{owner}; stop it or pass --port with a free port."


def _deployed_names(output: str) -> list[str]:
    """The deployments `prefect deploy` created or updated (its hints to start a worker are ours to give once)."""
    return sorted(set(re.findall(r"Deployment '([^']+)'", output)))


def arg_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=serve_port())
    # The home `kernelbench-rl pipeline` records into when no serve is up: one home, so its runs are here.
    parser.add_argument("--prefect-home", type=Path, default=prefect_home())
    parser.add_argument("--no-worker", action="store_true", help="Start the server and deploy, but no worker.")
    return parser


def main() -> None:
    args = arg_parser().parse_args()

    busy = what_runs_on(args.port)
    if busy:  # the port is held by another process: busy, as a run or a DuckDB file another process holds (README)
        print(f"error: {busy}", file=sys.stderr, flush=True)
        raise SystemExit(ExitCode.BUSY)

    local = LocalPrefect(prefect_home=args.prefect_home, port=args.port, log_dir=args.prefect_home / "logs")
    state = state_file(args.port)
    parent = os.getppid()
    for signum in STOP_SIGNALS:
        signal.signal(signum, _stop_on_signal)
    reason = "stopped"
    failure = ""
    try:
        print(f"starting Prefect server on {local.ui_url} (logs in {local.log_dir}) ...", flush=True)
        local.start_server()
        local.ensure_work_pool()
        deployed = _deployed_names(local.deploy())
        print(f"deployed: {', '.join(deployed) or 'see ' + str(local.log_dir)}", flush=True)
        if not args.no_worker:
            local.start_worker()
        state.parent.mkdir(parents=True, exist_ok=True)
        state.write_text(json.dumps({"pid": os.getpid(), "port": args.port, "server_pid": local.server_pid,
                                     "worker_pid": local.worker_pid}))
        prefect = command("prefect")
        print(
            f"\nPrefect UI: {local.ui_url}\n"
            f"  Deployments -> pipeline -> Run to start a training pipeline; nightly-eval runs on its schedule.\n"
            f"  From a shell: PREFECT_API_URL={local.api_url} {prefect} deployment run pipeline/pipeline\n"
            + ("  A worker (pool kbrl-local) is running; its log is in " + str(local.log_dir / "worker.log") + "\n"
               if not args.no_worker else "  No worker was started (--no-worker).\n")
            + "Ctrl-C stops the worker and the server.",
            flush=True,
        )
        while True:
            time.sleep(1)
            if os.getppid() != parent:  # whoever started us (make, a terminal) is gone
                reason = "the parent process is gone"
                break
            if not local.server_running():
                reason = f"the Prefect server exited (see {local.log_dir / 'server.log'})"
                break
    except (Stop, KeyboardInterrupt) as exc:
        reason = f"received {exc.args[0] if exc.args else 'SIGINT'}"
    except RuntimeError as exc:  # the server would not start, a prefect command failed: one line, then clean up
        reason = "start-up failed"
        failure = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    finally:
        for signum in STOP_SIGNALS:  # a second Ctrl-C must not cut the clean-up short
            signal.signal(signum, signal.SIG_IGN)
        _say(f"stopping the worker and the server ({reason}) ...")
        local.stop()
        state.unlink(missing_ok=True)
        _say("stopped.")
    if failure:
        _say(f"error: {failure} (logs in {local.log_dir})", err=True)
        raise SystemExit(ExitCode.FAILED)


if __name__ == "__main__":
    main()
