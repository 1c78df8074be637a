"""The `local` backend: Tinker's client interface over transformers + peft LoRA, CPU or CUDA.

Semantics follow the Tinker SDK 0.38 (see base.py): client-creating calls return futures of
clients; work calls return APIFutures. All model work of one service runs in order on one worker
thread, so futures are truly asynchronous (the caller can evaluate while the policy samples) and
results are deterministic given PolicyConfig.seed.

Losses are sums over tokens, as Tinker documents them (logp: the training model's log-probability
of each target token; q: the sampler's log-probability from loss_fn_inputs["logprobs"]):
    cross_entropy:       -sum(weights * logp)                      (weights default to 1)
    importance_sampling: -sum(exp(logp - q) * advantages)
    ppo:                 -sum(min(r * A, clip(r, low, high) * A)),  r = exp(logp - q),
                         low/high from loss_fn_config clip_low_threshold / clip_high_threshold
                         (default 0.8 / 1.2)
Gradients accumulate across forward_backward calls until optim_step (AdamW, as Tinker's Adam).

Sampled logprobs are those of the distribution each token was drawn from (the logits over the
temperature, with top-k/top-p's cut tokens removed; greedy decoding is a point mass, 0.0): the
behaviour policy an importance ratio must divide by. At temperature 1 without top-k/top-p that is
the model's own distribution, the quantity forward_backward computes, so an on-policy ratio is 1.

Checkpoints are directories under PolicyConfig.log_dir:
    save_state(name)               -> {log_dir}/weights/{name}          adapter + optimizer + step
    save_weights_for_sampler(name) -> {log_dir}/sampler_weights/{name}  adapter only
Both hold a peft adapter (adapter_config.json + adapter_model.safetensors) and kbrl_checkpoint.json.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch
import torch.nn.functional as F
from tinker import types
from tinker.lib.public_interfaces.api_future import APIFuture, AwaitableConcurrentFuture

from kernelbench_rl.errors import UserError
from kernelbench_rl.policy.base import ClientFuture, SessionStatus, completed_future
from kernelbench_rl.policy.config import PolicyConfig
from kernelbench_rl.policy.local_sampling import SAMPLE_BATCH_ROWS, SampleJob, SamplingStopped, batches
from kernelbench_rl.policy.local_sampling_client import LocalSamplingClient, decode_alone
from kernelbench_rl.policy.tiny import (
    TINY_MODEL_NAME,
    LoadedModel,
    load_base_model,
    lora_target_modules,
    resolve_device,
)

T = TypeVar("T")

SUPPORTED_LOSSES = ("cross_entropy", "importance_sampling", "ppo", "cispo")
CHECKPOINT_META = "kbrl_checkpoint.json"
OPTIMIZER_FILE = "optimizer.pt"
LORA_ALPHA = 32
PPO_CLIP_LOW = 0.8
PPO_CLIP_HIGH = 1.2
# CISPO's clip of the (detached) importance weight when no loss_fn_config names one: Tinker's defaults, a cap and
# no floor (truncated importance sampling).
# loss_fn_config key of the local backend only: the sampling temperature the loss scores tokens at.
TEMPERATURE_KEY = "sampling_temperature"
CISPO_CLIP_LOW = 0.0
CISPO_CLIP_HIGH = 4.0


@dataclass
class AdapterSnapshot:
    """Frozen LoRA weights (on CPU) plus the config that shapes them: what a sampling client serves."""

    base_model: str
    base_seed: int  # seeds the tiny model's weights; the adapter only fits the base it was trained on
    lora_config: Any  # peft.LoraConfig
    state: dict[str, torch.Tensor]
    key: int


_snapshot_keys = itertools.count()


def _lora_signature(lora_config: Any) -> tuple[Any, ...]:
    return (
        lora_config.r,
        lora_config.lora_alpha,
        tuple(sorted(lora_config.target_modules)),
        lora_config.lora_dropout,
    )


def _load_adapter_snapshot(path: Path) -> AdapterSnapshot:
    from peft import LoraConfig
    from peft.utils import load_peft_weights

    meta = _read_meta(path)
    lora_config = LoraConfig.from_pretrained(str(path))
    state = {k: v.detach().cpu().clone() for k, v in load_peft_weights(str(path), device="cpu").items()}
    return AdapterSnapshot(meta["base_model"], int(meta.get("base_seed", 0)), lora_config, state, next(_snapshot_keys))


def _read_meta(path: Path) -> dict[str, Any]:
    meta_file = path / CHECKPOINT_META
    if not meta_file.is_file():
        raise UserError(f"{path} is not a local-backend checkpoint (no {CHECKPOINT_META} in it).")
    return json.loads(meta_file.read_text(encoding="utf-8"))


class _SamplerEngine:
    """One frozen copy of a base model that serves every sampling client of that base model.

    A sampling client's LoRA weights are copied into the engine's adapter slot before it samples
    (cheap: LoRA tensors only), so any number of weight snapshots share one base model.
    """

    def __init__(self, loaded: LoadedModel) -> None:
        self.loaded = loaded
        self.peft_model: Any | None = None
        self.active_key: int | None = None
        self.active_signature: tuple[Any, ...] | None = None

    @contextlib.contextmanager
    def model_for(self, snapshot: AdapterSnapshot | None):
        if snapshot is None:
            if self.peft_model is None:
                yield self.loaded.model
            else:
                with self.peft_model.disable_adapter():
                    yield self.peft_model
            return
        self._activate(snapshot)
        yield self.peft_model

    def _activate(self, snapshot: AdapterSnapshot) -> None:
        from peft import get_peft_model
        from peft.utils import set_peft_model_state_dict

        signature = _lora_signature(snapshot.lora_config)
        if self.peft_model is None or signature != self.active_signature:
            base = self.loaded.model if self.peft_model is None else self.peft_model.unload()
            with torch.random.fork_rng(devices=[]):  # LoRA init draws random numbers; keep them private
                self.peft_model = get_peft_model(base, snapshot.lora_config)
            self.peft_model.eval()
            self.active_signature = signature
            self.active_key = None
        if self.active_key != snapshot.key:
            device = next(self.peft_model.parameters()).device
            set_peft_model_state_dict(self.peft_model, {k: v.to(device) for k, v in snapshot.state.items()})
            self.active_key = snapshot.key


class LocalServiceClient:
    """Tinker's ServiceClient, locally. Build it with make_service_client(PolicyConfig(backend="local"))."""

    def __init__(self, config: PolicyConfig | None = None) -> None:
        self.config = config or PolicyConfig(backend="local")
        self.device = resolve_device(self.config.device)
        self.log_dir = Path(self.config.log_dir)
        self._executor = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="kbrl-local-policy", initializer=self._init_worker_thread
        )
        self._engines: dict[tuple[str, int], _SamplerEngine] = {}
        self._tokenizers: dict[str, Any] = {}
        self._training_ids = itertools.count()
        self._sampling_ids = itertools.count()
        self._closed = False
        self._sampling_stopped = threading.Event()
        self._lock = threading.Lock()
        self._holding = threading.local()  # batched_sampling(): the requests this thread holds back

    # -- plumbing -------------------------------------------------------------------------
    def _init_worker_thread(self) -> None:
        # torch's OpenMP thread count is per calling thread, so this touches only the worker.
        threads = self.config.cpu_threads
        if threads == 0 and self.device.type == "cpu" and self.config.base_model == TINY_MODEL_NAME:
            threads = 1
        if threads > 0:
            torch.set_num_threads(threads)

    def _submit(self, work: Callable[[], T]) -> AwaitableConcurrentFuture[T]:
        if self._closed:
            raise RuntimeError("ServiceClient is closed")
        return AwaitableConcurrentFuture(self._executor.submit(work))

    def _submit_sample(self, client: LocalSamplingClient, prompt_tokens: list[int], num_samples: int,
                       params: types.SamplingParams, include_prompt_logprobs: bool
                       ) -> AwaitableConcurrentFuture[types.SampleResponse]:
        if self._closed:
            raise RuntimeError("ServiceClient is closed")
        job = client._job(prompt_tokens, num_samples, params, include_prompt_logprobs)
        held = getattr(self._holding, "jobs", None)
        if held is not None:  # inside batched_sampling(): decoded with the others when the block ends
            job.future = Future()
            held.append((client, job))
            return AwaitableConcurrentFuture(job.future)

        def work() -> types.SampleResponse:
            client._decode([job])
            return client._response(job)

        return self._submit(work)

    @contextlib.contextmanager
    def _batched_sampling(self) -> Iterator[None]:
        """Sampling requests this thread sends inside the block are decoded together once it ends: a padded
        batch (at most SAMPLE_BATCH_ROWS rows) per sampling client's weights, in the order sent. Their
        futures resolve then. Outside a block, each request decodes alone, as before."""
        if getattr(self._holding, "jobs", None) is not None:
            yield  # nested: the outer block sends them
            return
        self._holding.jobs = []
        try:
            yield
        finally:
            held, self._holding.jobs = self._holding.jobs, None
            if held:
                try:
                    self._executor.submit(self._decode_held, held)
                except RuntimeError as exc:  # closed meanwhile
                    for _client, job in held:
                        job.future.set_exception(exc)

    def _decode_held(self, held: list[tuple[LocalSamplingClient, SampleJob]]) -> None:
        try:
            self._decode_held_batches(held)
        finally:  # whatever happened, nobody waits forever
            for _client, job in held:
                if not job.future.done():
                    job.future.set_exception(RuntimeError("the local policy stopped before this request was decoded"))

    def _decode_held_batches(self, held: list[tuple[LocalSamplingClient, SampleJob]]) -> None:
        by_client: dict[int, tuple[LocalSamplingClient, list[SampleJob]]] = {}
        for client, job in held:
            by_client.setdefault(id(client), (client, []))[1].append(job)
        for client, jobs in by_client.values():
            for batch in batches(jobs, SAMPLE_BATCH_ROWS):
                try:
                    client._decode(batch)
                except SamplingStopped:
                    raise  # every request still held gets the stop (the caller's finally)
                except Exception as exc:  # noqa: BLE001 - e.g. out of memory together: each alone, each its own answer
                    if len(batch) == 1:
                        batch[0].future.set_exception(exc)
                        continue
                    for job in batch:
                        job.reset()
                        decode_alone(job, client)
                    continue
                for job in batch:
                    job.future.set_result(client._response(job))

    def _engine(self, base_model: str, base_seed: int) -> _SamplerEngine:
        # Only the tiny model's weights depend on the seed; a real model is loaded once.
        key = (base_model, base_seed if base_model == TINY_MODEL_NAME else 0)
        if key not in self._engines:
            self._engines[key] = _SamplerEngine(load_base_model(base_model, self.device, key[1], self.config.dtype))
        return self._engines[key]

    def _tokenizer(self, base_model: str) -> Any:
        with self._lock:
            if base_model not in self._tokenizers:
                from kernelbench_rl.policy.tiny import load_tokenizer

                self._tokenizers[base_model] = load_tokenizer(base_model)
            return self._tokenizers[base_model]

    def _new_sampling_client(self, base_model: str, snapshot: AdapterSnapshot | None) -> LocalSamplingClient:
        index = next(self._sampling_ids)
        return LocalSamplingClient(self, base_model, snapshot, seed=self.config.seed * 1_000_003 + index)

    # -- Tinker ServiceClient API -----------------------------------------------------------
    def create_lora_training_client(
        self,
        base_model: str,
        rank: int = 32,
        seed: int | None = None,
        train_mlp: bool = True,
        train_attn: bool = True,
        train_unembed: bool = True,
        user_metadata: dict[str, str] | None = None,
        optimizer: Any | None = None,
    ) -> ClientFuture[LocalTrainingClient]:
        if not any([train_mlp, train_attn, train_unembed]):
            raise ValueError("At least one of train_mlp, train_attn, or train_unembed must be True")

        def build() -> LocalTrainingClient:
            loaded = load_base_model(base_model, self.device, self.config.seed, self.config.dtype)
            from peft import LoraConfig

            lora_config = LoraConfig(
                r=rank,
                lora_alpha=LORA_ALPHA,
                lora_dropout=0.0,
                target_modules=lora_target_modules(loaded.model, train_mlp, train_attn, train_unembed),
                bias="none",
            )
            lora_seed = self.config.seed if seed is None else seed
            return LocalTrainingClient(
                self, base_model, self.config.seed, loaded, lora_config, lora_seed, next(self._training_ids)
            )

        return ClientFuture(self._submit(build))

    def create_training_client_from_state(
        self,
        path: str,
        base_model: str | None = None,
        user_metadata: dict[str, str] | None = None,
        weights_access_token: str | None = None,
        optimizer: Any | None = None,
    ) -> ClientFuture[LocalTrainingClient]:
        return ClientFuture(self._submit(lambda: self._training_client_from_state(path, base_model, False)))

    def create_training_client_from_state_with_optimizer(
        self,
        path: str,
        base_model: str | None = None,
        user_metadata: dict[str, str] | None = None,
        weights_access_token: str | None = None,
    ) -> ClientFuture[LocalTrainingClient]:
        return ClientFuture(self._submit(lambda: self._training_client_from_state(path, base_model, True)))

    def _training_client_from_state(
        self, path: str, base_model: str | None, with_optimizer: bool
    ) -> LocalTrainingClient:
        from peft import LoraConfig

        checkpoint = Path(path)
        meta = _read_meta(checkpoint)
        model_name = base_model or meta["base_model"]
        base_seed = int(meta.get("base_seed", 0))
        loaded = load_base_model(model_name, self.device, base_seed, self.config.dtype)
        lora_config = LoraConfig.from_pretrained(str(checkpoint))
        lora_config.inference_mode = False  # saved adapters are marked for inference; this one trains
        client = LocalTrainingClient(
            self, model_name, base_seed, loaded, lora_config, self.config.seed, next(self._training_ids)
        )
        client._load(checkpoint, with_optimizer)
        return client

    def create_sampling_client(
        self,
        model_path: str | None = None,
        base_model: str | None = None,
        retry_config: Any | None = None,
        record_stability_info: bool = False,
    ) -> ClientFuture[LocalSamplingClient]:
        if model_path is None and base_model is None:
            raise ValueError("Either model_path or base_model must be provided")

        def build() -> LocalSamplingClient:
            if model_path is None:
                assert base_model is not None
                return self._new_sampling_client(base_model, None)
            snapshot = _load_adapter_snapshot(Path(model_path))
            return self._new_sampling_client(base_model or snapshot.base_model, snapshot)

        return ClientFuture(self._submit(build))

    def stop_sampling(self) -> None:
        """Not in Tinker's SDK, the local backend's own: requests being decoded end at their next token and those
        not started never start (their futures raise SamplingStopped); training and saving calls still run. A run
        being stopped calls it so that its state is saved within seconds, not after a batch of long answers."""
        self._sampling_stopped.set()

    def close(self, status: SessionStatus = "success", detail: str | None = None) -> APIFuture[None]:
        if not self._closed:
            self._closed = True
            self._executor.shutdown(wait=True)
        return completed_future(None)

    def __enter__(self) -> LocalServiceClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close("success" if exc_info[0] is None else "errored")


