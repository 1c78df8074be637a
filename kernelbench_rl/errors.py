"""User-facing errors and the exit codes of every command: one table, used by the CLI, its help and docs/cli.md.

A new exit code is one line in `ExitCode` (its number, a short label for help texts, its meaning and examples for
docs/cli.md); tests/test_cli_exit_codes.py keeps the docs page and every command's help in step with it.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """How a command ended: scripts and schedulers tell the outcomes apart by this number alone."""

    label: str
    meaning: str
    examples: str

    def __new__(cls, code: int, label: str, meaning: str, examples: str = "") -> ExitCode:
        member = int.__new__(cls, code)
        member._value_ = code
        member.label, member.meaning, member.examples = label, meaning, examples
        return member

    # name = code, label (help texts), meaning (docs), examples (docs)
    OK = 0, "done", "done (`eval`, `profile`: the kernel is correct)"
    FAILED = 1, "not correct, or failed", "done, and the kernel is not correct (`eval`, `profile`); a server or flow that failed", "a mismatch, a compile error, `serve`'s server or `pipeline`'s temporary Prefect API that would not start"
    BAD_INPUT = 2, "bad input", "bad input: one sentence says what to fix", "an unknown problem id, `--level 11`, a bad config key, a missing key or file, `--max-problems 0`, `eval.device=cuda` on a machine without a GPU"
    BUSY = 3, "our side failed or is busy: run again", "our side failed or is busy: run again later (the same command resumes where it can)", "the model server or the Dask scheduler unreachable, a model server that stopped answering mid-run (`eval-model`: a partial report), the DuckDB file held by another process, a run owned by another process, `serve`'s port taken"
    NO_VERDICT = 4, "no verdict", "no verdict on the kernel(s): nothing was judged", "`eval` of a problem too large for the GPU; `eval-model` whose every answer got no verdict"
    DAMAGED = 5, "a file is damaged", "a file of ours is damaged: one sentence names it, says what is wrong and what to do (a damaged latest checkpoint is passed over for the newest intact one first, a damaged retrieval index is rebuilt)", "a truncated or garbled DuckDB file, a run whose every checkpoint is garbled"
    UNWRITABLE = 6, "cannot write", "a folder or file cannot be written (permissions, a read-only file system): one sentence names it", "an unwritable `runs/`"
    DISK_FULL = 7, "disk full", "the disk, or a file-size limit, is full: one sentence names the file; free space and run again (the same command resumes)", "a full disk before a run or after a checkpoint, `ulimit -f` reached while writing the DuckDB file or Prefect's database (`pipeline`)"
    STOPPED = 130, "stopped (resumable)", "stopped by Ctrl-C or SIGTERM: the state is saved and the run marked `stopped`; the same command resumes", "a supervisor's `kill PID` of `train`, `sft` or `pipeline`, or a Ctrl-C in their terminal"


class UserError(Exception):
    """An error the user can fix (bad id, missing path, bad config, missing key).

    The message is one sentence that says what to do; the CLI prints it without a traceback.
    """

    exit_code = ExitCode.BAD_INPUT


class StoreBusyError(UserError):
    """Another process held the DuckDB file for longer than the retry budget."""

    exit_code = ExitCode.BUSY


class InfraError(Exception):
    """Our infrastructure failed (worker lost, GPU unavailable, service unreachable): retry, never a zero reward."""

    exit_code = ExitCode.BUSY


class NoVerdictError(InfraError):
    """Nothing was judged: every sample came back without a verdict on its kernel (as `eval`'s for one kernel
    without a verdict)."""

    exit_code = ExitCode.NO_VERDICT


def is_infra_failure(exc: BaseException | None) -> bool:
    """Whether an exception is worth an orchestrator retry (infrastructure), not a bug or bad input."""
    return isinstance(exc, (InfraError, StoreBusyError, ConnectionError, TimeoutError))
