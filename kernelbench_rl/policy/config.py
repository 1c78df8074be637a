"""How to reach the policy: its configuration and which backend serves it.

The backends (local.py, tinker_backend.py) and the factory that picks one all read this module; it
imports none of them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from kernelbench_rl.errors import UserError
from kernelbench_rl.policy.tiny import TINY_MODEL_NAME

Backend = Literal["auto", "local", "tinker"]
TINKER_API_KEY_ENV = "TINKER_API_KEY"
BACKENDS: tuple[str, ...] = ("auto", "local", "tinker")


@dataclass
class PolicyConfig:
    """How to reach the policy.

    backend: "local" (transformers + peft here), "tinker" (the Tinker service), or "auto":
        local when base_model is "local:..." or an existing directory, otherwise tinker when
        TINKER_API_KEY is set, otherwise local.
    base_model: "local:tiny" (the shipped tiny model), a local model directory, or a Tinker model
        name such as "Qwen/Qwen3-8B".
    lora_rank: LoRA rank for new training clients (Tinker's default is 32).
    device / dtype: local backend only ("auto" picks cuda when available; bfloat16 on cuda).
    log_dir: local backend only: where save_state / save_weights_for_sampler write.
    seed: local backend: seeds the tiny model's weights, LoRA init and sampling.
    tinker_base_url: tinker backend only: overrides the service URL (None: the SDK's default).
    cpu_threads: local backend on CPU: torch threads of the policy's worker thread (it does not
        change other threads); 0 picks 1 for the tiny model (small ops gain nothing from threads
        and lose a lot on a busy machine) and torch's default otherwise.
    """

    backend: Backend = "auto"
    base_model: str = TINY_MODEL_NAME
    lora_rank: int = 32
    device: str = "auto"
    dtype: str = "auto"
    log_dir: str = "runs/policy"
    seed: int = 0
    tinker_base_url: str | None = None
    cpu_threads: int = 0


def resolve_backend(config: PolicyConfig) -> Literal["local", "tinker"]:
    if config.backend not in BACKENDS:
        raise UserError(f"Unknown policy.backend {config.backend!r}: choose one of {', '.join(BACKENDS)}.")
    if config.backend != "auto":
        return config.backend
    if config.base_model.startswith("local:") or Path(config.base_model).is_dir():
        return "local"
    return "tinker" if os.environ.get(TINKER_API_KEY_ENV) else "local"
