"""Per problem, what the worker knows of its reference: the model, inputs, outputs, baselines and size.

Each problem's reference is built after a hidden seed, its inputs made on the device from a pool of
hidden seeds, its outputs cached per seed within a resident budget (the problems used longest ago
dropped first) and its eager baseline timed once. The first request of a problem sizes it (one
reference forward: parameters, inputs, outputs, the forward's peak) and finds which trivial
candidates its inputs cannot tell apart (discrimination.py).
"""

from __future__ import annotations

import collections
import gc
import os
import secrets
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

import torch

from kernelbench_rl.evaluation import trace
from kernelbench_rl.evaluation.sandbox import outputs, runtime, wire
from kernelbench_rl.evaluation.sandbox import timer
from kernelbench_rl.evaluation.verdict import checks, discrimination
from kernelbench_rl.evaluation.worker import reference_budget
from kernelbench_rl.evaluation.worker import memory as footprints
from kernelbench_rl.evaluation.result import EvalSettings, tolerance_for
from kernelbench_rl.evaluation.worker.scheduling import MemoryBudget

SEED_POOL_SIZE = 16
WALL_CALLS = 10  # the reference's calls timed on the worker's clock for the host clock check (reference_wall)
# The reference's first forwards are timed (synchronised) to learn its time a call: the least of them, as the
# first pays for lazy initialisation. Later forwards add no synchronisation.
TIMED_FORWARDS = 3
# A diagnostic for showing that one defence holds alone (bench/floor_check.py, retired; in git history before
# 1406398): "0" gives the timed calls no fresh input buffers each. Never off in a real evaluation.
FRESH_TIMING_BUFFERS = os.environ.get("KBRL_EVAL_FRESH_BUFFERS", "1") != "0"


def discrimination_key(precision: str, given: discrimination.Variant | None) -> tuple[str, str]:
    """A problem's discrimination is settled per precision and per the widened inputs the request hands it."""
    return precision, discrimination.variant_key(given)


