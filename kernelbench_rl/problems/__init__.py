"""Problems: the model, the loaders and the train/holdout split."""

from kernelbench_rl.problems.loaders import (
    BUNDLED_ROOT,
    KERNRL_ROOT_HINT,
    SOLUTIONS_ROOT,
    default_levels,
    find_problem,
    get_problem,
    list_solutions,
    load_hf_problems,
    load_problems,
    load_solution,
    resolve_problems_root,
)
from kernelbench_rl.problems.model import (
    Problem,
    describe_problems,
    is_kernrl_form,
    make_problem_id,
    parse_problem_id,
    resolve_problem,
    unknown_problem_message,
)
from kernelbench_rl.problems.split import holdout_ids, split_problems

__all__ = [
    "BUNDLED_ROOT", "KERNRL_ROOT_HINT", "SOLUTIONS_ROOT", "Problem", "default_levels", "describe_problems",
    "find_problem", "get_problem", "holdout_ids", "is_kernrl_form", "list_solutions", "load_hf_problems",
    "load_problems", "load_solution", "make_problem_id", "parse_problem_id", "resolve_problem",
    "resolve_problems_root", "split_problems", "unknown_problem_message",
]