class LocalTrainingClient:
    """Tinker's TrainingClient, locally: a LoRA adapter on its own copy of the base model."""

    def __init__(
        self,
        service: LocalServiceClient,
        base_model: str,
        base_seed: int,
        loaded: LoadedModel,
        lora_config: Any,
        lora_seed: int,
        index: int,
    ) -> None:
        from peft import get_peft_model

        self._service = service
        self._base_model = base_model
        self._base_seed = base_seed
        self._loaded = loaded
        self._lora_config = lora_config
        self.model_id = f"local-{index}"
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(lora_seed)
            self._model = get_peft_model(loaded.model, lora_config)
        # eval(): no dropout, so training forward passes match sampling exactly.
        self._model.eval()
        self._trainable = [p for p in self._model.parameters() if p.requires_grad]
        self._optimizer = torch.optim.AdamW(self._trainable, lr=1e-4, betas=(0.9, 0.95), eps=1e-12, weight_decay=0.0)
        self._step = 0

    # -- info ----------------------------------------------------------------------------
    def get_tokenizer(self) -> Any:
        return self._service._tokenizer(self._base_model)

    def get_info(self) -> types.GetInfoResponse:
        return types.GetInfoResponse(
            model_data=types.ModelData(arch=self._loaded.arch, model_name=self._base_model, tokenizer_id=None),
            model_id=self.model_id,
            is_lora=True,
            lora_rank=self._lora_config.r,
            model_name=self._base_model,
        )

    @property
    def step(self) -> int:
        """Optimizer steps taken so far (restored by load_state_with_optimizer)."""
        return self._step

    # -- training ------------------------------------------------------------------------
    def forward(
        self,
        data: list[types.Datum],
        loss_fn: types.LossFnType,
        loss_fn_config: Mapping[str, float | str] | None = None,
    ) -> APIFuture[types.ForwardBackwardOutput]:
        self._check_request(data, loss_fn)
        return self._service._submit(lambda: self._run_loss(data, loss_fn, loss_fn_config, backward=False))

    def forward_backward(
        self,
        data: list[types.Datum],
        loss_fn: types.LossFnType,
        loss_fn_config: Mapping[str, float | str] | None = None,
    ) -> APIFuture[types.ForwardBackwardOutput]:
        self._check_request(data, loss_fn)
        return self._service._submit(lambda: self._run_loss(data, loss_fn, loss_fn_config, backward=True))

    @staticmethod
    def _check_request(data: list[types.Datum], loss_fn: str) -> None:
        if not data:
            raise ValueError("No data provided")
        if loss_fn not in SUPPORTED_LOSSES:
            raise UserError(
                f"Loss {loss_fn!r} is not available on the local backend; use one of {', '.join(SUPPORTED_LOSSES)}."
            )

    def _run_loss(
        self,
        data: list[types.Datum],
        loss_fn: str,
        loss_fn_config: Mapping[str, float | str] | None,
        backward: bool,
    ) -> types.ForwardBackwardOutput:
        device = self._service.device
        config = dict(loss_fn_config or {})
        # The local backend's own key: score the tokens under the tempered distribution the sampler drew them from
        # (logits / temperature), so that the policy trained is the policy sampled and the importance ratio is 1
        # on-policy. Tinker's service has no such key; its losses score the model's own distribution.
        temperature = float(config.pop(TEMPERATURE_KEY, 1.0))
        if temperature <= 0:
            raise ValueError(f"loss_fn_config[{TEMPERATURE_KEY!r}] must be above 0, got {temperature}.")
        outputs: list[dict[str, types.TensorData]] = []
        total = 0.0
        context = contextlib.nullcontext() if backward else torch.no_grad()
        with context:
            # One datum at a time: memory stays bounded by one sequence's logits on big vocabularies.
            for datum in data:
                tokens = datum.model_input.to_ints()
                inputs = datum.loss_fn_inputs
                targets = inputs["target_tokens"].to_torch().to(device=device, dtype=torch.long).reshape(-1)
                if targets.numel() != len(tokens):
                    raise ValueError(
                        f"target_tokens has {targets.numel()} entries but model_input has {len(tokens)} tokens."
                    )
                input_ids = torch.tensor([tokens], dtype=torch.long, device=device)
                logits = self._model(input_ids=input_ids).logits[0].float()
                if temperature != 1.0:
                    logits = logits / temperature
                logp = -F.cross_entropy(logits, targets, reduction="none")
                loss = _token_loss_sum(loss_fn, logp, inputs, config, device)
                if backward:
                    loss.backward()
                total += float(loss.detach())
                outputs.append({"logprobs": types.TensorData.from_torch(logp.detach().cpu())})
        return types.ForwardBackwardOutput(
            loss_fn_output_type="ArrayRecord", loss_fn_outputs=outputs, metrics={"loss:sum": total}
        )

    def optim_step(
        self,
        optim_params: types.AdamParams | None = None,
        *,
        adam_params: types.AdamParams | None = None,
    ) -> APIFuture[types.OptimStepResponse]:
        if optim_params is not None and adam_params is not None:
            raise ValueError("Specify optim_params or legacy adam_params, not both")
        params = optim_params if optim_params is not None else adam_params
        if not isinstance(params, types.AdamParams):
            raise TypeError("Expected AdamParams")
        return self._service._submit(lambda: self._optim_step_now(params))

    def _optim_step_now(self, params: types.AdamParams) -> types.OptimStepResponse:
        grads = [p.grad for p in self._trainable if p.grad is not None]
        grad_norm = float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))) if grads else 0.0
        if params.grad_clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(self._trainable, params.grad_clip_norm)
        for group in self._optimizer.param_groups:
            group["lr"] = params.learning_rate
            group["betas"] = (params.beta1, params.beta2)
            group["eps"] = params.eps
            group["weight_decay"] = params.weight_decay
        self._optimizer.step()
        self._optimizer.zero_grad(set_to_none=True)
        self._step += 1
        return types.OptimStepResponse(metrics={"grad_norm": grad_norm, "step": float(self._step)})

    # -- weights -------------------------------------------------------------------------
    def _snapshot(self) -> AdapterSnapshot:
        from peft.utils import get_peft_model_state_dict

        state = {k: v.detach().cpu().clone() for k, v in get_peft_model_state_dict(self._model, save_embedding_layers=False).items()}
        return AdapterSnapshot(self._base_model, self._base_seed, self._lora_config, state, next(_snapshot_keys))

    def _checkpoint_dir(self, kind: str, name: str, overwrite: bool) -> Path:
        if not name or "/" in name or name in (".", ".."):
            raise UserError(f"Checkpoint name {name!r} must be a plain, non-empty file name.")
        path = self._service.log_dir / kind / name
        if path.exists() and not overwrite:
            raise UserError(f"Checkpoint {path} already exists; pass overwrite=True or choose another name.")
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _write_adapter(self, path: Path, kind: str, user_metadata: dict[str, str] | None) -> None:
        # The frozen base lm_head is not part of the adapter (peft would copy it when lm_head is a target).
        self._model.save_pretrained(str(path), save_embedding_layers=False)
        meta = {
            "kind": kind,
            "base_model": self._base_model,
            "base_seed": self._base_seed,
            "step": self._step,
            "lora_rank": self._lora_config.r,
            "user_metadata": user_metadata or {},
        }
        (path / CHECKPOINT_META).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")

    def save_state(
        self,
        name: str,
        ttl_seconds: int | None = None,
        overwrite: bool = False,
        user_metadata: dict[str, str] | None = None,
    ) -> APIFuture[types.SaveWeightsResponse]:
        def work() -> types.SaveWeightsResponse:
            path = self._checkpoint_dir("weights", name, overwrite)
            torch.save(self._optimizer.state_dict(), path / OPTIMIZER_FILE)
            self._write_adapter(path, "state", user_metadata)
            return types.SaveWeightsResponse(path=str(path.resolve()))

        return self._service._submit(work)

    def save_weights_for_sampler(
        self,
        name: str,
        ttl_seconds: int | None = None,
        user_metadata: dict[str, str] | None = None,
    ) -> APIFuture[types.SaveWeightsForSamplerResponse]:
        def work() -> types.SaveWeightsForSamplerResponse:
            # Sampler weights are write-once in Tinker too; re-saving a name replaces it here.
            path = self._checkpoint_dir("sampler_weights", name, overwrite=True)
            self._write_adapter(path, "sampler", user_metadata)
            return types.SaveWeightsForSamplerResponse(path=str(path.resolve()))

        return self._service._submit(work)

    def save_weights_and_get_sampling_client(
        self,
        name: str | None = None,
        retry_config: Any | None = None,
        record_stability_info: bool = False,
        kind: str = "snapshot",
    ) -> ClientFuture[LocalSamplingClient]:
        if name is not None:
            warnings.warn(
                "The 'name' parameter of save_weights_and_get_sampling_client() is deprecated and has "
                "no effect (as in the Tinker SDK); use save_weights_for_sampler(name) for a checkpoint.",
                DeprecationWarning,
                stacklevel=2,
            )
        return ClientFuture(
            self._service._submit(lambda: self._service._new_sampling_client(self._base_model, self._snapshot()))
        )

    def create_sampling_client(
        self, model_path: str, retry_config: Any | None = None, record_stability_info: bool = False
    ) -> ClientFuture[LocalSamplingClient]:
        return self._service.create_sampling_client(model_path=model_path)

    def _load(self, path: Path, with_optimizer: bool) -> None:
        from peft.utils import load_peft_weights, set_peft_model_state_dict

        meta = _read_meta(path)
        device = self._service.device
        set_peft_model_state_dict(self._model, load_peft_weights(str(path), device=str(device)))
        if with_optimizer:
            optimizer_file = path / OPTIMIZER_FILE
            if not optimizer_file.is_file():
                raise UserError(f"{path} holds no optimizer state; save it with save_state, not save_weights_for_sampler.")
            self._optimizer.load_state_dict(torch.load(optimizer_file, map_location=device, weights_only=True))
            self._step = int(meta.get("step", 0))
        for parameter in self._trainable:
            parameter.grad = None

    def load_state(self, path: str, weights_access_token: str | None = None) -> APIFuture[types.LoadWeightsResponse]:
        """Weights only. Deprecated in Tinker 0.38: use the service's create_training_client_from_state."""
        warnings.warn(
            "TrainingClient.load_state is deprecated in Tinker 0.38; use "
            "ServiceClient.create_training_client_from_state_with_optimizer(path).result().",
            FutureWarning,
            stacklevel=2,
        )
        return self._service._submit(lambda: self._load_response(path, False))

    def load_state_with_optimizer(
        self, path: str, weights_access_token: str | None = None
    ) -> APIFuture[types.LoadWeightsResponse]:
        """Weights, optimizer state and step. Deprecated in Tinker 0.38 in favour of the service call."""
        warnings.warn(
            "TrainingClient.load_state_with_optimizer is deprecated in Tinker 0.38; use "
            "ServiceClient.create_training_client_from_state_with_optimizer(path).result().",
            FutureWarning,
            stacklevel=2,
        )
        return self._service._submit(lambda: self._load_response(path, True))

    def _load_response(self, path: str, with_optimizer: bool) -> types.LoadWeightsResponse:
        self._load(Path(path), with_optimizer)
        return types.LoadWeightsResponse(path=path, model_id=self.model_id)