@dataclass
class ProblemState:
    """One problem as this worker knows it: its reference module, hidden seeds, what sizing learnt, caches."""

    problem_id: str
    module: Any
    path: str  # the reference's source, as the worker wrote it for import
    init_seed: int
    seed_pool: list[int]
    lock: threading.Lock = field(default_factory=threading.Lock)
    # Held by the request that sizes the problem (first reference on the device): the others wait here,
    # not in the device queue, and find it done.
    sizing: threading.Lock = field(default_factory=threading.Lock)
    models: dict[str, torch.nn.Module] = field(default_factory=dict)
    refs: collections.OrderedDict = field(default_factory=collections.OrderedDict)  # (precision, seed, variant) -> outputs
    # Per (precision, the request's given variant: discrimination.variant_key): which trivial candidates pass the
    # problem's own inputs, and the widened inputs chosen. Keyed by the given variant too, so evaluators that share a
    # pool with different audits (input_variants) each get the inputs theirs hands them, whichever came first.
    discriminations: dict[tuple[str, str], discrimination.Discrimination] = field(default_factory=dict)
    baselines: dict[str, dict[str, Any]] = field(default_factory=dict)
    host_baselines: dict[str, float] = field(default_factory=dict)
    # precision -> the reference's timed calls as this worker's clock saw them (timing/decisions.BlockWall): what the
    # host clock check compares a candidate's own against
    reference_walls: dict[str, Any] = field(default_factory=dict)
    mutates_inputs: bool = False
    # Per output, the input the reference returns itself or a view of (None: a new tensor); learnt with the above.
    output_aliases: list[int | None] = field(default_factory=list)
    input_bytes: int = 0
    output_bytes: int = 0
    param_bytes: int = 0
    forward_bytes: int = 0  # allocation peak of one reference forward beyond parameters and inputs
    forward_s: float | None = None  # one reference forward's wall time, the least of its first TIMED_FORWARDS
    forwards_timed: int = 0
    sized: bool = False
    plan: footprints.MemoryPlan | None = None  # on the GPU, from the sizing run
    too_large: str = ""  # why no evaluation of this problem fits this device ('' when it does)
    floors: dict[str, Any] = field(default_factory=dict)  # precision -> its physical floor on this GPU, or why none
    suite: str = "kernelbench"  # whose tolerance judges its floating outputs (result.tolerance_for)
    index_outputs: checks.IndexOutputs = field(default_factory=dict)  # tie-tolerant index outputs it declares
    last_used: float = 0.0

    def footprint(self) -> footprints.Footprint:
        return footprints.Footprint(self.param_bytes, self.input_bytes, self.output_bytes, self.forward_bytes)

    def unsized(self, precision: str, given: discrimination.Variant | None = None) -> bool:
        return not self.sized or (not self.too_large and discrimination_key(precision, given) not in self.discriminations)

    def discrimination_for(self, precision: str, given: discrimination.Variant | None = None) -> discrimination.Discrimination:
        """What `ReferenceCache.discriminate` found for this precision and given variant ("not sized" before it ran)."""
        return (self.discriminations.get(discrimination_key(precision, given))
                or discrimination.Discrimination(audited=False, reason="not sized"))

    def tolerance_note(self, precision: str) -> str:
        atol, rtol = tolerance_for(self.suite, precision)
        note = f"{self.suite} {precision}: floats atol={atol:g} rtol={rtol:g}; integer and boolean outputs exact"
        if self.index_outputs:
            note += "; tie-tolerant index outputs " + ", ".join(
                f"{o} (input {i}, dim {d})" for o, (i, d) in sorted(self.index_outputs.items()))
        return note

    def timed_calls(self, settings: EvalSettings) -> tuple[int, str]:
        """How many calls the baseline and the candidate are timed for, and why (reference_budget.timed_calls)."""
        return reference_budget.timed_calls(settings.timing_trials, self.forward_s, settings.reference_budget_s)

    def fresh_buffers(self) -> bool:
        """The timing buffer plan, the same for the baseline and the candidate."""
        return FRESH_TIMING_BUFFERS and (self.plan.fresh_buffers if self.plan is not None else True)


