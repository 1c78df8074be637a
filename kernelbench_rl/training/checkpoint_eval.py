"""Checkpoint evaluation: sample a checkpoint (or the base model) on held-out problems and score it.

Prompts, sampling and evaluation go through the same environments and rollout runner as training,
so an evaluation prompt is exactly a training prompt. Metrics (pass@k, fast_p, compile and
correct rates, geometric-mean speedup) are computed per level and overall, written to
`eval_reports`, and rendered as a markdown table and a speedup plot for Prefect artifacts.
"""

from __future__ import annotations

import contextlib
import json
import uuid
import warnings
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from kernelbench_rl.envs.kernel_env import EnvGroupBuilder, KernelEnv, Retriever, make_group_builders
from kernelbench_rl.errors import InfraError, NoVerdictError, UserError
from kernelbench_rl.rewards.shaping import counts_as_correct
from kernelbench_rl.metrics import FAST_P_THRESHOLDS, BenchmarkSummary, SampleOutcome, summarize
from kernelbench_rl.parts import EvaluatorPlan, RunParts, SamplingSettings
from kernelbench_rl.policy.config import PolicyConfig
from kernelbench_rl.problems import Problem
from kernelbench_rl.store import Store
from kernelbench_rl.store.checkpoints import BASE, newest_per_run, resolve_checkpoint
from kernelbench_rl.training.checkpoints import CheckpointDamagedError, damage, resolved_path
from kernelbench_rl.training.rollouts import EvaluateFn, PromptRenderer, RolloutRunner


def new_eval_id() -> str:
    """One checkpoint evaluation: sortable by time, unique across processes."""
    return f"{datetime.now(timezone.utc):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"


@dataclass
class CheckpointReport:
    run_id: str
    label: str  # checkpoint name, or "base"
    split: str
    outcomes: list[SampleOutcome]
    overall: BenchmarkSummary
    per_level: dict[int, BenchmarkSummary] = field(default_factory=dict)
    usage: dict[str, int] | None = None  # token usage of an API-served policy (evaluate_model)
    # Each evaluation keeps its own rows (history): "how did checkpoint X score over time" is one query.
    eval_id: str = field(default_factory=new_eval_id)
    samples: list[dict[str, Any]] = field(default_factory=list)  # eval_samples rows
    completions: list[str] = field(default_factory=list)  # the texts those rows point at (each sample's best turn)
    timed: list[Any] = field(default_factory=list)  # GPU: the best turns' results with their speed of light

    def rows(self) -> list[dict[str, Any]]:
        """eval_reports rows: one per level and one for all levels (level NULL)."""
        out = []
        for level, summary in [(None, self.overall), *sorted(self.per_level.items())]:
            out.append({
                "report_id": f"{self.run_id}|{self.label}|{self.split}|{'all' if level is None else f'L{level}'}|{self.eval_id}",
                "eval_id": self.eval_id,
                "run_id": self.run_id, "checkpoint": self.label, "split": self.split, "level": level,
                "num_problems": summary.num_problems, "samples_per_problem": summary.samples_per_problem,
                "metrics_json": json.dumps({**summary.to_dict(), **({"usage": self.usage} if self.usage and level is None else {})},
                                           sort_keys=True),
            })
        return out


@dataclass
class NightlyTarget:
    """A run a nightly evaluation evaluates: its stored configuration, its newest checkpoint and why it was chosen."""

    run_id: str
    config: dict[str, Any]  # the run's own configuration, as it trained
    checkpoint: str
    step: int
    reason: str


def nightly_targets(store: Store, run_ids: Sequence[str] = ()) -> list[NightlyTarget]:
    """The runs a nightly evaluation covers: those named, else the run with the newest checkpoint.

    A named run without a checkpoint is a UserError; with no run named and none trained yet the list is empty.
    """
    latest = newest_per_run(store)
    by_run = {row.run_id: (row, config) for row, config in latest}
    if run_ids:
        missing = [run_id for run_id in run_ids if run_id not in by_run]
        if missing:
            if not store.exists():
                raise UserError(f"The database {store.path} holds no runs yet, so run {missing[0]!r} cannot be evaluated.")
            known = ", ".join(sorted(by_run)) or "none"
            raise UserError(f"Run {missing[0]!r} has no checkpoint in {store.path} (runs with one: {known}).")
        chosen = [(*by_run[run_id], "named in the run_ids parameter") for run_id in run_ids]
    else:
        chosen = [(*latest[0], "the run with the newest checkpoint (no run_ids given)")] if latest else []
    return [NightlyTarget(row.run_id, config, row.name, row.step, why) for row, config, why in chosen]


