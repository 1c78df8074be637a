"""Evaluation: extraction, static policy, the sandboxed evaluator, timing and worker pools.

The public names below are imported lazily, so the worker side (`python -m
kernelbench_rl.evaluation.worker.worker_process` on a bare GPU box) never pulls in the orchestrator's stack
(DuckDB, polars).
"""

from __future__ import annotations

from typing import Any

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


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'kernelbench_rl.evaluation' has no attribute {name!r}")
