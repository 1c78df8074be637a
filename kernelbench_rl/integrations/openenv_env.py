"""KernelBench as an OpenEnv environment: typed actions/observations/state, an HTTP server, a client.

    kernelbench-rl env serve --port 8000 --db runs/env.duckdb
    with KernelEnvClient("http://127.0.0.1:8000") as env:
        first = env.reset(problem_id="L1/19")
        result = env.step(KernelAction(code=kernel_source))

The types subclass `openenv.core`'s Action/Observation/State, and `KernelEnvironment` is an
`openenv.core` Environment, so OpenEnv's own WebSocket client (`/ws`) works as well. The plain
HTTP routes (`POST /reset`, `POST /step`, `GET /state`, `GET /health`) keep OpenEnv's request and
response shapes; because OpenEnv's HTTP routes build a fresh environment per request (no
multi-turn), ours are served from one `KernelEnvService` that keeps episodes by `episode_id`
(returned by /reset; optional on /step and /state while only one episode is open).

Every step is judged by our `Evaluator` with the run's `EvalSettings` (so the sandbox, the verdict
cache and the `evaluations` rows are those of `train`), scored with a reward preset, and written to
`rollouts` and `rewards` under the service's run id (one episode = one `step` number there).
The model sees the problem text and our Kevin-style feedback, never anything else of the reference.

kernrl's client (OpenEnv's `kernrl_env`) works unchanged against this server: the observation and state
carry kernrl's fields with kernrl's meanings beside ours (problem_description, reference_code, gpu_info,
compilation_success, compilation_error, correctness_pass, max_diff; best_speedup, solved), reset takes
kernrl's ids (`L1_23_Softmax`, or a prefix of one ending at an underscore: `L1_23`), and a candidate's
class may be named Model (docs/kernrl.md).
"""

from __future__ import annotations

import ast
import json
import random
import re
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from kernelbench_rl.integrations import import_quietly

# Before the names below and the server/client modules: quiet a dependency's import-time warning.
for _module in ("openenv.core", "openenv.core.env_server.http_server", "openenv.core.env_client"):
    import_quietly(_module)

from openenv.core.env_server.interfaces import Environment  # noqa: E402
from openenv.core.env_server.types import Action, Observation, State  # noqa: E402
from pydantic import Field, ValidationError  # noqa: E402

from kernelbench_rl.envs.feedback import HINTS, Feedback, clean_error_line  # noqa: E402
from kernelbench_rl.envs.kernel_env import EnvSpec, KernelEnv  # noqa: E402
from kernelbench_rl.envs.text import messages_to_text  # noqa: E402
from kernelbench_rl.evaluation.static_policy.candidate_class import candidate_class_name  # noqa: E402
from kernelbench_rl.evaluation.result import ErrorCategory, EvalResult  # noqa: E402
from kernelbench_rl.errors import UserError  # noqa: E402
from kernelbench_rl.problems import Problem, resolve_problem, unknown_problem_message  # noqa: E402
from kernelbench_rl.problems.model import MAX_PROBLEM_ID_CHARS  # noqa: E402
from kernelbench_rl.rewards.shaping import PRESETS, counts_as_correct, score  # noqa: E402

MAX_CODE_BYTES = 1_000_000  # a kernel beyond this is not a kernel; refuse it before any work
DEFAULT_RUN_ID = "openenv"
DEFAULT_IDLE_TIMEOUT_S = 1800.0
# Open episodes a server keeps at once (`env serve --max-open-episodes`): past it, a reset closes the one idle longest.
DEFAULT_MAX_OPEN_EPISODES = 256
MAX_EPISODE_ID_CHARS = 128  # ours are 32 hex digits; a client's own may be longer, never a megabyte
# How to serve kernrl's problems, for a refused kernrl id.
KERNRL_SERVE_HINT = "serve them with `kernelbench-rl env serve --problems-root <kernrl's problems folder>`."  # env.idle_timeout_s: long enough for a slow model's turn, short enough to free abandoned episodes