class AnswerSource(Protocol):
    """Who answers an evaluation's prompts: a run's checkpoint or base model (`CheckpointSampler`) or a model behind
    an OpenAI-compatible server (`training.model_answers.ServedModel`). The evaluation's steps are the same for both
    (`_evaluate`); only where the answers come from, and what else is recorded, differ."""

    label: str  # what the report's rows name: the checkpoint, "base" or the served model's policy string
    tensorboard: tuple[Path, int] | None  # where the report's figures also go: (the run's folder, the step)
    usage: dict[str, int] | None  # what the answers cost (a served model's tokens), once they are in

    def settle(self, store: Store, eval_id: str) -> str:
        """What is evaluated, settled before the evaluator starts and anything is paid for; returns the evaluation's
        id (`eval_id`, or that of an unfinished earlier run this one resumes)."""
        ...

    def answer(self, builders: Sequence[EnvGroupBuilder], judge: EvaluateFn) -> list[list[KernelEnv]]:
        """Every episode run to its end, each turn judged by `judge`."""
        ...

    def failure(self, report: CheckpointReport) -> InfraError | None:
        """The source's own reason the report is partial (requests that never got an answer), else None."""
        ...


def evaluate_checkpoint(
    parts: RunParts,
    *,
    checkpoint: str | None = None,
    samples_per_problem: int = 4,
    split: str = "holdout",
    max_problems: int | None = None,
    ks: Sequence[int] = (1, 5, 10),
    store: Store | None = None,
    service_client: Any | None = None,
    evaluate_fn: EvaluateFn | None = None,
    retrieve: Retriever | None = None,
    base_url: str | None = None,
) -> CheckpointReport:
    """Sample `samples_per_problem` kernels per held-out problem, evaluate them, record the report (`_evaluate`).

    `checkpoint`: "latest" (or None), "base" or a checkpoint's name; `checkpoint="openai:MODEL"` (with `base_url`)
    evaluates a model served by an OpenAI-compatible server instead (`evaluate_model`); its report rows have the
    same shape.

    `retrieve` (RA-ICL runs: `parts.open_retriever()`) puts retrieved examples in the prompts as
    training did, `rag.k` of them; without it prompts carry the default example.
    """
    from kernelbench_rl.policy.openai_backend import is_openai_policy
    from kernelbench_rl.training.model_answers import ServedModel

    source: AnswerSource = (ServedModel.of(parts, str(checkpoint), base_url, split) if is_openai_policy(checkpoint)
                            else CheckpointSampler.of(parts, checkpoint, service_client))
    return _evaluate(parts, source, samples_per_problem=samples_per_problem, split=split, max_problems=max_problems,
                     ks=ks, store=store, evaluate_fn=evaluate_fn, retrieve=retrieve)


def evaluate_model(
    parts: RunParts,
    policy: str,
    *,
    base_url: str | None = None,
    samples_per_problem: int = 4,
    split: str = "holdout",
    max_problems: int | None = None,
    ks: Sequence[int] = (1, 5, 10),
    store: Store | None = None,
    evaluate_fn: EvaluateFn | None = None,
    retrieve: Retriever | None = None,
    concurrency: int = 8,
    max_retries: int = 4,
    timeout_s: float = 300.0,
    context_tokens: int | None = None,
    say: Callable[[str], None] | None = None,
) -> CheckpointReport:
    """`policy="openai:MODEL"` served at `base_url`: the same problems, prompts, evaluator and report
    rows as a checkpoint's evaluation (label = the policy string); token usage joins metrics_json.

    The answer budget is the served model's (`OpenAIChatPolicy.probe`: its context as the server reports it, or
    `context_tokens`; `sampling.max_tokens` caps it when set), never the config's base model's. The same call
    after a run that died or whose server stopped answering resumes it (`model_answers`): only the requests
    left are sent. Requests that never got an answer make the report partial: its rows are recorded and
    UnansweredRequests (an InfraError) is raised with it. `say` gets a line on the budget and on what resumes."""
    from kernelbench_rl.training.model_answers import ServedModel

    source = ServedModel.of(parts, policy, base_url, split, concurrency=concurrency, max_retries=max_retries,
                            timeout_s=timeout_s, context_tokens=context_tokens, say=say)
    return _evaluate(parts, source, samples_per_problem=samples_per_problem, split=split, max_problems=max_problems,
                     ks=ks, store=store, evaluate_fn=evaluate_fn, retrieve=retrieve)


