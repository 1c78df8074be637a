"""Retry policy shared by our tasks: retry infrastructure failures only."""

from __future__ import annotations

from typing import Any

from kernelbench_rl.errors import is_infra_failure

INFRA_RETRIES = 2
INFRA_RETRY_DELAY_S = 10


def retry_on_infra(task: Any, task_run: Any, state: Any) -> bool:
    """Prefect retry_condition_fn: a bad kernel, bad config or bug fails once; infra is retried."""
    try:
        exc = state.result(raise_on_failure=False)
    except BaseException as err:  # the state may raise the exception itself
        exc = err
    return is_infra_failure(exc if isinstance(exc, BaseException) else None)
