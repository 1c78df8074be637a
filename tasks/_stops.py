"""A stop (Ctrl-C, SIGTERM) ends a flow run as Cancelled, not Crashed: the run saved its state and can be resumed.

Prefect reports any BaseException leaving a flow as a crash. A flow wrapped here catches the stop once the work inside
has saved its state, and returns a Cancelled state whose message says what stopped it; a flow that calls it gets
Prefect's CancelledRun, which it treats the same way while a stop is under way.
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


def cancelled_on_stop(fn: F) -> F:
    """Put under @flow: a stop that leaves `fn` becomes the flow run's Cancelled state."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except BaseException as exc:
            if not is_stop(exc):
                raise
            return stopped_state()

    return run  # type: ignore[return-value]