def _evaluate(parts: RunParts, source: AnswerSource, *, samples_per_problem: int, split: str,
              max_problems: int | None, ks: Sequence[int], store: Store | None, evaluate_fn: EvaluateFn | None,
              retrieve: Retriever | None) -> CheckpointReport:
    """One evaluation in one pass: what is evaluated is settled first (the source's checkpoint row and sampler, or its
    server probed and an unfinished run's answers; the split's problems and their prompts), then the episodes
    run against the run's evaluator, then the report is built in one place and recorded in one step (its rows in
    the store, its figures in TensorBoard), and only then is a failure raised (no sample judged: `no_verdict`; the
    source's own: requests left unanswered)."""
    store = store or parts.store
    eval_id = source.settle(store, new_eval_id())
    problems = parts.split.chosen(split, max_problems)
    builders = make_group_builders(problems, samples_per_problem, parts.env, retrieve,
                                   parts.rag.k if retrieve is not None else 0)
    with _evaluating(parts.evaluator, store, problems, evaluate_fn) as judge:
        groups = source.answer(builders, judge)
    report = build_report(parts.run_id, source.label, split, problems, samples_per_problem, ks, groups,
                          eval_id=eval_id, usage=source.usage)
    failure = source.failure(report) or no_verdict(report, groups)
    record_report(store, report, tensorboard=source.tensorboard)
    if failure is not None:  # its rows are recorded all the same
        raise failure
    return report


@dataclass
class CheckpointSampler:
    """A run's checkpoint, or its base model, answering an evaluation through the run's policy backend, with the
    prompts and rollout runner of training; its figures also go to TensorBoard beside the run's training curves."""

    run_id: str
    run_dir: Path
    base_model: str
    policy: PolicyConfig
    sampling: SamplingSettings
    checkpoint: str | None = None  # None/"latest", "base" or a checkpoint's name
    service_client: Any | None = None  # the run's policy backend unless given
    label: str = BASE
    tensorboard: tuple[Path, int] | None = None
    usage: dict[str, int] | None = None
    sampler: Any = None

    @classmethod
    def of(cls, parts: RunParts, checkpoint: str | None, service_client: Any | None = None) -> CheckpointSampler:
        return cls(parts.run_id, parts.run_dir, parts.base_model, parts.policy, parts.sampling, checkpoint,
                   service_client)

    def settle(self, store: Store, eval_id: str) -> str:
        """The checkpoint's row (the one read of the store) and its sampler (the base model's for "base"), made
        before anything is sampled."""
        from kernelbench_rl.policy import make_service_client

        row = resolve_checkpoint(store, self.run_id, self.checkpoint)
        # A stored relative sampler path is under the run's folder (a copied runs/ included). Its weights are checked
        # before anything is made of them, their content checksum too: garbled in place is damaged.
        sampler_path = resolved_path(row.sampler_path, self.run_dir) if row is not None else None
        wrong = damage(sampler_path, optimizer=False) if sampler_path is not None else None
        if row is not None and wrong is not None:
            raise CheckpointDamagedError(
                f"The checkpoint {row.name} of run {self.run_id} is damaged ({wrong}): evaluate another of its "
                "checkpoints, or train on to write a new one.")
        self.label = BASE if row is None else row.name
        self.tensorboard = (self.run_dir, 0 if row is None else row.step)
        service = self.service_client or make_service_client(self.policy)
        client = (service.create_sampling_client(base_model=self.base_model) if row is None
                  else service.create_sampling_client(model_path=sampler_path))
        # Client-creation methods return futures (as in the Tinker SDK); resolve them before use.
        self.sampler = client.result() if callable(getattr(client, "result", None)) else client
        return eval_id

    def answer(self, builders: Sequence[EnvGroupBuilder], judge: EvaluateFn) -> list[list[KernelEnv]]:
        runner = RolloutRunner(self.sampler, PromptRenderer(self.sampler.get_tokenizer()), judge,
                               temperature=self.sampling.temperature, top_p=self.sampling.top_p)
        return [group.envs for group in runner.run(builders)]

    def failure(self, report: CheckpointReport) -> InfraError | None:
        return None


