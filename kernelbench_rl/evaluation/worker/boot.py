"""The evaluation worker's entry point: the steps that must come first, before torch is imported.

    python -m kernelbench_rl.evaluation.worker.boot --device cuda --parallel 4   (the pool starts workers this way)

Importing the worker (torch, our modules) takes seconds, and so do the zygote's own imports (torch and
Triton, in the forkserver every candidate's child is forked from). They need not wait for each other:
once the environment and the uid the zygote must inherit are final, it starts here and imports beside
the worker. The uid is final at once on the CPU, where same-uid mode is not possible, or where a passing
probe is remembered (same_uid.settle); otherwise the probe starts here in a process of its own, beside the
worker's imports, and the worker takes its answer after them and starts the zygote after the switch. Then
`worker_process.main` runs with what was decided here.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass, field

from kernelbench_rl.evaluation.worker import same_uid, startup


@dataclass
class Boot:
    """What the entry point decided and started before the worker module was imported."""

    phases: startup.Phases = field(default_factory=startup.Phases)
    uid_decided: bool = False
    same_uid: bool = False
    same_uid_note: str = ""
    zygote_started: bool = False
    probe: same_uid.PendingProbe | None = None  # the same-uid probe under way, when the uid is not decided yet


def boot(argv: list[str]) -> Boot:
    state = Boot()
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--no-drop-uid", action="store_true")
    parser.add_argument("--no-landlock", action="store_true")
    parser.add_argument("--transport", default=os.environ.get("KBRL_EVAL_TRANSPORT", "auto"))
    args, _ = parser.parse_known_args(argv)  # the worker parses (and rejects) everything again
    transport = args.transport if args.transport in ("auto", "ipc", "file", "pipe") else "auto"
    startup.zygote_environment(args.device)
    euid = os.geteuid()
    try:
        state.uid_decided, state.same_uid, state.same_uid_note = same_uid.settle(
            args.device, transport, not args.no_landlock, not args.no_drop_uid, state.phases, may_probe=False)
    except Exception as exc:  # noqa: BLE001
        if os.geteuid() != euid:  # half-switched: refuse to run rather than run weaker, and say why
            print(json.dumps({"event": "failed", "error": f"could not switch to the children's uid: {exc}"[:500]}),
                  flush=True)
            raise SystemExit(1) from None
        state.uid_decided = False  # nothing changed: the worker decides again, after its imports, as it always did
    if not state.uid_decided and args.device == "cuda":
        try:
            state.probe = same_uid.PendingProbe(not args.no_landlock)
        except OSError:
            state.probe = None  # the worker probes after its imports, in a fork of itself, as it always could
    if state.uid_decided:
        try:
            with state.phases.timed("zygote_spawn"):
                startup.start_zygote()
            state.zygote_started = True
        except Exception:  # noqa: BLE001 - the worker starts it on its first child, as it always could
            pass
    return state


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    state = boot(argv)
    with state.phases.timed("worker_imports"):
        from kernelbench_rl.evaluation.worker import worker_process
    worker_process.main(argv, state)


if __name__ == "__main__":
    main()
