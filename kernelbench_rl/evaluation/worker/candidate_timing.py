"""Timing a candidate that passed correctness, on the device, against its reference: the measuring half.

The eager baseline (timed once per problem, the candidate's child stopped meanwhile), the candidate's timed
trials with some of their outputs checked, a side-by-side re-timing with the reference in a sibling child
where either side's trials spread, the problem's physical floor, a re-check on the host clock of an
excessive speedup, and a profile telling whether the kernel's own code did the work.

This module drives the children and hands the numbers down: what they mean (the speedup and its direction, the
worker's clock against the reported times, the flags of an excessive speedup, the profiled work share, the floor)
is decided from plain numbers in timing/decisions.py and timing/floor.py, which CPU tests drive.
"""

from __future__ import annotations

import contextlib
import os
import random
import secrets
import threading
import time
from typing import Any, Callable

from kernelbench_rl.evaluation import trace
from kernelbench_rl.evaluation.sandbox import timer, wire
from kernelbench_rl.evaluation.source import kernels
from kernelbench_rl.evaluation.verdict import faults, sensitivity
from kernelbench_rl.evaluation.worker import children
from kernelbench_rl.evaluation.timing import floor as floors
from kernelbench_rl.evaluation.timing.decisions import (
    BASELINE_IN_CHILD, BASELINE_IN_WORKER, BlockWall, LaunchTally, baseline_gpu, clock_verdict,
    excessive_speedup_flags, host_retiming_confirms, launches_verdict, paired_blocks, profile_count, profile_verdict,
    refreshed_baseline, timed_sides, timing_window_s, usable_baseline,
)
from kernelbench_rl.evaluation.worker.children import Child, stopped
from kernelbench_rl.evaluation.verdict.faults import Fault
from kernelbench_rl.evaluation.worker.reference_cache import ProblemState, ReferenceCache, host_calls
from kernelbench_rl.evaluation.result import ErrorCategory, EvalResult, EvalSettings, Flag, add_seconds
from kernelbench_rl.evaluation.host_share import host_share
from kernelbench_rl.evaluation.worker.scheduling import QuietGate, gpu_identity

# A diagnostic for showing that one defence holds alone (bench/floor_check.py, retired; in git history before
# 1406398): "0" turns off the check of timed calls' outputs (reference_cache.FRESH_TIMING_BUFFERS is its sibling).
# Never off in a real evaluation.
VERIFY_TIMED_OUTPUTS = os.environ.get("KBRL_EVAL_VERIFY_TIMED", "1") != "0"


class PreparedChild:
    """A reference child started on a thread of its own (`start()` returns it, or None), so that its start overlaps
    the candidate's correctness. `take()` waits for it and hands it over; `release(give_back)` returns one that was
    never taken."""

    def __init__(self, start: Callable[[], Child | None]) -> None:
        self._child: Child | None = None
        self._taken = False
        self._thread = threading.Thread(target=self._run, args=(start,), name="reference-child-start", daemon=True)
        self._thread.start()

    def _run(self, start: Callable[[], Child | None]) -> None:
        try:
            self._child = start()
        except Exception:  # noqa: BLE001 - ours; the baseline is then timed another way
            self._child = None

    def take(self) -> Child | None:
        self._thread.join()
        self._taken = True
        return self._child

    def release(self, give_back: Callable[[Child], None]) -> None:
        self._thread.join()
        if not self._taken and self._child is not None:
            self._taken = True
            give_back(self._child)


