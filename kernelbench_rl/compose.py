"""The composition root: a run's configuration resolved once into the parts the library takes.

Commands, Prefect tasks and flows load a `TrainConfig` and call `build_run_parts` once; everything
below them (the RL and SFT loops, checkpoint evaluation, the environment server) takes the
resulting `RunParts` (kernelbench_rl/parts.py) or smaller settings, never the configuration. This
module, `config/`, `commands/`, `tasks/` and `flows/` are the only readers of `TrainConfig`; within this
module `run_settings` is the one place its fields are mapped onto the small settings, and `build_run_parts`
adds what is loaded or measured (the evaluator's room for a policy beside it, the audited problem split).

    parts = build_run_parts(config, policy_beside=True)
    run_training(parts, retrieve=parts.open_retriever())
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelbench_rl.config.schema import (
    EvalConfig,
    ProblemsConfig,
    TrainConfig,
    completion_token_limit,
    config_to_dict,
    turn_token_budget,
)
from kernelbench_rl.envs.kernel_env import EnvSpec
from kernelbench_rl.evaluation.cluster.cluster_spec import ClusterSpec, parse_cluster
from kernelbench_rl.evaluation.result import EvalSettings
from kernelbench_rl.parts import EvaluatorPlan, RunParts, SamplingSettings
from kernelbench_rl.policy.config import PolicyConfig, resolve_backend
from kernelbench_rl.problems.run_split import ProblemSplit, load_audited_split
from kernelbench_rl.problems.run_split import load_split as _load_split
from kernelbench_rl.store import Store


def build_run_parts(config: TrainConfig, *, policy_beside: bool = False) -> RunParts:
    """The run's parts, each resolved once, in one pass down: what the configuration says (`run_settings`), the
    evaluator's room for a policy beside it, then the problems (loaded, split and audited once:
    problems/run_split.py).

    policy_beside: this process also runs the run's policy (training, checkpoint evaluation), so a local one on the
    evaluator's GPU gets its memory reserved."""
    settings = run_settings(config)
    reserved, device_uuid = _reservation(config.eval, settings, policy_beside=policy_beside)
    store = Store(config.db_path)
    split, audits, variants = load_audited_split(
        config.problems.source_root, config.problems.levels, precision=settings.eval.precision,
        holdout_fraction=config.problems.holdout_fraction, seed=config.problems.split_seed, ids=config.problems.ids,
        audit=config.problems.audit)
    evaluator = EvaluatorPlan(settings.eval, cluster=config.eval.cluster, num_workers=config.eval.num_workers,
                              problems_root=config.problems.source_root, input_variants=variants,
                              reserved_bytes=reserved, reserved_device_uuid=device_uuid)
    return RunParts(run_id=settings.run_id, db_path=config.db_path, store=store, run_dir=settings.run_dir,
                    record=settings.record, base_model=settings.base_model, split=split, audits=audits,
                    env=settings.env, evaluator=evaluator, policy=settings.policy, sampling=settings.sampling,
                    training=config.training, rewards=config.rewards, curriculum=config.curriculum, sft=config.sft,
                    rag=config.rag)


# -- the configuration's values, read once ----------------------------------------------------------
@dataclass(frozen=True)
class RunSettings:
    """What the configuration says about a run, field by field, its `auto`s and defaults resolved (the base model,
    the run id, the eval device, the token limits, where evaluations run); no problem is loaded and nothing is run."""

    run_id: str
    run_dir: Path  # <log_dir>/<run_id>
    record: dict[str, Any]  # the configuration as written into runs.config_json
    base_model: str
    env: EnvSpec
    eval: EvalSettings
    cluster: ClusterSpec  # eval.cluster, parsed
    policy: PolicyConfig
    sampling: SamplingSettings


def run_settings(config: TrainConfig) -> RunSettings:
    """The one place where a run's settings are read from its configuration (`TINKER_API_KEY` read once)."""
    ev, env, sampling = config.eval, config.env, config.sampling
    device, size = resolve_eval_device(ev.device, ev.size)
    base_model = config.resolved_base_model()
    run_id = config.resolved_run_id()
    run_dir = Path(config.log_dir) / run_id
    return RunSettings(
        run_id=run_id, run_dir=run_dir, record=config_to_dict(config), base_model=base_model,
        env=EnvSpec(turns=env.turns if env.mode == "kevin" else 1, token_budget=turn_token_budget(env, base_model),
                    max_tokens=completion_token_limit(sampling, base_model),
                    early_stop_on_correct=env.early_stop_on_correct, kernel_backend=env.kernel_backend,
                    instructions=env.instructions, feedback_profile=env.feedback.profile),
        eval=EvalSettings(backend=env.kernel_backend, precision=ev.precision, device=device,  # type: ignore[arg-type]
                          size=size, correctness_trials=ev.correctness_trials,  # type: ignore[arg-type]
                          discriminating_trials=ev.discriminating_trials, timing_trials=ev.timing_trials,
                          timeout_s=ev.timeout_s, reference_timeout_s=ev.reference_timeout_s,
                          precision_policy=ev.precision_policy),  # type: ignore[arg-type]
        cluster=parse_cluster(ev.cluster),
        policy=PolicyConfig(backend=config.policy.backend,  # type: ignore[arg-type]
                            base_model=base_model, lora_rank=config.policy.lora_rank, device=config.policy.device,
                            log_dir=str(run_dir / "policy"), seed=config.policy.seed),
        sampling=SamplingSettings(group_size=sampling.group_size, temperature=sampling.temperature,
                                  top_p=sampling.top_p, max_tokens=sampling.max_tokens,
                                  renderer=config.policy.renderer, thinking=sampling.thinking))


