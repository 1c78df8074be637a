"""Wall time of N training steps (set-up excluded, after a warm-up run), synchronous (training.max_steps_off_policy=0) against asynchronous (1).

Asynchronous training rolls out step k+1 (sampling, then evaluation) while step k trains, so a step
costs about max(rollout, train) instead of rollout + train. This bench measures that on the CPU with
two policy backends:

- `standin`: the Tinker stand-in (tests/tinker_standin.py) behind a remote-service-like delay: each
  sampling request answers after --sample-s (requests in flight at once run in parallel, as on the
  service) and each forward_backward takes --train-s;
- `local`: the local backend's tiny model, really sampled and trained (one policy thread, so only the
  evaluation overlaps training there).

In both, evaluation is a judge that sleeps --eval-s per evaluated group and marks sample 0 of each
group well formed: rewards depend only on (step, problem, sample), so both modes must store the same
rewards, which the bench asserts along with the rows per step, the checkpoints and the staleness bound.

    python bench/async_steps.py                      # both backends, 6 steps each, JSON to bench/results/
    python bench/async_steps.py --backend standin --steps 8 --train-s 1.0
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import threading
import time
from concurrent.futures import Future
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from kernelbench_rl.config import load_config  # noqa: E402
from kernelbench_rl.evaluation.result import ErrorCategory, EvalResult  # noqa: E402
from kernelbench_rl.store import Store  # noqa: E402
from kernelbench_rl.training import TrainingRun  # noqa: E402

BATCH_PROBLEMS, GROUP = 2, 4
PROBLEM_IDS = "L1/19,L1/20"
CHECKPOINT_EVERY = 3


def delayed_standin(sample_s: float, train_s: float) -> Any:
    """The stand-in service with a remote service's latencies."""
    import tinker_standin as standin

    # The stand-in builds its clients by these module names: slow subclasses stand in for them (built
    # on the originals each time, so that repeated runs do not stack delays).
    originals = standin.__dict__.setdefault("_bench_originals", (standin.StandinSamplingClient,
                                                                 standin.StandinTrainingClient))

    class SlowSampler(originals[0]):
        def sample(self, *args: Any, **kwargs: Any) -> Future:
            response = super().sample(*args, **kwargs).result()
            future: Future = Future()
            threading.Timer(sample_s, future.set_result, [response]).start()
            return future

    class SlowTrainer(originals[1]):
        def forward_backward(self, *args: Any, **kwargs: Any) -> Any:
            time.sleep(train_s)
            return super().forward_backward(*args, **kwargs)

    standin.StandinSamplingClient = SlowSampler
    standin.StandinTrainingClient = SlowTrainer
    os.environ.setdefault("TINKER_API_KEY", "tml-bench")
    from kernelbench_rl.policy import PolicyConfig, make_service_client

    return make_service_client(PolicyConfig(backend="tinker", base_model="Qwen/Qwen3-8B"),
                               client_factory=standin.StandinServiceClient)


class SlowJudge:
    """An evaluator that takes `eval_s` per group and rewards sample 0 of each group (thread-safe)."""

    def __init__(self, eval_s: float) -> None:
        self.eval_s = eval_s

    def __call__(self, problem_ids: list[str], responses: list[str]) -> list[EvalResult]:
        time.sleep(self.eval_s)
        return [EvalResult(problem_id=pid, candidate_sha256="x", backend="triton", precision="fp32", device_kind="cpu",
                           format_ok=i % GROUP == 0,
                           error_category=ErrorCategory.COMPILE if i % GROUP == 0 else ErrorCategory.FORMAT)
                for i, pid in enumerate(problem_ids)]


def config(workdir: Path, backend: str, steps: int, lag: int) -> Any:
    policy = (["policy.backend=tinker", "policy.base_model=Qwen/Qwen3-8B"] if backend == "standin"
              else ["policy.backend=local", "policy.base_model=local:tiny"])
    return load_config("default", [
        f"db_path={workdir / 'kb.duckdb'}", f"log_dir={workdir / 'logs'}", *policy, "policy.lora_rank=4",
        f"training.steps={steps}", f"training.batch_problems={BATCH_PROBLEMS}", f"sampling.group_size={GROUP}",
        "sampling.max_tokens=16", f"training.checkpoint_every={CHECKPOINT_EVERY}", f"problems.ids={PROBLEM_IDS}",
        "problems.levels=[1]", "problems.holdout_fraction=0", "run_id=bench", "rewards.truncated=keep",
        "curriculum.enabled=false", "sft.enabled=false", "problems.audit=false", "eval.device=cpu",
        f"training.max_steps_off_policy={lag}"])


