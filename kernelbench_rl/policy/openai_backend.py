"""Any OpenAI-compatible chat model (vLLM, SGLang, a hosted API) as a policy for evaluation.

    policy = OpenAIChatPolicy(OpenAIPolicySpec.from_policy("openai:Qwen/Qwen3-8B", "http://127.0.0.1:8001/v1"))
    episodes = run_chat_episodes(builders, policy, evaluator.evaluate_responses)

Sampling only (no training): prompts are the environments' chat messages, exactly the prompts
training builds; completions go through the same extraction and evaluator. At most `concurrency`
requests are in flight; 429s, 5xx replies, timeouts and dropped connections are retried with
exponential backoff (a server's Retry-After is honoured, capped); a request still failing after
the retries is an InfraError (ours, not the model's), and once the server stops answering
altogether the requests left are not sent at all. A reply without a kernel is just a completion
that fails extraction: a format failure, as in training. A reply that is not a chat completion at all
(a body that is not JSON, a JSON answer without `choices` or without a message) is the server's failure,
never the model's: it is retried as a 5xx is, and still malformed after the retries, it is an InfraError.

The answer budget is the served model's, never the training config's base model: `probe()` asks the
server (GET /models, before any request is paid for) for the model's context window, and each request
asks for what that window leaves after its prompt (`request_max_tokens`); with no window known and no
explicit cap, a request carries no `max_tokens` and the server decides.
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
PROBE_TIMEOUT_S = 10.0
# Where servers put a model's context window in their GET /models entries: vLLM and SGLang (max_model_len),
# OpenRouter and LM Studio (context_length), Groq (context_window), others (max_context_length).
CONTEXT_KEYS = ("max_model_len", "context_length", "context_window", "max_context_length")
# A prompt's tokens are at most its UTF-8 bytes (a token covers at least one byte), plus what a chat template adds.
TEMPLATE_TOKENS = 64
TEMPLATE_TOKENS_PER_MESSAGE = 16
# Less room than this left by the bound above: the bound is too loose to be useful, so the server decides.
MIN_ROOM_TOKENS = 256


class MalformedAnswer(Exception):
    """The server answered 200 with something that is not what was asked for (not JSON, or not a chat completion or
    model listing): the server's failure, retried as a 5xx is."""


def _body(http: Any) -> str:
    """What an HTTP answer held, for a message: its content type and its first characters."""
    kind = str(http.headers.get("content-type") or "no content type").split(";")[0].strip()
    text = " ".join(http.text.split())
    return f"{kind}, {text[:60]!r}{'...' if len(text) > 60 else ''}"


def _json_object(http: Any) -> dict[str, Any]:
    try:
        body = http.json()
    except ValueError:
        raise MalformedAnswer(f"a body that is not JSON ({_body(http)})") from None
    if not isinstance(body, dict):
        raise MalformedAnswer(f"a JSON body that is not an object ({_body(http)})")
    return body


def check_completion(http: Any) -> None:
    """MalformedAnswer unless the answer is a chat completion with a first choice holding a message."""
    body = _json_object(http)
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices:
        raise MalformedAnswer(f"a JSON body without choices ({_body(http)})")
    first = choices[0]
    message = first.get("message") if isinstance(first, dict) else None
    if not isinstance(message, dict) or not isinstance(message.get("content"), (str, type(None))):
        raise MalformedAnswer(f"a choice without a message text ({_body(http)})")


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
    max_tokens: int | None = None  # a cap on each answer (sampling.max_tokens); None: only the context bounds it
    context_tokens: int | None = None  # the served model's context window (a flag); None: as the server reports it

    @classmethod
    def from_policy(cls, policy: str, base_url: str | None = None, **kwargs: Any) -> OpenAIPolicySpec:
        if not is_openai_policy(policy) or not policy[len(POLICY_PREFIX):].strip():
            raise UserError(f"A policy for an OpenAI-compatible server is written openai:MODEL, not {policy!r}.")
        if base_url is not None and urlparse(base_url).scheme not in ("http", "https"):
            raise UserError(f"--base-url must be an http(s) URL such as http://127.0.0.1:8001/v1, not {base_url!r}.")
        spec = cls(model=policy[len(POLICY_PREFIX):].strip(), base_url=base_url, api_key=resolve_api_key(base_url), **kwargs)
        if spec.concurrency < 1 or spec.max_retries < 0 or spec.timeout_s <= 0:
            raise UserError("concurrency must be >= 1, retries >= 0 and the timeout > 0.")
        for name, value in (("the answer cap (sampling.max_tokens)", spec.max_tokens),
                            ("--context-tokens", spec.context_tokens)):
            if value is not None and value < 1:
                raise UserError(f"{name} must be at least 1 token, not {value}.")
        return spec


