"""SIGINT and SIGTERM as one request to stop a long command (`train`, `sft`, `pipeline`): a supervisor's stop
(systemd, Kubernetes, `kill PID`) ends a run the way a person's Ctrl-C does, with its state saved, the run marked
`stopped` and one line printed, instead of killing it mid-write.

The first signal raises KeyboardInterrupt in the main thread (where the runs' clean-up runs); later ones are
noted and ignored while that clean-up saves the state, so a second Ctrl-C cannot cut a checkpoint in half.
SIGKILL still ends the process at once (and the same command resumes from the last saved step).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator
from typing import Any

_received: list[int] = []  # stop signals this process received, in order
_said: list[str] = []  # the stop lines this process made (a command that said its own needs no generic one)
# Set by a launcher for the interpreter it execs into: SIGINT was ignored only across the exec (so a Ctrl-C while the
# new interpreter starts is not a traceback); the new process's first lines take SIGINT back.
SIGINT_HELD_ENV = "KBRL_SIGINT_HELD_FOR_EXEC"


def _stop_while_starting(signum: int, frame: Any) -> None:
    """SIGINT while a command starts (its imports): nothing was done yet, so one line and exit 130 at once."""
    import os

    os.write(2, f"stopped by {signal_name(signum)} while starting: nothing was done.\n".encode())
    os._exit(130)


def install_startup_stop() -> None:
    """The first lines of an entry point, before its heavy imports: a Ctrl-C from here on is one line and exit 130,
    never a traceback. A SIGINT the shell made the process ignore (a background job) stays ignored, unless it was
    ignored only across a launcher's exec (SIGINT_HELD_ENV)."""
    import os

    held = os.environ.pop(SIGINT_HELD_ENV, None) == "1"
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN and not held:
        return
    signal.signal(signal.SIGINT, _stop_while_starting)


def command_started() -> None:
    """The command's own code runs from here: the first SIGINT raises KeyboardInterrupt where the command is (its
    clean-up runs, then one line and exit 130), later ones are noted and ignored while it cleans up."""
    if signal.getsignal(signal.SIGINT) is _stop_while_starting:
        signal.signal(signal.SIGINT, _stop)


def hold_sigint_for_exec() -> None:
    """Before exec'ing another interpreter that calls install_startup_stop: SIGINT ignored across the exec."""
    import os

    if signal.getsignal(signal.SIGINT) != signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        os.environ[SIGINT_HELD_ENV] = "1"


def stop_line_said() -> str | None:
    """The stop line this process made (stopped_line) before exiting 130, if it made one."""
    return _said[-1] if _said else None


def stop_requested() -> int | None:
    """The first stop signal this process received (None: none)."""
    return _received[0] if _received else None


def signal_name(signum: int | None) -> str:
    return signal.Signals(signum).name if signum else "a stop"


def _stop(signum: int, frame: Any) -> None:
    first = not _received
    _received.append(signum)
    if first:
        raise KeyboardInterrupt(f"stopped by {signal_name(signum)}")


def install_stop_handlers() -> None:
    """SIGTERM, and SIGINT unless it is ignored (a shell's background job), raise KeyboardInterrupt once."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(signum) != signal.SIG_IGN:
            signal.signal(signum, _stop)


@contextlib.contextmanager
def stop_signals() -> Iterator[None]:
    """Within the block, the first SIGINT or SIGTERM raises KeyboardInterrupt in the main thread, later ones are
    ignored (the clean-up that saves the state runs to its end); the previous handlers come back after it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    install_stop_handlers()
    try:
        yield
    finally:
        for signum, handler in previous.items():
            if handler is not None:
                signal.signal(signum, handler)


# The name older callers use.
sigterm_as_interrupt = stop_signals


def note_stops() -> None:
    """Inside an orchestrator's run (a Prefect flow's body): the handlers in place stay in charge (Prefect's SIGTERM
    bridge raises its termination signal, which runs treat as a stop), and each stop signal is first noted, so that
    the command can say one line and quiet the orchestrator's own logs of the stop. Main thread only; idempotent."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in (signal.SIGINT, signal.SIGTERM):
        current = signal.getsignal(signum)
        if not callable(current) or current is _stop or getattr(current, "noting_stops", False):
            continue

        def noting(number: int, frame: Any, previous: Any = current) -> None:
            _received.append(number)
            previous(number, frame)

        noting.noting_stops = True  # type: ignore[attr-defined]
        signal.signal(signum, noting)


class QuietAfterStop(logging.Filter):
    """Drops log records once a stop was requested, and records carrying a user error (one sentence, said by the
    command): an orchestrator's crash reports and tracebacks of either would bury the command's one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        if _received:
            return False
        from kernelbench_rl.errors import UserError

        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, UserError)


def quiet_logs_after_stop() -> None:
    """Put QuietAfterStop on every handler configured so far (Prefect's console handlers included)."""
    quiet = QuietAfterStop()
    handlers = set(logging.getLogger().handlers)
    for logger in list(logging.root.manager.loggerDict.values()):
        handlers.update(getattr(logger, "handlers", []))
    for handler in handlers:
        if not any(isinstance(f, QuietAfterStop) for f in handler.filters):
            handler.addFilter(quiet)


def stopped_line(run_id: str, db_path: Any) -> str:
    """The one line a stopped `train`, `sft` or `pipeline` prints: what stopped it, what is saved, how to go on."""
    how = f"stopped by {signal_name(stop_requested())}" if stop_requested() else "stopped"
    saved = ""
    try:
        from kernelbench_rl.store import Store

        store = Store(db_path, busy_timeout_s=5)
        if store.exists():
            rl, sft = store.fetchall(
                "SELECT (SELECT max(step) FROM checkpoints WHERE run_id = ?), "
                "(SELECT max(step) FROM sft_steps WHERE run_id = ? AND state_path IS NOT NULL)",
                [run_id, run_id], read_only=True)[0]
            if rl is not None:
                saved = f"; its state is saved at step {rl}"
            elif sft is not None:
                saved = f"; its SFT state is saved at step {sft}"
    except Exception:  # noqa: BLE001 - the line is said either way; what is saved is a detail
        saved = ""
    line = f"run {run_id}: {how}{saved or '; nothing was saved yet'}, and the same command resumes it."
    _said.append(line)
    return line
