"""A run's parts: what its configuration resolves to, as the library takes it.

`kernelbench_rl.compose.build_run_parts` builds one `RunParts` from a `TrainConfig`, once per command
or task: the run id, its database's `Store`, the base model (TINKER_API_KEY read once), the problem split (the problem tree
loaded once, `problems/run_split.py`) and its audit, the environment spec, the evaluator's plan, the policy's configuration
and the sampling settings. What is opened from them (an evaluator, the retriever) is opened by whoever
uses it: `parts.evaluator.open(store, problems)`, `parts.open_retriever(store)`. The loops, checkpoint evaluation and the environment server take these
parts and the sections of the configuration they own (training, rewards, curriculum, sft, rag);
none of them sees the whole configuration, and none re-derives what is resolved here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelbench_rl.config.schema import CurriculumConfig, RagConfig, RewardsConfig, SftConfig, TrainingConfig
from kernelbench_rl.envs.kernel_env import EnvSpec, Retriever
from kernelbench_rl.evaluation.result import EvalSettings
from kernelbench_rl.policy.config import PolicyConfig
from kernelbench_rl.problems import Problem
from kernelbench_rl.problems.run_split import ProblemSplit
from kernelbench_rl.store import Store



@dataclass(frozen=True)
class SamplingSettings:
    """How the policy samples: a group of answers per problem, and the chat format they are rendered in."""

    group_size: int = 8
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int | None = None  # as configured (sampling.max_tokens); EnvSpec.max_tokens is the resolved limit
    renderer: str = "auto"  # policy.renderer: a tinker-cookbook renderer name, chat_template or auto
    thinking: bool = False


@dataclass(frozen=True)
class EvaluatorPlan:
    """Everything an evaluator of the run is opened with; `open` starts nothing (workers start on first use).

    reserved_bytes / reserved_device_uuid: what the local pool leaves to a policy trained on its GPU (0: nothing;
    "" applies to every worker), `policy.memory.policy_peak_bytes` unless eval.reserved_memory_gb says."""

    settings: EvalSettings
    cluster: str = "local"
    num_workers: int | None = None
    problems_root: str | None = None
    input_variants: Mapping[str, Any] = field(default_factory=dict)
    reserved_bytes: int = 0
    reserved_device_uuid: str = ""

    @property
    def is_dask(self) -> bool:
        from kernelbench_rl.evaluation.cluster.cluster_spec import parse_cluster

        return parse_cluster(self.cluster).is_dask

    def open(self, store: Any, problems: Sequence[Problem]) -> Any:
        """An evaluator (`kernelbench_rl.evaluation.EvaluatorProtocol`) for `problems`; the caller closes it."""
        from kernelbench_rl.evaluation import make_evaluator

        extra: dict[str, Any] = {}
        if self.reserved_bytes and not self.is_dask:
            from kernelbench_rl.policy.memory import GIB

            extra["worker_args"] = ["--reserved-memory-gb", f"{self.reserved_bytes / GIB:.3f}"] + (
                ["--reserved-device-uuid", self.reserved_device_uuid] if self.reserved_device_uuid else [])
        return make_evaluator(self.settings, cluster=self.cluster, num_workers=self.num_workers, store=store,
                              problems_root=self.problems_root, problems={p.id: p for p in problems},
                              input_variants=dict(self.input_variants), **extra)


@dataclass(frozen=True)
class RunParts:
    """One run's configuration, resolved once (see the module's docstring)."""

    run_id: str
    db_path: str
    store: Store  # the run's database (db_path), one handle for whoever reads or writes it
    run_dir: Path  # the run's own folder under log_dir: checkpoints, TensorBoard, the local policy's files
    record: Mapping[str, Any]  # the configuration as written into runs.config_json
    base_model: str
    split: ProblemSplit
    audits: Mapping[str, Any]  # problem id -> problems.audit.ProblemAudit (empty with problems.audit=false)
    env: EnvSpec
    evaluator: EvaluatorPlan
    policy: PolicyConfig
    sampling: SamplingSettings
    training: TrainingConfig = field(default_factory=TrainingConfig)
    rewards: RewardsConfig = field(default_factory=RewardsConfig)
    curriculum: CurriculumConfig = field(default_factory=CurriculumConfig)
    sft: SftConfig = field(default_factory=SftConfig)
    rag: RagConfig = field(default_factory=RagConfig)

    @property
    def rag_k(self) -> int:
        """Retrieved examples per prompt (0: retrieval is off)."""
        return self.rag.k if self.rag.enabled else 0

    def open_retriever(self, store: Any | None = None) -> Retriever | None:
        """The run's RA-ICL prompt examples (`kernelbench_rl.rag.retrieve.open_retriever`: leak-free against the
        holdout of the run's problem source, split as the run splits it); None when retrieval is off. `store`: the
        run's database unless given."""
        from kernelbench_rl.rag.retrieve import open_retriever

        return open_retriever(self.rag, store or self.store, backend=self.env.kernel_backend,
                              kernelbench_root=self.split.source_root, holdout_fraction=self.split.holdout_fraction,
                              split_seed=self.split.seed)
