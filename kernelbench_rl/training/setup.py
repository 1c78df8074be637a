"""Setting a run up: the base model, the evaluator and its settings, the problem split, the policy
service's configuration, and the checks and tear-down every run shares (RL, SFT, checkpoint
evaluation, the environment server). Kept apart from the loops so that each of them imports these
without importing another loop.
"""

from __future__ import annotations

import json
import logging
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kernelbench_rl.config.schema import TrainConfig
from kernelbench_rl.errors import UserError
from kernelbench_rl.evaluation.result import EvalSettings
from kernelbench_rl.policy.base import SessionStatus
from kernelbench_rl.problems import Problem, default_levels, load_problems, resolve_problem, split_problems
from kernelbench_rl.store import Store
from kernelbench_rl.training.optim import result_of


def resolve_base_model(config: TrainConfig) -> str:
    return config.resolved_base_model()


def resolve_eval_device(device: str, size: str) -> tuple[str, str]:
    """`auto` -> cuda when torch sees a GPU, else cpu; size `auto` -> real on cuda, small on cpu."""
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    if size == "auto":
        size = "real" if device == "cuda" else "small"
    return device, size


def eval_settings(config: TrainConfig) -> EvalSettings:
    """The evaluator settings of a run (training and checkpoint evaluation alike), `auto` resolved."""
    ev = config.eval
    device, size = resolve_eval_device(ev.device, ev.size)
    return EvalSettings(backend=config.env.kernel_backend, precision=ev.precision, device=device,  # type: ignore[arg-type]
                        size=size, correctness_trials=ev.correctness_trials,  # type: ignore[arg-type]
                        discriminating_trials=ev.discriminating_trials,
                        timing_trials=ev.timing_trials, timeout_s=ev.timeout_s,
                        reference_timeout_s=ev.reference_timeout_s,
                        precision_policy=ev.precision_policy)  # type: ignore[arg-type]


def open_evaluator(config: TrainConfig, store: Store, problems: Sequence[Problem], *, policy_beside: bool = False) -> Any:
    """An Evaluator for `problems` with the run's settings (workers start on first use); the caller closes it.

    policy_beside: this process also runs the run's policy (training, checkpoint evaluation), so a local one
    on the evaluator's GPU gets its memory reserved (policy_memory_reservation)."""
    if config.eval.cluster in ("", "local"):
        from kernelbench_rl.evaluation import Evaluator

        reserved_bytes, device_uuid = policy_memory_reservation(config, policy_beside=policy_beside)
        worker_args = []
        if reserved_bytes:
            worker_args = ["--reserved-memory-gb", f"{reserved_bytes / GIB:.3f}"]
            worker_args += ["--reserved-device-uuid", device_uuid] if device_uuid else []
        return Evaluator(eval_settings(config), num_workers=config.eval.num_workers, store=store,
                         problems_root=config.problems.source_root, problems={p.id: p for p in problems},
                         input_variants=audited_input_variants(config), worker_args=worker_args)
    from kernelbench_rl.evaluation.cluster import make_evaluator  # Dask: imported only when asked for

    return make_evaluator(eval_settings(config), cluster=config.eval.cluster, num_workers=config.eval.num_workers,
                          store=store, problems_root=config.problems.source_root,
                          problems={p.id: p for p in problems}, input_variants=audited_input_variants(config))


GIB = 1 << 30
# Beyond its weights and one training sequence's logits and activations, what a local policy holds at its peak:
# the sampler's KV cache and a group's prompt logits, the optimiser's state, the allocator's slack. A floor; a
# model larger than it gets its weights' size.
POLICY_WORKING_BYTES = 6 * GIB
# One training sequence's logits: bf16 from the model, the fp32 copy, its log-softmax, and both gradients.
LOGIT_BYTES = 16
# Prompt tokens allowed for in the estimate, beside the completion's max_tokens.
PROMPT_TOKENS_ALLOWANCE = 2048
# Activations a transformer layer keeps for the backward pass, bytes per token per hidden unit (34 s b h per layer
# in 16-bit, fused attention, no recomputation: Korthikanti et al., "Reducing Activation Recomputation in Large
# Transformer Models"). With it the estimate for a random 1.5B Qwen at 512 tokens is 21.0 GiB; the trainer's
# allocated peak measured 21.2 GiB on an H100 (bench/RESULTS.md), where the estimate without it read 17.5 GiB.
ACTIVATION_BYTES = 34
# What the process holds beyond the tensors it allocates: the caching allocator's reserved-but-free blocks (its
# reserved peak was 1.09x its allocated one in that step, 23.1 against 21.2 GiB, on an H200) and the CUDA
# context (about 1 GiB under nvidia-smi).
ALLOCATOR_SLACK = 0.12
CUDA_CONTEXT_BYTES = 1 * GIB