class ReferenceCache:
    """The worker's problems (by id, suite and source) and their references, resident within `ref_cache_bytes`."""

    def __init__(self, device: str, root: str, ref_cache_bytes: int, clock: timer.Clock | None) -> None:
        self.device = device
        self.root = root  # where the problems' sources are written to be imported
        self.ref_cache_bytes = ref_cache_bytes
        self.clock = clock
        self.rng_lock = threading.RLock()
        self.problems: dict[str, ProblemState] = {}
        self.problems_lock = threading.Lock()
        self.ref_bytes = 0

    def problem_state(self, problem_id: str, source: str, suite: str = "kernelbench") -> ProblemState:
        key = f"{problem_id}:{suite}:{hash(source)}"
        with self.problems_lock:
            state = self.problems.get(key)
            if state is None:
                path = os.path.join(self.root, f"problem_{len(self.problems)}.py")
                with open(path, "w") as handle:
                    handle.write(source)
                module = runtime.load_module_from_file(path, f"kbrl_reference_{len(self.problems)}")
                state = ProblemState(
                    problem_id=problem_id, module=module, path=path, init_seed=secrets.randbits(31),
                    seed_pool=[secrets.randbits(31) for _ in range(SEED_POOL_SIZE)], suite=suite,
                    index_outputs=checks.declared_index_outputs(getattr(module, checks.INDEX_OUTPUTS_NAME, None)),
                )
                self.problems[key] = state
        return state

    def reference_model(self, state: ProblemState, precision: str) -> torch.nn.Module:
        with self.rng_lock:  # construction seeds and draws from the global generator
            if precision not in state.models:
                before = torch.cuda.memory_allocated() if self.device == "cuda" else 0
                state.models[precision] = runtime.build_model(state.module.Model, state.module, state.init_seed, self.device, precision)
                if self.device == "cuda":
                    state.param_bytes = max(state.param_bytes, torch.cuda.memory_allocated() - before)
        return state.models[precision]

    def inputs(self, state: ProblemState, seed: int, precision: str,
               variant: discrimination.Variant | None = None) -> list[Any]:
        # get_inputs() draws from torch's global generator: one thread at a time, or seeds interleave.
        with self.rng_lock:
            return runtime.make_inputs(state.module, seed, self.device, precision, variant)

    def reference_outputs(self, state: ProblemState, precision: str, seed: int, cache: bool = True,
                          variant: discrimination.Variant | None = None) -> list[torch.Tensor]:
        with self.rng_lock:  # the reference forward may draw random numbers too (dropout)
            return self._reference_outputs(state, precision, seed, cache, variant)

    def _reference_outputs(self, state: ProblemState, precision: str, seed: int, cache: bool,
                           variant: discrimination.Variant | None = None) -> list[torch.Tensor]:
        key = (precision, seed, discrimination.variant_key(variant))
        if key in state.refs:
            state.refs.move_to_end(key)
            return state.refs[key]
        with reference_budget.phase("outputs"):  # bounded by the reference's budget (a sizing's forward: by the sizing's)
            return self._compute_outputs(state, precision, seed, cache, variant, key)

    def _compute_outputs(self, state: ProblemState, precision: str, seed: int, cache: bool,
                         variant: discrimination.Variant | None, key: tuple) -> list[torch.Tensor]:
        model = self.reference_model(state, precision)
        inputs = self.inputs(state, seed, precision, variant)
        state.input_bytes = max(state.input_bytes, sum(t.numel() * t.element_size() for t in runtime.tensor_inputs(inputs)))
        # Whether the reference itself writes its inputs is learnt once, when the problem is sized.
        pristine = runtime.clone_inputs(runtime.tensor_inputs(inputs)) if not state.sized else None
        if self.device == "cuda":
            torch.cuda.reset_peak_memory_stats()
            before_forward = torch.cuda.memory_allocated()
        timed = state.forwards_timed < TIMED_FORWARDS
        started = time.perf_counter()
        with torch.no_grad():
            results = [t.detach() for t in wire.flatten_outputs(model(*inputs))]
        if timed:
            if self.device == "cuda":
                torch.cuda.synchronize()
            seconds = time.perf_counter() - started
            state.forward_s = seconds if state.forward_s is None else min(state.forward_s, seconds)
            state.forwards_timed += 1
        if self.device == "cuda":
            state.forward_bytes = max(state.forward_bytes, torch.cuda.max_memory_allocated() - before_forward)
        if pristine is not None and checks.inputs_unmodified(pristine, runtime.tensor_inputs(inputs)):
            state.mutates_inputs = True  # the reference itself writes its inputs: skip that check
        if pristine is not None:  # (learnt once, like the above: where a candidate may return an input too)
            state.output_aliases = outputs.input_aliases(results, inputs)
        del pristine, inputs
        size = sum(t.numel() * t.element_size() for t in results)
        state.output_bytes = max(state.output_bytes, size)
        # One problem's outputs may take a quarter of the cache at most (a 6 GiB output is recomputed).
        if cache and size <= self.ref_cache_bytes // 4:
            state.refs[key] = results
            self.ref_bytes += size
            while self.ref_bytes > self.ref_cache_bytes and len(state.refs) > 1:
                _, evicted = state.refs.popitem(last=False)
                self.ref_bytes -= sum(t.numel() * t.element_size() for t in evicted)
        return results

    def baseline(self, state: ProblemState, precision: str, settings: EvalSettings, known: dict | None) -> dict[str, float]:
        if known and known.get("eager_ms"):
            state.baselines.setdefault(precision, dict(known))
        if precision not in state.baselines:
            seeds = [secrets.randbits(31) for _ in range(state.timed_calls(settings)[0])]
            with reference_budget.phase("baseline"):
                record = timer.time_forward(
                    self.reference_model(state, precision), lambda s: self.inputs(state, s, precision), seeds,
                    settings.warmup_trials, self.device, self.clock, fresh_buffers=state.fresh_buffers(),
                )
            self.record_baseline(state, precision, settings, record, "worker")
        return state.baselines[precision]

    def reference_wall(self, state: ProblemState, precision: str, settings: EvalSettings) -> tuple[float, int, list[float]]:
        """A short block of the reference's timed calls in this worker, on this process's clock: (wall seconds, calls
        made, event times in ms). For the host clock check where no child timed the reference in this worker (its
        baseline came from the store)."""
        seeds = [secrets.randbits(31) for _ in range(WALL_CALLS)]
        with reference_budget.phase("baseline"):
            mark = time.perf_counter()
            record = timer.time_forward(
                self.reference_model(state, precision), lambda s: self.inputs(state, s, precision), seeds,
                1, self.device, self.clock, fresh_buffers=state.fresh_buffers(),
            )
            wall = time.perf_counter() - mark
        return wall, len(seeds) + 1, list(record.times_ms)

    def record_baseline(self, state: ProblemState, precision: str, settings: EvalSettings,
                        record: timer.TimingRecord, timed_in: str) -> dict[str, Any]:
        """The problem's baseline from its timed calls (`timed_in`: the worker, or a child running the reference),
        with the compiled reference's time when the settings ask for it."""
        entry: dict[str, Any] = {"eager_ms": record.median_ms, "eager_spread_ms": record.iqr_ms, "compile_ms": None,
                                 "timed_in": timed_in,
                                 "diagnostics": record.diagnostics()}  # kept in this worker only, never cached
        if settings.measure_compile_baseline:
            entry["compile_ms"] = self._compile_baseline(state, precision, settings)
        state.baselines[precision] = entry
        return entry

    def _compile_baseline(self, state: ProblemState, precision: str, settings: EvalSettings) -> float | None:
        try:
            compiled = torch.compile(self.reference_model(state, precision))
            seeds = [secrets.randbits(31) for _ in range(settings.timing_trials)]
            record = timer.time_forward(
                compiled, lambda s: self.inputs(state, s, precision), seeds,
                max(settings.warmup_trials, 3), self.device, self.clock, fresh_buffers=state.fresh_buffers(),
            )
            return record.median_ms
        except Exception:  # noqa: BLE001 - an optional figure; inductor may be unavailable
            return None

    def host_baseline(self, state: ProblemState, precision: str, settings: EvalSettings) -> float:
        if precision not in state.host_baselines:
            seeds = [secrets.randbits(31) for _ in range(host_calls(state.timed_calls(settings)[0]))]
            with reference_budget.phase("baseline"):
                state.host_baselines[precision] = timer.host_time_forward(
                    self.reference_model(state, precision), lambda s: self.inputs(state, s, precision),
                    seeds, self.device, self.clock, fresh_buffers=state.fresh_buffers(),
                )
        return state.host_baselines[precision]

    def size(self, state: ProblemState, precision: str, memory: MemoryBudget | None, alone_capacity: int,
             l2_bytes: int, total_memory: int) -> None:
        """One reference forward on the device measures the problem; its plan decides buffers and admission. The caller
        releases the worker's cached device memory afterwards (`release_device_memory`), once the discrimination that
        follows is done too."""
        try:
            with trace.span(state.problem_id, "sizing_forward"):
                self.reference_outputs(state, precision, state.seed_pool[0])
        except torch.OutOfMemoryError as exc:
            self.release_device_memory(force=True)
            if memory is None:
                raise
            first_line = str(exc).splitlines()[0] if str(exc) else ""
            state.too_large = (f"the reference alone does not fit this device's memory beside the evaluator's "
                               f"children ({footprints.gib(memory.capacity)} available to evaluations): {first_line}")[:500]
        finally:
            state.sized = True
        if self.device == "cuda" and not state.too_large:
            state.plan = footprints.plan(state.footprint(), l2_bytes)
            if memory is not None and not state.plan.fits(alone_capacity):
                state.too_large = footprints.too_large_message(state.plan, alone_capacity, total_memory)
        # No release here: the discrimination that follows allocates as much again, and the caller releases once
        # after both (each release's cudaFree took 0.1-0.6 s on an H200, in series with every other sizing).

    def compare(self, state: ProblemState, precision: str, seed: int, variant: discrimination.Variant | None,
                 reference: list[torch.Tensor], candidate: list[torch.Tensor]) -> checks.CheckOutcome:
        """The candidate's outputs against the reference's, by the problem suite's tolerance; the seed's inputs are
        made again only for a problem that declares tie-tolerant index outputs."""
        atol, rtol = tolerance_for(state.suite, precision)
        inputs = (runtime.tensor_inputs(self.inputs(state, seed, precision, variant)) if state.index_outputs else None)
        return checks.compare_outputs(reference, candidate, atol, rtol, index_outputs=state.index_outputs, inputs=inputs)

    def discriminate(self, state: ProblemState, settings: EvalSettings,
                      given: discrimination.Variant | None = None) -> None:
        """Which trivial candidates pass the problem's own inputs, and the widened inputs that tell them apart
        (discrimination.py). Runs beside the sizing forward, alone in device memory."""
        precision, key = settings.precision, discrimination_key(settings.precision, given)
        if state.too_large or key in state.discriminations:
            return

        def run(seed: int, variant: discrimination.Variant | None) -> tuple[list[Any], list[torch.Tensor]]:
            outputs = self.reference_outputs(state, precision, seed, cache=variant is None, variant=variant)
            return self.inputs(state, seed, precision, variant), outputs

        clean = False
        try:
            atol, rtol = tolerance_for(state.suite, precision)
            found = discrimination.discriminate(run, state.seed_pool[:2 + discrimination.CONFIRMATION_SEEDS], atol, rtol,
                                                given, module=state.module, forward_s=state.forward_s)
            clean = True
        except torch.OutOfMemoryError as exc:  # the trivial candidates' buffers: judge on the problem's own inputs
            traceback.clear_frames(exc.__traceback__)
            found = discrimination.Discrimination(audited=False, reason=f"out of device memory ({str(exc)[:120]})")
        finally:
            # Only after an exception, whose frames may hold tensors (a collection then): otherwise the caller releases
            # once after the sizing and this, and the trivial candidates' buffers are gone by their counts.
            if not clean:
                self.release_device_memory(force=True)
        state.discriminations[key] = found

    def release_device_memory(self, force: bool = False) -> None:
        """Hand the worker's cached-but-free device memory back (its caching allocator keeps what the last
        baseline or comparison freed, GiBs at level-1 sizes) and drop the models and outputs of the
        problems used longest ago beyond the resident budget."""
        if self.device != "cuda":
            return
        self.trim_resident()
        if force:
            gc.collect()  # tensors kept alive only by reference cycles (exceptions and their frames)
        if force or torch.cuda.memory_reserved() - torch.cuda.memory_allocated() > (1 << 30):
            torch.cuda.empty_cache()

    def trim_resident(self, keep: ProblemState | None = None) -> None:
        """Drop the least recently used problems' models and outputs past the resident budget (never the
        most recent one); with `keep`, drop every problem's but that one's."""
        with self.problems_lock:
            states = sorted(self.problems.values(), key=lambda st: st.last_used)
        resident = self.ref_bytes + sum(st.param_bytes for st in states if st.models)
        for state in (states if keep is not None else states[:-1]):
            if state is keep:
                continue
            if keep is None and resident <= self.ref_cache_bytes:
                break
            if not state.models and not state.refs:
                continue
            if not state.lock.acquire(blocking=False):
                continue  # in use right now
            try:
                freed = sum(t.numel() * t.element_size() for outs in state.refs.values() for t in outs)
                self.ref_bytes -= freed
                resident -= freed + (state.param_bytes if state.models else 0)
                state.refs.clear()
                state.models.clear()
            finally:
                state.lock.release()


def host_calls(timed_calls: int) -> int:
    """Calls of the host-clock re-timing of an excessive speedup, each side: half the timed calls, at least 10."""
    return max(reference_budget.MIN_TIMED_CALLS, timed_calls // 2)
