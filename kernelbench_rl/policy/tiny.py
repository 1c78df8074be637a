"""Model loading for the local backend, including the tiny randomly initialised default model.

`local:tiny` is a 2-layer Llama-style causal LM (hidden 64) built from the config shipped in
kernelbench_rl/assets/tiny_model/ and seeded, so every process builds the same weights; its
tokenizer (byte-level BPE trained on the KernelBench sources) ships beside it. Any other
base_model is a local directory (or a Hugging Face id already in the local cache) loaded with
AutoModelForCausalLM + AutoTokenizer.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernelbench_rl.errors import UserError

if TYPE_CHECKING:
    import torch

TINY_MODEL_NAME = "local:tiny"
TINY_ASSET_DIR = Path(__file__).resolve().parents[1] / "assets" / "tiny_model"

EOS_TOKEN = "<|endoftext|>"
PAD_TOKEN = "<|pad|>"
BOS_TOKEN = "<|bos|>"
IM_START_TOKEN = "<|im_start|>"
IM_END_TOKEN = "<|im_end|>"

# ChatML-style, like Qwen's: each message framed by <|im_start|>role ... <|im_end|>.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def tiny_model_config_dict(
    vocab_size: int, eos_token_id: int, pad_token_id: int, bos_token_id: int
) -> dict[str, Any]:
    """The tiny model's architecture: small enough that a CPU RL step takes about a second."""
    return {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "vocab_size": vocab_size,
        "hidden_size": 64,
        "intermediate_size": 176,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "initializer_range": 0.02,
        "tie_word_embeddings": False,
        "attention_dropout": 0.0,
        "eos_token_id": eos_token_id,
        "pad_token_id": pad_token_id,
        "bos_token_id": bos_token_id,
    }


@dataclass
class LoadedModel:
    model: torch.nn.Module
    tokenizer: Any  # transformers PreTrainedTokenizerBase
    arch: str


def resolve_device(device: str) -> torch.device:
    import torch

    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(
            f"policy.device={device} was requested but CUDA is not available; use policy.device=cpu."
        )
    return torch.device(device)


def load_tokenizer(base_model: str) -> Any:
    from transformers import AutoTokenizer

    source = str(TINY_ASSET_DIR) if base_model == TINY_MODEL_NAME else base_model
    try:
        return AutoTokenizer.from_pretrained(source)
    except (OSError, ValueError) as exc:
        raise UserError(
            f"Cannot load a tokenizer for base model {base_model!r}: give a local model directory "
            f"or {TINY_MODEL_NAME!r} ({type(exc).__name__})."
        ) from exc


def load_base_model(base_model: str, device: torch.device, seed: int, dtype: str = "auto") -> LoadedModel:
    """Load (or, for local:tiny, build with a fixed seed) the base causal LM, in eval mode, frozen."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    tokenizer = load_tokenizer(base_model)
    if base_model == TINY_MODEL_NAME:
        config = AutoConfig.from_pretrained(str(TINY_ASSET_DIR))
        # Fork the RNG so building the model neither depends on nor disturbs the caller's RNG state.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    else:
        torch_dtype: Any = _resolve_dtype(dtype, device)
        try:
            model = AutoModelForCausalLM.from_pretrained(base_model, dtype=torch_dtype)
        except (OSError, ValueError) as exc:
            raise UserError(
                f"Cannot load base model {base_model!r}: give a local model directory or "
                f"{TINY_MODEL_NAME!r} ({type(exc).__name__})."
            ) from exc
    model.to(device)
    model.eval()
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    arch = (getattr(model.config, "architectures", None) or [type(model).__name__])[0]
    return LoadedModel(model=model, tokenizer=tokenizer, arch=arch)


def _resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    import torch

    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    try:
        return getattr(torch, dtype)
    except AttributeError as exc:
        raise UserError(f"Unknown policy.dtype {dtype!r}: use auto, float32 or bfloat16.") from exc


_ATTENTION_HINTS = ("attn", "attention")
_MLP_HINTS = ("mlp", "feed_forward", "ffn")


def lora_target_modules(
    model: torch.nn.Module, train_mlp: bool, train_attn: bool, train_unembed: bool
) -> list[str]:
    """Full names of the Linear layers to adapt, chosen the way Tinker's three flags describe."""
    import torch

    output_embeddings = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    targets: list[str] = []
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.Linear):
            continue
        lowered = name.lower()
        if module is output_embeddings:
            wanted = train_unembed
        elif any(hint in lowered for hint in _ATTENTION_HINTS):
            wanted = train_attn
        elif any(hint in lowered for hint in _MLP_HINTS):
            wanted = train_mlp
        else:
            wanted = False
        if wanted:
            targets.append(name)
    if not targets:
        raise UserError("No Linear layer matches the requested LoRA targets (mlp/attn/unembed) in this model.")
    return targets
