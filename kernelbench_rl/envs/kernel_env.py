"""Kernel-writing environments: single-turn, and multi-turn refinement ("Kevin mode").

One `KernelEnv` is one sample's episode on one problem. Each turn: a prompt (problem, optional
retrieved examples, and from turn 1 on the previous kernel with its feedback), a completion, an
extracted kernel, an evaluation. Single-turn is the same environment with one turn.

Sampling and evaluation are not done here: the rollout runner batches them across environments
(one sampling call per group for the shared first prompt, one evaluator call per group and turn),
which is what keeps the GPU/evaluator busy. The environment only decides what comes next.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kernelbench_rl.envs.feedback import refinement_feedback
from kernelbench_rl.envs.text import build_messages, extract_kernel, messages_to_text, strip_reasoning
from kernelbench_rl.evaluation.result import ErrorCategory, EvalResult
from kernelbench_rl.problems import Problem
from kernelbench_rl.rewards.shaping import Score

Retriever = Callable[[Problem, int], Sequence[Any]]

# A turn with fewer completion tokens than this left in the budget is not worth sampling.
MIN_TURN_TOKENS = 16


@dataclass(frozen=True)
class EnvSpec:
    """What an environment needs besides the problem; plain data, cheap to pickle and log (a run's own:
    `compose.run_settings`)."""

    turns: int = 1
    token_budget: int = 32768  # prompt + completion tokens of one turn's context
    max_tokens: int = 4096  # completion tokens per turn
    early_stop_on_correct: bool = False
    kernel_backend: str = "triton"
    instructions: str | None = None
    feedback_profile: bool = False  # refinement feedback carries the profile and the speed-of-light line


@dataclass
class Turn:
    index: int
    prompt: str
    prompt_tokens: list[int]
    completion: str = ""
    completion_tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    stop_reason: str = ""
    code: str | None = None
    format_ok: bool = False
    result: EvalResult | None = None
    score: Score | None = None


class KernelEnv:
    """One sample's episode: up to `spec.turns` turns of write -> evaluate -> feedback."""

    def __init__(self, problem: Problem, spec: EnvSpec, examples: Sequence[Any] | None = None) -> None:
        self.problem = problem
        self.spec = spec
        # None: the prompt builder's default one-shot example; a sequence (maybe empty): exactly those.
        self.examples = list(examples) if examples is not None else None
        self.turns: list[Turn] = []
        self.end_reason: str | None = None

    @property
    def done(self) -> bool:
        return self.end_reason is not None

    def next_prompt(self) -> str:
        """The next turn's prompt as plain text."""
        return messages_to_text(self.next_messages())

    def next_messages(self) -> list[dict[str, str]]:
        """The next turn's prompt as chat messages: the problem, and after turn 0 the last kernel and its feedback."""
        if self.done:
            raise RuntimeError("the episode is over")
        feedback = None
        if self.turns:
            last = self.turns[-1]
            assert last.result is not None, "the previous turn has not been evaluated"
            feedback = refinement_feedback(last.code, strip_reasoning(last.completion), last.result,
                                           profile=self.spec.feedback_profile)
        return build_messages(self.problem, self.spec.kernel_backend, examples=self.examples,
                              instructions=self.spec.instructions, feedback=feedback)

    def turn_max_tokens(self, prompt_tokens: int) -> int:
        """Completion tokens allowed for a prompt of this length (0: the budget is spent)."""
        allowed = min(self.spec.max_tokens, self.spec.token_budget - prompt_tokens)
        return allowed if allowed >= min(MIN_TURN_TOKENS, self.spec.max_tokens) else 0

    def end(self, reason: str) -> None:
        if self.end_reason is None:
            self.end_reason = reason

    def add_completion(self, prompt: str, prompt_tokens: list[int], completion: str,
                       completion_tokens: list[int], logprobs: list[float], stop_reason: str) -> Turn:
        extraction = extract_kernel(completion, backend=self.spec.kernel_backend)
        turn = Turn(index=len(self.turns), prompt=prompt, prompt_tokens=list(prompt_tokens), completion=completion,
                    completion_tokens=list(completion_tokens), logprobs=list(logprobs), stop_reason=stop_reason,
                    code=extraction.code if extraction.format_ok else None, format_ok=bool(extraction.format_ok))
        self.turns.append(turn)
        return turn

    def add_result(self, result: EvalResult) -> None:
        """Record the last turn's evaluation and decide whether the episode goes on."""
        turn = self.turns[-1]
        turn.result = result
        if result.error_category.is_ours:
            # No trustworthy feedback to refine on: the episode ends here, this turn is left out of training.
            self.end("infra")
        elif len(self.turns) >= self.spec.turns:
            self.end("turns")
        elif self.spec.early_stop_on_correct and result.correct:
            self.end("correct")

    @property
    def pending_turn(self) -> Turn | None:
        """The last turn if it still waits for its evaluation."""
        return self.turns[-1] if self.turns and self.turns[-1].result is None else None


@dataclass(frozen=True)
class EnvGroupBuilder:
    """Serialisable recipe for one problem's group of G environments; calling it builds them."""

    problem: Problem
    group_size: int
    spec: EnvSpec
    examples: tuple[Any, ...] | None = None  # None: the prompt builder's default example

    def __call__(self) -> list[KernelEnv]:
        return [KernelEnv(self.problem, self.spec, self.examples) for _ in range(self.group_size)]


def make_group_builders(problems: Sequence[Problem], group_size: int, spec: EnvSpec,
                        retrieve: Retriever | None = None, k: int = 0) -> list[EnvGroupBuilder]:
    """One builder per problem; RA-ICL examples (when `retrieve` is given) are fetched once per problem."""
    builders = []
    for problem in problems:
        examples = tuple(retrieve(problem, k)) if retrieve is not None and k > 0 else None
        builders.append(EnvGroupBuilder(problem, group_size, spec, examples))
    return builders
