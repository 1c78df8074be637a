"""The supervised warm start (SFT): teach the policy the answer format before RL.

Real kernel-RL systems start from a model that already writes kernels in the expected shape
(KernelLLM and AutoTriton fine-tune on verified PyTorch -> Triton pairs first). This stage does
that with our own verified corpus:

    examples = build_sft_examples(parts, store, tokenizer, retrieve)    # leak-free, RL's own prompts
    with SftRun(parts) as run:                                         # resumes from its last checkpoint
        while not run.finished:
            run.step()                                                 # forward_backward + optim_step

- **Data**: our own solutions and re-verified corpus rows of the run's kernel backend, never a
  holdout problem's (the retrieval leak rules: `rag.retrieve.HoldoutGuard`). Each is rendered with
  the same prompt the RL environment builds for its problem (template, retrieved examples), and
  the completion is the kernel in a ```python block followed by the token that ends an answer in
  the policy's chat format (`<|im_end|>` for Qwen3, else EOS).
- **Loss**: Tinker's `cross_entropy` (a sum over target tokens of -weight * logp) with weight 0 on
  every prompt position and 1 on the completion, through `forward_backward` and `optim_step`, so
  the same code trains on Tinker and on the local backend (transformers + peft).
- **Rows**: one `sft_steps` row per optimizer step (loss per completion token, tokens, examples),
  TensorBoard scalars under `<log_dir>/<run_id>/tensorboard/sft`. A checkpoint's paths ride on its
  step's row; a killed run resumes from the newest one and re-does the steps after it, whose rows
  replace themselves (natural key), so no step is ever counted twice.
- RL (`TrainingRun`) starts from the final SFT weights of its run, with a fresh optimizer.
"""

from __future__ import annotations

import math
import random
import warnings
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tinker
import torch

from kernelbench_rl.envs.kernel_env import Retriever, make_group_builders
from kernelbench_rl.errors import UserError
from kernelbench_rl.config.schema import SftConfig
from kernelbench_rl.parts import RunParts
from kernelbench_rl.policy.base import SessionStatus
from kernelbench_rl.policy.session import check_lora_rank, close_session
from kernelbench_rl.problems import Problem, load_problems, parse_problem_id
from kernelbench_rl.store import Store
from kernelbench_rl.training.checkpoints import damage, newest_intact, resolved_path, saving, stored_path
from kernelbench_rl.training.optim import result_of, adam_params
from kernelbench_rl.training.stops import deferred_stop, is_stop

# Corpus sources whose kernels are known correct without re-verification (our own, tested in CI).
TRUSTED_SOURCES = ("solutions",)


@dataclass
class SftExample:
    """One supervised example: a prompt exactly as RL renders it, and a verified kernel as the answer."""

    problem_id: str
    doc_sha256: str
    source: str
    prompt_tokens: list[int]
    completion_tokens: list[int]

    def datum(self) -> tinker.Datum:
        """Inputs shifted right; loss weight 0 on prompt targets, 1 on completion targets."""
        tokens_T = self.prompt_tokens + self.completion_tokens
        weights_T = [0.0] * (len(self.prompt_tokens) - 1) + [1.0] * len(self.completion_tokens)
        return tinker.Datum(
            model_input=tinker.ModelInput.from_ints(tokens_T[:-1]),
            loss_fn_inputs={
                "target_tokens": tinker.TensorData.from_torch(torch.tensor(tokens_T[1:], dtype=torch.int64)),
                "weights": tinker.TensorData.from_torch(torch.tensor(weights_T, dtype=torch.float32)),
            },
        )


@dataclass
class SftDataset:
    examples: list[SftExample]
    excluded: Counter[str] = field(default_factory=Counter)  # reason -> documents left out


def completion_text(kernel_code: str) -> str:
    """The answer an SFT example teaches: the kernel module in one fenced block (ANSWER_FORMAT)."""
    return f"```python\n{kernel_code.rstrip()}\n```"


def candidate_documents(store: Store, backend: str) -> list[dict[str, Any]]:
    """Stored corpus documents SFT may train on before the leak rules: ours, or re-verified by our evaluator."""
    from kernelbench_rl.rag.corpus import read_corpus

    return [d for d in read_corpus(store, backend=backend) if d["source"] in TRUSTED_SOURCES or d.get("verified")]


