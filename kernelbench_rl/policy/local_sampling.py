"""The local backend's decoding: one sampling request, or several decoded together as one padded batch.

A request (`SampleJob`) is one prompt and its number of samples. Alone, it decodes as a batch of its
samples. Its prompt goes through the first forward (prefill) once, as one row, whose cache and last logits
are then copied to one row per sample: a row per sample made the prefill's logits of 8 requests x 8 samples
x 1,000 prompt tokens x a 152k vocabulary 19 GiB, and its compute 8x what the distinct prompts need.
Requests sent inside `LocalServiceClient.batched_sampling()` (the rollout runner sends a
step's first turns that way) decode together: prompts left-padded to one length, with an attention
mask and explicit positions, so each row sees exactly its own prompt. One request at a time kept a
1.5B model on an H100 at 8 rows a forward, and sampling took 240 of an RL step's 255 s.

Each request keeps its own sampling parameters, stop conditions, token budget and random generator;
its generator is drawn from only while the request still has rows decoding, so a request's draws do
not depend on which others share its batch. Padding changes the shapes the kernels see, so a request
decoded beside others may differ from the same request decoded alone in the last bits of its
logits: results are deterministic for the same requests sent together in the same order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from tinker import types

# Rows (samples) decoded in one batch at most: 8 problems x 8 samples of an RL step fit in one.
SAMPLE_BATCH_ROWS = 64


@dataclass
class SampleOutcome:
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    stop_reason: str = "length"
    done: bool = False


@dataclass
class SampleJob:
    """One sampling request: what to decode, how, and where its answer goes."""

    prompt_tokens: list[int]
    num_samples: int
    params: types.SamplingParams
    include_prompt_logprobs: bool
    generator: torch.Generator
    stop_token_ids: set[int]
    stop_strings: list[str]
    max_tokens: int
    future: Future | None = None
    outcomes: list[SampleOutcome] = field(default_factory=list)
    prompt_logprobs: list[float | None] | None = None
    stopped: Callable[[], bool] | None = None  # polled before each token: True ends the decoding (SamplingStopped)

    def __post_init__(self) -> None:
        self.outcomes = [SampleOutcome() for _ in range(self.num_samples)]

    def reset(self) -> None:
        """Back to nothing decoded (a batch that failed is decoded again job by job)."""
        self.outcomes = [SampleOutcome() for _ in range(self.num_samples)]
        self.prompt_logprobs = None

    @property
    def finished(self) -> bool:
        return all(outcome.done for outcome in self.outcomes)


def batches(jobs: Sequence[SampleJob], max_rows: int = SAMPLE_BATCH_ROWS) -> list[list[SampleJob]]:
    """`jobs` in order, cut into batches of at most `max_rows` rows (a bigger job alone in its own)."""
    out: list[list[SampleJob]] = []
    rows = 0
    for job in jobs:
        if out and rows + job.num_samples <= max_rows:
            out[-1].append(job)
            rows += job.num_samples
        else:
            out.append([job])
            rows = job.num_samples
    return out


class SamplingStopped(RuntimeError):
    """The policy was told to stop sampling (a run being stopped): the request was dropped."""


def decode(model: Any, jobs: Sequence[SampleJob], device: torch.device, tokenizer: Any) -> None:
    """Decode `jobs` together, filling each job's outcomes (and prompt logprobs where asked); a job's `stopped()`,
    polled before each token, ends it with SamplingStopped."""
    stopped = next((job.stopped for job in jobs if job.stopped is not None), None)
    if stopped is not None and stopped():
        raise SamplingStopped("the local policy was stopped before this request was decoded")
    for job in jobs:
        if job.max_tokens <= 0:
            for outcome in job.outcomes:
                outcome.done = True
    rows = [(job, sample) for job in jobs for sample in range(job.num_samples)]
    longest = max(len(job.prompt_tokens) for job in jobs)
    padded = len(jobs) > 1 and any(len(job.prompt_tokens) != longest for job in jobs)
    pad = 0 if tokenizer.pad_token_id is None else int(tokenizer.pad_token_id)
    # Prefill one row per job: its samples share the prompt, so their rows are copies made afterwards.
    input_ids = torch.tensor([[pad] * (longest - len(job.prompt_tokens)) + job.prompt_tokens for job in jobs],
                             dtype=torch.long, device=device)
    extra: dict[str, torch.Tensor] = {}
    if padded:
        mask = torch.tensor([[0] * (longest - len(job.prompt_tokens)) + [1] * len(job.prompt_tokens)
                             for job in jobs], dtype=torch.long, device=device)
        positions = (mask.cumsum(dim=-1) - 1).clamp(min=0)
        extra = {"attention_mask": mask, "position_ids": positions}
    slices, first = [], 0
    for job in jobs:
        slices.append(slice(first, first + job.num_samples))
        first += job.num_samples
    # Row of each sample -> its job's prefill row (output_size spares a device sync).
    index = torch.repeat_interleave(torch.arange(len(jobs), device=device),
                                    torch.tensor([job.num_samples for job in jobs], device=device),
                                    output_size=len(rows))
    output = model(input_ids=input_ids, use_cache=True, **extra)
    for row, job in enumerate(jobs):
        if job.include_prompt_logprobs:
            job.prompt_logprobs = _prompt_logprobs_from(output.logits[row], job.prompt_tokens, longest, device)
    past = output.past_key_values
    logits = output.logits[:, -1, :].float()
    del output  # frees the prompt's full logits (rows x prompt x vocab) before decoding
    if len(rows) != len(jobs):
        if hasattr(past, "reorder_cache"):
            past.reorder_cache(index)  # index_select on the batch dim: one cache row per sample
            logits = logits.index_select(0, index)
        else:
            # A cache that cannot be expanded: prefill again, one row per sample.
            output = model(input_ids=input_ids.index_select(0, index), use_cache=True,
                           **{name: value.index_select(0, index) for name, value in extra.items()})
            past = output.past_key_values
            logits = output.logits[:, -1, :].float()
            del output
        extra = {name: value.index_select(0, index) for name, value in extra.items()}
    if padded and not bool(torch.isfinite(logits).all()):
        # An attention backend that turns a pad's fully masked row into NaN spreads it to every row through the
        # cache (0 x NaN): the caller decodes each request alone instead.
        raise FloatingPointError("a left-padded batch gave non-finite logits")
    budget = max(job.max_tokens for job in jobs)
    for step in range(budget):
        if stopped is not None and stopped():
            raise SamplingStopped("the local policy was stopped while decoding this request")
        chosen = torch.full((len(rows),), pad, dtype=torch.long, device=device)
        chosen_logprobs_t = torch.zeros(len(rows), dtype=torch.float32, device=device)
        for job, rows_of_job in zip(jobs, slices):
            if job.finished or step >= job.max_tokens:
                continue
            chosen[rows_of_job], chosen_logprobs_t[rows_of_job] = _choose_tokens(
                logits[rows_of_job], job.params, job.generator)
        chosen_logprobs = chosen_logprobs_t.tolist()
        for (job, sample), token, logprob in zip(rows, chosen.tolist(), chosen_logprobs):
            outcome = job.outcomes[sample]
            if outcome.done:
                continue
            outcome.tokens.append(token)
            outcome.logprobs.append(logprob)
            if token in job.stop_token_ids or _ends_with_stop_string(outcome.tokens, job.stop_strings, tokenizer):
                outcome.done = True
                outcome.stop_reason = "stop"
            elif len(outcome.tokens) >= job.max_tokens:
                outcome.done = True  # its budget spent: stop_reason stays "length"
        if all(job.finished for job in jobs):
            break
        if padded:
            mask = extra["attention_mask"]
            extra["attention_mask"] = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=-1)
            extra["position_ids"] = extra["position_ids"][:, -1:] + 1
        output = model(input_ids=chosen[:, None], past_key_values=past, use_cache=True, **extra)
        past = output.past_key_values
        logits = output.logits[:, -1, :].float()


def response(job: SampleJob, sequence_id: Any) -> types.SampleResponse:
    """The Tinker response for a decoded job; `sequence_id()` names each sequence."""
    sequences = [
        types.SampledSequence(
            stop_reason=outcome.stop_reason,  # type: ignore[arg-type]
            sequence_id=sequence_id(),
            tokens_np=np.asarray(outcome.tokens, dtype=np.int32),
            logprobs_np=np.asarray(outcome.logprobs, dtype=np.float32),
        )
        for outcome in job.outcomes
    ]
    scored = job.prompt_logprobs
    return types.SampleResponse(
        sequences=sequences,
        prompt_logprobs_np=None if scored is None else np.asarray([np.nan if v is None else v for v in scored],
                                                                   dtype=np.float32),
    )


def logprobs_of(logits: torch.Tensor, targets: torch.Tensor) -> list[float]:
    return torch.log_softmax(logits, dim=-1).gather(1, targets[:, None])[:, 0].tolist()


def _prompt_logprobs_from(row_logits: torch.Tensor, tokens: list[int], longest: int,
                          device: torch.device) -> list[float | None]:
    """A prompt's own logprobs from its row of a (left-padded) first forward."""
    start = longest - len(tokens)
    targets = torch.tensor(tokens[1:], dtype=torch.long, device=device)
    return [None, *logprobs_of(row_logits[start:-1].float(), targets)]


