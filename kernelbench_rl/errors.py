"""User-facing errors: one clear sentence, caught by the CLI and turned into an exit code."""


class UserError(Exception):
    """An error the user can fix (bad id, missing path, bad config, missing key).

    The message is one sentence that says what to do; the CLI prints it without a traceback.
    """

    exit_code = 2


class StoreBusyError(UserError):
    """Another process held the DuckDB file for longer than the retry budget."""

    exit_code = 3


class InfraError(Exception):
    """Our infrastructure failed (worker lost, GPU unavailable, service unreachable): retry, never a zero reward."""

    exit_code = 3


class NoVerdictError(InfraError):
    """Nothing was judged: every sample came back without a verdict on its kernel (the CLI's exit code 4, as `eval`'s
    for one kernel without a verdict)."""

    exit_code = 4


def is_infra_failure(exc: BaseException | None) -> bool:
    """Whether an exception is worth an orchestrator retry (infrastructure), not a bug or bad input."""
    return isinstance(exc, (InfraError, StoreBusyError, ConnectionError, TimeoutError))
