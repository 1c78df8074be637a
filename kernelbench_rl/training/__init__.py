"""GRPO training loop, curriculum, checkpoints and metrics (parts from `kernelbench_rl.compose`)."""

from kernelbench_rl.training.curriculum import Curriculum, CurriculumEvent
from kernelbench_rl.training.grpo import SampleTurn, build_datums, sample_to_datum, score_group
from kernelbench_rl.training.loop import (
    StepResult,
    TrainingRun,
    TrainSummary,
    run_training,
)
from kernelbench_rl.training.rollouts import GroupRollout, PromptRenderer, RolloutRunner

__all__ = [
    "Curriculum", "CurriculumEvent", "GroupRollout", "PromptRenderer", "RolloutRunner", "SampleTurn",
    "StepResult", "TrainSummary", "TrainingRun", "build_datums", "run_training", "sample_to_datum", "score_group",
]
