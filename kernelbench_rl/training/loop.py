"""The GRPO training loop, one step at a time, resumable by re-running the same configuration.

    parts = build_run_parts(config, policy_beside=True)   # kernelbench_rl.compose: the config resolved once
    run = TrainingRun(parts)           # cheap: nothing heavy is built yet
    with run:                          # builds the policy, evaluator, store rows; resumes if it can
        while not run.finished:
            result = run.step()        # sample -> evaluate -> reward -> train -> checkpoint -> rows

`run_training(parts)` does exactly that with a progress bar. A flow can make one task per
`run.step()`. Resume: the run id (explicit, or derived from the config) finds the last row of
`checkpoints`; the run reloads that state, deletes (in one transaction) every row of a later step
that a killed attempt left, and starts at the next step. Rows are upserted on natural keys, so a
step done twice never duplicates rows.

With `training.max_steps_off_policy` N >= 1 (asynchronous training, docs/async-training.md) a
producer thread samples and evaluates the next N steps while `step()` trains the current one: each
of those steps is decided (stage, problems, sampler weights) on the calling thread when it is
queued, so its sampler is at most N steps behind, and its rows reach the store as its groups finish.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import socket
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

from kernelbench_rl.config.schema import refuse_untrainable_sampling
from kernelbench_rl.envs.kernel_env import Retriever, make_group_builders
from kernelbench_rl.errors import UserError
from kernelbench_rl.parts import RunParts
from kernelbench_rl.policy.base import SessionStatus
from kernelbench_rl.policy.session import check_lora_rank, close_session
from kernelbench_rl.problems import Problem
from kernelbench_rl.store import Store
from kernelbench_rl.store.db import eval_key_for
from kernelbench_rl import ownership
from kernelbench_rl.training.curriculum import Curriculum, CurriculumEvent
from kernelbench_rl.training.grpo import SampleTurn, build_datums, score_group
from kernelbench_rl.training.metrics import TensorBoardLogger, step_metrics
from kernelbench_rl.training.optim import StepSizeGuard, post_update_kl, resolve_loss_fn, result_of, train_step
from kernelbench_rl.training.prefetch import Prefetcher
from kernelbench_rl.training.rollouts import (
    EvaluateFn,
    GroupRollout,
    PromptRenderer,
    RolloutRunner,
    RolloutStopped,
    RolloutTimings,
)
from kernelbench_rl.training.checkpoints import newest_intact, resolved_path, saving, stored_path
from kernelbench_rl.training.lag_samplers import LagSamplers
from kernelbench_rl.training.sft import last_sft_checkpoint, warm_start_checkpoint
from kernelbench_rl.training.stops import deferred_stop, is_stop


@dataclass
class StepResult:
    step: int
    stage: str
    level: int
    loss: float | None
    metrics: dict[str, float]
    events: list[CurriculumEvent] = field(default_factory=list)
    checkpoint: str | None = None


@dataclass
class StepRollout:
    """One step's batch: decided on the calling thread (stage, problems, sampler), rolled out on any."""

    step: int
    stage: str
    level: int
    preset: str
    events: list[CurriculumEvent]
    builders: list[Any]
    sampling_client: Any
    sampler_step: int | None  # the last step trained into the sampler's weights (None: the run's starting weights)
    groups: list[GroupRollout] = field(default_factory=list)
    samples_by_group: dict[int, list[SampleTurn]] = field(default_factory=dict)
    timings: RolloutTimings = field(default_factory=RolloutTimings)

    @property
    def staleness(self) -> int:
        """Steps of training the sampler's weights lacked (0: sampled by the weights of every earlier step)."""
        return self.step - 1 - (-1 if self.sampler_step is None else self.sampler_step)


# How long stopping a run waits for a prefetched rollout to notice; its rows are dropped either way.
PREFETCH_STOP_WAIT_S = 10.0


@dataclass
class TrainSummary:
    run_id: str
    db_path: str
    log_dir: str
    resumed_from_step: int | None  # the checkpoint step a resumed run started after; None when fresh
    first_step: int  # first step this invocation ran
    steps_run: int
    last_step: int | None  # last completed step of the run (None: none yet)
    stage: str
    level: int
    finished: bool  # all configured steps are done
    last_metrics: dict[str, float] = field(default_factory=dict)
    truncated_rate: float | None = None  # share of the run's sampled turns cut at max_tokens (all steps so far)