# -- typed protocol ----------------------------------------------------------------------------
class KernelAction(Action):
    """One turn's answer: the kernel source (a bare module defining ModelNew, or a model response
    with a fenced code block), its backend, and whether to return the feedback text."""

    code: str = Field(..., description="Python source defining class ModelNew, bare or as a model response "
                                         "(a ```python block); a response without one is a format failure.")
    backend: Literal["triton", "cuda"] | None = Field(
        default=None, description="Kernel backend; must match the server's (None: the server's).")
    request_feedback: bool = Field(default=True, description="Include the Kevin-style feedback text.")


class KernelObservation(Observation):
    """What the agent sees: at reset the prompt; after a step the verdict, reward and feedback."""

    episode_id: str = ""
    problem_id: str = ""
    level: int = 0
    holdout: bool = False
    turn: int = 0  # turns taken so far
    max_turns: int = 1
    prompt: str = ""  # the next turn's prompt (problem text, and from turn 1 on the last kernel + feedback)
    messages: list[dict[str, str]] = Field(default_factory=list)  # the same prompt as chat messages
    format_ok: bool = False
    compiled: bool = False
    correct: bool = False
    speedup: float | None = None
    error_category: str = ""
    error_line: str = ""
    feedback: str = ""
    cached: bool = False
    # kernrl's fields (its client reads these), with kernrl's meanings.
    problem_description: str = ""  # the task as the model first reads it
    reference_code: str = ""  # the problem's PyTorch reference module
    gpu_info: str = ""  # what judges the kernels: the GPU's name and compute capability, or the CPU's architecture
    compilation_success: bool = False  # the module imported and built (False at reset: nothing was sent yet)
    compilation_error: str | None = None  # why it did not, when it did not
    correctness_pass: bool | None = None  # None where correctness was not reached (or no verdict was possible)
    max_diff: float | None = None  # the largest absolute error over the floating outputs compared


# kernrl's "solved": right and faster than this (its server's threshold); unreachable where nothing is timed (CPU).
SOLVED_SPEEDUP = 1.05


class KernelState(State):
    """Where an episode stands (`step_count` is OpenEnv's name for the turns taken)."""

    problem_id: str = ""
    turn: int = 0
    max_turns: int = 1
    history_length: int = 0
    holdout: bool = False
    done: bool = False
    # Why it ended: turns (all used), correct (early stop), infra (no verdict possible), expired (idle past
    # env.idle_timeout_s), disconnected (its WebSocket session ended), replaced (its session reset).
    end_reason: str | None = None
    best_speedup: float = 0.0  # kernrl's: the best counted speedup of a right kernel so far (0 where none was timed)
    solved: bool = False  # kernrl's: a right kernel ran faster than SOLVED_SPEEDUP x the baseline


# A bare module that defines the candidate class at its top level, whether or not it parses.
_DEFINES_CANDIDATE = re.compile(r"^(class\s+(ModelNew|Model)\b|ModelNew\s*=)", re.MULTILINE)
# The first line of a bare module: an import, a definition, a decorator, a comment, a docstring or an assignment.
_MODULE_START = re.compile(r"^(import\s|from\s+\S+\s+import\b|class\s|def\s|async\s+def\s|@|#|\"\"\"|\'\'\'|[A-Za-z_][\w.]*\s*[:=])")


def as_response(code: str) -> str:
    """The model response our extraction reads: bare Python defining ModelNew (or, kernrl's way, Model) is fenced; anything
    else (a fenced answer, prose, a model's raw output) goes as it is, and is judged as train judges it.

    A bare module that does not parse is fenced too (it starts as Python does and defines the class at its top level),
    so that its verdict names the syntax error and its line, as `eval` does, rather than a missing code block."""
    if "```" in code or "<KERNEL>" in code or "Model" not in code:
        return code
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        first = next((line for line in code.splitlines() if line.strip()), "")
        looks_bare = bool(_MODULE_START.match(first)) and bool(_DEFINES_CANDIDATE.search(code))
        return f"```python\n{code}\n```" if looks_bare else code
    if candidate_class_name(tree) is None:
        return code
    return f"```python\n{code}\n```"