@dataclass
class TokenUsage:
    """What the policy cost: summed over every successful request."""

    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    retries: int = 0
    truncated: int = 0  # answers cut at their token budget (finish_reason "length")
    unanswered: int = 0  # requests that still failed after their retries, or were not sent (the server was gone)
    reused: int = 0  # answers taken from an earlier run of the same evaluation instead of sent again

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass
class ChatAnswer:
    text: str
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    max_tokens: int | None = None  # the budget the request carried (None: none, the server decided)


@dataclass(frozen=True)
class ServerInfo:
    """What the server said before the first request: the model's context window, where it came from."""

    context_tokens: int | None
    source: str  # "--context-tokens", "the server's /models", or why it is unknown

    def describe(self, cap: int | None) -> str:
        if self.context_tokens is None:
            budget = (f"each answer up to {cap} tokens (sampling.max_tokens)" if cap is not None
                      else "no max_tokens sent: the server decides each answer's length")
            return f"context unknown ({self.source}); {budget}"
        budget = f"at most {cap} tokens (sampling.max_tokens) and " if cap is not None else ""
        return (f"context {self.context_tokens} tokens ({self.source}); each answer gets {budget}what the context "
                "leaves after its prompt")


def prompt_token_bound(messages: Sequence[dict[str, str]]) -> int:
    """Tokens the prompt takes at most, whatever the model's tokenizer: its UTF-8 bytes plus the template's share."""
    return (TEMPLATE_TOKENS + TEMPLATE_TOKENS_PER_MESSAGE * len(messages)
            + sum(len(str(m.get("content", "")).encode()) for m in messages))