def leak_free_documents(
    docs: Sequence[dict[str, Any]], leak_reason: Callable[[dict[str, Any]], str | None]
) -> tuple[list[dict[str, Any]], Counter[str]]:
    kept, excluded = [], Counter()
    for doc in docs:
        reason = leak_reason(doc)
        if reason is None:
            kept.append(doc)
        else:
            excluded[reason] += 1
    return kept, excluded


def default_leak_reason(
    parts: RunParts, store: Store, docs: Sequence[dict[str, Any]]
) -> Callable[[dict[str, Any]], str | None]:
    """The retrieval leak rules (holdout ids, near-duplicates of holdout references) over `docs`.

    Embeddings come from the store's cache (the index build has made them) in one batch.
    """
    from kernelbench_rl.rag.embed import Embedder, embed_cached
    from kernelbench_rl.rag.retrieve import HoldoutGuard

    embedder = Embedder(parts.rag.model)
    split = parts.split
    guard = HoldoutGuard.for_split(store, embedder, kernelbench_root=split.source_root,
                                   holdout_fraction=split.holdout_fraction, split_seed=split.seed)
    vectors, _ = embed_cached(store, embedder, {d["sha256"]: d["pytorch_code"] for d in docs})

    def reason(doc: dict[str, Any]) -> str | None:
        return guard.leak_reason(doc, vectors[doc["sha256"]])

    return reason


def _problem_for(doc: dict[str, Any], by_task: dict[tuple[int, int], Problem]) -> Problem:
    """The problem whose prompt the document answers: the set's own problem when the task is known."""
    task = (doc.get("kb_level"), doc.get("kb_task"))
    if task in by_task:
        return by_task[task]  # type: ignore[index]
    # A corpus row of no loaded problem: its PyTorch side is the module to optimise.
    return Problem(level=int(doc.get("kb_level") or 0), number=int(doc.get("kb_task") or 0),
                   name=str(doc.get("title") or doc.get("origin_id") or "corpus"), source=doc["pytorch_code"],
                   origin="inline")


def build_sft_examples(
    parts: RunParts,
    store: Store,
    tokenizer: Any,
    *,
    retrieve: Retriever | None = None,
    training_ids: Sequence[str] = (),
    leak_reason: Callable[[dict[str, Any]], str | None] | None = None,
) -> SftDataset:
    """Render the leak-free verified corpus through RL's prompts; the run's training problems come first.

    A completion longer than the run's completion limit (`sampling.max_tokens`) is left out: RL could never sample it whole.
    """
    from kernelbench_rl.training.rollouts import PromptRenderer

    spec = parts.env
    docs = candidate_documents(store, spec.kernel_backend)
    if leak_reason is None:
        leak_reason = default_leak_reason(parts, store, docs) if docs else (lambda doc: None)
    docs, excluded = leak_free_documents(docs, leak_reason)
    problems = load_problems(parts.split.source_root)
    by_task = {(p.level, p.number): p for p in problems}
    first = {parse_problem_id(pid) for pid in training_ids}
    # The run's own problems first (by id), then the rest by sha256: the same order on every call.
    docs.sort(key=lambda d: ((d.get("kb_level"), d.get("kb_task")) not in first, d["kb_level"] or 0,
                             d["kb_task"] or 0, d["sha256"]))
    renderer = PromptRenderer.for_model(tokenizer, parts.base_model, parts.sampling.renderer, parts.sampling.thinking)
    answer_end = renderer.end_of_answer_tokens()
    k = parts.rag_k
    examples: list[SftExample] = []
    for doc in docs:
        if len(examples) >= parts.sft.max_examples:
            excluded["over_max_examples"] += 1
            continue
        problem = _problem_for(doc, by_task)
        (builder,) = make_group_builders([problem], 1, spec, retrieve, k)
        messages = builder()[0].next_messages()
        prompt_tokens = renderer.encode_messages(messages)
        # The answer ends the way a sampled turn stops: the chat format's end-of-message token (or EOS).
        completion_tokens = list(tokenizer.encode(completion_text(doc["kernel_code"]), add_special_tokens=False))
        completion_tokens += answer_end
        if len(completion_tokens) > spec.max_tokens:
            excluded["longer_than_max_tokens"] += 1
            continue
        examples.append(SftExample(problem.id, doc["sha256"], doc["source"], prompt_tokens, completion_tokens))
    return SftDataset(examples, excluded)