class TrainingRun:
    """One training run: builds its heavy parts on `start()`, then advances one `step()` at a time.

    `parts` come from `compose.build_run_parts(config, policy_beside=True)`."""

    def __init__(
        self,
        parts: RunParts,
        *,
        store: Store | None = None,
        retrieve: Retriever | None = None,
        evaluate_fn: EvaluateFn | None = None,
        service_client: Any | None = None,
        on_step: Callable[[StepResult], None] | None = None,
    ) -> None:
        self.parts = parts
        self.training = parts.training
        self.run_id = parts.run_id
        self.log_dir = parts.run_dir
        self.store = store or Store(parts.db_path)
        self.retrieve = retrieve
        self._evaluate_fn = evaluate_fn
        self._service = service_client
        self.on_step = on_step
        # (step, problems judged, problems of the step) as each problem's samples are judged: progress within a step
        self.on_group: Callable[[int, int, int], None] | None = None
        self.next_step = 0
        self.resumed_from_step: int | None = None
        self.checkpoint_step: int | None = None  # last step whose state is saved
        self.warm_start_path: str | None = None  # the SFT state RL started from, if any
        self.last_result: StepResult | None = None
        self._started = False
        self._evaluator: Any = None
        self._tb: TensorBoardLogger | None = None
        self.sampler_step: int | None = None  # the last step trained into self.sampling_client's weights
        # Asynchronous training: steps at or after step_limit are never prefetched (run_training lowers it
        # for stop_after_steps, so a stopped invocation leaves no work behind).
        self.step_limit = parts.training.steps
        self._prefetch: Prefetcher | None = None
        self._stopping = threading.Event()  # set, under _rows_lock, when prefetched rollouts must write no more rows
        self._rows_lock = threading.Lock()
        self._kl_reference: Any = None  # the reference policy's sampler, for training.kl_penalty_coef
        self.kl_reference_name: str | None = None  # what it is: base, warm start, a checkpoint
        self._lag: LagSamplers | None = None  # every step's sampler weights, for an exact asynchronous resume
        self._resume_plan: dict[int, int] = {}  # resumed steps queued by older weights -> the step of those weights
        self.step_size = StepSizeGuard(parts.training.max_step_kl)  # training.max_step_kl
        self.loss_temperature: float | None = None  # the temperature the loss scores tokens at (local backend)
        self.loss_fn = parts.training.loss_fn  # training.loss_fn, `auto` resolved when the run starts

    # -- set-up and resume ----------------------------------------------------------------------
    @property
    def finished(self) -> bool:
        return self.next_step >= self.training.steps

    def start(self) -> TrainingRun:
        if self._started:
            return self
        # One process owns a run at a time; a second one is told who holds it (RunBusyError).
        ownership.start_owned(self.store.path, self.run_id, self._start)
        return self

    def _start(self) -> None:
        parts = self.parts
        refuse_untrainable_sampling(parts.sampling.temperature)
        # Runs left "running" by an owner that died (SIGKILL, a lost machine) are marked interrupted.
        self.interrupted = {row["run_id"]: row for row in ownership.mark_interrupted_runs(self.store)}
        self.problems = parts.split.training_problems(parts.audits)
        self.spec = parts.env
        self.curriculum = Curriculum.from_config(parts.curriculum, [p.level for p in self.problems])
        self.base_model = parts.base_model
        self.policy_backend = "tinker" if "tinker" in type(self._service).__name__.lower() else "local"
        if self._service is None:
            from kernelbench_rl.policy import make_service_client, resolve_backend

            self.policy_backend = resolve_backend(parts.policy)
            self._service = make_service_client(parts.policy)
        from kernelbench_rl.store.files import check_free_space

        check_free_space(self.store.path, "before the run")
        check_free_space(self.log_dir, "before the run")
        checkpoint = self._last_checkpoint()
        # Rows of steps after the resume point were written by an attempt whose state is lost (killed
        # between a step's rows and its checkpoint): they go, all at once, before anything is redone.
        self.discarded = self.store.discard_steps_after(self.run_id, -1 if checkpoint is None else int(checkpoint["step"]))
        lag = self.training.max_steps_off_policy
        if lag > 0:
            self._lag = LagSamplers(self.log_dir)
            self._lag.forget_after(-1 if checkpoint is None else int(checkpoint["step"]))
        warm_start = self._sft_checkpoint() if checkpoint is None else None
        if warm_start is not None:
            # RL starts from the supervised warm start's final weights, with a fresh optimizer.
            self.warm_start_path = warm_start["state_path"]
            self.training_client = result_of(self._service.create_training_client_from_state(warm_start["state_path"]))
            check_lora_rank(self.training_client, parts.policy.lora_rank, f"SFT warm start {warm_start['state_path']}")
            self.sampling_client = self._new_sampler(None)
        elif checkpoint is None:
            self.training_client = result_of(self._service.create_lora_training_client(
                base_model=self.base_model, rank=parts.policy.lora_rank))
            self.sampling_client = self._new_sampler(None)
        else:
            self.resumed_from_step = self.checkpoint_step = self.sampler_step = int(checkpoint["step"])
            self.next_step = self.resumed_from_step + 1
            self.training_client = result_of(
                self._service.create_training_client_from_state_with_optimizer(checkpoint["state_path"]))
            check_lora_rank(self.training_client, parts.policy.lora_rank, f"checkpoint {checkpoint['state_path']}")
            self.sampling_client = result_of(self._service.create_sampling_client(model_path=checkpoint["sampler_path"]))
            self._replay_curriculum(self.resumed_from_step)
            self.step_size.replay([json.loads(r["metrics_json"] or "{}") for r in self.store.dicts(
                "SELECT metrics_json FROM train_steps WHERE run_id = ? AND step <= ? ORDER BY step",
                [self.run_id, self.resumed_from_step])])
            # Asynchronous: the live run had queued steps c+1..c+N with the weights and the curriculum of steps
            # c-N..c-1; they are queued the same way here (`_take_prepared`), not with the checkpoint's.
            for ahead in range(1, lag + 1):
                self._resume_plan[self.resumed_from_step + ahead] = self.resumed_from_step + ahead - 1 - lag
        self.loss_temperature = self._loss_temperature()
        self.loss_fn = resolve_loss_fn(self.training.loss_fn, tempered=self.loss_temperature is not None,
                                       temperature=parts.sampling.temperature, top_p=parts.sampling.top_p)
        self.renderer = PromptRenderer.for_model(self.training_client.get_tokenizer(), parts.base_model,
                                                 parts.sampling.renderer, parts.sampling.thinking)
        if self._evaluate_fn is None:
            self._evaluate_fn = self._make_evaluator()
        self._tb = TensorBoardLogger(self.log_dir / "tensorboard", purge_step=self.next_step if self.resumed_from_step is not None else None)
        self._write_run("running")
        if self.training.max_steps_off_policy > 0:
            self._stopping.clear()
            self._prefetch = Prefetcher(f"kbrl-prefetch-{self.run_id}")
        self._started = True

    def _make_evaluator(self) -> EvaluateFn:
        self._evaluator = self.parts.evaluator.open(self.store, self.problems)
        return self._evaluator.evaluate_responses

    def _sft_checkpoint(self) -> dict[str, Any] | None:
        """The run's finished warm start (kernelbench_rl.training.sft), when SFT is enabled; an unfinished one is refused."""
        if not self.parts.sft.enabled:
            return None
        return warm_start_checkpoint(self.store, self.run_id, self.log_dir, self.parts.sft.steps)

    def _last_checkpoint(self) -> dict[str, Any] | None:
        """The newest intact checkpoint (a damaged newer one is passed over, said on stderr), paths resolved."""
        rows = self.store.dicts(
            "SELECT step, state_path, sampler_path FROM checkpoints WHERE run_id = ? ORDER BY step DESC",
            [self.run_id])
        return newest_intact(rows, self.log_dir, what="checkpoint", run_id=self.run_id)

    def _replay_curriculum(self, up_to_step: int, curriculum: Curriculum | None = None,
                           manual_up_to: int | None = None) -> Curriculum:
        """Replay the stored events and step rates up to `up_to_step` into `curriculum` (the run's by default);
        `manual_up_to`: forced-stage events (made when a step is queued) up to that step instead."""
        curriculum = self.curriculum if curriculum is None else curriculum
        manual_up_to = up_to_step if manual_up_to is None else manual_up_to
        events = self.store.dicts(
            "SELECT step, kind, from_value, to_value FROM curriculum_events WHERE run_id = ? AND "
            "(step <= ? OR (kind = 'manual' AND step <= ?)) ORDER BY step", [self.run_id, up_to_step, manual_up_to])
        steps = self.store.dicts(
            "SELECT step, metrics_json FROM train_steps WHERE run_id = ? AND step <= ? ORDER BY step",
            [self.run_id, up_to_step])
        curriculum.replay(events, [(r["step"], json.loads(r["metrics_json"] or "{}")) for r in steps])
        return curriculum

    def _loss_temperature(self) -> float | None:
        """training.tempered_logprobs: the local backend scores each sampled token under the distribution it was
        drawn from (the logits over sampling.temperature) when sampling is tempered; Tinker's losses cannot."""
        choice, temperature = self.training.tempered_logprobs, self.parts.sampling.temperature
        if choice is False or temperature == 1.0:
            return None
        if self.policy_backend != "local":
            if choice is True:
                raise UserError("training.tempered_logprobs=true needs the local backend (Tinker's losses score the "
                                "model's own distribution); leave it unset or sample at sampling.temperature=1.")
            return None
        return float(temperature)

    def _new_sampler(self, step: int | None) -> Any:
        """A sampling client of the training client's weights, those after `step` (None: the starting weights).
        Asynchronous runs save them under a name of their own first (LagSamplers), for an exact resume."""
        if self._lag is None:
            return result_of(self.training_client.save_weights_and_get_sampling_client())
        return self._lag.save(self.training_client, step, self.training.checkpoint_ttl_s)

    def _take_prepared(self, step: int) -> StepRollout:
        """`step`'s batch, decided now; a resumed step the live run had queued with older weights gets those weights
        and the curriculum as it stood then (a checkpoint's own weights and stage would sample other answers, and a
        promotion decided at the checkpoint's step would act a step early)."""
        source = self._resume_plan.pop(step, None)
        path = None if source is None or self._lag is None else self._lag.path(source)
        if source is None:
            return self._prepare(step)
        if path is None:
            print(f"{self.run_id}: step {step} is sampled by the checkpoint's weights: the sampler of step {source} "
                  "it was queued with is not recorded", flush=True)
            return self._prepare(step)
        live = self.curriculum
        self.curriculum = Curriculum.from_config(self.parts.curriculum, [p.level for p in self.problems])
        try:
            # The curriculum after step `source`, and the forced stages of the steps queued before this one.
            self._replay_curriculum(source, manual_up_to=step - 1)
            batch = self._prepare(step)
        finally:
            self.curriculum = live
        batch.sampling_client = result_of(self._service.create_sampling_client(model_path=path))
        batch.sampler_step = source if source >= 0 else None
        return batch

    def _sampling_seed(self, step: int) -> int:
        """The seed of a step's sampling: the same answers for the same weights, however the run was resumed."""
        digest = hashlib.sha256(f"{self.training.seed}:{self.run_id}:{step}".encode()).hexdigest()
        return int(digest[:8], 16)

    def _write_run(self, status: str) -> None:
        last = self.next_step - 1 if self.next_step > 0 else None
        self.store.upsert("runs", [{
            "run_id": self.run_id, "kind": "train", "config_json": json.dumps(self.parts.record, sort_keys=True),
            "status": status, "stage": self.curriculum.stage, "level": self.curriculum.level, "last_step": last,
            "owner_pid": os.getpid(), "owner_host": socket.gethostname(),
        }])

    # -- one step ------------------------------------------------------------------------------
    def stage_preset(self) -> str:
        preset = self.parts.rewards.preset
        return self.curriculum.stage if preset == "curriculum" else preset

    def problems_for_step(self, step: int) -> list[Problem]:
        """The current level's problems, with earlier levels at curriculum.previous_levels_share of the
        batch (so a promotion does not make the policy forget them). Deterministic per (seed, step), so
        a re-done step samples the same problems (same row keys)."""
        level = self.curriculum.level
        current = [p for p in self.problems if p.level == level] or self.problems
        previous = [p for p in self.problems if p.level < level]
        rng = random.Random(f"{self.training.seed}:{step}")
        n_previous, n_current = self.curriculum.problem_counts(self.training.batch_problems, bool(previous))
        picked = rng.sample(current, min(n_current, len(current)))
        return picked + rng.sample(previous, min(n_previous, len(previous)))

    def _prepare(self, step: int) -> StepRollout:
        """Decide a step's batch on the calling thread: a forced stage, the stage and level, the
        problems, and the sampler (the latest weights)."""
        events = self.curriculum.apply_override(step)
        self._write_events(events)
        problems = self.problems_for_step(step)
        builders = make_group_builders(problems, self.parts.sampling.group_size, self.spec, self.retrieve,
                                       self.parts.rag_k)
        return StepRollout(step, self.curriculum.stage, self.curriculum.level, self.stage_preset(), events, builders,
                           self.sampling_client, self.sampler_step)

    def _roll_out(self, batch: StepRollout) -> StepRollout:
        """Sample, evaluate and score a batch; each group's rows are written as it finishes."""
        rewards, sampling = self.parts.rewards, self.parts.sampling

        def on_group_done(group: GroupRollout) -> None:
            group_samples = score_group(group, batch.preset, gamma=rewards.gamma, baseline=rewards.baseline,
                                        speedup_cap=rewards.speedup_cap, truncated=rewards.truncated,
                                        truncated_reward=rewards.truncated_reward)
            with self._rows_lock:  # a stopping run drops the rows of steps it will not train
                if self._stopping.is_set():
                    raise RolloutStopped()
                self._write_group(batch.step, batch.stage, group, group_samples)
            batch.samples_by_group[group.index] = group_samples
            if self.on_group is not None:
                self.on_group(batch.step, len(batch.samples_by_group), len(batch.builders))

        runner = RolloutRunner(batch.sampling_client, self.renderer, self._evaluate_fn,
                               temperature=sampling.temperature, top_p=sampling.top_p,
                               infra_retries=self.training.infra_retries, on_group_done=on_group_done,
                               should_stop=self._stopping.is_set, timings=batch.timings,
                               seed=self._sampling_seed(batch.step))
        batch.groups = runner.run(batch.builders)
        return batch

    def _job(self, batch: StepRollout) -> Callable[[], StepRollout]:
        return lambda: self._roll_out(batch)

    def _stop_prefetch(self) -> None:
        """Stop the producer and delete the rows of steps it rolled out that were never trained."""
        if self._prefetch is None:
            return
        with self._rows_lock:
            self._stopping.set()
        self._prefetch.stop(PREFETCH_STOP_WAIT_S)
        self._prefetch = None
        self.store.discard_steps_after(self.run_id, self.next_step - 1)

    def _next_batch(self, step: int) -> tuple[StepRollout, float]:
        """Asynchronous training: `step`'s batch from the producer (and the seconds spent waiting for
        it), after queueing the steps up to `step + max_steps_off_policy` behind it."""
        assert self._prefetch is not None
        if self._prefetch.pending[:1] not in ([], [step]):
            # A step that raised after taking its batch is being re-done (a retried flow task): what was
            # prefetched behind it is dropped and rolled out again.
            self._stop_prefetch()
            self._stopping.clear()
            self._prefetch = Prefetcher(f"kbrl-prefetch-{self.run_id}")
        if not self._prefetch.pending:
            self._prefetch.submit(step, self._job(self._take_prepared(step)))
        # Later steps are decided now, before this one trains: their stage is the one known after step-1
        # and their sampler has step-1's weights; they roll out while this step trains.
        last = min(step + self.training.max_steps_off_policy, self.step_limit - 1, self.training.steps - 1)
        for later in range(self._prefetch.pending[-1] + 1, last + 1):
            self._prefetch.submit(later, self._job(self._take_prepared(later)))
        wait_start = time.perf_counter()
        batch = self._prefetch.take(step)
        return batch, time.perf_counter() - wait_start

    def step(self) -> StepResult:
        self.start()
        if self.finished:
            raise RuntimeError(f"run {self.run_id} has already done its {self.training.steps} steps")
        training = self.training
        step = self.next_step
        step_start = time.perf_counter()
        if self._prefetch is None:
            batch, wait_s = self._roll_out(self._prepare(step)), 0.0
        else:
            batch, wait_s = self._next_batch(step)
        stage, level, events, groups = batch.stage, batch.level, batch.events, batch.groups
        # Groups finish in any order (they are evaluated concurrently); train on them in group order.
        samples = [sample for index in sorted(batch.samples_by_group) for sample in batch.samples_by_group[index]]
        metrics, speedups = step_metrics(groups, samples, batch.preset)

        # From the update on, a stop waits for the step's rows and checkpoint: a stop checkpoint then holds
        # exactly the steps it names.
        with deferred_stop():
            train_start = time.perf_counter()
            trained = [s for s in samples if s.trainable]
            datums, prompt_lengths = build_datums(trained), [len(s.prompt_tokens) for s in trained]
            learning_rate = self.step_size.learning_rate(training.learning_rate)
            outcome = train_step(self.training_client, datums, prompt_lengths, training,
                                 base_sampler=self._base_sampler() if training.kl_penalty_coef > 0 else None,
                                 learning_rate=learning_rate, temperature=self.loss_temperature, loss_fn=self.loss_fn)
            loss = outcome.loss
            metrics.update(outcome.metrics)
            update_s = time.perf_counter() - train_start
            if trained:
                self.sampling_client = self._new_sampler(step)
                if training.compute_post_kl or self.step_size.enabled:
                    metrics.update(post_update_kl(datums, prompt_lengths, self.sampling_client,
                                                  outcome.training_logprobs, self.loss_temperature))
                    self.step_size.observe(learning_rate, metrics.get("optim/kl_pre_post_v1"))
            elif self._lag is not None:
                # Untrained, the weights are unchanged: the sampler of the step before is this step's too.
                held = self._lag.path(self.sampler_step)
                if held is not None:
                    self._lag.record(step, held)
            # Untrained, the weights are unchanged: the sampler holds this step's weights either way.
            self.sampler_step = step
            train_s = time.perf_counter() - train_start

            timings = batch.timings
            trained_tokens = sum(len(s.prompt_tokens) + len(s.completion_tokens) for s in trained)
            metrics.update({"time/sampling_s": timings.sampling_s, "time/eval_s": timings.eval_s,
                            "time/rollout_wall_s": timings.wall_s, "time/train_s": train_s,
                            "time/rollout_wait_s": wait_s, "off_policy/staleness": float(batch.staleness),
                            "stage_index": float(self.curriculum.stages.index(stage)), "level": float(level)})
            if timings.sampling_s > 0:
                metrics["throughput/sampled_tokens_per_s"] = metrics["completion_tokens"] / timings.sampling_s
            if trained and update_s > 0:
                metrics["throughput/trained_tokens_per_s"] = trained_tokens / update_s
            if loss is not None:
                metrics["loss"] = loss
            # The checkpoint's files are saved before the step's rows (its time is one of the step's figures);
            # its row still comes last, below.
            saved = None
            if (step + 1) % training.checkpoint_every == 0 or step + 1 == training.steps:
                checkpoint_start = time.perf_counter()
                saved = self._save_checkpoint(step, final=step + 1 == training.steps)
                metrics["time/checkpoint_s"] = time.perf_counter() - checkpoint_start
            metrics["time/step_s"] = time.perf_counter() - step_start
            # Judged only as the stage and level it was sampled under (a prefetched step may predate a promotion).
            promotions = self.curriculum.observe(step, metrics, stage=stage, level=level)
            self._write_events(promotions)
            # TensorBoard before the step's row: a run killed in between redoes the step, and the resumed
            # writer purges events from that step on, so TensorBoard never lacks a step DuckDB has.
            assert self._tb is not None
            self._tb.log(step, metrics, speedups)
            self.store.upsert("train_steps", [{
                "run_id": self.run_id, "step": step, "stage": stage, "level": level, "loss": loss,
                "reward_mean": metrics.get("reward_mean"), "reward_std": metrics.get("reward_std"),
                "format_rate": metrics.get("format_rate"), "compile_rate": metrics.get("compile_rate"),
                "correct_rate": metrics.get("correct_rate"), "hack_rate": metrics.get("hack_rate"),
                "truncated_rate": metrics.get("truncated_rate"),
                "num_samples": int(metrics["num_samples"]), "num_trained": int(metrics["num_trained"]),
                "sampling_s": timings.sampling_s, "eval_s": timings.eval_s, "train_s": train_s,
                "staleness": batch.staleness, "sampler_step": batch.sampler_step,
                "metrics_json": json.dumps(metrics, sort_keys=True),
            }])
            # The checkpoint row comes last: resume trusts the newest checkpoint, so every step it covers
            # must already have its rows. A kill before it re-does this step from the previous checkpoint.
            checkpoint = self._record_checkpoint(saved) if saved is not None else None
            self.next_step = step + 1
            self._write_run("running")
        result = StepResult(step, stage, level, loss, metrics, events + promotions, checkpoint)
        self.last_result = result
        if self.on_step is not None:
            self.on_step(result)
        return result

    def _base_sampler(self) -> Any:
        """A sampling client of the KL penalty's reference policy (training.kl_reference; made once): the SFT warm
        start RL began from when the run has one (`auto`), the base model, or a checkpoint."""
        if self._kl_reference is None:
            self.kl_reference_name, path = self._kl_reference_source()
            self._kl_reference = result_of(self._service.create_sampling_client(model_path=path) if path is not None
                                           else self._service.create_sampling_client(base_model=self.base_model))
        return self._kl_reference

    def _kl_reference_source(self) -> tuple[str, str | None]:
        """(what the reference is, its sampler path; None for the base model) from training.kl_reference."""
        choice = self.training.kl_reference
        if choice == "base":
            return "base", None
        if choice in ("auto", "warm_start"):
            sft = last_sft_checkpoint(self.store, self.run_id) if self.parts.sft.enabled else None
            if sft is not None and sft.get("sampler_path"):
                return "warm_start", resolved_path(sft["sampler_path"], self.log_dir)
            if choice == "warm_start":
                raise UserError(f"training.kl_reference=warm_start but run {self.run_id} has no SFT warm start; "
                                "use base, a checkpoint name or a sampler path.")
            return "base", None
        rows = self.store.dicts("SELECT sampler_path FROM checkpoints WHERE run_id = ? AND name = ?", [self.run_id, choice])
        if rows and rows[0]["sampler_path"]:
            return choice, resolved_path(rows[0]["sampler_path"], self.log_dir)
        return choice, choice  # a sampler path as the backend opens it (a folder, tinker://...)

    def _checkpoint(self, step: int, *, final: bool) -> str:
        """Save the state and sampler weights of `step` and record them. A periodic checkpoint expires after
        training.checkpoint_ttl_s on Tinker; a final one (the run's last step, or where a stopped run
        resumes) never does."""
        return self._record_checkpoint(self._save_checkpoint(step, final=final))

    def _save_checkpoint(self, step: int, *, final: bool) -> dict[str, Any]:
        """Save the files of `step`'s checkpoint; returns its row (not written yet)."""
        name = f"step_{step:06d}"
        ttl = None if final else self.training.checkpoint_ttl_s
        with saving(self.log_dir, name):  # a failed write is an error naming the folder; then free space is checked
            # overwrite: a step re-done after a kill saves under the same name
            state_path = result_of(self.training_client.save_state(name, ttl_seconds=ttl, overwrite=True)).path
            sampler_path = result_of(self.training_client.save_weights_for_sampler(name, ttl_seconds=ttl)).path
        return {  # paths relative to the run's folder: a copied runs/ resumes from the copy
            "run_id": self.run_id, "name": name, "step": step, "backend": self.policy_backend,
            "state_path": stored_path(state_path, self.log_dir), "sampler_path": stored_path(sampler_path, self.log_dir),
            "ttl_s": ttl,
        }

    def _record_checkpoint(self, row: dict[str, Any]) -> str:
        """Write a saved checkpoint's row; samplers kept for a resume before it are no longer needed."""
        self.store.upsert("checkpoints", [row])
        self.checkpoint_step = int(row["step"])
        if self._lag is not None:
            self._lag.prune_before(self.checkpoint_step - self.training.max_steps_off_policy)
        return str(row["name"])

    def _write_events(self, events: Sequence[CurriculumEvent]) -> None:
        if events:
            self.store.upsert("curriculum_events", [e.row(self.run_id) for e in events])

    def _write_group(self, step: int, stage: str, group: GroupRollout, samples: Sequence[SampleTurn]) -> None:
        """Rollouts, rewards, prompts/completions and kernels of one finished group."""
        store = self.store
        turns = [(i, turn) for i, env in enumerate(group.envs) for turn in env.turns]
        if not turns:
            return
        # One turn on the file for the whole group: the writes below (put_kernel once per turn) reuse
        # it instead of each opening the database.
        with store.connect():
            prompts = store.put_texts("prompt", [t.prompt for _, t in turns])
            completions = store.put_texts("completion", [t.completion for _, t in turns])
            backend = self.spec.kernel_backend
            rollouts, rewards = [], []
            by_key = {(s.sample_index, s.turn): s for s in samples}
            for (sample_index, turn), prompt_sha, completion_sha in zip(turns, prompts, completions, strict=True):
                kernel_sha = store.put_kernel(turn.code, backend) if turn.code else None
                result = turn.result
                eval_key = None
                if kernel_sha and result is not None and result.settings_hash:
                    eval_key = eval_key_for(group.problem.id, kernel_sha, result.settings_hash)
                key = {"run_id": self.run_id, "step": step, "problem_id": group.problem.id,
                       "sample_index": sample_index, "turn": turn.index}
                rollouts.append({**key, "suite": group.problem.suite, "stage": stage, "level": group.problem.level,
                                 "prompt_sha256": prompt_sha,
                                 "completion_sha256": completion_sha, "kernel_sha256": kernel_sha, "eval_key": eval_key,
                                 "prompt_tokens": len(turn.prompt_tokens), "completion_tokens": len(turn.completion_tokens),
                                 "format_ok": turn.format_ok, "stop_reason": turn.stop_reason or None,
                                 "error_category": result.error_category.value if result else None,
                                 "error_message": result.error_message if result else None})
                sample = by_key[(sample_index, turn.index)]
                components = dict(turn.score.components) if turn.score else {}
                components.update({"infra": bool(turn.score and turn.score.infra), "hack": bool(turn.score and turn.score.hack),
                                   "trainable": sample.trainable, "dropped_constant": sample.dropped_constant,
                                   "truncated": sample.truncated, "dropped_truncated": sample.dropped_truncated,
                                   "dropped_cut_short": sample.dropped_cut_short,
                                   "preset": turn.score.preset if turn.score else "",
                                   "error_category": result.error_category.value if result else None})
                rewards.append({**key, "suite": group.problem.suite, "stage": stage, "reward": sample.reward,
                                "return_value": sample.return_value,
                                "advantage": sample.advantage, "components_json": json.dumps(components, sort_keys=True)})
            # One transaction, and a re-done step replaces what an interrupted attempt wrote for this
            # problem (in Kevin mode it may have had more turns than the new attempt).
            store.write_batch({"rollouts": rollouts, "rewards": rewards},
                              replace_where={"run_id": self.run_id, "step": step, "problem_id": group.problem.id})

    # -- tear-down -----------------------------------------------------------------------------
    def close(self, status: str | None = None, session_status: SessionStatus | None = None) -> None:
        """Finish the run: `status` goes to runs.status (None: finished or stopped); the policy
        service's session is closed with `session_status` (None: errored when failed, else success)."""
        if not self._started:
            return
        last_done = self.next_step - 1
        try:
            if session_status == "interrupted":
                # Stopped: sampling under way (the local policy's decoding) ends now instead of finishing its batch.
                stop_sampling = getattr(self._service, "stop_sampling", None)
                if callable(stop_sampling):
                    stop_sampling()
            self._stop_prefetch()
            if status != "failed" and last_done >= 0 and self.checkpoint_step != last_done:
                # Stopped between checkpoints (stop_after_steps, a flow's per-step task): save the state so
                # that re-running resumes here instead of at the last periodic checkpoint.
                with deferred_stop():
                    self._checkpoint(last_done, final=True)
        finally:
            self._release(status, session_status or ("errored" if status == "failed" else "success"))

    def _release(self, status: str | None, session_status: SessionStatus) -> None:
        if self._evaluator is not None:
            self._evaluator.__exit__(None, None, None)
            self._evaluator = None
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        try:
            self._write_run(status or ("finished" if self.finished else "stopped"))
        finally:
            self._started = False
            close_session(self._service, session_status)
            ownership.release(self.store.path, self.run_id)

    def __enter__(self) -> TrainingRun:
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        elif is_stop(exc_type):  # Ctrl-C, SIGTERM through any handler, an orchestrator's termination: saved, stopped
            self.close(None, "interrupted")
        else:
            self.close("failed", "errored")

    def summary(self, first_step: int, steps_run: int) -> TrainSummary:
        return TrainSummary(
            run_id=self.run_id, db_path=str(self.store.path), log_dir=str(self.log_dir),
            resumed_from_step=self.resumed_from_step, first_step=first_step, steps_run=steps_run,
            last_step=self.next_step - 1 if self.next_step > 0 else None, stage=self.curriculum.stage,
            level=self.curriculum.level, finished=self.finished,
            last_metrics=dict(self.last_result.metrics) if self.last_result else {},
            truncated_rate=self.run_truncated_rate(),
        )

    def run_truncated_rate(self) -> float | None:
        """Truncated turns over sampled turns, across every step of the run in the store."""
        rows = self.store.fetchall(
            "SELECT sum(CASE WHEN stop_reason = 'length' THEN 1 ELSE 0 END), count(*) FROM rollouts WHERE run_id = ?",
            [self.run_id])
        truncated, total = rows[0] if rows else (None, 0)
        return float(truncated or 0) / total if total else None


