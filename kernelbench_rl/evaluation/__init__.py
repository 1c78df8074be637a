"""Evaluation: extraction, static policy, the sandboxed evaluator, timing and worker pools.

The public names below are imported lazily, so the worker side (`python -m
kernelbench_rl.evaluation.worker.worker_process` on a bare GPU box) never pulls in the orchestrator's stack
(DuckDB, polars).
"""

from __future__ import annotations

from kernelbench_rl import lazy_names

_LAZY = {
    "Evaluator": "kernelbench_rl.evaluation.front.api",
    "EvaluatorProtocol": "kernelbench_rl.evaluation.front.api",
    "DaskEvaluator": "kernelbench_rl.evaluation.cluster.cluster",
    "make_evaluator": "kernelbench_rl.evaluation.cluster.cluster",
    "evaluate_source": "kernelbench_rl.evaluation.front.api",
    "evaluate_response": "kernelbench_rl.evaluation.front.api",
    "WorkerPool": "kernelbench_rl.evaluation.front.pool",
}

__all__ = sorted(_LAZY)

__getattr__ = lazy_names.loader(__name__, _LAZY)