def model_weight_bytes(base_model: str) -> int:
    """Bytes of a local model folder's weight files (0 when base_model is no folder: local:tiny, a hub id)."""
    folder = Path(base_model)
    if not folder.is_dir():
        return 0
    return sum(f.stat().st_size for pattern in ("*.safetensors", "*.bin", "*.pt") for f in folder.glob(pattern))


def policy_memory_reservation(config: TrainConfig, *, policy_beside: bool = True) -> tuple[int, str]:
    """(bytes, device uuid): what the evaluator leaves to the policy on the policy's GPU.

    eval.reserved_memory_gb when set (0: nothing); else, when the local policy runs on CUDA (in this process:
    `policy_beside`) beside a local evaluator on CUDA, an estimate of the policy's peak: two copies of its weights (the trainer's and the
    sampler's), one training sequence's logits and activations (prompt allowance + max_tokens) and working memory,
    plus the allocator's slack and the CUDA context. The uuid names the policy's GPU (only that worker keeps the room); ""
    applies to every worker."""
    ev = config.eval
    shares = policy_beside and _policy_shares_eval_gpu(config)
    uuid = _cuda_device_uuid(config.policy.device) if shares else ""
    if ev.reserved_memory_gb is not None:
        return int(ev.reserved_memory_gb * GIB), uuid
    if not shares:
        return 0, ""
    base_model = resolve_base_model(config)
    weights = model_weight_bytes(base_model)
    tokens = min(config.turn_token_budget(), PROMPT_TOKENS_ALLOWANCE + config.max_completion_tokens())
    logits = LOGIT_BYTES * tokens * model_vocab_size(base_model)
    activations = ACTIVATION_BYTES * tokens * _model_config_int(base_model, "hidden_size") * _model_config_int(
        base_model, "num_hidden_layers")
    allocated = 2 * weights + logits + activations + max(POLICY_WORKING_BYTES, weights)
    return int(allocated * (1 + ALLOCATOR_SLACK)) + CUDA_CONTEXT_BYTES, uuid


def model_vocab_size(base_model: str) -> int:
    """The vocabulary of a local model folder's config.json (0 when unknown)."""
    return _model_config_int(base_model, "vocab_size")


def _model_config_int(base_model: str, key: str) -> int:
    """An integer of a local model folder's config.json (0 when unknown)."""
    try:
        return int(json.loads((Path(base_model) / "config.json").read_text())[key])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def _policy_shares_eval_gpu(config: TrainConfig) -> bool:
    from kernelbench_rl.policy import resolve_backend

    if config.eval.cluster not in ("", "local") or resolve_backend(policy_config(config)) != "local":
        return False
    eval_device, _ = resolve_eval_device(config.eval.device, config.eval.size)
    policy_device = config.policy.device
    if policy_device == "auto":
        policy_device = eval_device if eval_device == "cuda" else "cpu"
    return eval_device == "cuda" and policy_device.startswith("cuda")


def _cuda_device_uuid(device: str) -> str:
    """The UUID of the GPU `device` names (auto or cuda: the current one), as the worker reads its own."""
    import torch

    if not torch.cuda.is_available():
        return ""
    index = torch.device(device).index if device.startswith("cuda:") else None
    return str(getattr(torch.cuda.get_device_properties(torch.cuda.current_device() if index is None else index), "uuid", ""))


def problem_audits(config: TrainConfig) -> dict[str, Any]:
    """The problem audit of the configured levels (problems/audit.py; none when `problems.audit` is off)."""
    if not config.problems.audit:
        return {}
    from kernelbench_rl.problems.audit import audit_set

    return audit_set(problem_split(config)[0], config.eval.precision)


