"""Any OpenAI-compatible chat model (vLLM, SGLang, a hosted API) as a policy for evaluation.

    policy = OpenAIChatPolicy(OpenAIPolicySpec.from_policy("openai:Qwen/Qwen3-8B", "http://127.0.0.1:8001/v1"))
    episodes = run_chat_episodes(builders, policy, evaluator.evaluate_responses)

Sampling only (no training): prompts are the environments' chat messages, exactly the prompts
training builds; completions go through the same extraction and evaluator. At most `concurrency`
requests are in flight; 429s, 5xx replies, timeouts and dropped connections are retried with
exponential backoff (a server's Retry-After is honoured, capped); a request still failing after
the retries is an InfraError (ours, not the model's). A reply without a kernel is just a
completion that fails extraction: a format failure, as in training.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import urlparse

from kernelbench_rl.envs.kernel_env import EnvGroupBuilder, KernelEnv
from kernelbench_rl.envs.text import messages_to_text
from kernelbench_rl.errors import InfraError, UserError
from kernelbench_rl.evaluation.result import ErrorCategory, EvalResult

OPENAI_API_KEY_ENV = "OPENAI_API_KEY"
POLICY_PREFIX = "openai:"
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "0.0.0.0"}
MAX_RETRY_AFTER_S = 30.0


def is_openai_policy(policy: str | None) -> bool:
    return bool(policy) and str(policy).startswith(POLICY_PREFIX)


def resolve_api_key(base_url: str | None) -> str:
    """OPENAI_API_KEY; a local server (vLLM on 127.0.0.1) may do without one."""
    key = os.environ.get(OPENAI_API_KEY_ENV, "").strip()
    if key:
        return key
    host = urlparse(base_url or "").hostname or ""
    if base_url and host in LOCAL_HOSTS:
        return "not-needed-for-a-local-server"
    where = base_url or "the OpenAI API"
    raise UserError(f"Set {OPENAI_API_KEY_ENV} to the API key for {where} (only a local --base-url may run without one).")


@dataclass(frozen=True)
class OpenAIPolicySpec:
    model: str
    base_url: str | None = None
    api_key: str = ""
    concurrency: int = 8
    max_retries: int = 4
    timeout_s: float = 300.0
    backoff_s: float = 0.5

    @classmethod
    def from_policy(cls, policy: str, base_url: str | None = None, **kwargs: Any) -> OpenAIPolicySpec:
        if not is_openai_policy(policy) or not policy[len(POLICY_PREFIX):].strip():
            raise UserError(f"A policy for an OpenAI-compatible server is written openai:MODEL, not {policy!r}.")
        if base_url is not None and urlparse(base_url).scheme not in ("http", "https"):
            raise UserError(f"--base-url must be an http(s) URL such as http://127.0.0.1:8001/v1, not {base_url!r}.")
        spec = cls(model=policy[len(POLICY_PREFIX):].strip(), base_url=base_url, api_key=resolve_api_key(base_url), **kwargs)
        if spec.concurrency < 1 or spec.max_retries < 0 or spec.timeout_s <= 0:
            raise UserError("concurrency must be >= 1, retries >= 0 and the timeout > 0.")
        return spec


@dataclass
class TokenUsage:
    """What the policy cost: summed over every successful request."""

    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    retries: int = 0

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass
class ChatAnswer:
    text: str
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int


@dataclass
class OpenAIChatPolicy:
    spec: OpenAIPolicySpec
    usage: TokenUsage = field(default_factory=TokenUsage)
    sleep: Callable[[float], None] = time.sleep

    def __post_init__(self) -> None:
        import openai

        self._openai = openai
        # Retries are ours (counted, Retry-After capped), so the client's own are off.
        self.client = openai.OpenAI(api_key=self.spec.api_key, base_url=self.spec.base_url,
                                    timeout=self.spec.timeout_s, max_retries=0)
        self._slots = threading.BoundedSemaphore(self.spec.concurrency)
        self._lock = threading.Lock()

    @property
    def label(self) -> str:
        return POLICY_PREFIX + self.spec.model

    def _retry_delay(self, attempt: int, exc: Exception) -> float:
        delay = self.spec.backoff_s * (2 ** attempt)
        response = getattr(exc, "response", None)
        header = response.headers.get("retry-after") if response is not None else None
        try:
            if header is not None:
                delay = max(delay, float(header))
        except ValueError:
            pass
        return min(delay, MAX_RETRY_AFTER_S)

    def complete(self, messages: list[dict[str, str]], *, max_tokens: int, temperature: float = 1.0,
                 top_p: float = 1.0) -> ChatAnswer:
        errors = self._openai
        retryable = (errors.RateLimitError, errors.InternalServerError, errors.APIConnectionError)
        last: Exception | None = None
        for attempt in range(self.spec.max_retries + 1):
            try:
                with self._slots:
                    reply = self.client.chat.completions.create(
                        model=self.spec.model, messages=messages, max_tokens=max_tokens,  # type: ignore[arg-type]
                        temperature=temperature, top_p=top_p)
            except retryable as exc:
                last = exc
                if attempt == self.spec.max_retries:
                    break
                with self._lock:
                    self.usage.retries += 1
                self.sleep(self._retry_delay(attempt, exc))
                continue
            except errors.APIStatusError as exc:
                status = getattr(exc, "status_code", "?")
                raise UserError(f"The model server at {self.spec.base_url or 'api.openai.com'} refused the request "
                                f"({status}): {str(exc)[:200]}") from None
            return self._answer(reply)
        status = getattr(last, "status_code", None)
        what = f"HTTP {status}" if status else type(last).__name__
        raise InfraError(f"The model server at {self.spec.base_url or 'api.openai.com'} still failed after "
                         f"{self.spec.max_retries} retries ({what}).")

    def _answer(self, reply: Any) -> ChatAnswer:
        choice = reply.choices[0] if reply.choices else None
        text = (choice.message.content or "") if choice is not None and choice.message is not None else ""
        usage = getattr(reply, "usage", None)
        prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
        completion_tokens = int(getattr(usage, "completion_tokens", 0) or 0)
        with self._lock:
            self.usage.requests += 1
            self.usage.prompt_tokens += prompt_tokens
            self.usage.completion_tokens += completion_tokens
        return ChatAnswer(text, str(getattr(choice, "finish_reason", "") or ""), prompt_tokens, completion_tokens)


def request_failed(env: KernelEnv, error: str) -> EvalResult:
    """The verdict of a sample whose request still failed after its retries: ours (infra), never the model's zero."""
    return EvalResult(problem_id=env.problem.id, candidate_sha256="", backend=env.spec.kernel_backend, precision="",
                      device_kind="", error_category=ErrorCategory.INFRA, error_message=error[:500])


