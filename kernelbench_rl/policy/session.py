"""The checks and the tear-down every user of a policy service shares (RL, SFT, checkpoint evaluation)."""

from __future__ import annotations

import warnings
from typing import Any

from kernelbench_rl.errors import UserError
from kernelbench_rl.policy.base import SessionStatus


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
        pending = close(status, detail)
        if callable(getattr(pending, "result", None)):
            pending.result()
    except Exception as exc:  # noqa: BLE001 - reported, never raised over the run's own outcome
        warnings.warn(f"Closing the policy session ({status}) failed: {type(exc).__name__}: {exc}", stacklevel=2)