class CandidateTiming:
    """The timing step of the worker's evaluations. `reference_child` starts (or lends) the sibling running the
    reference when the timing needs it (None otherwise); `give_back(child, healthy, state, settings, payload)`
    returns it after the timing (kept for the problem's next candidate, or retired)."""

    def __init__(self, references: ReferenceCache, quiet_gate: QuietGate, transport: str, hardware: str,
                 reference_child: Callable[..., Child | None], give_back: Callable[..., None],
                 baseline_child: Callable[..., Child | None] | None = None,
                 home_for: Callable[[ProblemState], str] | None = None) -> None:
        self.references = references
        self.quiet_gate = quiet_gate
        self.transport = transport
        self.hardware = hardware
        self.reference_child = reference_child
        self.give_back = give_back
        # `baseline_child(state, settings, payload, result, deadline)`: a child running the reference (the resident
        # one or a new one), None when it cannot start; `home_for(state)`: where the problem's baseline is timed.
        self.baseline_child = baseline_child
        self.home_for = home_for or (lambda state: BASELINE_IN_WORKER)
        self.floor_service: Any = None  # a floor_service.FloorService where the worker started one
        # The card this worker times on, and whether it is its host's only worker: which cached baselines may stand for
        # its own (usable_baseline).
        self.gpu = "" if hardware.startswith("cpu") else gpu_identity()
        self.alone_on_host = host_share()[1] <= 1

    def needs_baseline(self, state: ProblemState, settings: EvalSettings, payload: dict[str, Any]) -> bool:
        """Whether this evaluation times its problem's baseline (none known here, none usable from the cache)."""
        return (settings.precision not in state.baselines
                and not usable_baseline(payload.get("baseline"), self.home_for(state), self.gpu, self.alone_on_host))

    def run(self, child: Child, state: ProblemState, settings: EvalSettings, result: EvalResult,
            deadline: float, payload: dict[str, Any], timed: contextlib.ExitStack | None = None,
            prepared: PreparedChild | None = None) -> dict | None:
        """Baseline, timed trials (paired with the reference's where they spread), floor, host re-check and
        profile of a candidate that passed correctness; the fresh baseline for the orchestrator's cache, if one.

        `timed`, when given, holds the device alone for this evaluation: it is closed as soon as the timed work is
        done, and the check of the timed outputs and the profile then run beside other candidates' untimed work
        (taking the quiet gate shared, so never beside a timed trial). `prepared`: a reference child started for
        the baseline while correctness ran (the caller gives it back if it is not taken here)."""
        precision = settings.precision
        t = time.perf_counter()
        home = self.home_for(state)
        known = (payload.get("baseline")
                 if usable_baseline(payload.get("baseline"), home, self.gpu, self.alone_on_host) else None)
        fresh = self.needs_baseline(state, settings, payload)
        # The candidate's child is stopped meanwhile: a thread of its own loading the device would inflate the
        # baseline, and the first candidate's baseline is cached for every later one of its problem.
        # (A known baseline needs neither: the timing's own quiet section waits for warm-ups once.)
        with self.quiet_gate.quiet() if fresh else contextlib.nullcontext(), \
                stopped(child.pid) if fresh else contextlib.nullcontext():
            base = None
            if fresh and home == BASELINE_IN_CHILD:
                base = self._baseline_in_child(state, settings, payload, result, prepared)
            if base is None:
                base = self.references.baseline(state, precision, settings, known)
        result.phase_seconds["baseline"] = time.perf_counter() - t
        # Timed here (now, or by an earlier candidate), or the cache's, which names its card if it knows it.
        base.setdefault("gpu", self.gpu if fresh or known is None else "")
        result.versions["baseline_gpu"] = baseline_gpu(base)
        trace.record(trace.who_of(child), "baseline", t)
        if base.get("timed_in"):
            result.versions["baseline_timed_in"] = str(base["timed_in"])
        if base.get("refreshed"):
            result.versions["baseline_refreshed"] = str(base["refreshed"])[:200]
        # The reference's time is bounded by its own budget (reference_budget.py), not taken from the kernel's.
        deadline += result.phase_seconds["baseline"]
        result.baseline_ms = base["eager_ms"]
        result.baseline_compile_ms = base.get("compile_ms")
        t = time.perf_counter()
        # As many timed calls as the baseline had: fewer than asked for a reference too slow to time them all.
        calls, why = state.timed_calls(settings)
        result.versions["timed_calls"] = why
        reference_ms = float(base["eager_ms"] or 0.0)
        deadline = max(deadline, time.monotonic() + timing_window_s(calls, settings.warmup_trials, reference_ms, 0.0))
        seeds = [secrets.randbits(31) for _ in range(calls)]
        # The profiled forwards carry the problem's perturbation where it has one, as the checked calls do
        # (sensitivity.everyday_variant). The timed calls do not: the worker's clock check compares the kernel's loop
        # with the reference's, and perturbing one side's inputs only made its loop slower by the perturbation's own
        # cost (an H200, 2026-11-28: 9 of 10 honest solutions flagged clock_disagrees). A kernel that does whole work
        # on perturbed inputs and part of it on plain ones then reads more GPU work profiled than timed
        # (profile_disagrees). Timing both sides on perturbed inputs is the way to close it.
        everyday = sensitivity.everyday_variant(state.discrimination_for(precision, payload.get("input_variant")))
        verify_trials = (state.plan.verify_trials if state.plan is not None else 2) if VERIFY_TIMED_OUTPUTS else 0
        verify = sorted(random.sample(range(len(seeds)), min(verify_trials, len(seeds))))
        paired_ms: list[float] = []
        kernel_diagnostics: list[dict] = []
        reference_diagnostics: list[dict] = []
        kept: dict[str, Any] = {}
        mark = time.perf_counter()
        with self.quiet_gate.quiet() as calm:
            result.phase_seconds["timing_quiet_wait"] = time.perf_counter() - mark
            trace.record(trace.who_of(child), "quiet_wait", mark)
            solo_walls = BlockWall()
            launch_tally = LaunchTally()  # the own launches of every timed block, set against the profiled forwards
            times = self._time_block(child, state, settings, result, seeds, verify, settings.warmup_trials, deadline,
                                     diagnostics=kernel_diagnostics, kept_out=kept if timed is not None else None,
                                     walls=solo_walls, launches=launch_tally)
        solo = timer.TimingRecord(times_ms=times)
        kernel_walls, reference_walls = solo_walls, state.reference_walls.get(precision)
        # Re-timing is our choice, not the kernel's cost: it gets a timeout of its own (a kernel whose solo
        # trials took most of its timeout must not time out for being timed twice).
        deadline = time.monotonic() + timing_window_s(len(seeds), settings.warmup_trials, reference_ms,
                                                      settings.timeout_s, sides=2)
        reference_child = self.reference_child(state, settings, payload, base, solo, result, deadline)
        if reference_child is not None:
            # The child's next command releases what it kept: check the solo trials' outputs first.
            self._verify_kept(state, settings, result, seeds, kept, trace.who_of(child))
            # Timed again, both sides in alternating blocks, the side going first alternating too (ABBA): a drift
            # of the device or the host between blocks reaches both alike. The candidate is stopped during the
            # reference's blocks, so no thread of its own can load the device meanwhile.
            sides_ms = (solo.median_ms, float(base["eager_ms"] or solo.median_ms))
            blocks = paired_blocks(len(seeds), min(sides_ms), max(sides_ms))
            by_index: dict[int, float] = {}
            healthy = False
            paired_kernel_walls, paired_reference_walls = BlockWall(), BlockWall()
            try:
                with self.quiet_gate.quiet() as calm_paired:
                    for number, indices in enumerate(blocks):
                        warmup = settings.warmup_trials if number < 2 else 1
                        for side in (("reference", "kernel") if number % 2 == 0 else ("kernel", "reference")):
                            if side == "kernel":
                                block_seeds = [secrets.randbits(31) for _ in indices]
                                block_times = self._time_block(child, state, settings, result, block_seeds,
                                                               [0] if number == 0 and VERIFY_TIMED_OUTPUTS else [], warmup, deadline, indices,
                                                               diagnostics=kernel_diagnostics, walls=paired_kernel_walls,
                                                               launches=launch_tally)
                                by_index.update(zip(indices, block_times))
                                continue
                            try:
                                with stopped(child.pid):
                                    paired_ms += self._time_reference_block(reference_child, state, indices, warmup,
                                                                            deadline, reference_diagnostics,
                                                                            paired_reference_walls)
                            except Fault as fault:  # the reference's child: ours, retried, never the kernel's
                                raise Fault(ErrorCategory.INFRA,
                                            f"timing the reference beside the kernel failed: {fault.message}") from None
                calm = calm and calm_paired
                healthy = True
            finally:
                self.give_back(reference_child, healthy, state, settings, payload)
            times = [by_index[i] for i in sorted(by_index)]
            kernel_walls, reference_walls = paired_kernel_walls, paired_reference_walls
            state.reference_walls[precision] = paired_reference_walls
        if not calm:
            result.versions["timing_overlap"] = "timed beside another child's warm-up (it ran past the quiet gate's wait)"
        record = timer.TimingRecord(times_ms=times)
        result.versions["timing_diagnostics"] = timer.describe_diagnostics({
            "kernel": kernel_diagnostics[0] if kernel_diagnostics else None,
            "reference": base.get("diagnostics"),
            **({"kernel paired": timer.merge_diagnostics(kernel_diagnostics[1:]),
                "reference paired": timer.merge_diagnostics(reference_diagnostics)} if paired_ms else {}),
        })[:500]
        # The floor's share of timing: the solo trials, and both sides of a side-by-side run.
        result.phase_seconds["timing_trials_gpu"] = (sum(solo.times_ms) + sum(paired_ms)
                                                     + (sum(record.times_ms) if paired_ms else 0.0)) / 1000.0
        paired = timer.TimingRecord(times_ms=paired_ms) if paired_ms else None
        sides = timed_sides(record, float(result.baseline_ms or 0.0), paired)
        result.runtime_ms, result.runtime_spread_ms = sides.runtime_ms, sides.runtime_spread_ms
        if paired is not None:
            result.versions["timing"] = (f"paired: the reference timed beside the kernel, {len(paired_ms)} calls each in "
                                         f"{len(blocks)} alternating blocks; solo, the reference read {result.baseline_ms:.3f} ms (spread "
                                         f"{base.get('eager_spread_ms') or 0.0:.3f}), the kernel {solo.median_ms:.3f} ms "
                                         f"(spread {solo.iqr_ms:.3f})")
            result.versions["baseline_gpu"] = self.gpu  # the reference's side, timed beside the kernel
            refreshed = refreshed_baseline(state.baselines.get(precision) or base, paired)
            if refreshed is not None:  # for the problem's later candidates (this one is judged side by side)
                state.baselines[precision] = {**refreshed, "gpu": self.gpu}
        result.phase_seconds["timing"] = time.perf_counter() - t
        result.baseline_ms = sides.baseline_ms  # the reference's side, where it was timed beside the kernel
        if sides.speedup is not None:
            result.speedup = sides.speedup
        if reference_walls is None:  # the baseline came from the store: the reference's calls on this worker's clock
            mark = time.perf_counter()
            reference_walls = BlockWall(*self.references.reference_wall(state, precision, settings))
            state.reference_walls[precision] = reference_walls
            add_seconds(result, "host_clock_reference", time.perf_counter() - mark)
        retimed: list[float | None] = []  # the host re-timing, once, for whichever check asks for it

        def host_speedup() -> float | None:
            if not retimed:
                # The solo trials' kept outputs are checked before the child's next command.
                self._verify_kept(state, settings, result, seeds, kept, trace.who_of(child))
                retimed.append(self._host_speedup(child, state, settings, calls, deadline))
                result.host_speedup = retimed[0]
            return retimed[0]

        clock_flags, result.versions["host_clock"] = clock_verdict(
            kernel_walls, reference_walls, lambda: host_retiming_confirms(host_speedup(), result.speedup))
        result.flags += clock_flags
        result.flags += excessive_speedup_flags(result.speedup, settings.excessive_speedup_threshold, host_speedup)
        untimed = contextlib.ExitStack()
        if timed is not None:
            timed.close()  # the device for the next timing; what follows is untimed
            mark = time.perf_counter()
            untimed.enter_context(self.quiet_gate.noisy())
            result.phase_seconds["untimed_quiet_wait"] = time.perf_counter() - mark
        with untimed:
            self._verify_kept(state, settings, result, seeds, kept, trace.who_of(child))
            t = time.perf_counter()
            profiles = [self._profile_once(child, state, settings, result, deadline, everyday)
                        for _ in range(profile_count(state.forward_s))]
            trace.record(trace.who_of(child), "profile", t)
            result.phase_seconds["profile"] = time.perf_counter() - t
        judged = profile_verdict(profiles, payload["candidate_source"], settings.backend, result.runtime_ms)
        if judged is not None:
            result.versions["kernel_credit"] = judged.credit
            result.kernel_share = judged.share
            result.versions["top_kernels"] = kernels.top_kernels(judged.kernel_rows)
            result.profile = kernels.profile_rows(judged.kernel_rows)
            result.versions["profile_vs_timed"] = judged.profile_vs_timed
            result.flags += [flag for flag in judged.flags if flag not in result.flags]
        else:
            result.versions["profile_error"] = str(profiles[-1].get("error", ""))[:300] if profiles else "not profiled"
        # The forwards the profile measured, each one forward's launch record (a failed profile's spans others)
        measured = [p.get("launches") for p in profiles if isinstance(p.get("kernels"), list)]
        launch_flags, launch_note = launches_verdict(launch_tally.launches, launch_tally.forwards, measured)
        if launch_note:
            result.versions["launches_vs_timed"] = launch_note
        result.flags += [flag for flag in launch_flags if flag not in result.flags]
        try:
            wire.send_json(child.conn, {"cmd": "exit"})
        except (BrokenPipeError, ConnectionResetError, EOFError, OSError):
            pass  # the verdict stands; the child is killed anyway
        if fresh:
            return {"eager_ms": base["eager_ms"], "eager_spread_ms": base.get("eager_spread_ms"),
                    "compile_ms": base.get("compile_ms"), "timed_in": base.get("timed_in") or BASELINE_IN_WORKER,
                    "gpu": self.gpu}
        return None

    def _profile_once(self, child: Child, state: ProblemState, settings: EvalSettings, result: EvalResult,
                      deadline: float, variant: dict | None = None) -> dict[str, Any]:
        """One profiled forward on a fresh hidden seed; its outputs are checked like a timed call's (wrong ones are a
        hack: the forward the work share is read from must itself be right). The child's header."""
        seed = secrets.randbits(31)
        with state.lock:
            reference = self.references.reference_outputs(state, settings.precision, seed, cache=False,
                                                          variant=variant)
        poison = (state.plan.poison_bytes if state.plan is not None
                  else 2 * sum(r.numel() * r.element_size() for r in reference) + (32 << 20))
        children.send(child, {"cmd": "profile", "seed": seed, "poison_bytes": poison, "variant": variant}, "profiling")
        header = children.expect(child, {"profiled"}, deadline - time.monotonic(), "profiling")
        faults.numerics_unchanged(header, result)
        faults.aliasing_allowed([header.get("aliases")], state.output_aliases)
        received = children.receive(child, header, reference, state.input_bytes, self.transport)
        outcome = self.references.compare(state, settings.precision, seed, variant, reference,
                                          received.get("outputs", []))
        del received, reference
        if not outcome.ok:
            result.flags.append(Flag.HACK.value)
            raise Fault(ErrorCategory.MISMATCH, f"outputs of a profiled call were wrong: {outcome.message}")
        return header

    def _host_speedup(self, child: Child, state: ProblemState, settings: EvalSettings, calls: int,
                      deadline: float) -> float | None:
        """The reference's time over the candidate's, both timed on the host clock around each forward (`host_time`);
        None when the candidate's reads nothing or its clock functions were replaced."""
        host_seeds = [secrets.randbits(31) for _ in range(host_calls(calls))]
        with self.quiet_gate.quiet():
            children.send(child, {"cmd": "host_time", "seeds": host_seeds, "fresh_buffers": state.fresh_buffers()},
                          "re-timing on the host clock")
            host = children.expect(child, {"host_timed"}, deadline - time.monotonic(), "re-timing on the host clock")
            candidate_host = float(host.get("median_ms") or 0.0)
            # As for the first baseline: a thread of the candidate's own must not load the device meanwhile.
            with stopped(child.pid) if settings.precision not in state.host_baselines else contextlib.nullcontext():
                baseline_host = self.references.host_baseline(state, settings.precision, settings)
        if candidate_host > 0 and not host.get("tampered"):
            return baseline_host / candidate_host
        return None

    def _baseline_in_child(self, state: ProblemState, settings: EvalSettings, payload: dict[str, Any],
                           result: EvalResult, prepared: PreparedChild | None) -> dict[str, Any] | None:
        """The problem's baseline timed in a child running the reference, as a candidate is timed; None (the worker
        times it then) when no such child starts or its timing fails, which is ours and noted in the result."""
        calls = state.timed_calls(settings)[0]
        window = timing_window_s(calls, settings.warmup_trials, 1000.0 * (state.forward_s or 0.0), settings.timeout_s)
        mark = time.perf_counter()
        if prepared is not None:  # one that failed to start is not started again: the worker times the baseline
            reference_child = prepared.take()
        elif self.baseline_child is not None:
            reference_child = self.baseline_child(state, settings, payload, result, time.monotonic() + window)
        else:
            reference_child = None
        result.phase_seconds["baseline_child_wait"] = time.perf_counter() - mark
        if reference_child is None:
            return None
        diagnostics: list[dict] = []
        healthy = False
        walls = BlockWall()
        try:
            times = self._time_reference_block(reference_child, state, list(range(calls)), settings.warmup_trials,
                                               time.monotonic() + window, diagnostics, walls)
            state.reference_walls[settings.precision] = walls
            healthy = True
        except Fault as fault:
            result.versions["baseline_child_failed"] = fault.message[:200]
            return None
        finally:
            self.give_back(reference_child, healthy, state, settings, payload)
        record = timer.TimingRecord(times_ms=times)
        entry = self.references.record_baseline(state, settings.precision, settings, record, BASELINE_IN_CHILD)
        if diagnostics:
            entry["diagnostics"] = diagnostics[0]
        return entry

    def floor_for(self, state: ProblemState, precision: str) -> Any:
        """The speed of light of the problem on this GPU (a Floor, or why there is none), worked out once per problem
        and precision on the meta device, by the helper process where there is one. The worker asks after the
        device section (`against_the_floor`): the first one in a process imports and warms torch's meta kernels and
        FLOP counter, 1.5-3.8 s, which inside the section held the device idle, and before it kept a cold folder's
        sections waiting for the helper's warm-up (2 s on an H200)."""
        if precision not in state.floors:
            found = None
            if self.floor_service is not None and state.path:
                found = self.floor_service.floor(state.path, precision, state.problem_id)
            if found is None:  # no helper, or it failed: worked out here
                try:
                    found = floors.problem_floor(state.module, precision, self.hardware)
                except Exception as exc:  # noqa: BLE001 - an unknown GPU, or a problem the meta device cannot run
                    found = floors.why_no_floor(exc)
            state.floors[precision] = found
        return state.floors[precision]

    def against_the_floor(self, state: ProblemState, precision: str, result: EvalResult) -> None:
        """The candidate's and the reference's share of the problem's speed of light (`floor_for`), and the flag for
        a time under it; for a timed candidate, once the device section is over."""
        figures, flags, note = floors.floor_verdict(self.floor_for(state, precision), result.runtime_ms,
                                                    result.baseline_ms)
        if figures is not None:
            result.speed_of_light = figures
        result.flags += flags
        if note is not None:
            result.versions["speed_of_light"] = note

    def _time_block(self, child: Child, state: ProblemState, settings: EvalSettings, result: EvalResult,
                    seeds: list[int], verify: list[int], warmup: int, deadline: float,
                    indices: list[int] | None = None, diagnostics: list[dict] | None = None,
                    kept_out: dict[str, Any] | None = None, walls: BlockWall | None = None,
                    launches: LaunchTally | None = None) -> list[float]:
        """The candidate's timed trials on `seeds` (added to `walls` as the worker's clock saw them); the outputs of the trials at positions `verify` are checked
        against the reference, or, with `kept_out`, left there for `_verify_kept` (before the child's next
        command). `indices` number the trials in messages (default: their positions); the child's timing
        diagnostics are appended to `diagnostics`, its own-launch record to `launches`."""
        mark = time.perf_counter()
        children.send(child, {"cmd": "time", "seeds": seeds, "verify": verify, "warmup": warmup,
                              "fresh_buffers": state.fresh_buffers()}, "timing")
        header = children.expect(child, {"timed"}, deadline - time.monotonic(), "timing")
        wall = time.perf_counter() - mark  # the worker's clock: out of the candidate's reach
        trace.record(trace.who_of(child), "time_block", mark)
        faults.numerics_unchanged(header, result)
        times = header.get("times_ms")
        if not (isinstance(times, list) and len(times) == len(seeds) and all(isinstance(x, (int, float)) for x in times)):
            raise Fault(ErrorCategory.RUNTIME, "the timing run returned malformed figures")
        if header.get("tampered"):
            result.flags.append(Flag.HACK.value)
            raise Fault(ErrorCategory.RUNTIME, f"timing functions were replaced: {', '.join(map(str, header['tampered']))}")
        if walls is not None:
            walls.add(wall, len(seeds) + warmup, [float(x) for x in times], header.get("diagnostics"))
        if launches is not None:
            launches.add(header.get("launches"), header.get("forwards"))
        # Correct when checked, aliased when timed: a hack, like wrong values during timing below.
        faults.aliasing_allowed(header.get("aliases"), state.output_aliases, "during timing, ", (Flag.HACK.value,))
        mark = time.perf_counter()
        kept = children.receive(child, header, None, 0, self.transport)
        trace.record(trace.who_of(child), "time_receive", mark)
        add_seconds(result, "timing_receive", time.perf_counter() - mark)
        if isinstance(header.get("seconds"), (int, float)):
            add_seconds(result, "timing_child", float(header["seconds"]))
        if isinstance(header.get("diagnostics"), dict):
            for part, seconds in (header["diagnostics"].get("host_s") or {}).items():
                if isinstance(seconds, (int, float)):
                    add_seconds(result, f"timing_child_{part}", float(seconds))
            if diagnostics is not None:
                diagnostics.append(header["diagnostics"])
        pending = {"verify": list(verify), "indices": indices, "outputs": kept}
        if kept_out is not None:
            kept_out.update(pending)
        else:
            self._verify_kept(state, settings, result, seeds, pending, trace.who_of(child))
        del kept, pending
        return [float(x) for x in times]

    def _verify_kept(self, state: ProblemState, settings: EvalSettings, result: EvalResult, seeds: list[int],
                     pending: dict[str, Any], who: str = "") -> None:
        """Checks the timed outputs `_time_block` kept (once: `pending` is emptied) against the reference's on the
        same seeds; wrong values while timed are a hack."""
        verify, indices, kept = pending.pop("verify", []), pending.pop("indices", None), pending.pop("outputs", {})
        mark = time.perf_counter()
        for position in verify:
            with state.lock:
                reference = self.references.reference_outputs(state, settings.precision, seeds[position],
                                                              cache=False)  # one-off seeds
            outcome = self.references.compare(state, settings.precision, seeds[position], None, reference,
                                              kept.get(f"trial_{position}", []))
            if not outcome.ok:
                trial = indices[position] if indices else position
                result.flags.append(Flag.HACK.value)
                raise Fault(ErrorCategory.MISMATCH, f"outputs during timing were wrong (trial {trial}): {outcome.message}")
        if verify:
            add_seconds(result, "timing_verify", time.perf_counter() - mark)
            trace.record(who, "verify", mark)
        del kept

    def _time_reference_block(self, reference_child: Child, state: ProblemState, indices: list[int], warmup: int,
                              deadline: float, diagnostics: list[dict], walls: BlockWall | None = None) -> list[float]:
        seeds = [secrets.randbits(31) for _ in indices]
        if trace.enabled() and not trace.who_of(reference_child):
            reference_child.trace_who = f"reference#{reference_child.pid}"
        mark = time.perf_counter()
        children.send(reference_child, {"cmd": "time", "seeds": seeds, "verify": [], "warmup": warmup,
                                     "fresh_buffers": state.fresh_buffers()}, "timing the reference")
        header = children.expect(reference_child, {"timed"}, deadline - time.monotonic(), "timing the reference")
        wall = time.perf_counter() - mark
        children.receive(reference_child, header, None, 0, self.transport)
        trace.record(trace.who_of(reference_child), "reference_block", mark)
        times = header.get("times_ms")
        if not (isinstance(times, list) and len(times) == len(seeds)):
            raise Fault(ErrorCategory.INFRA, "the reference's timing run returned malformed figures")
        if isinstance(header.get("diagnostics"), dict):
            diagnostics.append(header["diagnostics"])
        if walls is not None:
            walls.add(wall, len(seeds) + warmup, [float(x) for x in times], header.get("diagnostics"))
        return [float(x) for x in times]
