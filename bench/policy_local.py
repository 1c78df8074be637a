"""Print how long the local backend takes per RL step (sample a group, forward_backward, optim_step).

    .venv/bin/python bench/policy_local.py [--device cpu] [--group 8] [--tokens 64] [--steps 5]

Figures only; nothing is asserted (tests never time things).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from tinker import types

from kernelbench_rl.policy import PolicyConfig, make_service_client


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-model", default="local:tiny")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--rank", type=int, default=8)
    args = parser.parse_args()

    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as log_dir:
        service = make_service_client(
            PolicyConfig(backend="local", base_model=args.base_model, device=args.device, log_dir=log_dir)
        )
        training_client = service.create_lora_training_client(base_model=args.base_model, rank=args.rank).result()
        tokenizer = training_client.get_tokenizer()
        print(f"startup (imports, model build, LoRA): {time.perf_counter() - started:.2f} s")
        prompt = types.ModelInput.from_ints(tokenizer.encode("def forward(self, x):", add_special_tokens=False))
        params = types.SamplingParams(max_tokens=args.tokens, stop=[])
        sample_s, train_s = [], []
        for step in range(args.steps):
            t0 = time.perf_counter()
            sampler = training_client.save_weights_and_get_sampling_client().result()
            sequences = sampler.sample(prompt=prompt, num_samples=args.group, sampling_params=params).result().sequences
            t1 = time.perf_counter()
            ob_len = prompt.length - 1
            datums = []
            for index, sequence in enumerate(sequences):
                model_input = prompt.append(types.EncodedTextChunk(tokens=sequence.tokens[:-1]))
                advantage = 1.0 if index % 2 else -1.0
                datums.append(
                    types.Datum(
                        model_input=model_input,
                        loss_fn_inputs={
                            "target_tokens": [0] * ob_len + sequence.tokens,
                            "logprobs": [0.0] * ob_len + sequence.logprobs,
                            "advantages": [0.0] * ob_len + [advantage] * (model_input.length - ob_len),
                        },
                    )
                )
            training_client.forward_backward(datums, loss_fn="importance_sampling")
            training_client.optim_step(types.AdamParams(learning_rate=1e-3)).result()
            t2 = time.perf_counter()
            sample_s.append(t1 - t0)
            train_s.append(t2 - t1)
            print(f"step {step}: sample {t1 - t0:.3f} s, forward_backward+optim_step {t2 - t1:.3f} s")
        print(
            f"median over {args.steps} steps ({args.group} samples x {args.tokens} tokens, {args.base_model} on "
            f"{args.device}): sample {statistics.median(sample_s):.3f} s, train {statistics.median(train_s):.3f} s, "
            f"step {statistics.median(s + t for s, t in zip(sample_s, train_s)):.3f} s"
        )
        service.close("success")


if __name__ == "__main__":
    main()
