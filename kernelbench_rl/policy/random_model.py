"""Real-size models with random weights, written to a folder the local backend loads by path.

No weights can be downloaded on an air-gapped GPU machine, yet memory, sampling and training speed
depend only on a model's shape. This builds a known architecture from a config written out here,
initialises it at random (seeded), and saves it in bf16 with a byte-level BPE tokenizer trained in
process on the KernelBench sources, so `policy.base_model=<folder>` runs exactly as a downloaded
model would:

    python bench/make_random_model.py --arch qwen2.5-coder-1.5b --out models/qwen1.5b-random

The tokenizer speaks ChatML (<|im_start|>, <|im_end|>, <|endoftext|> as Qwen's does), so both the
tokenizer's own chat template (`policy.renderer=auto` or `chat_template`) and tinker-cookbook's Qwen
renderers (`policy.renderer=qwen3_instruct`) work with it. Its vocabulary is smaller than the
model's: the embedding keeps the architecture's full size (as Qwen's own is padded past its
tokenizer), and ids past the tokenizer decode to nothing.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from kernelbench_rl.errors import UserError

REPO_ROOT = Path(__file__).resolve().parents[2]
CORPUS_DIR = REPO_ROOT / "KernelBench"
TOKENIZER_VOCAB = 8192

# Qwen2.5-Coder-1.5B's published architecture (1.54 B parameters, embedding tied to the output layer).
_QWEN25_CODER_15B: dict[str, Any] = {
    "model_type": "qwen2",
    "architectures": ["Qwen2ForCausalLM"],
    "vocab_size": 151936,
    "hidden_size": 1536,
    "intermediate_size": 8960,
    "num_hidden_layers": 28,
    "num_attention_heads": 12,
    "num_key_value_heads": 2,
    "max_position_embeddings": 32768,
    "max_window_layers": 28,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "hidden_act": "silu",
    "initializer_range": 0.02,
    "tie_word_embeddings": True,
    "use_sliding_window": False,
    "sliding_window": 131072,
    "attention_dropout": 0.0,
    "use_cache": True,
}

# The same family at a size a CPU test builds and trains in seconds.
_QWEN2_TINY: dict[str, Any] = {
    **_QWEN25_CODER_15B,
    "vocab_size": 4096,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_window_layers": 2,
    "max_position_embeddings": 8192,
}

ARCHITECTURES: dict[str, dict[str, Any]] = {
    "qwen2.5-coder-1.5b": _QWEN25_CODER_15B,
    "qwen2-tiny": _QWEN2_TINY,
}



def architecture(name: str) -> dict[str, Any]:
    if name not in ARCHITECTURES:
        raise UserError(f"Unknown architecture {name!r}: choose one of {', '.join(ARCHITECTURES)}.")
    return dict(ARCHITECTURES[name])


def build_tokenizer(vocab_size: int, corpus_dir: Path = CORPUS_DIR) -> Any:
    """A ChatML byte-level BPE tokenizer (transformers' fast tokenizer) trained on the problem sources."""
    from kernelbench_rl.policy.build_tiny_assets import chatml_tokenizer

    if not corpus_dir.is_dir():
        raise UserError(f"The tokenizer's training corpus {corpus_dir} is missing (run from a checkout of the repository).")
    return chatml_tokenizer(corpus_dir, vocab_size, 32768)


def make_random_model(arch: str, out_dir: str | Path, *, seed: int = 0, dtype: str = "bfloat16",
                      device: str = "auto", tokenizer_vocab: int = TOKENIZER_VOCAB) -> dict[str, Any]:
    """Build `arch` with random weights and save it (config, safetensors, tokenizer) into out_dir.

    Returns what was written: parameter count, bytes on disk, seconds taken. The weights are drawn on
    `device` (auto: cuda when available, a 1.5 B model initialises in seconds there) and saved from it.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    started = time.perf_counter()
    out = Path(out_dir)
    values = architecture(arch)
    tokenizer = build_tokenizer(min(tokenizer_vocab, values["vocab_size"]))
    if len(tokenizer) > values["vocab_size"]:
        raise UserError(f"The tokenizer has {len(tokenizer)} tokens, more than {arch}'s vocabulary of {values['vocab_size']}.")
    values.update(eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id,
                  pad_token_id=tokenizer.pad_token_id)
    model_type = values.pop("model_type")
    config = AutoConfig.for_model(model_type, **values)
    torch_dtype = getattr(torch, dtype, None)
    if not isinstance(torch_dtype, torch.dtype):
        raise UserError(f"Unknown dtype {dtype!r}: use bfloat16, float16 or float32.")
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
    parameters = sum(p.numel() for p in model.parameters())
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    del model
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    info = {
        "arch": arch, "out": str(out.resolve()), "parameters": parameters, "dtype": dtype, "seed": seed,
        "tokenizer_vocab": len(tokenizer), "model_vocab": values["vocab_size"],
        "bytes_on_disk": sum(f.stat().st_size for f in out.iterdir() if f.is_file()),
        "seconds": round(time.perf_counter() - started, 1),
    }
    (out / "kbrl_random_model.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    return info