def shown_problem_id(problem: Problem) -> str:
    """The id observations carry: the problem's in its suite's own form (kernrl's `L1_23_Softmax`, ours `L1/23`)."""
    return problem.display_id


# Categories that end a kernel before it is imported and built: kernrl's compilation failures.
_NOT_BUILT = (ErrorCategory.FORMAT, ErrorCategory.STATIC, ErrorCategory.COMPILE)


def kernrl_verdict(result: EvalResult) -> dict[str, Any]:
    """kernrl's verdict fields of one step: compilation_success/error, correctness_pass (None where correctness was
    never reached or no verdict is possible), max_diff."""
    category = result.error_category
    built = bool(result.compiled) and category not in _NOT_BUILT
    reached = built and not category.is_ours
    return {
        "compilation_success": built,
        "compilation_error": None if built else (clean_error_line(result.error_message) or category.value),
        "correctness_pass": counts_as_correct(result) if reached else None,
        "max_diff": result.max_abs_err if reached else None,
    }


# -- errors the HTTP layer turns into 4xx ------------------------------------------------------
class EnvRequestError(Exception):
    """A caller's mistake, with the HTTP status it maps to and a one-sentence reason."""

    status_code = 400

    def __init__(self, message: str, status_code: int | None = None) -> None:
        super().__init__(message)
        if status_code is not None:
            self.status_code = status_code


# -- the one validation of requests, over HTTP and the WebSocket alike ----------------------------
RESET_FIELDS = ("problem_id", "seed", "split", "max_turns", "episode_id")


