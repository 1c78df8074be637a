"""Files we write or read back that can fail under us: damaged files, folders we cannot write, full disks.

Each becomes one sentence naming the file, what is wrong and what to do, with its own exit code
(errors.ExitCode: DAMAGED, UNWRITABLE, DISK_FULL), never a traceback and never a success.

Free space is checked before a run and after each checkpoint (`check_free_space`), and by every process before
its first write to a database (`Store`): a run that would fill the disk stops at a saved step with a clear message
instead of failing mid-write. The floor is `KBRL_MIN_FREE_MB` (default 256 MiB, 0 for none); a value that is not a
number is refused with one sentence (exit code 2), never replaced by the default.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

from kernelbench_rl.errors import ExitCode, UserError

DEFAULT_MIN_FREE_MB = 256


class DamagedFileError(UserError):
    """A file of ours is damaged (truncated, garbled, not the format it should be)."""

    exit_code = ExitCode.DAMAGED


class UnwritableError(UserError):
    """A folder or file cannot be written (permissions, a read-only file system)."""

    exit_code = ExitCode.UNWRITABLE


class DiskFullError(UserError):
    """The disk, a quota or a file-size limit is full."""

    exit_code = ExitCode.DISK_FULL


FULL_ERRNOS = {errno.ENOSPC, errno.EFBIG, errno.EDQUOT}
UNWRITABLE_ERRNOS = {errno.EACCES, errno.EPERM, errno.EROFS}
# DuckDB's own wording of the same failures (it reports them as text, not errno).
FULL_TEXTS = ("no space left on device", "file too large", "disk quota exceeded")
UNWRITABLE_TEXTS = ("permission denied", "read-only file system", "operation not permitted")


class BadSettingError(UserError):
    """A setting of the environment that cannot be read (bad configuration: exit code 2)."""


def min_free_bytes() -> int:
    """The free-space floor in bytes: KBRL_MIN_FREE_MB (a number of MiB, 0 for no floor; unset or empty: 256). A value
    that is not a number of at least 0 is refused (BadSettingError), never replaced by the default."""
    text = os.environ.get("KBRL_MIN_FREE_MB", "").strip()
    if not text:
        return DEFAULT_MIN_FREE_MB * 2**20
    try:
        megabytes = float(text)
    except ValueError:
        megabytes = float("nan")
    if not (0 <= megabytes < float("inf")):
        raise BadSettingError(f"KBRL_MIN_FREE_MB={text!r} is not a number of MiB (the free space a writer keeps, "
                              f"0 for none, default {DEFAULT_MIN_FREE_MB}), so set it to one such as 512, or unset it.")
    return int(megabytes * 2**20)


def _existing_parent(path: Path) -> Path:
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_free_space(path: str | os.PathLike[str], what: str) -> None:
    """Raise DiskFullError if the file system of `path` has less than the floor free (KBRL_MIN_FREE_MB)."""
    floor = min_free_bytes()
    if not floor:
        return
    where = _existing_parent(Path(path))
    try:
        free = shutil.disk_usage(where).free
    except OSError:
        return  # no way to tell: the writes themselves will say
    if free < floor:
        raise DiskFullError(
            f"Only {free / 2**20:.0f} MiB is free on the disk of {path} ({what}; at least {floor / 2**20:.0f} MiB "
            "is needed, KBRL_MIN_FREE_MB), so free some space and run the same command again to go on.")


def failure_kind(exc: BaseException) -> type[UserError] | None:
    """DiskFullError or UnwritableError when `exc` is a write that failed for want of space or permission."""
    number = getattr(exc, "errno", None)
    if number in FULL_ERRNOS:
        return DiskFullError
    if number in UNWRITABLE_ERRNOS:
        return UnwritableError
    text = str(exc).lower()
    if any(part in text for part in FULL_TEXTS):
        return DiskFullError
    if any(part in text for part in UNWRITABLE_TEXTS):
        return UnwritableError
    return None


def write_error(path: str | os.PathLike[str], exc: BaseException, what: str = "") -> UserError | None:
    """The one-sentence error for a failed write of `path` (None: not a space or permission failure)."""
    kind = failure_kind(exc)
    label = f"{what} {path}" if what else str(path)
    if kind is DiskFullError:
        return DiskFullError(f"Could not write {label}: the disk or a file-size limit is full "
                             f"({_reason(exc)}), so free some space and run the same command again to go on.")
    if kind is UnwritableError:
        return UnwritableError(f"Could not write {label}: {_reason(exc)}, so make {_folder(path)} writable "
                               "for this user or point the command at another folder.")
    return None


def _reason(exc: BaseException) -> str:
    number = getattr(exc, "errno", None)
    if number:
        return os.strerror(number)
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:160]


def _folder(path: str | os.PathLike[str]) -> Path:
    p = Path(path)
    return p if p.is_dir() else p.parent


def writable_folder(path: str | os.PathLike[str], what: str) -> Path:
    """Make the folder (and its parents) or raise UnwritableError / DiskFullError naming it."""
    folder = Path(path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".kbrl-write-probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        error = write_error(folder, exc, what)
        if error is None:
            raise
        raise error from None
    return folder
