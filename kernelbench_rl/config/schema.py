"""The training configuration as dataclasses, loaded from YAML with dotted `key=value` overrides.

Every field is typed; overrides are parsed as YAML scalars and then checked against the field's
type, so `training.steps=abc` or `trainig.steps=3` fail with one sentence naming the key. Ranges
live beside the fields (`Annotated[float, Gt(0)]`) and are checked, for every section at once, by
pydantic against the schema: a new section or key declares its own range and needs no code here.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import yaml
from annotated_types import Ge, Gt, Le, Lt

from kernelbench_rl.errors import UserError

CONFIG_DIR = Path(__file__).resolve().parent

DEFAULT_TINKER_MODEL = "Qwen/Qwen3-8B"
DEFAULT_LOCAL_MODEL = "local:tiny"


@dataclass
class PolicySection:
    backend: str = "auto"  # auto | tinker | local (auto: tinker when TINKER_API_KEY is set)
    base_model: str | None = None  # None: Qwen/Qwen3-8B on tinker, local:tiny locally
    lora_rank: Annotated[int, Ge(1)] = 32
    device: str = "auto"  # local backend only: auto | cpu | cuda
    seed: int = 0
    # Prompt rendering and stop sequences: auto (tinker-cookbook's renderer for a model it knows, else
    # the tokenizer's own chat template, stopping at EOS) | chat_template | a cookbook renderer name
    renderer: str = "auto"


@dataclass
class SamplingConfig:
    group_size: Annotated[int, Ge(1)] = 8
    # Completion tokens per turn; None: ANSWER_MAX_TOKENS, or THINKING_MAX_TOKENS with thinking on,
    # never more than the model's context leaves after the prompt.
    max_tokens: Annotated[int, Ge(1)] | None = None
    temperature: Annotated[float, Ge(0)] = 1.0
    top_p: Annotated[float, Gt(0), Le(1)] = 1.0
    thinking: bool = False  # reasoning before the answer, for hybrid models (Qwen3); off for single-turn kernels



def refuse_untrainable_sampling(temperature: float) -> None:
    """Greedy sampling (temperature 0) gives every answer of a group the same text, so no group's rewards differ and
    nothing trains. Legal for evaluation; refused with one sentence (UserError) for training, by the RL loop and by
    the pipeline before its first stage (so an SFT warm start is not spent on a run that cannot train)."""
    if temperature <= 0:
        raise UserError("sampling.temperature=0 samples every answer of a group alike, so no group has rewards "
                        "that differ and nothing trains; set it above 0 for training (1.0 is the default).")

@dataclass
class TrainingConfig:
    steps: Annotated[int, Ge(0)] = 100
    batch_problems: Annotated[int, Ge(1)] = 8
    learning_rate: Annotated[float, Gt(0)] = 1e-5
    # auto (importance_sampling where the loss scores the distribution sampled, else cispo) | importance_sampling | ppo
    # | cispo (all weigh by the sampler's logprobs)
    loss_fn: str = "auto"
    # Minibatches per step, each its own optim_step (PPO's clip acts from the second one on)
    num_substeps: Annotated[int, Ge(1)] = 1
    adam_beta1: Annotated[float, Ge(0), Lt(1)] = 0.9
    adam_beta2: Annotated[float, Ge(0), Lt(1)] = 0.95
    adam_eps: Annotated[float, Gt(0)] = 1e-8
    checkpoint_every: Annotated[int, Ge(1)] = 10
    # Periodic checkpoints expire after this many seconds on Tinker (None: never); the final one and the
    # one a stopped run resumes from never do. Tinker accepts 1 hour to 10 years.
    checkpoint_ttl_s: Annotated[int, Ge(3600), Le(315_360_000)] | None = 30 * 24 * 3600
    seed: int = 0
    infra_retries: Annotated[int, Ge(0)] = 1  # extra evaluations of a sample whose evaluation failed for infra reasons
    # Step k+1 is sampled and evaluated while step k trains, by weights at most this many steps behind
    # (the importance-sampling ratio corrects for the lag); 0: every step is sampled by the latest weights.
    max_steps_off_policy: Annotated[int, Ge(0)] = 1
    # The cookbook's controls (tinker_cookbook.rl): a KL penalty against the base model folded into the
    # advantages (incorporate_kl_penalty; 0: off), its discount over later tokens, the post-update KL of each
    # step (compute_post_kl: one more forward pass over the batch), and PPO's clip range (loss_fn=ppo only).
    kl_penalty_coef: Annotated[float, Ge(0)] = 0.0
    kl_discount_factor: Annotated[float, Ge(0), Le(1)] = 0.0
    # Score each sampled token under the distribution it was drawn from (the logits over sampling.temperature), so the
    # policy trained is the policy sampled: null (auto) on the local backend when sampling is tempered; Tinker's
    # losses score the model's own distribution (false there)
    tempered_logprobs: bool | None = None
    # Each step's learning rate is scaled down (never up) to keep its post-update KL (optim/kl_pre_post_v1, nats per
    # completion token) near this; the first trained step runs at a tenth of the learning rate (null: off)
    max_step_kl: Annotated[float, Gt(0)] | None = 0.01
    # The KL penalty's reference policy: auto (the SFT warm start RL began from when the run has one, else the base
    # model) | base | warm_start | a checkpoint name of the run (step_000010) | a sampler path
    kl_reference: str = "auto"
    compute_post_kl: bool = False
    ppo_clip_low: Annotated[float, Gt(0), Lt(1)] = 0.8
    ppo_clip_high: Annotated[float, Gt(1)] = 1.2
    # loss_fn=cispo (truncated importance sampling): the detached importance weight is clipped to [low, high]
    cispo_clip_low: Annotated[float, Ge(0), Lt(1)] = 0.0
    cispo_clip_high: Annotated[float, Gt(1)] = 4.0


@dataclass
class RewardsConfig:
    # curriculum (follow the stage) | format | compile | correctness | speed | speed_of_light (speed's, capped by
    # the problem's floor) | kernrl | kernrl_server
    preset: str = "curriculum"
    gamma: Annotated[float, Ge(0), Le(1)] = 0.4  # discount over later turns (Kevin mode)
    baseline: str = "loo"  # loo (leave-one-out) | group_mean
    speedup_cap: Annotated[float, Gt(0)] = 8.0  # the speed term saturates at this speedup
    # A completion cut at max_tokens (stop_reason "length"): clamp (graded, then clamped to the preset's
    # floor, the reward of an answer with nothing right: never above an honest failure) | reward (scored
    # truncated_reward, at most the floor) | drop (out of the loss and the group's baseline) | zero_advantage
    # (in the baseline, no gradient) | keep (its verdict, as any other turn: smoke runs that cut every answer)
    truncated: str = "clamp"
    truncated_reward: float = 0.0


@dataclass
class FeedbackConfig:
    """What a refinement turn (Kevin mode, the env server's feedback) is told beyond the verdict."""

    profile: bool = False  # GPU: the kernels of one profiled forward and the speed-of-light line


@dataclass
class EnvConfig:
    mode: str = "single"  # single | kevin
    turns: Annotated[int, Ge(1)] = 4  # Kevin mode only
    token_budget: Annotated[int, Ge(1)] = 32768  # prompt + completion tokens allowed for one turn's context
    early_stop_on_correct: bool = False
    kernel_backend: str = "triton"  # triton | cuda
    instructions: str | None = None
    # `env serve` only: an episode with no request for this long is closed (a client that crashed or walked away).
    idle_timeout_s: Annotated[float, Gt(0)] = 1800.0
    feedback: FeedbackConfig = field(default_factory=FeedbackConfig)


@dataclass
class CurriculumConfig:
    enabled: bool = True
    stages: list[str] = field(default_factory=lambda: ["format", "compile", "correctness", "speed"])
    start_stage: str = "format"
    force_stage: str | None = None  # pins the stage: no automatic stage promotion
    # A stage is promoted when the mean of its rate over the last `window` steps reaches its threshold
    # (defaults from a replay of published rates: bench/RESULTS.md, "Curriculum promotion"); `threshold`, when set, is every stage's threshold.
    threshold: Annotated[float, Ge(0), Le(1)] | None = None
    format_threshold: Annotated[float, Ge(0), Le(1)] = 0.8  # format rate
    compile_threshold: Annotated[float, Ge(0), Le(1)] = 0.6  # compile rate
    correctness_threshold: Annotated[float, Ge(0), Le(1)] = 0.35  # correct rate
    speed_threshold: Annotated[float, Ge(0), Le(1)] = 0.5  # correct rate (only when speed is not the last stage)
    window: Annotated[int, Ge(1)] = 5  # steps in the moving average
    # A stage not promoted after this many judged steps is anyway (0: never)
    max_steps_per_stage: Annotated[int, Ge(0)] = 15
    start_level: Annotated[int, Ge(1)] = 1
    promote_levels: bool = True
    level_threshold: Annotated[float, Ge(0), Le(1)] = 0.5  # mean correct rate at the level, in the last stage
    max_steps_per_level: Annotated[int, Ge(0)] = 25  # a level not promoted after this many judged steps is anyway (0: never)
    # A level whose mean correct rate falls to this or below goes back one level (null: never)
    demote_threshold: Annotated[float, Ge(0), Le(1)] | None = 0.05
    # A level left by a demotion is tried again (on its rate) only after this many judged steps at the level below,
    # doubled for each further demotion from it (0: at once)
    demotion_backoff: Annotated[int, Ge(0)] = 30
    previous_levels_share: Annotated[float, Ge(0), Lt(1)] = 0.25  # earlier levels' share of a step's problems


@dataclass
class ProblemsConfig:
    # None: the source's own (problems.loaders.default_levels): 1-3 for the bundled set and KernelBench, every level for
    # kernrl's problems; [] takes every level of any source.
    levels: list[Annotated[int, Ge(1)]] | None = None
    ids: list[str] = field(default_factory=list)  # restrict to these ids (empty: all)
    holdout_fraction: Annotated[float, Ge(0), Lt(1)] = 0.2
    split_seed: int = 0
    # Where problems come from: a KernelBench checkout or kernrl's problems folder (docs/problem-sources.md);
    # None: the bundled set. `kernelbench_root` is the older name of the same key.
    root: str | None = None
    kernelbench_root: str | None = None
    # The problem audit (`kernelbench-rl problems audit`): training leaves out problems whose inputs cannot tell a
    # right kernel from a wrong one, and the evaluator gets the widened inputs the audit chose.
    audit: bool = True

    @property
    def source_root(self) -> str | None:
        """The problem source: `root`, else its older name `kernelbench_root`."""
        return self.root or self.kernelbench_root


@dataclass
class EvalConfig:
    device: str = "auto"  # auto (cuda when a GPU is visible) | cpu | cuda
    size: str = "auto"  # auto (real on cuda, small on cpu) | small | real
    precision: str = "fp32"
    num_workers: Annotated[int, Ge(1)] | None = None
    timeout_s: Annotated[float, Gt(0)] = 120.0
    # Seconds a problem's reference may take for one of its phases (its sizing, one seed's outputs, its baseline
    # timing) before the problem gets no verdict (too_large) on this evaluator; None: timeout_s. docs/evaluator.md
    reference_timeout_s: Annotated[float, Gt(0)] | None = None
    correctness_trials: int = 3
    # Extra widened seeds where a trivial candidate passes a problem's own inputs (0: never widen).
    discriminating_trials: Annotated[int, Ge(0)] = 2
    timing_trials: int = 50
    # fp16/bf16/fp8 arithmetic or autocast in an fp32 problem: warn (the tolerance decides) | reject (static error)
    precision_policy: str = "warn"
    cluster: str = "local"  # local | dask-local | dask://HOST:PORT (where evaluations run; not part of the run id)
    # Device memory (GiB) the evaluator leaves to a policy trained on its GPU, for the policy's peak (weights,
    # sampling, training). None: estimated when the local policy runs on CUDA beside a local evaluator
    # (twice the weights plus working memory), else 0. Not part of the run id.
    reserved_memory_gb: Annotated[float, Ge(0)] | None = None


@dataclass
class RagConfig:
    enabled: bool = False
    k: Annotated[int, Ge(1)] = 2
    index_dir: str | None = None  # None: $KBRL_RAG_INDEX, else rag_index/ beside the database
    model: str | None = None  # embedding model (None: the bundled MiniLM); must match the index
    char_budget: Annotated[int, Ge(1)] = 6000  # longest example shown, in characters


@dataclass
class SftConfig:
    """The supervised warm start before RL: cross-entropy on verified kernels, completion tokens only."""

    enabled: bool = True
    steps: Annotated[int, Ge(0)] = 0  # optimizer steps; 0: epochs x examples / batch_size
    epochs: Annotated[float, Gt(0)] = 2.0
    batch_size: Annotated[int, Ge(1)] = 8  # examples per optimizer step
    learning_rate: Annotated[float, Gt(0)] = 1.0e-4
    max_examples: Annotated[int, Ge(1)] = 512  # the run's own training problems first, then the rest of the corpus
    checkpoint_every: Annotated[int, Ge(1)] = 50
    # Also save when this many seconds passed since the last save (0: by steps only), so a killed warm
    # start loses at most this much work; a stopped one saves where it is.
    checkpoint_every_s: Annotated[float, Ge(0)] = 600.0


@dataclass
class TrainConfig:
    run_id: str | None = None  # None: derived from the rest of the config, so re-running resumes
    db_path: str = "runs/kernelbench_rl.duckdb"
    log_dir: str = "runs/logs"
    policy: PolicySection = field(default_factory=PolicySection)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    rewards: RewardsConfig = field(default_factory=RewardsConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    curriculum: CurriculumConfig = field(default_factory=CurriculumConfig)
    problems: ProblemsConfig = field(default_factory=ProblemsConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    rag: RagConfig = field(default_factory=RagConfig)
    sft: SftConfig = field(default_factory=SftConfig)

    def resolved_run_id(self) -> str:
        if self.run_id:
            return self.run_id
        payload = config_to_dict(self)
        payload.pop("run_id", None)
        payload["eval"].pop("cluster", None)  # the same run, resumed on other hardware, keeps its id
        payload["eval"].pop("reserved_memory_gb", None)  # how memory is shared, not what is trained
        payload["env"].pop("idle_timeout_s", None)  # a setting of the env server, not of training
        # problems.root and its older name are one key: either spelling, and runs configured before it, keep their id.
        payload["problems"]["kernelbench_root"] = self.problems.source_root
        payload["problems"].pop("root", None)
        if payload["problems"].get("levels") is None:  # the source's levels: runs configured as [1, 2, 3] keep their id
            from kernelbench_rl.problems.loaders import default_levels

            payload["problems"]["levels"] = default_levels(self.problems.source_root)
        if payload["eval"].get("precision_policy") == "warn":
            payload["eval"].pop("precision_policy")  # the default: runs configured before the key keep their id
        if payload["eval"].get("reference_timeout_s") is None:
            payload["eval"].pop("reference_timeout_s", None)  # the default, as above
        if payload["training"].get("loss_fn") == "auto":  # the default now; it was importance_sampling
            payload["training"]["loss_fn"] = "importance_sampling"
        # Keys added later, at their defaults: runs configured before them keep their id.
        for section, key, default in NEW_KEY_DEFAULTS:
            if payload[section].get(key) == default:
                payload[section].pop(key, None)
        digest = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:10]
        return f"train-{digest}"

    def run_log_dir(self) -> Path:
        return Path(self.log_dir) / self.resolved_run_id()

    def resolved_base_model(self) -> str:
        """policy.base_model, else Qwen/Qwen3-8B on Tinker (explicit or `auto` with a key) and local:tiny locally."""
        if self.policy.base_model:
            return self.policy.base_model
        import os

        wants_tinker = self.policy.backend == "tinker" or (
            self.policy.backend == "auto" and bool(os.environ.get("TINKER_API_KEY")))
        return DEFAULT_TINKER_MODEL if wants_tinker else DEFAULT_LOCAL_MODEL

    def max_completion_tokens(self) -> int:
        """Completion tokens per turn (`completion_token_limit` for the run's base model)."""
        return completion_token_limit(self.sampling, self.resolved_base_model())

    def turn_token_budget(self) -> int:
        """Prompt + completion tokens of one turn (`turn_token_budget` for the run's base model)."""
        return turn_token_budget(self.env, self.resolved_base_model())


# (section, key, default) of keys added after runs were first configured: left out of the run id at their default.
NEW_KEY_DEFAULTS: tuple[tuple[str, str, Any], ...] = (
    ("training", "cispo_clip_low", 0.0), ("training", "cispo_clip_high", 4.0), ("training", "kl_reference", "auto"),
    ("curriculum", "demotion_backoff", 30), ("training", "max_step_kl", 0.01), ("training", "tempered_logprobs", None),
)


# Completion defaults: a kernel answer (code block, a few lines around it) fits in ANSWER_MAX_TOKENS;
# reasoning first (Qwen3 thinking) needs room for the trace.
ANSWER_MAX_TOKENS = 4096
THINKING_MAX_TOKENS = 16384
# Context windows of models served without a local config to read (Tinker's Qwen3 family).
_CONTEXT_BY_PREFIX = {"Qwen/Qwen3-": 32768, "Qwen/Qwen3.5-": 65536}


def completion_token_limit(sampling: SamplingConfig, base_model: str) -> int:
    """Completion tokens per turn: sampling.max_tokens, else the default for answers or for thinking."""
    if sampling.max_tokens is not None:
        return sampling.max_tokens
    preferred = THINKING_MAX_TOKENS if sampling.thinking else ANSWER_MAX_TOKENS
    context = model_context_tokens(base_model)
    # Leave room for a prompt: a quarter of a small context, at least.
    return preferred if context is None else max(1, min(preferred, context - max(context // 4, 1024)))


def turn_token_budget(env: EnvConfig, base_model: str) -> int:
    """Prompt + completion tokens of one turn: env.token_budget, never beyond the model's context."""
    context = model_context_tokens(base_model)
    return env.token_budget if context is None else min(env.token_budget, context)


def model_context_tokens(base_model: str) -> int | None:
    """The model's context window in tokens, when known (a local config's max_position_embeddings)."""
    for prefix, tokens in _CONTEXT_BY_PREFIX.items():
        if base_model.startswith(prefix):
            return tokens
    if base_model == DEFAULT_LOCAL_MODEL:
        config_file = CONFIG_DIR.parent / "assets" / "tiny_model" / "config.json"
    else:
        config_file = Path(base_model) / "config.json"
    try:
        return int(json.loads(config_file.read_text())["max_position_embeddings"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


_CHOICES: dict[str, tuple[str, ...]] = {
    "policy.backend": ("auto", "tinker", "local"),
    "rewards.preset": ("curriculum", "format", "compile", "correctness", "speed", "speed_of_light", "kernrl",
                       "kernrl_server"),
    "rewards.baseline": ("loo", "group_mean"),
    "env.mode": ("single", "kevin"),
    "env.kernel_backend": ("triton", "cuda"),
    "training.loss_fn": ("auto", "importance_sampling", "ppo", "cispo"),
    "rewards.truncated": ("clamp", "reward", "drop", "zero_advantage", "keep"),
    "policy.device": ("auto", "cpu", "cuda"),
    "eval.device": ("auto", "cpu", "cuda"),
    "eval.size": ("auto", "small", "real"),
    "eval.precision": ("fp32", "fp16", "bf16"),
    "eval.precision_policy": ("warn", "reject"),
}
_STAGES = ("format", "compile", "correctness", "speed")


def config_to_dict(config: Any) -> dict[str, Any]:
    return dataclasses.asdict(config)


def _coerce(value: Any, annotation: Any, key: str) -> Any:
    """Check (and gently convert) a parsed value against a field's type annotation."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, key)
            except UserError as exc:
                errors.append(exc)
        raise errors[0] if errors else UserError(f"Config key {key} cannot be null.")
    if origin is list:
        (item_type,) = args or (Any,)
        if isinstance(value, str):  # `problems.ids=L1/19,L1/20`
            value = [v.strip() for v in value.split(",") if v.strip()] if value else []
        if not isinstance(value, list):
            value = [value]
        return [_coerce(v, item_type, key) for v in value]
    if annotation is Any:
        return value
    if annotation is bool:
        if isinstance(value, bool):
            return value
        raise UserError(f"Config key {key} needs true or false, got {value!r}.")
    if annotation is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise UserError(f"Config key {key} needs an integer, got {value!r}.")
    if annotation is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML 1.1 reads `2e-5` (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
        raise UserError(f"Config key {key} needs a number, got {value!r}.")
    if annotation is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
        raise UserError(f"Config key {key} needs a string, got {value!r}.")
    raise UserError(f"Config key {key} has an unsupported type.")


def _fill(cls: type, data: dict[str, Any], prefix: str) -> Any:
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    for key in data:
        if key not in names:
            raise UserError(f"Unknown config key {prefix}{key}; see kernelbench_rl/config/default.yaml for the keys.")
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            continue
        annotation = hints[f.name]
        value = data[f.name]
        if dataclasses.is_dataclass(annotation):
            if not isinstance(value, dict):
                raise UserError(f"Config key {prefix}{f.name} is a section; set its fields, e.g. {prefix}{f.name}.<field>=...")
            kwargs[f.name] = _fill(annotation, value, f"{prefix}{f.name}.")
        else:
            kwargs[f.name] = _coerce(value, annotation, prefix + f.name)
    return cls(**kwargs)


def _check_ranges(config: TrainConfig) -> None:
    """Every field's declared range (its `Annotated` constraints), for every section, via pydantic."""
    import pydantic

    try:
        _schema_adapter().validate_python(config_to_dict(config))
    except pydantic.ValidationError as exc:
        error = exc.errors()[0]
        key = ".".join(str(part) for part in error["loc"] if not isinstance(part, int))
        message = error["msg"][:1].lower() + error["msg"][1:]
        raise UserError(f"Config key {key} {message.replace('input should', 'should')}; got {error['input']!r}.") from None


_ADAPTER: Any = None


def _schema_adapter() -> Any:
    global _ADAPTER
    if _ADAPTER is None:
        import pydantic

        _ADAPTER = pydantic.TypeAdapter(TrainConfig)
    return _ADAPTER


def _validate(config: TrainConfig) -> None:
    _check_ranges(config)
    flat = {k: v for k, v in _flatten(config_to_dict(config)).items()}
    for key, choices in _CHOICES.items():
        if flat[key] not in choices:
            raise UserError(f"Config key {key} must be one of {', '.join(choices)}; got {flat[key]!r}.")
    cur = config.curriculum
    for name in ("start_stage", "force_stage"):
        value = getattr(cur, name)
        if value is not None and value not in cur.stages:
            raise UserError(f"Config key curriculum.{name} must be one of {', '.join(cur.stages)}; got {value!r}.")
    unknown = [s for s in cur.stages if s not in _STAGES]
    if unknown:
        raise UserError(f"Config key curriculum.stages names unknown stage {unknown[0]!r}; use {', '.join(_STAGES)}.")
    positive = {
        "sampling.group_size": config.sampling.group_size, "sampling.max_tokens": config.sampling.max_tokens or 1,
        "training.batch_problems": config.training.batch_problems, "training.checkpoint_every": config.training.checkpoint_every,
        "env.turns": config.env.turns, "curriculum.window": config.curriculum.window,
        "sft.batch_size": config.sft.batch_size, "sft.max_examples": config.sft.max_examples,
        "sft.checkpoint_every": config.sft.checkpoint_every,
    }
    for key, value in positive.items():
        if value < 1:
            raise UserError(f"Config key {key} must be at least 1; got {value}.")
    if config.training.steps < 0:
        raise UserError("Config key training.steps must not be negative.")
    if config.sft.steps < 0 or config.sft.epochs < 0:
        raise UserError("Config keys sft.steps and sft.epochs must not be negative.")
    if config.training.loss_fn == "ppo" and config.training.num_substeps < 2 and config.training.max_steps_off_policy == 0:
        raise UserError("Config key training.loss_fn=ppo clips the ratio to the sampling policy, which is 1 when "
                        "every datum is trained by the policy that sampled it: set training.num_substeps to 2 or more, "
                        "or training.max_steps_off_policy to 1 or more.")
    _check_truncated_reward(config)
    if not 0.0 <= config.rewards.gamma <= 1.0:
        raise UserError(f"Config key rewards.gamma must be in [0, 1]; got {config.rewards.gamma}.")
    from kernelbench_rl.evaluation.cluster.cluster_spec import parse_cluster

    parse_cluster(config.eval.cluster)  # a bad value is one sentence now, not at the first evaluation
    problems = config.problems
    if problems.root and problems.kernelbench_root and problems.root != problems.kernelbench_root:
        raise UserError("Config keys problems.root and problems.kernelbench_root (its older name) name different "
                        f"folders ({problems.root} and {problems.kernelbench_root}); set only problems.root.")


def _check_truncated_reward(config: TrainConfig) -> None:
    """rewards.truncated=reward may not pay a truncated answer more than an honest failure of any preset in use."""
    if config.rewards.truncated != "reward":
        return
    from kernelbench_rl.rewards.shaping import reward_floor

    presets = config.curriculum.stages if config.rewards.preset == "curriculum" else [config.rewards.preset]
    lowest = min(reward_floor(p) for p in presets)
    if config.rewards.truncated_reward > lowest:
        raise UserError(f"Config key rewards.truncated_reward ({config.rewards.truncated_reward}) would pay a truncated "
                        f"answer more than an honest failure ({lowest} under rewards.preset={config.rewards.preset}); "
                        f"set it to {lowest} or less, or use rewards.truncated=clamp.")


def _flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[prefix + key] = value
    return out


def _deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def config_from_dict(data: dict[str, Any]) -> TrainConfig:
    config = _fill(TrainConfig, data or {}, "")
    _validate(config)
    return config


def parse_overrides(overrides: list[str]) -> dict[str, Any]:
    """`["training.steps=3", "problems.ids=[L1/19]"]` -> nested dict (values parsed as YAML)."""
    nested: dict[str, Any] = {}
    for item in overrides:
        if "=" not in item:
            raise UserError(f"Override {item!r} is not of the form key=value, e.g. training.steps=3.")
        key, raw = item.split("=", 1)
        key = key.strip()
        if not key:
            raise UserError(f"Override {item!r} has no key; write it as key=value.")
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        node = nested
        parts = key.split(".")
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise UserError(f"Override {key} conflicts with another override of {part}.")
            node = child
        node[parts[-1]] = value
    return nested


def apply_overrides(config: TrainConfig, overrides: list[str]) -> TrainConfig:
    return config_from_dict(_deep_merge(config_to_dict(config), parse_overrides(overrides)))


def packaged_config_path(name: str) -> Path | None:
    """`kevin` or `kevin.yaml` -> the packaged file, if one exists."""
    stem = name[:-5] if name.endswith(".yaml") else name
    candidate = CONFIG_DIR / f"{stem}.yaml"
    return candidate if candidate.is_file() and "/" not in name else None


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> TrainConfig:
    """Defaults, then the YAML file (a path or a packaged name: default, raicl, kevin), then overrides."""
    data: dict[str, Any] = {}
    if path is not None:
        file = Path(path)
        if not file.is_file():
            packaged = packaged_config_path(str(path))
            if packaged is None:
                raise UserError(f"Config file {path} does not exist; pass a YAML path or one of: default, raicl, kevin.")
            file = packaged
        try:
            loaded = yaml.safe_load(file.read_text()) or {}
        except yaml.YAMLError as exc:
            raise UserError(f"Config file {file} is not valid YAML ({str(exc).splitlines()[0]}).") from None
        if not isinstance(loaded, dict):
            raise UserError(f"Config file {file} must hold a mapping of keys to values.")
        data = loaded
    return config_from_dict(_deep_merge(data, parse_overrides(overrides or [])))
