"""Rebuild the tiny model's shipped assets: a byte-level BPE tokenizer and a model config.

The tokenizer is trained on the repository's KernelBench problem and solution sources (plus
printable ASCII so every character has a token), so the tiny default policy speaks "PyTorch and
Triton" tokens. Run from the repository root:

    .venv/bin/python -m kernelbench_rl.policy.build_tiny_assets

The output (tokenizer.json, tokenizer_config.json, config.json) is committed; tests never rebuild it.
"""

from __future__ import annotations

import argparse
import json
import string
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from kernelbench_rl.policy.tiny import (
    BOS_TOKEN,
    CHAT_TEMPLATE,
    EOS_TOKEN,
    IM_END_TOKEN,
    IM_START_TOKEN,
    PAD_TOKEN,
    TINY_ASSET_DIR,
    tiny_model_config_dict,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
SPECIAL_TOKENS = [EOS_TOKEN, PAD_TOKEN, BOS_TOKEN, IM_START_TOKEN, IM_END_TOKEN]


def training_texts(kernelbench_dir: Path) -> list[str]:
    """Every problem and solution source, plus an ASCII line so no printable character is unknown."""
    texts = [path.read_text(encoding="utf-8") for path in sorted(kernelbench_dir.rglob("*.py"))]
    texts.append(string.printable)
    return texts


def build_tokenizer(texts: list[str], vocab_size: int) -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


def chatml_tokenizer(corpus_dir: Path, vocab_size: int, model_max_length: int) -> Any:
    """A ChatML byte-level BPE tokenizer (transformers' fast tokenizer, Qwen's special tokens and chat template)
    trained on the texts of `corpus_dir`."""
    from transformers import PreTrainedTokenizerFast

    hf_tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=build_tokenizer(training_texts(corpus_dir), vocab_size),
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        bos_token=BOS_TOKEN,
        additional_special_tokens=[IM_START_TOKEN, IM_END_TOKEN],
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,
    )
    hf_tokenizer.chat_template = CHAT_TEMPLATE
    return hf_tokenizer


def write_assets(out_dir: Path, vocab_size: int, kernelbench_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    hf_tokenizer = chatml_tokenizer(kernelbench_dir, vocab_size, 4096)
    hf_tokenizer.save_pretrained(str(out_dir))
    config = tiny_model_config_dict(
        vocab_size=len(hf_tokenizer),
        eos_token_id=hf_tokenizer.eos_token_id,
        pad_token_id=hf_tokenizer.pad_token_id,
        bos_token_id=hf_tokenizer.bos_token_id,
    )
    (out_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {out_dir} (vocab {len(hf_tokenizer)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=TINY_ASSET_DIR)
    parser.add_argument("--vocab-size", type=int, default=2048)
    parser.add_argument("--kernelbench", type=Path, default=REPO_ROOT / "KernelBench")
    args = parser.parse_args()
    write_assets(args.out, args.vocab_size, args.kernelbench)


if __name__ == "__main__":
    main()
