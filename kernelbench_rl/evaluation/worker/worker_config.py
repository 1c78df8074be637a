"""The evaluation worker's settings: its command line (as the pool starts it) and the config it makes."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass


@dataclass
class WorkerConfig:
    device: str = "cpu"
    parallel: int = 2  # children compiling/loading/warming up at once (CPU-bound work)
    in_flight: int = 0  # evaluations under way at once, queued for the device included (0: parallel + 1)
    warm_children: int = 1
    drop_uid: bool = True
    landlock: bool = True
    prewarm: bool = False  # one forward before the exclusive section: Triton JIT in parallel (GPU default)
    transport: str = "auto"  # auto (CUDA IPC if a self-test passes, else files) | ipc | file | pipe
    same_uid: bool = False  # this worker already runs as the children's unprivileged uid (see main)
    ref_cache_bytes: int = 2 << 30
    nvcc: str = "nvcc"
    # What another process on this device (a policy trained beside the evaluator) may hold at its peak; kept
    # out of the budget where it does not hold it yet. Applies only to the device of this UUID when one is given.
    reserved_memory_bytes: int = 0
    reserved_device_uuid: str = ""


def config_from_args(args: argparse.Namespace, same_uid: bool) -> WorkerConfig:
    return WorkerConfig(
        device=args.device, parallel=max(1, args.parallel), warm_children=max(0, args.warm_children),
        in_flight=max(0, args.in_flight),
        drop_uid=not args.no_drop_uid, landlock=not args.no_landlock, transport=args.transport,
        prewarm=args.prewarm == "on" or (args.prewarm == "auto" and args.device == "cuda"),
        same_uid=same_uid, reserved_memory_bytes=int(max(0.0, args.reserved_memory_gb) * 2**30),
        reserved_device_uuid=args.reserved_device_uuid,
    )


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--warm-children", type=int, default=1)
    parser.add_argument("--in-flight", type=int, default=0,
                        help="evaluations under way at once, those queued for the device included (0: parallel + 1)")
    parser.add_argument("--no-drop-uid", action="store_true")
    parser.add_argument("--no-landlock", action="store_true")
    parser.add_argument("--prewarm", choices=["auto", "on", "off"], default="auto",
                        help="one forward outside the exclusive GPU section (auto: on for cuda)")
    parser.add_argument("--transport", choices=["auto", "ipc", "file", "pipe"],
                        default=os.environ.get("KBRL_EVAL_TRANSPORT", "auto"),
                        help="auto: CUDA IPC where a self-test passes (same-uid mode when root), else files")
    parser.add_argument("--reserved-memory-gb", type=float, default=0.0,
                        help="device memory another process here (a policy trained beside the evaluator) may hold at its peak")
    parser.add_argument("--reserved-device-uuid", default="",
                        help="apply --reserved-memory-gb only on the GPU of this UUID (torch's device uuid)")
    return parser
