"""GRPO training loop, curriculum, checkpoints and metrics (parts from `kernelbench_rl.compose`).

The public names below are imported on first use: the loop and GRPO pull in the Tinker SDK and torch (seconds),
which a module of this package that needs neither (the checkpoint evaluation's report, the checkpoints' file checks)
and the commands that import one of those do not pay for.
"""

from __future__ import annotations

from kernelbench_rl import lazy_names

_LAZY = {
    "Curriculum": "kernelbench_rl.training.curriculum",
    "CurriculumEvent": "kernelbench_rl.training.curriculum",
    "SampleTurn": "kernelbench_rl.training.grpo",
    "build_datums": "kernelbench_rl.training.grpo",
    "sample_to_datum": "kernelbench_rl.training.grpo",
    "score_group": "kernelbench_rl.training.grpo",
    "StepResult": "kernelbench_rl.training.loop",
    "TrainingRun": "kernelbench_rl.training.loop",
    "TrainSummary": "kernelbench_rl.training.loop",
    "run_training": "kernelbench_rl.training.loop",
    "GroupRollout": "kernelbench_rl.training.rollouts",
    "PromptRenderer": "kernelbench_rl.training.rollouts",
    "RolloutRunner": "kernelbench_rl.training.rollouts",
}

__all__ = sorted(_LAZY)

__getattr__ = lazy_names.loader(__name__, _LAZY)