def audited_input_variants(config: TrainConfig) -> dict[str, Any]:
    """The widened inputs the audit hands the evaluator (where another problem's reference passes a problem's own)."""
    from kernelbench_rl.problems.audit import given_variants

    return given_variants(problem_audits(config).values())


def policy_config(config: TrainConfig) -> Any:
    """The policy backend's configuration (`kernelbench_rl.policy.PolicyConfig`) for a run."""
    from kernelbench_rl.policy import PolicyConfig

    return PolicyConfig(backend=config.policy.backend, base_model=resolve_base_model(config),
                        lora_rank=config.policy.lora_rank, device=config.policy.device,
                        log_dir=str(config.run_log_dir() / "policy"), seed=config.policy.seed)


def problem_split(config: TrainConfig) -> tuple[list[Problem], list[Problem], list[Problem]]:
    """(all, train, holdout) problems of the configured levels; `problems.ids` plays no part."""
    cfg = config.problems
    levels = cfg.levels if cfg.levels is not None else default_levels(cfg.source_root)
    problems = load_problems(cfg.source_root, levels=levels)
    train, holdout = split_problems(problems, cfg.holdout_fraction, cfg.split_seed)
    return problems, train, holdout


def first_training_ids(config: TrainConfig, count: int) -> list[str]:
    """The first `count` ids of the train split of the configured levels (a flow's `num_problems`)."""
    return [p.id for p in problem_split(config)[1]][:count]


def training_problems(config: TrainConfig) -> list[Problem]:
    """The train split of the configured levels (and ids); the holdout split is never trained on."""
    cfg = config.problems
    # The holdout is always that of the *whole* set, so naming ids can never pull a holdout problem in.
    problems, train, _ = problem_split(config)
    if cfg.ids:
        named = []
        for pid in cfg.ids:  # ours (L1/19), kernrl's (L1_19_ReLU) or a unique prefix of kernrl's
            problem = resolve_problem(pid, problems)
            if problem is None:
                raise UserError(f"Problem {pid} is not among the loaded problems; `kernelbench-rl problems list` shows the ids.")
            named.append(problem.id)
        train_ids = {p.id for p in train}
        train = [p for pid in dict.fromkeys(named) for p in problems if p.id == pid and pid in train_ids]
    unavailable = [p for p in train if p.unavailable_reason]
    if unavailable:  # a problem that cannot run here is never judged, so never trained on
        logging.getLogger(__name__).warning(
            "%d problem(s) left out of training, unavailable here: %s", len(unavailable),
            "; ".join(p.unavailable_reason or "" for p in unavailable[:5]))
        train = [p for p in train if not p.unavailable_reason]
    if not train:
        raise UserError("No training problems are left after the holdout split; add problems or lower problems.holdout_fraction.")
    if cfg.audit:
        from kernelbench_rl.problems.audit import usable_for_reward

        train = usable_for_reward(train, problem_audits(config), warn=logging.getLogger(__name__).warning)
        if not train:
            raise UserError("The problem audit leaves no training problem whose inputs tell right from wrong "
                            "(`kernelbench-rl problems audit` says why); choose other problems or set problems.audit=false.")
    return train


def check_lora_rank(training_client: Any, lora_rank: int, source: str) -> None:
    """A client made from saved state has the LoRA rank it was saved with: policy.lora_rank must match it."""
    rank = getattr(training_client.get_info(), "lora_rank", None)
    if rank is not None and int(rank) != lora_rank:
        raise UserError(f"The {source} was trained with LoRA rank {rank}, so policy.lora_rank={lora_rank} cannot "
                        f"apply to it: set policy.lora_rank={rank}, or start over (a new run id, or sft.enabled=false).")


def close_session(service: Any, status: SessionStatus, detail: str | None = None) -> None:
    """End the policy service's session with the run's outcome (on Tinker: the session's final status).
    A failure to close is a warning: it must not hide the outcome being reported."""
    close = getattr(service, "close", None)
    if close is None:
        return
    try:
        result_of(close(status, detail))
    except Exception as exc:  # noqa: BLE001 - reported, never raised over the run's own outcome
        warnings.warn(f"Closing the policy session ({status}) failed: {type(exc).__name__}: {exc}", stacklevel=2)
