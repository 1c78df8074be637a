"""The evaluation worker's process: its start (the uid, the zygote, the protocol's own stdout), the request loop
over stdin, and its stop, bounded by STOP_GRACE_S.

    python -m kernelbench_rl.evaluation.worker.boot --device cuda   (the pool starts workers this way; boot.py calls main)

`worker.Worker` evaluates; this module only feeds it requests and writes its answers, one JSON line each.
"""

from __future__ import annotations

import contextlib
import faulthandler
import gc
import json
import os
import shutil
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

from kernelbench_rl.evaluation import host_share
from kernelbench_rl.evaluation.sandbox import numerics
from kernelbench_rl.evaluation.worker import reference_budget, scheduling, startup
from kernelbench_rl.evaluation.worker.same_uid import settle as same_uid_settle
from kernelbench_rl.evaluation.worker.worker import Worker
from kernelbench_rl.evaluation.worker.worker_config import argument_parser, config_from_args

# Once told to stop (or orphaned), the worker has this long to wind down before it kills what it knows of and
# exits regardless: nothing it could still finish has anyone waiting for it.
STOP_GRACE_S = float(os.environ.get("KBRL_EVAL_STOP_GRACE_S", "15"))


def _handle(worker: Worker, line: str, emit: Any, received_at: float | None = None) -> None:
    message = json.loads(line)
    tag = message.get("id")
    try:
        # The reference's phases are reported as they start and end: the pool bounds them (reference_budget.py).
        with reference_budget.reporting(lambda phase: emit({"event": "reference", "id": tag, "phase": phase})):
            backlog = message.get("backlog")  # the orchestrator's queue behind this request (pool.py)
            result, baseline = worker.evaluate(message["request"], received_at,
                                               backlog if isinstance(backlog, int) and backlog >= 0 else None)
        if worker.children.stopping:  # its child was killed because the worker is stopping, not for anything it did
            emit({"id": tag, "error": "the evaluation worker stopped before this evaluation finished"})
            return
        emit({"id": tag, "result": result.to_dict(), "baseline": baseline})
    except Exception as exc:  # noqa: BLE001 - never leave the orchestrator waiting
        traceback.print_exc(file=sys.stderr)
        emit({"id": tag, "error": f"{type(exc).__name__}: {exc}"[:500]})


