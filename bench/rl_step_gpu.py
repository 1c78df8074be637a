"""One whole RL step on one GPU: the local policy (transformers + peft LoRA) and the evaluator share it.

    python bench/rl_step_gpu.py --model /tmp/qwen1.5b-random --make-model qwen2.5-coder-1.5b --out rl_step.json
    python bench/rl_step_gpu.py --device cpu            # dry run: local:tiny, evaluation on the CPU

The real training entry point (`TrainingRun`, what `kernelbench-rl train` drives) runs one step: 8 problems x 8
samples, each evaluated by the sandboxed evaluator on the same GPU, rewards, a LoRA update, the checkpoint and the
DuckDB rows. A random-weight model writes no kernels, so every group's rewards are equal and would train nothing:
--train-equal-groups (default) gives those groups advantages of +1/-1 so the optimiser step runs; and --eval-load
bundled solutions go through the run's own evaluator meanwhile, so it admits real-size work beside the policy.
Reports the step's time split, the GPU memory peaks, the evaluator's reservation for the policy, the DuckDB rows and
any verdict that blames device memory on the candidate (exit 1 if one does); docs/training.md says more.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import resource
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402 - after the path set-up above

import torch  # noqa: E402

from kernelbench_rl.config import load_config  # noqa: E402
from kernelbench_rl.errors import UserError  # noqa: E402


class Timers:
    """Seconds and calls per label, summed over threads; nested calls of one label count once."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = collections.defaultdict(float)
        self.calls: dict[str, int] = collections.defaultdict(int)
        self._lock = threading.Lock()
        self._depth = threading.local()

    def wrap(self, label: str, function: Any) -> Any:
        def timed(*args: Any, **kwargs: Any) -> Any:
            depth = getattr(self._depth, label, 0)
            setattr(self._depth, label, depth + 1)
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                setattr(self._depth, label, depth)
                if depth == 0:
                    with self._lock:
                        self.seconds[label] += time.perf_counter() - started
                        self.calls[label] += 1

        return timed


class DeviceMemoryWatch(threading.Thread):
    """Polls the device's free memory (every 50 ms) and nvidia-smi's per-process use (every second)."""

    def __init__(self) -> None:
        super().__init__(daemon=True, name="rl-step-memory-watch")
        self.stop_event = threading.Event()
        self.total = 0
        self.min_free: int | None = None
        self.start_free = 0
        self.per_process_mib: dict[str, int] = {}
        self.max_processes_mib = 0

    def run(self) -> None:
        self.start_free, self.total = torch.cuda.mem_get_info()
        last_smi = 0.0
        while not self.stop_event.is_set():
            free = torch.cuda.mem_get_info()[0]
            self.min_free = free if self.min_free is None else min(self.min_free, free)
            if time.monotonic() - last_smi >= 1.0:
                last_smi = time.monotonic()
                self._nvidia_smi()
            self.stop_event.wait(0.05)

    def _nvidia_smi(self) -> None:
        out = harness.command_output(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                                     timeout_s=5)
        total = 0
        for line in out.strip().splitlines():
            parts = [p.strip() for p in line.split(",")]
            if len(parts) == 2 and parts[1].isdigit():
                self.per_process_mib[parts[0]] = max(self.per_process_mib.get(parts[0], 0), int(parts[1]))
                total += int(parts[1])
        self.max_processes_mib = max(self.max_processes_mib, total)

    def report(self) -> dict[str, Any]:
        gib = 2**30
        used_peak = self.total - (self.min_free if self.min_free is not None else self.start_free)
        return {"device_total_gib": round(self.total / gib, 2),
                "device_used_at_start_gib": round((self.total - self.start_free) / gib, 2),
                "device_used_peak_gib": round(used_peak / gib, 2),
                "nvidia_smi_peak_sum_mib": self.max_processes_mib,
                "nvidia_smi_peak_by_pid_mib": dict(sorted(self.per_process_mib.items(), key=lambda kv: -kv[1])[:12])}