@contextlib.contextmanager
def _evaluating(plan: EvaluatorPlan, store: Store, problems: Sequence[Problem], evaluate_fn: EvaluateFn | None):
    """The caller's evaluate function, or one of the run's evaluator opened for the block."""
    if evaluate_fn is not None:
        yield evaluate_fn
        return
    evaluator = plan.open(store, problems)
    if plan.is_dask:
        # A cluster that does not answer is found before the first model request is paid for.
        try:
            evaluator.start()
        except Exception as exc:  # noqa: BLE001 - any failure to reach it: one sentence, nothing sampled
            evaluator.__exit__(None, None, None)
            raise InfraError(f"The evaluation cluster eval.cluster={plan.cluster} cannot be reached "
                             f"({type(exc).__name__}: {str(exc)[:160]}); start it, or set eval.cluster=local.") from None
    try:
        yield evaluator.evaluate_responses
    finally:
        evaluator.__exit__(None, None, None)


# -- the report: built in one place, recorded in one step -------------------------------------------
def build_report(run_id: str, label: str, split: str, problems: Sequence[Problem], samples_per_problem: int,
                 ks: Sequence[int], groups: Sequence[Sequence[KernelEnv]], *, eval_id: str | None = None,
                 usage: dict[str, int] | None = None) -> CheckpointReport:
    """The whole report of an evaluation's episodes (`problems` x `samples_per_problem`), nothing written: each
    sample's best turn, outcome and eval_samples row, then the figures per level and overall (pass@k for the `ks`
    the samples allow). `label`: the checkpoint's name, "base" or a served model's policy string."""
    envs = [env for group in groups for env in group]
    turns = [_best_turn(env) for env in envs]
    outcomes = [episode_outcome(env) for env in envs]
    eval_id = eval_id or new_eval_id()
    samples = sample_rows(run_id, label, split, eval_id, envs, turns, outcomes)
    levels: dict[str, int] = {p.id: p.level for p in problems}
    usable_ks = [k for k in ks if k <= samples_per_problem]
    per_level = {
        level: summarize([o for o in outcomes if levels[o.problem_id] == level], usable_ks)
        for level in sorted(set(levels.values()))
    }
    return CheckpointReport(
        run_id, label, split, outcomes, summarize(outcomes, usable_ks), per_level, usage=usage,
        eval_id=eval_id, samples=samples, completions=[t.completion for t in turns if t is not None],
        timed=[t.result for t in turns if t is not None and t.result is not None and t.result.speed_of_light])


def record_report(store: Store, report: CheckpointReport, *, tensorboard: tuple[Path, int] | None = None) -> None:
    """The report written: for a checkpoint, its figures in TensorBoard (`tensorboard`: the run's folder and the
    checkpoint's step); then its rows, its eval_samples rows and their completions in one turn on the file. The rows
    come last, so a report in the store has its figures (a served model's evaluation counts as finished by its rows);
    and they are written whatever TensorBoard does: a figure it cannot write is warned of, never a row lost (the rows
    hold every figure)."""
    if tensorboard is not None:
        try:
            log_to_tensorboard(tensorboard[0], report, step=tensorboard[1])
        except (OSError, ImportError) as exc:
            warnings.warn(f"eval {report.eval_id}: its TensorBoard figures were not written ({type(exc).__name__}: "
                          f"{exc}); its rows are", stacklevel=2)
    tables = {"eval_reports": report.rows(), "eval_samples": report.samples}
    with store.connect():
        store.put_texts("completion", report.completions)
        store.write_batch(tables)


def report_scalars(report: CheckpointReport) -> dict[str, float]:
    """The report's figures as TensorBoard scalars: `{split}/{metric}` overall, `{split}/L{level}/{metric}` per
    level; a level with nothing judged, or a figure not measured (a CPU's speedups), gives none."""
    out: dict[str, float] = {}
    for level, summary in [(None, report.overall), *sorted(report.per_level.items())]:
        if not summary.num_problems:
            continue
        prefix = report.split if level is None else f"{report.split}/L{level}"
        for key, value in summary.to_dict().items():
            for name, number in (value.items() if isinstance(value, dict) else [(key, value)]):
                if isinstance(number, (int, float)) and not isinstance(number, bool):
                    out[f"{prefix}/{name}"] = float(number)
    return out


