"""`make serve`: a local Prefect server with its UI, our deployments and a process worker.

Open the printed URL, pick the `pipeline` deployment and press Run: the form shows its typed
parameters. `nightly-eval` runs on its cron schedule. Ctrl-C stops the worker and the server.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from deployments.server import REPO_ROOT, LocalPrefect


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=int(os.environ.get("KBRL_PREFECT_PORT", "4200")))
    parser.add_argument("--prefect-home", type=Path, default=REPO_ROOT / "runs" / "prefect")
    parser.add_argument("--no-worker", action="store_true", help="Start the server and deploy, but no worker.")
    args = parser.parse_args()

    local = LocalPrefect(prefect_home=args.prefect_home, port=args.port, log_dir=args.prefect_home / "logs")
    with local:
        print(f"starting Prefect server on {local.ui_url} (logs in {local.log_dir}) ...", flush=True)
        local.start_server()
        local.ensure_work_pool()
        print(local.deploy(), flush=True)
        if not args.no_worker:
            local.start_worker()
        print(
            f"\nPrefect UI: {local.ui_url}\n"
            f"  Deployments -> pipeline -> Run to start a training pipeline; nightly-eval runs on its schedule.\n"
            f"  From a shell: PREFECT_API_URL={local.api_url} prefect deployment run pipeline/pipeline\n"
            "Ctrl-C stops the worker and the server.",
            flush=True,
        )
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            print("stopping ...", flush=True)


if __name__ == "__main__":
    main()