def equal_groups_get_advantages(score_group: Any, treated: list[str]) -> Any:
    """score_group, except a group whose rewards are all equal trains with advantages +1/-1 (mean zero)."""

    def scored(group: Any, *args: Any, **kwargs: Any) -> Any:
        samples = score_group(group, *args, **kwargs)
        if samples and all(s.dropped_constant for s in samples):
            treated.append(group.problem.id)
            for index, sample in enumerate(samples):
                sample.dropped_constant = False
                sample.advantage = 1.0 if index % 2 == 0 else -1.0
                sample.trainable = bool(sample.completion_tokens)
        return samples

    return scored


def category_of(result: Any) -> str:
    return str(getattr(result.error_category, "value", result.error_category))


def mentions_memory(result: Any) -> bool:
    """A verdict that ran out of device memory, or was run again alone after doing so."""
    from kernelbench_rl.evaluation.verdict.faults import ran_out_of_device_memory

    return (ran_out_of_device_memory(result) or "out of memory" in (result.error_message or "").lower()
            or "oom_retry" in result.versions or "oom_alone" in result.versions)


def memory_verdicts(verdicts: list[Any]) -> dict[str, Any]:
    """Verdicts by category, those that mention device memory, and how many of those blame the candidate."""
    out_of_memory = [r for r in verdicts if mentions_memory(r)]
    return {"by_category": dict(collections.Counter(category_of(r) for r in verdicts)),
            "mention_device_memory": len(out_of_memory),
            "blamed_on_candidate_for_memory": sum(r.error_category.is_kernel_fault for r in out_of_memory),
            "examples": [f"{r.problem_id}: {r.error_message[:200]}" for r in out_of_memory[:3]]}


def solutions_for(problems: Any, count: int) -> list[tuple[str, str]]:
    """(problem id, response) for up to `count` bundled solutions of the run's problems, as a model would answer."""
    from kernelbench_rl.problems.loaders import load_solution

    found = []
    for problem in problems:
        source = load_solution(problem)
        if source:
            found.append((problem.id, f"```python\n{source}\n```"))
        if len(found) == count:
            break
    return found


class SideLoad(threading.Thread):
    """Known-correct kernels evaluated through the run's own evaluator while the step samples and trains.

    A random model writes no kernel, so the step alone would never start an evaluation worker on the GPU;
    these make the evaluator admit real work (KernelBench sizes) beside the growing policy."""

    def __init__(self, evaluator: Any, evaluate: Any, items: list[tuple[str, str]], verdicts: list[Any]) -> None:
        super().__init__(daemon=True, name="rl-step-side-load")
        self.evaluator, self.evaluate, self.items, self.verdicts = evaluator, evaluate, items, verdicts
        self.seconds = 0.0

    def run(self) -> None:
        started = time.perf_counter()
        try:
            self.verdicts.extend(self.evaluate(self.evaluator, [i for i, _ in self.items], [r for _, r in self.items]))
        finally:
            self.seconds = time.perf_counter() - started


def run_config(args: argparse.Namespace, workdir: Path) -> list[str]:
    overrides = [
        f"db_path={workdir / 'rl_step.duckdb'}", f"log_dir={workdir / 'logs'}", "run_id=rl-step",
        "policy.backend=local", f"policy.base_model={args.model}", f"policy.device={args.device}",
        f"policy.lora_rank={args.rank}", f"policy.renderer={args.renderer}",
        "training.steps=1", f"training.batch_problems={args.problems}", "training.max_steps_off_policy=0",
        f"sampling.group_size={args.group}", f"sampling.max_tokens={args.max_tokens}",
        "sft.enabled=false", f"eval.device={args.device}", f"problems.levels=[{args.level}]",
        "problems.audit=false", "curriculum.enabled=false",
    ]
    if args.problems_root:
        overrides.append(f"problems.root={args.problems_root}")
    if args.reserved_memory_gb is not None:
        overrides.append(f"eval.reserved_memory_gb={args.reserved_memory_gb}")
    return overrides