def log_to_tensorboard(run_dir: Path, report: CheckpointReport, step: int) -> None:
    """A checkpoint's evaluation beside its run's training curves: `<run log dir>/tensorboard/eval` at the
    checkpoint's step (the base model's under `eval-base`, at step 0)."""
    from kernelbench_rl.training.metrics import TensorBoardLogger

    folder = Path(run_dir) / "tensorboard" / ("eval-base" if report.label == BASE else "eval")
    with contextlib.closing(TensorBoardLogger(folder)) as logger:
        logger.log(step, report_scalars(report), [o.speedup for o in report.outcomes if o.speedup is not None])


def no_verdict(report: CheckpointReport, groups: Sequence[Sequence[KernelEnv]]) -> NoVerdictError | None:
    """The error of a report none of whose samples was judged, else None: such a report scores nothing, an error
    (ours), never a row of zeros. Its rows are recorded all the same, marked by their categories, before it is
    raised."""
    if report.overall.num_problems or not report.overall.unjudged_samples:
        return None
    reasons = [t.result.error_message for envs in groups for env in envs for t in env.turns
               if t.result is not None and t.result.error_category.is_ours]
    return NoVerdictError(f"No sample of {report.label} was judged: all {report.overall.unjudged_samples} got no verdict on "
                          f"their kernel (first: {(reasons[0] if reasons else 'unknown')[:200]}); eval_id {report.eval_id} "
                          "keeps their rows. Fix the cause and run the evaluation again.")


def _best_turn(env: KernelEnv) -> Any:
    """The turn whose verdict counts (correct first, then compiled, then a counted speedup), else the last turn."""
    judged = [t for t in env.turns if t.result is not None]
    if not judged:
        return env.turns[-1] if env.turns else None
    return max(judged, key=lambda t: (counts_as_correct(t.result), t.result.compiled,
                                      t.result.speedup if t.result.speedup_counts else 0.0))


def sample_rows(run_id: str, label: str, split: str, eval_id: str, envs: Sequence[KernelEnv], turns: Sequence[Any],
                outcomes: Sequence[SampleOutcome]) -> list[dict[str, Any]]:
    """One eval_samples row per sample (`turns`: each one's best turn): its verdict, why it failed, and where its
    completion and evaluation are."""
    from kernelbench_rl.store.db import eval_key_for, sha256_text

    rows = []
    index_in_problem: dict[str, int] = {}
    for env, turn, outcome in zip(envs, turns, outcomes, strict=True):
        sample_index = index_in_problem.get(env.problem.id, 0)
        index_in_problem[env.problem.id] = sample_index + 1
        result = turn.result if turn is not None else None
        eval_key = None
        if result is not None and turn.code and result.settings_hash:
            eval_key = eval_key_for(env.problem.id, sha256_text(turn.code), result.settings_hash)
        rows.append({
            "eval_id": eval_id, "run_id": run_id, "checkpoint": label, "split": split,
            "problem_id": env.problem.id, "suite": env.problem.suite, "level": env.problem.level,
            "sample_index": sample_index,
            "turn": turn.index if turn is not None else None,
            "format_ok": bool(turn is not None and turn.format_ok), "compiled": outcome.compiled,
            "correct": outcome.correct, "speedup": outcome.speedup,
            "error_category": result.error_category.value if result is not None else "format",
            "error_message": result.error_message if result is not None else "no kernel code was found",
            "eval_key": eval_key,
            "completion_sha256": sha256_text(turn.completion) if turn is not None else None,
        })
    return rows


def episode_outcome(env: KernelEnv) -> SampleOutcome:
    """The episode's best turn (`_best_turn`; single-turn: its only turn); a hack or an uncounted speedup never
    ranks higher."""
    results = [t.result for t in env.turns if t.result is not None]
    best = _best_turn(env).result if results else None
    correct = best is not None and counts_as_correct(best)
    # Every turn without a verdict on its kernel (a sample with no kernel at all is the model's: judged).
    judged = not results or not all(r.error_category.is_ours for r in results)
    return SampleOutcome(problem_id=env.problem.id, compiled=bool(best and best.compiled), correct=correct,
                         speedup=best.speedup if (correct and best.speedup_counts) else None, judged=judged)