def run_once(backend: str, steps: int, lag: int, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="kbrl-async-bench-") as tmp:
        workdir = Path(tmp)
        cfg = config(workdir, backend, steps, lag)
        service = delayed_standin(args.sample_s, args.train_s) if backend == "standin" else None
        run = TrainingRun(cfg, evaluate_fn=SlowJudge(args.eval_s), service_client=service)
        with run:  # set-up (problems, policy, store) is outside the timed part: it is the same in both modes
            start = time.perf_counter()
            while not run.finished:
                run.step()
            wall_s = time.perf_counter() - start
        store = Store(workdir / "kb.duckdb")
        rows = store.query("SELECT step, staleness, reward_mean, sampling_s, eval_s, train_s, metrics_json "
                           "FROM train_steps ORDER BY step").to_dicts()
        rewards = store.fetchall("SELECT step, problem_id, sample_index, reward FROM rewards "
                                 "ORDER BY step, problem_id, sample_index")
        per_step = store.fetchall("SELECT step, count(*) FROM rollouts GROUP BY step ORDER BY step")
        checkpoints = [r[0] for r in store.fetchall("SELECT step FROM checkpoints ORDER BY step")]
        means = dict(store.fetchall("SELECT step, avg(reward) FROM rewards GROUP BY step"))
    # Consistency: every step once, its rows complete, its checkpoint where configured, the bound kept.
    assert [r["step"] for r in rows] == list(range(steps))
    assert per_step == [(step, BATCH_PROBLEMS * GROUP) for step in range(steps)]
    assert checkpoints == [s for s in range(steps) if (s + 1) % CHECKPOINT_EVERY == 0 or s == steps - 1]
    assert all(r["staleness"] <= lag for r in rows)
    assert all(abs(r["reward_mean"] - means[r["step"]]) < 1e-9 for r in rows)
    return {
        "backend": backend, "max_steps_off_policy": lag, "wall_s": round(wall_s, 3),
        "staleness": [r["staleness"] for r in rows],
        "step_rollout_wall_s": [round(json.loads(r["metrics_json"])["time/rollout_wall_s"], 3) for r in rows],
        "step_train_s": [round(r["train_s"], 3) for r in rows],
        "step_wait_s": [round(json.loads(r["metrics_json"])["time/rollout_wait_s"], 3) for r in rows],
        "rewards": rewards,
    }


def machine() -> dict[str, Any]:
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import torch

    return {"host": platform.node(), "cpu": cpu, "cpus": os.cpu_count(), "python": platform.python_version(),
            "torch": torch.__version__, "device": "cpu"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--backend", choices=["standin", "local", "both"], default="both")
    parser.add_argument("--sample-s", type=float, default=0.5, help="stand-in: seconds per sampling request")
    parser.add_argument("--eval-s", type=float, default=0.5, help="seconds per evaluated group")
    parser.add_argument("--train-s", type=float, default=0.5, help="stand-in: seconds per forward_backward")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "async_steps_cpu.json")
    args = parser.parse_args()
    backends = ["standin", "local"] if args.backend == "both" else [args.backend]
    results = []
    for backend in backends:
        run_once(backend, 2, 1, args)  # warm-up: first imports and model loads count in neither mode
        sync = run_once(backend, args.steps, 0, args)
        asynchronous = run_once(backend, args.steps, 1, args)
        assert sync["rewards"] == asynchronous["rewards"], "the two modes stored different rewards"
        ratio = sync["wall_s"] / asynchronous["wall_s"]
        print(f"{backend}: {args.steps} steps synchronous {sync['wall_s']:.2f} s, asynchronous "
              f"{asynchronous['wall_s']:.2f} s: {ratio:.2f}x (staleness {asynchronous['staleness']})")
        for run in (sync, asynchronous):
            run["rewards_rows"] = len(run.pop("rewards"))
        results.append({"backend": backend, "speedup": round(ratio, 3), "synchronous": sync,
                        "asynchronous": asynchronous})
    payload = {
        "bench": "async_steps", "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(), "steps": args.steps, "batch_problems": BATCH_PROBLEMS, "group_size": GROUP,
        "sample_s": args.sample_s, "eval_s": args.eval_s, "train_s": args.train_s, "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