def context_from_models(entries: Sequence[Any], model: str) -> int | None:
    """The model's context window from a GET /models listing (its entry, else the only entry), if it says one."""
    mine = [e for e in entries if getattr(e, "id", None) == model] or (list(entries) if len(entries) == 1 else [])
    for entry in mine:
        extra = {**(getattr(entry, "model_extra", None) or {}), **vars(entry)}
        for key in CONTEXT_KEYS:
            try:
                value = int(extra.get(key) or 0)
            except (TypeError, ValueError):
                continue
            if value > 0:
                return value
    return None


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
        self.context_tokens = self.spec.context_tokens
        self.gone: str | None = None  # why the server is taken for gone: the requests left are not sent

    @property
    def where(self) -> str:
        return self.spec.base_url or "api.openai.com"

    def probe(self) -> ServerInfo:
        """One quick GET /models before anything is paid for: a server that does not answer, or answers with
        something that is not a model listing (an HTML page: often a --base-url that is not the API's), is an
        InfraError now, not after every request's retries; its listing gives the model's context window when it
        has one."""
        errors = self._openai
        flag = ServerInfo(self.spec.context_tokens, "--context-tokens")
        try:
            raw = self.client.with_options(timeout=min(PROBE_TIMEOUT_S, self.spec.timeout_s),
                                           max_retries=0).models.with_raw_response.list()
            body = _json_object(raw.http_response)
            if not isinstance(body.get("data"), list) or not all(isinstance(e, dict) for e in body["data"]):
                raise MalformedAnswer(f"a JSON body without a list of models ({_body(raw.http_response)})")
            entries = list(raw.parse().data)
        except MalformedAnswer as exc:
            raise InfraError(f"The model server at {self.where} answered GET /models with {exc}, not a model "
                             "listing; nothing was sent. Check --base-url (the server's OpenAI-compatible API, e.g. "
                             "http://127.0.0.1:8001/v1).") from None
        except (errors.APIConnectionError, errors.APITimeoutError) as exc:
            raise InfraError(f"The model server at {self.where} does not answer ({type(exc).__name__}: "
                             f"{str(exc)[:120]}); nothing was sent. Start it, or check --base-url.") from None
        except (errors.AuthenticationError, errors.PermissionDeniedError) as exc:
            raise UserError(f"The model server at {self.where} refused the key ({exc.status_code}); set "
                            f"{OPENAI_API_KEY_ENV} to a key it accepts.") from None
        except errors.APIStatusError as exc:  # no /models here (404, 405): the server answers, its context is unknown
            if flag.context_tokens is not None:
                return flag
            return ServerInfo(None, f"GET /models answered {exc.status_code}; --context-tokens sets it")
        if flag.context_tokens is not None:
            return flag
        self.context_tokens = context_from_models(entries, self.spec.model)
        if self.context_tokens is None:
            return ServerInfo(None, "the server's /models does not say; --context-tokens sets it")
        return ServerInfo(self.context_tokens, "the server's /models")

    def request_max_tokens(self, messages: Sequence[dict[str, str]]) -> int | None:
        """The max_tokens of one request: what the context leaves after the prompt at its largest, capped by
        spec.max_tokens; None (send none: the server decides) when neither is known or the bound leaves too
        little to be useful."""
        cap = self.spec.max_tokens
        if self.context_tokens is None:
            return cap
        room = self.context_tokens - prompt_token_bound(messages)
        if room < MIN_ROOM_TOKENS:
            return cap
        return room if cap is None else min(cap, room)

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

    def complete(self, messages: list[dict[str, str]], *, max_tokens: int | None = None, temperature: float = 1.0,
                 top_p: float = 1.0) -> ChatAnswer:
        """One answer; `max_tokens=None` sends none (the server decides). A request that still fails after its
        retries is an InfraError; one that gave up on a server that no longer answers (connection refused or
        dropped) marks the server gone, and the requests after it fail at once, unsent."""
        errors = self._openai
        retryable = (errors.RateLimitError, errors.InternalServerError, errors.APIConnectionError, MalformedAnswer)
        budget = {} if max_tokens is None else {"max_tokens": max_tokens}
        last: Exception | None = None
        for attempt in range(self.spec.max_retries + 1):
            if self.gone is not None:
                self._unanswered()
                raise InfraError(f"Not sent: {self.gone}")
            try:
                with self._slots:
                    raw = self.client.chat.completions.with_raw_response.create(
                        model=self.spec.model, messages=messages,  # type: ignore[arg-type]
                        temperature=temperature, top_p=top_p, **budget)
                check_completion(raw.http_response)
                reply = raw.parse()
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
                raise UserError(f"The model server at {self.where} refused the request "
                                f"({status}): {str(exc)[:200]}") from None
            answer = self._answer(reply)
            answer.max_tokens = max_tokens
            return answer
        status = getattr(last, "status_code", None)
        what = (f"HTTP {status}" if status else f"a malformed answer: {last}" if isinstance(last, MalformedAnswer)
                else type(last).__name__)
        message = f"The model server at {self.where} still failed after {self.spec.max_retries} retries ({what})."
        if isinstance(last, errors.APIConnectionError) and not isinstance(last, errors.APITimeoutError):
            with self._lock:
                self.gone = self.gone or f"the model server at {self.where} stopped answering ({what})."
        self._unanswered()
        raise InfraError(message)

    def _unanswered(self) -> None:
        with self._lock:
            self.usage.unanswered += 1

    def _answer(self, reply: Any) -> ChatAnswer:
        choice = reply.choices[0]  # check_completion made sure there is one, with a message
        text = choice.message.content or ""
        usage = getattr(reply, "usage", None)
        prompt_tokens, completion_tokens = (_count(getattr(usage, "prompt_tokens", 0)),
                                            _count(getattr(usage, "completion_tokens", 0)))
        finish_reason = str(getattr(choice, "finish_reason", "") or "")
        with self._lock:
            self.usage.requests += 1
            self.usage.prompt_tokens += prompt_tokens
            self.usage.completion_tokens += completion_tokens
            self.usage.truncated += finish_reason == "length"
        return ChatAnswer(text, finish_reason, prompt_tokens, completion_tokens)


