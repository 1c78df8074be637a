"""TRL's GRPOTrainer on KernelBench: a dataset, a reward function and a multi-turn rollout_func.

    from trl import GRPOConfig, GRPOTrainer
    from kernelbench_rl.integrations.trl import KernelRewardFunction, kernel_prompt_dataset

    reward = KernelRewardFunction(evaluator.evaluate_responses)       # in-process evaluator
    reward = KernelRewardFunction(env_url="http://127.0.0.1:8000")    # or the env server
    trainer = GRPOTrainer(model, reward_funcs=[reward], train_dataset=kernel_prompt_dataset(problems), ...)

The dataset's prompts are our training prompts (chat messages); its `problem_id` column reaches
the reward function as a keyword, as TRL passes dataset columns. Rewards come from our reward
presets over our evaluator's verdicts, so they equal what `train` would give the same kernels.
An infrastructure failure (a lost worker, an env server that stopped answering) gives None, TRL's
"no reward": TRL (1.16) leaves such a completion out of its group's baseline and gives it no advantage;
it is never a zero. This module imports neither trl nor torch at import time: it stays importable where
trl is not installed.

Multi-turn (Kevin-style refinement): `make_rollout_func(episodes, ...)` generates with the
trainer's model, sends each turn's kernel to the environment, appends the environment's feedback
turn (masked out of the loss through `env_mask`), and returns the episode's discounted return as
`env_reward`, which `env_reward` (the reward function) hands to the trainer. A turn the environment
could not judge (infra) is sent again as the environment asks, up to INFRA_RESENDS times; an episode
with a turn still unjudged then has no return (None), never a zero.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from kernelbench_rl.envs.prompts import build_messages
from kernelbench_rl.envs.text import messages_to_text
from kernelbench_rl.evaluation.result import EvalResult
from kernelbench_rl.problems import Problem
from kernelbench_rl.rewards.returns import discounted_returns
from kernelbench_rl.rewards.shaping import score

EvaluateFn = Callable[[list[str], list[str]], list[EvalResult]]
INFRA_RESENDS = 2  # an unjudged turn (infra) is sent again this many times before its episode goes unscored


def completion_text(completion: Any) -> str:
    """TRL hands completions as strings, or (conversational) as lists of messages: the assistant's text."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list):
        return "".join(str(m.get("content", "")) for m in completion if isinstance(m, dict) and m.get("role") == "assistant")
    if isinstance(completion, dict):
        return str(completion.get("content", ""))
    return str(completion)


def kernel_prompt_dataset(problems: Sequence[Problem], backend: str = "triton", conversational: bool = True) -> Any:
    """A `datasets.Dataset` with `prompt` (our training prompt) and `problem_id` columns."""
    from datasets import Dataset

    rows = []
    for problem in problems:
        messages = build_messages(problem, backend)
        rows.append({"prompt": messages if conversational else messages_to_text(messages), "problem_id": problem.id})
    return Dataset.from_list(rows)