def resolve_eval_device(device: str, size: str) -> tuple[str, str]:
    """`auto` -> cuda when torch sees a GPU, else cpu; size `auto` -> real on cuda, small on cpu."""
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    if size == "auto":
        size = "real" if device == "cuda" else "small"
    return device, size


# -- problems ---------------------------------------------------------------------------------
def load_split(problems: ProblemsConfig) -> ProblemSplit:
    """The split of the configured problems (`problems.run_split.load_split`), without their audit."""
    return _load_split(problems.source_root, problems.levels, holdout_fraction=problems.holdout_fraction,
                       seed=problems.split_seed, ids=problems.ids, audit=problems.audit)


def first_training_ids(config: TrainConfig, count: int) -> list[str]:
    """The first `count` ids of the train split of the configured levels (a flow's `num_problems`)."""
    return [p.id for p in load_split(config.problems).train][:count]


# -- the evaluator's room for a policy on its GPU -------------------------------------------------
def policy_memory_reservation(config: TrainConfig, *, policy_beside: bool = True) -> tuple[int, str]:
    """(bytes, device uuid): what the evaluator of this configuration leaves to the policy on the policy's GPU
    (the figure `build_run_parts` puts in the evaluator's plan)."""
    return _reservation(config.eval, run_settings(config), policy_beside=policy_beside)


def _reservation(ev: EvalConfig, settings: RunSettings, *, policy_beside: bool) -> tuple[int, str]:
    """eval.reserved_memory_gb when set (0: nothing); else, when the local policy runs on CUDA (in this process:
    `policy_beside`) beside a local evaluator on CUDA, the policy's estimated peak (policy/memory.py). The uuid names
    the policy's GPU (only that worker keeps the room); "" applies to every worker."""
    policy, eval_device = settings.policy, settings.eval.device
    policy_device = policy.device if policy.device != "auto" else (eval_device if eval_device == "cuda" else "cpu")
    local_policy_on_cuda = resolve_backend(policy) == "local" and policy_device.startswith("cuda")
    # Only a local pool shares the policy's GPU: a cluster's workers have GPUs of their own.
    shares = policy_beside and local_policy_on_cuda and eval_device == "cuda" and not settings.cluster.is_dask
    uuid = ""
    if shares:
        from kernelbench_rl.policy.memory import cuda_device_uuid

        uuid = cuda_device_uuid(policy.device)
    if ev.reserved_memory_gb is not None:
        from kernelbench_rl.policy.memory import GIB

        return int(ev.reserved_memory_gb * GIB), uuid
    if not shares:
        return 0, ""
    from kernelbench_rl.policy.memory import policy_peak_bytes

    return policy_peak_bytes(policy.base_model, settings.env.token_budget, settings.env.max_tokens), uuid


# -- the environment server -------------------------------------------------------------------
def build_service(config: TrainConfig, *, store: Any | None = None, max_turns: int | None = None,
                  preset: str | None = None, run_id: str | None = None) -> Any:
    """The environment server's `KernelEnvService`: the run's evaluator settings, problem split and environment
    spec (as `train` has them), multi-turn whatever env.mode says (a client that wants one turn ends its episode
    after one)."""
    from dataclasses import replace

    from kernelbench_rl.integrations.openenv_env import DEFAULT_RUN_ID, KernelEnvService
    from kernelbench_rl.rewards.shaping import PRESETS

    parts = build_run_parts(config)
    spec = replace(parts.env, turns=max_turns or config.env.turns)
    chosen = preset or (config.rewards.preset if config.rewards.preset in PRESETS else "correctness")
    evaluator = parts.evaluator.open(store, parts.split.all)
    return KernelEnvService(evaluator, parts.split.train, parts.split.holdout, spec=spec, store=store, preset=chosen,
                            speedup_cap=config.rewards.speedup_cap, run_id=run_id or DEFAULT_RUN_ID,
                            idle_timeout_s=config.env.idle_timeout_s)