def planned_steps(sft: SftConfig, num_examples: int) -> int:
    """`sft.steps`, or enough steps for `sft.epochs` passes over the examples."""
    if sft.steps > 0:
        return sft.steps
    return math.ceil(sft.epochs * num_examples / sft.batch_size) if num_examples else 0


def batch_indices(num_examples: int, batch_size: int, step: int, seed: int) -> list[int]:
    """Examples of one step: each epoch a fresh seeded shuffle, so a re-done step sees the same batch."""
    out: list[int] = []
    position = step * batch_size
    while len(out) < min(batch_size, num_examples):
        epoch, offset = divmod(position, num_examples)
        order = list(range(num_examples))
        random.Random(f"sft:{seed}:{epoch}").shuffle(order)
        out.append(order[offset])
        position += 1
    return out


@dataclass
class SftStepResult:
    step: int
    loss: float
    tokens: int
    examples: int
    learning_rate: float
    checkpoint: str | None = None


@dataclass
class SftSummary:
    run_id: str
    num_examples: int
    excluded: dict[str, int]
    total_steps: int
    resumed_from_step: int | None
    steps_run: int
    first_loss: float | None
    last_loss: float | None
    final_state_path: str | None


class SftRun:
    """The warm start of one run (the run id is RL's): builds on `start()`, advances one `step()` at a time.

    `parts` come from `compose.build_run_parts(config)` (the run's own training problems come first)."""

    def __init__(
        self,
        parts: RunParts,
        *,
        store: Store | None = None,
        retrieve: Retriever | None = None,
        service_client: Any | None = None,
        leak_reason: Callable[[dict[str, Any]], str | None] | None = None,
        on_step: Callable[[SftStepResult], None] | None = None,
    ) -> None:
        self.parts = parts
        self.sft = parts.sft
        self.run_id = parts.run_id
        self.run_dir = parts.run_dir
        self.store = store or Store(parts.db_path)
        self.retrieve = retrieve
        self._service = service_client
        self._leak_reason = leak_reason
        self.on_step = on_step
        self.next_step = 0
        self.total_steps = 0
        self.resumed_from_step: int | None = None
        self.checkpoint_step: int | None = None  # last step whose state is saved
        self._saved_at = time.monotonic()
        self.dataset = SftDataset([])
        self._datums: list[tinker.Datum] = []
        self._tb: Any = None
        self._started = False
        self._run_row = False  # this warm start wrote the run's `runs` row (it had steps to do)

    @property
    def finished(self) -> bool:
        return self.next_step >= self.total_steps

    def start(self) -> SftRun:
        if self._started:
            return self
        from kernelbench_rl import ownership

        # One process owns a run at a time (re-entrant: the pipeline already holds it around this stage).
        ownership.start_owned(self.store.path, self.run_id, self._start)
        return self

    def _start(self) -> None:
        from kernelbench_rl.store.files import check_free_space

        parts = self.parts
        run_dir = self.run_dir
        check_free_space(self.store.path, "before the warm start")
        check_free_space(run_dir, "before the warm start")
        if self._service is None:
            from kernelbench_rl.policy import make_service_client

            self._service = make_service_client(parts.policy)
        checkpoint = newest_intact(sft_checkpoints(self.store, self.run_id), run_dir, what="SFT checkpoint",
                                   run_id=self.run_id)
        if checkpoint is not None:
            # Steps after an intact checkpoint that a damaged one passed over are done again.
            self.store.discard_steps_after(self.run_id, int(checkpoint["step"]), tables=("sft_steps",))
        if checkpoint is None:
            self.training_client = result_of(self._service.create_lora_training_client(
                base_model=parts.base_model, rank=parts.policy.lora_rank))
        else:
            self.resumed_from_step = self.checkpoint_step = int(checkpoint["step"])
            self.next_step = self.resumed_from_step + 1
            self.training_client = result_of(
                self._service.create_training_client_from_state_with_optimizer(checkpoint["state_path"]))
            check_lora_rank(self.training_client, parts.policy.lora_rank, f"SFT checkpoint {checkpoint['state_path']}")
        training_ids = [p.id for p in parts.split.training_problems(parts.audits)]
        self.dataset = build_sft_examples(parts, self.store, self.training_client.get_tokenizer(), retrieve=self.retrieve,
                                          training_ids=training_ids, leak_reason=self._leak_reason)
        if not self.dataset.examples:
            raise UserError("No SFT examples: ingest verified kernels first (kernelbench-rl corpus ingest --source "
                            "solutions), or set sft.enabled=false.")
        self._datums = [example.datum() for example in self.dataset.examples]
        self.total_steps = planned_steps(self.sft, len(self._datums))
        from kernelbench_rl.training.metrics import TensorBoardLogger

        self._tb = TensorBoardLogger(run_dir / "tensorboard" / "sft",
                                     purge_step=self.next_step if self.resumed_from_step is not None else None)
        self._started = True
        if not self.finished:
            self._run_row = True
            self._write_run("running")

    def _write_run(self, status: str) -> None:
        """The run's `runs` row while its warm start runs (kind `sft`; RL's own row replaces it when RL starts)."""
        import json
        import os
        import socket

        self.store.upsert("runs", [{
            "run_id": self.run_id, "kind": "sft", "status": status,
            "config_json": json.dumps(self.parts.record, sort_keys=True),
            "last_step": self.next_step - 1 if self.next_step > 0 else None,
            "owner_pid": os.getpid(), "owner_host": socket.gethostname(),
        }])

    def step(self) -> SftStepResult:
        self.start()
        if self.finished:
            raise RuntimeError(f"the warm start of run {self.run_id} has already done its {self.total_steps} steps")
        step = self.next_step
        picked = batch_indices(len(self._datums), self.sft.batch_size, step, self.parts.training.seed)
        batch = [self._datums[i] for i in picked]
        tokens = sum(len(self.dataset.examples[i].completion_tokens) for i in picked)
        # Constant: a linear decay to a tenth, tried on the embedded default, slowed it down (loss 1.25 by
        # step 58 where a constant rate had been near 0.8).
        learning_rate = self.sft.learning_rate
        start = time.perf_counter()
        # From the update on, a stop waits for the step to be recorded (and saved, when it saves): a stop
        # checkpoint then holds exactly the steps it names.
        with deferred_stop():
            result = self._train_and_record(step, batch, tokens, learning_rate, start)
        if self.on_step is not None:
            self.on_step(result)
        return result

    def _train_and_record(self, step: int, batch: list[tinker.Datum], tokens: int, learning_rate: float,
                          start: float) -> SftStepResult:
        fwd_bwd = self.training_client.forward_backward(batch, loss_fn="cross_entropy")
        optim = self.training_client.optim_step(adam_params(learning_rate, self.parts.training))
        output = result_of(fwd_bwd)
        result_of(optim)
        loss_sum = _loss_sum(output, batch)
        seconds = time.perf_counter() - start
        loss = loss_sum / max(tokens, 1)
        epoch = (step + 1) * self.sft.batch_size / len(self._datums)
        # TensorBoard before the row (as in RL): a resumed writer purges the steps it re-does.
        self._tb.log(step, {"sft/loss": loss, "sft/tokens": float(tokens), "sft/learning_rate": learning_rate,
                            "sft/epoch": epoch, "sft/step_s": seconds}, [])
        row = {"run_id": self.run_id, "step": step, "loss": loss, "loss_sum": loss_sum, "tokens": tokens,
               "examples": len(batch), "learning_rate": learning_rate, "epoch": epoch,
               "state_path": None, "sampler_path": None, "total_steps": self.total_steps}
        checkpoint = None
        every_s = self.sft.checkpoint_every_s
        if ((step + 1) % self.sft.checkpoint_every == 0 or step + 1 == self.total_steps
                or (every_s > 0 and time.monotonic() - self._saved_at >= every_s)):
            checkpoint = self._save(step, row, final=step + 1 == self.total_steps)
        # The row (with its checkpoint) last: resume trusts only checkpoints whose row landed.
        self.store.upsert("sft_steps", [row])
        self.next_step = step + 1
        return SftStepResult(step, loss, tokens, len(batch), learning_rate, checkpoint)

    def _save(self, step: int, row: dict[str, Any], *, final: bool) -> str:
        """Save the state after `step` into `row` (its sft_steps row, written by the caller)."""
        name = f"sft_{step:06d}"
        # Periodic checkpoints expire (training.checkpoint_ttl_s); the last one, RL's warm start, and the
        # one a stopped warm start resumes from never do.
        ttl = None if final else self.parts.training.checkpoint_ttl_s
        run_dir = self.run_dir
        with saving(run_dir, name):  # a failed write is an error naming the folder; then free space is checked
            state = result_of(self.training_client.save_state(name, ttl_seconds=ttl, overwrite=True)).path
            sampler = result_of(self.training_client.save_weights_for_sampler(name, ttl_seconds=ttl)).path
        # Relative to the run's folder: a copied runs/ resumes from the copy's files.
        row["state_path"], row["sampler_path"] = stored_path(state, run_dir), stored_path(sampler, run_dir)
        self.checkpoint_step, self._saved_at = step, time.monotonic()
        return name

    def summary(self, steps_run: int) -> SftSummary:
        rows = self.store.dicts("SELECT step, loss, state_path FROM sft_steps WHERE run_id = ? ORDER BY step",
                                [self.run_id])
        final = last_sft_checkpoint(self.store, self.run_id)
        return SftSummary(
            run_id=self.run_id, num_examples=len(self.dataset.examples), excluded=dict(self.dataset.excluded),
            total_steps=self.total_steps, resumed_from_step=self.resumed_from_step, steps_run=steps_run,
            first_loss=rows[0]["loss"] if rows else None, last_loss=rows[-1]["loss"] if rows else None,
            final_state_path=(resolved_path(final["state_path"], self.run_dir)
                              if final and self.finished else None),
        )

    def close(self, session_status: SessionStatus = "success") -> None:
        """Save where a stopped warm start is (unless it failed), close the TensorBoard writer and the
        policy service's session (with `session_status`)."""
        if not self._started:
            return
        last_done = self.next_step - 1
        try:
            if session_status == "interrupted":
                # Sampling is no part of SFT, but a policy shared with other work may be decoding: let it go.
                stop_sampling = getattr(self._service, "stop_sampling", None)
                if callable(stop_sampling):
                    stop_sampling()
            if session_status != "errored" and last_done >= 0 and self.checkpoint_step != last_done:
                # Stopped between checkpoints (stop_after_steps, Ctrl-C, a flow cancelled): the next call
                # resumes here instead of at the last periodic checkpoint.
                row = {"run_id": self.run_id, "step": last_done}
                with deferred_stop():
                    self._save(last_done, row, final=True)
                    self.store.upsert("sft_steps", [row])
        finally:
            if self._tb is not None:
                self._tb.close()
                self._tb = None
            try:
                if self._run_row:
                    self._write_run("failed" if session_status == "errored" else
                                    "finished" if self.finished else "stopped")
            finally:
                self._started = False
                close_session(self._service, session_status)
                from kernelbench_rl import ownership

                ownership.release(self.store.path, self.run_id)

    def __enter__(self) -> SftRun:
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> None:
        # A stop (Ctrl-C, SIGTERM through any handler, an orchestrator's termination) saves; a failure does not.
        self.close("success" if exc_type is None else "interrupted" if is_stop(exc_type) else "errored")


