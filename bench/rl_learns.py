"""Does RL learn? A deliberately partial SFT warm start, then RL on the training problems, a few seeds.

    python bench/rl_learns.py --out bench/results/rl_learns_cpu.json --png bench/results/rl_learns_cpu.png

One SFT warm start of `--sft-steps` steps on our verified solutions (short on purpose, so the policy starts RL
well short of right; SFT is deterministic, so it is run once and copied), then, for each seed, `--rl-steps` GRPO
steps of the tiny local policy on the smoke's four elementwise training problems from that warm start (the seed
draws the samples and the problems' order), 8 samples of each a step, every sample judged by Triton's CPU
interpreter. The seeds run side by side (`--parallel`).
It reports, per seed and step, the format, compile and correct rates, frac_mixed (groups whose samples
disagree: the only ones that train), the post-update KL (`optim/kl_pre_post_v1`) and the truncated share,
and checks the bar: in every seed the mean correct rate of the last `--window` steps is above the first
`--window` by at least `--min-gain`, and no step's kl_pre_post exceeds `--max-kl` a token. Exit 1 when a seed
misses it. Extra `key=value` arguments override the configuration (e.g. `training.learning_rate=1e-4`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

PROBLEMS = "[L1/19,L1/20,L1/21,L1/25]"


RUN_ID = "learns"


def base_overrides(seed: int, sft_steps: int, rl_steps: int, work: Path) -> list[str]:
    """The smoke run's policy, problems, sampling temperature, SFT and Adam (kernelbench_rl/commands/pipeline.py) with
    twice its group size, retrieval off, the correctness reward without the curriculum, RL's learning rate at half the
    smoke's; the rest is the configuration's defaults (the step-size budget, the tempered loss) unless overridden."""
    return [
        f"run_id={RUN_ID}", f"db_path={work / 'kb.duckdb'}", f"log_dir={work / 'logs'}",
        "policy.backend=local", "policy.base_model=local:tiny", "policy.device=cpu",
        f"training.seed={seed}", f"problems.ids={PROBLEMS}", "problems.levels=[1]",
        # 8 samples a problem (the smoke's 4 doubled): 32 a step, so a five-step mean of the correct rate has half the
        # variance, and more groups are mixed (the only ones that train)
        "sampling.group_size=8", "sampling.max_tokens=400", "sampling.temperature=0.3",
        f"sft.steps={sft_steps}", "sft.batch_size=2", "sft.max_examples=4", "sft.learning_rate=0.005",
        f"sft.checkpoint_every={max(sft_steps, 1)}",
        f"training.steps={rl_steps}", "training.batch_problems=4", f"training.checkpoint_every={max(rl_steps, 1)}",
        # The smoke's Adam; its learning rate halved (3e-4 let the step-size budget reach steps that moved the policy
        # 0.03 nats a token, after which the correct rate fell back: docs/training.md)
        "training.learning_rate=0.00015", "training.adam_beta2=0.999", "training.adam_eps=1e-12",
        "training.compute_post_kl=true", "curriculum.enabled=false", "rewards.preset=correctness",
        "eval.device=cpu", "eval.size=small", "rag.enabled=false",
    ]


def warm_start(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """The SFT warm start every seed starts RL from (in `work`)."""
    from kernelbench_rl.compose import build_run_parts
    from kernelbench_rl.config import load_config
    from kernelbench_rl.rag.corpus import ingest_docs, load_source
    from kernelbench_rl.store import Store
    from kernelbench_rl.training.sft import run_sft, sft_done

    config = load_config("default", base_overrides(0, args.sft_steps, args.rl_steps, work) + args.overrides)
    store = Store(config.db_path)
    if store.exists() and sft_done(store, RUN_ID, args.sft_steps):  # --work-dir kept from an earlier run
        losses = [r[0] for r in store.fetchall("SELECT loss FROM sft_steps WHERE run_id = ? ORDER BY step", [RUN_ID])]
        return {"sft_first_loss": losses[0], "sft_last_loss": losses[-1], "sft_s": 0.0, "reused": True}
    ingest_docs(store, load_source("solutions", None, None))
    start = time.perf_counter()
    sft = run_sft(build_run_parts(config, policy_beside=True)) if args.sft_steps > 0 else None
    return {"sft_first_loss": sft.first_loss if sft else None, "sft_last_loss": sft.last_loss if sft else None,
            "sft_s": round(time.perf_counter() - start, 1)}


def run_seed(seed: int, args: argparse.Namespace, warm: Path, work: Path) -> dict[str, Any]:
    from kernelbench_rl.compose import build_run_parts
    from kernelbench_rl.config import load_config
    from kernelbench_rl.store import Store
    from kernelbench_rl.training import run_training

    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(warm, work)  # the warm start's database and checkpoints (paths in it are relative to the run)
    config = load_config("default", base_overrides(seed, args.sft_steps, args.rl_steps, work) + args.overrides)
    store = Store(config.db_path)
    start = time.perf_counter()
    run_training(build_run_parts(config, policy_beside=True), progress=False)
    rl_s = time.perf_counter() - start
    rows = store.dicts("SELECT step, format_rate, compile_rate, correct_rate, truncated_rate, reward_mean, "
                       "metrics_json FROM train_steps WHERE run_id = ? ORDER BY step", [config.resolved_run_id()])
    steps = []
    for row in rows:
        metrics = json.loads(row.pop("metrics_json") or "{}")
        row.update({key: metrics.get(key) for key in (
            "by_group/frac_mixed", "by_group/frac_all_good", "by_group/frac_all_bad", "optim/kl_pre_post_v1",
            "optim/kl_sample_train_v1", "optim/grad_norm", "num_trained")})
        steps.append(row)
    return {"seed": seed, "rl_s": round(rl_s, 1), "steps": steps}


def judge(seed_result: dict[str, Any], window: int, min_gain: float, max_kl: float) -> dict[str, Any]:
    correct = [s["correct_rate"] or 0.0 for s in seed_result["steps"]]
    kls = [s["optim/kl_pre_post_v1"] for s in seed_result["steps"] if s["optim/kl_pre_post_v1"] is not None]
    first = statistics.fmean(correct[:window]) if correct else 0.0
    last = statistics.fmean(correct[-window:]) if correct else 0.0
    worst_kl = max(kls, default=0.0)
    return {"first_mean_correct": round(first, 4), "last_mean_correct": round(last, 4), "gain": round(last - first, 4),
            "max_kl_pre_post": round(worst_kl, 5),
            "passed": len(correct) >= 2 * window and last - first >= min_gain and worst_kl <= max_kl}


def plot(results: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(16, 3.6), sharex=True)
    for name, axis in zip(("format_rate", "compile_rate", "correct_rate", "by_group/frac_mixed"), axes, strict=True):
        for result in results:
            xs = [s["step"] for s in result["steps"]]
            axis.plot(xs, [s[name] if s[name] is not None else float("nan") for s in result["steps"]],
                      marker=".", label=f"seed {result['seed']}")
        axis.set_title(name.split("/")[-1])
        axis.set_xlabel("RL step")
        axis.set_ylim(-0.05, 1.05)
        axis.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="0,1,2", help="Comma-separated seeds (policy, sampling and problem order).")
    parser.add_argument("--sft-steps", type=int, default=140,
                        help="SFT warm-start steps (short on purpose: 140 leaves the correct rate near 0.2, 150 near 0.5).")
    parser.add_argument("--rl-steps", type=int, default=30, help="RL steps per seed.")
    parser.add_argument("--window", type=int, default=5, help="Steps averaged at each end for the bar.")
    parser.add_argument("--min-gain", type=float, default=0.15, help="The bar: last window's mean correct rate minus the first's.")
    parser.add_argument("--max-kl", type=float, default=0.02, help="The bar: no step's kl_pre_post_v1 above this (a token).")
    parser.add_argument("--out", type=Path, default=None, help="JSON file for the figures.")
    parser.add_argument("--png", type=Path, default=None, help="PNG plot of the rates and frac_mixed per step.")
    parser.add_argument("--work-dir", type=Path, default=None, help="Keep each seed's database and logs here.")
    parser.add_argument("--parallel", type=int, default=3,
                        help="Seeds run at once, each in its own process with its share of the cores (most of a step "
                             "is Python, so 3 seeds on 2 cores finish sooner together than one after another).")
    parser.add_argument("overrides", nargs="*", help="key=value configuration overrides")
    args = parser.parse_args(argv)
    try:
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        parser.exit(2, f"--seeds must be comma-separated integers, not {args.seeds!r}.\n")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    wall = time.perf_counter()
    results = []
    with tempfile.TemporaryDirectory(prefix="rl-learns-") as tmp:
        root = args.work_dir or Path(tmp)
        warm = warm_start(args, root / "warm")
        print(f"warm start: {args.sft_steps} SFT steps, loss {_f(warm['sft_first_loss'], 3)} -> "
              f"{_f(warm['sft_last_loss'], 3)} a completion token ({warm['sft_s']} s)", flush=True)
        for result in _seed_results(seeds, args, root):
            seed = result["seed"]
            result["bar"] = judge(result, args.window, args.min_gain, args.max_kl)
            results.append(result)
            bar = result["bar"]
            print(f"seed {seed}: correct {bar['first_mean_correct']:.3f} -> {bar['last_mean_correct']:.3f} "
                  f"(gain {bar['gain']:+.3f}), max kl_pre_post {bar['max_kl_pre_post']:.4f}, "
                  f"{'passed' if bar['passed'] else 'MISSED'} ({result['rl_s']} s)", flush=True)
            for s in result["steps"]:
                print(f"  {s['step']:3d}  format {s['format_rate']:.2f}  compile {s['compile_rate']:.2f}  "
                      f"correct {s['correct_rate']:.2f}  trunc {s['truncated_rate']:.2f}  "
                      f"mixed {_f(s['by_group/frac_mixed'])}  kl_post {_f(s['optim/kl_pre_post_v1'], 4)}  "
                      f"kl_st {_f(s['optim/kl_sample_train_v1'], 4)}  gnorm {_f(s['optim/grad_norm'], 1)}", flush=True)
    wall_s = time.perf_counter() - wall
    passed = all(r["bar"]["passed"] for r in results)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    report = {"date": time.strftime("%Y-%m-%d"), "commit": commit, "machine": platform.platform(),
              "cpus": os.cpu_count(), "command": " ".join([Path(sys.argv[0]).name, *(argv or sys.argv[1:])]),
              "sft_steps": args.sft_steps, "rl_steps": args.rl_steps, "overrides": args.overrides, "warm_start": warm,
              "bar": {"window": args.window, "min_gain": args.min_gain, "max_kl": args.max_kl},
              "wall_s": round(wall_s, 1), "passed": passed, "seeds": results}
    print(f"{'passed' if passed else 'MISSED'}: {sum(r['bar']['passed'] for r in results)} of {len(results)} seeds; "
          f"{wall_s:.0f} s", flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    if args.png:
        args.png.parent.mkdir(parents=True, exist_ok=True)
        plot(results, args.png, f"rl_learns: SFT {args.sft_steps} steps, then {args.rl_steps} RL steps "
                                f"({report['date']}, {commit})")
    return 0 if passed else 1


def _seed_results(seeds: list[int], args: argparse.Namespace, root: Path) -> list[dict[str, Any]]:
    """Each seed's RL from the warm start, `args.parallel` at a time (processes, each with its own torch threads)."""
    if args.parallel <= 1 or len(seeds) <= 1:
        return [run_seed(seed, args, root / "warm", root / f"seed{seed}") for seed in seeds]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    threads = max(1, (os.cpu_count() or 1) // args.parallel)
    with ProcessPoolExecutor(max_workers=args.parallel, mp_context=multiprocessing.get_context("spawn"),
                             initializer=_limit_threads, initargs=(threads,)) as pool:
        futures = [pool.submit(run_seed, seed, args, root / "warm", root / f"seed{seed}") for seed in seeds]
        return [future.result() for future in futures]


def _limit_threads(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)


def _f(value: Any, digits: int = 2) -> str:
    return "-" if value is None else f"{float(value):.{digits}f}"


if __name__ == "__main__":
    sys.exit(main())