def _count(value: Any) -> int:
    """A token count as the server reported it; 0 where it reported none or nonsense (only the usage figures)."""
    try:
        return max(0, int(value or 0))
    except (TypeError, ValueError, OverflowError):
        return 0


def request_failed(env: KernelEnv, error: str) -> EvalResult:
    """The verdict of a sample whose request still failed after its retries: ours (infra), never the model's zero."""
    return EvalResult(problem_id=env.problem.id, candidate_sha256="", backend=env.spec.kernel_backend, precision="",
                      device_kind="", error_category=ErrorCategory.INFRA, error_message=error[:500])


def run_chat_episodes(builders: Sequence[EnvGroupBuilder], policy: OpenAIChatPolicy,
                      evaluate: Callable[[list[str], list[str]], list[EvalResult]], *,
                      temperature: float = 1.0, top_p: float = 1.0,
                      on_answer: Callable[[KernelEnv, int, ChatAnswer | None], None] | None = None,
                      earlier: Callable[[KernelEnv, int, list[dict[str, str]]], ChatAnswer | None] | None = None,
                      ) -> list[list[KernelEnv]]:
    """Every group's environments to their end, turn by turn: sample all active ones at once (bounded by the
    policy's concurrency), evaluate the turn in one evaluator call, repeat.

    Each request's max_tokens is the policy's budget for its own prompt (`request_max_tokens`), Kevin's later
    turns included. `earlier(env, sample_index, messages)` may return an answer an earlier run already paid for
    (that request is not sent); `on_answer(env, sample_index, answer)` (the sample's index among its problem's, in
    the groups' order) runs as each answer arrives, None for a request that failed (the caller records it: nothing
    paid for is lost if the run dies later). A request that still fails after its retries ends that sample with an
    `infra` verdict and the others go on."""
    groups = [builder() for builder in builders]
    sample_index: dict[int, int] = {}
    seen: dict[str, int] = {}
    for env in (env for group in groups for env in group):
        sample_index[id(env)] = seen.get(env.problem.id, 0)
        seen[env.problem.id] = sample_index[id(env)] + 1

    def ask(env: KernelEnv, messages: list[dict[str, str]]) -> ChatAnswer:
        answer = earlier(env, sample_index[id(env)], messages) if earlier is not None else None
        if answer is not None:
            with policy._lock:
                policy.usage.reused += 1
            return answer
        return policy.complete(messages, max_tokens=policy.request_max_tokens(messages), temperature=temperature,
                               top_p=top_p)

    workers = max(1, policy.spec.concurrency)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kbrl-openai") as pool:
        while True:
            active = [env for group in groups for env in group if not env.done]
            if not active:
                break
            prompts = {id(env): env.next_messages() for env in active}
            futures = {pool.submit(ask, env, prompts[id(env)]): env for env in active}
            answered = []
            for future in as_completed(futures):
                env = futures[future]
                answer: ChatAnswer | None = None
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
                    on_answer(env, sample_index[id(env)], answer)
            answered.sort(key=active.index)  # the evaluator batch in a stable order
            if answered:
                results = evaluate([env.problem.id for env in answered], [env.turns[-1].completion for env in answered])
                for env, result in zip(answered, results, strict=True):
                    env.add_result(result)
    return groups
