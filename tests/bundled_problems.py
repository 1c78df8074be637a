"""The bundled problem of an id, whatever levels the loader reads today, and kernrl's snapshot.

Levels 4-10 are kernrl's (OpenEnv's kernel environment) problems in KernelBench's format. Building
the Problem straight from its file lets the solution tests cover every bundled level with the same
Problem the loader would give.
"""

from __future__ import annotations

from pathlib import Path

from kernelbench_rl.errors import UserError
from kernelbench_rl.problems import BUNDLED_ROOT, Problem, get_problem, parse_problem_id
from kernelbench_rl.problems.model import declared_small_sizes

REPO = Path(__file__).resolve().parents[1]
# kernrl's problems as published (a snapshot beside the checkout); tests that need it skip without it.
KERNRL_PROBLEMS = REPO.parent / "shared" / "kernrl" / "problems"
KERNRL_LEVELS = range(4, 11)


def bundled_problem_path(level: int, number: int) -> Path:
    matches = sorted((BUNDLED_ROOT / f"level{level}").glob(f"{number}_*.py"))
    if len(matches) != 1:
        raise LookupError(f"expected one bundled file for L{level}/{number}, found {[p.name for p in matches]}")
    return matches[0]


def bundled_problem(problem_id: str) -> Problem:
    try:
        return get_problem(problem_id)
    except UserError:  # a level the loader does not read (yet): the same Problem, from the file
        level, number = parse_problem_id(problem_id)
        path = bundled_problem_path(level, number)
        source = path.read_text()
        return Problem(level=level, number=number, name=path.stem, source=source, origin="bundled", path=str(path),
                       small_sizes=declared_small_sizes(source))
