"""Commands as a user can type them: `kernelbench-rl` and `prefect` live in the virtual environment's
bin folder, which is often not on PATH (`make run` never activates it)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path


def command(name: str) -> str:
    """`name` if the shell finds this environment's copy of it, else the path to that copy."""
    ours = Path(sys.executable).with_name(name)
    if not ours.exists():
        return name
    found = shutil.which(name)
    if found and os.path.realpath(found) == os.path.realpath(ours):
        return name
    try:
        return str(ours.relative_to(Path.cwd()))  # e.g. .venv/bin/kernelbench-rl
    except ValueError:
        return str(ours)
