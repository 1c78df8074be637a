"""A stop (Ctrl-C, SIGTERM) ends a flow run as Cancelled, not Crashed: the run saved its state and can be resumed.

Prefect reports any BaseException leaving a flow or a task as a crash. A flow wrapped here catches the stop once the
work inside has saved its state, sets the task runs the stop interrupted (which Prefect has just marked Crashed) to
Cancelled with the same message, and returns a Cancelled state whose message says what stopped it; a flow that calls
it gets Prefect's CancelledRun, which it treats the same way while a stop is under way.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from prefect.exceptions import CancelledRun
from prefect.states import Cancelled

from kernelbench_rl.commands.signals import signal_name, stop_requested

F = TypeVar("F", bound=Callable[..., Any])


def is_stop(exc: BaseException) -> bool:
    """A stop under way: a stop signal arrived, and this is how it surfaced (not a failure of its own). A SIGTERM
    from a Prefect runner that said why it sends it (cancel, reschedule, hand back) stays Prefect's to report."""
    if _runner_intent() is not None:
        return False
    if stop_requested() is None:
        return isinstance(exc, KeyboardInterrupt)
    return not isinstance(exc, Exception) or isinstance(exc, CancelledRun)


def _runner_intent() -> Any:
    try:
        from prefect._internal.control_listener import get_intent
    except ImportError:  # pragma: no cover - another Prefect: no runner intents to respect
        return None
    return get_intent()


def stopped_state() -> Any:
    how = f"Stopped by {signal_name(stop_requested())}" if stop_requested() else "Stopped"
    return Cancelled(message=f"{how}: the state is saved, and the same command or parameters resume the run.")


def cancel_interrupted_tasks(state: Any) -> None:
    """This flow run's task runs that the stop left Crashed or Running get the stop's Cancelled state (Prefect marks
    a task a signal interrupts Crashed, which reads as a failure though the run saved its state). Nothing is raised:
    an API that does not answer leaves them as they are."""
    try:
        from prefect.client.orchestration import get_client
        from prefect.client.schemas.filters import (
            FlowRunFilter, FlowRunFilterId, TaskRunFilter, TaskRunFilterState, TaskRunFilterStateType,
        )
        from prefect.client.schemas.objects import StateType
        from prefect.runtime import flow_run

        flow_run_id = flow_run.get_id()
        if not flow_run_id:
            return
        with get_client(sync_client=True) as client:
            interrupted = client.read_task_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])),
                task_run_filter=TaskRunFilter(state=TaskRunFilterState(
                    type=TaskRunFilterStateType(any_=[StateType.CRASHED, StateType.RUNNING]))))
            for task_run in interrupted:
                client.set_task_run_state(task_run.id, Cancelled(message=state.message), force=True)
    except Exception:  # noqa: BLE001 - the flow run's own state says it stopped; its tasks' are a courtesy
        pass


def cancelled_on_stop(fn: F) -> F:
    """Put under @flow: a stop that leaves `fn` becomes the flow run's Cancelled state (its interrupted task runs'
    too)."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except BaseException as exc:
            if not is_stop(exc):
                raise
            state = stopped_state()
            cancel_interrupted_tasks(state)
            return state

    return run  # type: ignore[return-value]
