"""Re-verification: run corpus kernels through our own evaluator and record the verdict.

Corpus labels (Sakana's `Correct`, its speedups) came from harnesses that were exploited, so an
index can be restricted to examples our evaluator has passed (`index build --verified-only`).
Only documents whose PyTorch side is one of our problems can be checked (the evaluator needs the
reference); the others are skipped with a reason and stay unverified (NULL).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kernelbench_rl.errors import UserError
from kernelbench_rl.evaluation.result import categories_without_verdict
from kernelbench_rl.problems import Problem, load_problems
from kernelbench_rl.rag.normalize import normalise_code

VERDICT_CHARS = 300

# (problem id, candidate source, backend) batch -> EvalResult-like objects (correct, error_category, error_message)
EvaluateBatch = Callable[[Sequence[tuple[str, str, str]]], Sequence[Any]]


@dataclass
class VerifyReport:
    checked: int = 0
    passed: int = 0
    failed: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    infra_errors: int = 0  # left unverified so a later run retries them


def match_problem(doc: Mapping[str, Any], problems: Sequence[Problem]) -> Problem | None:
    """The problem a document's PyTorch side is: same KernelBench level/task, or the same normalised source."""
    by_task = {(p.level, p.number): p for p in problems}
    task = (doc.get("kb_level"), doc.get("kb_task"))
    if task in by_task:
        return by_task[task]
    wanted = normalise_code(doc.get("pytorch_code") or "")
    for problem in problems:
        if normalise_code(problem.source) == wanted:
            return problem
    return None


def _default_evaluate(settings: Any = None, **evaluator_kwargs: Any) -> EvaluateBatch:
    from kernelbench_rl.evaluation.result import EvalRequest, EvalSettings

    try:
        from kernelbench_rl.evaluation import Evaluator
    except ImportError:
        raise UserError("The evaluator (kernelbench_rl.evaluation.Evaluator) is not available in this install, so corpus kernels cannot be re-verified yet.") from None

    def run(batch: Sequence[tuple[str, str, str]]) -> Sequence[Any]:
        requests = []
        for problem_id, source, backend in batch:
            request_settings = settings if settings is not None else EvalSettings(backend=backend)
            if getattr(request_settings, "backend", backend) != backend:
                import dataclasses

                request_settings = dataclasses.replace(request_settings, backend=backend)
            requests.append(EvalRequest(problem_id=problem_id, candidate_source=source, settings=request_settings))
        with Evaluator(requests[0].settings, **evaluator_kwargs) as evaluator:
            return evaluator.evaluate(requests)

    return run


def reverify_corpus(
    store: Any,
    *,
    problems: Sequence[Problem] | None = None,
    evaluate: EvaluateBatch | None = None,
    settings: Any = None,
    limit: int | None = None,
    redo: bool = False,
    sources: Sequence[str] | None = None,
    **evaluator_kwargs: Any,
) -> VerifyReport:
    """Evaluate stored kernels against their problems; write verified/verdict to `corpus_docs`.

    `evaluate` defaults to our sandboxed Evaluator; tests may pass any function with its contract.
    """
    from kernelbench_rl.rag.corpus import read_corpus

    problems = list(problems) if problems is not None else load_problems()
    report = VerifyReport()
    docs = [d for d in read_corpus(store) if redo or d.get("verified") is None]
    if sources:
        docs = [d for d in docs if d["source"] in sources]
    batch: list[tuple[str, str, str]] = []
    batch_docs: list[dict[str, Any]] = []
    for doc in docs:
        if limit is not None and len(batch) >= limit:
            break
        problem = match_problem(doc, problems)
        if problem is None:
            report.skipped["pytorch_side_not_a_bundled_problem"] += 1
            continue
        if "class ModelNew" not in doc["kernel_code"]:
            # Sakana rows are bare C++ extensions; KernelBook modules are named <Entry>New.
            report.skipped["kernel_is_not_a_modelnew_module"] += 1
            continue
        batch.append((problem.id, doc["kernel_code"], doc["backend"]))
        batch_docs.append(doc)
    if not batch:
        return report
    runner = evaluate or _default_evaluate(settings, **evaluator_kwargs)
    results = runner(batch)
    updates = []
    for doc, result in zip(batch_docs, results):
        category = getattr(result.error_category, "value", result.error_category)
        report.checked += 1
        if category in categories_without_verdict():
            report.infra_errors += 1
            continue
        passed = bool(result.correct)
        report.passed += passed
        report.failed += not passed
        message = (result.error_message or "").strip().splitlines()[0] if result.error_message else ""
        verdict = f"{category}: {message}" if message else str(category)
        updates.append({"sha256": doc["sha256"], "verified": passed, "verdict": verdict[:VERDICT_CHARS]})
    store.upsert("corpus_docs", updates)
    return report