def check_text(value: Any, field: str) -> None:
    """A string that cannot be UTF-8 text (a lone surrogate, which JSON's \\u escapes allow) is refused up front."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise EnvRequestError(f"{field} holds a lone surrogate ({value[exc.start]!r} at character {exc.start}), "
                                  "which is not Unicode text; send it as valid UTF-8.", 422) from None


def validation_sentence(exc: ValidationError, prefix: str = "") -> str:
    """The first validation error as one sentence, e.g. `Malformed request: action.code: Field required.`"""
    errors = exc.errors()
    if not errors:
        return "The request is malformed."
    first = errors[0]
    where = ".".join(str(part) for part in first.get("loc", ()) if part != "body")
    message = str(first.get("msg", "invalid value")).rstrip(".")
    return f"Malformed request: {prefix}{where}: {message}." if where or prefix else f"Malformed request: {message}."


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_episode_id(episode_id: Any) -> str | None:
    check_text(episode_id, "episode_id")
    if episode_id is not None and not isinstance(episode_id, str):
        raise EnvRequestError("episode_id must be the string that /reset returned.", 422)
    if episode_id is not None and len(episode_id) > MAX_EPISODE_ID_CHARS:
        raise EnvRequestError(f"episode_id is {len(episode_id)} characters; the limit is {MAX_EPISODE_ID_CHARS}.", 422)
    return episode_id


def reset_arguments(data: Mapping[str, Any]) -> dict[str, Any]:
    """A reset's fields checked (names, types, text, lengths) before anything is done: the same refusals (4xx, one
    sentence each) whether the reset came over HTTP or the WebSocket."""
    unknown = sorted(set(data) - set(RESET_FIELDS), key=str)
    if unknown:
        raise EnvRequestError(f"Unknown reset field {unknown[0]!r}; reset takes problem_id, seed, split, max_turns "
                              "and episode_id.", 422)
    problem_id, split, max_turns, seed = (data.get("problem_id"), data.get("split", "train"), data.get("max_turns"),
                                          data.get("seed"))
    check_text(problem_id, "problem_id")
    check_text(split, "split")
    if problem_id is not None and not isinstance(problem_id, str):
        raise EnvRequestError("problem_id must be a string such as 'L1/19'.", 422)
    if problem_id is not None and len(problem_id) > MAX_PROBLEM_ID_CHARS:
        raise EnvRequestError(f"problem_id is {len(problem_id)} characters; problem ids are at most "
                              f"{MAX_PROBLEM_ID_CHARS} (e.g. L1/19 or L1_19_ReLU).", 422)
    if not isinstance(split, str):
        raise EnvRequestError("split must be 'train' or 'holdout'.", 422)
    if max_turns is not None and not _is_int(max_turns):
        raise EnvRequestError("max_turns must be an integer.", 422)
    if seed is not None and not (_is_int(seed) and seed >= 0):
        raise EnvRequestError("seed must be a whole number, 0 or more.", 422)
    return {"problem_id": problem_id, "seed": seed, "split": split, "max_turns": max_turns,
            "episode_id": check_episode_id(data.get("episode_id"))}


def parse_action(data: Any) -> KernelAction:
    """A step's action checked (its code text and size first, then its fields) before the turn is touched: the same
    refusals over HTTP and the WebSocket, and a refused action never uses up a turn."""
    if not isinstance(data, Mapping):
        raise EnvRequestError('The action must be a JSON object such as {"code": "..."}.', 422)
    code = data.get("code")
    check_text(code, "action.code")
    if isinstance(code, str) and len(code.encode("utf-8")) > MAX_CODE_BYTES:
        raise EnvRequestError(f"The code is {len(code.encode('utf-8'))} bytes; the limit is {MAX_CODE_BYTES} bytes.",
                              413)
    try:
        return KernelAction.model_validate(dict(data))
    except ValidationError as exc:
        raise EnvRequestError(validation_sentence(exc, "action."), 422) from None


# -- the shared service ------------------------------------------------------------------------
@dataclass
class _Episode:
    episode_id: str
    number: int  # the `step` column of this episode's rows
    env: KernelEnv
    holdout: bool
    lock: threading.Lock = field(default_factory=threading.Lock)  # held while a step is evaluated
    last_active: float = field(default_factory=time.monotonic)  # the end of its last request
    close_reason: str | None = None  # set by a close that came while a step was being evaluated
    shown_id: str = ""  # the problem id observations carry: as the client asked, or kernrl's form of a kernrl problem
    description: str = ""  # the first turn's prompt (kernrl's problem_description)


def _ended_detail(episode: _Episode, idle_timeout_s: float) -> str:
    """Why a step on this finished episode is refused, and what to do: one sentence."""
    reason = episode.env.end_reason
    if reason == "expired":
        return (f"Episode {episode.episode_id!r} was closed after {idle_timeout_s:g} s without a request "
                "(env.idle_timeout_s); call /reset to start a new one.")
    if reason in ("disconnected", "replaced"):
        why = "its WebSocket session ended" if reason == "disconnected" else "its session started another episode"
        return f"Episode {episode.episode_id!r} was closed when {why}; call /reset to start a new one."
    if reason == "evicted":
        return (f"Episode {episode.episode_id!r} was closed to make room for a newer one (it had been idle the longest "
                "when the server's limit of open episodes was reached: env serve --max-open-episodes); call /reset to "
                "start a new one.")
    return "The episode is done; call /reset to start a new one."


class KernelEnvService:
    """Episodes of every client, one evaluator pool and one store shared between them.

    `evaluate` has Evaluator.evaluate_responses' shape and must be thread-safe (it is)."""

    def __init__(self, evaluator: Any, train: Sequence[Problem], holdout: Sequence[Problem], *,
                 spec: EnvSpec, store: Any | None = None, preset: str = "correctness",
                 speedup_cap: float = 8.0, run_id: str = DEFAULT_RUN_ID, keep_done: int = 1024,
                 idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
                 max_open_episodes: int = DEFAULT_MAX_OPEN_EPISODES) -> None:
        if preset not in PRESETS:
            raise ValueError(f"unknown reward preset {preset!r}; use one of {', '.join(PRESETS)}")
        if not idle_timeout_s > 0:
            raise ValueError(f"idle_timeout_s must be positive, not {idle_timeout_s}")
        if max_open_episodes < 1:
            raise ValueError(f"max_open_episodes must be at least 1, not {max_open_episodes}")
        self.evaluator = evaluator
        self.train = {p.id: p for p in train}
        self.holdout = {p.id: p for p in holdout}
        self.spec = spec
        self.store = store
        self.preset = preset
        self.speedup_cap = speedup_cap
        self.run_id = run_id
        self.keep_done = keep_done  # finished episodes kept for /state; older ones live on in the store only
        self.idle_timeout_s = idle_timeout_s  # an open episode with no request for this long is closed
        self.max_open_episodes = max_open_episodes  # past it, a reset closes the open episode idle the longest
        self._episodes: dict[str, _Episode] = {}
        self._lock = threading.Lock()
        self._next_number = self._first_free_number()

    def _first_free_number(self) -> int:
        """Episode numbers continue after the store's last one, so a restarted server never overwrites rows."""
        if self.store is None:
            return 0
        try:
            rows = self.store.fetchall("SELECT max(step) FROM rollouts WHERE run_id = ?", [self.run_id], read_only=True)
        except Exception:  # noqa: BLE001 - a new file: no table yet
            return 0
        return 0 if not rows or rows[0][0] is None else int(rows[0][0]) + 1

    @property
    def open_episodes(self) -> int:
        with self._lock:
            self._expire_idle()
            return sum(1 for e in self._episodes.values() if not e.env.done)

    def _expire_idle(self) -> None:
        """Close open episodes that had no request for idle_timeout_s (a client that crashed or walked away).

        Called, under the service lock, before every request looks episodes up, so an expired episode never
        counts as open. An episode whose step is being evaluated is busy, never idle."""
        now = time.monotonic()
        for episode in self._episodes.values():
            if not episode.env.done and not episode.lock.locked() and now - episode.last_active > self.idle_timeout_s:
                episode.env.end("expired")

    def close_episode(self, episode_id: str, reason: str = "disconnected") -> None:
        """End an open episode that its client gave up (a WebSocket session that ended); rows stay in the store.

        Never waits: a step under way keeps its verdict, and the episode ends as that step finishes."""
        with self._lock:
            episode = self._episodes.get(episode_id)
        if episode is None or episode.env.done:
            return
        episode.close_reason = reason  # first, so that a step finishing now sees it (see step's finally)
        if episode.lock.acquire(blocking=False):
            try:
                episode.env.end(reason)
            finally:
                episode.lock.release()

    # -- reset ---------------------------------------------------------------------------------
    def reset(self, problem_id: str | None = None, seed: int | None = None, split: str = "train",
              episode_id: str | None = None, max_turns: int | None = None) -> KernelObservation:
        if split not in ("train", "holdout"):
            raise EnvRequestError(f"split must be 'train' or 'holdout', not {split!r}.")
        if max_turns is not None and not 1 <= max_turns <= self.spec.turns:
            raise EnvRequestError(f"max_turns must be between 1 and {self.spec.turns}, not {max_turns}.")
        pool = self.holdout if split == "holdout" else self.train
        if problem_id is not None:
            # Ours (L1/19), kernrl's (L1_19_ReLU) or a unique prefix of kernrl's, through the one resolver: a kernrl id
            # names kernrl's problems only, never KernelBench's of the same number.
            offered = [*self.train.values(), *self.holdout.values()]
            try:
                found = resolve_problem(problem_id, offered)
            except UserError as exc:
                raise EnvRequestError(str(exc), 422) from None
            if found is None:
                raise EnvRequestError(unknown_problem_message(problem_id, offered, KERNRL_SERVE_HINT), 404)
            if found.id in self.holdout and split != "holdout":
                raise EnvRequestError(f"{found.display_id} is a holdout problem; ask for it with split='holdout'.", 403)
            problem = pool[found.id] if found.id in pool else self.train[found.id]
            if problem.unavailable_reason:  # it could never be judged here: say why now, not at the first step
                raise EnvRequestError(f"This server cannot run {problem.display_id}: {problem.unavailable_reason}.", 422)
        else:
            runnable = [p for p in pool.values() if not p.unavailable_reason]
            if not runnable:
                raise EnvRequestError(f"The {split} split of this server is empty"
                                      f"{' of problems it can run' if pool else ''}.", 404)
            problem = random.Random(seed).choice(sorted(runnable, key=lambda p: p.id))
        spec = self.spec if max_turns is None else EnvSpec(**{**self.spec.__dict__, "turns": max_turns})
        with self._lock:
            self._expire_idle()
            episode_id = episode_id or uuid.uuid4().hex
            if episode_id in self._episodes and not self._episodes[episode_id].env.done:
                raise EnvRequestError(f"Episode {episode_id!r} is still open; reset with a new episode_id.", 409)
            self._make_room()
            episode = _Episode(episode_id, self._next_number, KernelEnv(problem, spec), problem.id in self.holdout,
                               shown_id=shown_problem_id(problem))
            episode.description = messages_to_text(episode.env.next_messages())
            self._next_number += 1
            self._episodes[episode_id] = episode
            self._forget_old_episodes()
        return self._observation(episode)

    @property
    def gpu_info(self) -> str:
        identity = getattr(self.evaluator, "device_identity", None)
        try:
            return str(identity()) if callable(identity) else ""
        except Exception:  # noqa: BLE001 - a pool that cannot start says so at the first step
            return ""

    def _make_room(self) -> None:
        """Under the service lock, before an episode opens: at the limit of open episodes, the one idle the longest
        (none of them evaluating a step) is closed; with every one of them evaluating, the reset is refused (503)."""
        open_ = [e for e in self._episodes.values() if not e.env.done]
        if len(open_) < self.max_open_episodes:
            return
        idle = [e for e in open_ if not e.lock.locked()]
        if len(open_) - len(idle) >= self.max_open_episodes or not idle:
            raise EnvRequestError(f"All {len(open_)} open episodes (the server's limit) are evaluating a step; "
                                  "reset again in a moment.", 503)
        for episode in sorted(idle, key=lambda e: e.last_active)[: len(open_) - self.max_open_episodes + 1]:
            episode.env.end("evicted")

    # -- step ----------------------------------------------------------------------------------
    def _forget_old_episodes(self) -> None:
        """Keep memory bounded on a long-lived server: drop the oldest finished episodes beyond keep_done."""
        done = [e for e in self._episodes.values() if e.env.done]
        for episode in sorted(done, key=lambda e: e.number)[: max(0, len(done) - self.keep_done)]:
            del self._episodes[episode.episode_id]

    def _several_open(self, count: int) -> EnvRequestError:
        return EnvRequestError(f"{count} episodes are open; pass the episode_id that /reset returned (an episode "
                               f"with no request for {self.idle_timeout_s:g} s is closed: env.idle_timeout_s).")

    def find(self, episode_id: str | None) -> _Episode:
        with self._lock:
            self._expire_idle()
            if episode_id is None:
                open_ = [e for e in self._episodes.values() if not e.env.done]
                if len(open_) == 1:
                    return open_[0]
                if not self._episodes:
                    raise EnvRequestError("No episode is open; call /reset first.", 409)
                if not open_:
                    raise EnvRequestError("The episode is done; call /reset to start a new one.", 409)
                raise self._several_open(len(open_))
            if episode_id not in self._episodes:
                raise EnvRequestError(f"Unknown episode {episode_id!r}; call /reset to start one.", 404)
            return self._episodes[episode_id]

    def step(self, action: KernelAction, episode_id: str | None = None) -> KernelObservation:
        action = parse_action(action.model_dump())  # the transports' check, again for callers of the service itself
        check_episode_id(episode_id)
        backend = self.spec.kernel_backend
        if action.backend is not None and action.backend != backend:
            raise EnvRequestError(f"This server evaluates {backend} kernels, not {action.backend}.")
        episode = self.find(episode_id)
        if not episode.lock.acquire(blocking=False):
            raise EnvRequestError(f"Episode {episode.episode_id!r} is already evaluating a step; wait for it.", 409)
        try:
            env = episode.env
            if env.done:
                raise EnvRequestError(_ended_detail(episode, self.idle_timeout_s), 409)
            messages = env.next_messages()
            completion = as_response(action.code)
            taken = len(env.turns)
            env.add_completion(messages_to_text(messages), [], completion, [], [], "stop")
            try:
                result = self.evaluator.evaluate_responses([env.problem.id], [completion])[0]
                turn_score = score(result, self.preset, speedup_cap=self.speedup_cap)
                if result.error_category == ErrorCategory.INFRA:
                    # Our failure (a lost worker), not a verdict: the row records it, and the turn is given back so
                    # that the same code sent again is judged as this turn (its row then replaces this one).
                    env.turns[-1].result, env.turns[-1].score = result, turn_score
                    self._record(episode)
                    env.turns.pop()
                    return self._observation(episode, result, None, action.request_feedback)
                env.add_result(result)
                env.turns[-1].score = turn_score
                self._record(episode)
            except Exception as exc:  # noqa: BLE001 - ours (the store, the evaluator): the turn is given back
                del env.turns[taken:]
                env.end_reason = None  # it was open before this step
                raise EnvRequestError(f"This step could not be judged and recorded on the server's side "
                                      f"({type(exc).__name__}: {' '.join(str(exc).split())[:200]}), so the turn was "
                                      "not used: send the same code again.", 503) from exc
            return self._observation(episode, result, turn_score.reward, action.request_feedback)
        finally:
            episode.last_active = time.monotonic()
            episode.lock.release()
            if episode.close_reason is not None:  # its session closed while this step was evaluated
                episode.env.end(episode.close_reason)

    def state(self, episode_id: str | None = None) -> KernelState:
        episode = self.find_any(episode_id)
        env = episode.env
        speedups = [t.result.speedup for t in env.turns
                    if t.result is not None and t.result.speedup_counts and counts_as_correct(t.result)]
        best = max(speedups, default=0.0)
        return KernelState(episode_id=episode.episode_id, step_count=len(env.turns), problem_id=episode.shown_id,
                           turn=len(env.turns), max_turns=env.spec.turns, history_length=len(env.turns),
                           holdout=episode.holdout, done=env.done, end_reason=env.end_reason,
                           best_speedup=best, solved=best > SOLVED_SPEEDUP)

    def find_any(self, episode_id: str | None) -> _Episode:
        """Like find, but a finished episode is fine (state after the end), and with no id the newest."""
        with self._lock:
            self._expire_idle()
            if episode_id is None:
                if not self._episodes:
                    raise EnvRequestError("No episode exists yet; call /reset first.", 409)
                open_ = [e for e in self._episodes.values() if not e.env.done]
                if len(open_) > 1:
                    raise self._several_open(len(open_))
                return open_[0] if open_ else max(self._episodes.values(), key=lambda e: e.number)
        return self.find(episode_id)

    # -- pieces --------------------------------------------------------------------------------
    def _observation(self, episode: _Episode, result: EvalResult | None = None, reward: float | None = None,
                     with_feedback: bool = True) -> KernelObservation:
        env = episode.env
        messages = [] if env.done else env.next_messages()
        fields: dict[str, Any] = {
            "episode_id": episode.episode_id, "problem_id": episode.shown_id, "level": env.problem.level,
            "holdout": episode.holdout, "turn": len(env.turns), "max_turns": env.spec.turns,
            "messages": messages, "prompt": messages_to_text(messages) if messages else "",
            "done": env.done, "reward": reward,
            "metadata": {"episode_id": episode.episode_id, "end_reason": env.end_reason},
            "problem_description": episode.description, "reference_code": env.problem.source,
            "gpu_info": self.gpu_info,
        }
        if result is not None:
            feedback = Feedback.from_result(result, profile=env.spec.feedback_profile)
            if result.error_category == ErrorCategory.INFRA:  # step() gave the turn back
                feedback.hint = (f"The evaluation failed on our side, not because of your kernel, so this turn was not "
                                 f"counted (turn {len(env.turns) + 1} of {env.spec.turns} is still yours): send the same "
                                 "code again.")
            elif result.error_category.is_ours:  # too large for this device: no turn of this episode can be judged
                feedback.hint = f"{HINTS[result.error_category.value]} The episode has ended; call /reset for another problem."
            fields.update({
                "format_ok": bool(result.format_ok), "compiled": bool(result.compiled), "correct": bool(result.correct),
                "speedup": result.speedup if result.speedup_counts else None,
                "error_category": result.error_category.value,
                "error_line": clean_error_line(result.error_message) if result.error_category != ErrorCategory.OK else "",
                "feedback": feedback.render() if with_feedback else "", "cached": bool(result.cached),
                **kernrl_verdict(result),
            })
        return KernelObservation(**fields)

    def _record(self, episode: _Episode) -> None:
        """The turn's rollouts/rewards rows, shaped as training writes them (blobs and kernels included)."""
        if self.store is None:
            return
        from kernelbench_rl.store.db import eval_key_for

        env, turn = episode.env, episode.env.turns[-1]
        result = turn.result
        store = self.store
        with store.connect():
            prompt_sha, completion_sha = store.put_texts("prompt", [turn.prompt])[0], store.put_texts("completion", [turn.completion])[0]
            kernel_sha = store.put_kernel(turn.code, self.spec.kernel_backend) if turn.code else None
            eval_key = (eval_key_for(env.problem.id, kernel_sha, result.settings_hash)
                        if kernel_sha and result is not None and result.settings_hash else None)
            key = {"run_id": self.run_id, "step": episode.number, "problem_id": env.problem.id,
                   "sample_index": 0, "turn": turn.index}
            suite = {"suite": env.problem.suite}
            components = dict(turn.score.components) if turn.score else {}
            components.update({"infra": bool(turn.score and turn.score.infra), "hack": bool(turn.score and turn.score.hack),
                               "preset": self.preset, "episode_id": episode.episode_id, "holdout": episode.holdout,
                               "error_category": result.error_category.value if result else None})
            store.write_batch({
                "rollouts": [{**key, **suite, "stage": self.preset, "level": env.problem.level, "prompt_sha256": prompt_sha,
                              "completion_sha256": completion_sha, "kernel_sha256": kernel_sha, "eval_key": eval_key,
                              "prompt_tokens": 0, "completion_tokens": 0, "format_ok": turn.format_ok,
                              "error_category": result.error_category.value if result else None,
                              "error_message": result.error_message if result else None}],
                "rewards": [{**key, **suite, "stage": self.preset, "reward": turn.score.reward if turn.score else None,
                             "return_value": None, "advantage": None,
                             "components_json": json.dumps(components, sort_keys=True)}],
            }, replace_where=key)

    def close(self) -> None:
        close = getattr(self.evaluator, "close", None)
        if callable(close):
            close()