def describe_run_start(store: Store, run_id: str, *, named: bool) -> str:
    """One line: which run this command resumes or starts, and how run ids work (`named`: run_id=NAME was given)."""
    ownership.mark_interrupted_runs(store)
    rows = []
    if store.exists():
        try:
            rows = store.dicts("SELECT run_id, kind, status, last_step FROM runs ORDER BY updated_at DESC", read_only=True)
        except Exception:  # noqa: BLE001 - no runs table yet
            rows = []
    mine = next((row for row in rows if row["run_id"] == run_id), None)
    if mine is not None and mine.get("kind") == "sft":
        return f"starting RL of run {run_id} after its SFT warm start ({mine['status']})"
    if mine is not None:
        last = "no step done yet" if mine["last_step"] is None else f"last step {mine['last_step']}"
        return f"resuming run {run_id} ({mine['status']}, {last})"
    line = f"starting a new run {run_id}"
    if not named:
        others = ", ".join(row["run_id"] for row in rows[:5])
        line += (" (its id is a hash of the configuration, so changing any key, training.steps included, starts "
                 "a new run; pass run_id=NAME to name a run and the same run_id=NAME to resume it"
                 + (f"; runs in this database: {others}" if others else "") + ")")
    return line


def run_training(
    parts: RunParts,
    *,
    progress: bool = True,
    stop_after_steps: int | None = None,
    retrieve: Retriever | None = None,
    evaluate_fn: EvaluateFn | None = None,
    service_client: Any | None = None,
    store: Store | None = None,
    lines: bool = False,
) -> TrainSummary:
    """Train (or resume) the run; `stop_after_steps` ends this invocation early. `progress` shows a progress bar;
    `lines` (without it) prints the same progress as plain lines. `retrieve`: RA-ICL examples in every prompt (a run
    with rag.enabled: `parts.open_retriever()`)."""
    steps = parts.training.steps
    run = TrainingRun(parts, store=store, retrieve=retrieve, evaluate_fn=evaluate_fn, service_client=service_client)
    with run:
        first, count = run.next_step, 0
        limit = steps - first if stop_after_steps is None else min(stop_after_steps, steps - first)
        run.step_limit = first + limit
        bar: Any = nullcontext()
        if progress or lines:
            from kernelbench_rl.training.progress import TrainLines, TrainProgress

            bar = (TrainProgress if progress else TrainLines)(run.run_id, steps, completed=first)
            run.on_step, run.on_group = bar.update, bar.group_done
        with bar:
            while count < limit:
                run.step()
                count += 1
        return run.summary(first, count)