def _loss_sum(output: Any, batch: Sequence[tinker.Datum]) -> float:
    """The batch's summed loss: the service's metric when it reports one, else from per-token logprobs."""
    metrics = getattr(output, "metrics", None) or {}
    for key in ("loss:sum", "loss"):
        if key in metrics:
            return float(metrics[key])
    total = 0.0
    for datum, item in zip(batch, output.loss_fn_outputs, strict=True):
        logp = item["logprobs"].to_torch().float().reshape(-1)
        weights = datum.loss_fn_inputs["weights"].to_torch().float().reshape(-1)
        total += float(-(weights * logp).sum())
    return total


def sft_checkpoints(store: Store, run_id: str) -> list[dict[str, Any]]:
    """A run's saved SFT states, newest first: {step, state_path, sampler_path, total_steps} (paths as stored)."""
    return store.dicts(
        "SELECT step, state_path, sampler_path, total_steps FROM sft_steps WHERE run_id = ? AND state_path IS NOT NULL "
        "ORDER BY step DESC", [run_id])


def last_sft_checkpoint(store: Store, run_id: str) -> dict[str, Any] | None:
    """The newest saved SFT state of a run: {step, state_path, sampler_path, total_steps} (paths as stored), or None."""
    rows = sft_checkpoints(store, run_id)
    return rows[0] if rows else None


