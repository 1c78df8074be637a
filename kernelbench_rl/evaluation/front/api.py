"""The evaluator: extraction and static checks here, everything that runs code in the workers.

    with Evaluator(EvalSettings(device="cpu"), store=Store(path)) as ev:
        results = ev.evaluate([EvalRequest("L1/19", source, settings)])

An identical (problem, candidate sha256, settings) never runs twice: verdicts are cached in DuckDB
(`evaluations`), and eager baselines in `baselines` per (problem, source sha256, precision,
hardware, size) are handed to the workers so a known baseline is never re-timed on the card that timed it
(timing/decisions.usable_baseline: a worker never uses another card's; on a host of several GPUs, each times its own once).
"""

from __future__ import annotations

import dataclasses
import platform
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, as_completed
from typing import Any, Protocol, runtime_checkable

from kernelbench_rl.evaluation.front.pool import WorkerPool, pool_shape
from kernelbench_rl.evaluation.result import ErrorCategory, EvalRequest, EvalResult, EvalSettings, Flag, StaticReport
from kernelbench_rl.evaluation.static_policy import check_static, is_hack
from kernelbench_rl.problems import Problem, find_problem


@dataclasses.dataclass
class _Pending:
    index: int
    request: EvalRequest
    problem: Problem
    future: Future | None = None
    result: EvalResult | None = None
    static: StaticReport | None = None
    static_s: float = 0.0


def _static_check(source: str, backend: str, reference_source: str, precision: str,
                  precision_policy: str = "warn") -> StaticReport | None:
    try:
        return check_static(source, backend, reference_source=reference_source, precision=precision,
                            precision_policy=precision_policy)
    except RecursionError:  # a pathological source: the runtime checks still apply
        return None


@runtime_checkable
class EvaluatorProtocol(Protocol):
    """What training, checkpoint evaluation and the CLI use: the local `Evaluator` and the Dask-backed
    `cluster.DaskEvaluator` both provide it (one result per request, in order; `on_result` as each finishes)."""

    def evaluate(self, requests: Sequence[EvalRequest],
                 on_result: Callable[[int, EvalResult], None] | None = None) -> list[EvalResult]: ...

    def evaluate_responses(self, problem_ids: Sequence[str], responses: Sequence[str]) -> list[EvalResult]: ...

    def start(self) -> Any: ...

    def close(self) -> None: ...