def rl_step(args: argparse.Namespace) -> dict[str, Any]:
    from kernelbench_rl.evaluation.front import api
    from kernelbench_rl.policy import local
    from kernelbench_rl.store import db
    from kernelbench_rl import compose
    from kernelbench_rl.training import loop

    report: dict[str, Any] = {"date": time.strftime("%Y-%m-%d"), "device": args.device,
                              "hardware": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
                              "torch": torch.__version__}
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="rl-step-"))
    if args.make_model and not (Path(args.model) / "config.json").is_file():
        from kernelbench_rl.policy.random_model import make_random_model

        report["model_build"] = make_random_model(args.make_model, args.model, device=args.device)
    config = load_config("default", run_config(args, workdir))
    reserved, uuid = compose.policy_memory_reservation(config)
    report["config"] = {"model": args.model, "problems": args.problems, "group": args.group,
                        "max_tokens": args.max_tokens, "lora_rank": args.rank, "renderer": args.renderer,
                        "eval_reserved_for_policy_gib": round(reserved / 2**30, 2), "reserved_device_uuid": uuid,
                        "workdir": str(workdir)}

    timers = Timers()
    verdicts: list[Any] = []
    treated: list[str] = []
    original_evaluate = api.Evaluator.evaluate_responses

    def evaluate_and_keep(self: Any, problem_ids: Any, responses: Any) -> Any:
        results = original_evaluate(self, problem_ids, responses)
        verdicts.extend(results)
        return results

    store_methods = ("upsert", "write_batch", "insert_ignore", "put_texts", "put_kernel", "record_evaluations")
    targets: list[tuple[Any, str, Any]] = [
        # Loading a copy of the base model (the trainer's at the start, the sampler's at the first sample).
        (local, "load_base_model", timers.wrap("model_load", local.load_base_model)),
        (local.LocalSamplingClient, "_decode", timers.wrap("policy_sampling", local.LocalSamplingClient._decode)),
        (local.LocalTrainingClient, "_run_loss", timers.wrap("forward_backward", local.LocalTrainingClient._run_loss)),
        (local.LocalTrainingClient, "_optim_step_now",
         timers.wrap("optim_step", local.LocalTrainingClient._optim_step_now)),
        (local.LocalTrainingClient, "_write_adapter", timers.wrap("checkpoint_write", local.LocalTrainingClient._write_adapter)),
        (api.Evaluator, "evaluate_responses", timers.wrap("evaluate_calls", evaluate_and_keep)),
        *[(db.Store, name, timers.wrap("store_writes", getattr(db.Store, name))) for name in store_methods],
    ]
    if args.train_equal_groups:
        targets.append((loop, "score_group", equal_groups_get_advantages(loop.score_group, treated)))

    watch = None
    if args.device == "cuda":
        torch.cuda.init()
        torch.cuda.reset_peak_memory_stats()
        watch = DeviceMemoryWatch()
        watch.start()
    side_verdicts: list[Any] = []
    with contextlib.ExitStack() as patches:  # each attribute (owner, name, new value) replaced for the block
        for owner, name, value in targets:
            patches.enter_context(mock.patch.object(owner, name, value))
        run = loop.TrainingRun(compose.build_run_parts(config, policy_beside=True))
        side = None
        try:
            started = time.perf_counter()
            run.start()
            report["start_s"] = round(time.perf_counter() - started, 2)  # the sampler's copy loads at the first sample
            if args.device == "cuda":
                report["trainer_reserved_after_start_gib"] = round(torch.cuda.memory_reserved() / 2**30, 2)
            if args.eval_load > 0 and run._evaluator is not None:
                side = SideLoad(run._evaluator, original_evaluate, solutions_for(run.problems, args.eval_load), side_verdicts)
                side.start()
            started = time.perf_counter()
            result = run.step()
            report["step_wall_s"] = round(time.perf_counter() - started, 2)
            if side is not None:
                side.join(args.eval_load_wait_s)
        finally:
            run.close()
    if watch is not None:
        watch.stop_event.set()
        watch.join(5)

    metrics = result.metrics
    report["time_s"] = {
        "rollout_wall": round(metrics.get("time/rollout_wall_s", 0.0), 2),
        "sampling (loop, per-group sum)": round(metrics.get("time/sampling_s", 0.0), 2),
        "evaluation (loop, summed over threads)": round(metrics.get("time/eval_s", 0.0), 2),
        "train (loop: forward_backward + optim_step + new sampler)": round(metrics.get("time/train_s", 0.0), 2),
        **{f"{label} (calls: {timers.calls[label]})": round(seconds, 2) for label, seconds in sorted(timers.seconds.items())},
    }
    report["step"] = {"loss": result.loss, "num_samples": metrics.get("num_samples"),
                      "num_trained": metrics.get("num_trained"), "format_rate": metrics.get("format_rate"),
                      "truncated_rate": metrics.get("truncated_rate"),
                      "completion_tokens_mean": metrics.get("completion_tokens_mean"),
                      "groups_given_advantages": len(treated), "checkpoint": result.checkpoint is not None}
    store = db.Store(config.db_path)
    report["duckdb_rows"] = {table: store.fetchall(f"SELECT count(*) FROM {table} WHERE run_id = ?", ["rl-step"])[0][0]
                             for table in ("rollouts", "rewards", "train_steps", "checkpoints")}
    report["duckdb_rows"]["evaluations"] = store.count("evaluations")
    report["verdicts"] = {"count": len(verdicts), **memory_verdicts(verdicts)}
    if side is not None:
        report["side_load"] = {
            "solutions": len(side.items), "finished": not side.is_alive(), "seconds": round(side.seconds, 2),
            "correct": sum(bool(r.correct) for r in side_verdicts), **memory_verdicts(side_verdicts),
            # As the worker saw them when it started: its budget, and the room it kept for the policy.
            "worker": {key: value for r in side_verdicts[:1] for key, value in r.versions.items()
                       if key in ("child_memory_budget_gb", "reserved_for_others_gb", "transport")}}
    if args.device == "cuda":
        assert watch is not None
        report["memory"] = {"trainer_max_allocated_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
                            "trainer_max_reserved_gib": round(torch.cuda.max_memory_reserved() / 2**30, 2),
                            **watch.report()}
        report["memory"]["trainer_reserved_after_step_gib"] = round(torch.cuda.memory_reserved() / 2**30, 2)
        report["memory"]["reservation_covers_trainer_peak"] = reserved >= torch.cuda.max_memory_reserved()
    else:
        report["memory"] = {"max_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)}
    return report


def run(args: argparse.Namespace) -> int:
    harness.require_cuda(args.device)
    if args.model is None:
        args.model = "/tmp/qwen1.5b-random" if args.device == "cuda" else "local:tiny"
    try:
        report = rl_step(args)
    except UserError as exc:
        raise harness.BadInput(str(exc)) from None
    harness.show(report, args.out, indent=2)
    blamed = report["verdicts"]["blamed_on_candidate_for_memory"]
    return 0 if blamed == 0 and report["duckdb_rows"]["rollouts"] > 0 else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--model", default=None, help="a model folder (cuda default: /tmp/qwen1.5b-random); cpu: local:tiny")
    parser.add_argument("--make-model", default=None, help="build this architecture into --model first if it is not there")
    for flag, default in (("--problems", 8), ("--group", 8), ("--max-tokens", 512), ("--rank", 16), ("--level", 1)):
        parser.add_argument(flag, type=int, default=default, help=f"(default {default})")
    parser.add_argument("--renderer", default="auto", help="policy.renderer: auto | chat_template | a cookbook renderer")
    parser.add_argument("--problems-root", default=None, help="a KernelBench checkout (default: the bundled set)")
    parser.add_argument("--reserved-memory-gb", type=float, default=None, help="eval.reserved_memory_gb (default: estimated)")
    parser.add_argument("--eval-load", type=int, default=8,
                        help="bundled solutions evaluated through the run's evaluator while the step runs (0: none)")
    parser.add_argument("--eval-load-wait-s", type=float, default=300.0, help="how long the step's end waits for them")
    parser.add_argument("--no-train-equal-groups", dest="train_equal_groups", action="store_false")
    parser.add_argument("--workdir", default=None, help="database, logs and checkpoints (default: a new temporary folder)")
    parser.add_argument("--out", default=None)
    return harness.run_main(run, parser.parse_args(argv))

if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