def markdown_table(reports: Sequence[CheckpointReport]) -> str:
    """Side-by-side table (e.g. base against a checkpoint), one column per report.

    Every metric has a row, overall and per level: pass@k, fast_p for each p (KernelBench's
    thresholds), compile and correct rates, geometric-mean speedup. "-" is a figure that was not
    measured (a CPU evaluation times nothing, so it has no fast_p or speedup).
    """
    def fmt(value: float | None) -> str:
        return "-" if value is None else f"{value:.3f}"

    def summary_rows(prefix: str, pick) -> list[str]:
        # A summary with nothing judged measured nothing: "-", never 0.000.
        summaries = [x if x is not None and x.num_problems else None for x in (pick(r) for r in reports)]
        rows = []
        for key in ("compile_rate", "correct_rate"):
            rows.append(f"| {prefix}{key} | " + " | ".join(
                fmt(getattr(x, key)) if x is not None else "-" for x in summaries) + " |")
        # every pass@k any summary has, so a level with nothing judged shows its rows too ("-")
        pass_keys = sorted({k for r in reports for x in (r.overall, *r.per_level.values()) for k in x.pass_at_k},
                           key=lambda k: int(k.split("@")[1]))
        for key in pass_keys:
            rows.append(f"| {prefix}{key} | " + " | ".join(
                fmt(x.pass_at_k.get(key)) if x is not None else "-" for x in summaries) + " |")
        for p in FAST_P_THRESHOLDS:
            key = f"fast_{p:g}"
            rows.append(f"| {prefix}{key} | " + " | ".join(
                fmt(x.fast_p.get(key)) if x is not None else "-" for x in summaries) + " |")
        rows.append(f"| {prefix}geomean speedup | " + " | ".join(
            fmt(x.geomean_speedup) if x is not None else "-" for x in summaries) + " |")
        return rows

    header = "| metric | " + " | ".join(f"{r.label} ({r.split})" for r in reports) + " |"
    lines = [header, "|---|" + "---|" * len(reports)]
    for key in ("num_problems", "samples_per_problem", "unjudged_samples"):
        lines.append(f"| {key} | " + " | ".join(str(getattr(r.overall, key)) for r in reports) + " |")
    lines += summary_rows("", lambda r: r.overall)
    for level in sorted({lv for r in reports for lv in r.per_level}):
        lines.append(f"| L{level} num_problems | " + " | ".join(
            str(r.per_level[level].num_problems) if level in r.per_level else "-" for r in reports) + " |")
        lines += summary_rows(f"L{level} ", lambda r, level=level: r.per_level.get(level))
    return "\n".join(lines)


def report_markdown(reports: Sequence[CheckpointReport], out_dir: str | Path, key: str,
                    header: str = "") -> tuple[str, str, Path]:
    """(the table, the whole markdown, the speedup plot's path) of an evaluation's artifact: the side-by-side table,
    the speedup histogram and, where kernels were timed on a GPU, the best ones against the speed of light."""
    import base64

    from kernelbench_rl.evaluation.timing.roofline import roofline_plot

    def embedded(name: str, path: Path) -> str:
        return f"![{name}](data:image/png;base64,{base64.b64encode(path.read_bytes()).decode()})\n"

    table = markdown_table(reports)
    plot = speedup_plot(reports, Path(out_dir) / f"{key}-speedups.png")
    timed = [result for report in reports for result in report.timed]
    roofline = embedded("roofline", roofline_plot(timed, Path(out_dir) / f"{key}-roofline.png",
                                                  title="Best kernels against the speed of light")) if timed else ""
    ids = ", ".join(f"{r.label}: `{r.eval_id}`" for r in reports)
    markdown = (f"## Checkpoint evaluation\n\n{header + chr(10) + chr(10) if header else ''}{table}\n\n"
                f"Evaluation ids (eval_reports.eval_id, eval_samples.eval_id): {ids}\n\n"
                f"{embedded('speedups', plot)}{roofline}")
    return table, markdown, plot


def speedup_plot(reports: Sequence[CheckpointReport], path: str | Path) -> Path:
    """Histogram of correct samples' speedups per report (a note in the plot when none were timed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    plotted = False
    for report in reports:
        speedups = [o.speedup for o in report.outcomes if o.speedup is not None]
        if speedups:
            ax.hist(speedups, bins=20, alpha=0.6, label=report.label)
            plotted = True
    if plotted:
        ax.axvline(1.0, color="k", linestyle="--", linewidth=1)
        ax.set_xlabel("speedup over eager PyTorch")
        ax.set_ylabel("correct samples")
        ax.legend()
    else:
        ax.text(0.5, 0.5, "no timed correct samples\n(CPU runs claim no speedups)", ha="center", va="center",
                transform=ax.transAxes)
        ax.set_axis_off()
    ax.set_title("Speedup distribution")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
