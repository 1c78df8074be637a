"""Rollouts: sample completions for groups of environments and evaluate them, overlapped.

Sampling requests for every ready group go out at once; the main thread collects them group by
group while a single evaluation thread evaluates the group collected before; in Kevin mode a
group whose turn was evaluated goes back to the queue for its next turn. The callback `on_group_done` runs on the main thread as each group finishes, so
its rows reach the store while later groups are still being sampled.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

import tinker

from kernelbench_rl.envs.kernel_env import EnvGroupBuilder, KernelEnv
from kernelbench_rl.envs.text import messages_to_text
from kernelbench_rl.evaluation.result import ErrorCategory, EvalResult


class _EvalThreads(ThreadPoolExecutor):
    """A rollout's evaluation threads: left by an exception (a stop: Ctrl-C, SIGTERM), evaluations not started never
    start and the caller does not wait for those under way (closing the evaluator ends them)."""

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        self.shutdown(wait=exc_type is None, cancel_futures=exc_type is not None)
        return False


# (problem_ids, responses) -> results in the same order; Evaluator.evaluate_responses has this shape.
EvaluateFn = Callable[[list[str], list[str]], list[EvalResult]]


class PromptRenderer:
    """Chat messages -> prompt tokens, the sampler's stop sequences, and completion tokens -> text.

    With a tinker-cookbook renderer (`kernelbench_rl.policy.chat`) the prompt, the stop sequences
    and the end-of-answer tokens are the model's own chat format (Qwen3: `<|im_end|>`, thinking on
    or off). Without one, the tokenizer's chat template (when it has one) renders the prompt and
    the sampler stops at EOS, its default.
    """

    def __init__(self, tokenizer: Any, chat_renderer: Any | None = None) -> None:
        self.tokenizer = tokenizer
        self.chat_renderer = chat_renderer
        self.use_chat_template = bool(getattr(tokenizer, "chat_template", None))

    @classmethod
    def for_model(cls, tokenizer: Any, base_model: str, renderer: str = "auto", thinking: bool = False) -> PromptRenderer:
        """The chat format `renderer` (policy.renderer) names for `base_model`, with or without thinking."""
        from kernelbench_rl.policy.chat import make_chat_renderer

        return cls(tokenizer, make_chat_renderer(tokenizer, base_model, renderer, thinking))

    def encode_messages(self, messages: list[dict[str, str]]) -> list[int]:
        if self.chat_renderer is not None:
            tokens = self.chat_renderer.build_generation_prompt(messages).to_ints()
        elif self.use_chat_template:
            rendered = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            tokens = list(self.tokenizer.encode(rendered, add_special_tokens=False))
        else:
            tokens = list(self.tokenizer.encode(messages_to_text(messages), add_special_tokens=False))
        if not tokens:
            raise ValueError("The rendered prompt is empty; a sample needs at least one prompt token.")
        return tokens

    @property
    def stop_sequences(self) -> list[int] | list[str] | None:
        """What ends a sampled turn (None: the sampler's default, the EOS token)."""
        return self.chat_renderer.get_stop_sequences() if self.chat_renderer is not None else None

    def end_of_answer_tokens(self) -> list[int]:
        """The tokens a finished answer ends with: the format's end-of-message token, else EOS."""
        stops = self.stop_sequences
        if stops:
            first = stops[0]
            return [int(first)] if isinstance(first, int) else list(self.tokenizer.encode(first, add_special_tokens=False))
        eos = getattr(self.tokenizer, "eos_token_id", None)
        return [] if eos is None else [int(eos)]

    def decode(self, tokens: Sequence[int]) -> str:
        return self.tokenizer.decode(list(tokens), skip_special_tokens=True)


class MissingLogprobsError(RuntimeError):
    """The sampler returned a sequence without one log-probability per token.

    The importance-sampling and PPO losses divide by the sampler's probability of every trained
    token; a made-up value (0.0 means probability 1) would bias every update silently.
    """


def sampler_logprobs(sequence: Any, num_tokens: int) -> list[float]:
    """The sampler's per-token logprobs of a sampled sequence, checked to cover every token."""
    if sequence.logprobs is None:
        raise MissingLogprobsError(
            f"The sampler returned a sequence of {num_tokens} tokens without logprobs; the policy-gradient "
            "losses need the sampler's logprob of every token (is the backend asked for them?).")
    logprobs = [float(x) for x in sequence.logprobs]
    if len(logprobs) != num_tokens:
        raise MissingLogprobsError(
            f"The sampler returned {len(logprobs)} logprobs for a sequence of {num_tokens} tokens; "
            "the policy-gradient losses need exactly one per token.")
    return logprobs


class RolloutStopped(Exception):
    """The rollout was asked to stop (`RolloutRunner.should_stop`) before every group finished."""


@dataclass
class GroupRollout:
    index: int
    builder: EnvGroupBuilder
    envs: list[KernelEnv]
    infra_retries_used: int = 0

    @property
    def problem(self):
        return self.builder.problem

    @property
    def done(self) -> bool:
        return all(env.done for env in self.envs)


@dataclass
class SamplingRequest:
    """One sampling call in flight: the environments it samples for (one per sequence) and its prompt."""

    envs: list[KernelEnv]
    prompt: str
    prompt_tokens: list[int]
    future: Any


@dataclass
class RolloutTimings:
    sampling_s: float = 0.0
    eval_s: float = 0.0  # evaluation work, summed over the evaluation threads (overlaps sampling)
    wall_s: float = 0.0


@dataclass
class RolloutRunner:
    sampling_client: Any
    renderer: PromptRenderer
    evaluate: EvaluateFn
    temperature: float = 1.0
    top_p: float = 1.0
    infra_retries: int = 1
    on_group_done: Callable[[GroupRollout], None] | None = None
    # Groups evaluated at once. Their kernels share the evaluator's pool, so a group whose slowest
    # kernel hangs (and waits out the timeout) does not leave the GPU idle for the groups behind it.
    # The evaluate function must be thread-safe (Evaluator.evaluate_responses is).
    eval_concurrency: int = 4
    # Polled between groups: True ends the rollout early with RolloutStopped (a run being stopped
    # while this rollout was prefetched for a later step).
    should_stop: Callable[[], bool] | None = None
    timings: RolloutTimings = field(default_factory=RolloutTimings)
    # Seeds each sampling request from (seed, group, turn, first sample): a step sampled again by the same weights
    # (a resumed run) gets the same answers. None: the sampler's own generator.
    seed: int | None = None

    # -- sampling (main thread) ----------------------------------------------------------------
    def _params(self, max_tokens: int, seed: int | None = None) -> tinker.SamplingParams:
        return tinker.SamplingParams(max_tokens=max_tokens, temperature=self.temperature, top_p=self.top_p,
                                     stop=self.renderer.stop_sequences, seed=seed)

    def _request_seed(self, group: GroupRollout, env: KernelEnv) -> int | None:
        if self.seed is None:
            return None
        key = f"{self.seed}:{group.index}:{len(env.turns)}:{group.envs.index(env)}".encode()
        return int(hashlib.sha256(key).hexdigest()[:8], 16) & 0x7FFFFFFF

    def _record(self, env: KernelEnv, prompt: str, prompt_tokens: list[int], sequence: Any) -> None:
        tokens = list(sequence.tokens)
        logprobs = sampler_logprobs(sequence, len(tokens))
        env.add_completion(prompt, prompt_tokens, self.renderer.decode(tokens), tokens, logprobs,
                           str(sequence.stop_reason))

    def submit_group(self, group: GroupRollout) -> list[SamplingRequest]:
        """Send the sampling requests of a group's next turn without waiting for them."""
        active = [env for env in group.envs if not env.done]
        if active and all(not env.turns for env in active):
            # First turn: every environment of the group has the same prompt, so one call samples them all.
            targets = [active]
        else:
            targets = [[env] for env in active]
        requests: list[SamplingRequest] = []
        for envs in targets:
            messages = envs[0].next_messages()
            prompt, tokens = messages_to_text(messages), self.renderer.encode_messages(messages)
            max_tokens = envs[0].turn_max_tokens(len(tokens))
            if max_tokens == 0:
                for env in envs:
                    env.end("token_budget")
                continue
            future = self.sampling_client.sample(prompt=tinker.ModelInput.from_ints(tokens), num_samples=len(envs),
                                                 sampling_params=self._params(max_tokens, self._request_seed(group, envs[0])))
            requests.append(SamplingRequest(envs, prompt, tokens, future))
        return requests

    def collect_group(self, requests: Sequence[SamplingRequest]) -> None:
        """Wait for a group's sampling requests and record the completions in their environments."""
        for request in requests:
            response = request.future.result()
            for env, sequence in zip(request.envs, response.sequences, strict=True):
                self._record(env, request.prompt, request.prompt_tokens, sequence)

    # -- evaluation (evaluation thread) --------------------------------------------------------
    def evaluate_group(self, group: GroupRollout) -> tuple[list[tuple[KernelEnv, EvalResult]], float, int]:
        start = time.perf_counter()
        envs = [env for env in group.envs if env.pending_turn is not None]
        results = self.evaluate([env.problem.id for env in envs], [env.pending_turn.completion for env in envs])
        retries = 0
        for _ in range(self.infra_retries):
            again = [i for i, r in enumerate(results) if r.error_category == ErrorCategory.INFRA]
            if not again:
                break
            retries += len(again)
            redone = self.evaluate([envs[i].problem.id for i in again], [envs[i].pending_turn.completion for i in again])
            for i, result in zip(again, redone, strict=True):
                results[i] = result
        return list(zip(envs, results, strict=True)), time.perf_counter() - start, retries

    # -- the overlapped loop -------------------------------------------------------------------
    def run(self, builders: Sequence[EnvGroupBuilder]) -> list[GroupRollout]:
        """Every ready group's sampling requests go out at once (a remote sampler works on them in
        parallel); groups are then collected in order, each handed to the evaluation thread as soon
        as its completions are in, and groups with turns left come back for their next turn."""
        wall_start = time.perf_counter()
        groups = [GroupRollout(i, builder, builder()) for i, builder in enumerate(builders)]
        ready: deque[GroupRollout] = deque(groups)
        sampling: deque[tuple[GroupRollout, list[SamplingRequest]]] = deque()
        in_flight: dict[Future, GroupRollout] = {}
        with _EvalThreads(max_workers=max(1, self.eval_concurrency), thread_name_prefix="kbrl-eval") as executor:
            while ready or sampling or in_flight:
                if self.should_stop is not None and self.should_stop():
                    executor.shutdown(wait=False, cancel_futures=True)  # evaluations not started never start
                    raise RolloutStopped()
                start = time.perf_counter()
                # The local policy decodes what is sent inside this block as one batch (Tinker's service batches
                # on its side): one request at a time kept a 1.5B model on an H100 at 8 rows a forward.
                batched = getattr(self.sampling_client, "batched_sampling", None)
                with batched() if callable(batched) else contextlib.nullcontext():
                    while ready:
                        group = ready.popleft()
                        sampling.append((group, self.submit_group(group)))
                if sampling:
                    group, requests = sampling.popleft()
                    self.collect_group(requests)
                    self.timings.sampling_s += time.perf_counter() - start
                    if any(env.pending_turn is not None for env in group.envs):
                        in_flight[executor.submit(self.evaluate_group, group)] = group
                    elif group.done:
                        self._finish(group)
                    finished = [f for f in in_flight if f.done()]
                else:
                    finished, _ = wait(list(in_flight), return_when=FIRST_COMPLETED)
                for future in finished:
                    group = in_flight.pop(future)
                    pairs, seconds, retries = future.result()
                    self.timings.eval_s += seconds
                    group.infra_retries_used += retries
                    for env, result in pairs:
                        env.add_result(result)
                    if group.done:
                        self._finish(group)
                    else:
                        ready.append(group)
        self.timings.wall_s += time.perf_counter() - wall_start
        return groups

    def _finish(self, group: GroupRollout) -> None:
        if self.on_group_done is not None:
            self.on_group_done(group)