def sft_done(store: Store, run_id: str, sft_steps: int = 0) -> bool:
    """Whether the run's warm start has saved its final step (cheap: no model is built); `sft_steps` (sft.steps)
    stands for a checkpoint row that does not say its total."""
    checkpoint = last_sft_checkpoint(store, run_id)
    if checkpoint is None:
        return False
    total = checkpoint.get("total_steps") or sft_steps
    return not total or int(checkpoint["step"]) + 1 >= int(total)


def warm_start_checkpoint(store: Store, run_id: str, run_dir: Path, sft_steps: int = 0) -> dict[str, Any] | None:
    """The finished SFT state RL starts from (paths resolved under the run's folder `run_dir`). An unfinished SFT
    is refused (its newest checkpoint is a partial warm start); no SFT at all is said loudly, and RL starts from
    the base model."""
    if not store.fetchall("SELECT count(*) FROM sft_steps WHERE run_id = ?", [run_id])[0][0]:
        warnings.warn(f"sft.enabled is true but run {run_id} has no SFT warm start: RL starts from the base "
                      "model (run `kernelbench-rl sft` with the same config first, or set sft.enabled=false).",
                      stacklevel=2)
        return None
    checkpoint = last_sft_checkpoint(store, run_id)
    if checkpoint is None or not sft_done(store, run_id, sft_steps):
        done = "no checkpoint yet" if checkpoint is None else f"its last checkpoint is step {checkpoint['step']}"
        total = (checkpoint or {}).get("total_steps") or sft_steps
        raise UserError(f"The SFT warm start of run {run_id} has not finished ({done} of {total or 'its'} steps): "
                        "finish it with `kernelbench-rl sft` and the same config, or set sft.enabled=false.")
    checkpoint = {**checkpoint, "state_path": resolved_path(checkpoint["state_path"], run_dir),
                  "sampler_path": resolved_path(checkpoint["sampler_path"], run_dir)}
    wrong = damage(checkpoint["state_path"], optimizer=False)
    if wrong is None and checkpoint["sampler_path"]:  # RL samples from these weights first: checked alike
        wrong = damage(checkpoint["sampler_path"], optimizer=False)
    if wrong is not None:
        from kernelbench_rl.training.checkpoints import CheckpointDamagedError

        raise CheckpointDamagedError(
            f"The final SFT checkpoint of run {run_id} is damaged ({wrong}), so run `kernelbench-rl sft` with the "
            "same config to redo its last steps from the newest intact one, then train again.")
    return checkpoint


def run_sft(
    parts: RunParts,
    *,
    store: Store | None = None,
    retrieve: Retriever | None = None,
    service_client: Any | None = None,
    leak_reason: Callable[[dict[str, Any]], str | None] | None = None,
    stop_after_steps: int | None = None,
    on_step: Callable[[SftStepResult], None] | None = None,
) -> SftSummary:
    """Run (or resume) the warm start of the run; `stop_after_steps` ends this call early."""
    run = SftRun(parts, store=store, retrieve=retrieve, service_client=service_client, leak_reason=leak_reason,
                 on_step=on_step)
    with run:
        count = 0
        while not run.finished and (stop_after_steps is None or count < stop_after_steps):
            run.step()
            count += 1
        return run.summary(count)