class Evaluator:
    """A pool of sandboxed evaluation workers with a DuckDB-backed verdict cache.

    `pool`: a running `WorkerPool` to borrow instead of starting one (one warm pool shared by several evaluators in
    a notebook, a bench script or a test run). A borrowed pool is the lender's: close() and `with` leave it running
    (the evaluator only lets go of it) and the lender closes it. It keeps the shape it was started with (workers,
    compiles at once, evaluations in flight, warm children, worker arguments), so those arguments may not be
    given with it, and its device must be the settings' (else ValueError). What borrowers share is what lives in
    the workers: warm children, compiled builds, each problem's reference state (model, hidden seeds, cached
    outputs, sizing, baselines; keyed by the problem's id, suite and source, so a changed problem is a new entry),
    the pool's memory of references too slow to judge, and the workers' environment as it was when the pool
    started. What each evaluator keeps to itself: its settings, problems, store and verdict cache, static checks
    and `baselines`. A verdict depends on the request and the problem's reference, not on which evaluator sent it:
    a worker settles a problem's widened inputs per precision and per the `input_variants` entry a request carries,
    so borrowers with different input variants each get the inputs theirs hand them.
    """

    def __init__(
        self,
        settings: EvalSettings | None = None,
        *,
        num_workers: int | None = None,
        store: Any | None = None,
        problems_root: str | None = None,
        problems: Mapping[str, Problem] | None = None,
        parallel_compiles: int | None = None,
        warm_children: int | None = None,
        in_flight: int | None = None,
        static_checks: bool = True,
        worker_args: Sequence[str] = (),
        input_variants: Mapping[str, dict[str, Any]] | None = None,
        kernelbench_root: str | None = None,  # the older name of problems_root
        pool: WorkerPool | None = None,
    ) -> None:
        self.settings = settings or EvalSettings()
        if pool is not None:
            _check_lent(pool, self.settings.device, num_workers=num_workers, parallel_compiles=parallel_compiles,
                        warm_children=warm_children, in_flight=in_flight, worker_args=worker_args)
            num_workers, worker_args = pool.num_workers, pool.extra_worker_args
            parallel_compiles, in_flight, warm_children = pool.parallel_compiles, pool.in_flight, pool.warm_children
        self.num_workers = num_workers
        self.store = store
        self.problems_root = problems_root or kernelbench_root
        self.problems = dict(problems or {})
        # Widened inputs the problem audit chose for problems whose own inputs another problem's reference passes
        # (problems/audit.py); the worker finds the trivial-candidate cases by itself.
        self.input_variants = dict(input_variants or {})
        self.parallel_compiles, self.in_flight, self.warm_children = pool_shape(
            self.settings.device, num_workers, parallel_compiles, in_flight, warm_children)
        self.static_checks = static_checks
        self.worker_args = list(worker_args)
        self._pool: WorkerPool | None = pool
        self._borrowed = pool is not None
        self._pool_lock = threading.Lock()
        self._hardware = ""
        # Eager baselines this evaluator has measured or read, by (problem, source sha256, precision,
        # hardware, size): handed to every later request, with or without a store, so a new pool (or a
        # restarted worker) never re-times a known baseline. Another evaluator may be seeded from it.
        self.baselines: dict[tuple[str, str, str, str, str], dict[str, Any]] = {}
        self._identity = ""

    # -- lifecycle -------------------------------------------------------------------------
    @property
    def pool(self) -> WorkerPool:
        with self._pool_lock:
            if self._pool is None:
                if self._borrowed:
                    raise RuntimeError("this evaluator was closed and its pool was borrowed: it has none to use now")
                self._pool = WorkerPool(
                    self.settings.device, self.num_workers, parallel_compiles=self.parallel_compiles,
                    warm_children=self.warm_children, in_flight=self.in_flight, worker_args=self.worker_args,
                )
            return self._pool

    def start(self) -> Evaluator:
        """Start the workers now and wait until they are ready (else they start on first use)."""
        infos = self.pool.wait_ready()
        if infos and infos[0]:
            self._hardware = str(infos[0].get("hardware", ""))
        return self

    def close(self, wait: bool = True) -> None:
        """Stop the pool; `wait=False` does not wait for its workers to exit (WorkerPool.close), for a command's
        last step. A borrowed pool is left running: the evaluator only lets go of it."""
        if self._pool is not None and not self._borrowed:
            self._pool.close(wait=wait)  # also removes the pool's home
        self._pool = None

    def __enter__(self) -> Evaluator:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- evaluation ------------------------------------------------------------------------
    @property
    def kernelbench_root(self) -> str | None:
        return self.problems_root

    def problem(self, problem_id: str) -> Problem:
        """The problem an id names in any accepted form (ours, kernrl's, a unique prefix): among the problems given,
        else in the problem source (an unknown or ambiguous id raises UserError)."""
        if problem_id not in self.problems:
            self.problems[problem_id] = find_problem(problem_id, list(self.problems.values()), self.problems_root)
        return self.problems[problem_id]

    def evaluate(self, requests: Sequence[EvalRequest],
                 on_result: Callable[[int, EvalResult], None] | None = None) -> list[EvalResult]:
        """One result per request, in order. Kernel faults are results; lost workers come back as INFRA.

        All requests go to the pool at once. `on_result(index, result)` is called as each one finishes
        (in completion order, from this thread): progress bars, or keeping what finished when a caller
        stops waiting early."""
        results: list[EvalResult | None] = [None] * len(requests)
        requests = [self._keyed(r) for r in requests]
        cached = self._cached([r.cache_key for r in requests])
        to_run: dict[str, _Pending] = {}
        duplicates: dict[int, str] = {}
        fresh: list[EvalResult] = []
        for index, request in enumerate(requests):
            key = request.cache_key
            if key in cached:
                results[index] = dataclasses.replace(cached[key], cached=True)
                if on_result is not None:
                    on_result(index, results[index])
                continue
            if key in to_run:
                duplicates[index] = key
                continue
            early = self._pre_checks(request)
            if isinstance(early, EvalResult):
                results[index] = early
                fresh.append(early)
                if on_result is not None:
                    on_result(index, early)
                continue
            problem, static, static_s = early
            to_run[key] = _Pending(index, request, problem, static=static, static_s=static_s)
        twins: dict[str, list[int]] = {}
        for index, key in duplicates.items():
            twins.setdefault(key, []).append(index)

        def finished(item: _Pending) -> None:
            if on_result is not None:
                on_result(item.index, item.result)
                for index in twins.get(item.request.cache_key, []):
                    on_result(index, dataclasses.replace(item.result, cached=True))

        self._run(to_run, finished)
        for pending in to_run.values():
            results[pending.index] = pending.result
            fresh.append(pending.result)
        for index, key in duplicates.items():
            results[index] = dataclasses.replace(to_run[key].result, cached=True)
        self._record([r for r in fresh if not r.error_category.is_ours])
        return [r for r in results if r is not None]

    def evaluate_responses(self, problem_ids: Sequence[str], responses: Sequence[str]) -> list[EvalResult]:
        """Extract the kernel from each model response, then evaluate; no code -> ErrorCategory.FORMAT.

        `format_ok` is the extraction's: the block parses, defines ModelNew and uses the backend. Code that
        misses that is still evaluated (its verdict says why it fails), but earns no format credit: a
        code fence alone is not the answer format, and a policy warm-started on kernels writes one always."""
        from kernelbench_rl.evaluation.source.extract import extract_kernel

        if len(problem_ids) != len(responses):
            raise ValueError("problem_ids and responses must have the same length")
        results: list[EvalResult | None] = [None] * len(responses)
        requests: list[EvalRequest] = []
        where: list[int] = []
        extract_s: list[float] = []
        well_formed: list[bool] = []
        for index, (problem_id, response) in enumerate(zip(problem_ids, responses)):
            t = time.perf_counter()
            extraction = extract_kernel(response, backend=self.settings.backend)
            seconds = time.perf_counter() - t
            if not extraction.code:
                request = EvalRequest(problem_id, "", self.settings)
                failure = EvalResult.failure(request, ErrorCategory.FORMAT, extraction.reason or "no kernel code was found")
                failure.phase_seconds["extract"] = seconds
                results[index] = failure
                continue
            requests.append(EvalRequest(problem_id, extraction.code, self.settings))
            where.append(index)
            extract_s.append(seconds)
            well_formed.append(bool(extraction.format_ok))
        for index, seconds, ok, result in zip(where, extract_s, well_formed, self.evaluate(requests)):
            result.format_ok = ok
            result.phase_seconds.setdefault("extract", seconds)
            results[index] = result
        return [r for r in results if r is not None]

    # -- pieces ----------------------------------------------------------------------------
    def _keyed(self, request: EvalRequest) -> EvalRequest:
        """The request keyed to the reference and the hardware it is judged on (an unknown id raises UserError)."""
        changes: dict[str, str] = {}
        problem = self.problem(request.problem_id)
        if problem.id != request.problem_id:  # kernrl's form or a prefix: verdicts are keyed by our id
            changes["problem_id"] = problem.id
        if not request.problem_sha256:
            changes["problem_sha256"] = problem.sha256
        if not request.hardware:
            changes["hardware"] = self.device_identity()
        return dataclasses.replace(request, **changes) if changes else request

    def device_identity(self) -> str:
        """What judges the verdicts: the CPU's architecture, or the GPU's name and compute capability.

        On a GPU this waits for the workers (they name the device they hold); the CPU needs none.
        """
        if self._identity:
            return self._identity
        if self.settings.device != "cuda":
            self._identity = f"cpu:{platform.machine()}"
            return self._identity
        infos = self.pool.wait_ready()
        info = infos[0] if infos and infos[0] else {}
        self._hardware = self._hardware or str(info.get("hardware", ""))
        self._identity = f"{info.get('hardware', 'cuda')} sm_{info.get('arch', '?')}"
        return self._identity

    def _pre_checks(self, request: EvalRequest) -> tuple[Problem, StaticReport | None, float] | EvalResult:
        """Problem lookup and the static policy; returns the problem, or the verdict when it ends here."""
        problem = self.problem(request.problem_id)  # an unknown id raises UserError: the caller's mistake
        if problem.unavailable_reason:  # it cannot run here: no verdict on the kernel, as for a kernel's missing feature
            return EvalResult.failure(request, ErrorCategory.UNAVAILABLE, problem.unavailable_reason)
        if request.settings.device != self.settings.device:
            return EvalResult.failure(
                request, ErrorCategory.INFRA,
                f"this evaluator runs on {self.settings.device}, the request asks for {request.settings.device}",
            )
        if not self.static_checks:
            return problem, None, 0.0
        t = time.perf_counter()
        settings = request.settings
        report = _static_check(request.candidate_source, settings.backend, problem.source, settings.precision,
                               settings.precision_policy)
        seconds = time.perf_counter() - t
        if report is None or report.ok:
            return problem, report, seconds
        syntax = any(e.split(":", 1)[0].strip() == "syntax" for e in report.errors)
        category = ErrorCategory.COMPILE if syntax else ErrorCategory.STATIC
        result = EvalResult.failure(request, category, "; ".join(report.errors)[:700], static=report, format_ok=True)
        if is_hack(report):
            result.flags.append(Flag.HACK.value)
        result.phase_seconds["static"] = seconds
        return result

    def _baseline_for(self, problem: Problem, settings: EvalSettings) -> dict[str, Any] | None:
        if settings.device != "cuda" or not self._hardware:
            return None
        key = (problem.id, problem.sha256, settings.precision, self._hardware, settings.size)
        if key in self.baselines:
            return dict(self.baselines[key])
        if self.store is None:
            return None
        try:
            rows = self.store.fetchall(
                "SELECT eager_ms, eager_spread_ms, compile_ms, timed_in FROM baselines WHERE problem_id = ? AND source_sha256 = ? "
                "AND precision = ? AND hardware = ? AND size = ?",
                [problem.id, problem.sha256, settings.precision, self._hardware, settings.size], read_only=True,
            )
        except Exception:  # noqa: BLE001 - no file or table yet
            return None
        if not rows or rows[0][0] is None:
            return None
        self.baselines[key] = {"eager_ms": rows[0][0], "eager_spread_ms": rows[0][1], "compile_ms": rows[0][2],
                               "timed_in": rows[0][3]}
        return dict(self.baselines[key])

    def _run(self, pending: dict[str, _Pending], finished: Callable[[_Pending], None] | None = None) -> None:
        if not pending:
            return
        pool = self.pool
        if not self._hardware and self.settings.device == "cuda":
            infos = pool.wait_ready()
            self._hardware = str(infos[0].get("hardware", "")) if infos and infos[0] else ""
        for item in pending.values():
            request = item.request
            payload = {
                "problem_id": request.problem_id,
                "candidate_source": request.candidate_source,
                "candidate_sha256": request.candidate_sha256,
                "settings": dataclasses.asdict(request.settings),
                "problem_source": item.problem.source_for(request.settings.size),
                # Whose tolerance judges it (result.tolerance_for): the problem's suite, KernelBench's or kernrl's.
                "suite": item.problem.suite,
                "baseline": self._baseline_for(item.problem, request.settings),
                "input_variant": self.input_variants.get(request.problem_id),
            }
            item.future = pool.submit(payload, request.settings.timeout_s)
        baselines = []
        by_future = {item.future: item for item in pending.values()}
        for future in as_completed(by_future):
            item = by_future[future]
            answer = future.result()
            request = item.request
            if "infra" in answer:
                result = EvalResult.failure(request, ErrorCategory.INFRA, str(answer["infra"])[:500], format_ok=True)
            else:
                result = EvalResult.from_dict(answer["result"])
                result.candidate_sha256 = request.candidate_sha256
                result.settings_hash = request.verdict_hash
                self._hardware = self._hardware or result.hardware
                if answer.get("baseline") and result.hardware:
                    baselines.append(self._remember_baseline(request, item.problem, result.hardware, answer["baseline"]))
            if item.static is not None:
                result.static = item.static
                result.phase_seconds["static"] = item.static_s
            result.format_ok = True
            item.result = result
            if finished is not None:
                finished(item)
        if baselines and self.store is not None:
            self.store.upsert("baselines", baselines)

    def _remember_baseline(self, request: EvalRequest, problem: Problem, hardware: str,
                           baseline: dict[str, Any]) -> dict[str, Any]:
        """A worker's fresh baseline, kept for later requests; returns its row for the store. The store keeps baselines
        per GPU model, not per card: the card (`gpu`) stays in this evaluator's memory only (a worker never uses a
        baseline of another card, and one that names none only when it is alone on its host)."""
        self.baselines[(request.problem_id, problem.sha256, request.settings.precision, hardware,
                        request.settings.size)] = dict(baseline)
        return {"problem_id": request.problem_id, "source_sha256": problem.sha256, "suite": problem.suite,
                "precision": request.settings.precision, "hardware": hardware, "size": request.settings.size,
                **{k: v for k, v in baseline.items() if k != "gpu"}}

    def _cached(self, keys: list[str]) -> dict[str, EvalResult]:
        if self.store is None or not keys:
            return {}
        return self.store.get_cached_evaluations(keys)

    def _record(self, results: list[EvalResult]) -> None:
        if self.store is not None and results:
            for result in results:  # a verdict names its problem's suite, the worker's or (static, format) ours
                result.versions.setdefault("suite", self.problem(result.problem_id).suite)
            self.store.record_evaluations(results)


def _check_lent(pool: WorkerPool, device: str, **shape: Any) -> None:
    """A pool lent to an Evaluator runs on its settings' device and keeps the shape it was started with."""
    if pool.device != device:
        raise ValueError(f"the borrowed pool runs on {pool.device} and these settings on {device}: "
                         "an evaluator can borrow only a pool of its own device")
    given = [name for name, value in shape.items() if value]
    if given:
        raise ValueError(f"{', '.join(given)} cannot be given with a borrowed pool: it keeps the shape its lender "
                         "started it with")


def evaluate_source(problem_id: str, source: str, settings: EvalSettings | None = None, **evaluator_kwargs: Any) -> EvalResult:
    settings = settings or EvalSettings()
    with Evaluator(settings, **evaluator_kwargs) as evaluator:
        return evaluator.evaluate([EvalRequest(problem_id, source, settings)])[0]


def evaluate_response(problem_id: str, response: str, settings: EvalSettings | None = None, **evaluator_kwargs: Any) -> EvalResult:
    settings = settings or EvalSettings()
    with Evaluator(settings, **evaluator_kwargs) as evaluator:
        return evaluator.evaluate_responses([problem_id], [response])[0]
