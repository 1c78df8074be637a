"""Training configuration: dataclasses, packaged YAML files, `key=value` overrides."""

from kernelbench_rl.config.schema import (
    CurriculumConfig,
    EnvConfig,
    EvalConfig,
    PolicySection,
    ProblemsConfig,
    RagConfig,
    RewardsConfig,
    SamplingConfig,
    TrainConfig,
    TrainingConfig,
    apply_overrides,
    config_from_dict,
    config_to_dict,
    load_config,
    packaged_config_path,
)

__all__ = [
    "CurriculumConfig", "EnvConfig", "EvalConfig", "PolicySection", "ProblemsConfig", "RagConfig",
    "RewardsConfig", "SamplingConfig", "TrainConfig", "TrainingConfig", "apply_overrides",
    "config_from_dict", "config_to_dict", "load_config", "packaged_config_path",
]