def run_chat_episodes(builders: Sequence[EnvGroupBuilder], policy: OpenAIChatPolicy,
                      evaluate: Callable[[list[str], list[str]], list[EvalResult]], *,
                      temperature: float = 1.0, top_p: float = 1.0,
                      on_answer: Callable[[KernelEnv, int], None] | None = None) -> list[list[KernelEnv]]:
    """Every group's environments to their end, turn by turn: sample all active ones at once (bounded by the
    policy's concurrency), evaluate the turn in one evaluator call, repeat. `on_answer(env, sample_index)` (the
    sample's index among its problem's, in the groups' order) runs as each answer
    arrives (the caller records it: nothing paid for is lost if the run dies later); a request that still fails
    after its retries ends that sample with an `infra` verdict and the others go on."""
    groups = [builder() for builder in builders]
    sample_index: dict[int, int] = {}
    seen: dict[str, int] = {}
    for env in (env for group in groups for env in group):
        sample_index[id(env)] = seen.get(env.problem.id, 0)
        seen[env.problem.id] = sample_index[id(env)] + 1
    workers = max(1, policy.spec.concurrency)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kbrl-openai") as pool:
        while True:
            active = [env for group in groups for env in group if not env.done]
            if not active:
                break
            prompts = {id(env): env.next_messages() for env in active}
            futures = {pool.submit(policy.complete, prompts[id(env)], max_tokens=env.spec.max_tokens,
                                   temperature=temperature, top_p=top_p): env for env in active}
            answered = []
            for future in as_completed(futures):
                env = futures[future]
                try:
                    answer = future.result()
                except InfraError as exc:
                    env.add_completion(messages_to_text(prompts[id(env)]), [], "", [], [], "error")
                    env.add_result(request_failed(env, str(exc)))
                else:
                    env.add_completion(messages_to_text(prompts[id(env)]), [0] * answer.prompt_tokens, answer.text,
                                       [0] * answer.completion_tokens, [], answer.finish_reason)
                    answered.append(env)
                if on_answer is not None:
                    on_answer(env, sample_index[id(env)])
            answered.sort(key=active.index)  # the evaluator batch in a stable order
            if answered:
                results = evaluate([env.problem.id for env in answered], [env.turns[-1].completion for env in answered])
                for env, result in zip(answered, results, strict=True):
                    env.add_result(result)
    return groups