class KernelRewardFunction:
    """A GRPOTrainer reward function: each completion's kernel evaluated and scored with a preset.

    Exactly one of `evaluate` (Evaluator.evaluate_responses or anything of its shape) and `env_url`
    (a `kernelbench-rl env serve` server: one single-turn episode per completion) is given."""

    def __init__(self, evaluate: EvaluateFn | None = None, *, env_url: str | None = None,
                 preset: str = "correctness", speedup_cap: float = 8.0, concurrency: int = 8) -> None:
        if (evaluate is None) == (env_url is None):
            raise ValueError("pass exactly one of evaluate (an in-process evaluator) and env_url (an env server)")
        if env_url is not None:
            from kernelbench_rl.integrations.openenv_client import require_env_server

            require_env_server(env_url)  # a wrong URL fails here, in one sentence, not inside the trainer
        self.evaluate = evaluate
        self.env_url = env_url
        self.preset = preset
        self.speedup_cap = speedup_cap
        self.concurrency = concurrency
        self.__name__ = f"kernelbench_{preset}"  # TRL logs rewards under the function's name

    def __call__(self, prompts: Sequence[Any] | None = None, completions: Sequence[Any] = (),
                 problem_id: Sequence[str] | None = None, **_: Any) -> list[float | None]:
        if problem_id is None:
            raise ValueError("the dataset needs a problem_id column (kernel_prompt_dataset has one)")
        texts = [completion_text(c) for c in completions]
        if self.evaluate is not None:
            results = self.evaluate(list(problem_id), texts)
            return [score(r, self.preset, speedup_cap=self.speedup_cap).reward for r in results]
        return self._via_server(list(problem_id), texts)

    def _via_server(self, problem_ids: list[str], texts: list[str]) -> list[float | None]:
        from kernelbench_rl.integrations.openenv_client import EnvServerUnreachable, KernelEnvClient

        def one(pair: tuple[str, str]) -> float | None:
            try:
                with KernelEnvClient(self.env_url or "") as client:
                    client.reset(problem_id=pair[0], max_turns=1)
                    result = client.step(pair[1])
                    for _ in range(INFRA_RESENDS):  # infra: the turn was given back; send it again
                        if result.reward is not None or result.done:
                            break
                        result = client.step(pair[1])
                    return result.reward
            except EnvServerUnreachable:  # the server went away mid-run: no reward, not a zero
                return None

        with ThreadPoolExecutor(max_workers=max(1, self.concurrency)) as pool:
            return list(pool.map(one, zip(problem_ids, texts, strict=True)))


def env_reward(completions: Sequence[Any] = (), env_reward: Sequence[float | None] | None = None,
               **_: Any) -> list[float | None]:
    """The reward function to pair with make_rollout_func: the episode's return it computed."""
    if env_reward is None:
        raise ValueError("env_reward is filled in by make_rollout_func; use it together with that rollout_func")
    return list(env_reward)


# -- multi-turn ------------------------------------------------------------------------------
class Episode(Protocol):
    """One environment episode: `reset` gives the first prompt; `step(response)` gives
    (reward, done, next prompt's messages or None). A reward of None with done False means the turn was
    not judged (infra) and is still open: the same response may be sent again."""

    def reset(self, problem_id: str, max_turns: int) -> list[dict[str, str]]: ...

    def step(self, response: str) -> tuple[float | None, bool, list[dict[str, str]] | None]: ...


class ServerEpisode:
    """An Episode on a `kernelbench-rl env serve` server (or on an in-process KernelEnvService)."""

    def __init__(self, env_url: str | None = None, service: Any | None = None) -> None:
        if (env_url is None) == (service is None):
            raise ValueError("pass exactly one of env_url and service")
        self.env_url, self.service = env_url, service
        self.client: Any = None
        self.episode_id: str | None = None

    def reset(self, problem_id: str, max_turns: int) -> list[dict[str, str]]:
        if self.service is not None:
            observation = self.service.reset(problem_id=problem_id, max_turns=max_turns)
        else:
            from kernelbench_rl.integrations.openenv_client import KernelEnvClient

            self.client = KernelEnvClient(self.env_url or "")
            observation = self.client.reset(problem_id=problem_id, max_turns=max_turns).observation
        self.episode_id = observation.episode_id
        return observation.messages

    def step(self, response: str) -> tuple[float | None, bool, list[dict[str, str]] | None]:
        """(reward, done, next messages); reward None and not done: not judged (infra), send the same again."""
        from kernelbench_rl.integrations.openenv_client import EnvServerUnreachable
        from kernelbench_rl.integrations.openenv_env import KernelAction

        action = KernelAction(code=response)
        if self.service is not None:
            observation = self.service.step(action, self.episode_id)
        else:
            try:
                observation = self.client.step(action).observation
            except EnvServerUnreachable:  # the server went away: this episode cannot be judged
                self.close()
                return None, True, None
            if observation.done:
                self.close()
        return observation.reward, observation.done, (None if observation.done else observation.messages)

    def close(self) -> None:
        if self.client is not None:
            self.client.close()


