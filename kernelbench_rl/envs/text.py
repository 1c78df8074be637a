"""The text-side helpers the environments use, from their owners: prompts (envs/prompts.py) and
extraction (evaluation/source/extract.py); plus the plain-text form of a chat prompt."""

from __future__ import annotations

from kernelbench_rl.envs.prompts import build_messages, build_prompt
from kernelbench_rl.evaluation.source.extract import extract_kernel, strip_reasoning

__all__ = ["build_messages", "build_prompt", "extract_kernel", "messages_to_text", "strip_reasoning"]


def messages_to_text(messages: list[dict[str, str]]) -> str:
    """The plain-text form of a prompt (what a model without a chat template reads; what the store keeps).

    For build_messages' system + user pair this equals build_prompt's string."""
    return "\n\n".join(m["content"] for m in messages)
