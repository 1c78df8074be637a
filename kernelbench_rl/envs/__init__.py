"""Environments: single-turn and multi-turn (Kevin) kernel writing, prompts and feedback."""

from kernelbench_rl.envs.feedback import Feedback, clean_error_line, refinement_feedback
from kernelbench_rl.envs.kernel_env import EnvGroupBuilder, EnvSpec, KernelEnv, Turn, make_group_builders

__all__ = [
    "EnvGroupBuilder", "EnvSpec", "Feedback", "KernelEnv", "Turn", "clean_error_line",
    "make_group_builders", "refinement_feedback",
]
