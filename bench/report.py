"""What a bench script prints at its end: its figures as JSON on stdout and, with --out, in that file too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def show(figures: dict[str, Any], out: str | None, indent: int = 1) -> None:
    text = json.dumps(figures, indent=indent, default=str)
    print(text)
    if out:
        Path(out).write_text(text + "\n", encoding="utf-8")
