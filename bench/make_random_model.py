"""Write a real-size model with random weights (and a tokenizer) to a folder the local backend loads by path.

    python bench/make_random_model.py --arch qwen2.5-coder-1.5b --out models/qwen1.5b-random
    kernelbench-rl train policy.backend=local policy.base_model=models/qwen1.5b-random ...

For machines that cannot download weights: speed and memory depend on the shape alone. See
kernelbench_rl/policy/random_model.py for what is written; prints it as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernelbench_rl.errors import UserError  # noqa: E402
from kernelbench_rl.policy.random_model import ARCHITECTURES, TOKENIZER_VOCAB, make_random_model  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="qwen2.5-coder-1.5b", choices=sorted(ARCHITECTURES))
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    parser.add_argument("--device", default="auto", help="where the weights are drawn: auto (cuda if present) | cpu | cuda")
    parser.add_argument("--tokenizer-vocab", type=int, default=TOKENIZER_VOCAB)
    args = parser.parse_args(argv)
    try:
        info = make_random_model(args.arch, args.out, seed=args.seed, dtype=args.dtype, device=args.device,
                                 tokenizer_vocab=args.tokenizer_vocab)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(info, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
