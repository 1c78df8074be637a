"""What a local policy holds on its GPU at its peak: the estimate an evaluator on the same GPU leaves room for.

The evaluator's workers admit candidates by free device memory; a policy trained in the same process
group on that GPU would otherwise be squeezed out by them (docs/evaluator.md). Plain arithmetic over
a local model folder's files and config.json; nothing is loaded.
"""

from __future__ import annotations

import json
from pathlib import Path

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


def policy_peak_bytes(base_model: str, token_budget: int, max_tokens: int) -> int:
    """The local policy's peak on its GPU: two copies of its weights (the trainer's and the sampler's), one training
    sequence's logits and activations (prompt allowance + max_tokens, at most the turn's token budget) and working
    memory, plus the allocator's slack and the CUDA context."""
    weights = model_weight_bytes(base_model)
    tokens = min(token_budget, PROMPT_TOKENS_ALLOWANCE + max_tokens)
    logits = LOGIT_BYTES * tokens * model_vocab_size(base_model)
    activations = ACTIVATION_BYTES * tokens * _model_config_int(base_model, "hidden_size") * _model_config_int(
        base_model, "num_hidden_layers")
    allocated = 2 * weights + logits + activations + max(POLICY_WORKING_BYTES, weights)
    return int(allocated * (1 + ALLOCATOR_SLACK)) + CUDA_CONTEXT_BYTES


def model_weight_bytes(base_model: str) -> int:
    """Bytes of a local model folder's weight files (0 when base_model is no folder: local:tiny, a hub id)."""
    folder = Path(base_model)
    if not folder.is_dir():
        return 0
    return sum(f.stat().st_size for pattern in ("*.safetensors", "*.bin", "*.pt") for f in folder.glob(pattern))


def model_vocab_size(base_model: str) -> int:
    """The vocabulary of a local model folder's config.json (0 when unknown)."""
    return _model_config_int(base_model, "vocab_size")


def _model_config_int(base_model: str, key: str) -> int:
    """An integer of a local model folder's config.json (0 when unknown)."""
    try:
        return int(json.loads((Path(base_model) / "config.json").read_text())[key])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def cuda_device_uuid(device: str) -> str:
    """The UUID of the GPU `device` names (auto or cuda: the current one), as the evaluator's worker reads its own."""
    import torch

    if not torch.cuda.is_available():
        return ""
    index = torch.device(device).index if device.startswith("cuda:") else None
    return str(getattr(torch.cuda.get_device_properties(torch.cuda.current_device() if index is None else index), "uuid", ""))
