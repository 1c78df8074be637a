"""Can a command write where it was told to, before it starts work?

A command that writes (a DuckDB file, an index folder, an export folder) asks first, so that a read-only place is one
sentence naming it with exit code 6 (`UnwritableError`) before anything is loaded, embedded, judged or paid for,
never a traceback at the end nor a server that answers 500 to every request. Nothing is made: a folder that does
not exist yet is judged by the nearest one above it that does (where it would be made), and the probe (an empty
folder made and removed at once) leaves no trace. Permission bits do not stop root, so the probe writes for real:
an immutable folder (`chattr +i`), a read-only mount or a path under a file are found whoever runs the command.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

from kernelbench_rl.store.files import UnwritableError, write_error


def _nearest_existing(path: Path) -> Path:
    """The path itself if it exists, else the nearest folder above it that does (or a file in the way)."""
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _unwritable(path: Path, what: str, exc: OSError) -> UnwritableError:
    error = write_error(path, exc, what)
    if isinstance(error, UnwritableError):
        return error
    reason = os.strerror(exc.errno) if exc.errno else type(exc).__name__
    return UnwritableError(f"Could not write {what} {path}: {reason}, so point the command at a folder it can "
                           "write, or make that one writable for this user.")


def _probe(folder: Path, target: Path, what: str) -> None:
    """Make and remove an empty folder in `folder` (what writing a file or a folder there needs)."""
    if not folder.is_dir():
        raise UnwritableError(f"Could not write {what} {target}: {folder} is a file, not a folder, so choose a "
                              "path that is not under a file.")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".kbrl-write-probe-", dir=folder))
    except OSError as exc:
        raise _unwritable(target, what, exc) from None


def check_writable_folder(path: str | os.PathLike[str], what: str) -> None:
    """A folder the command will write into (or make, or replace): it, or where it would be made, takes writes."""
    target = Path(path).expanduser()
    found = _nearest_existing(target)
    if found == target.absolute() and target.is_file():
        found = found.parent  # a file to replace (`export --overwrite`): its folder must take the new one
    _probe(found, target, what)


def check_writable_file(path: str | os.PathLike[str], what: str) -> None:
    """A file the command will write (a DuckDB file: its folder takes its log and lock files too): the file, if it
    exists, opens for writing (nothing is written), and its folder, or where it would be made, takes writes."""
    target = Path(path).expanduser()
    if target.is_dir():
        raise UnwritableError(f"Could not write {what} {target}: it is a folder, so give the path of a file.")
    if target.exists():
        try:
            os.close(os.open(target, os.O_WRONLY | os.O_APPEND))
        except OSError as exc:
            if exc.errno not in (errno.ETXTBSY,):
                raise _unwritable(target, what, exc) from None
        _probe(target.absolute().parent, target, what)
        return
    _probe(_nearest_existing(target.parent), target, what)
