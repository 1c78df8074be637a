"""Problems: the model, the loaders and the train/holdout split."""

from kernelbench_rl.problems.loaders import (
    BUNDLED_ROOT,
    SOLUTIONS_ROOT,
    find_problem,
    get_problem,
    list_solutions,
    load_hf_problems,
    load_problems,
    load_solution,
    resolve_problems_root,
)
from kernelbench_rl.problems.model import Problem, make_problem_id, parse_problem_id, resolve_problem
from kernelbench_rl.problems.split import holdout_ids, split_problems

__all__ = [
    "BUNDLED_ROOT", "SOLUTIONS_ROOT", "Problem", "find_problem", "get_problem", "holdout_ids", "list_solutions",
    "load_hf_problems", "load_problems", "load_solution", "make_problem_id", "parse_problem_id", "resolve_problem",
    "resolve_problems_root", "split_problems",
]