def stop_conditions(stop: str | Sequence[str] | Sequence[int] | None, tokenizer: Any) -> tuple[set[int], list[str]]:
    """Tinker's rules: None stops at EOS only; [] never stops early; otherwise EOS plus the given stops."""
    eos = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    if stop is None:
        return eos, []
    if isinstance(stop, str):
        return eos, [stop]
    stops = list(stop)
    if not stops:
        return set(), []
    token_ids = {int(s) for s in stops if isinstance(s, (int, np.integer))}
    strings = [s for s in stops if isinstance(s, str)]
    return eos | token_ids, strings


def _ends_with_stop_string(tokens: list[int], stop_strings: list[str], tokenizer: Any) -> bool:
    if not stop_strings:
        return False
    # Decoding only the tail keeps this cheap; a stop string spans at most len(stop) tokens.
    window = max(len(s) for s in stop_strings) + 1
    text = tokenizer.decode(tokens[-window:])
    return any(s in text for s in stop_strings)


def sampling_log_probs(logits: torch.Tensor, params: types.SamplingParams) -> torch.Tensor:
    """Log-probabilities of the distribution `params` sample from: the logits over the temperature, then
    top-k and top-p (the smallest head of the sorted distribution whose mass reaches top_p) as -inf."""
    scaled = logits / params.temperature
    if params.top_k is not None and params.top_k > 0 and params.top_k < scaled.shape[-1]:
        kth = torch.topk(scaled, params.top_k, dim=-1).values[:, -1:]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    if params.top_p is not None and params.top_p < 1.0:
        sorted_logits, order = torch.sort(scaled, dim=-1, descending=True)
        sorted_probs = torch.softmax(sorted_logits, dim=-1)
        # Drop a token once the mass before it already reaches top_p (the first token always stays).
        drop_sorted = (sorted_probs.cumsum(dim=-1) - sorted_probs) >= params.top_p
        drop = torch.zeros_like(drop_sorted).scatter(1, order, drop_sorted)
        scaled = scaled.masked_fill(drop, float("-inf"))
    return torch.log_softmax(scaled, dim=-1)


def _choose_tokens(logits: torch.Tensor, params: types.SamplingParams,
                   generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """The next token of each row and its log-probability under the distribution it was drawn from (what an
    importance ratio needs): the tempered, top-k/top-p distribution; greedy decoding is a point mass (0.0)."""
    if params.temperature <= 0:
        chosen = logits.argmax(dim=-1)
        return chosen, torch.zeros(chosen.shape, dtype=torch.float32, device=logits.device)
    log_probs = sampling_log_probs(logits, params)
    chosen = torch.multinomial(log_probs.exp(), 1, generator=generator)[:, 0]
    return chosen, log_probs.gather(1, chosen[:, None])[:, 0].float()
