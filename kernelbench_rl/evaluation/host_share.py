"""How a host's CPU cores are shared among the evaluation workers on it (one per GPU): which share each takes.

Standard library only: the orchestrator's pool (which tells each worker its place) imports it without torch.
"""

from __future__ import annotations

import os
from typing import Callable

# Which share of its host's cores this worker takes - KBRL_EVAL_HOST_SHARE="K/N" (its position K among the N workers on
# the host; the pool sets it for each GPU worker it starts, a Dask worker from its GPU's place on the host). Unset: the
# host's only worker. Each worker's cores (and its two quiet ones) lie inside its own share: with every worker of a
# four-GPU host keeping the same two quiet cores, four timed sections shared them, and identical code read 0.38x to
# 2.23x with the pool on all four GPUs against none outside [0.8, 1.25] on one GPU of the same host.
HOST_SHARE_ENV = "KBRL_EVAL_HOST_SHARE"


def host_share(value: str | None = None) -> tuple[int, int]:
    """(this worker's position, workers on its host) from `value` (default KBRL_EVAL_HOST_SHARE); (0, 1) when unset or
    not "K/N" with 0 <= K < N."""
    text = (os.environ.get(HOST_SHARE_ENV, "") if value is None else value).strip()
    position, _, count = text.partition("/")
    if position.isdigit() and count.isdigit() and 0 <= int(position) < int(count):
        return int(position), int(count)
    return 0, 1


def sysfs_topology(cpu: int) -> tuple[int, int]:
    """(package, core) of a logical CPU; (0, cpu) where sysfs does not say."""
    base = f"/sys/devices/system/cpu/cpu{cpu}/topology/"
    try:
        with open(base + "physical_package_id") as package, open(base + "core_id") as core:
            return int(package.read()), int(core.read())
    except (OSError, ValueError):
        return 0, cpu


def by_physical_core(cores: list[int], topology: Callable[[int], tuple[int, int]]) -> list[list[int]]:
    """The logical CPUs grouped by physical core (hyperthreads together), packages in order."""
    groups: dict[tuple[int, int], list[int]] = {}
    for cpu in sorted(cores):
        groups.setdefault(topology(cpu), []).append(cpu)
    return [groups[key] for key in sorted(groups)]


def share_of(cores: list[int], position: int, count: int,
             topology: Callable[[int], tuple[int, int]] = sysfs_topology) -> list[int]:
    """The worker's share of `cores`: its position's slice of the host's physical cores (whole cores, hyperthreads
    together, in package order, so that shares are disjoint and a share stays on one package where it can). With
    fewer physical cores than workers, each worker gets one, in turn."""
    groups = by_physical_core(cores, topology)
    if count <= 1 or not groups:
        return sorted(cores)
    if len(groups) < count:
        return sorted(groups[position % len(groups)])
    start, end = position * len(groups) // count, (position + 1) * len(groups) // count
    return sorted(cpu for group in groups[start:end] for cpu in group)


def describe_cores(all_cores: set[int], quiet: set[int], share: tuple[int, int] | None = None) -> str:
    """For the worker's versions: its share of the host and which cores its timing keeps."""
    position, count = share if share is not None else host_share()
    return (f"share {position + 1} of {count}: {len(all_cores)} cores ({_ranges(all_cores)}), "
            f"quiet {_ranges(quiet) or 'none'}")


def _ranges(cores: set[int]) -> str:
    spans: list[list[int]] = []
    for cpu in sorted(cores):
        if spans and cpu == spans[-1][1] + 1:
            spans[-1][1] = cpu
        else:
            spans.append([cpu, cpu])
    return ",".join(f"{a}-{b}" if b > a else str(a) for a, b in spans)