def make_rollout_func(problems: Sequence[Problem], new_episode: Callable[[], Episode], *, max_turns: int = 2,
                      gamma: float = 0.4, backend: str = "triton", temperature: float = 1.0,
                      infra_resends: int = INFRA_RESENDS) -> Callable[..., dict]:
    """A GRPOTrainer `rollout_func` running Kevin-style episodes with the trainer's own model.

    Prompts are matched back to their problem through the dataset's prompt text (kernel_prompt_dataset).
    Completion ids are every turn's completion with the environment's feedback turns between them;
    `env_mask` is 1 on the model's tokens and 0 on the feedback's, so only the model's are trained."""
    by_prompt = {messages_to_text(build_messages(p, backend)): p.id for p in problems}

    def problem_of(prompt: Any) -> str:
        text = messages_to_text(prompt) if isinstance(prompt, list) else str(prompt)
        if text in by_prompt:
            return by_prompt[text]
        raise ValueError("a prompt that kernel_prompt_dataset did not build reached the rollout_func")

    def rollout(prompts: list[Any], trainer: Any) -> dict[str, Any]:
        import torch

        tokenizer = trainer.processing_class
        model = trainer.accelerator.unwrap_model(trainer.model)
        max_new = int(trainer.args.max_completion_length or 64)
        out: dict[str, list] = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": [], "env_reward": []}

        def render(messages: list[dict[str, str]]) -> list[int]:
            return list(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                      return_dict=False))

        for prompt in prompts:
            episode = new_episode()
            messages = episode.reset(problem_of(prompt), max_turns)
            prompt_ids = render(messages)
            context = list(prompt_ids)
            completion_ids: list[int] = []
            logprobs: list[float] = []
            mask: list[int] = []
            rewards: list[float] = []
            unjudged = False
            for _ in range(max_turns):
                inputs = torch.tensor([context], device=model.device)
                with torch.no_grad():
                    generated = model.generate(inputs, attention_mask=torch.ones_like(inputs), max_new_tokens=max_new,
                                               do_sample=True, temperature=temperature, output_scores=True,
                                               return_dict_in_generate=True, pad_token_id=tokenizer.pad_token_id)
                new_ids = generated.sequences[0, len(context):].tolist()
                token_logprobs = [float(torch.log_softmax(s[0].float(), -1)[t]) for s, t in zip(generated.scores, new_ids)]
                completion_ids += new_ids
                logprobs += token_logprobs
                mask += [1] * len(new_ids)
                context += new_ids
                response = tokenizer.decode(new_ids, skip_special_tokens=True)
                reward, done, next_messages = episode.step(response)
                for _ in range(infra_resends):  # not judged (infra): the turn was given back, send it again
                    if reward is not None or done:
                        break
                    reward, done, next_messages = episode.step(response)
                if reward is None:  # still no verdict: the episode has no return, and is never scored zero
                    unjudged = True
                    break
                rewards.append(float(reward))
                if done or next_messages is None:
                    break
                # The feedback turn: the next prompt's tokens beyond what the model has already seen.
                feedback_ids = render(next_messages[-1:]) if next_messages else []
                completion_ids += feedback_ids
                logprobs += [0.0] * len(feedback_ids)
                mask += [0] * len(feedback_ids)
                context += feedback_ids
            out["prompt_ids"].append(prompt_ids)
            out["completion_ids"].append(completion_ids)
            out["logprobs"].append(logprobs)
            out["env_mask"].append(mask)
            if unjudged and hasattr(episode, "close"):
                episode.close()  # given up: its connection goes now (the server expires the episode)
            out["env_reward"].append(None if unjudged or not rewards else discounted_returns(rewards, gamma)[0])
        return out

    return rollout