def _token_loss_sum(
    loss_fn: str,
    logp: torch.Tensor,
    inputs: Mapping[str, types.TensorData],
    config: Mapping[str, float | str],
    device: torch.device,
) -> torch.Tensor:
    def tensor(key: str, default: float | None = None) -> torch.Tensor:
        if key not in inputs:
            if default is None:
                raise ValueError(f"loss_fn_inputs lacks {key!r}, which {loss_fn} needs.")
            return torch.full_like(logp, default)
        value = inputs[key].to_torch().to(device=device, dtype=torch.float32).reshape(-1)
        if value.numel() != logp.numel():
            raise ValueError(f"loss_fn_inputs[{key!r}] has {value.numel()} entries, expected {logp.numel()}.")
        return value

    if loss_fn == "cross_entropy":
        return -(tensor("weights", 1.0) * logp).sum()
    sampler_logp = tensor("logprobs")
    advantages = tensor("advantages")
    ratio = torch.exp(logp - sampler_logp)
    if loss_fn == "importance_sampling":
        return -(ratio * advantages).sum()
    if loss_fn == "cispo":
        # The clipped ratio is a coefficient (no gradient through it) on the token's logprob: every token keeps a
        # gradient, and none is weighted by more than the cap however unlikely the sampler made it.
        weight = torch.clamp(ratio, float(config.get("clip_low_threshold", CISPO_CLIP_LOW)),
                             float(config.get("clip_high_threshold", CISPO_CLIP_HIGH))).detach()
        return -(weight * logp * advantages).sum()
    low = float(config.get("clip_low_threshold", PPO_CLIP_LOW))
    high = float(config.get("clip_high_threshold", PPO_CLIP_HIGH))
    clipped = torch.clamp(ratio, low, high)
    return -torch.min(ratio * advantages, clipped * advantages).sum()