def main(argv: list[str] | None = None, boot: Any = None) -> None:
    """`boot`: what boot.py (the pool's entry point) decided and started before this module was imported."""
    phases = boot.phases if boot is not None else startup.Phases()
    args = argument_parser().parse_args(argv)
    numerics.apply()
    switch_interval = scheduling.apply_switch_interval()
    if args.transport not in ("auto", "ipc", "file", "pipe"):
        args.transport = "auto"
    if boot is not None and boot.uid_decided:
        same_uid, same_uid_note = boot.same_uid, boot.same_uid_note
    else:
        # Decided before anything touches CUDA: the probe (started by boot.py in a process of its own, else a
        # fork of this one) answers now (same_uid.settle says how, and
        # raises where a half-done switch would leave this worker weaker than it says).
        _, same_uid, same_uid_note = same_uid_settle(args.device, args.transport, not args.no_landlock,
                                                     not args.no_drop_uid, phases, may_probe=True,
                                                     pending=boot.probe if boot is not None else None)
    if "zygote_spawn" not in phases.seconds():
        # The uid and environment the zygote inherits are final: its imports go on beside our CUDA start.
        startup.zygote_environment(args.device)
        with contextlib.suppress(Exception), phases.timed("zygote_spawn"):
            startup.start_zygote()  # (should this fail, the Worker tries again and says why)
    # The protocol gets its own copy of stdout; anything else printed (torch, triton) goes to stderr.
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    emit_lock = threading.Lock()

    def emit(message: dict[str, Any]) -> None:
        with emit_lock:
            protocol.write(json.dumps(message) + "\n")
            protocol.flush()

    config = config_from_args(args, same_uid)
    if config.device == "cuda":
        with phases.timed("cuda_init"):
            total = torch.cuda.get_device_properties(0).total_memory if torch.cuda.is_available() else 0
        # Resident references (models and cached outputs), at most a tenth of the device: KernelBench's
        # level-1 tensors reach 6 GiB, and what is reserved here is lost to evaluations.
        config.ref_cache_bytes = min(8 << 30, max(1 << 30, total // 10))
    try:
        worker = Worker(config, phases)
        worker.versions["switch_interval"] = switch_interval
        # Which card times this worker's candidates ('INDEX UUID'), and its share of the host's cores.
        worker.versions["gpu"] = worker.candidate_timing.gpu or ("none: the CPU" if config.device != "cuda" else "unknown")
        worker.versions["cores"] = host_share.describe_cores(worker.all_cores, worker.quiet_cores)
        # What the start made (torch, Triton, our modules: about 180k objects) lives as long as this process: kept out
        # of the collector, a full collection (a release of device memory after an error, Python's own gen-2 passes,
        # all holding the GIL) takes microseconds instead of 0.1-0.2 s.
        gc.collect()
        gc.freeze()
        if same_uid_note:
            worker.versions["same_uid_probe"] = same_uid_note[:200]
    except Exception as exc:  # noqa: BLE001
        emit({"event": "failed", "error": f"{type(exc).__name__}: {exc}"})
        return
    pool = ThreadPoolExecutor(max_workers=worker.in_flight)
    try:
        ready_after_s, ready_seconds = phases.now(), phases.seconds()  # the steps done by now; the rest say so later
        try:
            emit({"event": "ready", "pid": os.getpid(), "hardware": worker.hardware, "arch": worker.arch,
                  "versions": worker.versions,
                  "transport": worker.transport, "ipc_selftest": worker.ipc_selftest, "same_uid": same_uid,
                  "same_uid_probe": same_uid_note[:200], "ready_after_s": round(ready_after_s, 4),
                  "startup_seconds": ready_seconds, "startup_timeline": phases.timeline(set(ready_seconds))})
        except (BrokenPipeError, OSError, ValueError):
            # The orchestrator died while this worker started (a Dask worker killed during its pool's start):
            # shut down below instead of lingering, warm children and all, with nobody to serve.
            return

        def say_when_warm() -> None:
            """What the start left for after ready (the comparison's build, the other pre-started children)."""
            for thread in worker.background:
                thread.join()
            later = set(phases.seconds()) - set(ready_seconds)
            try:
                emit({"event": "warm", "warm_after_s": round(phases.now(), 4), "startup_seconds": phases.seconds(later),
                      "startup_timeline": phases.timeline(later)})
            except (BrokenPipeError, OSError, ValueError):
                pass

        threading.Thread(target=say_when_warm, daemon=True, name="kbrl-say-when-warm").start()
        for line in sys.stdin:
            line = line.strip()
            if not line:
                continue
            if line == '{"cmd": "shutdown"}':
                break
            pool.submit(_handle, worker, line, emit, time.perf_counter())
    finally:
        # Asked to stop, or the orchestrator is gone (stdin closed): nobody waits for these results (the
        # pool answers them "infra"), and a running candidate (a hang, a memory hoard) would otherwise hold
        # the device until its timeout, or for good once the pool kills this process.
        # Never cancelled: it also bounds the interpreter's exit (multiprocessing joins its children then).
        last_resort = threading.Timer(STOP_GRACE_S, _abandon, args=(worker,))
        last_resort.daemon = True
        last_resort.start()
        worker.kill_running_children()
        pool.shutdown(wait=True, cancel_futures=True)
        worker.shutdown()
        gc.unfreeze()  # the interpreter's teardown frees them as usual (frozen, Triton's bindings report leaks)


def _abandon(worker: Worker) -> None:
    """The orderly stop hung (CI once saw an orphaned worker alive 30 s after its running child was killed):
    say where each thread stood, kill every child known, exit. The forkserver exits when this process does,
    and takes any child missed here with it (each child's parent-death signal)."""
    try:
        print(f"the worker did not stop within {STOP_GRACE_S:.0f} s; its threads were:", file=sys.stderr, flush=True)
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    except (OSError, ValueError, AttributeError):
        pass  # no log to write to: still kill and exit
    for _ in range(3):  # the collections may change under us: no lock is taken here, as one may be what hangs
        try:
            known = [*worker.children.running, *worker.children.warm]
            break
        except RuntimeError:
            known = []
    for child in known:
        child.signal_kill()
    shutil.rmtree(worker.root, ignore_errors=True)
    os._exit(0)


if __name__ == "__main__":
    main()