# -- the OpenEnv Environment (one per WebSocket session) ---------------------------------------
class KernelEnvironment(Environment[KernelAction, KernelObservation, KernelState]):
    """OpenEnv's Environment interface over the shared service: each instance drives one episode at a time."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, service: KernelEnvService) -> None:
        super().__init__()
        self.service = service
        self.episode_id: str | None = None

    def reset(self, seed: int | None = None, episode_id: str | None = None, problem_id: str | None = None,
              split: str = "train", max_turns: int | None = None, **_: Any) -> KernelObservation:
        observation = self.service.reset(problem_id=problem_id, seed=seed, split=split, max_turns=max_turns)
        if self.episode_id is not None:  # the session's previous episode is given up, not left open
            self.service.close_episode(self.episode_id, "replaced")
        self.episode_id = observation.episode_id
        return observation

    def close(self) -> None:
        """OpenEnv calls this when the WebSocket session ends (closed or dropped): its episode ends with it."""
        if self.episode_id is not None:
            self.service.close_episode(self.episode_id, "disconnected")

    def step(self, action: KernelAction, timeout_s: float | None = None, **_: Any) -> KernelObservation:
        if self.episode_id is None:
            raise EnvRequestError("No episode is open; call reset first.", 409)
        return self.service.step(action, self.episode_id)

    @property
    def state(self) -> KernelState:
        if self.episode_id is None:
            return KernelState()
        return self.service.state(self.episode_id)
