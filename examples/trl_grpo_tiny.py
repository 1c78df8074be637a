"""Train the shipped tiny model with TRL's GRPOTrainer on KernelBench problems, on the CPU.

    python examples/trl_grpo_tiny.py                      # one step, in-process evaluator
    python examples/trl_grpo_tiny.py --multi-turn         # Kevin-style 2-turn episodes (rollout_func)
    python examples/trl_grpo_tiny.py --env-url http://127.0.0.1:8000   # rewards from `kernelbench-rl env serve`

The tiny model writes no working kernel, so its rewards are format failures; the point is the
plumbing: our prompts, our evaluator's verdicts and reward presets inside TRL's loop. Swap in a real
model directory with --model for real training.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="local:tiny", help="local:tiny or a local model directory.")
    parser.add_argument("--problems", default="L1/19,L1/20", help="Comma-separated problem ids.")
    parser.add_argument("--steps", type=int, default=1)
    parser.add_argument("--multi-turn", action="store_true", help="2-turn episodes through a rollout_func.")
    parser.add_argument("--env-url", default=None, help="Reward through an env server instead of in-process.")
    parser.add_argument("--db", default=None, help="DuckDB file for verdicts (default: none).")
    parser.add_argument("--output-dir", default=None)
    args = parser.parse_args()
    if args.env_url:  # a wrong URL is one sentence now, not a traceback from inside the trainer
        from kernelbench_rl.integrations.openenv_client import EnvServerUnreachable, require_env_server

        try:
            require_env_server(args.env_url)
        except EnvServerUnreachable as exc:
            print(f"error: {exc}", file=sys.stderr)
            raise SystemExit(2) from None

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import torch

    import kernelbench_rl.integrations.openenv_env  # noqa: F401 - before trl: quiets a dependency's import warning
    from trl import GRPOConfig, GRPOTrainer

    from kernelbench_rl.evaluation import Evaluator
    from kernelbench_rl.evaluation.result import EvalSettings
    from kernelbench_rl.integrations.openenv_env import KernelEnvService
    from kernelbench_rl.envs.kernel_env import EnvSpec
    from kernelbench_rl.integrations.trl import (
        KernelRewardFunction, ServerEpisode, env_reward, kernel_prompt_dataset, make_rollout_func,
    )
    from kernelbench_rl.policy.tiny import load_base_model
    from kernelbench_rl.problems import get_problem
    from kernelbench_rl.store import Store

    problems = [get_problem(pid.strip()) for pid in args.problems.split(",") if pid.strip()]
    loaded = load_base_model(args.model, torch.device("cpu"), seed=0)
    tokenizer = loaded.tokenizer
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    store = Store(args.db) if args.db else None
    # Correctness on the CPU through Triton's interpreter, with one trial: cheap and the same verdict path as train.
    evaluator = Evaluator(EvalSettings(device="cpu", size="small", correctness_trials=1), store=store,
                          problems={p.id: p for p in problems})
    # Without --output-dir the trainer's folder is temporary: nothing is left behind in /tmp.
    scratch = tempfile.TemporaryDirectory(prefix="trl-grpo-tiny-") if not args.output_dir else None
    output_dir = args.output_dir or scratch.name
    config = GRPOConfig(output_dir=output_dir, max_steps=args.steps, per_device_train_batch_size=2, num_generations=2,
                        max_completion_length=24, learning_rate=1e-4, logging_steps=1, report_to=[], save_strategy="no",
                        use_cpu=True, bf16=False, temperature=1.0, seed=0)
    if args.multi_turn:
        service = KernelEnvService(evaluator, problems, [], spec=EnvSpec(turns=2), store=store)
        rollout = make_rollout_func(problems, lambda: (ServerEpisode(env_url=args.env_url) if args.env_url
                                                       else ServerEpisode(service=service)), max_turns=2)
        reward_funcs, extra = [env_reward], {"rollout_func": rollout}
    else:
        reward = (KernelRewardFunction(env_url=args.env_url) if args.env_url
                  else KernelRewardFunction(evaluator.evaluate_responses))
        reward_funcs, extra = [reward], {}
    trainer = GRPOTrainer(model=loaded.model, reward_funcs=reward_funcs, args=config,
                          train_dataset=kernel_prompt_dataset(problems), processing_class=tokenizer, **extra)
    try:
        result = trainer.train()
    finally:
        evaluator.close()
        if scratch is not None:
            scratch.cleanup()
    rewards = [entry for entry in trainer.state.log_history if "reward" in entry]
    kept = f"; output in {output_dir}" if scratch is None else ""
    print(f"trained {result.global_step} step(s); loss {result.training_loss:.4f}; "
          f"mean reward {rewards[-1]['reward'] if rewards else float('nan'):.3f}{kept}")


if __name__ == "__main__":
    main()
