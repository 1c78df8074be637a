"""A timing Clock on the host's perf_counter, for running timer.time_forward without a GPU."""

from __future__ import annotations

import time

from kernelbench_rl.evaluation.sandbox import timer


class HostEvent:
    def __init__(self, enable_timing: bool = False) -> None:
        self.t = 0.0

    def record(self) -> None:
        self.t = time.perf_counter()

    def elapsed_time(self, other: HostEvent) -> float:
        return (other.t - self.t) * 1000.0

    def synchronize(self) -> None:
        pass


HOST_CLOCK = timer.Clock(synchronize=lambda: None, event_cls=HostEvent, record=HostEvent.record,
                          elapsed_time=HostEvent.elapsed_time, event_synchronize=HostEvent.synchronize,
                          perf_counter=time.perf_counter)
