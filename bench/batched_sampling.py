"""The local policy's sampling of an RL step's first turns: one request at a time, against all sent together.

    .venv/bin/python bench/batched_sampling.py [--device cpu] [--problems 8] [--samples 8] [--tokens 64]
    python3 bench/batched_sampling.py --base-model /tmp/qwen1.5b-random --device cuda --tokens 512   (GPU machine)

Both ways sample the same prompts (the bundled problems' task prompts, as training renders them) with the
same parameters, the model warm; the batched way sends them inside `batched_sampling()`, as the rollout
runner does. Reported: wall, rows a second, the ratio, and whether the greedy tokens agree. Figures only;
nothing is asserted (tests never time things).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from tinker import types

from kernelbench_rl.policy import PolicyConfig, make_service_client
from kernelbench_rl.problems import load_problems


def _prompts(tokenizer: Any, count: int) -> list[types.ModelInput]:
    """The first `count` bundled problems' sources as user turns of the model's chat template."""
    prompts = []
    for problem in load_problems()[:count]:
        messages = [{"role": "user", "content": "Write a faster ModelNew for this model:\n\n" + problem.source}]
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        prompts.append(types.ModelInput.from_ints(tokenizer.encode(text, add_special_tokens=False)))
    return prompts


def _sample_all(sampler: Any, prompts: list[types.ModelInput], samples: int, params: types.SamplingParams,
                batched: bool) -> tuple[float, list[list[list[int]]]]:
    started = time.perf_counter()
    if batched:
        with sampler.batched_sampling():
            futures = [sampler.sample(prompt=p, num_samples=samples, sampling_params=params) for p in prompts]
    else:
        futures = [sampler.sample(prompt=p, num_samples=samples, sampling_params=params) for p in prompts]
    responses = [f.result() for f in futures]
    return time.perf_counter() - started, [[list(s.tokens) for s in r.sequences] for r in responses]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-model", default="local:tiny", help="local:tiny or a model folder")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--problems", type=int, default=8, help="prompts (distinct problems)")
    parser.add_argument("--samples", type=int, default=8, help="samples per prompt")
    parser.add_argument("--tokens", type=int, default=64, help="tokens sampled per row (no early stop)")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each way, taking turns; the best is kept")
    parser.add_argument("--out", type=Path, help="write the figures here as JSON")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as log_dir:
        service = make_service_client(
            PolicyConfig(backend="local", base_model=args.base_model, device=args.device, log_dir=log_dir))
        sampler = service.create_sampling_client(base_model=args.base_model).result()
        prompts = _prompts(sampler.get_tokenizer(), args.problems)
        # Greedy and no stop: every row decodes `tokens` tokens both ways, and the two ways can be compared.
        params = types.SamplingParams(max_tokens=args.tokens, temperature=0.0, stop=[])
        _sample_all(sampler, prompts[:1], 1, types.SamplingParams(max_tokens=2, temperature=0.0, stop=[]), False)
        walls: dict[str, list[float]] = {"one_at_a_time": [], "batched": []}
        tokens: dict[str, Any] = {}
        for _ in range(args.repeats):
            for way in walls:
                wall, tokens[way] = _sample_all(sampler, prompts, args.samples, params, way == "batched")
                walls[way].append(wall)
        service.close("success")
    rows = len(prompts) * args.samples
    best = {way: min(values) for way, values in walls.items()}
    agree = sum(a == b for pa, pb in zip(tokens["one_at_a_time"], tokens["batched"]) for a, b in zip(pa, pb))
    report = {
        "date": time.strftime("%Y-%m-%d"), "base_model": args.base_model, "device": args.device,
        "prompts": len(prompts), "samples": args.samples, "rows": rows, "tokens_per_row": args.tokens,
        "prompt_tokens": [p.length for p in prompts], "walls_s": walls,
        "best_s": {way: round(value, 3) for way, value in best.items()},
        "rows_per_s": {way: round(rows / value, 3) for way, value in best.items()},
        "speedup": round(best["one_at_a_time"] / best["batched"], 2),
        "greedy_rows_identical": f"{agree}/{rows}",
    }
    print(json.dumps(report, indent=2))
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    return report


if __name__ == "__main__":
    main()
