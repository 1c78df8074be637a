"""Where kernrl's snapshot lies for the tests that compare our level 4-10 problems with kernrl's own.

Levels 4-10 of the bundled set are kernrl's (OpenEnv's kernel environment) problems in KernelBench's format;
the loader serves them like any other level (`get_problem`).
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# kernrl's problems as published (a snapshot beside the checkout); tests that need it skip without it.
KERNRL_PROBLEMS = REPO.parent / "shared" / "kernrl" / "problems"
KERNRL_LEVELS = range(4, 11)
